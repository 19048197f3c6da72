"""Metrics against hand-worked cases, brute-force definitions and scikit-learn."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
import pytest
from scipy import integrate, optimize, stats
from sklearn import metrics as skm

from amv_calib.calibration import _metrics as M


@pytest.fixture(scope="module")
def medium() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(7)
    n = 3000
    p = rng.beta(0.8, 2.0, size=n)
    y = (rng.random(n) < np.clip(p * 1.2, 0, 1)).astype(np.int64)
    w = rng.integers(0, 4, size=n).astype(float)
    return y, p, w


# -- proper scores ----------------------------------------------------------------------------
Y4 = np.array([1, 0, 1, 0])
P4 = np.array([0.9, 0.2, 0.6, 0.5])


def test_log_loss_four_points_by_hand() -> None:
    expected = -(math.log(0.9) + math.log(0.8) + math.log(0.6) + math.log(0.5)) / 4
    assert M.log_loss(Y4, P4) == pytest.approx(expected, rel=1e-15)
    assert M.log_loss(Y4, P4) == pytest.approx(skm.log_loss(Y4, P4), rel=1e-12)


def test_brier_four_points_by_hand() -> None:
    assert M.brier_score(Y4, P4) == pytest.approx((0.01 + 0.04 + 0.16 + 0.25) / 4, rel=1e-14)
    assert M.brier_score(Y4, P4) == pytest.approx(skm.brier_score_loss(Y4, P4), rel=1e-12)


def test_log_loss_is_finite_at_zero_and_one() -> None:
    assert M.log_loss([0, 1], [0.0, 1.0]) == pytest.approx(0.0, abs=1e-14)
    assert M.log_loss([1], [0.0]) == pytest.approx(-math.log(1e-15))
    assert math.isfinite(M.log_loss([0, 1], [1.0, 0.0]))


def test_weights_equal_repeated_rows(medium: tuple[np.ndarray, ...]) -> None:
    y, p, w = medium
    idx = np.repeat(np.arange(y.size), w.astype(int))
    for name, metric in M.METRICS.items():
        got = metric(y, p, w)
        want = metric(y[idx], p[idx])
        tol = 1e-3 if name == "smooth_ece" else 1e-10
        assert got == pytest.approx(want, rel=tol), name


# -- AUC --------------------------------------------------------------------------------------
def _auc_by_pairs(y: np.ndarray, p: np.ndarray) -> float:
    pos, neg = p[y == 1], p[y == 0]
    wins = sum((a > b) + 0.5 * (a == b) for a in pos for b in neg)
    return float(wins / (pos.size * neg.size))


def test_auc_by_pair_counting_with_ties() -> None:
    y = np.array([1, 0, 1, 0, 1, 0, 0])
    p = np.array([0.8, 0.8, 0.3, 0.1, 0.5, 0.3, 0.9])
    assert M.roc_auc(y, p) == pytest.approx(_auc_by_pairs(y, p), abs=1e-15)
    assert M.roc_auc(y, p) == pytest.approx(skm.roc_auc_score(y, p), abs=1e-12)


def test_auc_weighted_matches_sklearn(medium: tuple[np.ndarray, ...]) -> None:
    y, p, w = medium
    pr = np.round(p, 2)  # many ties
    assert M.roc_auc(y, pr, w) == pytest.approx(skm.roc_auc_score(y, pr, sample_weight=w))


def test_auc_one_class_raises() -> None:
    with pytest.raises(ValueError, match="only one class"):
        M.roc_auc([1, 1, 1], [0.1, 0.2, 0.3])


# -- binned calibration -----------------------------------------------------------------------
P6 = np.array([0.1, 0.2, 0.5, 0.6, 0.9, 0.95])
Y6 = np.array([0, 1, 0, 1, 1, 1])


@pytest.mark.parametrize("strategy", ["uniform", "quantile"])
def test_three_bin_ece_by_hand(strategy: str) -> None:
    # Bins {0.1, 0.2}, {0.5, 0.6}, {0.9, 0.95} under both strategies:
    # |0.5 - 0.15| = 0.35, |0.5 - 0.55| = 0.05, |1 - 0.925| = 0.075, each of weight 1/3.
    got = M.ece(Y6, P6, n_bins=3, strategy=strategy)  # type: ignore[arg-type]
    assert got == pytest.approx((0.35 + 0.05 + 0.075) / 3, abs=1e-15)
    assert M.mce(Y6, P6, n_bins=3, strategy=strategy) == pytest.approx(0.35)  # type: ignore[arg-type]


def test_equal_mass_bins_keep_ties_together() -> None:
    # Tied group 0.2 (3 rows, middle at cumulative weight 1.5 of 4) -> bin 0; 0.7 -> bin 1.
    y, p = np.array([0, 0, 1, 1]), np.array([0.2, 0.2, 0.2, 0.7])
    expected = 0.75 * abs(1 / 3 - 0.2) + 0.25 * abs(1.0 - 0.7)
    assert M.ece(y, p, n_bins=2, strategy="quantile") == pytest.approx(expected)
    assert M.ece(y, p, n_bins=2, strategy="uniform") == pytest.approx(expected)


def test_uniform_ece_matches_sklearn_calibration_curve(medium: tuple[np.ndarray, ...]) -> None:
    from sklearn.calibration import calibration_curve

    y, p, _ = medium
    prob_true, prob_pred = calibration_curve(y, p, n_bins=10, strategy="uniform")
    counts, _ = np.histogram(p, bins=np.linspace(0, 1, 11))
    counts = counts[counts > 0]
    want = float(np.sum(counts * np.abs(prob_true - prob_pred)) / counts.sum())
    assert M.ece(y, p, n_bins=10) == pytest.approx(want, rel=1e-12)
    assert M.mce(y, p, n_bins=10) == pytest.approx(np.max(np.abs(prob_true - prob_pred)))


def _quantised(levels: int, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Scores ``j / levels`` (a forest of ``levels`` trees votes so) and outcomes drawn from a
    slightly miscalibrated truth."""
    rng = np.random.default_rng(seed)
    p = rng.integers(0, levels + 1, size=n) / levels
    y = (rng.random(n) < np.clip(0.9 * p + 0.04, 0, 1)).astype(np.int64)
    return y, p


