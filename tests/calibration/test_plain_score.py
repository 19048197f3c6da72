"""Calibrators of one plain score (a classifier's probability, a judge's confidence): inputs,
direction, the floor inside the logarithms, the portable form, warnings, and the comparison
with scikit-learn's ``CalibratedClassifierCV`` and ``betacal`` on breast-cancer data."""

from __future__ import annotations

import json
import math
import warnings
from typing import Any

import numpy as np
import pandas as pd
import pytest
from scipy import optimize
from sklearn.base import BaseEstimator, ClassifierMixin, clone
from sklearn.calibration import CalibratedClassifierCV
from sklearn.datasets import load_breast_cancer
from sklearn.frozen import FrozenEstimator
from sklearn.isotonic import IsotonicRegression
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import train_test_split
from sklearn.naive_bayes import GaussianNB
from sklearn.utils.estimator_checks import estimator_checks_generator
from sklearn.utils.validation import check_is_fitted, validate_data

from amv_calib.calibration import _metrics as M
from amv_calib.calibration._calibrators import (
    DEFAULT_PLATT_MAP,
    SCORE_COLUMN,
    SCORE_EPS,
    BetaCalibrator,
    IsotonicCalibrator,
    PlattCalibrator,
    score_features,
    score_map,
)
from amv_calib.contract._features import SEED_FEATURE_MAP, PortableCalibrator, Term


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-z))


@pytest.fixture(scope="module")
def scores() -> tuple[np.ndarray, np.ndarray]:
    """A score in [0, 1] whose positive rate rises with it (beta-calibration family), with
    exact 0 and 1 among the scores."""
    rng = np.random.default_rng(40)
    s = rng.beta(0.6, 0.6, size=4000)
    s[:6] = [0.0, 1.0, 0.0, 1.0, 1e-20, 1 - 1e-16]
    y = (rng.random(s.size) < _sigmoid(1.4 * np.log(np.maximum(s, 1e-12))
                                      - 0.7 * np.log(np.maximum(1 - s, 1e-12)) + 0.3))
    return s, y.astype(np.int64)


PLAIN = [
    pytest.param(PlattCalibrator(plain_score="increasing"), id="platt"),
    pytest.param(PlattCalibrator(plain_score="increasing", feature_map=score_map("identity")),
                 id="platt-identity"),
    pytest.param(BetaCalibrator(plain_score="increasing"), id="beta"),
    pytest.param(IsotonicCalibrator(plain_score="increasing"), id="isotonic"),
    pytest.param(IsotonicCalibrator(plain_score="increasing", strict=True,
                                    feature_map=score_map("logit")), id="isotonic-strict-logit"),
]


# -- inputs and the portable form -------------------------------------------------------------
@pytest.mark.parametrize("est", PLAIN)
def test_every_spelling_of_a_plain_score_agrees(est: Any,
                                                scores: tuple[np.ndarray, np.ndarray]) -> None:
    s, y = scores
    want = clone(est).fit(s, y).predict_proba(s)
    spellings = [s.reshape(-1, 1), s.tolist(), pd.Series(s, name="p"),
                 pd.DataFrame({"score": s, "other": 1.0}), pd.DataFrame({"proba": s})]
    for X in spellings:
        got = clone(est).fit(X, y).predict_proba(X)
        np.testing.assert_array_equal(got, want)
    fitted = clone(est).fit(s, y)
    assert fitted.n_features_in_ == 1
    assert np.all(np.isfinite(want)) and np.all((want >= 0) & (want <= 1))


