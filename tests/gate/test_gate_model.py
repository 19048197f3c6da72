"""Gate inputs: validation names the field and the value; from_dict reads both spellings."""

from __future__ import annotations

import math
from typing import Any

import pytest

from amv_calib.gate import CandidateAction, Gate, GateSettings, MemoryClaim, Premise, Verifier


def _claim(**kw: Any) -> MemoryClaim:
    base: dict[str, Any] = dict(id="c1", source_trust_score=0.8, model_confidence=0.9,
                                recency_hours=10.0, contradiction_flag=False)
    base.update(kw)
    return MemoryClaim(**base)


def _action(premises: tuple[Premise, ...] = (), **kw: Any) -> CandidateAction:
    base: dict[str, Any] = dict(action_id="a1", tool_name="transfer", impact_cost_theta=10.0,
                                abstention_cost_kappa=1.0, premises=premises)
    base.update(kw)
    return CandidateAction(**base)


def _verifier(**kw: Any) -> Verifier:
    base: dict[str, Any] = dict(id="v1", resolves_premise_ids=("p1",), execution_cost=0.1,
                                symmetric_reliability=0.9)
    base.update(kw)
    return Verifier(**base)


@pytest.mark.parametrize(
    ("build", "pattern"),
    [
        (lambda: _verifier(symmetric_reliability=0.5), r"symmetric_reliability=0\.5 .*\(0\.5, 1\]"),
        (lambda: _verifier(symmetric_reliability=1.01), r"symmetric_reliability=1\.01"),
        (lambda: _verifier(symmetric_reliability=0.2), r"symmetric_reliability=0\.2"),
        (lambda: _verifier(execution_cost=-0.5), r"execution_cost=-0\.5 .*>= 0"),
        (lambda: _verifier(execution_cost=math.inf), r"execution_cost=inf .*not finite"),
        (lambda: _verifier(resolves_premise_ids="p1"), r"resolves_premise_ids .*list of ids"),
        (lambda: _verifier(resolves_premise_ids=("p1", "p1")), r"repeats an id"),
        (lambda: _action(impact_cost_theta=0.0), r"impact_cost_theta=0\.0 .*> 0"),
        (lambda: _action(impact_cost_theta=-3), r"impact_cost_theta=-3\.0 .*> 0"),
        (lambda: _action(abstention_cost_kappa=0.0), r"abstention_cost_kappa=0\.0 .*> 0"),
        (lambda: _action(abstention_cost_kappa=math.nan), r"abstention_cost_kappa=nan"),
        (lambda: Premise(id="p1", calibrated_violation_probability=1.5),
         r"calibrated_violation_probability=1\.5 of premise 'p1' must lie in \[0, 1\]"),
        (lambda: Premise(id="p1", calibrated_violation_probability=-0.1),
         r"calibrated_violation_probability=-0\.1"),
        (lambda: Premise(id="p1", calibrated_violation_probability="0.3"),  # type: ignore[arg-type]
         r"calibrated_violation_probability='0\.3' .* not a number"),
        (lambda: Premise(id="p1", dependency_type="causal"),  # type: ignore[arg-type]
         r"dependency_type='causal'"),
        (lambda: _claim(source_trust_score=1.2), r"source_trust_score=1\.2 of claim 'c1'"),
        (lambda: _claim(model_confidence=-0.01), r"model_confidence=-0\.01"),
        (lambda: _claim(recency_hours=-1.0), r"recency_hours=-1\.0 .*>= 0"),
        (lambda: _claim(contradiction_flag="yes"), r"contradiction_flag='yes' .*boolean"),
        (lambda: _action((Premise(id="p1"), Premise(id="p1"))), r"premise id 'p1' .*repeated"),
        (lambda: Premise(id="p1", claim_id="other", claim=_claim()), r"claim_id='other'"),
        (lambda: Gate(epsilon_harm_bound=1.5), r"epsilon_harm_bound=1\.5"),
        (lambda: Gate(lambda_cost_scale=-1.0), r"lambda_cost_scale=-1\.0"),
        (lambda: Gate(planner="greedy"), r"planner='greedy'"),  # type: ignore[arg-type]
        (lambda: Gate(mode="ts"), r"mode='ts'"),  # type: ignore[arg-type]
        (lambda: Gate(max_verifications=-1), r"max_verifications=-1"),
    ],
    ids=[
        "r-at-half", "r-above-one", "r-below-half", "negative-cost", "infinite-cost",
        "resolves-a-string", "resolves-twice", "theta-zero", "theta-negative", "kappa-zero",
        "kappa-nan", "p-above-one", "p-negative", "p-string", "dependency-type", "trust",
        "confidence", "recency", "flag", "duplicate-premise", "claim-id-mismatch",
        "gate-epsilon", "gate-lambda", "gate-planner", "gate-mode", "gate-budget",
    ],
)
def test_invalid_input_names_field_and_value(build: Any, pattern: str) -> None:
    with pytest.raises(ValueError, match=pattern):
        build()