@pytest.mark.parametrize("n_bins", [5, 10, 15, 20], ids=lambda b: f"bins={b}")
@pytest.mark.parametrize("levels", [10, 15, 20, 100], ids=lambda q: f"scores=j/{q}")
def test_uniform_bins_are_sklearns_on_quantised_scores(levels: int, n_bins: int) -> None:
    # Many scores sit exactly on inner edges (j/100 = k/15 for 0.2, 0.4, 0.6, 0.8): they
    # belong to the lower bin, as in calibration_curve and Guo et al. (2017).
    from sklearn.calibration import calibration_curve

    y, p = _quantised(levels, 20_000, seed=levels + n_bins)
    prob_true, prob_pred = calibration_curve(y, p, n_bins=n_bins, strategy="uniform")
    rc = M.reliability_curve(y, p, n_bins=n_bins)
    np.testing.assert_allclose(rc["observed_rate"], prob_true, rtol=0, atol=1e-12)
    np.testing.assert_allclose(rc["mean_pred"], prob_pred, rtol=0, atol=1e-12)
    edges = np.linspace(0, 1, n_bins + 1)
    # Each bin's rows lie in (lower, upper], the first bin including 0.
    for b, lo, hi, count in rc[["bin", "bin_lower", "bin_upper", "count"]].itertuples(
            index=False):
        inside = ((p > lo) | ((b == 0) & (p == 0.0))) & (p <= hi)
        assert inside.sum() == count, (b, lo, hi)
        assert (lo, hi) == (edges[b], edges[b + 1])
    gaps = np.abs(prob_true - prob_pred)
    want = float(np.sum(rc["count"] * gaps) / p.size)
    assert M.ece(y, p, n_bins=n_bins) == pytest.approx(want, rel=1e-12)
    assert M.mce(y, p, n_bins=n_bins) == pytest.approx(float(gaps.max()), rel=1e-12)


def test_score_on_an_inner_edge_goes_to_the_lower_bin() -> None:
    # Two bins; 0.5 is the inner edge. Lower bin {0.2, 0.5}: mean p 0.35, rate 1/2;
    # upper bin {0.9}: gap 0.1. The old half-open [0, 0.5) rule gave 0.2 alone in the
    # lower bin and {0.5, 0.9} above.
    y, p = np.array([0, 1, 1]), np.array([0.2, 0.5, 0.9])
    assert M.ece(y, p, n_bins=2) == pytest.approx((2 * 0.15 + 0.1) / 3, abs=1e-15)
    assert M.reliability_curve(y, p, n_bins=2)["count"].tolist() == [2, 1]
    # 0 and 1 stay in the first and last bins.
    assert M.reliability_curve([0, 1], [0.0, 1.0], n_bins=4)["bin"].tolist() == [0, 3]


