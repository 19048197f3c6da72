"""The work bound (hardening review, item 5): what is enumerated, what is left out, and that
a decision past the bound stays safe and small, in the scalar gate and per row of the batch.

The bound's rule is restated here independently (counting by ``k`` instead of sorting), the
upper bound of a left-out verifier's VOI is computed from the inputs, and the sizes go up to
64 premises and 64 verifiers resolving any subset. Time is checked once, for the attacks of
the review, in tests/gate/test_gate_threats.py; here the work counters the engines
report and tracemalloc's peak stand for it.
"""

from __future__ import annotations

import math
import tracemalloc
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from amv_calib.gate import (
    MAX_OUTCOMES,
    MAX_WORK,
    VOI_TOLERANCE,
    CandidateAction,
    Decision,
    Gate,
    Premise,
    Verifier,
    _compiled,
    evaluate_batch,
)
from amv_calib.gate._planner import MAX_HORIZON, Spec, enumerable, plan

#: tracemalloc's peak allowed for one decision (the acceptance bound of the review).
PEAK_BYTES = 200 * 1024 * 1024


def action(ps: Sequence[float], theta: float = 100.0, kappa: float = 5.0) -> CandidateAction:
    return CandidateAction(
        action_id="a", tool_name="t", impact_cost_theta=theta, abstention_cost_kappa=kappa,
        premises=tuple(Premise(id=f"p{i}", calibrated_violation_probability=p)
                       for i, p in enumerate(ps)))


def verifier(vid: str, premises: Sequence[int], cost: float = 0.0, r: float = 0.9) -> Verifier:
    return Verifier(id=vid, resolves_premise_ids=tuple(f"p{i}" for i in premises),
                    execution_cost=cost, symmetric_reliability=r)


def left_out_by_counting(ks: Sequence[int]) -> set[int]:
    """The rule of docs/gate.md, counted level by level: all verifiers over ``k`` premises
    are taken while ``2^k`` times their number fits what is left, else as many as fit, in
    the order given, and nothing after."""
    left, out = MAX_OUTCOMES, set()
    stopped = False
    for k in range(max(ks, default=0) + 1):
        at = [j for j, kj in enumerate(ks) if kj == k]
        if stopped:
            out.update(at)
            continue
        fit = left // 2**k
        out.update(at[fit:])
        left -= 2**k * min(fit, len(at))
        stopped = len(at) > fit
    return out


def upper_bound(d: Decision, v: Verifier, theta: float, kappa: float, lam: float) -> float:
    """``V_stop - lambda c - P_any * min(theta, kappa)``: no policy loses less than the
    clairvoyant, who proceeds exactly when nothing is violated."""
    return d.v_stop - lam * v.execution_cost - d.h_harm * min(theta, kappa)


# -- the rule -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("ks", "kept"), [
    ([12], [True]),  # exactly MAX_OUTCOMES
    ([13], [False]),
    ([64, 1], [False, True]),
    ([12, 0], [False, True]),  # the cheap one first: 1 + 4096 do not fit
    ([10] * 5, [True] * 4 + [False]),  # the cut falls between equal k, by position
    ([11, 1, 11], [True, True, False]),
    ([1] * 2049, [True] * 2048 + [False]),
    ([], []),
])
def test_enumerable_by_hand(ks: list[int], kept: list[bool]) -> None:
    assert enumerable(ks) == kept
    assert {j for j, k in enumerate(kept) if not k} == left_out_by_counting(ks)


@given(st.lists(st.integers(0, 64), max_size=80))
def test_enumerable_is_the_counted_rule(ks: list[int]) -> None:
    kept = enumerable(ks)
    assert {j for j, k in enumerate(kept) if not k} == left_out_by_counting(ks)
    assert sum(2**k for k, ok in zip(ks, kept, strict=True) if ok) <= MAX_OUTCOMES
    if sum(2**k for k in ks) <= MAX_OUTCOMES:
        assert all(kept)  # within the bound nothing is left out


