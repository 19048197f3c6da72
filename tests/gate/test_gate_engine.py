"""The gate against hand-worked numbers and closed forms (DESIGN section 2)."""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from amv_calib.contract._features import seed_prior_calibrator
from amv_calib.gate import (
    CandidateAction,
    Gate,
    MemoryClaim,
    Premise,
    Verifier,
    posterior_confirm,
    posterior_refute,
    seed_calibrate,
    update_posteriors,
)

INF = math.inf


def action(ps: Sequence[float | None], theta: float = 10.0, kappa: float = 5.0,
           claims: Sequence[MemoryClaim | None] | None = None) -> CandidateAction:
    prem = []
    for i, p in enumerate(ps):
        claim = None if claims is None else claims[i]
        prem.append(Premise(id=f"p{i}", calibrated_violation_probability=p, claim=claim))
    return CandidateAction(action_id="a", tool_name="transfer", impact_cost_theta=theta,
                           abstention_cost_kappa=kappa, premises=tuple(prem))


def verifier(vid: str, resolves: Sequence[str], cost: float = 0.1, r: float = 0.9) -> Verifier:
    return Verifier(id=vid, resolves_premise_ids=tuple(resolves), execution_cost=cost,
                    symmetric_reliability=r)


# -- independent reference computations --------------------------------------------------


def ref_stop(ps: Sequence[float], theta: float, kappa: float, delta: float, eps: float) -> float:
    h = 1.0 - float(np.prod([1.0 - p for p in ps]))
    return theta * h if (theta * h <= min(delta, kappa) and h <= eps) else kappa


def ref_voi(ps: Sequence[float], resolves: Sequence[int], r: float, c: float, theta: float,
            kappa: float, delta: float, eps: float, lam: float = 1.0) -> float:
    """Posterior-space enumeration over the 2^k joint signals (no shortcut)."""
    e = 0.0
    for signals in itertools.product((True, False), repeat=len(resolves)):
        w = 1.0
        post = list(ps)
        for i, ok in zip(resolves, signals, strict=True):
            pc = (1 - ps[i]) * r + ps[i] * (1 - r)
            w *= pc if ok else 1 - pc
            if w == 0:
                break
            post[i] = ps[i] * (1 - r) / pc if ok else ps[i] * r / (1 - pc)
        if w > 0:
            e += w * ref_stop(post, theta, kappa, delta, eps)
    return ref_stop(ps, theta, kappa, delta, eps) - e - lam * c


# -- stopping value, posteriors, VOI ------------------------------------------------------------


def test_stopping_value_by_hand() -> None:
    gate = Gate(delta_loss_threshold=10.0, epsilon_harm_bound=0.5)
    sv = gate.stopping_value(action([0.1, 0.2], theta=10.0, kappa=5.0))
    assert sv.h_harm == pytest.approx(0.28)  # 1 - 0.9 * 0.8
    assert sv.r_expected == pytest.approx(2.8)
    assert sv.admissible and sv.v_stop == pytest.approx(2.8)
    # harm bound binds: H = 0.28 > 0.25 -> V_stop = kappa
    sv = Gate(epsilon_harm_bound=0.25).stopping_value(action([0.1, 0.2]))
    assert not sv.admissible and sv.v_stop == 5.0
    # loss bound binds through delta: R = 2.8 > delta = 2
    sv = Gate(delta_loss_threshold=2.0, epsilon_harm_bound=1.0).stopping_value(action([0.1, 0.2]))
    assert not sv.admissible and sv.v_stop == 5.0


def test_posteriors_by_hand() -> None:
    assert posterior_confirm(0.2, 0.9) == pytest.approx(0.02 / 0.74)
    assert posterior_refute(0.2, 0.9) == pytest.approx(0.18 / 0.26)
    assert posterior_confirm(0.3, 1.0) == 0.0 and posterior_refute(0.3, 1.0) == 1.0
    # events of probability 0 under the model: the perfect verifier is believed, never NaN
    assert posterior_confirm(1.0, 1.0) == 0.0 and posterior_refute(0.0, 1.0) == 1.0
    assert posterior_confirm(0.0, 0.7) == 0.0 and posterior_refute(1.0, 0.7) == 1.0


