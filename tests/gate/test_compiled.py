"""The compiled batch engine (``amv_calib/gate/_compiled.py``) against the scalar reference.

``Gate.evaluate`` (``_engine`` and ``_planner``) is the readable reference, checked against
closed forms, brute force and the seed's TypeScript engine elsewhere (tests/test_gate_*.py).
The compiled engine must give the same results bit for bit: regime, verifier, VOI, stopping
value, ``R``, ``H``, admissibility and the work counters (outcomes enumerated, verifiers left
out by the work bound, planner states) of every row, for the myopic rule in both modes and for
the lookahead planner (exact plans, beams, receding horizons), with verifiers resolving
several premises, verifications left, availability masks, padded premise slots, a harm price,
and rows past the work bound. Floats are compared through their bit patterns, so ``-0.0`` and
``0.0`` differ here, and a fused multiply-add, a reordered sum or a different ``log`` in the
compiled code would show.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kinded import (
    FITTED_KINDS,
    exact_kinded_calibrator,
    fitted_kinded_calibrator,
    kind_cases,
    kinded_calibrator,
)
from portable_corpus import math_corpus

from amv_calib.contract import (
    portable_exp,
    portable_log,
    portable_log1p,
    seed_prior_calibrator,
)
from amv_calib.gate import CandidateAction, Gate, Premise, Verifier, _compiled, _planner
from amv_calib.gate._batch import calibrate_batch, evaluate_batch
from amv_calib.gate._planner import Spec

_P = st.one_of(st.sampled_from([0.0, 1.0, 0.001, 0.01, 0.04, 0.05, 0.3, 0.5, 0.999]),
               st.floats(0.0, 1.0, allow_nan=False))
_R = st.one_of(st.sampled_from([1.0, 0.9, 0.7, 0.51, 0.999999]),
               st.floats(0.5, 1.0, exclude_min=True, allow_nan=False))
_COST = st.one_of(st.sampled_from([0.0, 0.01, 0.1, 1.0]), st.floats(0.0, 5.0))
_POS = st.one_of(st.sampled_from([0.5, 1.0, 2.0, 10.0, 100.0]), st.floats(0.01, 500.0))


def _bits(x: float) -> int:
    return int(np.float64(x).view(np.uint64))


@st.composite
def batches(draw: Any, max_m: int = 4, max_ver: int = 5, max_left: int = 4) -> dict[str, Any]:
    """Padded rows: 1 to ``max_m`` real premises, verifiers resolving any subset (several
    premises included), some unavailable, some resolving padding only, and verifications
    left from 0 to ``max_left``."""
    n = draw(st.integers(1, 5))
    m = draw(st.integers(1, max_m))
    n_ver = draw(st.integers(0, max_ver))
    real = [draw(st.integers(1, m)) for _ in range(n)]
    mask = np.array([[j < real[i] for j in range(m)] for i in range(n)], dtype=bool)
    res = np.zeros((n, n_ver, m), dtype=bool)
    for i in range(n):
        for v in range(n_ver):
            if draw(st.integers(0, 2)):
                res[i, v, draw(st.integers(0, m - 1))] = True  # mostly one premise
            else:
                res[i, v] = [draw(st.booleans()) for _ in range(m)]
    return {
        "p": np.array([[draw(_P) if mask[i, j] else draw(st.sampled_from([0.0, 7.0, np.nan]))
                        for j in range(m)] for i in range(n)]),
        "premise_mask": mask,
        "theta": np.array([draw(_POS) for _ in range(n)]),
        "kappa": np.array([draw(_POS) for _ in range(n)]),
        "resolves": res,
        "cost": np.array([[draw(_COST) for _ in range(n_ver)] for _ in range(n)]).reshape(
            n, n_ver),
        "reliability": np.array([[draw(_R) for _ in range(n_ver)] for _ in range(n)]).reshape(
            n, n_ver),
        "available": np.array([[draw(st.integers(0, 4)) > 0 for _ in range(n_ver)]
                               for _ in range(n)], dtype=bool).reshape(n, n_ver),
        "budget": np.array([draw(st.integers(0, max_left)) for _ in range(n)]),
    }


def _scalar(c: dict[str, Any], i: int) -> tuple[CandidateAction, list[Verifier]]:
    """Row ``i`` as the scalar gate takes it: the real premises, the available verifiers
    with the real premises they resolve."""
    real = np.flatnonzero(c["premise_mask"][i])
    action = CandidateAction(
        action_id=f"a{i}", tool_name="t",
        impact_cost_theta=float(c["theta"][i]), abstention_cost_kappa=float(c["kappa"][i]),
        premises=tuple(Premise(id=f"p{j}", calibrated_violation_probability=float(c["p"][i, j]))
                       for j in real),
    )
    verifiers = [
        Verifier(id=f"v{v}",
                 resolves_premise_ids=tuple(
                     f"p{j}" for j in np.flatnonzero(c["resolves"][i, v] & c["premise_mask"][i])),
                 execution_cost=float(c["cost"][i, v]),
                 symmetric_reliability=float(c["reliability"][i, v]))
        for v in range(c["cost"].shape[1]) if c["available"][i, v]
    ]
    return action, verifiers


def _check_bits(gate_kw: dict[str, Any], c: dict[str, Any], n_jobs: int = 1) -> None:
    """Every row of the compiled batch equals ``Gate.evaluate`` bit for bit."""
    bd = evaluate_batch(Gate(**gate_kw), **c, n_jobs=n_jobs)
    for i in range(len(bd)):
        gate = Gate(**{**gate_kw, "max_verifications": int(c["budget"][i])})
        action, verifiers = _scalar(c, i)
        d = gate.evaluate(action, verifiers)
        adm = gate.stopping_value(action).admissible
        got = (int(bd.regime[i]), int(bd.verifier[i]), _bits(bd.voi[i]), _bits(bd.v_stop[i]),
               _bits(bd.r_expected[i]), _bits(bd.h_harm[i]), bool(bd.admissible[i]),
               int(bd.outcomes[i]), int(bd.left_out[i]), int(bd.planner_states[i]))
        want = (d.regime_code, -1 if d.verifier is None else int(d.verifier.id[1:]),
                _bits(-math.inf if d.voi is None else d.voi), _bits(d.v_stop),
                _bits(d.r_expected), _bits(d.h_harm), adm, d.outcomes, len(d.left_out),
                d.planner_states)
        assert got == want, f"row {i}: compiled {got} != scalar {want} ({gate_kw})"


_SETTINGS = settings(max_examples=120, deadline=None,
                     suppress_health_check=[HealthCheck.too_slow])

_GATES = {
    "myopic": {"planner": "myopic"},
    "myopic-tuned": {"planner": "myopic", "lambda_cost_scale": 0.3,
                     "delta_loss_threshold": 1.5, "epsilon_harm_bound": 0.2},
    "seed": {"mode": "seed"},
    "seed-loose": {"mode": "seed", "epsilon_harm_bound": 0.5, "delta_loss_threshold": 2.0},
    "lookahead": {"planner": "lookahead"},
    "lookahead-tuned": {"planner": "lookahead", "lambda_cost_scale": 0.1,
                        "epsilon_harm_bound": 0.3},
    "lookahead-free": {"planner": "lookahead", "lambda_cost_scale": 0.0,
                       "delta_loss_threshold": math.inf, "epsilon_harm_bound": 1.0},
    "reuse": {"planner": "lookahead", "reuse_verifiers": True},
    "reuse-tuned": {"planner": "lookahead", "reuse_verifiers": True, "lambda_cost_scale": 0.2,
                    "epsilon_harm_bound": 0.1},
    # a harm price: theta + mu throughout, in both engines (the seed mode ignores it)
    "myopic-priced": {"planner": "myopic", "harm_price": 7.5, "epsilon_harm_bound": 0.3},
    "lookahead-priced": {"planner": "lookahead", "harm_price": 0.37, "lambda_cost_scale": 0.1,
                         "epsilon_harm_bound": 0.3},
    "lookahead-dear": {"planner": "lookahead", "harm_price": 250.0, "lambda_cost_scale": 0.0,
                       "delta_loss_threshold": math.inf, "epsilon_harm_bound": 1.0},
    "reuse-priced": {"planner": "lookahead", "reuse_verifiers": True, "harm_price": 2.0},
    "seed-priced": {"mode": "seed", "harm_price": 40.0},
}


@pytest.mark.parametrize("gate_kw", list(_GATES.values()), ids=list(_GATES))
@_SETTINGS
@given(c=batches())
def test_rows_equal_the_scalar_gate(gate_kw: dict[str, Any], c: dict[str, Any]) -> None:
    _check_bits(gate_kw, c)


@pytest.mark.parametrize("gate_kw", [_GATES["lookahead"], _GATES["lookahead-tuned"]],
                         ids=["lookahead", "lookahead-tuned"])
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(c=batches(max_m=6, max_ver=12, max_left=8))
def test_beam_rows_equal_the_scalar_gate(gate_kw: dict[str, Any], c: dict[str, Any]) -> None:
    # up to 12 verifiers on up to 6 premises: past MAX_EXACT_VERIFIERS and MAX_WORK the
    # planner keeps a beam, floored by the myopic rule
    _check_bits(gate_kw, c)


@st.composite
def big_batches(draw: Any) -> dict[str, Any]:
    """Rows past the work bound (``sum 2^k > MAX_OUTCOMES``): a few verifiers over many
    premises (up to 24: far past 2^12 outcomes each), or many over a handful, mixed with
    one-premise verifiers, so that both the single-verifier and the running-total side of
    the rule are met, and the cut between equal ``k`` falls inside a row."""
    c = draw(batches(max_m=24, max_ver=0, max_left=8))
    n, m = c["premise_mask"].shape
    if draw(st.booleans()):  # small probabilities: admissible rows, where the bound bites
        small = st.one_of(st.sampled_from([0.0, 1e-5, 1e-4, 1e-3]), st.floats(0.0, 0.004))
        c["p"] = np.where(c["premise_mask"], [[draw(small) for _ in range(m)]
                                              for _ in range(n)], c["p"])
    n_ver = draw(st.integers(1, 40))
    res = np.zeros((n, n_ver, m), dtype=bool)
    for i in range(n):
        only_big = draw(st.integers(0, 3)) == 0  # then nothing may be enumerated at all
        for v in range(n_ver):
            kind = 1 if only_big else draw(st.integers(0, 3))
            if kind == 0:
                res[i, v, draw(st.integers(0, m - 1))] = True
            elif kind == 1:  # many premises: 2^k alone may exceed the bound
                res[i, v, : draw(st.integers(m // 2 if only_big else 0, m))] = True
            else:  # a handful: forty of them exceed the bound together
                res[i, v, draw(st.permutations(range(m)))[: draw(st.integers(0, 9))]] = True
    c["resolves"] = res
    c["cost"] = np.array([[draw(_COST) for _ in range(n_ver)] for _ in range(n)])
    c["reliability"] = np.array([[draw(_R) for _ in range(n_ver)] for _ in range(n)])
    c["available"] = np.array([[draw(st.integers(0, 6)) > 0 for _ in range(n_ver)]
                               for _ in range(n)], dtype=bool)
    return c


@pytest.mark.parametrize("gate_kw", [_GATES[k] for k in ("myopic", "lookahead",
                                                         "lookahead-priced", "reuse")],
                         ids=["myopic", "lookahead", "lookahead-priced", "reuse"])
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(c=big_batches())
def test_rows_past_the_work_bound_equal_the_scalar_gate(gate_kw: dict[str, Any],
                                                        c: dict[str, Any]) -> None:
    # which verifiers are enumerated (the (k, position) prefix), their upper bounds and the
    # ABSTAIN instead of PROCEED: the same rule in both engines, counters included
    _check_bits(gate_kw, c)


def _bound_rows() -> dict[str, Any]:
    """Hand-made rows around the work bound, padded to 64 premises and 64 verifiers: a
    verifier over 13 premises on an admissible action (ABSTAIN) and with ``theta <= kappa``
    (PROCEED), one beside an enumerated verifier worth calling, the cut between five
    verifiers over 10 premises, 63 one-premise verifiers beside one over 12, 2^64 outcomes
    (no int64 overflow), and 4096 outcomes exactly."""
    n, m, nv = 7, 64, 64
    c: dict[str, Any] = {
        "p": np.zeros((n, m)), "premise_mask": np.zeros((n, m), dtype=bool),
        "theta": np.array([100.0, 4.0, 10.0, 100.0, 1000.0, 100.0, 100.0]),
        "kappa": np.full(n, 5.0), "resolves": np.zeros((n, nv, m), dtype=bool),
        "cost": np.full((n, nv), 0.01), "reliability": np.full((n, nv), 0.9),
        "available": np.zeros((n, nv), dtype=bool), "budget": np.full(n, 8)}

    def row(i: int, ps: list[float], verifiers: list[list[int]]) -> None:
        c["p"][i, : len(ps)] = ps
        c["premise_mask"][i, : len(ps)] = True
        for v, premises in enumerate(verifiers):
            c["resolves"][i, v, premises] = True
            c["available"][i, v] = True

    row(0, [0.001] * 13, [list(range(13))])
    row(1, [0.001] * 13, [list(range(13))])
    row(2, [0.04] + [0.0] * 15, [list(range(3, 16)), [0]])
    row(3, [0.002] * 12, [list(range(j, j + 10)) for j in range(0, 3)] + [[1, *range(3, 12)]] * 2)
    row(4, [0.01] * 64, [[j] for j in range(63)] + [list(range(12))])
    row(5, [1e-4] * 64, [list(range(64))] * 3 + [[5]])
    row(6, [0.001] * 12, [list(range(12))])
    return c


@pytest.mark.parametrize("gate_kw", [_GATES[k] for k in ("myopic", "lookahead", "reuse",
                                                         "lookahead-priced", "seed")],
                         ids=["myopic", "lookahead", "reuse", "lookahead-priced", "seed"])
def test_hand_made_rows_around_the_work_bound_equal_the_scalar_gate(
        gate_kw: dict[str, Any]) -> None:
    c = _bound_rows()
    _check_bits(gate_kw, c)
    bd = evaluate_batch(Gate(**gate_kw), **c)
    if gate_kw.get("mode") != "seed":
        assert list(bd.left_out) == [1, 1, 1, 1, 1, 3, 0]
        assert list(bd.outcomes) == [0, 0, 2, 4096, 126, 2, 4096]


@st.composite
def plans(draw: Any) -> dict[str, Any]:
    """Arguments of ``plan`` straight: cost budgets (which the batch never passes), a myopic
    floor, any tolerance, reuse."""
    m = draw(st.integers(1, 5))
    specs = []
    for _ in range(draw(st.integers(1, 11))):
        k = draw(st.integers(0, m)) if draw(st.integers(0, 3)) == 0 else 1
        idx = tuple(sorted(draw(st.permutations(range(m)))[:k]))
        cost = draw(_COST)
        specs.append(Spec(idx, draw(_R), draw(st.sampled_from([0.0, 0.5, 1.0])) * cost, cost))
    theta, kappa = draw(_POS), draw(_POS)
    reuse = draw(st.integers(0, 4)) == 0
    return {
        "probs": [draw(_P) for _ in range(m)], "theta": theta, "kappa": kappa,
        "lim": min(draw(st.sampled_from([0.5, 2.0, 10.0, math.inf])), kappa),
        "eps": draw(st.sampled_from([0.0, 0.05, 0.3, 1.0])), "specs": specs,
        "depth": draw(st.integers(0, 3 if reuse else 8)),
        "budget": draw(st.one_of(st.none(), st.floats(0.0, 3.0))), "reuse": reuse,
        "myopic_first": draw(st.one_of(st.none(), st.integers(0, len(specs) - 1))),
        "myopic_value": draw(st.floats(0.0, 2.0 * kappa)),
        "tol": draw(st.sampled_from([0.0, 1e-12 * (theta + kappa), 1e-3])),
    }


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kw=plans())
def test_plan_equals_the_reference_planner(kw: dict[str, Any]) -> None:
    want = _planner.plan(**kw)
    got = _compiled.plan(**kw)
    assert (_bits(got.value), got.first, got.exact, got.states) == (
        _bits(want.value), want.first, want.exact, want.states)


def test_many_random_rows_equal_the_scalar_gate() -> None:
    """A few thousand generic rows per setting: a fused multiply-add or a reordered sum in
    the compiled code changes the last bit of a good share of them."""
    rng = np.random.default_rng(20261202)
    n, m, n_ver = 1500, 4, 4
    p = rng.random((n, m)) ** 2
    mask = rng.random((n, m)) < 0.85
    mask[:, 0] = True
    res = np.zeros((n, n_ver, m), dtype=bool)
    res[np.arange(n)[:, None], np.arange(n_ver)[None, :], rng.integers(0, m, (n, n_ver))] = True
    res |= rng.random((n, n_ver, m)) < 0.15
    c = {"p": p, "premise_mask": mask, "theta": np.exp(rng.uniform(-1.0, 6.0, n)),
         "kappa": np.exp(rng.uniform(-1.0, 3.0, n)), "resolves": res,
         "cost": rng.exponential(0.2, (n, n_ver)), "reliability": rng.uniform(0.55, 1.0,
                                                                               (n, n_ver)),
         "available": rng.random((n, n_ver)) < 0.9, "budget": rng.integers(0, 5, n)}
    for kw in (_GATES["myopic"], _GATES["seed"], _GATES["lookahead-tuned"], _GATES["reuse"]):
        _check_bits(kw, c)


@pytest.mark.parametrize("mode", ["amv", "seed"])
def test_stopping_value_batch_equals_the_scalar_gate(mode: Any) -> None:
    from amv_calib.gate._batch import stopping_value_batch

    rng = np.random.default_rng(9)
    n, m = 400, 4
    c = {"p": rng.random((n, m)) ** 3, "premise_mask": rng.random((n, m)) < 0.8,
         "theta": rng.uniform(0.5, 100.0, n), "kappa": rng.uniform(0.5, 10.0, n),
         "resolves": np.zeros((n, 0, m), dtype=bool), "cost": np.zeros((n, 0)),
         "reliability": np.zeros((n, 0)), "available": np.zeros((n, 0), dtype=bool)}
    gate = Gate(mode=mode, epsilon_harm_bound=0.1)
    v, r, h, adm = stopping_value_batch(gate, c["p"], c["premise_mask"], c["theta"],
                                        c["kappa"])
    for i in range(n):
        sv = gate.stopping_value(_scalar(c, i)[0])
        assert (_bits(v[i]), _bits(r[i]), _bits(h[i]), bool(adm[i])) == (
            _bits(sv.v_stop), _bits(sv.r_expected), _bits(sv.h_harm), sv.admissible)


def test_score_and_its_log_match_python() -> None:
    # the beam's score is the one place that calls log: numba's must be the same libm's
    rng = np.random.default_rng(3)
    probs = rng.random(6)
    idx = np.arange(6, dtype=np.int64)
    for r in np.concatenate([rng.uniform(0.5, 1.0, 3000), [0.5000001, 0.75, 1.0 - 1e-15]]):
        lam_cost = float(rng.exponential(0.1))
        want = _planner._score(probs.tolist(), Spec(tuple(range(6)), float(r), lam_cost, 1.0))
        got = _compiled._score(probs, idx, 6, float(r), lam_cost)
        assert _bits(got) == _bits(want), r


def test_threads_give_the_same_rows() -> None:
    rng = np.random.default_rng(5)
    n = 2 * _compiled.PARALLEL_MIN_ROWS + 100
    m, n_ver = 3, 3
    c = {"p": rng.random((n, m)) ** 3, "premise_mask": np.ones((n, m), dtype=bool),
         "theta": rng.uniform(1.0, 200.0, n), "kappa": rng.uniform(0.5, 20.0, n),
         "resolves": rng.random((n, n_ver, m)) < 0.5, "cost": rng.exponential(0.1, (n, n_ver)),
         "reliability": rng.uniform(0.6, 1.0, (n, n_ver))}
    for kw in (_GATES["myopic"], _GATES["lookahead"]):
        one = evaluate_batch(Gate(**kw), **c)
        two = evaluate_batch(Gate(**kw), **c, n_jobs=2)
        for name in ("regime", "verifier", "voi", "v_stop", "r_expected", "h_harm",
                     "admissible"):
            np.testing.assert_array_equal(getattr(one, name), getattr(two, name))


@pytest.mark.parametrize(
    ("key", "value", "match"),
    [("p", 1.5, r"p\[1, 0\]=1\.5 must be in \[0, 1\]"),
     ("theta", 0.0, r"theta\[1\]=0\.0 must be > 0 and finite"),
     ("kappa", np.inf, r"kappa\[1\]=inf must be > 0 and finite"),
     ("cost", -1.0, r"cost\[1, 0\]=-1\.0 must be >= 0 and finite"),
     ("reliability", 0.5, r"reliability\[1, 0\]=0\.5 must be in \(0\.5, 1\]")],
    ids=["p", "theta", "kappa", "cost", "reliability"])
@pytest.mark.parametrize("planner", ["myopic", "lookahead"])
def test_bad_values_are_named(key: str, value: float, match: str, planner: Any) -> None:
    # the compiled engine refuses the row; the numpy checks name the entry
    c: dict[str, Any] = {"p": np.full((2, 1), 0.1), "premise_mask": np.ones((2, 1), bool),
                         "theta": np.full(2, 10.0), "kappa": np.full(2, 2.0),
                         "resolves": np.ones((2, 1, 1), bool), "cost": np.full((2, 1), 0.1),
                         "reliability": np.full((2, 1), 0.9)}
    c[key] = c[key].copy()
    c[key][1] = value
    with pytest.raises(ValueError, match=match):
        Gate(planner=planner).evaluate_batch(**c)


def test_unavailable_verifiers_are_not_checked() -> None:
    # as the scalar gate never sees them: garbage in an unavailable column is ignored
    c: dict[str, Any] = {"p": np.array([[0.2]]), "premise_mask": np.ones((1, 1), bool),
                         "theta": np.array([20.0]), "kappa": np.array([2.0]),
                         "resolves": np.ones((1, 2, 1), bool),
                         "cost": np.array([[0.1, -4.0]]), "reliability": np.array([[0.9, 0.2]]),
                         "available": np.array([[True, False]])}
    bd = Gate().evaluate_batch(**c)
    action, _ = _scalar(c, 0)
    v = Verifier(id="v0", resolves_premise_ids=("p0",), execution_cost=0.1,
                 symmetric_reliability=0.9)
    d = Gate().evaluate(action, [v])
    assert (int(bd.regime[0]), float(bd.voi[0])) == (d.regime_code, d.voi)


# -- the portable log, log1p and exp ---------------------------------------------------------


def test_compiled_portable_math_is_the_python_definition() -> None:
    """The engine's ``log``, ``log1p`` and ``exp`` are ``amv_calib.contract``'s functions
    compiled by numba: the same bits as the interpreted ones on odd and random inputs."""
    for name, python, compiled in (("log", portable_log, _compiled._log),
                                   ("log1p", portable_log1p, _compiled._log1p),
                                   ("exp", portable_exp, _compiled._exp)):
        xs = math_corpus(name, 20_000)
        want = [python(x) for x in xs]
        got = [compiled(x) for x in xs]
        assert [_bits(x) for x in got] == [_bits(x) for x in want], name
        assert sum(math.isnan(x) for x in got) >= 1  # the corpus reaches the NaN results


# -- premise probabilities from claims with memory kinds -------------------------------------

_KIND_CALIBRATORS = {"linear": lambda: kinded_calibrator("linear"),
                     "isotonic": lambda: kinded_calibrator("isotonic"),
                     "exact": exact_kinded_calibrator,
                     "no-kinds": seed_prior_calibrator,
                     # real ones: fitted, with logit, log, log1m and log1p terms
                     **{name: lambda name=name: fitted_kinded_calibrator(name)
                        for name in FITTED_KINDS}}


@pytest.mark.slow
@pytest.mark.parametrize("which", list(_KIND_CALIBRATORS), ids=list(_KIND_CALIBRATORS))
@pytest.mark.parametrize("planner", ["lookahead", "myopic"], ids=["lookahead", "myopic"])
def test_calibrated_batch_with_kinds_equals_the_scalar_gate(which: str, planner: str) -> None:
    """2,500 actions on claims with kinds (known, unknown, absent): ``calibrate_batch`` gives
    ``Gate.probabilities`` bit for bit, and ``evaluate_batch`` on them ``Gate.evaluate``."""
    cal = _KIND_CALIBRATORS[which]()
    gate = Gate(calibrator=cal, planner=planner)
    cases = kind_cases(2500)
    n, m = len(cases), max(len(c["action"]["premises"]) for c in cases)
    n_ver = max(len(c["verifiers"]) for c in cases)
    feat, mask = np.zeros((n, m, 4)), np.zeros((n, m), dtype=bool)
    kinds = np.full((n, m), None, dtype=object)
    res = np.zeros((n, n_ver, m), dtype=bool)
    cost, rel = np.zeros((n, n_ver)), np.full((n, n_ver), 0.9)
    avail = np.zeros((n, n_ver), dtype=bool)
    actions, offered = [], []
    for i, c in enumerate(cases):
        action = CandidateAction.from_dict(c["action"])
        verifiers = [Verifier.from_dict(v) for v in c["verifiers"]]
        actions.append(action)
        offered.append(verifiers)
        for j, pm in enumerate(action.premises):
            assert pm.claim is not None
            f = pm.claim.features()
            feat[i, j] = [f[k] for k in ("recency_hours", "source_trust_score",
                                         "model_confidence", "contradiction_flag")]
            mask[i, j], kinds[i, j] = True, pm.memory_kind
        for v, ver in enumerate(verifiers):
            avail[i, v] = True
            cost[i, v], rel[i, v] = ver.execution_cost, ver.symmetric_reliability
            for pid in ver.resolves_premise_ids:
                res[i, v, action._index[pid]] = True
    p = calibrate_batch(cal, feat, mask, kinds)
    bd = evaluate_batch(gate, p, mask, [a.impact_cost_theta for a in actions],
                        [a.abstention_cost_kappa for a in actions], res, cost, rel, avail)
    for i, (action, verifiers) in enumerate(zip(actions, offered, strict=True)):
        d = gate.evaluate(action, verifiers)
        row = [_bits(x) for x in p[i, mask[i]]]
        assert row == [_bits(x) for x in d.probabilities], (i, which)
        got = (int(bd.regime[i]), int(bd.verifier[i]), _bits(bd.voi[i]), _bits(bd.v_stop[i]))
        want = (d.regime_code, -1 if d.verifier is None else int(d.verifier.id[1:]),
                _bits(-math.inf if d.voi is None else d.voi), _bits(d.v_stop))
        assert got == want, (i, which, planner)
    if cal.has_kinds:  # the kinds matter: "event" and "other" differ on the same claim
        flat = feat[mask][:50]
        ev = calibrate_batch(cal, flat[:, None, :], None, np.full((50, 1), "event", dtype=object))
        ot = calibrate_batch(cal, flat[:, None, :], None, np.full((50, 1), "never-seen",
                                                                 dtype=object))
        assert np.any(ev != ot)
        np.testing.assert_array_equal(ot, calibrate_batch(cal, flat[:, None, :]))


@pytest.mark.parametrize(("change", "message"), [
    ({"features": np.full((1, 1, 4), 0.5)},
     r"features\[\.\.\., 3\] \(contradiction_flag\)\[0, 0\]=0\.5 must be 0 or 1"),
    ({"features": np.array([[[-1.0, 0.5, 0.5, 0.0]]])},
     r"features\[\.\.\., 0\] \(recency_hours\)\[0, 0\]=-1\.0 must be in \[0, inf\] and finite"),
    ({"memory_kinds": np.array([["event", 3]], dtype=object)},
     r"memory_kinds\[0, 1\]=3 is not a string"),
    ({"memory_kinds": np.array([["event", [1]]], dtype=object)},
     r"memory_kinds\[0, 1\]=\[1\] is not a string"),
    # refused as the scalar gate refuses it (the contract's one rule), not evaluated as other
    ({"memory_kinds": np.array([[" ", "event"]], dtype=object)},
     r"memory_kinds\[0, 0\]=' ' is blank"),
    ({"memory_kinds": np.array([["event", " fact"]], dtype=object)},
     r"memory_kinds\[0, 1\]=' fact' begins or ends with whitespace"),
    ({"features": np.zeros((2, 3))}, r"features has shape \(2, 3\), expected \(n, m, 4\)"),
], ids=["flag", "recency", "kind", "unhashable-kind", "blank-kind", "padded-kind", "shape"])
def test_calibrate_batch_names_a_bad_input(change: dict[str, Any], message: str) -> None:
    kw: dict[str, Any] = {"features": np.zeros((1, 2, 4)), "memory_kinds": None, **change}
    with pytest.raises(ValueError, match=message):
        calibrate_batch(kinded_calibrator(), kw["features"], None, kw["memory_kinds"])
