"""The lookahead planner against brute force and against the myopic policy's exact loss."""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from amv_calib.gate import (
    MAX_EXACT_VERIFIERS,
    CandidateAction,
    Gate,
    Premise,
    Verifier,
    posterior_confirm,
    posterior_refute,
)
from amv_calib.gate._planner import Spec, plan


def action(ps: Sequence[float], theta: float, kappa: float) -> CandidateAction:
    return CandidateAction(
        action_id="a", tool_name="t", impact_cost_theta=theta, abstention_cost_kappa=kappa,
        premises=tuple(Premise(id=f"p{i}", calibrated_violation_probability=p)
                       for i, p in enumerate(ps)),
    )


def stop(ps: Sequence[float], theta: float, kappa: float, delta: float, eps: float) -> float:
    h = 1.0 - math.prod(1.0 - p for p in ps)
    return theta * h if (theta * h <= min(delta, kappa) and h <= eps) else kappa


def outcomes(ps: Sequence[float], idx: Sequence[int], r: float
             ) -> list[tuple[float, list[float]]]:
    out = []
    for signals in itertools.product((True, False), repeat=len(idx)):
        w, post = 1.0, list(ps)
        for i, ok in zip(idx, signals, strict=True):
            pc = (1 - ps[i]) * r + ps[i] * (1 - r)
            w *= pc if ok else 1 - pc
            post[i] = posterior_confirm(ps[i], r) if ok else posterior_refute(ps[i], r)
        if w > 0:
            out.append((w, post))
    return out


def brute_force(ps: Sequence[float], theta: float, kappa: float, delta: float, eps: float,
                lam: float, vs: Sequence[tuple[list[int], float, float]], depth: int,
                budget: float = math.inf) -> float:
    """The Bellman recursion written out, no memo, no pruning."""

    def value(ps: Sequence[float], rem: frozenset[int], d: int, b: float) -> float:
        best = stop(ps, theta, kappa, delta, eps)
        if d == 0:
            return best
        for j in rem:
            idx, r, c = vs[j]
            if c > b:
                continue
            q = lam * c + sum(w * value(post, rem - {j}, d - 1, b - c)
                              for w, post in outcomes(ps, idx, r))
            best = min(best, q)
        return best

    return value(ps, frozenset(range(len(vs))), depth, budget)


def myopic_loss(gate: Gate, ps: Sequence[float], theta: float, kappa: float,
                vs: Sequence[Verifier], depth: int) -> float:
    """Expected loss of the myopic rule, by exact enumeration of the verifiers' answers."""
    d = gate.evaluate(action(ps, theta, kappa), list(vs) if depth > 0 else [])
    if d.regime != "VERIFY":
        return d.v_stop
    v = d.verifier
    assert v is not None
    idx = [int(pid[1:]) for pid in v.resolves_premise_ids]
    rest = [u for u in vs if u is not v]
    return gate.lambda_cost_scale * v.execution_cost + sum(
        w * myopic_loss(gate, post, theta, kappa, rest, depth - 1)
        for w, post in outcomes(ps, sorted(idx), v.symmetric_reliability)
    )


def random_problem(rng: np.random.Generator, n_premises: int, n_verifiers: int
                   ) -> dict[str, Any]:
    ps = [float(x) for x in rng.beta(0.6, 6.0, n_premises)]
    if rng.uniform() < 0.2:
        ps[int(rng.integers(n_premises))] = float(rng.choice([0.0, 1.0]))
    vs = []
    for _ in range(n_verifiers):
        k = int(rng.integers(1, min(2, n_premises) + 1))
        idx = sorted(int(i) for i in rng.permutation(n_premises)[:k])
        r = 1.0 if rng.uniform() < 0.15 else float(rng.uniform(0.6, 1.0))
        vs.append((idx, r, float(rng.exponential(0.3))))
    return {
        "ps": ps, "vs": vs,
        "theta": float(np.exp(rng.uniform(np.log(1.0), np.log(300.0)))),
        "kappa": float(np.exp(rng.uniform(np.log(0.5), np.log(30.0)))),
        "delta": float(np.exp(rng.uniform(np.log(1.0), np.log(50.0)))),
        "eps": float(rng.uniform(0.02, 0.4)),
        "lam": float(rng.uniform(0.2, 2.0)),
    }