def test_multi_premise_verifier_updates_every_premise() -> None:
    v = verifier("v", ["p0", "p2"], r=0.9)
    probs = {"p0": 0.2, "p1": 0.5, "p2": 0.1}
    out = update_posteriors(probs, v, {"p0": True, "p2": False})
    assert out == {"p0": posterior_confirm(0.2, 0.9), "p1": 0.5,
                   "p2": posterior_refute(0.1, 0.9)}
    seed = update_posteriors(probs, v, {"p0": True, "p2": False}, mode="seed")
    assert seed == {"p0": pytest.approx(0.02 / 0.74), "p1": 0.5, "p2": 0.1}
    assert update_posteriors(probs, v, True, mode="seed")["p2"] == 0.1
    with pytest.raises(ValueError, match="mapping premise id -> bool"):
        update_posteriors(probs, v, True)
    with pytest.raises(ValueError, match="name premise 'p1', which it does not resolve"):
        update_posteriors(probs, v, {"p1": True})
    with pytest.raises(ValueError, match=r"must be a boolean"):
        update_posteriors(probs, v, {"p0": "yes"})


CASES = [
    # ps, resolves, r, c, theta, kappa, delta, eps
    ([0.1, 0.1], [0, 1], 0.9, 0.05, 100.0, 5.0, 100.0, 0.05),
    ([0.04, 0.04, 0.04], [0, 1, 2], 0.95, 0.1, 10.0, 5.0, 10.0, 0.05),
    ([0.3, 0.02, 0.2, 0.05], [1, 3], 0.8, 0.0, 20.0, 3.0, 2.0, 0.5),
    ([0.0, 1.0], [0, 1], 1.0, 0.2, 10.0, 5.0, 10.0, 0.05),
    ([0.0, 0.5], [0], 1.0, 0.2, 10.0, 5.0, 10.0, 0.6),
    ([1.0, 0.1], [0, 1], 1.0, 0.0, 10.0, 5.0, 10.0, 0.6),
    ([0.5], [0], 1.0, 0.0, 4.0, 5.0, 10.0, 1.0),
]


@pytest.mark.parametrize("case", CASES, ids=[f"case{i}" for i in range(len(CASES))])
def test_one_step_voi_matches_posterior_enumeration(case: tuple[Any, ...]) -> None:
    ps, resolves, r, c, theta, kappa, delta, eps = case
    gate = Gate(delta_loss_threshold=delta, epsilon_harm_bound=eps, planner="myopic")
    act = action(ps, theta, kappa)
    v = verifier("v", [f"p{i}" for i in resolves], cost=c, r=r)
    sv = gate.stopping_value(act)
    voi = gate.one_step_voi(act, v, sv.v_stop)
    assert math.isfinite(voi)
    assert voi == pytest.approx(ref_voi(ps, resolves, r, c, theta, kappa, delta, eps),
                                abs=1e-12)
    d = gate.evaluate(act, [v])
    assert d.vois == (pytest.approx(voi, abs=1e-15),)
    assert all(math.isfinite(x) for x in (d.v_stop, d.r_expected, d.h_harm))


