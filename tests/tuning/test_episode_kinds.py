"""Episodes whose premises name a memory kind: read, kept, and evaluated by a kind-aware
calibrator as the gate evaluates them."""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import pytest

from amv_calib.calibration import KindPlattCalibrator
from amv_calib.contract import CLAIM_FEATURES
from amv_calib.datasets import synth_episodes, synth_kind_claims
from amv_calib.exceptions import DataContractError
from amv_calib.tuning._episodes import episode_set


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
    ({"memory_kind": "  "}, r"memory_kind='  ' must be a non-blank string"),
    ({"memory_kind": 3}, r"memory_kind=3 must be a non-blank string"),
    ({"memory_kind": "a", "memoryKind": "b"}, r"memory_kind='a' and memoryKind='b' differ"),
], ids=["blank", "number", "disagree"])
def test_bad_kinds_are_refused_naming_row_and_field(patch: dict[str, Any], message: str
                                                    ) -> None:
    eps = copy.deepcopy(synth_episodes(3, seed=3))
    eps[1]["premises"][0].update(patch)
    with pytest.raises(DataContractError, match=r"episodes row 2: premises\[0\]\." + message):
        episode_set(eps)


def test_without_kinds_probabilities_are_unchanged() -> None:
    es = episode_set(synth_episodes(30, seed=4))
    claims = synth_kind_claims(2000, seed=2)
    cal = KindPlattCalibrator().fit(claims[[*CLAIM_FEATURES, "memory_kind"]],
                                    claims["violated"]).to_portable()
    p = es.probabilities(cal)
    want = cal.predict(es.features[es.premise_mask])  # every premise evaluated as "other"
    np.testing.assert_array_equal(p[es.premise_mask], want)