def test_gate_settings_are_read_only_and_checked_once() -> None:
    gate = Gate(lambda_cost_scale=2, harm_price=-0.0, planner="lookahead", mode="seed")
    assert gate.settings == GateSettings(lambda_cost_scale=2.0, mode="seed", planner="myopic")
    assert (gate.lambda_cost_scale, gate.harm_price, gate.planner) == (2.0, 0.0, "myopic")
    assert type(gate.lambda_cost_scale) is float and math.copysign(1.0, gate.harm_price) == 1.0
    with pytest.raises(AttributeError, match="read-only"):
        gate.epsilon_harm_bound = 0.5
    assert gate.epsilon_harm_bound == 0.05
    assert Gate.mode.__doc__ == '``"amv"`` or ``"seed"``.'
    with pytest.raises(ValueError, match=r"max_verifications=True must be an int >= 0"):
        GateSettings(max_verifications=True)


def test_verifier_naming_unknown_premise_is_refused_by_the_gate() -> None:
    action = _action((Premise(id="p1", calibrated_violation_probability=0.1),))
    bad = _verifier(id="vx", resolves_premise_ids=("p1", "p9"))
    for gate in (Gate(), Gate(planner="myopic"), Gate(mode="seed")):
        with pytest.raises(ValueError, match=r"verifier 'vx' names premise 'p9'"):
            gate.evaluate(action, [bad])
        with pytest.raises(ValueError, match=r"names premise 'p9'"):
            gate.run(action, [bad], lambda v, a: {"p1": True})
    one = _verifier(id="vy", resolves_premise_ids=("p9",))
    with pytest.raises(ValueError, match=r"verifier 'vy' names premise 'p9'"):
        Gate().evaluate(action, [one])
    # also when the gate would never look at verifiers: refusal, fail closed, no budget
    bare = _action((Premise(id="p1"),))
    for gate in (Gate(refusal="no"), Gate(), Gate(max_verifications=0)):
        with pytest.raises(ValueError, match="names premise 'p9'"):
            gate.evaluate(bare if gate.refusal is None else action, [one])


SEED_ACTION = {
    "actionId": "tx-1",
    "toolName": "bank_transfer",
    "arguments": {"amount": 100},
    "impactCostTheta": 120.0,
    "abstentionCostKappa": 4.0,
    "premises": [
        {
            "id": "p1", "claimId": "iban-42", "dependencyType": "direct",
            "parameterTarget": "iban", "calibratedViolationProbability": None,
            "claim": {"id": "iban-42", "statement": "IBAN is X", "timestamp": 1.7e9,
                      "sourceTrustScore": 0.8, "modelConfidence": 0.93, "recencyHours": 310.0,
                      "contradictionFlag": False},
        },
        {"id": "p2", "claimId": "c2", "dependencyType": "joint", "parameterTarget": "amount",
         "calibratedViolationProbability": 0.02},
    ],
}


def test_from_dict_camel_and_snake_agree() -> None:
    camel = CandidateAction.from_dict(SEED_ACTION)
    snake = CandidateAction.from_dict({
        "action_id": "tx-1", "tool_name": "bank_transfer", "arguments": {"amount": 100},
        "impact_cost_theta": 120.0, "abstention_cost_kappa": 4.0,
        "premises": [
            {"id": "p1", "claim_id": "iban-42", "dependency_type": "direct",
             "parameter_target": "iban",
             "claim": {"id": "iban-42", "statement": "IBAN is X", "timestamp": 1.7e9,
                       "source_trust_score": 0.8, "model_confidence": 0.93,
                       "recency_hours": 310.0, "contradiction_flag": False}},
            {"id": "p2", "claim_id": "c2", "dependency_type": "joint",
             "parameter_target": "amount", "calibrated_violation_probability": 0.02},
        ],
    })
    assert camel == snake
    assert camel.premises[0].claim is not None
    assert camel.premises[0].claim.recency_hours == 310.0
    assert camel.premises[0].calibrated_violation_probability is None
    v1 = Verifier.from_dict({"id": "bank", "resolvesPremiseIds": ["p1"], "executionCost": 0.2,
                             "symmetricReliability": 0.95})
    v2 = Verifier.from_dict({"id": "bank", "resolves_premise_ids": ["p1"],
                             "execution_cost": 0.2, "symmetric_reliability": 0.95})
    assert v1 == v2 and v1.resolves_premise_ids == ("p1",)