def test_plan_refuses_verifiers_past_the_bound() -> None:
    specs = [Spec(tuple(range(13)), 0.9, 0.0, 0.0)]
    for planner in (plan, _compiled.plan):
        with pytest.raises(ValueError, match="MAX_OUTCOMES"):
            planner([0.01] * 13, 10.0, 5.0, 5.0, 0.05, specs, depth=1)


def test_receding_horizon_is_capped_for_verifiers_that_learn_nothing() -> None:
    # a verifier over no premise has one outcome: within RECEDING_WORK any horizon fits,
    # MAX_HORIZON stops it (the stack was as deep as max_verifications before)
    specs = [Spec((), 0.9, 0.0, 0.0)]
    got = plan([0.2], 10.0, 1.0, 1.0, 1.0, specs, depth=10**6, reuse=True)
    assert got.first is None and got.states == MAX_HORIZON
    assert _compiled.plan([0.2], 10.0, 1.0, 1.0, 1.0, specs, depth=10**6, reuse=True) == got


# -- hand-worked decisions past the bound ---------------------------------------------------------


def test_verifier_over_twelve_premises_is_enumerated_exactly() -> None:
    d = Gate(planner="myopic").evaluate(action([0.001] * 12), [verifier("v", range(12))])
    assert (d.outcomes, d.left_out, math.isnan(d.vois[0])) == (4096, (), False)


@pytest.mark.parametrize("planner", ["myopic", "lookahead"])
def test_admissible_action_with_a_left_out_verifier_that_could_matter_abstains(
        planner: Any) -> None:
    # 13 premises at p = 0.001: P_any = 0.012934..., R = 1.29 <= min(10, 5), H <= 0.05:
    # admissible. The verifier over all 13 (2^13 outcomes) is left out; its VOI is at most
    # V_stop - 0 - P_any * min(100, 5) = 0.0129... * 95 > 0, so it could be worth calling.
    act = action([0.001] * 13)
    v = verifier("v13", range(13))
    d = Gate(planner=planner).evaluate(act, [v])
    h = 1.0 - 0.999**13
    assert d.h_harm == pytest.approx(h, rel=1e-12)
    assert upper_bound(d, v, 100.0, 5.0, 1.0) == pytest.approx(h * 95.0, rel=1e-12)
    assert d.regime == "ABSTAIN" and d.verifier is None
    assert d.left_out == ("v13",) and d.outcomes == 0 and math.isnan(d.vois[0])
    assert "work bound" in d.reason and "v13" in d.reason and "13 premises" in d.reason
    assert "could be worth calling" in d.reason
    assert d.to_dict()["vois"] == [None] and d.to_dict()["left_out"] == ["v13"]
    assert math.isnan(Gate(planner=planner).one_step_voi(act, v))


def test_left_out_verifier_that_cannot_matter_leaves_the_decision_as_it_was() -> None:
    # theta <= kappa: an admissible action's V_stop = theta P_any is the clairvoyant's loss,
    # so the upper bound is V_stop - lambda c - P_any theta = -lambda c <= 0
    act = action([0.001] * 13, theta=4.0, kappa=5.0)
    d = Gate().evaluate(act, [verifier("v13", range(13), cost=0.1)])
    assert d.regime == "PROCEED" and d.left_out == ("v13",)
    assert "cannot change the decision" in d.reason


def test_enumerated_verifier_still_verifies_beside_a_left_out_one() -> None:
    # admissible (P_any = 0.04, R = 0.4); the left-out verifier's bound 0.4 - 0.04 * 5 > 0,
    # but v0 has a positive VOI of its own, and VERIFY is not what the bound guards
    act = action([0.04] + [0.0] * 15, theta=10.0, kappa=5.0)
    vs = [verifier("big", range(3, 16)), verifier("v0", [0], cost=0.01, r=0.99)]
    d = Gate(planner="myopic").evaluate(act, vs)
    assert d.regime == "VERIFY" and d.verifier is vs[1]
    assert d.left_out == ("big",) and d.outcomes == 2 and "work bound" in d.reason