def test_seed_mode_updates_only_the_first_premise() -> None:
    # the verifier lists p1 first, but the seed takes the first *action* premise it resolves
    ps, theta, kappa = [0.1, 0.3], 50.0, 5.0
    act = action(ps, theta, kappa)
    v = verifier("v", ["p1", "p0"], cost=0.05, r=0.9)
    seed = Gate(mode="seed", epsilon_harm_bound=0.1)
    amv = Gate(planner="myopic", epsilon_harm_bound=0.1)
    v_seed = seed.one_step_voi(act, v, seed.stopping_value(act).v_stop)
    assert v_seed == pytest.approx(ref_voi(ps, [0], 0.9, 0.05, theta, kappa, 10.0, 0.1))
    v_amv = amv.one_step_voi(act, v, amv.stopping_value(act).v_stop)
    assert v_amv == pytest.approx(ref_voi(ps, [0, 1], 0.9, 0.05, theta, kappa, 10.0, 0.1))
    # updating p0 alone can never bring P_any under 0.1; updating both can
    assert v_seed == pytest.approx(-0.05) and v_amv > 0.5
    assert seed.evaluate(act, [v]).regime == "ABSTAIN"
    assert amv.evaluate(act, [v]).regime == "VERIFY"


def test_seed_calibration_is_the_seed_prior() -> None:
    rng = np.random.default_rng(3)
    cal = seed_prior_calibrator()
    for _ in range(300):
        h, t, c = rng.exponential(300.0), rng.uniform(), rng.uniform()
        flag = bool(rng.uniform() < 0.3)
        got = seed_calibrate(h, t, c, flag)
        assert 0.001 <= got <= 0.999
        want = cal.predict_one({"recency_hours": h, "source_trust_score": t,
                                "model_confidence": c, "contradiction_flag": float(flag)})
        assert got == pytest.approx(want, rel=1e-12, abs=1e-15)


# -- where p comes from: explicit, calibrator, seed prior, or nowhere (fail closed) --------------

CLAIM = MemoryClaim(id="c1", source_trust_score=0.7, model_confidence=0.8, recency_hours=400.0,
                    contradiction_flag=False)


def test_probabilities_from_claims() -> None:
    act = action([None, 0.05], claims=[CLAIM, None])
    cal = seed_prior_calibrator()
    got = Gate(calibrator=cal).probabilities(act)
    assert got == (cal.predict_one(CLAIM.features()), 0.05)
    seed = Gate(mode="seed").probabilities(act)
    assert seed == (seed_calibrate(400.0, 0.7, 0.8, False), 0.05)


def test_fail_closed_without_calibrator() -> None:
    act = action([None, 0.001], theta=1.0, kappa=5.0, claims=[CLAIM, None])
    v = verifier("v", ["p0"])
    for gate in (Gate(), Gate(planner="myopic")):
        d = gate.evaluate(act, [v])
        assert d.regime == "ABSTAIN" and d.verifier is None
        assert "failing closed" in d.reason and "'p0'" in d.reason and "no calibrator" in d.reason
        trace = gate.run(act, [v], lambda *_: pytest.fail("must not verify"))
        assert trace.final.regime == "ABSTAIN" and not trace.steps
    # a premise with neither probability nor claim fails closed in the seed mode too
    bare = action([None])
    d = Gate(mode="seed").evaluate(bare, [])
    assert d.regime == "ABSTAIN" and "no claim" in d.reason


def test_refusal_abstains_on_everything() -> None:
    gate = Gate(refusal="artifact refused: sha256 mismatch")
    d = gate.evaluate(action([0.0]), [verifier("v", ["p0"])])
    assert (d.regime, d.reason) == ("ABSTAIN", "artifact refused: sha256 mismatch")
    assert gate.run(action([0.0]), [], lambda *_: True).final.regime == "ABSTAIN"


def test_from_artifact_fails_closed_on_a_missing_artifact(tmp_path: Any) -> None:
    from amv_calib import ArtifactError

    gate = Gate.from_artifact(tmp_path / "nope" / "v1")
    d = gate.evaluate(action([0.0]), [])
    assert d.regime == "ABSTAIN" and d.reason.startswith("artifact refused")
    with pytest.raises(ArtifactError):
        Gate.from_artifact(tmp_path / "nope" / "v1", strict=True)
    import amv_calib.gate as g

    assert callable(g.load_artifact) and g.LoadedArtifact is not None


