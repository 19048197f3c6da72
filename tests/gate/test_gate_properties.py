"""Property-based checks of the gate (hypothesis)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from amv_calib.gate import (
    REGIME_CODES,
    CandidateAction,
    Gate,
    Premise,
    Verifier,
    posterior_confirm,
    posterior_refute,
    update_posteriors,
)

PROFILE = settings(max_examples=150, deadline=None,
                   suppress_health_check=[HealthCheck.too_slow])

prob = st.floats(0.0, 1.0, allow_nan=False)
inner_prob = st.floats(1e-6, 1 - 1e-6, allow_nan=False)
rel = st.one_of(st.just(1.0), st.floats(0.5, 1.0, exclude_min=True, allow_nan=False))
cost = st.one_of(st.just(0.0), st.floats(0.0, 5.0, allow_nan=False))
positive = st.floats(0.01, 1000.0, allow_nan=False)
lam = st.floats(0.0, 3.0, allow_nan=False)


def action(ps: list[float], theta: float, kappa: float) -> CandidateAction:
    return CandidateAction(
        action_id="a", tool_name="t", impact_cost_theta=theta, abstention_cost_kappa=kappa,
        premises=tuple(Premise(id=f"p{i}", calibrated_violation_probability=p)
                       for i, p in enumerate(ps)),
    )


@st.composite
def problems(draw: st.DrawFn) -> tuple[list[float], list[Verifier], float, float, Gate]:
    m = draw(st.integers(1, 4))
    ps = draw(st.lists(prob, min_size=m, max_size=m))
    n = draw(st.integers(1, 3))
    vs = []
    for j in range(n):
        idx = draw(st.lists(st.integers(0, m - 1), min_size=1, max_size=m, unique=True))
        vs.append(Verifier(id=f"v{j}", resolves_premise_ids=tuple(f"p{i}" for i in idx),
                           execution_cost=draw(cost), symmetric_reliability=draw(rel)))
    gate = Gate(lambda_cost_scale=draw(lam), delta_loss_threshold=draw(positive),
                epsilon_harm_bound=draw(prob), planner=draw(st.sampled_from(["lookahead",
                                                                            "myopic"])))
    return ps, vs, draw(positive), draw(positive), gate


@PROFILE
@given(problems())
def test_voi_never_exceeds_perfect_information_minus_cost(
        pb: tuple[list[float], list[Verifier], float, float, Gate]) -> None:
    """VOI <= VPI - lambda c, with VPI = V_stop - P_any min(theta, kappa).

    ``P_any min(theta, kappa)`` is the clairvoyant's loss (told the truth, it executes or
    abstains, whichever is cheaper, only when a premise is violated). It bounds every
    policy from below: ``V_stop(b) >= min(theta P_any(b), kappa) >= P_any(b) min(theta,
    kappa)`` and ``P_any`` is a martingale under verification. The planner's value obeys
    the same bound.
    """
    ps, vs, theta, kappa, gate = pb
    act = action(ps, theta, kappa)
    sv = gate.stopping_value(act)
    vpi = sv.v_stop - sv.h_harm * min(theta, kappa)
    tol = 1e-9 * kappa
    for v in vs:
        voi = gate.one_step_voi(act, v, sv.v_stop)
        assert math.isfinite(voi)
        assert voi <= vpi - gate.lambda_cost_scale * v.execution_cost + tol
    d = gate.evaluate(act, vs)
    if d.planner_value is not None:
        assert sv.h_harm * min(theta, kappa) - tol <= d.planner_value <= sv.v_stop + tol


@PROFILE
@given(st.lists(inner_prob, min_size=1, max_size=3), rel, cost, positive, positive,
       st.data())
def test_perfect_verifier_is_worth_more_when_unscreened(
        ps: list[float], r: float, c: float, theta: float, kappa: float,
        data: st.DataObject) -> None:
    """Without screening (delta >= kappa, epsilon = 1) V_stop = min(theta P_any, kappa) is
    concave in the belief, so by Blackwell a verifier with r = 1 is worth at least as much
    as the same verifier with r < 1: VOI(r) <= VPI_v - lambda c."""
    idx = data.draw(st.lists(st.integers(0, len(ps) - 1), min_size=1, unique=True))
    gate = Gate(delta_loss_threshold=math.inf, epsilon_harm_bound=1.0, planner="myopic")
    act = action(ps, theta, kappa)
    ids = tuple(f"p{i}" for i in idx)
    noisy = Verifier(id="n", resolves_premise_ids=ids, execution_cost=c,
                     symmetric_reliability=r)
    perfect = Verifier(id="x", resolves_premise_ids=ids, execution_cost=c,
                       symmetric_reliability=1.0)
    v_stop = gate.stopping_value(act).v_stop
    assert (gate.one_step_voi(act, noisy, v_stop)
            <= gate.one_step_voi(act, perfect, v_stop) + 1e-9 * kappa)


def test_the_harm_screen_breaks_blackwell_monotonicity() -> None:
    """With epsilon binding, a perfect verifier can be worth less than a noisy one: a
    perfect refutation forces ABSTAIN (H = 1 > epsilon), a noisy one may leave the action
    admissible. So the inequality above is only claimed without screening."""
    gate = Gate(delta_loss_threshold=100.0, epsilon_harm_bound=0.05, planner="myopic")
    act = action([0.01], theta=1.0, kappa=10.0)
    v_stop = gate.stopping_value(act).v_stop
    noisy = Verifier(id="n", resolves_premise_ids=("p0",), execution_cost=0.0,
                     symmetric_reliability=0.6)
    perfect = Verifier(id="x", resolves_premise_ids=("p0",), execution_cost=0.0,
                       symmetric_reliability=1.0)
    assert gate.one_step_voi(act, noisy, v_stop) == pytest.approx(0.0, abs=1e-15)
    assert gate.one_step_voi(act, perfect, v_stop) == pytest.approx(0.01 - 0.1)


@PROFILE
@given(inner_prob, rel, cost, lam, positive, positive, prob,
       st.sampled_from(["myopic", "lookahead"]))
def test_regime_is_monotone_in_theta(p: float, r: float, c: float, lam_: float,
                                     kappa: float, delta: float, eps: float,
                                     planner: str) -> None:
    """Tested for ONE premise and ONE verifier, any delta, epsilon, c, r, lambda, both
    planners (they coincide with one verifier): as theta grows the regime never steps back
    (PROCEED, then VERIFY, then ABSTAIN; a regime may be empty)."""
    gate = Gate(lambda_cost_scale=lam_, delta_loss_threshold=delta, epsilon_harm_bound=eps,
                planner=planner)  # type: ignore[arg-type]
    v = Verifier(id="v", resolves_premise_ids=("p0",), execution_cost=c,
                 symmetric_reliability=r)
    codes = [REGIME_CODES[gate.evaluate(action([p], float(t), kappa), [v]).regime]
             for t in np.geomspace(1e-4, 1e7, 400)]
    assert codes == sorted(codes), codes


@PROFILE
@given(prob, rel)
def test_posteriors_stay_in_the_unit_interval(p: float, r: float) -> None:
    for post in (posterior_confirm(p, r), posterior_refute(p, r)):
        assert 0.0 <= post <= 1.0 and not math.isnan(post)
    assert posterior_confirm(p, r) <= p + 1e-15 <= posterior_refute(p, r) + 2e-15


@PROFILE
@given(problems(), st.lists(st.booleans(), min_size=24, max_size=24))
def test_runs_keep_posteriors_in_the_unit_interval(
        pb: tuple[list[float], list[Verifier], float, float, Gate],
        answers: list[bool]) -> None:
    ps, vs, theta, kappa, gate = pb
    it = iter(answers)

    def verify(v: Verifier, a: CandidateAction) -> dict[str, bool]:
        return {pid: next(it) for pid in v.resolves_premise_ids}

    for g in (gate, Gate(mode="seed", delta_loss_threshold=gate.delta_loss_threshold,
                         epsilon_harm_bound=gate.epsilon_harm_bound)):
        it = iter(answers)
        trace = g.run(action(ps, theta, kappa), vs, verify)
        assert trace.verifications <= len(vs)
        for step in trace.steps:
            assert all(0.0 <= x <= 1.0 for x in step.posteriors_after)
        assert trace.final.regime in ("PROCEED", "ABSTAIN")
        assert math.isfinite(trace.final.v_stop)
    probs = {f"p{i}": p for i, p in enumerate(ps)}
    out = update_posteriors(probs, vs[0], {pid: False for pid in vs[0].resolves_premise_ids})
    assert all(0.0 <= x <= 1.0 for x in out.values())
