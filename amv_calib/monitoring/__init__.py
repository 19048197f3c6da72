"""Production monitoring: anytime-valid harm and calibration evidence on the version in
production since it went live (kept incrementally), drift and calibration window by window
as context, and what an ALERT does (de-risk, retrain)."""

from __future__ import annotations

from amv_calib.monitoring._derisk import DeriskResult, derisk
from amv_calib.monitoring._monitor import (
    MonitorReport,
    go_live,
    harm_alert_recomputed,
    load_monitor_config,
    monitor,
    parse_since,
    parse_window,
    write_monitor_outputs,
)
from amv_calib.monitoring._stats import (
    WindowStats,
    calibration_stats,
    decide,
    drift_stats,
    harm_stats,
    ks,
    psi,
)
from amv_calib.settings import MonitorConfig, MonitorOptions

__all__ = [
    "DeriskResult",
    "derisk",
    "MonitorConfig",
    "MonitorOptions",
    "MonitorReport",
    "WindowStats",
    "calibration_stats",
    "decide",
    "go_live",
    "drift_stats",
    "harm_stats",
    "ks",
    "load_monitor_config",
    "monitor",
    "parse_since",
    "parse_window",
    "write_monitor_outputs",
    "harm_alert_recomputed",
    "psi",
]