def test_from_dict_reads_episode_premises_with_flat_claim_features() -> None:
    pm = Premise.from_dict({"id": "p1", "claim_id": "c7", "recency_hours": 5.0,
                            "source_trust_score": 0.5, "model_confidence": 0.6,
                            "contradiction_flag": True, "violated": True, "p_true": 0.3})
    assert pm.claim is not None and pm.claim.id == "c7" and pm.claim.contradiction_flag
    assert pm.calibrated_violation_probability is None


@pytest.mark.parametrize(
    ("data", "pattern"),
    [
        ({**SEED_ACTION, "impactCost": 1.0}, r"unknown key 'impactCost'"),
        ({k: v for k, v in SEED_ACTION.items() if k != "premises"}, r"lacks 'premises'"),
        ({**SEED_ACTION, "impactCostTheta": 1.0, "impact_cost_theta": 2.0}, r"twice"),
        ({**SEED_ACTION, "premises": [{"claimId": "x"}]}, r"lacks 'id'"),
    ],
    ids=["unknown-key", "missing-key", "both-spellings", "premise-without-id"],
)
def test_from_dict_refuses_malformed_objects(data: dict[str, Any], pattern: str) -> None:
    with pytest.raises(ValueError, match=pattern):
        CandidateAction.from_dict(data)


def _offered() -> tuple[CandidateAction, list[Verifier]]:
    act = CandidateAction(action_id="a", tool_name="t", impact_cost_theta=100.0,
                          abstention_cost_kappa=5.0,
                          premises=(Premise(id="p0", calibrated_violation_probability=0.02),
                                    Premise(id="p1", calibrated_violation_probability=0.3)))
    return act, [Verifier(id="v", resolves_premise_ids=("p1",), execution_cost=0.01,
                          symmetric_reliability=0.95)]


@pytest.mark.parametrize("gate_kw", [
    {"planner": "myopic"}, {"planner": "lookahead"}, {"mode": "seed"},
    {"refusal": "artifact refused"}], ids=["myopic", "lookahead", "seed", "refused"])
@pytest.mark.parametrize("with_verifier", [True, False], ids=["offered", "none"])
def test_decisions_are_the_frozen_dataclass(gate_kw: dict[str, Any],
                                            with_verifier: bool) -> None:
    # The gate builds its decisions without the dataclass __init__ (engine: _decision); what
    # it hands out must be what Decision(...) builds: equal, same hash and repr, frozen,
    # pickled and copied whole.
    import copy
    import dataclasses
    import pickle

    from amv_calib.gate import Decision

    act, vs = _offered()
    d = Gate(**gate_kw).evaluate(act, vs if with_verifier else [])
    assert type(d) is Decision
    fields = {f.name: getattr(d, f.name) for f in dataclasses.fields(Decision)}
    built = Decision(**fields)
    assert d == built and hash(d) == hash(built) and repr(d) == repr(built)
    assert pickle.loads(pickle.dumps(d)) == d and copy.deepcopy(d) == d
    with pytest.raises(dataclasses.FrozenInstanceError):
        d.regime = "PROCEED"  # type: ignore[misc]
    assert dataclasses.replace(d, reason="x").reason == "x"


def test_model_objects_are_frozen_slotted_and_pickle() -> None:
    import dataclasses
    import pickle

    act, vs = _offered()
    for obj, field in ((act, "action_id"), (act.premises[0], "id"), (vs[0], "id")):
        assert not hasattr(obj, "__dict__")  # slots: the gate reads them per call
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(obj, field, "other")
        back = pickle.loads(pickle.dumps(obj))
        assert back == obj
    assert vs[0]._single == "p1" and pickle.loads(pickle.dumps(vs[0]))._single == "p1"
    two = dataclasses.replace(vs[0], resolves_premise_ids=("p0", "p1"))
    assert two._single is None and dataclasses.replace(two, resolves_premise_ids=["p0"])._single \
        == "p0"
    back_act = pickle.loads(pickle.dumps(act))
    assert back_act._index == {"p0": 0, "p1": 1} and back_act._explicit == (0.02, 0.3)
    assert Gate().evaluate(back_act, vs).to_dict() == Gate().evaluate(act, vs).to_dict()
    # replace() re-runs the checks
    with pytest.raises(ValueError, match="impact_cost_theta"):
        dataclasses.replace(act, impact_cost_theta=-1.0)