# -- Proposition 1 -------------------------------------------------------------------------------


def prop1_thresholds(p: float, r: float, c: float, lam: float, kappa: float
                     ) -> tuple[float, float]:
    """Closed-form regime thresholds for one premise and one verifier.

    With delta and epsilon not binding, ``V_stop(x) = min(theta x, kappa)`` and, writing
    ``Pc = (1-p) r + p (1-r)``, ``Pr = 1 - Pc``, ``Pc p+ = p (1-r)``, ``Pr p- = p r``,
    ``VOI(theta) = min(theta p, kappa) - Pc min(theta p+, kappa) - Pr min(theta p-, kappa)
    - lambda c`` is piecewise linear in theta with breakpoints ``kappa/p- < kappa/p <
    kappa/p+``:

    * ``theta <= kappa/p-``: ``VOI = -lambda c`` (martingale: ``Pc p+ + Pr p- = p``);
    * ``kappa/p- < theta <= kappa/p``: ``VOI = theta p r - Pr kappa - lambda c``, rising;
    * ``kappa/p < theta <= kappa/p+``: ``VOI = Pc kappa - theta p (1-r) - lambda c``, falling;
    * beyond: ``VOI = -lambda c``.

    The peak, at ``theta = kappa/p``, is ``kappa (1-p)(2r-1) - lambda c``. If it is <= 0
    the gate never verifies: PROCEED while ``theta p <= kappa``, ABSTAIN beyond, so
    ``theta_1 = theta_2 = kappa/p``. Otherwise VOI > 0 exactly on ``(theta_1, theta_2)``
    with ``theta_1 = (Pr kappa + lambda c) / (p r)`` and ``theta_2 = (Pc kappa - lambda c) /
    (p (1-r))``: PROCEED below ``theta_1`` (admissible there since ``theta_1 <= kappa/p``),
    ABSTAIN above ``theta_2`` (inadmissible there since ``theta_2 >= kappa/p``). For r < 1
    ``theta_2`` is finite, so ABSTAIN is non-empty: a confirmed premise keeps ``p+ > 0``.
    For r = 1, ``p+ = 0`` and the falling piece is flat at ``(1-p) kappa - lambda c > 0``:
    ``theta_2 = inf``, no ABSTAIN regime.
    """
    pc = (1 - p) * r + p * (1 - r)
    pr = 1 - pc
    peak = kappa * (1 - p) * (2 * r - 1) - lam * c
    if peak <= 0:
        return kappa / p, kappa / p
    theta1 = (pr * kappa + lam * c) / (p * r)
    theta2 = INF if r == 1.0 else (pc * kappa - lam * c) / (p * (1 - r))
    return theta1, theta2


def prop1_regime(theta: float, t1: float, t2: float) -> str:
    if theta <= t1:
        return "PROCEED"
    return "VERIFY" if theta < t2 else "ABSTAIN"


PROP1 = [
    # p, r, c, lambda, kappa
    (0.1, 0.9, 0.2, 1.0, 5.0),
    (0.02, 0.99, 0.01, 1.0, 10.0),
    (0.3, 0.7, 0.0, 1.0, 2.0),
    (0.5, 0.6, 0.05, 2.0, 1.0),
    (0.1, 1.0, 0.3, 1.0, 5.0),
    (0.4, 1.0, 0.0, 1.0, 1.0),
    (0.1, 0.9, 10.0, 1.0, 5.0),  # verification too dear: theta_1 = theta_2
    (0.001, 0.95, 0.001, 0.5, 50.0),
]