@pytest.mark.parametrize("n_bins", [4, 10, 15], ids=lambda b: f"bins={b}")
def test_quantile_bins_are_sklearns_where_both_rules_agree(n_bins: int) -> None:
    # Distinct scores and a row count divisible by the bins: sklearn's interpolated
    # percentile edges fall strictly between the k-th and (k+1)-th block of n / B rows, and
    # our rule (a row to bin floor(B m / n), m its cumulative count at its middle) makes
    # the same blocks. With ties or another row count the two rules differ (documented).
    from sklearn.calibration import calibration_curve

    rng = np.random.default_rng(n_bins)
    n = 300 * n_bins
    p = rng.beta(0.8, 2.0, size=n)
    assert np.unique(p).size == n
    y = (rng.random(n) < p).astype(np.int64)
    prob_true, prob_pred = calibration_curve(y, p, n_bins=n_bins, strategy="quantile")
    rc = M.reliability_curve(y, p, n_bins=n_bins, strategy="quantile")
    assert rc["count"].tolist() == [300] * n_bins
    np.testing.assert_allclose(rc["observed_rate"], prob_true, rtol=0, atol=1e-12)
    np.testing.assert_allclose(rc["mean_pred"], prob_pred, rtol=0, atol=1e-12)
    want = float(np.mean(np.abs(prob_true - prob_pred)))
    assert M.ece(y, p, n_bins=n_bins, strategy="quantile") == pytest.approx(want, rel=1e-12)


def test_reliability_curve_hand_case() -> None:
    rc = M.reliability_curve(Y6, P6, n_bins=3)
    assert rc["bin"].tolist() == [0, 1, 2]
    assert rc["count"].tolist() == [2, 2, 2]
    np.testing.assert_allclose(rc["mean_pred"], [0.15, 0.55, 0.925])
    np.testing.assert_allclose(rc["observed_rate"], [0.5, 0.5, 1.0])
    np.testing.assert_allclose(rc["bin_lower"], [0, 1 / 3, 2 / 3])
    rq = M.reliability_curve(Y6, P6, n_bins=3, strategy="quantile")
    np.testing.assert_allclose(rq["bin_lower"], [0.1, 0.5, 0.9])
    np.testing.assert_allclose(rq["bin_upper"], [0.2, 0.6, 0.95])


def test_wilson_interval_by_its_definition() -> None:
    # The Wilson interval is {q : |phat - q| <= z sqrt(q (1 - q) / n)}; solve for its ends.
    y = np.r_[np.ones(7), np.zeros(13)]
    p = np.full(20, 0.4)
    rc = M.reliability_curve(y, p, n_bins=1, alpha=0.1)
    z, n, ph = stats.norm.ppf(0.95), 20, 0.35

    def gap(q: float) -> float:
        return abs(ph - q) - z * math.sqrt(q * (1 - q) / n)

    lo = optimize.brentq(gap, 1e-9, ph)
    hi = optimize.brentq(gap, ph, 1 - 1e-9)
    assert rc["ci_low"].iloc[0] == pytest.approx(lo, abs=1e-10)
    assert rc["ci_high"].iloc[0] == pytest.approx(hi, abs=1e-10)


def test_clopper_pearson_by_its_definition() -> None:
    y = np.r_[np.ones(3), np.zeros(9)]
    rc = M.reliability_curve(y, np.full(12, 0.5), n_bins=1, interval="clopper-pearson")
    lo, hi = rc["ci_low"].iloc[0], rc["ci_high"].iloc[0]
    assert stats.binom.sf(2, 12, lo) == pytest.approx(0.025, abs=1e-9)
    assert stats.binom.cdf(3, 12, hi) == pytest.approx(0.025, abs=1e-9)
    edge = M.reliability_curve(np.zeros(5), np.full(5, 0.1), n_bins=1,
                               interval="clopper-pearson")
    assert edge["ci_low"].iloc[0] == 0.0
    assert edge["ci_high"].iloc[0] == pytest.approx(1 - 0.025 ** (1 / 5))