@pytest.mark.parametrize("est", PLAIN)
def test_portable_form_reads_the_score_as_model_confidence(
        est: Any, scores: tuple[np.ndarray, np.ndarray]) -> None:
    s, y = scores
    fitted = clone(est).fit(s, y)
    want = fitted.predict_proba(s)[:, 1]
    port = PortableCalibrator.from_dict(json.loads(json.dumps(fitted.to_portable().to_dict())))
    assert {t.column for t in port.feature_map.terms} == {SCORE_COLUMN}
    np.testing.assert_allclose(port.predict(score_features(s)), want, rtol=0, atol=1e-12)
    for i in (0, 1, 4, 5, 100):
        assert port.predict_one({SCORE_COLUMN: float(s[i])}) == pytest.approx(want[i],
                                                                             abs=1e-12)
    # A gate evaluating claims reads the same calibrator: the other features are unused.
    claims = score_features(s)
    claims[:, 0], claims[:, 1], claims[:, 3] = 500.0, 0.3, 1.0
    np.testing.assert_allclose(port.predict(claims), want, rtol=0, atol=1e-12)


def test_score_map_and_score_features() -> None:
    fm = score_map()
    assert fm.names == ["logit(model_confidence)"]
    assert fm.terms[0].eps == SCORE_EPS == 2.0**-52
    both = score_map("log", "log1m", eps=1e-9)
    assert [t.eps for t in both.terms] == [1e-9, 1e-9]
    assert score_map("identity").terms[0].eps is None
    X = score_features([0.2, 0.7])
    assert X.shape == (2, 4) and X[:, 2].tolist() == [0.2, 0.7] and not X[:, [0, 1, 3]].any()
    with pytest.raises(ValueError, match="score transform 'ramp'"):
        score_map("ramp")


# -- the floor inside the logarithms ----------------------------------------------------------
@pytest.mark.parametrize("eps", [1e-5, 1e-12, SCORE_EPS], ids=["1e-5", "1e-12", "machine-eps"])
def test_floor_gives_finite_terms_at_zero_and_one(eps: float) -> None:
    s = np.array([0.0, eps / 2, eps, 0.5, 1 - eps, 1.0])
    F = score_map("logit", "log", "log1m", eps=eps).transform(score_features(s))
    assert np.all(np.isfinite(F))
    lo, hi = math.log(eps), -math.log(eps)
    np.testing.assert_allclose(F[[0, 1, 2], 1], lo, rtol=1e-12)  # log s floored
    np.testing.assert_allclose(F[[4, 5], 2], hi, rtol=1e-9)  # log1m s floored
    assert F[0, 0] == pytest.approx(lo - math.log(1.0)) and F[5, 0] == pytest.approx(hi)


def test_seed_map_keeps_its_floor_and_beta_takes_the_new_default() -> None:
    # The seed's logit(confidence) keeps 1e-5 (its outputs are the seed engine's); Beta and
    # plain scores use SCORE_EPS, and eps=1e-5 gives the earlier Beta fit.
    assert SEED_FEATURE_MAP.terms[0].eps == 1e-5
    assert DEFAULT_PLATT_MAP is SEED_FEATURE_MAP
    assert BetaCalibrator().eps == SCORE_EPS
    rng = np.random.default_rng(3)
    X = np.column_stack([rng.gamma(1.0, 300.0, 3000), rng.random(3000), rng.random(3000),
                         rng.random(3000) < 0.2])
    X[:300, 2] = rng.random(300) * 1e-7  # confidences below the old floor
    y = (rng.random(3000) < _sigmoid(-0.5 - 0.3 * np.log(np.maximum(X[:, 2], 1e-12)) / 5
                                     + X[:, 3])).astype(int)
    new = BetaCalibrator().fit(X, y)
    old = BetaCalibrator(eps=1e-5).fit(X, y)
    assert {t.eps for t in new.feature_map_.terms[:4]} == {SCORE_EPS}
    assert {t.eps for t in old.feature_map_.terms[:4]} == {1e-5}
    assert M.log_loss(y, new.predict_proba(X)[:, 1]) < M.log_loss(y, old.predict_proba(X)[:, 1])


