"""Production monitoring: drift, calibration and harm of the gate's decisions against the
artifact's reference profile and certificate, window by window, and the retrain trigger."""

from __future__ import annotations

from amv_calib.monitoring._monitor import (
    MonitorReport,
    load_monitor_config,
    monitor,
    parse_since,
    parse_window,
    write_monitor_outputs,
)
from amv_calib.monitoring._stats import (
    MonitorConfig,
    WindowStats,
    calibration_stats,
    decide,
    drift_stats,
    harm_stats,
    ks,
    psi,
)

__all__ = [
    "MonitorConfig",
    "MonitorReport",
    "WindowStats",
    "calibration_stats",
    "decide",
    "drift_stats",
    "harm_stats",
    "ks",
    "load_monitor_config",
    "monitor",
    "parse_since",
    "parse_window",
    "write_monitor_outputs",
    "psi",
]