@functools.cache
def problems() -> list[dict[str, Any]]:
    rng = np.random.default_rng(20261202)
    return [random_problem(rng, int(rng.integers(1, 5)), int(rng.integers(1, 5)))
            for _ in range(150)]


def gate_for(pb: dict[str, Any], planner: Any, depth: int = 8) -> Gate:
    return Gate(lambda_cost_scale=pb["lam"], delta_loss_threshold=pb["delta"],
                epsilon_harm_bound=pb["eps"], planner=planner, max_verifications=depth)


def verifiers_for(pb: dict[str, Any]) -> list[Verifier]:
    return [Verifier(id=f"v{j}", resolves_premise_ids=tuple(f"p{i}" for i in idx),
                     execution_cost=c, symmetric_reliability=r)
            for j, (idx, r, c) in enumerate(pb["vs"])]


def test_design_myopic_failure_becomes_verify() -> None:
    # DESIGN section 2: three premises at p = 0.04, epsilon = 0.05, one verifier each
    act = action([0.04, 0.04, 0.04], theta=10.0, kappa=5.0)
    vs = [Verifier(id=f"v{i}", resolves_premise_ids=(f"p{i}",), execution_cost=0.1,
                   symmetric_reliability=0.95) for i in range(3)]
    myopic = Gate(planner="myopic").evaluate(act, vs)
    assert myopic.regime == "ABSTAIN"
    assert all(v == pytest.approx(-0.1) for v in myopic.vois)  # every one-step VOI = -lambda c
    assert Gate(mode="seed").evaluate(act, vs).regime == "ABSTAIN"
    d = Gate().evaluate(act, vs)
    assert d.regime == "VERIFY" and d.verifier is vs[0]
    assert d.planner_value is not None and d.planner_value < d.v_stop == 5.0
    assert d.voi == pytest.approx(d.v_stop - d.planner_value)
    bf = brute_force([0.04] * 3, 10.0, 5.0, 10.0, 0.05, 1.0,
                     [([i], 0.95, 0.1) for i in range(3)], 8)
    assert d.planner_value == pytest.approx(bf, rel=1e-12)


def test_plan_value_equals_brute_force() -> None:
    for pb in problems():
        vs = verifiers_for(pb)
        for depth in (1, 2, 8):
            d = gate_for(pb, "lookahead", depth).evaluate(
                action(pb["ps"], pb["theta"], pb["kappa"]), vs)
            want = brute_force(pb["ps"], pb["theta"], pb["kappa"], pb["delta"], pb["eps"],
                               pb["lam"], pb["vs"], depth)
            got = d.planner_value
            assert got is not None
            assert got == pytest.approx(want, rel=1e-9, abs=1e-12 * pb["kappa"]), (pb, depth)
            assert (d.regime == "VERIFY") == (d.v_stop - want > 1e-9 * pb["kappa"]) or \
                abs(d.v_stop - want) < 1e-9 * pb["kappa"]


def test_plan_never_loses_more_than_the_myopic_rule() -> None:
    """DP value <= the myopic policy's expected loss (exact enumeration), case by case."""
    strictly_better = 0
    for pb in problems():
        vs = verifiers_for(pb)
        look = gate_for(pb, "lookahead").evaluate(action(pb["ps"], pb["theta"], pb["kappa"]), vs)
        assert look.planner_value is not None
        mine = myopic_loss(gate_for(pb, "myopic"), pb["ps"], pb["theta"], pb["kappa"], vs, 8)
        assert look.planner_value <= mine + 1e-12 * pb["kappa"], pb
        strictly_better += look.planner_value < mine - 1e-9
    assert strictly_better > 0  # the comparison has teeth


