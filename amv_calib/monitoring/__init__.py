"""Production monitoring: drift, calibration and harm of the gate's decisions against the
artifact's reference profile and certificate, window by window, and the retrain trigger."""

from __future__ import annotations

from amv_calib.monitoring._stats import (
    MonitorConfig,
    WindowStats,
    calibration_stats,
    clopper_pearson,
    decide,
    drift_stats,
    harm_stats,
    ks,
    psi,
)

__all__ = [
    "MonitorConfig",
    "WindowStats",
    "calibration_stats",
    "clopper_pearson",
    "decide",
    "drift_stats",
    "harm_stats",
    "ks",
    "psi",
]
