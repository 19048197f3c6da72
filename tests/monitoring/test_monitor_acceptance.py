"""The shipped gate in its own simulated production, monitored weekly (the worlds of
``bench/monitor_acceptance.py``, one seed each): as declared it never ALERTs; where p is
0.02 too low it ALERTs within 9,000 actions, on danger."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest
from repo_paths import REPO_ROOT, load_module


def _bench() -> ModuleType:
    return load_module(REPO_ROOT / "bench" / "monitor_acceptance.py", "monitor_acceptance")


@pytest.mark.slow
def test_as_declared_the_weekly_monitor_never_alerts(tmp_path: Path) -> None:
    row = _bench().run_seed(1, 9000, 0.95, 0.0, tmp_path)
    assert row["weekly_runs"] >= 13  # about 94 days of actions, then their outcomes
    assert row["worst"] != "ALERT" and row["first_alert_week_actions"] is None
    # the calibrator is not exact (a test of zero would reject it); only its size matters
    assert abs(row["gap_claim_records"]) < 0.005


@pytest.mark.slow
def test_p_two_points_too_low_alerts_within_9000_actions(tmp_path: Path) -> None:
    row = _bench().run_seed(1, 9000, 0.95, 0.02, tmp_path)
    # the world is what it says: the premises' stale share exceeds the mean p by 0.02
    assert row["gap_truth"] == pytest.approx(0.02, abs=0.004)
    assert row["gap_claim_records"] == pytest.approx(0.02, abs=0.006)
    assert row["worst"] == "ALERT" and row["first_alert_on"]
    assert set(row["first_alert_on"]) <= {"harm", "p too low"}
    # an action every 15 minutes: 672 a week, the 9,000th decided in week 14
    week, _ = row["first_alert_week_actions"]
    assert week <= -(-9000 // 672)
