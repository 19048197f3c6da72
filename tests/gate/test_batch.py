"""The batch gate gives the scalar gate's decisions row by row, bit for bit."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from amv_calib.gate import CandidateAction, Gate, Premise, Verifier
from amv_calib.gate._batch import (
    ABSTAIN,
    PROCEED,
    VERIFY,
    evaluate_batch,
    posterior_batch,
    update_batch,
)

# Values that hit the edges of the screen and of Bayes' rule, mixed with generic floats.
_P = st.one_of(st.sampled_from([0.0, 1.0, 0.001, 0.01, 0.04, 0.05, 0.5, 0.999]),
               st.floats(0.0, 1.0, allow_nan=False))
_R = st.one_of(st.sampled_from([1.0, 0.9, 0.7, 0.51]),
               st.floats(0.5, 1.0, exclude_min=True, allow_nan=False))
_COST = st.one_of(st.sampled_from([0.0, 0.01, 0.1, 1.0]), st.floats(0.0, 5.0))
_POS = st.one_of(st.sampled_from([0.5, 1.0, 2.0, 10.0, 100.0]), st.floats(0.01, 500.0))


@st.composite
def cases(draw: Any, max_ver: int = 4) -> dict[str, Any]:
    n = draw(st.integers(1, 6))
    m = draw(st.integers(1, 4))
    n_ver = draw(st.integers(0, max_ver))
    k = [draw(st.integers(1, m)) for _ in range(n)]
    mask = np.array([[j < k[i] for j in range(m)] for i in range(n)], dtype=bool)
    p = np.array([[draw(_P) for _ in range(m)] for _ in range(n)])
    res = np.array(
        [[[draw(st.booleans()) and mask[i, j] for j in range(m)] for _ in range(n_ver)]
         for i in range(n)], dtype=bool,
    ).reshape(n, n_ver, m)
    return {
        "p": p,
        "premise_mask": mask,
        "theta": np.array([draw(_POS) for _ in range(n)]),
        "kappa": np.array([draw(_POS) for _ in range(n)]),
        "resolves": res,
        "cost": np.array([[draw(_COST) for _ in range(n_ver)] for _ in range(n)]).reshape(
            n, n_ver),
        "reliability": np.array([[draw(_R) for _ in range(n_ver)] for _ in range(n)]).reshape(
            n, n_ver),
        "available": np.array([[draw(st.booleans()) or draw(st.booleans())
                                for _ in range(n_ver)] for _ in range(n)],
                              dtype=bool).reshape(n, n_ver),
        "budget": np.array([draw(st.integers(0, 3)) for _ in range(n)]),
    }


def _scalar(gate: Gate, c: dict[str, Any], i: int) -> Any:
    real = np.flatnonzero(c["premise_mask"][i])
    action = CandidateAction(
        action_id=f"a{i}", tool_name="t",
        impact_cost_theta=float(c["theta"][i]), abstention_cost_kappa=float(c["kappa"][i]),
        premises=tuple(Premise(id=f"p{j}", calibrated_violation_probability=float(c["p"][i, j]))
                       for j in real),
    )
    verifiers = [
        Verifier(id=f"v{v}",
                 resolves_premise_ids=tuple(f"p{j}" for j in np.flatnonzero(c["resolves"][i, v])),
                 execution_cost=float(c["cost"][i, v]),
                 symmetric_reliability=float(c["reliability"][i, v]))
        for v in range(c["cost"].shape[1]) if c["available"][i, v]
    ]
    return action, verifiers


def _check_rows(gate_kw: dict[str, Any], c: dict[str, Any]) -> None:
    bd = evaluate_batch(Gate(**gate_kw), **c)
    for i in range(len(bd)):
        # the scalar gate with max_verifications = this row's budget decides as run() would
        # with that many verifications left
        g = Gate(**{**gate_kw, "max_verifications": int(c["budget"][i])})
        action, verifiers = _scalar(g, c, i)
        d = g.evaluate(action, verifiers)
        got = (int(bd.regime[i]), int(bd.verifier[i]), float(bd.voi[i]), float(bd.v_stop[i]),
               float(bd.r_expected[i]), float(bd.h_harm[i]))
        want = (d.regime_code, -1 if d.verifier is None else int(d.verifier.id[1:]),
                -np.inf if d.voi is None else d.voi, d.v_stop, d.r_expected, d.h_harm)
        assert got == want, f"row {i}: batch {got} != scalar {want} ({gate_kw})"


_GATES = [
    {"mode": "seed", "planner": "myopic"},
    {"planner": "myopic"},
    {"planner": "myopic", "lambda_cost_scale": 0.3, "delta_loss_threshold": 1.5,
     "epsilon_harm_bound": 0.2},
    {"planner": "lookahead"},
    {"planner": "lookahead", "lambda_cost_scale": 0.1, "epsilon_harm_bound": 0.3},
    {"mode": "seed", "planner": "myopic", "epsilon_harm_bound": 0.5, "delta_loss_threshold": 2},
]


@pytest.mark.parametrize(
    "gate_kw", _GATES,
    ids=["seed", "myopic", "myopic-tuned", "lookahead", "lookahead-tuned", "seed-loose"],
)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(c=cases())
def test_batch_equals_scalar(gate_kw: dict[str, Any], c: dict[str, Any]) -> None:
    _check_rows(gate_kw, c)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(c=cases(max_ver=10))
def test_batch_equals_scalar_beam(c: dict[str, Any]) -> None:
    # up to 10 verifiers: beyond the planner's exact bound (8), the beam with its myopic floor
    c["budget"] = np.full(c["budget"].shape, 8)
    _check_rows({"planner": "lookahead"}, c)


def test_design_example_three_premises() -> None:
    # DESIGN section 2: three premises at p = 0.04, epsilon 0.05, one perfect verifier each:
    # the myopic rule abstains, the lookahead verifies.
    c = {
        "p": np.full((1, 3), 0.04), "premise_mask": np.ones((1, 3), bool),
        "theta": np.array([10.0]), "kappa": np.array([1.0]),
        "resolves": np.eye(3, dtype=bool)[None], "cost": np.full((1, 3), 0.01),
        "reliability": np.ones((1, 3)),
    }
    assert evaluate_batch(Gate(planner="myopic"), **c).regime.tolist() == [ABSTAIN]
    assert evaluate_batch(Gate(planner="lookahead"), **c).regime.tolist() == [VERIFY]


def test_refusal_abstains_everywhere() -> None:
    c = {
        "p": np.zeros((2, 1)), "premise_mask": np.ones((2, 1), bool),
        "theta": np.ones(2), "kappa": np.ones(2), "resolves": np.ones((2, 1, 1), bool),
        "cost": np.zeros((2, 1)), "reliability": np.ones((2, 1)),
    }
    assert evaluate_batch(Gate(), **c).regime.tolist() == [PROCEED, PROCEED]
    bd = Gate(refusal="artifact refused").evaluate_batch(**c)
    assert bd.regime.tolist() == [ABSTAIN, ABSTAIN]
    assert bd.regime_names() == ["ABSTAIN", "ABSTAIN"]


@pytest.mark.parametrize(
    ("key", "value", "match"),
    [
        ("p", [[0.1, 1.5]], r"p\[0, 1\]=.*1\.5.* must be in \[0, 1\]"),
        ("theta", [0.0], r"theta\[0\]=.* must be > 0"),
        ("kappa", [-1.0], r"kappa\[0\]=.* must be > 0"),
        ("cost", [[-0.5]], r"cost\[0, 0\]=.* must be >= 0"),
        ("reliability", [[0.5]], r"reliability\[0, 0\]=.*0\.5.* must be in \(0\.5, 1\]"),
        ("cost", [[0.1, 0.2]], r"cost has shape \(1, 2\), expected \(1, 1\)"),
    ],
    ids=["p", "theta", "kappa", "cost", "reliability", "shape"],
)
def test_bad_inputs(key: str, value: Any, match: str) -> None:
    c: dict[str, Any] = {
        "p": [[0.1, 0.2]], "premise_mask": [[True, True]], "theta": [1.0], "kappa": [1.0],
        "resolves": [[[True, False]]], "cost": [[0.1]], "reliability": [[0.9]],
    }
    c[key] = value
    with pytest.raises(ValueError, match=match):
        evaluate_batch(Gate(), **c)


def test_padding_is_ignored() -> None:
    # a padded slot holding garbage never reaches the arithmetic
    c = {
        "p": np.array([[0.02, 7.0]]), "premise_mask": np.array([[True, False]]),
        "theta": np.array([50.0]), "kappa": np.array([1.0]),
        "resolves": np.array([[[True, True], [False, True]]]),
        "cost": np.array([[0.1, -3.0]]), "reliability": np.array([[0.9, 0.1]]),
        "available": np.array([[True, False]]),
    }
    bd = evaluate_batch(Gate(planner="myopic"), **c)
    c1 = {k: v for k, v in c.items()}
    c1.update(p=np.array([[0.02]]), premise_mask=np.array([[True]]),
              resolves=np.array([[[True]]]), cost=np.array([[0.1]]),
              reliability=np.array([[0.9]]), available=np.array([[True]]))
    one = evaluate_batch(Gate(planner="myopic"), **c1)
    assert (bd.regime[0], bd.voi[0]) == (one.regime[0], one.voi[0])


@settings(max_examples=200, deadline=None)
@given(p=_P, r=_R, confirm=st.booleans(), mode=st.sampled_from(["amv", "seed"]))
def test_update_equals_scalar(p: float, r: float, confirm: bool, mode: str) -> None:
    from amv_calib.gate import update_posteriors

    v = Verifier(id="v", resolves_premise_ids=("a", "b"), execution_cost=0.0,
                 symmetric_reliability=r)
    want = update_posteriors({"a": p, "b": 0.3}, v, {"a": confirm, "b": not confirm},
                             mode=mode)  # type: ignore[arg-type]
    gate = Gate(mode=mode)  # type: ignore[arg-type]
    got = update_batch(gate, np.array([[p, 0.3]]), np.ones((1, 2), bool),
                       np.ones((1, 2), bool), np.array([[confirm, not confirm]]),
                       np.array([r]))
    assert got[0].tolist() == [want["a"], want["b"]]
    assert 0.0 <= posterior_batch(np.array([p]), np.array([r]), np.array([confirm]))[0] <= 1.0


@pytest.mark.parametrize("kw", [{"planner": "myopic"}, {"planner": "lookahead"},
                                {"mode": "seed"}], ids=["myopic", "lookahead", "seed"])
def test_no_verifications_allowed_never_verifies(kw: dict[str, Any]) -> None:
    # max_verifications=0 and no budget: every row as the scalar gate decides it, none VERIFY
    rng = np.random.default_rng(3)
    n, m, n_ver = 40, 2, 2
    c = {"p": rng.choice([0.005, 0.2], (n, 1)) * rng.random((n, m)),
         "premise_mask": np.ones((n, m), dtype=bool),
         "theta": rng.uniform(1.0, 50.0, n), "kappa": rng.uniform(2.0, 10.0, n),
         "resolves": np.ones((n, n_ver, m), dtype=bool), "cost": np.full((n, n_ver), 0.01),
         "reliability": np.full((n, n_ver), 0.95)}
    gate = Gate(max_verifications=0, **kw)
    bd = evaluate_batch(gate, **c)
    assert VERIFY not in bd.regime.tolist() and (bd.voi == -np.inf).all()
    assert {ABSTAIN, PROCEED} <= set(bd.regime.tolist())
    for i in range(n):
        action, verifiers = _scalar(gate, {**c, "available": np.ones((n, n_ver), bool)}, i)
        assert gate.evaluate(action, verifiers).regime_code == int(bd.regime[i])