@pytest.mark.parametrize("params", PROP1, ids=[f"p{p}-r{r}-c{c}" for p, r, c, _, _ in PROP1])
@pytest.mark.parametrize("planner", ["myopic", "lookahead"])
def test_proposition_1_regimes_follow_the_closed_form(params: tuple[float, ...],
                                                      planner: Any) -> None:
    p, r, c, lam, kappa = params
    t1, t2 = prop1_thresholds(p, r, c, lam, kappa)
    gate = Gate(lambda_cost_scale=lam, delta_loss_threshold=INF, epsilon_harm_bound=1.0,
                planner=planner)
    v = verifier("v", ["p0"], cost=c, r=r)
    seen = set()
    for theta in np.geomspace(1e-3 * kappa / p, 1e4 * kappa / p, 600):
        if any(math.isfinite(t) and abs(theta - t) <= 1e-6 * t for t in (t1, t2, kappa / p)):
            continue  # on a threshold the regime is a matter of rounding
        d = gate.evaluate(action([p], theta=float(theta), kappa=kappa), [v])
        want = prop1_regime(theta, t1, t2)
        assert d.regime == want, (theta, t1, t2, d)
        seen.add(d.regime)
    if t1 < t2:
        assert "VERIFY" in seen
    if r < 1.0 or t1 == t2:
        assert "ABSTAIN" in seen  # non-empty ABSTAIN regime
    else:
        assert math.isinf(t2) and "ABSTAIN" not in seen  # r = 1, verification worth it


# -- sequential stopping -------------------------------------------------------------------


def test_run_verifies_until_it_can_proceed() -> None:
    act = action([0.04, 0.04, 0.04], theta=10.0, kappa=5.0)
    vs = [verifier(f"v{i}", [f"p{i}"], cost=0.1, r=0.95) for i in range(3)]
    calls: list[str] = []

    def verify(v: Verifier, a: CandidateAction) -> dict[str, bool]:
        calls.append(v.id)
        return {pid: True for pid in v.resolves_premise_ids}

    trace = Gate().run(act, vs, verify)
    assert trace.final.regime == "PROCEED"
    assert [s.verifier.id for s in trace.steps] == calls and len(set(calls)) == len(calls)
    assert trace.total_cost == pytest.approx(0.1 * len(calls))
    assert trace.steps[-1].cost_spent == pytest.approx(trace.total_cost)
    for s in trace.steps:
        (pid,) = s.verifier.resolves_premise_ids
        i = int(pid[1:])
        assert s.posteriors_after[i] == posterior_confirm(s.posteriors_before[i], 0.95)
    assert trace.posteriors == trace.steps[-1].posteriors_after
    assert json.loads(json.dumps(trace.to_dict()))["final"]["regime"] == "PROCEED"
    # the myopic rule abstains at once here (DESIGN section 2)
    assert Gate(planner="myopic").run(act, vs, verify).final.regime == "ABSTAIN"


def test_run_respects_budgets_and_reuse() -> None:
    # p = 0.3, r = 0.8: one confirmation leaves p = 0.097 > epsilon, two leave 0.026
    act = action([0.3], theta=10.0, kappa=5.0)
    v = verifier("v", ["p0"], cost=0.5, r=0.8)
    yes = lambda *_: True  # noqa: E731
    once = Gate(epsilon_harm_bound=0.05, max_verifications=5)
    t = once.run(act, [v], yes)
    assert t.verifications == 0 and t.final.regime == "ABSTAIN"
    reuse = Gate(epsilon_harm_bound=0.05, max_verifications=5, reuse_verifiers=True)
    t = reuse.run(act, [v], yes)
    assert t.verifications == 2 and t.final.regime == "PROCEED"
    assert all(s.verifier is v for s in t.steps)
    assert t.posteriors[0] == pytest.approx(posterior_confirm(posterior_confirm(0.3, 0.8), 0.8))
    # the plan knows a second call is needed and unaffordable, so it does not start
    assert reuse.run(act, [v], yes, budget=0.9).verifications == 0
    assert reuse.run(act, [v], yes, budget=1.0).verifications == 2
    capped = Gate(epsilon_harm_bound=0.05, max_verifications=1, reuse_verifiers=True)
    assert capped.run(act, [v], yes).verifications == 0
    assert Gate(max_verifications=0).run(act, [v], yes).verifications == 0
    with pytest.raises(ValueError, match="budget=-1.0"):
        once.run(act, [v], yes, budget=-1.0)
    with pytest.raises(ValueError, match="must be a mapping"):
        Gate().run(action([0.3], theta=10.0), [verifier("v", ["p0"], r=0.99)],
                   lambda *_: "ok")  # type: ignore[arg-type,return-value]


