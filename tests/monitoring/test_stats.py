"""Monitoring statistics against hand-worked cases and independent implementations."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import ks_2samp, kstwobign

from amv_calib.calibration import clopper_pearson
from amv_calib.monitoring._sequential import DayBuckets, Evidence, evidence
from amv_calib.monitoring._stats import (
    WindowStats,
    calibration_stats,
    decide,
    ks,
    psi,
)
from amv_calib.settings import MonitorConfig


def test_psi_by_hand() -> None:
    # training deciles give 2 inner edges here: bins (-inf, 1], (1, 2], (2, inf)
    edges = [1.0, 2.0]
    ref = [0.5, 0.3, 0.2]
    window = np.array([0.5, 0.7, 1.5, 1.7, 1.9, 2.5, 3.0, 3.5, 4.0, 5.0])  # shares .2 .3 .5
    by_hand = ((0.2 - 0.5) * math.log(0.2 / 0.5) + (0.3 - 0.3) * math.log(1.0)
               + (0.5 - 0.2) * math.log(0.5 / 0.2))
    assert psi(edges, ref, window) == pytest.approx(by_hand, rel=1e-12)
    assert psi(edges, ref, np.array([0.0] * 5 + [1.5] * 3 + [9.0] * 2)) == pytest.approx(0.0)
    # an empty bin is floored, so PSI stays finite
    assert math.isfinite(psi(edges, ref, np.array([0.1, 0.2])))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_ks_statistic_equals_scipys(seed: int) -> None:
    rng = np.random.default_rng(seed)
    a = rng.normal(size=700)
    b = np.round(rng.normal(0.2, 1.1, size=300), 1)  # ties
    a[:50] = np.round(a[:50], 1)
    d, p = ks(a.tolist(), b)
    ref = ks_2samp(a, b, method="asymp")
    assert d == pytest.approx(ref.statistic, abs=1e-15)
    # the asymptotic Kolmogorov tail at sqrt(n m / (n + m)) D (scipy's own "asymp" adds a
    # finite-sample correction, so it is only close)
    assert p == pytest.approx(kstwobign.sf(math.sqrt(700 * 300 / 1000) * d), rel=1e-12)
    assert p == pytest.approx(ref.pvalue, rel=0.3)
    # a window already sorted (as the monitor passes it) is not sorted again: same answer
    assert ks(a.tolist(), np.sort(b)) == (d, p)


def test_ks_evaluates_every_pooled_value() -> None:
    # D at a window value tied many times, and at a training value inside the window's run
    a = np.array([0.0, 1.0, 2.0, 3.0])
    b = np.array([1.0, 1.0, 1.0, 1.0, 1.0, 5.0])
    assert ks(a.tolist(), b)[0] == pytest.approx(ks_2samp(a, b).statistic, abs=1e-15)
    assert ks(a.tolist(), b)[0] == pytest.approx(abs(2 / 4 - 5 / 6), abs=1e-15)
    assert ks([0.5], np.array([0.1, 0.9]))[0] == pytest.approx(0.5, abs=1e-15)


def test_clopper_pearson_covers_at_its_level() -> None:
    lo, hi = clopper_pearson(3, 880, 0.95)
    from scipy.stats import binom

    assert binom.sf(2, 880, lo) == pytest.approx(0.025, rel=1e-6)
    assert binom.cdf(3, 880, hi) == pytest.approx(0.025, rel=1e-6)
    assert clopper_pearson(0, 10, 0.95)[0] == 0.0


def _window(**kw: object) -> WindowStats:
    base: dict[str, object] = {"start": "a", "end": "b", "uses": 1000, "labelled": 500,
                               "actions_labelled": 500}
    base.update(kw)
    return WindowStats(**base)  # type: ignore[arg-type]


def _evidence(harm_rate: float = 0.005, days: int = 40, p_factor: float = 1.0) -> Evidence:
    rng = np.random.default_rng(4)
    b = DayBuckets()
    for d in range(days):
        b.add_actions(np.full(300, d), rng.random(300) < harm_rate)
        p = rng.beta(1.0, 6.0, size=500)
        y = (rng.random(500) < p).astype(float)
        b.add_uses(np.full(500, d), y, np.clip(p * p_factor, 1e-6, 1 - 1e-6), 0.0)
    return evidence(b, days - 1, 0.01, 0.05)


def test_status_rules() -> None:
    cfg = MonitorConfig()
    quiet = _evidence()
    w = _window()
    decide(w, quiet, cfg)
    assert w.status == "OK" and w.reasons[0].startswith("harm:") and "below alpha" in \
        w.reasons[0]
    # drift is descriptive: a large PSI warns, it never alerts
    w = _window(drift={"recency_hours": {"psi": 0.3, "ks": 0.05, "ks_pvalue": 0.5}})
    decide(w, quiet, cfg)
    assert w.status == "WARN" and "recency_hours PSI 0.300" in w.reasons[0]
    w = _window(uses=50, drift={"recency_hours": {"psi": 0.3, "ks": 0.05, "ks_pvalue": 0.5}})
    decide(w, quiet, cfg)
    assert w.status == "OK" and any("not judged" in r for r in w.reasons)
    w = _window()
    decide(w, _evidence(harm_rate=0.03), cfg)
    assert w.status == "ALERT" and w.reasons[0].startswith("harm:")
    w = _window()
    decide(w, _evidence(days=3), cfg)
    assert w.status == "INSUFFICIENT DATA"


@pytest.mark.parametrize("factor", [0.5, 2.0], ids=["underestimates", "overestimates"])
def test_miscalibrated_probabilities_alert_only_when_dangerous(factor: float) -> None:
    # p too low (the gate PROCEEDs on premises staler than it thinks) is the danger: ALERT;
    # p too high wastes verifications: WARN with its cost and a hint to retrain, never ALERT
    w = _window()
    decide(w, _evidence(p_factor=factor), MonitorConfig())
    loss = [r for r in w.reasons if r.startswith("calibration: log loss above")]
    assert loss and "retrain" in loss[0]
    if factor < 1:
        assert w.status == "ALERT"
        assert w.reasons[0].startswith("calibration: p too low (the dangerous direction")
        assert "harm ahead" in w.reasons[0]
    else:
        assert w.status == "WARN"
        high = [r for r in w.reasons if r.startswith("calibration: p too high (the costly")]
        assert high and "verified or abstained although every premise held" in high[0]
        assert "retrain" in high[0]
        assert not any("p too low" in r for r in w.reasons)


def test_calibrated_window_statistics_stay_descriptive(
        calibrated: tuple[np.ndarray, np.ndarray]) -> None:
    y, p = calibrated
    c = calibration_stats(y, p, {"log_loss": 0.3}, MonitorConfig())
    assert c["log_loss_excess_alert_ci"][0] < 0 < c["log_loss_excess_alert_ci"][1]


def test_mean_interval_is_the_bootstrap_interval() -> None:
    from amv_calib.monitoring._stats import _mean_interval

    rng = np.random.default_rng(5)
    values = rng.exponential(size=400)
    lo, hi = _mean_interval(values, 0.95)
    boot = values[rng.integers(0, 400, size=(20000, 400))].mean(axis=1)
    # the closed form is the bootstrap's standard error (Monte Carlo error ~1%)
    assert (hi - lo) / 2 / 1.959964 == pytest.approx(boot.std(), rel=0.03)
    assert (lo + hi) / 2 == pytest.approx(values.mean(), rel=1e-12)


@pytest.fixture
def calibrated() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(9)
    p = rng.beta(1.0, 6.0, size=20000)
    y = (rng.random(20000) < p).astype(float)
    return y, p


def test_calibrated_probabilities_raise_nothing(calibrated: tuple[np.ndarray, np.ndarray]
                                               ) -> None:
    y, p = calibrated
    c = calibration_stats(y, p, {"log_loss": 0.3}, MonitorConfig())
    assert c["log_loss_excess_alert_ci"][0] < 0 < c["log_loss_excess_alert_ci"][1]
    assert c["in_the_large_alert_ci"][0] < 0 < c["in_the_large_alert_ci"][1]
    # the expected log loss of a calibrated p is the mean binary entropy (by hand)
    h = -(p * np.log(p) + (1 - p) * np.log1p(-p))
    assert c["expected_log_loss"] == pytest.approx(h.mean(), rel=1e-12)


@pytest.mark.parametrize(("data", "match"), [
    ({"psi_warn": "0.1"}, "monitor config.psi_warn='0.1' must be a number"),
    ({"min_uses": 1.5}, "monitor config.min_uses=1.5 must be an integer"),
    ({"min_labels": True}, "monitor config.min_labels=True must be an integer"),
    ({"alert_confidence": 1.0}, r"alert_confidence=1.0 must lie in \(0.5, 1\)"),
    ({"delta": 1.0}, r"delta=1.0 must lie in \(0, 1\)"),
    ({"loss_margin": 1.5}, r"loss_margin=1.5 must lie in \[0, 1\]"),
    ({"label_horizon_days": -1}, r"label_horizon_days=-1 must lie in \[0, inf\)"),
    ({"psi_warn": 0.3}, "psi_warn=0.3 is above psi_alert=0.25"),
    ({"n_boot": 400}, r"unknown keys \['n_boot'\]"),
], ids=["string", "fraction-count", "bool", "confidence-1", "delta-1", "margin-above-1",
        "negative-horizon", "warn-above-alert", "unknown"])
def test_config_refuses(data: dict[str, object], match: str) -> None:
    from amv_calib import ConfigError

    with pytest.raises(ConfigError, match=match):
        MonitorConfig.from_mapping(data)
