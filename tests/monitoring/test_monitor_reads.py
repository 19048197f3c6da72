"""Threats to the logs the monitor reads: one bad row never stops the run."""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path

import pytest
from sim_world import make_pool, simulate

from amv_calib.exceptions import DataContractError
from amv_calib.monitoring import monitor


def test_a_lone_surrogate_in_a_log_the_monitor_reads_refuses_that_row_only(
        repo_root: Path, tmp_path: Path) -> None:
    shutil.copytree(repo_root / "models" / "amv-guard", tmp_path / "models" / "amv-guard")
    artifact = f"{tmp_path / 'models'}/amv-guard@production"
    decisions, outcomes = simulate(make_pool(), artifact, tmp_path / "w", days=4, per_day=40,
                                   seed=5, drift_day=None)
    clean, _ = monitor(artifact, decisions, outcomes, window="2d")
    lines = decisions.read_bytes().splitlines(keepends=True)
    bad_line = lines[0].replace(b'"action_id":"', b'"action_id":"\\ud800', 1)
    assert bad_line != lines[0]
    doctored = tmp_path / "d.jsonl"
    doctored.write_bytes(b"".join([lines[0], bad_line, *lines[1:]]))
    odd_outcomes = tmp_path / "o.jsonl"
    odd_outcomes.write_bytes(outcomes.read_bytes()
                             + b'{"claim_id":"\\ud800","time":"2026-01-01T00:00:00Z",'
                               b'"violated":true,"note":"\\udc00"}\n')
    with pytest.raises(DataContractError, match="line 2"):
        monitor(artifact, doctored, odd_outcomes, window="2d", state=tmp_path / "s1")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        report, _ = monitor(artifact, doctored, odd_outcomes, window="2d",
                            on_corrupt="skip", state=tmp_path / "s2")
    # the doctored line is skipped; every other line and outcome is read as before
    assert report.to_dict()["windows"] == clean.to_dict()["windows"]