# -- smooth ECE -------------------------------------------------------------------------------
def _smooth_ece_slow(y: np.ndarray, p: np.ndarray, sigma: float) -> float:
    """The definition: integral of |mean_i K(t, p_i) (y_i - p_i)| with K reflected at 0, 1."""
    k = np.arange(-5, 6)

    def integrand(t: float) -> float:
        kern = (stats.norm.pdf(t - p[:, None] - 2 * k, 0, sigma)
                + stats.norm.pdf(t + p[:, None] - 2 * k, 0, sigma)).sum(axis=1)
        return abs(float(np.mean(kern * (y - p))))

    return float(integrate.quad(integrand, 0, 1, limit=400, points=sorted(p))[0])


@pytest.fixture(scope="module")
def small30() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(1)
    p = rng.random(30)
    return (rng.random(30) < p**1.5).astype(float), p


@pytest.mark.parametrize("sigma", [0.01, 0.05, 0.2, 1.0], ids=lambda s: f"sigma={s}")
def test_smooth_ece_fixed_bandwidth_matches_definition(
    small30: tuple[np.ndarray, np.ndarray], sigma: float
) -> None:
    y, p = small30
    assert M.smooth_ece(y, p, sigma=sigma) == pytest.approx(
        _smooth_ece_slow(y, p, sigma), rel=2e-4
    )


def test_smooth_ece_bandwidth_is_the_fixed_point(small30: tuple[np.ndarray, np.ndarray]) -> None:
    y, p = small30
    s_star = optimize.brentq(lambda s: _smooth_ece_slow(y, p, s) - s, 1e-3, 1.0, xtol=1e-7)
    assert M.smooth_ece_sigma(y, p) == pytest.approx(s_star, rel=1e-3)
    assert M.smooth_ece(y, p) == pytest.approx(s_star, rel=1e-3)


def test_smooth_ece_hand_cases() -> None:
    # All mass at 0.5 with residual 0.5: the smoothed residual integrates to 0.5 at any
    # bandwidth (the reflected kernel integrates to one), so sigma* = smECE = 0.5.
    assert M.smooth_ece(np.ones(8), np.full(8, 0.5)) == pytest.approx(0.5, abs=1e-6)
    assert M.smooth_ece_sigma(np.ones(8), np.full(8, 0.5)) == pytest.approx(0.5, abs=1e-4)
    # Residuals that cancel at one point: perfectly calibrated, smECE 0.
    y = np.r_[np.ones(3), np.zeros(7)]
    assert M.smooth_ece(y, np.full(10, 0.3)) == pytest.approx(0.0, abs=1e-12)


def test_smooth_ece_small_for_calibrated_large_sample() -> None:
    rng = np.random.default_rng(3)
    p = rng.random(200_000)
    y = (rng.random(p.size) < p).astype(float)
    assert M.smooth_ece(y, p) < 0.01
    assert M.smooth_ece(y, np.clip(p + 0.1, 0, 1)) > 0.05


# -- bootstrap --------------------------------------------------------------------------------
def test_bootstrap_replicate_equals_explicit_resample(medium: tuple[np.ndarray, ...]) -> None:
    y, p, _ = medium
    seed = 11
    idx = np.random.default_rng(seed).integers(0, y.size, size=y.size)
    res = M.bootstrap_metrics(M.METRICS, y, p, n_boot=1, seed=seed, method="percentile")
    for name, metric in M.METRICS.items():
        want = metric(y[idx], p[idx])
        tol = 1e-3 if name == "smooth_ece" else 1e-10
        assert res[name].low == pytest.approx(want, rel=tol), name
        assert res[name].estimate == pytest.approx(metric(y, p), rel=1e-12), name


def test_bootstrap_is_seeded_and_covers(medium: tuple[np.ndarray, ...]) -> None:
    y, p, _ = medium
    a = M.bootstrap_ci("log_loss", y, p, n_boot=100, seed=5)
    b = M.bootstrap_ci(M.log_loss, y, p, n_boot=100, seed=5)
    c = M.bootstrap_ci("log_loss", y, p, n_boot=100, seed=6)
    assert a == b
    assert a != c
    assert a.low < a.estimate < a.high
    # A mean's bootstrap interval is close to the normal-theory one.
    ll = -(y * np.log(p) + (1 - y) * np.log1p(-p))
    se = ll.std(ddof=1) / math.sqrt(y.size)
    assert a.high - a.low == pytest.approx(2 * 1.96 * se, rel=0.25)


def _scipy_bootstrap(metric: Any, y: np.ndarray, p: np.ndarray, n_boot: int, seed: int,
                     method: str) -> Any:
    return stats.bootstrap((y, p), lambda a, b: metric(a, b), paired=True, vectorized=False,
                           n_resamples=n_boot, method=method, rng=np.random.default_rng(seed))


