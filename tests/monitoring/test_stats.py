"""Monitoring statistics against hand-worked cases and independent implementations."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import ks_2samp, kstwobign

from amv_calib.monitoring._stats import (
    MonitorConfig,
    WindowStats,
    clopper_pearson,
    decide,
    ks,
    psi,
)


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


def test_status_rules() -> None:
    cfg = MonitorConfig()
    w = _window(uses=50)
    decide(w, cfg)
    assert w.status == "INSUFFICIENT DATA"
    w = _window(drift={"recency_hours": {"psi": 0.3, "ks": 0.05, "ks_pvalue": 0.5}})
    decide(w, cfg)
    assert w.status == "ALERT" and "recency_hours PSI 0.300" in w.reasons[0]
    w = _window(drift={"recency_hours": {"psi": 0.15, "ks": 0.05, "ks_pvalue": 0.5}})
    decide(w, cfg)
    assert w.status == "WARN"
    harm = {"n": 500, "harmful": 12, "rate": 0.024, "alpha": 0.01,
            "warn_ci": [0.012, 0.04], "alert_ci": [0.0101, 0.05]}
    w = _window(harm=harm)
    decide(w, cfg)
    assert w.status == "ALERT" and w.reasons[0].startswith("harm:")
    w = _window(harm={**harm, "alert_ci": [0.005, 0.05]})
    decide(w, cfg)
    assert w.status == "WARN"