def test_first_step_of_the_plan_is_optimal() -> None:
    for pb in problems()[:60]:
        vs = verifiers_for(pb)
        d = gate_for(pb, "lookahead").evaluate(action(pb["ps"], pb["theta"], pb["kappa"]), vs)
        if d.regime != "VERIFY":
            continue
        assert d.verifier is not None
        j = vs.index(d.verifier)
        idx, r, c = pb["vs"][j]
        rest = [x for t, x in enumerate(pb["vs"]) if t != j]
        q = pb["lam"] * c + sum(
            w * brute_force(post, pb["theta"], pb["kappa"], pb["delta"], pb["eps"], pb["lam"],
                            rest, 7)
            for w, post in outcomes(pb["ps"], idx, r))
        assert q == pytest.approx(d.planner_value, rel=1e-9, abs=1e-12)


def test_beam_beyond_the_exact_limit() -> None:
    rng = np.random.default_rng(5)
    ps = [0.04] * 6
    specs = [Spec((i % 6,), float(rng.uniform(0.8, 0.99)), float(rng.uniform(0.05, 0.2)),
                  0.1) for i in range(MAX_EXACT_VERIFIERS + 4)]
    pl = plan(ps, 10.0, 5.0, 5.0, 0.05, specs, depth=8)
    assert not pl.exact and pl.first is not None
    assert (1 - math.prod(1 - p for p in ps)) * 5.0 <= pl.value < 5.0
    small = plan(ps, 10.0, 5.0, 5.0, 0.05, specs[:6], depth=8)
    assert small.exact
    assert pl.value <= small.value + 1e-12  # the beam kept the best verifiers
    # a wide verifier set (3 premises each) exceeds the work bound even with few verifiers
    wide = [Spec((0, 1, 2), 0.9, 0.1, 0.1), Spec((3, 4, 5), 0.9, 0.1, 0.1)] * 3
    wp = plan(ps, 10.0, 5.0, 5.0, 0.05, wide, depth=8)
    assert not wp.exact and wp.value <= 5.0
    # and the gate handles many verifiers end to end
    act = action(ps, 10.0, 5.0)
    vs = [Verifier(id=f"v{j}", resolves_premise_ids=(f"p{j % 6}",), execution_cost=0.1,
                   symmetric_reliability=0.95) for j in range(12)]
    d = Gate().evaluate(act, vs)
    assert d.regime == "VERIFY" and d.planner_value is not None and d.planner_value < 5.0


def test_lookahead_with_one_step_left_is_myopic() -> None:
    for pb in problems()[:80]:
        vs = verifiers_for(pb)
        act = action(pb["ps"], pb["theta"], pb["kappa"])
        one = gate_for(pb, "lookahead", depth=1).evaluate(act, vs)
        my = gate_for(pb, "myopic").evaluate(act, vs)
        assert one.planner_value == pytest.approx(my.v_stop - max(0.0, max(my.vois)),
                                                  rel=1e-12, abs=1e-12)
        if one.regime != "VERIFY" or my.regime != "VERIFY":
            assert one.regime == my.regime


def test_budgeted_plans_equal_brute_force() -> None:
    for n, pb in enumerate(problems()[:80]):
        specs = [Spec(tuple(idx), r, pb["lam"] * c, c) for idx, r, c in pb["vs"]]
        lim = min(pb["delta"], pb["kappa"])
        budget = None if n % 3 == 0 else float(sum(c for _, _, c in pb["vs"]) * 0.6)
        tol = 1e-12 * pb["kappa"]
        pl = plan(pb["ps"], pb["theta"], pb["kappa"], lim, pb["eps"], specs, depth=3,
                  budget=budget, tol=tol)
        want = brute_force(pb["ps"], pb["theta"], pb["kappa"], pb["delta"], pb["eps"],
                           pb["lam"], pb["vs"], 3,
                           math.inf if budget is None else budget)
        assert pl.exact and pl.value == pytest.approx(want, rel=1e-9, abs=tol)
        v_stop = stop(pb["ps"], pb["theta"], pb["kappa"], pb["delta"], pb["eps"])
        if v_stop - want > 1e-9 * pb["kappa"]:  # a clear gain: the first call is affordable
            assert pl.first is not None
            assert budget is None or pb["vs"][pl.first][2] <= budget