@pytest.mark.parametrize("name", list(M.METRICS), ids=list(M.METRICS))
def test_bootstrap_draws_are_scipys(medium: tuple[np.ndarray, ...], name: str) -> None:
    # Same seed, same draws: the percentile interval is scipy's on the same data, for every
    # metric; the centred interval of the calibration errors is scipy's basic interval
    # moved by the median bias (scipy's replicates, median minus the value on all rows).
    y, p, _ = medium
    y, p = y[:1200].astype(float), p[:1200]
    metric = M.METRICS[name]
    pct = M.bootstrap_ci(metric, y, p, n_boot=60, seed=4, method="percentile")
    ref = _scipy_bootstrap(metric, y, p, 60, 4, "percentile")
    tol = 2e-3 if name == "smooth_ece" else 1e-12  # its bandwidth search on repeated rows
    assert pct.low == pytest.approx(ref.confidence_interval.low, rel=tol)
    assert pct.high == pytest.approx(ref.confidence_interval.high, rel=tol)
    auto = M.bootstrap_ci(metric, y, p, n_boot=60, seed=4)
    v = metric(y, p)
    assert auto.estimate == pct.estimate == pytest.approx(v, rel=1e-12)
    if name in ("log_loss", "brier", "auc"):
        assert auto == pct
        return
    assert auto.method == "centred"
    basic = _scipy_bootstrap(metric, y, p, 60, 4, "basic").confidence_interval
    bias = float(np.median(ref.bootstrap_distribution)) - v
    assert auto.bias == pytest.approx(bias, rel=tol, abs=1e-12)
    assert auto.bias > 0  # the replicates sit above the value: the reason for the method
    assert auto.low == pytest.approx(max(0.0, basic.low + bias), rel=tol, abs=1e-12)
    assert auto.high == pytest.approx(basic.high + bias, rel=tol, abs=1e-12)
    assert auto.low <= auto.estimate <= auto.high


@pytest.fixture(scope="module")
def calibrated() -> tuple[np.ndarray, np.ndarray]:
    """Perfectly calibrated predictions: every calibration error's true value is 0."""
    rng = np.random.default_rng(2)
    p = rng.beta(1.0, 6.0, size=4000)
    return (rng.random(p.size) < p).astype(float), p


@pytest.mark.parametrize("name", ["ece", "ece_mass"], ids=["ece", "ece_mass"])
def test_bca_misses_the_estimate_where_the_percentile_interval_does(
        calibrated: tuple[np.ndarray, np.ndarray], name: str) -> None:
    # Why the calibration errors get the centred interval and not BCa: with the value below
    # the 2.5% quantile of the replicates, both scipy's percentile and BCa intervals lie
    # wholly on one side of it (BCa's bias correction z0 < -1.96 pushes both of its levels
    # below the value's own level); the centred interval contains it.
    y, p = calibrated
    metric = M.METRICS[name]
    v = metric(y, p)
    for method in ("percentile", "BCa"):
        ci = _scipy_bootstrap(metric, y, p, 200, 5, method).confidence_interval
        assert not (ci.low <= v <= ci.high), (method, v, ci)
    ours = M.bootstrap_ci(metric, y, p, n_boot=200, seed=5)
    assert ours.low <= v <= ours.high
    assert ours.low - ours.bias < 0.01  # debiased, the interval reaches the true 0


@pytest.mark.parametrize("seed", range(6), ids=lambda s: f"seed={s}")
def test_centred_intervals_contain_their_estimates(seed: int) -> None:
    # Small and large, calibrated and not, weighted and tied: the centred interval always
    # holds its estimate and stays in [0, 1].
    rng = np.random.default_rng(seed)
    n = int(rng.choice([12, 60, 500, 3000]))
    p = np.round(rng.beta(0.7, 1.5, size=n), int(rng.choice([2, 6])))
    y = (rng.random(n) < np.clip(p + rng.normal(0, 0.1), 0, 1)).astype(float)
    w = rng.integers(0, 3, size=n).astype(float) if seed % 2 else None
    if w is not None:
        w[0] = 1.0
    res = M.bootstrap_metrics(M.METRICS, y, p, w, n_boot=40, seed=seed)
    for name in ("ece", "ece_mass", "mce", "smooth_ece"):
        r = res[name]
        assert r.method == "centred"
        assert 0.0 <= r.low <= r.estimate <= r.high <= 1.0, (name, r)


