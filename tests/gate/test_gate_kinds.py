"""Memory kinds at the Python gate: the premise's field, the probability, the decision record."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import pytest
from kinded import kinded_calibrator

from amv_calib.contract import normalize_decision, read_decision_log, seed_prior_calibrator
from amv_calib.gate import CandidateAction, Gate, MemoryClaim, Premise

FEATURES = {"recencyHours": 400.0, "sourceTrustScore": 0.5, "modelConfidence": 0.75,
            "contradictionFlag": False}


def _premise(pid: str = "p1", **extra: Any) -> Premise:
    return Premise.from_dict({"id": pid, **FEATURES, **extra})


def _action(*premises: Premise) -> CandidateAction:
    return CandidateAction(action_id="a", tool_name="t", impact_cost_theta=50.0,
                           abstention_cost_kappa=2.0, premises=premises)


@pytest.mark.parametrize(("data", "kind"), [
    ({"memory_kind": "event"}, "event"),
    ({"memoryKind": "event"}, "event"),
    ({"memory_kind": "event", "memoryKind": "event"}, "event"),
    ({"memory_kind": None}, None),
    ({"memory_kind": None, "memoryKind": "event"}, "event"),
    ({}, None),
], ids=["snake", "camel", "both-agree", "null", "null-beside-a-kind", "absent"])
def test_premise_reads_either_spelling(data: dict[str, Any], kind: str | None) -> None:
    assert _premise(**data).memory_kind == kind


@pytest.mark.parametrize(("data", "message"), [
    ({"memory_kind": "event", "memoryKind": "fact"},
     "premise 'p1': memory_kind='event' and memoryKind='fact' differ (give one)"),
    ({"memory_kind": 3}, "premise 'p1': memory_kind=3 is not a string (a memory kind is a "
                         "name such as 'preference')"),
    ({"memoryKind": ["event"]}, "premise 'p1': memoryKind=['event'] is not a string (a memory "
                                "kind is a name such as 'preference')"),
    ({"memoryKind": "event "}, "premise 'p1': memoryKind='event ' begins or ends with "
                               "whitespace"),
], ids=["disagree", "number", "list", "padded"])
def test_premise_refuses_a_bad_kind(data: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        _premise(**data)


@pytest.mark.parametrize(("kind", "message"), [
    (3, "memory_kind=3 is not a string"),
    ("  ", "memory_kind='  ' is blank"),
    ("k" * 65, "has 65 characters, more than 64"),
], ids=["number", "blank", "too-long"])
def test_a_premise_built_directly_checks_its_kind(kind: Any, message: str) -> None:
    with pytest.raises(ValueError, match=f"^premise 'p1': .*{re.escape(message)}"):
        Premise(id="p1", calibrated_violation_probability=0.1, memory_kind=kind)


def test_probability_by_hand_for_each_kind() -> None:
    cal = kinded_calibrator()
    gate = Gate(calibrator=cal)
    conf = 0.75
    shared = (-0.85 - 1.42 * (math.log(conf) - math.log(1 - conf)) + 2.15 * (400.0 / 720.0)
              - 1.80 * 0.5)
    by_kind = {"event": 0.3 + 1.7 * (400.0 / 720.0),
               "fact": -0.4 + 0.6 * math.log1p(400.0 / 2160.0),
               "preference": -0.2 - 0.9 * (400.0 / 720.0), "other": 0.0}
    for kind, extra in by_kind.items():
        (p,) = gate.probabilities(_action(_premise(memory_kind=kind)))
        assert p == pytest.approx(1.0 / (1.0 + math.exp(-(shared + extra))), rel=1e-13)
    other = gate.probabilities(_action(_premise(memory_kind="other")))
    assert gate.probabilities(_action(_premise(memory_kind="opinion"))) == other
    assert gate.probabilities(_action(_premise())) == other


def test_a_calibrator_without_kinds_ignores_the_kind() -> None:
    gate = Gate(calibrator=seed_prior_calibrator())
    assert (gate.probabilities(_action(_premise(memory_kind="event")))
            == gate.probabilities(_action(_premise())))


def _records(gate_cal: Any, *premises: Premise) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    Gate(calibrator=gate_cal, decision_log=out.append).evaluate(_action(*premises))
    return [dict(p) for p in out[0]["premises"]]


def test_the_record_names_the_kind_used() -> None:
    claim = MemoryClaim(id="c4", source_trust_score=0.5, model_confidence=0.75,
                        recency_hours=10.0, contradiction_flag=False)
    recs = _records(kinded_calibrator(),
                    _premise("p1", memory_kind="event"), _premise("p2", memoryKind="opinion"),
                    _premise("p3"),
                    Premise(id="p4", claim=claim, memory_kind="fact",
                            calibrated_violation_probability=0.1))
    assert [(r.get("memory_kind"), r.get("memory_kind_evaluated_as")) for r in recs] == [
        ("event", "event"),    # in the vocabulary
        ("opinion", "other"),  # outside it: said
        (None, "other"),       # absent
        ("fact", None),        # a given probability: the calibrator was not used
    ]
    assert "memory_kind" not in recs[2]


def test_records_without_kinds_are_unchanged() -> None:
    (plain,) = _records(seed_prior_calibrator(), _premise())
    assert list(plain) == ["id", "claim_id", "recency_hours", "source_trust_score",
                           "model_confidence", "contradiction_flag", "p"]
    (kinded,) = _records(seed_prior_calibrator(), _premise(memory_kind="event"))
    assert {k: v for k, v in kinded.items() if k != "memory_kind"} == plain
    assert kinded["memory_kind"] == "event"


def test_a_refused_gate_records_no_evaluated_kind() -> None:
    out: list[dict[str, Any]] = []
    Gate(calibrator=kinded_calibrator(), refusal="refused", decision_log=out.append).evaluate(
        _action(_premise(memory_kind="event")))
    (rec,) = out[0]["premises"]
    assert rec["memory_kind"] == "event" and "memory_kind_evaluated_as" not in rec


def test_the_log_reads_the_kind_back(tmp_path: Path) -> None:
    log = tmp_path / "d.jsonl"
    gate = Gate(calibrator=kinded_calibrator(), decision_log=log)
    gate.evaluate(_action(_premise(memory_kind="preference"), _premise("p2")))
    (rec,) = read_decision_log(log)
    assert [(p.get("memory_kind"), p["memory_kind_evaluated_as"]) for p in rec["premises"]] \
        == [("preference", "preference"), (None, "other")]
    # the seed's camelCase, on the premise or in its claim, reads as the canonical name
    seed = normalize_decision(json.loads(json.dumps({
        "actionId": "a", "premises": [
            {"premiseId": "p1", "memoryKind": "event"},
            {"premiseId": "p2", "claim": {"id": "c", "memoryKind": "fact"}}]})))
    assert [p["memory_kind"] for p in seed["premises"]] == ["event", "fact"]
