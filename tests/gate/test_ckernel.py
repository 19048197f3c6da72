"""The compiled myopic kernel (``amv_calib/gate/_ckernel.c``) against the Python engine.

The kernel is optional, so everything it computes is checked bit for bit against the code
that runs without it: ``Gate.evaluate`` with the kernel switched off, and the numpy batch.
The Python engine itself is checked against closed forms and the seed's TypeScript engine
elsewhere (tests/test_gate_*.py).
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_batch import _GATES, _check_rows, cases

from amv_calib.gate import CandidateAction, Gate, Premise, Verifier, _batch, _engine

KERNEL = _engine.KERNEL
needs_kernel = pytest.mark.skipif(KERNEL is None, reason="the compiled kernel is not built")


def test_kernel_is_built_in_ci() -> None:
    # CI builds the package from source: a kernel that silently failed to compile would
    # leave every kernel test skipped
    if os.environ.get("CI", "").lower() not in ("1", "true", "yes"):
        pytest.skip("only enforced with CI=true")
    if os.environ.get("AMV_CALIB_PURE_PYTHON", "") not in ("", "0"):
        pytest.skip("AMV_CALIB_PURE_PYTHON is set")
    assert KERNEL is not None, "amv_calib.gate._ckernel did not build"


def _bits(d: Any) -> tuple[Any, ...]:
    def f(x: float | None) -> str | None:
        return None if x is None else float(x).hex()  # -0.0 and 0.0 differ here

    return (d.regime, d.verifier, f(d.voi), f(d.v_stop), f(d.r_expected), f(d.h_harm),
            d.probabilities, d.reason, d.planner_value, tuple(f(v) for v in d.vois))


_P = st.one_of(st.sampled_from([0.0, 1.0, 0.001, 0.04, 0.05, 0.5, 0.999]),
               st.floats(0.0, 1.0, allow_nan=False))
_R = st.one_of(st.sampled_from([1.0, 0.9, 0.51]),
               st.floats(0.5, 1.0, exclude_min=True, allow_nan=False))
_COST = st.one_of(st.sampled_from([0.0, 0.01, 1.0]), st.floats(0.0, 5.0))
_POS = st.one_of(st.sampled_from([0.5, 1.0, 10.0, 100.0]), st.floats(0.01, 500.0))


@st.composite
def actions(draw: Any) -> tuple[dict[str, Any], CandidateAction, list[Verifier]]:
    m = draw(st.integers(0, 4))
    premises = tuple(Premise(id=f"p{j}", calibrated_violation_probability=draw(_P))
                     for j in range(m))
    action = CandidateAction(action_id="a", tool_name="t", impact_cost_theta=draw(_POS),
                             abstention_cost_kappa=draw(_POS), premises=premises)
    verifiers = []
    for v in range(draw(st.integers(0, 4)) if m else 0):
        # mostly one premise (the kernel's case), sometimes several (the Python engine's)
        k = 1 if draw(st.integers(0, 4)) else draw(st.integers(0, m))
        ids = draw(st.permutations([f"p{j}" for j in range(m)]))[:k]
        verifiers.append(Verifier(id=f"v{v}", resolves_premise_ids=tuple(ids),
                                  execution_cost=draw(_COST), symmetric_reliability=draw(_R)))
    gate_kw = {"lambda_cost_scale": draw(st.sampled_from([0.0, 0.3, 1.0])),
               "delta_loss_threshold": draw(st.sampled_from([0.0, 1.5, 10.0, 1e9])),
               "epsilon_harm_bound": draw(st.sampled_from([0.0, 0.05, 0.3, 1.0]))}
    return gate_kw, action, verifiers


@needs_kernel
@pytest.mark.parametrize("mode", ["amv", "seed"])
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=actions())
def test_single_call_equals_python(mode: str, case: tuple[dict[str, Any], CandidateAction,
                                                          list[Verifier]]) -> None:
    gate_kw, action, verifiers = case
    gate = Gate(planner="myopic", mode=mode, **gate_kw)  # type: ignore[arg-type]
    assert gate._kernel_ctx is not None
    fast = gate.evaluate(action, verifiers)
    gate._kernel_ctx = None
    slow = gate.evaluate(action, verifiers)
    assert _bits(fast) == _bits(slow)
    assert fast == slow and fast.to_dict() == slow.to_dict()


@needs_kernel
def test_single_call_several_premises_and_unknown_ids() -> None:
    action = CandidateAction(
        action_id="a", tool_name="t", impact_cost_theta=50.0, abstention_cost_kappa=5.0,
        premises=(Premise(id="p0", calibrated_violation_probability=0.2),
                  Premise(id="p1", calibrated_violation_probability=0.1)))
    gate = Gate(planner="myopic")
    both = Verifier(id="both", resolves_premise_ids=("p0", "p1"), execution_cost=0.1,
                    symmetric_reliability=0.9)
    one = Verifier(id="one", resolves_premise_ids=("p0",), execution_cost=0.1,
                   symmetric_reliability=0.9)
    ctx = gate._kernel_ctx
    assert ctx is not None
    d = gate.evaluate(action, [one, both])
    gate._kernel_ctx = None
    assert d == gate.evaluate(action, [one, both]) and d.verifier is both
    gate._kernel_ctx = ctx
    stray = Verifier(id="stray", resolves_premise_ids=("p9",), execution_cost=0.1,
                     symmetric_reliability=0.9)
    assert KERNEL.decide(ctx, action, action._explicit, [one, stray]) is None
    with pytest.raises(ValueError, match="names premise 'p9'"):
        gate.evaluate(action, [one, stray])


@pytest.mark.parametrize(
    "kw", [{"planner": "lookahead"}, {"planner": "myopic", "max_verifications": 0},
           {"mode": "seed", "max_verifications": 0}, {"planner": "myopic", "refusal": "no"}],
    ids=["lookahead", "no-calls-left", "seed-no-calls-left", "refusal"])
def test_kernel_only_takes_the_myopic_rule(kw: dict[str, Any]) -> None:
    assert Gate(**kw)._kernel_ctx is None


def test_decision_log_sees_kernel_decisions() -> None:
    records: list[dict[str, Any]] = []
    gate = Gate(planner="myopic", decision_log=records.append)
    action = CandidateAction(action_id="a", tool_name="t", impact_cost_theta=10.0,
                             abstention_cost_kappa=2.0,
                             premises=(Premise(id="p0", calibrated_violation_probability=0.3),))
    v = Verifier(id="v0", resolves_premise_ids=("p0",), execution_cost=0.01,
                 symmetric_reliability=0.95)
    d = gate.evaluate(action, [v])
    assert d.regime == "VERIFY" and d.verifier is v
    assert len(records) == 1 and records[0]["regime"] == "VERIFY"


def _rows_bits(rows: tuple[Any, ...]) -> list[Any]:
    out = []
    for a in rows:
        if a is None:
            out.append(None)
        else:
            a = np.asarray(a)
            out.append((a.dtype.str, a.shape,
                        a.view(np.uint64).tolist() if a.dtype == np.float64 else a.tolist()))
    return out


@needs_kernel
@pytest.mark.parametrize("gate_kw", _GATES, ids=["seed", "myopic", "myopic-tuned", "lookahead",
                                                 "lookahead-tuned", "seed-loose"])
@pytest.mark.parametrize("keep", [False, True], ids=["plain", "keep"])
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(c=cases(max_ver=5))
def test_batch_kernel_equals_numpy(gate_kw: dict[str, Any], keep: bool,
                                   c: dict[str, Any]) -> None:
    _compare_kernel_numpy(gate_kw, keep, c)


def _compare_kernel_numpy(gate_kw: dict[str, Any], keep: bool, c: dict[str, Any]) -> None:
    gate = Gate(**gate_kw)
    args = (c["p"], c["premise_mask"], c["theta"], c["kappa"], c["resolves"], c["cost"],
            c["reliability"])
    for avail, left in ((c["available"], c["budget"]), (None, None), (c["available"], None)):
        fast = _batch._kernel_rows(gate, *args, avail, left, keep=keep)
        assert fast is not None
        slow = _batch._numpy_rows(gate, *args,
                                  np.ones_like(c["cost"], dtype=bool) if avail is None
                                  else avail, left, keep=keep)
        assert not isinstance(slow, _batch.BatchDecision)
        if keep:
            assert _rows_bits(fast) == _rows_bits(slow)
        else:  # without keep the numpy path leaves q and idx out
            assert _rows_bits(fast)[1:6] + _rows_bits(fast)[7:] == (
                _rows_bits(slow)[1:6] + _rows_bits(slow)[7:])


def test_batch_without_kernel_equals_scalar_without_kernel(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # the pure-Python engine and the numpy batch, the pair that runs where nothing compiled
    monkeypatch.setattr(_batch, "KERNEL", None)
    monkeypatch.setattr(_engine, "KERNEL", None)
    rng = np.random.default_rng(7)
    n, m, n_ver = 300, 3, 3
    p = rng.random((n, m))
    edge = rng.random((n, m)) < 0.3  # the edges of Bayes' rule and of the screen
    p[edge] = rng.choice([0.0, 1.0, 0.02, 0.05], int(edge.sum()))
    c = {"p": p, "premise_mask": rng.random((n, m)) < 0.8,
         "theta": rng.uniform(0.5, 100.0, n), "kappa": rng.uniform(0.5, 20.0, n),
         "resolves": rng.random((n, n_ver, m)) < 0.4,
         "cost": rng.choice([0.0, 0.05, 1.0], (n, n_ver)),
         "reliability": rng.choice([1.0, 0.9, 0.6], (n, n_ver)),
         "available": rng.random((n, n_ver)) < 0.8,
         "budget": rng.integers(0, 3, n)}
    c["premise_mask"][:, 0] = True
    c["resolves"] &= c["premise_mask"][:, None, :]
    for kw in ({"planner": "myopic"}, {"mode": "seed"}):
        assert Gate(**kw)._kernel_ctx is None
        _check_rows(kw, c)


@needs_kernel
@pytest.mark.parametrize(
    ("key", "value", "match"),
    [("p", 1.5, r"p\[1, 0\]=1\.5 must be in \[0, 1\]"),
     ("theta", 0.0, r"theta\[1\]=0\.0 must be > 0 and finite"),
     ("kappa", np.inf, r"kappa\[1\]=inf must be > 0 and finite"),
     ("cost", -1.0, r"cost\[1, 0\]=-1\.0 must be >= 0 and finite"),
     ("reliability", 0.5, r"reliability\[1, 0\]=0\.5 must be in \(0\.5, 1\]")],
    ids=["p", "theta", "kappa", "cost", "reliability"])
def test_kernel_hands_bad_values_to_the_named_checks(key: str, value: float,
                                                     match: str) -> None:
    c: dict[str, Any] = {"p": np.full((2, 1), 0.1), "premise_mask": np.ones((2, 1), bool),
                         "theta": np.full(2, 10.0), "kappa": np.full(2, 2.0),
                         "resolves": np.ones((2, 1, 1), bool), "cost": np.full((2, 1), 0.1),
                         "reliability": np.full((2, 1), 0.9)}
    c[key] = c[key].copy()
    c[key][1] = value
    with pytest.raises(ValueError, match=match):
        Gate(planner="myopic").evaluate_batch(**c)


@st.composite
def one_premise_cases(draw: Any) -> dict[str, Any]:
    """Unpadded rows whose verifiers mostly resolve one premise each: the kernel's
    two-rows-at-once path (rows in pairs; an odd last row and any pair holding another kind
    of verifier go through the scalar path)."""
    n = draw(st.integers(1, 9))
    m = draw(st.integers(1, 4))
    n_ver = draw(st.integers(0, 4))
    res = np.zeros((n, n_ver, m), dtype=bool)
    for i in range(n):
        for v in range(n_ver):
            if draw(st.integers(0, 9)):
                res[i, v, draw(st.integers(0, m - 1))] = True
            else:
                res[i, v] = [draw(st.booleans()) for _ in range(m)]
    return {
        "p": np.array([[draw(_P) for _ in range(m)] for _ in range(n)]),
        "premise_mask": np.ones((n, m), dtype=bool),
        "theta": np.array([draw(_POS) for _ in range(n)]),
        "kappa": np.array([draw(_POS) for _ in range(n)]),
        "resolves": res,
        "cost": np.array([[draw(_COST) for _ in range(n_ver)] for _ in range(n)]).reshape(
            n, n_ver),
        "reliability": np.array([[draw(_R) for _ in range(n_ver)] for _ in range(n)]).reshape(
            n, n_ver),
        "available": np.array([[draw(st.integers(0, 5)) > 0 for _ in range(n_ver)]
                               for _ in range(n)], dtype=bool).reshape(n, n_ver),
        "budget": np.array([draw(st.integers(0, 4)) > 0 for _ in range(n)], dtype=np.intp),
    }


@needs_kernel
@pytest.mark.parametrize("gate_kw", [_GATES[i] for i in (0, 1, 2, 5)],
                         ids=["seed", "myopic", "myopic-tuned", "seed-loose"])
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(c=one_premise_cases())
def test_batch_kernel_pairs_equal_numpy(gate_kw: dict[str, Any], c: dict[str, Any]) -> None:
    _compare_kernel_numpy(gate_kw, True, c)


@needs_kernel
def test_batch_kernel_equals_numpy_on_many_rows() -> None:
    # a bench-like batch: every row in the two-lane path but for the odd last one
    rng = np.random.default_rng(11)
    n, m, n_ver = 2001, 3, 3
    p = rng.random((n, m)) ** 3
    p[rng.random((n, m)) < 0.05] = 0.0
    res = np.zeros((n, n_ver, m), dtype=bool)
    res[np.arange(n)[:, None], np.arange(n_ver)[None, :], rng.integers(0, m, (n, n_ver))] = True
    args = (p, np.ones((n, m), dtype=bool), rng.uniform(0.5, 200.0, n),
            rng.uniform(0.5, 20.0, n), res, rng.choice([0.0, 0.01, 0.2, 1.0], (n, n_ver)),
            rng.choice([1.0, 0.95, 0.8, 0.6], (n, n_ver)))
    for gate in (Gate(planner="myopic"), Gate(planner="myopic", epsilon_harm_bound=0.3,
                                               delta_loss_threshold=3.0),
                 Gate(mode="seed"), Gate(mode="seed", epsilon_harm_bound=0.3)):
        fast = _batch._kernel_rows(gate, *args, None, None, keep=True)
        slow = _batch._numpy_rows(gate, *args, np.ones((n, n_ver), dtype=bool), None,
                                  keep=True)
        assert fast is not None and not isinstance(slow, _batch.BatchDecision)
        assert _rows_bits(fast) == _rows_bits(slow)
        regimes = np.bincount(fast[7], minlength=3)
        assert (regimes > 0).all(), regimes  # all three regimes occur


@needs_kernel
def test_single_call_without_packed_numbers_reads_the_attributes() -> None:
    # the kernel reads the model's packed doubles; an object without them (None here) is
    # read attribute by attribute, with the same decision
    action = CandidateAction(
        action_id="a", tool_name="t", impact_cost_theta=40.0, abstention_cost_kappa=3.0,
        premises=(Premise(id="p0", calibrated_violation_probability=0.2),
                  Premise(id="p1", calibrated_violation_probability=0.01)))
    verifiers = [Verifier(id=f"v{j}", resolves_premise_ids=(f"p{j}",), execution_cost=0.05,
                          symmetric_reliability=0.9) for j in range(2)]
    for mode in ("amv", "seed"):
        gate = Gate(planner="myopic", mode=mode)  # type: ignore[arg-type]
        packed = gate.evaluate(action, verifiers)
        bare = CandidateAction(action_id="a", tool_name="t", impact_cost_theta=40.0,
                               abstention_cost_kappa=3.0, premises=action.premises)
        object.__setattr__(bare, "_packed", None)
        bare_vs = [Verifier(id=v.id, resolves_premise_ids=v.resolves_premise_ids,
                            execution_cost=v.execution_cost,
                            symmetric_reliability=v.symmetric_reliability) for v in verifiers]
        for v in bare_vs:
            object.__setattr__(v, "_packed", None)
        got = gate.evaluate(bare, bare_vs)
        assert got.regime == packed.regime and _bits(got)[2:] == _bits(packed)[2:]
        assert got.verifier == packed.verifier
        assert packed.regime == "VERIFY"