def test_bootstrap_method_is_checked() -> None:
    with pytest.raises(ValueError, match="method='bca' must be"):
        M.bootstrap_ci("ece", Y4, P4, method="bca")  # type: ignore[arg-type]


def test_bootstrap_generic_callable_and_undefined_replicates() -> None:
    y = np.r_[1, np.zeros(9)]
    p = np.linspace(0.05, 0.5, 10)
    res = M.bootstrap_ci(lambda yy, pp, ww: skm.log_loss(yy, pp, sample_weight=ww,
                                                         labels=[0, 1]),
                         y, p, n_boot=20, seed=1)
    assert res.estimate == pytest.approx(M.log_loss(y, p))
    auc = M.bootstrap_ci("auc", y, p, n_boot=50, seed=1)
    assert 0 < auc.n_valid < 50  # resamples without the one positive are left out


# -- input checks -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("y", "p", "match"),
    [
        ([0, 1], [0.2, 1.5], "row 1 has p=1.5"),
        ([0, 2], [0.2, 0.5], "row 1 has y=2"),
        ([0, 1, 1], [0.2, 0.5], "y has 3 rows but p has 2"),
        ([0, 1], [np.nan, 0.5], "row 0 has p=nan"),
    ],
    ids=["p-above-1", "y-not-binary", "length", "nan"],
)
def test_bad_input_names_the_row(y: list[float], p: list[float], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        M.log_loss(y, p)


def test_bad_bins_and_weights() -> None:
    with pytest.raises(ValueError, match="n_bins=0"):
        M.ece(Y4, P4, n_bins=0)
    with pytest.raises(ValueError, match="strategy='width'"):
        M.ece(Y4, P4, strategy="width")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="row 2 has -1.0"):
        M.brier_score(Y4, P4, [1, 1, -1, 1])
    with pytest.raises(ValueError, match="zero on every row"):
        M.brier_score(Y4, P4, [0, 0, 0, 0])


@pytest.mark.parametrize("metric", [M.ece, M.mce, M.reliability_curve],
                         ids=["ece", "mce", "reliability_curve"])
def test_binned_metrics_check_the_bins_before_the_rows(metric: Any) -> None:
    # The three binned metrics share one preparation: bin settings first, then the rows.
    with pytest.raises(ValueError, match="n_bins=True must be a positive integer"):
        metric([2], [0.5], n_bins=True)
    with pytest.raises(ValueError, match="strategy='width' must be 'uniform', 'quantile' or "
                                         "'quantile_tail'"):
        metric([2], [0.5], strategy="width")
    with pytest.raises(ValueError, match="row 0 has y=2"):
        metric([2], [0.5], n_bins=3, strategy="quantile")


def test_tail_split_bins_show_the_sparse_high_p_range_with_enough_rows() -> None:
    # Most predictions are small, a few spread up to 0.95: equal mass puts that whole range
    # into one or two points; the tail split cuts each wide bin into equal-width pieces.
    from amv_calib.calibration._metrics import TAIL_MIN_ROWS, TAIL_WIDTH, reliability_curve

    rng = np.random.default_rng(5)
    p = np.concatenate([rng.beta(1.2, 20.0, 15000), rng.uniform(0.3, 0.95, 1000)])
    y = (rng.random(p.size) < p).astype(float)
    mass = reliability_curve(y, p, n_bins=15, strategy="quantile")
    tail = reliability_curve(y, p, n_bins=15, strategy="quantile_tail")
    assert tail["count"].sum() == mass["count"].sum() == p.size  # every row in one bin
    assert (mass["bin_lower"] >= 0.3).sum() <= 1 < 5 <= (tail["bin_lower"] >= 0.3).sum()
    assert tail["count"].min() >= TAIL_MIN_ROWS
    # a piece is no wider than the cut unless joining a short neighbour widened it
    wide = tail[(tail["bin_upper"] - tail["bin_lower"]) > TAIL_WIDTH + 1e-12]
    assert (wide["count"] < 2 * TAIL_MIN_ROWS).all() or wide.empty
    # the bins below 0.1 are the equal-mass ones, untouched
    low = mass[mass["bin_upper"] < 0.1]
    pd.testing.assert_frame_equal(
        tail[tail["bin_upper"] < 0.1].drop(columns="bin").reset_index(drop=True),
        low.drop(columns="bin").reset_index(drop=True))