# -- direction --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "make",
    [lambda d: PlattCalibrator(plain_score=d, C=None),
     lambda d: BetaCalibrator(plain_score=d, C=None),
     lambda d: IsotonicCalibrator(plain_score=d),
     lambda d: IsotonicCalibrator(plain_score=d, strict=True, feature_map=score_map("logit"))],
    ids=["platt", "beta", "isotonic", "isotonic-strict-logit"],
)
def test_decreasing_on_one_minus_s_is_increasing_on_s(
        make: Any, scores: tuple[np.ndarray, np.ndarray]) -> None:
    s, y = scores
    inc = make("increasing").fit(s, y)
    dec = make("decreasing").fit(1.0 - s, y)
    np.testing.assert_allclose(dec.predict_proba(1.0 - s), inc.predict_proba(s), atol=1e-7)


def test_wrong_direction_warns_naming_the_terms(scores: tuple[np.ndarray, np.ndarray]) -> None:
    s, y = scores
    with pytest.warns(UserWarning, match=r"decreasing constraint on score model_confidence "
                      r"dropped both of its terms \(log\(model_confidence\), "
                      r"log1m\(model_confidence\)\)"):
        beta = BetaCalibrator(plain_score="decreasing").fit(s, y)
    # Both terms gone: the base rate, which is what the warning is about.
    np.testing.assert_allclose(beta.predict_proba(s)[:, 1], y.mean(), atol=1e-6)
    with pytest.warns(UserWarning, match=r"PlattCalibrator\(plain_score='decreasing'\): the "
                      r"fitted probability rises .*logit\(model_confidence\): \d"):
        PlattCalibrator(plain_score="decreasing").fit(s, y)
    with pytest.warns(UserWarning, match=r"IsotonicCalibrator\(plain_score='decreasing'\): the "
                      r"fitted map is constant .* over identity\(model_confidence\)"):
        IsotonicCalibrator(plain_score="decreasing").fit(s, y)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for est in PLAIN:
            clone(est.values[0]).fit(s, y)  # the right direction: no warning


