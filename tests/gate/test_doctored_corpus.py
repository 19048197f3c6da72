"""One verdict for one artifact: the doctored corpus through the Python and TypeScript loaders.

``tests/artifacts/doctored.py`` writes hand-edited copies of the shipped version (every field
of the manifest, the certificate, the tuning record, the calibrator and the signature mutated
in type, value, presence and binding). Each must get the same verdict from both loaders:
accepted, or refused with the same reason code. A case one loader accepts and the other
refuses fails the build, whichever way round: TypeScript accepting what Python refuses is the
gate failing open.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from repo_paths import load_module

from amv_calib.artifacts import keygen
from amv_calib.contract import load_artifact
from amv_calib.contract._artifact import REASON_CODES, RULES, gate_from_artifact
from amv_calib.exceptions import ArtifactError
from amv_calib.gate import Gate

HERE = Path(__file__).resolve().parent
TS = load_module(HERE / "ts_gate" / "ts_harness.py", "ts_harness")
DOCTORED = load_module(HERE.parent / "artifacts" / "doctored.py", "doctored")
KEYS_ENV = "AMV_CALIB_TRUSTED_KEYS"

# slow: builds the Node package and loads some 850 versions in each language; make test runs
# it, make test-fast does not
pytestmark = [pytest.mark.requires_node, pytest.mark.requires_npm, pytest.mark.slow]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[dict[str, Any]], Path]:
    root = tmp_path_factory.mktemp("doctored")
    private, public = keygen(root / "keys")
    return DOCTORED.build(root / "cases", private_key=private), public


def _python_verdict(ref: str, keys: list[Path] | None) -> str:
    try:
        load_artifact(ref, trusted_keys=keys)
    except ArtifactError as exc:
        return exc.code
    except Exception as exc:  # noqa: BLE001 - any other exception is a verdict that differs
        return f"crash {type(exc).__name__}: {exc}"
    return "accept"


@pytest.fixture(scope="module")
def no_env_keys() -> Iterator[None]:
    saved = os.environ.pop(KEYS_ENV, None)
    try:
        yield
    finally:
        if saved is not None:
            os.environ[KEYS_ENV] = saved


@pytest.fixture(scope="module")
def verdicts(corpus: tuple[list[dict[str, Any]], Path], no_env_keys: None
             ) -> dict[str, tuple[str, str, dict[str, Any]]]:
    """name -> (Python verdict, TypeScript verdict, the harness's answer)."""
    cases, public = corpus
    TS.built_dist()
    requests = [{"id": i, "kind": "load", "ref": c["ref"],
                 "trusted_keys": [str(public)] if c["signed"] else None,
                 "env": {KEYS_ENV: None}} for i, c in enumerate(cases)]
    answers = TS.run_harness(requests)  # one node process over the whole corpus
    out = {}
    for i, c in enumerate(cases):
        a = answers[i]
        ts = "accept" if a["refusal"] is None else a["code"]
        py = _python_verdict(c["ref"], [public] if c["signed"] else None)
        out[c["name"]] = (py, ts, a)
    return out


def test_corpus_has_every_kind_of_case(corpus: tuple[list[dict[str, Any]], Path],
                                       verdicts: dict[str, tuple[str, str, dict[str, Any]]]
                                       ) -> None:
    cases, _ = corpus
    assert len(cases) >= 200
    groups = Counter(c["name"].split(".")[0].split("-")[0] for c in cases)
    for group in ("manifest", "files", "folder", "json", "gate", "certificate", "tuning",
                  "calibrator", "signature", "review"):
        assert groups[group] >= 5, (group, groups)
    py = Counter(v[0] for v in verdicts.values())
    # the corpus tests rules, not only the hash: most refusal codes occur, and some accepts
    assert py["accept"] >= 20, py
    assert len(set(py) - {"accept"}) >= 15, py


def test_both_loaders_give_every_case_the_same_verdict(
        verdicts: dict[str, tuple[str, str, dict[str, Any]]]) -> None:
    differ = {name: (py, ts) for name, (py, ts, _) in verdicts.items() if py != ts}
    fail_open = sorted(n for n, (py, ts) in differ.items() if ts == "accept")
    shown = "\n".join(f"  {n}: python={py!r} typescript={ts!r}"
                      for n, (py, ts) in sorted(differ.items()))
    assert not differ, (f"{len(differ)} of {len(verdicts)} cases differ "
                        f"({len(fail_open)} accepted by TypeScript only: fail-open):\n{shown}")


def test_every_code_is_a_listed_reason_code(
        verdicts: dict[str, tuple[str, str, dict[str, Any]]]) -> None:
    codes = {v for py, ts, _ in verdicts.values() for v in (py, ts)} - {"accept"}
    assert codes <= REASON_CODES, codes - REASON_CODES


def test_review_edits_are_refused_with_their_code(
        corpus: tuple[list[dict[str, Any]], Path],
        verdicts: dict[str, tuple[str, str, dict[str, Any]]]) -> None:
    """The edits a review found the TypeScript gate PROCEEDing on, replayed."""
    cases, _ = corpus
    expected = {c["name"]: c["expect"] for c in cases if c["expect"] is not None}
    assert len(expected) >= 20
    for name, code in expected.items():
        py, ts, answer = verdicts[name]
        assert (py, ts) == (code, code), name
        assert answer["regime"] == "ABSTAIN", name
        assert answer["reason"].startswith(f"artifact refused: [{code}] "), answer["reason"]


def test_a_refused_case_gives_a_python_gate_that_abstains_with_the_code(
        corpus: tuple[list[dict[str, Any]], Path], no_env_keys: None) -> None:
    cases, _ = corpus
    ref = next(c["ref"] for c in cases if c["name"] == "review-chosen-float")
    gate = gate_from_artifact(Gate, ref)
    assert gate.refusal is not None
    assert gate.refusal.startswith("artifact refused: [certificate_binding] ")
    shipped = next(c["ref"] for c in cases if c["name"] == "shipped")
    assert gate_from_artifact(Gate, shipped).refusal is None


def test_the_typescript_build_reads_the_same_rules() -> None:
    """The rules are written once; the copy the build puts beside the TypeScript loader is
    that file, byte for byte."""
    dist = TS.built_dist()
    assert (dist / "artifact_rules.json").read_bytes() == TS.RULES.read_bytes()
    assert json.loads(TS.RULES.read_bytes()) == dict(RULES)


def test_corpus_is_the_same_every_time(tmp_path: Path) -> None:
    """Seeded by nothing but the shipped version: two builds give the same bytes."""
    a = DOCTORED.build(tmp_path / "a")
    b = DOCTORED.build(tmp_path / "b")
    assert [e["name"] for e in a] == [e["name"] for e in b]
    for ea, eb in zip(a, b, strict=True):
        fa, fb = Path(ea["ref"]), Path(eb["ref"])
        names = sorted(p.name for p in fa.iterdir())
        assert names == sorted(p.name for p in fb.iterdir()), ea["name"]
        for n in names:
            if not (fa / n).is_symlink():
                assert (fa / n).read_bytes() == (fb / n).read_bytes(), (ea["name"], n)


#: The memory-kind cases (doctored.py, ``kinds.*``) whose verdict is not "calibrator".
_KIND_VERDICTS = {"kinds.valid": "accept", "kinds.valid-term-kind": "accept",
                  "kinds.valid-only-other": "accept", "kinds.valid-code-point-order": "accept",
                  "kinds.item-64": "accept", "kinds.item-astral-64": "accept",
                  "kinds.valid-unhashed": "hash_mismatch", "kinds.intercept-big": "bad_number",
                  "kinds.term-kind-not-in-manifest": "calibrator_binding",
                  "kinds.term-kind-manifest-other": "calibrator_binding"}


def test_kind_fields_get_their_verdict(verdicts: dict[str, tuple[str, str, dict[str, Any]]]
                                       ) -> None:
    """Valid kind-aware calibrators load in both languages; each doctored kind field is
    refused by both as a calibrator that breaks the format (or the binding it breaks)."""
    kinds = {name: v for name, v in verdicts.items() if name.startswith("kinds.")}
    assert len(kinds) >= 30 and set(_KIND_VERDICTS) <= set(kinds)
    for name, (py, ts, _) in kinds.items():
        assert (py, ts) == (_KIND_VERDICTS.get(name, "calibrator"),) * 2, name