def test_cheapest_to_value_go_first() -> None:
    # a verifier over 12 premises alone fills the bound; offered after 63 one-premise
    # verifiers it is the one left out, not they
    act = action([0.01] * 64, theta=1000.0, kappa=5.0)
    vs = [verifier(f"v{j}", [j], cost=0.01) for j in range(63)] + [verifier("big", range(12))]
    d = Gate().evaluate(act, vs)
    assert d.left_out == ("big",) and d.outcomes == 126
    assert 0 < d.planner_states <= MAX_WORK


def test_bounded_routine_within_the_bound_is_the_fast_path() -> None:
    # the routine past the bound, run on inputs within it, makes the same decision with the
    # same bits (the one-premise branch through _expect included)
    rng = np.random.default_rng(7)
    for planner in ("myopic", "lookahead"):
        gate = Gate(planner=planner, lambda_cost_scale=0.3, epsilon_harm_bound=0.2)
        for _ in range(200):
            m = int(rng.integers(1, 6))
            ps = list(rng.random(m) ** 3)
            vs = [verifier(f"v{j}", sorted(rng.choice(m, int(rng.integers(0, m + 1)),
                                                      replace=False)),
                           cost=float(rng.exponential(0.1)), r=float(rng.uniform(0.55, 1.0)))
                  for j in range(int(rng.integers(1, 6)))]
            act = action(ps, theta=float(rng.uniform(1, 200)), kappa=float(rng.uniform(1, 10)))
            fast = gate.evaluate(act, vs)
            slow = gate._decide(act, tuple(ps), vs, gate.max_verifications, None, limit=-1)
            assert fast.to_dict() == slow.to_dict()
            assert [x.hex() for x in fast.vois] == [x.hex() for x in slow.vois]


# -- any input up to 64 x 64: bounded work, bounded memory, never PROCEED unseen ------------------


