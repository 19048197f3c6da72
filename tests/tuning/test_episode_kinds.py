"""Episodes whose premises name a memory kind: read, kept, and evaluated by a kind-aware
calibrator as the gate evaluates them."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from kind_corpus import CASES, IDS, after

from amv_calib.calibration import KindPlattCalibrator
from amv_calib.contract import CLAIM_FEATURES
from amv_calib.datasets import synth_episodes, synth_kind_claims
from amv_calib.exceptions import DataContractError
from amv_calib.tuning._episodes import episode_set, read_episodes


@pytest.fixture(scope="module")
def kinded_episodes() -> list[dict[str, Any]]:
    """60 synthetic episodes, each premise given a kind in turn (the last none)."""
    eps = synth_episodes(60, seed=3)
    kinds = ["event", "fact", "preference", None]
    for i, ep in enumerate(eps):
        for j, pr in enumerate(ep["premises"]):
            kind = kinds[(i + j) % len(kinds)]
            if kind is not None:
                pr["memoryKind" if i % 2 else "memory_kind"] = kind
    return eps


def test_kinds_are_kept_and_reach_the_calibrator(kinded_episodes: list[dict[str, Any]]) -> None:
    es = episode_set(kinded_episodes)
    assert es.memory_kind is not None
    claims = synth_kind_claims(3000, seed=2)
    cal = KindPlattCalibrator().fit(claims[[*CLAIM_FEATURES, "memory_kind"]],
                                    claims["violated"]).to_portable()
    p = es.probabilities(cal)
    for i, ep in enumerate(kinded_episodes[:8]):
        for j, pr in enumerate(ep["premises"]):
            kind = pr.get("memory_kind", pr.get("memoryKind"))
            want = cal.predict_one({c: float(pr[c]) for c in CLAIM_FEATURES}, memory_kind=kind)
            assert p[i, j] == pytest.approx(want, rel=1e-12)
    assert es.subset([0, 2]).memory_kind.shape[0] == 2  # type: ignore[union-attr]


def test_no_kind_no_column() -> None:
    assert episode_set(synth_episodes(5, seed=3)).memory_kind is None


@pytest.mark.parametrize(("patch", "message"), [
    ({"memory_kind": "  "}, r"memory_kind='  ' is blank"),
    ({"memory_kind": 3}, r"memory_kind=3 is not a string"),
    ({"memory_kind": "a", "memoryKind": "b"}, r"memory_kind='a' and memoryKind='b' differ"),
], ids=["blank", "number", "disagree"])
def test_bad_kinds_are_refused_naming_row_and_field(patch: dict[str, Any], message: str
                                                    ) -> None:
    eps = copy.deepcopy(synth_episodes(3, seed=3))
    eps[1]["premises"][0].update(patch)
    with pytest.raises(DataContractError, match=r"episodes row 2: premises\[0\]\." + message):
        episode_set(eps)


@pytest.mark.parametrize(("fields", "verdict"), [c[1:] for c in CASES], ids=IDS)
def test_each_odd_kind_reads_as_the_contract_rule_says(fields: dict[str, Any],
                                                      verdict: tuple[str, Any],
                                                      tmp_path: Path) -> None:
    # through the episodes file (JSON text), as the gate's inputs arrive
    eps = copy.deepcopy(synth_episodes(2, seed=5))
    eps[1]["premises"][1].update(fields)
    path = tmp_path / "episodes.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in eps), encoding="utf-8")
    what, expected = verdict
    if what == "error":
        with pytest.raises(DataContractError,
                           match=after(r"episodes row 2: premises\[1\]\.", expected)):
            read_episodes(path)
        return
    kinds = read_episodes(path).memory_kind
    if what == "none":
        assert kinds is None  # no premise gives a kind: no column
    else:
        assert kinds is not None
        assert kinds[1, 1] == expected
        assert [k for k in kinds.reshape(-1).tolist() if k is not None] == [expected]


def test_without_kinds_probabilities_are_unchanged() -> None:
    es = episode_set(synth_episodes(30, seed=4))
    claims = synth_kind_claims(2000, seed=2)
    cal = KindPlattCalibrator().fit(claims[[*CLAIM_FEATURES, "memory_kind"]],
                                    claims["violated"]).to_portable()
    p = es.probabilities(cal)
    want = cal.predict(es.features[es.premise_mask])  # every premise evaluated as "other"
    np.testing.assert_array_equal(p[es.premise_mask], want)