def test_run_in_seed_mode_accepts_a_bare_bool() -> None:
    act = action([0.5, 0.2], theta=10.0, kappa=5.0)
    v = verifier("v", ["p1", "p0"], cost=0.01, r=0.9)
    t = Gate(mode="seed", epsilon_harm_bound=0.5).run(act, [v], lambda *_: True)
    assert t.steps, t.final
    step = t.steps[0]
    assert step.signals == {"p0": True}  # the seed's target: first premise in action order
    assert step.posteriors_after[1] == 0.2
    assert step.posteriors_after[0] == pytest.approx(0.05 / 0.5)


# -- decision log ----------------------------------------------------------------------------------


def test_decision_log_records(tmp_path: Any) -> None:
    records: list[dict[str, Any]] = []
    gate = Gate(decision_log=records.append, artifact_name="amv-guard", artifact_version="v3",
                calibrator=seed_prior_calibrator())
    act = action([None, 0.04], claims=[CLAIM, None])
    v = verifier("v0", ["p0"])
    d = gate.evaluate(act, [v])
    rec = records[-1]
    assert rec["regime"] == d.regime and rec["verifier"] == (d.verifier and d.verifier.id)
    assert rec["calibrator"] == {"name": "amv-guard", "version": "v3"}
    assert rec["premises"][0]["claim_id"] == "c1" and rec["premises"][0]["p"] == d.probabilities[0]
    assert rec["premises"][1]["recency_hours"] is None
    assert rec["planner"] == "lookahead" and rec["mode"] == "amv"
    assert rec["time"].endswith("Z")
    json.dumps(rec, allow_nan=False)
    gate.run(act, [v], lambda *_: {"p0": True})
    calls = records[-1]["verifier_calls"]
    assert all(c["verifier"] == "v0" and c["signals"] == {"p0": True} for c in calls)

    path = tmp_path / "logs" / "decisions.jsonl"
    g2 = Gate(decision_log=path)
    g2.evaluate(action([0.01]), [])
    g2.run(action([0.3]), [verifier("v0", ["p0"])], lambda *_: {"p0": False})
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    assert len(lines) == 2 and lines[1]["verifier_calls"][0]["signals"] == {"p0": False}
    with pytest.raises(ValueError, match="decision_log="):
        Gate(decision_log=3)  # type: ignore[arg-type]


def test_one_step_voi_is_the_decisions_voi_and_checks_v_stop() -> None:
    # a view of the decision routine: the VOI evaluate() reports, against the action's own
    # stopping value (any other v_stop is a caller's error, not a different question)
    act = action([0.2, 0.05], theta=40.0, kappa=5.0)
    v = verifier("v", ["p0", "p1"], cost=0.1, r=0.9)
    for gate in (Gate(planner="myopic"), Gate(mode="seed"), Gate()):
        d = gate.evaluate(act, [v])
        sv = gate.stopping_value(act)
        assert (sv.v_stop, sv.r_expected, sv.h_harm) == (d.v_stop, d.r_expected, d.h_harm)
        assert gate.one_step_voi(act, v) == gate.one_step_voi(act, v, sv.v_stop) == d.vois[0]
        with pytest.raises(ValueError, match="is not the stopping value"):
            gate.one_step_voi(act, v, sv.v_stop + 1.0)