@st.composite
def big_inputs(draw: Any) -> dict[str, Any]:
    """Up to 64 premises and 64 verifiers, each resolving any subset (its size from one
    premise to all of them); drawn through a seed so that the 4096 memberships stay cheap."""
    m = draw(st.integers(1, 64))
    n_ver = draw(st.integers(0, 64))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    style = draw(st.sampled_from(["one", "few", "many", "any", "mixed"]))
    sizes = {"one": lambda: 1, "few": lambda: int(rng.integers(0, 6)),
             "many": lambda: int(rng.integers(m // 2, m + 1)),
             "any": lambda: int(rng.integers(0, m + 1))}
    vs = []
    for j in range(n_ver):
        pick = sizes[style] if style != "mixed" else sizes[str(rng.choice(list(sizes)))]
        k = min(m, pick())
        vs.append(verifier(f"v{j}", sorted(int(x) for x in rng.choice(m, k, replace=False)),
                           cost=float(rng.choice([0.0, 0.001, 0.1])),
                           r=float(rng.choice([0.6, 0.9, 0.99, 1.0]))))
    scale = draw(st.sampled_from([1e-4, 1e-3, 0.01, 0.1, 1.0]))
    ps = [float(x) for x in rng.random(m) * scale]
    return {"action": action(ps, theta=draw(st.sampled_from([0.5, 4.0, 100.0, 5000.0])),
                             kappa=draw(st.sampled_from([0.5, 5.0, 50.0]))),
            "verifiers": vs}


_GATES: dict[str, dict[str, Any]] = {
    "lookahead": {},
    "myopic": {"planner": "myopic"},
    "reuse": {"reuse_verifiers": True, "lambda_cost_scale": 0.0},
    "priced": {"harm_price": 20.0, "epsilon_harm_bound": 0.3},
    "seed": {"mode": "seed"},
}


def _check_decision(d: Decision, gate: Gate, act: CandidateAction,
                    vs: Sequence[Verifier]) -> None:
    """The work counters within their bounds, the left-out verifiers those of the rule,
    and no PROCEED while a left-out verifier's upper bound is positive."""
    assert 0 <= d.outcomes <= MAX_OUTCOMES
    assert 0 <= d.planner_states <= MAX_WORK
    if gate.mode == "seed" or not vs or gate.max_verifications == 0:
        assert d.left_out == () and d.outcomes == 0
        return
    ks = [len(v.resolves_premise_ids) for v in vs]
    assert {int(i[1:]) for i in d.left_out} == left_out_by_counting(ks)
    assert d.outcomes == sum(2**k for j, k in enumerate(ks) if f"v{j}" not in d.left_out)
    if d.left_out:
        assert "work bound" in d.reason
    theta = act.impact_cost_theta + gate.harm_price
    kappa = act.abstention_cost_kappa
    tol = VOI_TOLERANCE * (theta + kappa)
    if d.regime == "PROCEED":
        for v in vs:
            if v.id in d.left_out:
                assert upper_bound(d, v, theta, kappa, gate.lambda_cost_scale) <= tol


@pytest.mark.parametrize("gate_kw", list(_GATES.values()), ids=list(_GATES))
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=big_inputs())
def test_any_input_up_to_64_by_64_is_bounded(gate_kw: dict[str, Any],
                                             case: dict[str, Any]) -> None:
    gate = Gate(**gate_kw)
    act, vs = case["action"], case["verifiers"]
    tracemalloc.start()
    try:
        d = gate.evaluate(act, vs)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < PEAK_BYTES
    _check_decision(d, gate, act, vs)
    # run: its first decision is evaluate's, and every later one is bounded too (the
    # verifiers confirm)
    trace = gate.run(act, vs, lambda v, a: dict.fromkeys(v.resolves_premise_ids, True))
    first = trace.steps[0].decision if trace.steps else trace.final
    assert first.to_dict() == d.to_dict()
    for later in [s.decision for s in trace.steps] + [trace.final]:
        assert later.outcomes <= MAX_OUTCOMES and later.planner_states <= MAX_WORK


def _batch_row(act: CandidateAction, vs: Sequence[Verifier]) -> dict[str, Any]:
    m, n_ver = len(act.premises), len(vs)
    res = np.zeros((1, n_ver, m), dtype=bool)
    for j, v in enumerate(vs):
        res[0, j, [act._index[i] for i in v.resolves_premise_ids]] = True
    return {"p": np.array([[pm.calibrated_violation_probability for pm in act.premises]]),
            "premise_mask": np.ones((1, m), dtype=bool),
            "theta": np.array([act.impact_cost_theta]),
            "kappa": np.array([act.abstention_cost_kappa]), "resolves": res,
            "cost": np.array([[v.execution_cost for v in vs]]).reshape(1, n_ver),
            "reliability": np.array([[v.symmetric_reliability for v in vs]]).reshape(1, n_ver)}


@pytest.mark.parametrize("gate_kw", list(_GATES.values()), ids=list(_GATES))
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=big_inputs())
def test_batch_rows_up_to_64_by_64_are_bounded(gate_kw: dict[str, Any],
                                               case: dict[str, Any]) -> None:
    gate = Gate(**gate_kw)
    row = _batch_row(case["action"], case["verifiers"])
    evaluate_batch(gate, **row)  # compiled and warm
    _compiled._CACHE.__dict__.clear()  # so that the peak counts the work arrays too
    tracemalloc.start()
    try:
        bd = evaluate_batch(gate, **row)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < PEAK_BYTES
    d = gate.evaluate(case["action"], case["verifiers"])
    assert (int(bd.outcomes[0]), int(bd.left_out[0]), int(bd.planner_states[0])) == (
        d.outcomes, len(d.left_out), d.planner_states)
    assert bd.outcomes[0] <= MAX_OUTCOMES and bd.planner_states[0] <= MAX_WORK