# -- errors -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("est", "X", "match"),
    [
        (PlattCalibrator(plain_score="increasing"), np.zeros((4, 2)),
         "n_features=2; with plain_score set a calibrator reads one score"),
        (PlattCalibrator(plain_score="increasing"), pd.DataFrame({"a": [0.1] * 4, "b": 0.2}),
         r"reads a 'score' column \(or a frame of one column\); got columns \['a', 'b'\]"),
        (BetaCalibrator(plain_score="increasing"), [0.1, 1.5, 0.3, 0.4],
         r"plain score of row 1 is 1.5; BetaCalibrator takes its logarithm"),
        (PlattCalibrator(plain_score="increasing"), [0.1, -2.0, 0.3, 0.4],
         r"row 1 is -2.0; PlattCalibrator takes its logarithm.*score_map\('identity'\)"),
        (PlattCalibrator(plain_score="up"), [0.1, 0.2, 0.3, 0.4],  # type: ignore[arg-type]
         "plain_score='up' must be None, 'increasing' or 'decreasing'"),
        (BetaCalibrator(plain_score="increasing", scores=[("model_confidence", "increasing")]),
         [0.1, 0.2, 0.3, 0.4], "leave scores and extra_map unset"),
        (IsotonicCalibrator(plain_score="increasing", increasing=False), [0.1, 0.2, 0.3, 0.4],
         "give the direction there"),
        (IsotonicCalibrator(plain_score="increasing", feature_map=score_map("log", "log1m")),
         [0.1, 0.2, 0.3, 0.4], "the index of a plain score is one term"),
        (PlattCalibrator(plain_score="increasing", feature_map=DEFAULT_PLATT_MAP),
         [0.1, 0.2, 0.3, 0.4], r"may only read the score .*'ramp\(recency_hours, 720\)'"),
    ],
    ids=["two-columns", "frame-without-score", "beta-above-1", "logit-below-0",
         "bad-direction", "beta-scores-set", "isotonic-increasing-false",
         "isotonic-two-terms", "map-reads-claims"],
)
def test_plain_score_errors_name_the_problem(est: Any, X: Any, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        est.fit(X, [0, 1, 0, 1])


def test_identity_map_takes_a_real_valued_score() -> None:
    rng = np.random.default_rng(5)
    d = rng.normal(0, 3, size=2000)  # a decision function
    y = (rng.random(d.size) < _sigmoid(0.8 * d - 0.4)).astype(int)
    est = PlattCalibrator(plain_score="increasing", feature_map=score_map("identity"),
                          C=None).fit(d, y)
    lr = LogisticRegression(C=np.inf, solver="newton-cholesky", tol=1e-8).fit(d[:, None], y)
    np.testing.assert_allclose(est.predict_proba(d), lr.predict_proba(d[:, None]), atol=1e-10)
    iso = IsotonicCalibrator(plain_score="increasing").fit(d, y)
    ref = IsotonicRegression(out_of_bounds="clip").fit(d, y)
    np.testing.assert_allclose(iso.predict_proba(d)[:, 1], ref.predict(d), rtol=0, atol=1e-12)


# -- against scikit-learn and betacal on a classifier's scores --------------------------------
def _splits(n_splits: int) -> list[tuple[np.ndarray, ...]]:
    """Seeded splits of breast-cancer data: half to train the classifier, a quarter to fit
    the calibrator on the classifier's probabilities, a quarter to test (stratified)."""
    X, y = load_breast_cancer(return_X_y=True)
    out = []
    for seed in range(n_splits):
        Xtr, Xrest, ytr, yrest = train_test_split(X, y, test_size=0.5, stratify=y,
                                                  random_state=seed)
        Xc, Xte, yc, yte = train_test_split(Xrest, yrest, test_size=0.5, stratify=yrest,
                                            random_state=seed)
        out.append((Xtr, ytr, Xc, yc, Xte, yte))
    return out


def _mle_abm(s: np.ndarray, y: np.ndarray, eps: float) -> tuple[float, float, float]:
    """Maximum-likelihood ``abm`` (Kull et al. 2017) by Newton's method on the floored
    scores, with the reference's drop rule; returns (a, b, c)."""
    x1 = np.log(np.maximum(s, eps))
    x2 = -np.log(np.maximum(1.0 - s, eps))

    def fit(A: np.ndarray) -> np.ndarray:
        A = np.column_stack([np.ones(len(y)), A])

        def f(t: np.ndarray) -> float:
            z = A @ t
            return float(np.sum(np.logaddexp(0.0, z) - y * z))

        def g(t: np.ndarray) -> np.ndarray:
            return A.T @ (_sigmoid(A @ t) - y)

        def h(t: np.ndarray) -> np.ndarray:
            q = _sigmoid(A @ t)
            return (A * (q * (1 - q))[:, None]).T @ A

        return np.asarray(optimize.minimize(f, np.zeros(A.shape[1]), jac=g, hess=h,
                                            method="trust-exact",
                                            options={"gtol": 1e-9}).x)

    c, a, b = fit(np.column_stack([x1, x2]))
    if a < 0:
        (c, b), a = fit(x2[:, None]), 0.0
    elif b < 0:
        (c, a), b = fit(x1[:, None]), 0.0
    return float(a), float(b), float(c)


@pytest.fixture(scope="module")
def naive_bayes_log_loss() -> pd.DataFrame:
    """Test log loss per split of GaussianNB's probabilities calibrated each way."""
    rows = []
    for Xtr, ytr, Xc, yc, Xte, yte in _splits(30):
        nb = GaussianNB().fit(Xtr, ytr)
        sc, ste = nb.predict_proba(Xc)[:, 1], nb.predict_proba(Xte)[:, 1]
        row = {"raw": M.log_loss(yte, ste),
               "tied_1e-5": float(np.mean((sc < 1e-5) | (sc > 1 - 1e-5))),
               "tied_floor": float(np.mean((sc < SCORE_EPS) | (sc > 1 - SCORE_EPS)))}
        for method in ("sigmoid", "isotonic"):
            cc = CalibratedClassifierCV(FrozenEstimator(nb), method=method).fit(Xc, yc)
            row[f"sklearn_{method}"] = M.log_loss(yte, cc.predict_proba(Xte)[:, 1])
        a, b, c = _mle_abm(sc, yc, SCORE_EPS)
        zt = (a * np.log(np.maximum(ste, SCORE_EPS)) - b * np.log(np.maximum(1 - ste, SCORE_EPS))
              + c)
        row["mle_beta"] = M.log_loss(yte, _sigmoid(zt))
        ours = {
            "platt": PlattCalibrator(plain_score="increasing"),
            "beta": BetaCalibrator(plain_score="increasing"),
            "beta_unpenalised": BetaCalibrator(plain_score="increasing", C=None, tol=1e-10),
            "beta_floor_1e-5": BetaCalibrator(plain_score="increasing", eps=1e-5),
            "isotonic": IsotonicCalibrator(plain_score="increasing"),
            "isotonic_strict_logit": IsotonicCalibrator(plain_score="increasing", strict=True,
                                                        feature_map=score_map("logit")),
        }
        for name, est in ours.items():
            row[name] = M.log_loss(yte, est.fit(sc, yc).predict_proba(ste)[:, 1])
        try:
            from betacal import BetaCalibration
        except ImportError:
            row["betacal"] = math.nan
        else:
            with warnings.catch_warnings():  # betacal silences all warnings globally
                row["betacal"] = M.log_loss(yte, BetaCalibration("abm").fit(sc, yc).predict(ste))
        rows.append(row)
    return pd.DataFrame(rows)


def test_platt_on_log_odds_beats_sklearns_sigmoid(naive_bayes_log_loss: pd.DataFrame) -> None:
    # sklearn's sigmoid reads the raw probability; Platt on its log-odds is never worse on
    # these 30 splits and 0.06 nats better on average (docs/calibration.md).
    d = naive_bayes_log_loss["platt"] - naive_bayes_log_loss["sklearn_sigmoid"]
    assert (d <= 1e-3).all(), d.max()
    assert d.mean() < -0.03


def test_beta_is_the_maximum_likelihood_fit(naive_bayes_log_loss: pd.DataFrame) -> None:
    t = naive_bayes_log_loss
    np.testing.assert_allclose(t["beta_unpenalised"], t["mle_beta"], rtol=0, atol=1e-6)
    # The old floor tied ~90% of the scores and cost nats on most splits.
    assert t["tied_1e-5"].mean() > 0.85 and t["tied_floor"].mean() < t["tied_1e-5"].mean()
    assert ((t["beta_floor_1e-5"] - t["beta_unpenalised"]) > 1e-3).mean() > 0.8


def test_beta_matches_betacal(naive_bayes_log_loss: pd.DataFrame) -> None:
    pytest.importorskip("betacal")
    t = naive_bayes_log_loss
    # Same floor (machine epsilon), same drop rule: the unpenalised fit is betacal's up to
    # its L-BFGS tolerance; the default (C=1) is never worse by more than 1e-3.
    np.testing.assert_allclose(t["beta_unpenalised"], t["betacal"], rtol=0, atol=1e-3)
    assert (t["beta"] - t["betacal"] <= 1e-3).all()


def test_isotonic_against_sklearns(naive_bayes_log_loss: pd.DataFrame) -> None:
    t = naive_bayes_log_loss
    d = t["isotonic"] - t["sklearn_isotonic"]
    # Equal except where sklearn pools probabilities less than 1e-15 apart (GaussianNB has
    # many below 1e-15) and a test score falls among them.
    assert (d.abs() < 1e-12).mean() >= 0.6
    # The strict map on the log-odds avoids the step function's 0 and 1 on sparse data.
    assert (t["isotonic_strict_logit"] - t["sklearn_isotonic"]).mean() < -0.1


@pytest.mark.parametrize("seed", range(5), ids=lambda s: f"split={s}")
def test_isotonic_is_sklearns_on_a_logistic_classifiers_scores(seed: int) -> None:
    # CalibratedClassifierCV calibrates a classifier's decision_function when it has one
    # (here the log-odds), else predict_proba: the same score, the same table.
    Xtr, ytr, Xc, yc, Xte, _ = _splits(seed + 1)[seed]
    scale = Xtr.std(axis=0)
    clf = LogisticRegression(max_iter=5000).fit(Xtr / scale, ytr)
    sc, ste = clf.decision_function(Xc / scale), clf.decision_function(Xte / scale)
    assert np.min(np.diff(np.unique(sc))) >= 1e-15  # sklearn pools nothing
    ours = IsotonicCalibrator(plain_score="increasing").fit(sc, yc)
    cc = CalibratedClassifierCV(FrozenEstimator(clf), method="isotonic").fit(Xc / scale, yc)
    np.testing.assert_allclose(ours.predict_proba(ste)[:, 1],
                               cc.predict_proba(Xte / scale)[:, 1], rtol=0, atol=1e-12)
    # On the probabilities, the log-odds index gives the same table.
    pc, pte = clf.predict_proba(Xc / scale)[:, 1], clf.predict_proba(Xte / scale)[:, 1]
    logit = IsotonicCalibrator(plain_score="increasing", feature_map=score_map("logit"))
    np.testing.assert_allclose(logit.fit(pc, yc).predict_proba(pte)[:, 1],
                               cc.predict_proba(Xte / scale)[:, 1], rtol=0, atol=1e-9)


# -- scikit-learn's estimator checks through a one-score adapter ------------------------------
class _OneScore(ClassifierMixin, BaseEstimator):  # type: ignore[misc]
    """Test adapter: any-width numeric X -> the score sigmoid(x0 + x1) -> a plain-score
    calibrator, so every generic check reaches the calibrator with a score it accepts."""

    def __init__(self, calibrator: Any = None) -> None:
        self.calibrator = calibrator

    def _score(self, X: Any, reset: bool) -> np.ndarray:
        X = validate_data(self, X, reset=reset, dtype=np.float64)
        return _sigmoid(X[:, 0] + X[:, 1 % X.shape[1]])

    def fit(self, X: Any, y: Any, sample_weight: Any = None) -> _OneScore:
        self.calibrator_ = clone(self.calibrator).fit(self._score(X, True), y, sample_weight)
        self.classes_ = self.calibrator_.classes_
        return self

    def predict_proba(self, X: Any) -> np.ndarray:
        check_is_fitted(self)
        return self.calibrator_.predict_proba(self._score(X, False))  # type: ignore[no-any-return]

    def predict(self, X: Any) -> np.ndarray:
        check_is_fitted(self)
        return self.calibrator_.predict(self._score(X, False))  # type: ignore[no-any-return]

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        tags.classifier_tags.multi_class = False
        tags.classifier_tags.poor_score = True
        return tags


def _adapter_cases() -> list[Any]:
    cases = []
    for est in (PlattCalibrator(plain_score="increasing"),
                BetaCalibrator(plain_score="increasing"),
                IsotonicCalibrator(plain_score="increasing")):
        for e, check in estimator_checks_generator(_OneScore(est), mark=None):
            func = getattr(check, "func", check)
            kw = getattr(check, "keywords", {})
            suffix = "" if not kw else "(" + ",".join(f"{k}={v}" for k, v in kw.items()) + ")"
            cases.append(pytest.param(e, check,
                                      id=f"{type(est).__name__}-{func.__name__}{suffix}"))
    return cases


@pytest.mark.filterwarnings("ignore::UserWarning")  # random labels: direction warnings
@pytest.mark.parametrize(("estimator", "check"), _adapter_cases())
def test_sklearn_checks_on_one_score(estimator: Any, check: Any) -> None:
    check(estimator)


def test_plain_score_is_a_parameter_like_any_other() -> None:
    est = BetaCalibrator(plain_score="decreasing", eps=1e-9)
    assert est.get_params()["plain_score"] == "decreasing"
    assert clone(est).get_params() == est.get_params()
    assert PlattCalibrator().plain_score is None  # claim features by default
    term = Term(column=SCORE_COLUMN, transform="logit", eps=SCORE_EPS)
    assert term.to_dict()["eps"] == 2.0**-52
