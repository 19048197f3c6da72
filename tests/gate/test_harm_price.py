"""The harm price ``mu``: proceeding on a violated premise costs ``theta + mu`` when planning.

Checked against what it is defined to be (a gate with ``theta + mu`` in place of ``theta``,
bit for bit), against a closed form (one premise, one verifier: the PROCEED region shrinks as
``mu`` grows), and for what it must not change (``mu = 0``; the seed mode). The compiled
engine's equality with a priced scalar gate is in tests/gate/test_compiled.py; replay and
tuning in tests/tuning.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from amv_calib.gate import CandidateAction, Decision, Gate, Premise, Verifier, evaluate_batch

INF = math.inf


def action(ps: Sequence[float], theta: float, kappa: float = 5.0) -> CandidateAction:
    return CandidateAction(
        action_id="a", tool_name="t", impact_cost_theta=theta, abstention_cost_kappa=kappa,
        premises=tuple(Premise(id=f"p{i}", calibrated_violation_probability=p)
                       for i, p in enumerate(ps)))


def verifier(vid: str, premises: Sequence[int], cost: float, r: float) -> Verifier:
    return Verifier(id=vid, resolves_premise_ids=tuple(f"p{i}" for i in premises),
                    execution_cost=cost, symmetric_reliability=r)


def _bits(d: Decision) -> tuple[Any, ...]:
    """Every number of a decision by its bit pattern (the reason's wording aside)."""
    def b(x: float | None) -> str | None:
        return None if x is None else float(x).hex()

    return (d.regime, None if d.verifier is None else d.verifier.id, b(d.voi), b(d.v_stop),
            b(d.r_expected), b(d.h_harm), b(d.planner_value), tuple(map(b, d.vois)),
            d.outcomes, d.left_out, d.planner_states)


# -- the parameter ---------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [-1.0, -1e-300, math.nan, math.inf, "1", True, None])
def test_harm_price_must_be_a_finite_number_at_least_zero(bad: Any) -> None:
    with pytest.raises(ValueError, match="harm_price="):
        Gate(harm_price=bad)


def test_harm_price_property_and_repr() -> None:
    assert Gate().harm_price == 0.0
    gate = Gate(harm_price=2.5)
    assert gate.harm_price == 2.5 and "harm_price=2.5" in repr(gate)
    assert repr(Gate(harm_price=-0.0)) == repr(Gate())  # -0.0 is kept as 0.0


# -- what it is: theta + mu ------------------------------------------------------------------------


@st.composite
def cases(draw: Any) -> dict[str, Any]:
    m = draw(st.integers(1, 4))
    ps = [draw(st.one_of(st.sampled_from([0.0, 0.001, 0.04, 0.3]), st.floats(0.0, 1.0)))
          for _ in range(m)]
    vs = [verifier(f"v{j}", sorted(set(draw(st.lists(st.integers(0, m - 1), min_size=0,
                                                     max_size=m)))),
                   draw(st.sampled_from([0.0, 0.01, 0.3])),
                   draw(st.sampled_from([0.6, 0.9, 0.99, 1.0])))
          for j in range(draw(st.integers(0, 5)))]
    return {"ps": ps, "vs": vs, "theta": draw(st.floats(0.01, 1000.0)),
            "kappa": draw(st.floats(0.01, 100.0)),
            "mu": draw(st.one_of(st.sampled_from([0.0, 1e-9, 1.0, 1e6]), st.floats(0.0, 500.0))),
            "gate": draw(st.sampled_from([
                {}, {"planner": "myopic"}, {"reuse_verifiers": True, "max_verifications": 3},
                {"lambda_cost_scale": 0.2, "epsilon_harm_bound": 0.3,
                 "delta_loss_threshold": 2.0}]))}


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(c=cases())
def test_priced_gate_is_the_gate_at_theta_plus_mu(c: dict[str, Any]) -> None:
    # the definition, bit for bit: the harm price is added to theta once, before anything
    priced = Gate(harm_price=c["mu"], **c["gate"])
    plain = Gate(**c["gate"])
    theta_mu = c["theta"] + c["mu"]
    d = priced.evaluate(action(c["ps"], c["theta"], c["kappa"]), c["vs"])
    assert _bits(d) == _bits(plain.evaluate(action(c["ps"], theta_mu, c["kappa"]), c["vs"]))
    # r_expected is the priced expected loss (module docstring of _engine, "Harm price")
    q = 1.0
    for p in c["ps"]:
        q *= 1.0 - p
    assert d.r_expected == theta_mu * (1.0 - q)
    assert d.v_stop == (d.r_expected if priced.stopping_value(
        action(c["ps"], c["theta"], c["kappa"])).admissible else c["kappa"])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(c=cases())
def test_seed_mode_ignores_the_harm_price(c: dict[str, Any]) -> None:
    a = action(c["ps"], c["theta"], c["kappa"])
    got = Gate(mode="seed", harm_price=c["mu"]).evaluate(a, c["vs"])
    assert _bits(got) == _bits(Gate(mode="seed").evaluate(a, c["vs"]))
    assert got.reason == Gate(mode="seed").evaluate(a, c["vs"]).reason


def test_zero_harm_price_is_the_gate_without_one() -> None:
    rng = np.random.default_rng(11)
    for kw in ({}, {"planner": "myopic"}, {"reuse_verifiers": True}):
        for _ in range(300):
            m = int(rng.integers(1, 5))
            a = action(list(rng.random(m) ** 2), float(rng.uniform(0.5, 300.0)),
                       float(rng.uniform(0.5, 20.0)))
            vs = [verifier(f"v{j}", [int(rng.integers(0, m))], float(rng.exponential(0.1)),
                           float(rng.uniform(0.6, 1.0))) for j in range(int(rng.integers(0, 4)))]
            want = Gate(**kw).evaluate(a, vs)
            got = Gate(harm_price=0.0, **kw).evaluate(a, vs)
            assert _bits(got) == _bits(want) and got.reason == want.reason


def test_batch_prices_rows_as_the_scalar_gate() -> None:
    # the compiled engine adds mu to each row's theta (test_compiled.py checks it row by
    # row against the scalar gate); here against the definition
    rng = np.random.default_rng(5)
    n, m, nv = 300, 3, 2
    c = {"p": rng.random((n, m)) ** 3, "premise_mask": np.ones((n, m), dtype=bool),
         "theta": rng.uniform(0.5, 100.0, n), "kappa": rng.uniform(0.5, 10.0, n),
         "resolves": rng.random((n, nv, m)) < 0.5, "cost": rng.exponential(0.1, (n, nv)),
         "reliability": rng.uniform(0.6, 1.0, (n, nv))}
    for kw in ({}, {"planner": "myopic"}):
        got = evaluate_batch(Gate(harm_price=7.25, **kw), **c)
        want = evaluate_batch(Gate(**kw), **{**c, "theta": c["theta"] + 7.25})
        for name in ("regime", "verifier", "voi", "v_stop", "r_expected", "h_harm",
                     "admissible", "outcomes", "left_out", "planner_states"):
            np.testing.assert_array_equal(getattr(got, name), getattr(want, name))


def test_failing_closed_reports_the_priced_loss() -> None:
    d = Gate(harm_price=3.0, refusal="artifact refused").evaluate(action([0.1], 10.0), [])
    assert (d.regime, d.r_expected, d.h_harm) == ("ABSTAIN", 13.0, 1.0)
    bd = evaluate_batch(Gate(harm_price=3.0, refusal="x"), [[0.1]], [[True]], [10.0], [5.0],
                        np.zeros((1, 0, 1), dtype=bool), np.zeros((1, 0)), np.zeros((1, 0)))
    assert bd.r_expected[0] == 13.0


def test_priced_reason_says_so() -> None:
    d = Gate(harm_price=100.0).evaluate(action([0.05], 10.0), [verifier("v", [0], 100.0, 0.9)])
    assert d.regime == "ABSTAIN" and "(theta + harm_price) * P_any" in d.reason


# -- one premise, one verifier: the PROCEED region against a closed form --------------------------


def proceeds(p: float, r: float, c: float, lam: float, theta: float, mu: float, kappa: float,
             delta: float, eps: float) -> bool:
    """PROCEED for one premise and one verifier, worked by hand with ``t = theta + mu``.

    Admissible at ``p`` (``t p <= min(delta, kappa)``, ``p <= eps``) is needed. A
    confirmation leaves ``p+ < p``, admissible too. If the refutation's ``p-`` is admissible
    as well, ``E[V_stop] = t (Pc p+ + Pr p-) = t p`` (a martingale) and ``VOI = -lambda c``:
    PROCEED. Otherwise ``E[V_stop] = Pc t p+ + Pr kappa`` and, since ``Pc p+ = p (1 - r)``,
    ``VOI = t p r - Pr kappa - lambda c``: PROCEED while it is <= 0. Every condition is
    monotone in ``t``, so the region shrinks as ``mu`` grows.
    """
    t = theta + mu
    lim = min(delta, kappa)
    pc = (1 - p) * r + p * (1 - r)
    pr = 1 - pc
    p_minus = p * r / pr
    if not (t * p <= lim and p <= eps):
        return False
    if t * p_minus <= lim and p_minus <= eps:
        return True
    return t * p * r - pr * kappa - lam * c <= 0.0


def boundary(p: float, r: float, c: float, lam: float, theta: float, kappa: float,
             delta: float, eps: float) -> float:
    """``sup {mu >= 0 : PROCEED}`` from :func:`proceeds`' conditions solved for ``mu``
    (``-inf`` where even ``mu = 0`` does not PROCEED)."""
    lim = min(delta, kappa)
    pc = (1 - p) * r + p * (1 - r)
    pr = 1 - pc
    p_minus = p * r / pr
    if p > eps:
        return -INF
    admissible = lim / p
    refuted_ok = lim / p_minus if p_minus <= eps else -INF
    not_worth = (pr * kappa + lam * c) / (p * r)
    return min(admissible, max(refuted_ok, not_worth)) - theta


HAND = [
    # p, r, c, lambda, theta, kappa, delta, epsilon
    (0.1, 0.9, 0.2, 1.0, 2.0, 5.0, INF, 1.0),
    (0.02, 0.99, 0.01, 1.0, 5.0, 10.0, INF, 1.0),
    (0.3, 0.7, 0.0, 1.0, 1.0, 2.0, INF, 1.0),
    (0.01, 0.95, 0.05, 1.0, 20.0, 5.0, 2.0, 0.05),  # delta binds
    (0.04, 0.9, 0.01, 1.0, 10.0, 5.0, 10.0, 0.3),  # epsilon lets p- in for small mu
    (0.001, 0.95, 0.001, 0.5, 100.0, 50.0, 10.0, 0.05),
]


@pytest.mark.parametrize("case", HAND, ids=[f"p{c[0]}-r{c[1]}-th{c[4]}" for c in HAND])
@pytest.mark.parametrize("planner", ["myopic", "lookahead"])
def test_proceed_region_shrinks_as_the_harm_price_grows(case: tuple[float, ...],
                                                        planner: Any) -> None:
    p, r, c, lam, theta, kappa, delta, eps = case
    v = verifier("v", [0], c, r)
    mu_star = boundary(p, r, c, lam, theta, kappa, delta, eps)
    assert mu_star > 0.0  # each case PROCEEDs unpriced, so there is a region to shrink
    seen = []
    for mu in [0.0, *np.geomspace(1e-3, 1e4, 400)]:
        if abs(mu - mu_star) <= 1e-6 * max(1.0, mu_star):
            continue  # on the boundary the regime is a matter of rounding
        gate = Gate(harm_price=float(mu), lambda_cost_scale=lam, delta_loss_threshold=delta,
                    epsilon_harm_bound=eps, planner=planner)
        d = gate.evaluate(action([p], theta, kappa), [v])
        want = proceeds(p, r, c, lam, theta, float(mu), kappa, delta, eps)
        assert (d.regime == "PROCEED") == want, (mu, mu_star, d)
        assert want == (mu <= mu_star)
        seen.append(d.regime == "PROCEED")
    # PROCEED on an initial stretch of mu only, then never again
    assert seen[0] and not seen[-1] and seen == sorted(seen, reverse=True)


# -- artifact thresholds -------------------------------------------------------------------------


def test_thresholds_without_a_harm_price_mean_zero(repo_root: Any, tmp_path: Any) -> None:
    from amv_calib.artifacts import export_artifact
    from amv_calib.contract import check_thresholds, load_artifact

    # thresholds written before the harm price existed: they load, and price no harm
    shipped = load_artifact(repo_root / "models" / "amv-guard" / "v1")
    old = {k: v for k, v in shipped.manifest["gate"].items() if k != "harm_price"}
    assert "harm_price" not in check_thresholds(old)  # re-exports the same
    res = export_artifact(calibrator=shipped.calibrator, name="old", thresholds=old,
                          models_dir=tmp_path)
    assert "harm_price" not in load_artifact(res.path).manifest["gate"]
    assert Gate.from_artifact(res.path, strict=True).harm_price == 0.0
    assert Gate.from_artifact(res.path, strict=True, harm_price=4.0).harm_price == 4.0


@pytest.mark.parametrize("bad", [-1.0, math.nan, math.inf, True, "0"])
def test_thresholds_refuse_a_bad_harm_price(repo_root: Any, bad: Any) -> None:
    from amv_calib.contract import check_thresholds, load_artifact

    gate = dict(load_artifact(repo_root / "models" / "amv-guard" / "v1").manifest["gate"])
    assert check_thresholds({**gate, "harm_price": 2.5})["harm_price"] == 2.5
    with pytest.raises(ValueError, match="harm_price="):
        check_thresholds({**gate, "harm_price": bad})


def test_artifact_with_a_harm_price_gives_a_priced_gate(tmp_path: Any, repo_root: Any) -> None:
    from amv_calib.artifacts import export_artifact
    from amv_calib.contract import load_artifact

    v1 = repo_root / "models" / "amv-guard" / "v1"
    thresholds = {**load_artifact(v1).manifest["gate"], "harm_price": 12.5}
    res = export_artifact(calibrator=v1 / "calibrator.json", name="priced",
                          thresholds=thresholds, models_dir=tmp_path, include_joblib=False)
    assert load_artifact(res.path).thresholds["harm_price"] == 12.5
    gate = Gate.from_artifact(res.path, strict=True)
    assert gate.harm_price == 12.5
    a = action([0.01], 50.0)
    assert gate.evaluate(a, []).r_expected == (50.0 + 12.5) * (1.0 - (1.0 - 0.01))
