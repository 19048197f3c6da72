"""Calibrators: parameter recovery on their own model families, the reference beta fit,
portable equivalence, input handling, and scikit-learn's estimator checks."""

from __future__ import annotations

import pickle
from typing import Any

import numpy as np
import pandas as pd
import pytest
from scipy import optimize
from sklearn.base import BaseEstimator, ClassifierMixin, clone
from sklearn.isotonic import IsotonicRegression
from sklearn.linear_model import LogisticRegression
from sklearn.utils.estimator_checks import estimator_checks_generator
from sklearn.utils.metaestimators import available_if
from sklearn.utils.validation import check_is_fitted, validate_data

from amv_calib import InsufficientDataError
from amv_calib.calibration import _metrics as M
from amv_calib.calibration._calibrators import (
    COEF_DIGITS,
    DEFAULT_PLATT_MAP,
    INDEX_DECIMALS,
    RICH_PLATT_MAP,
    BetaCalibrator,
    IsotonicCalibrator,
    PlattCalibrator,
    SeedPriorCalibrator,
    _split_parts,
)
from amv_calib.contract._features import FeatureMap, PortableCalibrator, Term
from amv_calib.contract._schema import CLAIM_FEATURES


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-z))


def _claims(n: int, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame(
        {
            "claim_id": [f"c{i // 2}" for i in range(n)],
            "recency_hours": rng.gamma(1.0, 300.0, size=n),
            "source_trust_score": rng.beta(2.0, 2.0, size=n),
            "model_confidence": rng.beta(2.0, 1.5, size=n),
            "contradiction_flag": rng.random(n) < 0.15,
        }
    )


def _draw(p: np.ndarray, seed: int) -> np.ndarray:
    return (np.random.default_rng(seed).random(p.size) < p).astype(np.int64)


# -- Platt ------------------------------------------------------------------------------------
PLATT_TRUE = (-1.0, np.array([-1.0, 1.8, -1.2, 2.0]))


@pytest.fixture(scope="module")
def platt_data() -> tuple[pd.DataFrame, np.ndarray, np.ndarray]:
    X = _claims(100_000, seed=1)
    b, w = PLATT_TRUE
    p = _sigmoid(b + DEFAULT_PLATT_MAP.transform(X) @ w)
    return X, _draw(p, 2), p


def test_platt_recovers_its_parameters(platt_data: tuple[Any, ...]) -> None:
    X, y, _ = platt_data
    est = PlattCalibrator(C=None).fit(X, y)
    assert est.intercept_ == pytest.approx(PLATT_TRUE[0], abs=0.05)
    np.testing.assert_allclose(est.coef_, PLATT_TRUE[1], atol=0.06)
    assert list(est.classes_) == [0, 1]


def test_platt_matches_bare_logistic_regression(platt_data: tuple[Any, ...]) -> None:
    X, y, _ = platt_data
    est = PlattCalibrator(C=0.5).fit(X, y)
    F = DEFAULT_PLATT_MAP.transform(X)
    bare = LogisticRegression(C=0.5, solver="newton-cholesky", tol=1e-8).fit(F, y)
    # The calibrator writes (and predicts with) the bare fit's values at COEF_DIGITS
    # significant digits: a relative change of at most half a unit in the last digit.
    np.testing.assert_allclose(est.coef_, bare.coef_[0], rtol=0.5 * 10.0 ** (1 - COEF_DIGITS))
    bare.coef_ = np.array([[float(f"{c:.{COEF_DIGITS}g}") for c in bare.coef_[0]]])
    bare.intercept_ = np.array([float(f"{bare.intercept_[0]:.{COEF_DIGITS}g}")])
    np.testing.assert_array_equal(est.coef_, bare.coef_[0])
    np.testing.assert_allclose(est.predict_proba(X), bare.predict_proba(F), atol=1e-12)
    np.testing.assert_allclose(est.decision_function(X), bare.decision_function(F), atol=1e-10)
    # Unpenalised, against an independent maximum-likelihood fit.
    free = PlattCalibrator(C=None).fit(X, y)
    theta = _nll_fit(F, y.astype(float))
    assert free.intercept_ == pytest.approx(theta[0], abs=1e-6)
    np.testing.assert_allclose(free.coef_, theta[1:], atol=1e-6)


def test_rich_map_nests_the_seed_map(platt_data: tuple[Any, ...]) -> None:
    X, y, p = platt_data
    assert RICH_PLATT_MAP.terms[:4] == DEFAULT_PLATT_MAP.terms
    rich = PlattCalibrator(feature_map=RICH_PLATT_MAP, C=None).fit(X, y)
    seed = PlattCalibrator(C=None).fit(X, y)
    # Nested maps: the richer fit's likelihood is at least the seed map's, and on data from
    # the seed map's family its probabilities are still the true ones.
    assert M.log_loss(y, rich.predict_proba(X)[:, 1]) <= M.log_loss(
        y, seed.predict_proba(X)[:, 1]) + 1e-12
    assert np.mean(np.abs(rich.predict_proba(X)[:, 1] - p)) < 0.01


# -- Beta -------------------------------------------------------------------------------------
BETA_TERMS = FeatureMap(
    (
        Term(column="model_confidence", transform="log"),
        Term(column="model_confidence", transform="log1m"),
        Term(column="source_trust_score", transform="log"),
        Term(column="source_trust_score", transform="log1m"),
        Term(column="recency_hours", transform="ramp", scale=720.0),
        Term(column="contradiction_flag", transform="indicator"),
    )
)
BETA_TRUE = (0.2, np.array([-0.6, -0.9, -0.4, -0.3, 1.5, 1.8]))


def test_beta_recovers_its_parameters() -> None:
    X = _claims(100_000, seed=3)
    b, w = BETA_TRUE
    y = _draw(_sigmoid(b + BETA_TERMS.transform(X) @ w), 4)
    est = BetaCalibrator(C=None).fit(X, y)
    assert est.feature_map_.names == BETA_TERMS.names
    assert est.intercept_ == pytest.approx(b, abs=0.06)
    np.testing.assert_allclose(est.coef_, w, atol=0.06)
    assert est.dropped_terms_ == []
    assert est.n_fits_ == 1


def _nll_fit(F: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Maximum-likelihood logistic fit by Newton's method on (intercept, coef)."""
    A = np.column_stack([np.ones(len(y)), F])

    def f(theta: np.ndarray) -> float:
        z = A @ theta
        return float(np.sum(np.logaddexp(0.0, z) - y * z))

    def grad(theta: np.ndarray) -> np.ndarray:
        return A.T @ (_sigmoid(A @ theta) - y)

    def hess(theta: np.ndarray) -> np.ndarray:
        q = _sigmoid(A @ theta)
        return (A * (q * (1 - q))[:, None]).T @ A

    res = optimize.minimize(f, np.zeros(A.shape[1]), jac=grad, hess=hess,
                            method="trust-exact", options={"gtol": 1e-10})
    return np.asarray(res.x)


def _reference_abm(s: np.ndarray, y: np.ndarray) -> tuple[float, float, float]:
    """Beta calibration ``abm`` as described by Kull et al. (2017): logistic regression on
    ``[ln s, -ln(1 - s)]``; if the weight of ``ln s`` is negative refit on ``-ln(1 - s)``
    alone, else if the other is negative refit on ``ln s`` alone. Returns (a, b, c)."""
    x1, x2 = np.log(s), -np.log(1.0 - s)
    c, a, b = _nll_fit(np.column_stack([x1, x2]), y)
    if a < 0:
        c, b = _nll_fit(x2[:, None], y)
        a = 0.0
    elif b < 0:
        c, a = _nll_fit(x1[:, None], y)
        b = 0.0
    return float(a), float(b), float(c)


@pytest.mark.parametrize(
    ("a", "b", "c"),
    [(1.2, 0.8, 0.1), (1.5, -0.6, -0.2), (-0.5, 1.0, 0.3)],
    ids=["interior", "drops-log1m", "drops-log"],
)
def test_beta_single_score_reproduces_reference_abm(a: float, b: float, c: float) -> None:
    rng = np.random.default_rng(5)
    n = 20_000
    s = rng.uniform(0.02, 0.98, size=n)
    y = _draw(_sigmoid(a * np.log(s) - b * np.log(1 - s) + c), 6).astype(float)
    X = np.column_stack([np.zeros(n), np.full(n, 0.5), s, np.zeros(n)])
    est = BetaCalibrator(scores=[("model_confidence", "increasing")], extra_map=(),
                         C=None, tol=1e-10).fit(X, y)
    ra, rb, rc = _reference_abm(s, y)
    assert est.coef_[0] == pytest.approx(ra, abs=1e-5)
    assert est.coef_[1] == pytest.approx(rb, abs=1e-5)
    assert est.intercept_ == pytest.approx(rc, abs=1e-5)
    assert est.n_fits_ == (1 if min(a, b) > 0 else 2)
    # And the betacal recipe itself (LogisticRegression(C=99999999999)) agrees.
    x = np.column_stack([np.log(s), -np.log(1 - s)])
    lr = LogisticRegression(C=99999999999, tol=1e-10, max_iter=1000).fit(x, y)
    if lr.coef_[0, 0] < 0:
        lr = LogisticRegression(C=99999999999, tol=1e-10, max_iter=1000).fit(x[:, 1:], y)
        assert est.coef_[1] == pytest.approx(lr.coef_[0, 0], abs=1e-4)
    elif lr.coef_[0, 1] < 0:
        lr = LogisticRegression(C=99999999999, tol=1e-10, max_iter=1000).fit(x[:, :1], y)
        assert est.coef_[0] == pytest.approx(lr.coef_[0, 0], abs=1e-4)
    else:
        np.testing.assert_allclose(est.coef_, lr.coef_[0], atol=1e-4)


def test_beta_decreasing_is_abm_on_one_minus_s() -> None:
    rng = np.random.default_rng(8)
    n = 20_000
    s = rng.uniform(0.02, 0.98, size=n)
    # log1m weight -1.5 meets the decreasing constraint, log weight +0.6 breaks it.
    y = _draw(_sigmoid(1.5 * np.log(1 - s) + 0.6 * np.log(s) + 0.2), 9)
    base = np.column_stack([np.zeros(n), np.full(n, 0.5), s, np.zeros(n)])
    flipped = base.copy()
    flipped[:, 2] = 1.0 - s
    kw: dict[str, Any] = {"extra_map": (), "C": None, "tol": 1e-10}
    dec = BetaCalibrator(scores=[("model_confidence", "decreasing")], **kw).fit(base, y)
    inc = BetaCalibrator(scores=[("model_confidence", "increasing")], **kw).fit(flipped, y)
    # On s' = 1 - s: a ln s' + b log1m(s') = -a log1m(s) - b log(s).
    assert dec.coef_[0] == pytest.approx(-inc.coef_[1], abs=1e-6)
    assert dec.coef_[1] == pytest.approx(-inc.coef_[0], abs=1e-6)
    assert dec.dropped_terms_ == ["log(model_confidence)"]
    assert np.all(dec.coef_ <= 0)
    np.testing.assert_allclose(dec.predict_proba(base), inc.predict_proba(flipped), atol=1e-7)


def test_beta_keeps_refitting_until_the_constraints_hold() -> None:
    # Violation rising with s breaks a "decreasing" constraint on both terms: the first
    # refit drops log1m and still has a positive log weight, so that goes too (the
    # reference would stop after one refit) and the model is the base rate.
    rng = np.random.default_rng(8)
    s = rng.uniform(0.02, 0.98, size=20_000)
    y = _draw(_sigmoid(-1.5 * np.log(1 - s) + 0.6 * np.log(s) + 0.2), 9)
    X = np.column_stack([np.zeros(s.size), np.full(s.size, 0.5), s, np.zeros(s.size)])
    with pytest.warns(UserWarning, match=r"decreasing constraint on score model_confidence "
                      r"dropped both of its terms \(log\(model_confidence\), "
                      r"log1m\(model_confidence\)\)"):
        est = BetaCalibrator(scores=[("model_confidence", "decreasing")], extra_map=(),
                             C=None).fit(X, y)
    assert est.dropped_terms_ == ["log(model_confidence)", "log1m(model_confidence)"]
    assert est.n_fits_ == 3
    np.testing.assert_allclose(est.predict_proba(X)[:, 1], y.mean(), atol=1e-6)


# -- isotonic ---------------------------------------------------------------------------------
def _seed_index(X: pd.DataFrame) -> np.ndarray:
    c = np.clip(X["model_confidence"].to_numpy(), 1e-5, 1 - 1e-5)
    return (-0.85 - 1.42 * np.log(c / (1 - c))
            + 2.15 * np.minimum(1.0, X["recency_hours"].to_numpy() / 720.0)
            - 1.80 * X["source_trust_score"].to_numpy()
            + 2.5 * X["contradiction_flag"].to_numpy())


def _step_link(z: np.ndarray) -> np.ndarray:
    return np.where(z < -2.0, 0.05, np.where(z < 0.0, 0.2, np.where(z < 1.5, 0.45, 0.8)))


@pytest.fixture(scope="module")
def step_data() -> tuple[pd.DataFrame, np.ndarray, np.ndarray]:
    X = _claims(100_000, seed=10)
    p = _step_link(_seed_index(X))
    return X, _draw(p, 11), p


def test_isotonic_recovers_a_step_link(step_data: tuple[Any, ...]) -> None:
    X, y, p = step_data
    est = IsotonicCalibrator(index="seed").fit(X, y)
    got = est.predict_proba(X)[:, 1]
    z = _seed_index(X)
    # Away from the three jumps the fitted table is the generating step function.
    far = np.min(np.abs(z[:, None] - np.array([-2.0, 0.0, 1.5])[None, :]), axis=1) > 0.3
    assert np.mean(np.abs(got[far] - p[far])) < 0.015


def test_isotonic_portable_table_is_sklearns(step_data: tuple[Any, ...]) -> None:
    X, y, _ = step_data
    est = IsotonicCalibrator(index="seed").fit(X, y)
    port = est.to_portable()
    assert port.kind == "isotonic"
    z = port.decision_function(X)
    np.testing.assert_allclose(z, _seed_index(X), atol=1e-12)
    # The table is sklearn's on the index rounded to INDEX_DECIMALS decimals: exactly at the
    # knots, to rounding between them.
    iso = IsotonicRegression(out_of_bounds="clip").fit(np.round(z, INDEX_DECIMALS), y)
    x_k = np.asarray(port.x_knots)
    np.testing.assert_array_equal(x_k, iso.X_thresholds_)
    np.testing.assert_allclose(port.y_knots, iso.y_thresholds_, rtol=0, atol=1e-13)
    np.testing.assert_allclose(np.interp(x_k, x_k, port.y_knots), iso.predict(x_k),
                               rtol=0, atol=1e-13)
    np.testing.assert_array_equal(np.interp(x_k, x_k, port.y_knots), port.y_knots)
    np.testing.assert_allclose(est.predict_proba(X)[:, 1], iso.predict(z), atol=1e-12)
    np.testing.assert_array_equal(port.predict(X), est.predict_proba(X)[:, 1])


def test_isotonic_strict_breaks_ties(platt_data: tuple[Any, ...]) -> None:
    X, y, _ = platt_data
    train, test = slice(0, 50_000), slice(50_000, None)
    plain = IsotonicCalibrator().fit(X.iloc[train], y[train])
    strict = IsotonicCalibrator(strict=True).fit(X.iloc[train], y[train])
    assert np.all(np.diff(strict.y_knots_) > 0)
    assert np.all(np.diff(strict.x_knots_) > 0)
    Xt, yt = X.iloc[test], y[test]
    p_plain, p_strict = plain.predict_proba(Xt)[:, 1], strict.predict_proba(Xt)[:, 1]
    z = strict.to_portable().decision_function(Xt)
    inside = (z > strict.x_knots_[0]) & (z < strict.x_knots_[-1])
    assert np.unique(p_strict[inside]).size == np.unique(z[inside]).size
    assert np.unique(p_plain).size < 0.1 * np.unique(p_strict).size
    # Held out, with a smooth true link: the index orders rows inside a block too, so the
    # strict map keeps the index's AUC, which the step function gives away in its ties.
    auc_index = M.roc_auc(yt, z)
    assert M.roc_auc(yt, p_plain) < M.roc_auc(yt, p_strict)
    assert M.roc_auc(yt, p_strict) == pytest.approx(auc_index, abs=2e-4)
    assert M.log_loss(yt, p_strict) <= M.log_loss(yt, p_plain) + 1e-3


def test_isotonic_cross_fitting_uses_other_parts_only(step_data: tuple[Any, ...]) -> None:
    X, y, _ = step_data
    Xs, ys = X.iloc[:4000], y[:4000]
    est = IsotonicCalibrator(cv=2, random_state=3)
    F = DEFAULT_PLATT_MAP.transform(Xs)
    z, b, coef, _ = est._cross_fit_index(F, ys.astype(float), np.ones(len(ys)),
                                         Xs["claim_id"].to_numpy(), DEFAULT_PLATT_MAP.names)
    parts = _split_parts(len(ys), Xs["claim_id"].to_numpy(), 2, 3)
    others = [PlattCalibrator().fit(Xs[parts != k], ys[parts != k]) for k in (0, 1)]
    for k in (0, 1):
        np.testing.assert_allclose(z[parts == k], others[k].decision_function(Xs[parts == k]),
                                   atol=1e-9)
    # The deployed index is the mean of the two part indexes.
    assert b == pytest.approx((others[0].intercept_ + others[1].intercept_) / 2, abs=1e-12)
    np.testing.assert_allclose(coef, (others[0].coef_ + others[1].coef_) / 2, atol=1e-12)
    fitted = IsotonicCalibrator(cv=2, random_state=3).fit(Xs, ys)
    np.testing.assert_allclose(fitted.coef_, coef, atol=1e-12)


def test_split_parts_keeps_claims_whole() -> None:
    groups = np.array(["a", "b", "a", "c", "b", "d", "a"])
    parts = _split_parts(groups.size, groups, 2, 0)
    for g in np.unique(groups):
        assert np.unique(parts[groups == g]).size == 1
    assert np.array_equal(parts, _split_parts(groups.size, groups, 2, 0))


def test_isotonic_on_platt_family_matches_platt(platt_data: tuple[Any, ...]) -> None:
    X, y, p = platt_data
    est = IsotonicCalibrator().fit(X, y)
    assert np.mean(np.abs(est.predict_proba(X)[:, 1] - p)) < 0.01


def test_isotonic_decreasing_map_is_portable(step_data: tuple[Any, ...]) -> None:
    X, y, _ = step_data
    est = IsotonicCalibrator(index="seed", increasing=False).fit(X, 1 - y)
    port = est.to_portable()
    np.testing.assert_array_equal(port.predict(X), est.predict_proba(X)[:, 1])
    z = _seed_index(X)
    assert np.corrcoef(z, port.predict(X))[0, 1] < -0.5


# -- seed prior -------------------------------------------------------------------------------
def test_seed_prior_is_the_seed_formula(step_data: tuple[Any, ...]) -> None:
    X, y, _ = step_data
    est = SeedPriorCalibrator().fit(X, y)
    want = np.clip(_sigmoid(_seed_index(X)), 0.001, 0.999)
    np.testing.assert_allclose(est.predict_proba(X)[:, 1], want, rtol=1e-12)
    assert est.to_portable().clamp == (0.001, 0.999)
    assert est.to_portable(clamp=(0.01, 0.99)).clamp == (0.01, 0.99)


# -- portable equivalence and input handling --------------------------------------------------
ALL = [
    pytest.param(PlattCalibrator(), id="platt"),
    pytest.param(PlattCalibrator(feature_map=RICH_PLATT_MAP), id="platt-rich"),
    pytest.param(BetaCalibrator(), id="beta"),
    pytest.param(IsotonicCalibrator(), id="isotonic"),
    pytest.param(IsotonicCalibrator(strict=True), id="isotonic-strict"),
    pytest.param(SeedPriorCalibrator(), id="seed"),
]


@pytest.fixture(scope="module")
def mixed() -> tuple[pd.DataFrame, np.ndarray]:
    X = _claims(5000, seed=20)
    p = _sigmoid(-0.5 + DEFAULT_PLATT_MAP.transform(X) @ np.array([-0.8, 1.0, -1.0, 1.5]))
    X.loc[:10, "model_confidence"] = [0.0, 1.0] * 5 + [0.0]  # extreme scores stay finite
    return X, _draw(p, 21)


@pytest.mark.parametrize("est", ALL)
def test_to_portable_reproduces_predict_proba(est: Any, mixed: tuple[Any, ...]) -> None:
    X, y = mixed
    fitted = clone(est).fit(X, y)
    want = fitted.predict_proba(X)[:, 1]
    port = fitted.to_portable()
    again = PortableCalibrator.from_dict(port.to_dict())
    assert np.all(np.isfinite(want))
    np.testing.assert_allclose(port.predict(X), want, rtol=0, atol=1e-12)
    np.testing.assert_allclose(again.predict(X), want, rtol=0, atol=1e-12)
    row = X.iloc[3][list(CLAIM_FEATURES)].astype(float).to_dict()
    assert again.predict_one(row) == pytest.approx(want[3], abs=1e-12)
    clamped = fitted.to_portable(clamp=(0.01, 0.99))
    np.testing.assert_allclose(clamped.predict(X), np.clip(want, 0.01, 0.99), atol=1e-12)


@pytest.mark.parametrize("est", ALL)
def test_frame_and_array_inputs_agree(est: Any, mixed: tuple[Any, ...]) -> None:
    X, y = mixed
    arr = X[list(CLAIM_FEATURES)].to_numpy(dtype=float)
    shuffled = X[["contradiction_flag", "claim_id", "model_confidence", "recency_hours",
                  "source_trust_score"]].assign(extra=1.0)
    a = clone(est).fit(shuffled, y.astype(bool)).predict_proba(arr)
    b = clone(est).fit(X, y).predict_proba(shuffled)
    if isinstance(est, IsotonicCalibrator):
        # Without claim_id the part split is by row, so the tables differ slightly.
        c = clone(est).fit(arr, y).predict_proba(X)
        np.testing.assert_allclose(a, b, atol=1e-12)
        assert np.mean(np.abs(c - a)) < 0.05
    else:
        np.testing.assert_allclose(a, b, atol=1e-12)
        np.testing.assert_allclose(clone(est).fit(arr, y).predict_proba(X), a, atol=1e-12)


@pytest.mark.parametrize("est", ALL)
def test_labels_pickling_and_weights(est: Any, mixed: tuple[Any, ...]) -> None:
    X, y = mixed
    labels = np.where(y == 1, "violated", "ok")
    fitted = clone(est).fit(X, labels)
    assert list(fitted.classes_) == ["ok", "violated"]
    p = fitted.predict_proba(X)[:, 1]
    assert set(fitted.predict(X)) <= {"ok", "violated"}
    np.testing.assert_array_equal(fitted.predict(X) == "violated", p > 0.5)
    restored = pickle.loads(pickle.dumps(fitted))
    np.testing.assert_array_equal(restored.predict_proba(X), fitted.predict_proba(X))
    if not isinstance(est, IsotonicCalibrator):  # its seeded split depends on the rows
        w = np.random.default_rng(0).integers(0, 3, size=len(y))
        idx = np.repeat(np.arange(len(y)), w)
        a = clone(est).fit(X, y, sample_weight=w).predict_proba(X)
        b = clone(est).fit(X.iloc[idx], y[idx]).predict_proba(X)
        np.testing.assert_allclose(a, b, atol=1e-5)


@pytest.mark.parametrize("est", [
    PlattCalibrator(C=0.5, max_iter=50, tol=1e-6),
    BetaCalibrator(C=0.5, max_iter=50, tol=1e-6),
    IsotonicCalibrator(C=0.5, max_iter=50, tol=1e-6),
    IsotonicCalibrator(index="seed", C=0.5, max_iter=50, tol=1e-6),
], ids=["platt", "beta", "isotonic", "isotonic-seed"])
def test_logistic_settings_and_fitted_attributes(est: Any, mixed: tuple[Any, ...]) -> None:
    # The three calibrators that fit logistic regressions share their settings and keep
    # the fitted model the same way: the attributes are the portable form's.
    assert {k: v for k, v in clone(est).get_params().items()
            if k in ("C", "max_iter", "tol")} == {"C": 0.5, "max_iter": 50, "tol": 1e-6}
    X, y = mixed
    fitted = clone(est).fit(X, y)
    port = fitted.portable_
    assert fitted.feature_map_ is port.feature_map
    assert fitted.intercept_ == port.intercept
    assert tuple(fitted.coef_.tolist()) == port.coef
    assert isinstance(fitted.n_iter_, int) and fitted.n_iter_ >= 0
    if isinstance(est, IsotonicCalibrator):
        assert port.kind == "isotonic"
        assert port.x_knots == tuple(fitted.x_knots_.tolist())
        assert port.y_knots == tuple(fitted.y_knots_.tolist())
    else:
        assert port.kind == "linear" and port.x_knots == port.y_knots == ()
    assert port.source == {"PlattCalibrator": "platt", "BetaCalibrator": "beta",
                           "IsotonicCalibrator": "isotonic"}[type(est).__name__]


def test_constant_feature_gets_weight_zero_with_a_warning() -> None:
    X = _claims(500, seed=30)
    X["source_trust_score"] = 0.7
    y = _draw(np.full(500, 0.3), 31)
    with pytest.warns(UserWarning, match=r"identity\(source_trust_score\)=0.7"):
        est = PlattCalibrator(C=None).fit(X, y)
    assert est.coef_[2] == 0.0
    without = FeatureMap(DEFAULT_PLATT_MAP.terms[:2] + DEFAULT_PLATT_MAP.terms[3:])
    other = PlattCalibrator(C=None, feature_map=without).fit(X, y)
    np.testing.assert_allclose(est.predict_proba(X), other.predict_proba(X), atol=1e-9)


@pytest.mark.parametrize(
    ("X", "y", "exc", "match"),
    [
        (np.zeros((4, 4)), [1, 1, 1, 1], InsufficientDataError, "only one class"),
        (np.zeros((4, 3)), [0, 1, 0, 1], ValueError, "n_features=3"),
        (np.zeros((4, 4)), [0, 1, 2, 1], ValueError, "Only binary classification"),
        (pd.DataFrame({"recency_hours": [1.0, 2.0]}), [0, 1], ValueError,
         r"lack column\(s\) \['source_trust_score', 'model_confidence'"),
        (pd.DataFrame({"a": [1.0, 2.0]}), [0, 1], ValueError, "n_features=1"),
    ],
    ids=["one-class", "width", "multiclass", "frame-missing-columns", "generic-frame"],
)
def test_bad_fit_input(X: Any, y: Any, exc: type[Exception], match: str) -> None:
    with pytest.raises(exc, match=match):
        PlattCalibrator().fit(X, y)


def test_bad_parameters() -> None:
    X, y = np.random.default_rng(0).random((40, 4)), np.tile([0, 1], 20)
    with pytest.raises(ValueError, match="cv=1"):
        IsotonicCalibrator(cv=1).fit(X, y)
    with pytest.raises(ValueError, match="out_of_bounds='nan'"):
        IsotonicCalibrator(out_of_bounds="nan").fit(X, y)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="direction='up'"):
        BetaCalibrator(scores=[("model_confidence", "up")]).fit(X, y)
    with pytest.raises(ValueError, match="not a claim feature"):
        BetaCalibrator(scores=[("age", "increasing")]).fit(X, y)


# -- scikit-learn estimator checks ------------------------------------------------------------
# The checks' data sets hold constant columns, whose terms get weight 0 with a warning.
# These checks generate X with 1, 2, 3, 5, 10, 20 or 30 columns. A calibrator reads exactly
# the four claim features by contract and refuses any other width, so they cannot apply
# directly; each is asserted to fail on exactly that refusal, and all of them run in
# ``test_sklearn_checks_on_four_columns`` through an adapter that feeds four columns.
_WIDTH_CHECKS = frozenset(
    {
        "check_classifier_data_not_an_array", "check_classifiers_classes",
        "check_classifiers_train", "check_decision_proba_consistency",
        "check_dict_unchanged", "check_dont_overwrite_parameters", "check_dtype_object",
        "check_estimators_dtypes", "check_estimators_fit_returns_self",
        "check_estimators_nan_inf", "check_estimators_overwrite_params",
        "check_estimators_pickle", "check_f_contiguous_array_estimator",
        "check_fit2d_predict1d", "check_fit_check_is_fitted", "check_fit_idempotent",
        "check_fit_score_takes_y", "check_methods_sample_order_invariance",
        "check_methods_subset_invariance", "check_n_features_in",
        "check_pipeline_consistency", "check_readonly_memmap_input",
        "check_sample_weight_equivalence_on_dense_data", "check_sample_weights_list",
        "check_sample_weights_not_an_array", "check_sample_weights_not_overwritten",
        "check_sample_weights_pandas_series", "check_sample_weights_shape",
        "check_supervised_y_2d",
    }
)
WIDTH_REASON = "generates X with a width other than the four claim features"


def expected_failed_checks(estimator: Any) -> dict[str, str]:
    """For ``parametrize_with_checks``: the checks that cannot apply, with the reason."""
    names = set(_WIDTH_CHECKS)
    if not hasattr(estimator, "decision_function"):
        names.discard("check_decision_proba_consistency")  # nothing to check, passes
    return dict.fromkeys(sorted(names), WIDTH_REASON)


def _messages(exc: BaseException | None) -> str:
    """The messages of an exception and of the ones it was raised from or during."""
    out = []
    while exc is not None:
        out.append(str(exc))
        exc = exc.__cause__ or exc.__context__
    return " | ".join(out)


def _check_cases(estimators: list[Any]) -> list[Any]:
    cases = []
    for est in estimators:
        for e, check in estimator_checks_generator(est, mark=None):
            func = getattr(check, "func", check)
            kw = getattr(check, "keywords", {})
            suffix = "" if not kw else "(" + ",".join(f"{k}={v}" for k, v in kw.items()) + ")"
            cases.append(pytest.param(e, check, func.__name__,
                                      id=f"{type(est).__name__}-{func.__name__}{suffix}"))
    return cases


_ESTIMATORS = [PlattCalibrator(), BetaCalibrator(), IsotonicCalibrator(), SeedPriorCalibrator()]


@pytest.mark.filterwarnings("ignore:feature term\\(s\\).*constant:UserWarning")
@pytest.mark.filterwarnings("ignore:BetaCalibrator.*dropped both:UserWarning")
@pytest.mark.parametrize(("estimator", "check", "name"), _check_cases(_ESTIMATORS))
def test_sklearn_checks(estimator: Any, check: Any, name: str) -> None:
    if name in expected_failed_checks(estimator):
        with pytest.raises((ValueError, AssertionError)) as info:
            check(estimator)
        assert "read exactly the 4 claim features" in _messages(info.value)
    else:
        check(estimator)


class _FourColumns(ClassifierMixin, BaseEstimator):  # type: ignore[misc]
    """Test adapter: maps any-width numeric X to four claim columns, then calibrates.

    recency = 100 |x0|, trust = sigmoid(x1), confidence = sigmoid(x2), contradiction =
    x3 > 0 (columns taken modulo the width), so every generic check reaches the calibrator
    with data it accepts.
    """

    def __init__(self, calibrator: Any = None) -> None:
        self.calibrator = calibrator

    def _claims(self, X: Any, reset: bool) -> np.ndarray:
        X = validate_data(self, X, reset=reset, dtype=np.float64)
        k = X.shape[1]
        return np.column_stack([100.0 * np.abs(X[:, 0]), _sigmoid(X[:, 1 % k]),
                                _sigmoid(X[:, 2 % k]), (X[:, 3 % k] > 0).astype(float)])

    def fit(self, X: Any, y: Any, sample_weight: Any = None) -> _FourColumns:
        self.calibrator_ = clone(self.calibrator).fit(self._claims(X, True), y, sample_weight)
        self.classes_ = self.calibrator_.classes_
        if hasattr(self.calibrator_, "n_iter_"):
            self.n_iter_ = self.calibrator_.n_iter_
        return self

    def predict_proba(self, X: Any) -> np.ndarray:
        check_is_fitted(self)
        return self.calibrator_.predict_proba(self._claims(X, False))  # type: ignore[no-any-return]

    def predict(self, X: Any) -> np.ndarray:
        check_is_fitted(self)
        return self.calibrator_.predict(self._claims(X, False))  # type: ignore[no-any-return]

    def _has_decision(self) -> bool:
        return hasattr(self.calibrator, "decision_function")

    @available_if(_has_decision)
    def decision_function(self, X: Any) -> np.ndarray:
        check_is_fitted(self)
        return self.calibrator_.decision_function(  # type: ignore[no-any-return]
            self._claims(X, False))

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        tags.classifier_tags.multi_class = False
        tags.classifier_tags.poor_score = True
        return tags


_ADAPTER_XFAIL = {
    # The seeded part split of cross-fitting sees repeated rows as distinct rows.
    ("IsotonicCalibrator", "check_sample_weight_equivalence_on_dense_data"),
}


def _adapter_cases() -> list[Any]:
    cases = []
    for est in _ESTIMATORS:
        for p in _check_cases([_FourColumns(est)]):
            e, check, name = p.values
            cal = type(est).__name__
            marks = [pytest.mark.xfail(strict=True, reason="see _ADAPTER_XFAIL")] if (
                (cal, name) in _ADAPTER_XFAIL) else []
            cases.append(pytest.param(e, check, id=f"{cal}-{name}-{p.id.split('-', 1)[1]}",
                                      marks=marks))
    return cases


@pytest.mark.filterwarnings("ignore:feature term\\(s\\).*constant:UserWarning")
@pytest.mark.filterwarnings("ignore:BetaCalibrator.*dropped both:UserWarning")
@pytest.mark.parametrize(("estimator", "check"), _adapter_cases())
def test_sklearn_checks_on_four_columns(estimator: Any, check: Any) -> None:
    check(estimator)


def test_width_checks_listed_are_real() -> None:
    names = {getattr(c, "func", c).__name__ for _, c in
             estimator_checks_generator(PlattCalibrator(), mark=None)}
    assert _WIDTH_CHECKS <= names
