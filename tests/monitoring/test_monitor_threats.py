"""Attacks on the monitor replayed: a state it should not trust, an ALERT that is not danger.

Each test replays an attack or a false alarm and asserts the new outcome (the rows of
docs/failure-modes.md under "Monitoring").
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from amv_calib import cli
from amv_calib.monitoring import harm_alert_recomputed, monitor
from amv_calib.monitoring._sequential import DayBuckets, evidence, judge


@pytest.fixture(scope="module")
def world(repo_root: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A copy of the shipped models and 1,500 actions of its gate after go-live
    (``synth logs`` with its default start)."""
    root = tmp_path_factory.mktemp("threats")
    shutil.copytree(repo_root / "models" / "amv-guard", root / "models" / "amv-guard")
    out = root / "logs"
    assert cli.main(["-q", "synth", "logs", "--n", "1500", "--seed", "11",
                     "--true-reliability", "0.95", "--artifact",
                     str(root / "models" / "amv-guard" / "v1"), "--out", str(out)]) == 0
    return {"models": root / "models", "decisions": out / "decisions.jsonl",
            "outcomes": out / "outcomes.csv", "root": root}


def _ref(w: dict[str, Path]) -> str:
    return f"{w['models']}/amv-guard@production"


def _run(w: dict[str, Path], state: Path) -> Any:
    report, _ = monitor(_ref(w), w["decisions"], w["outcomes"], state=state)
    return report


def _edit(state: Path, change: Any, rehash: bool) -> None:
    """Apply ``change`` to state.json; with ``rehash`` write its digest again too (a
    consistent forgery)."""
    doc = json.loads((state / "state.json").read_text())
    change(doc)
    raw = (json.dumps(doc, sort_keys=True) + "\n").encode()
    (state / "state.json").write_bytes(raw)
    if rehash:
        (state / "state.sha256").write_text(
            f"{hashlib.sha256(raw).hexdigest()}  state.json\n")


def test_synth_logs_start_after_go_live_so_the_monitor_counts_them(
        world: dict[str, Path]) -> None:
    first = json.loads(world["decisions"].read_text().splitlines()[0])["time"]
    assert first == "2026-12-05T00:00:00.000000Z"  # midnight UTC after 2026-12-04T15:58:29Z
    report, _ = monitor(_ref(world), world["decisions"], world["outcomes"])
    assert report.counts.get("uses_outside", 0) == 0
    assert report.evidence["labelled_actions"] > 1000


def test_an_edited_state_is_rebuilt_not_trusted(world: dict[str, Path],
                                                tmp_path: Path) -> None:
    state = tmp_path / "state"
    first = _run(world, state)
    assert first.evidence["harmful"] > 0

    def zero(doc: dict[str, Any]) -> None:
        doc["buckets"]["harmful"] = {k: 0 for k in doc["buckets"]["harmful"]}

    _edit(state, zero, rehash=False)
    again = _run(world, state)
    assert again.run["mode"] == "rebuild"
    assert "does not match the sha256 in state.sha256" in again.run["rebuilt_because"]
    assert again.evidence == first.evidence and again.status == first.status


@pytest.mark.parametrize("field, value, why", [
    ("window_file", "../../fifo", "window_file = '../../fifo' is not a file name"),
    ("outcomes_file", "/etc/passwd", "outcomes_file = '/etc/passwd' is not a file name"),
    ("counts", {"uses_read": True}, "counts.uses_read = True is not a valid count"),
    ("seq", -1, "seq = -1 is not a valid count"),
])
def test_a_state_naming_what_it_never_writes_is_refused(
        world: dict[str, Path], tmp_path: Path, field: str, value: Any, why: str) -> None:
    state = tmp_path / "mon" / "state"
    first = _run(world, state)
    os.mkfifo(tmp_path / "fifo")  # what "../../fifo" points at: opening it would hang

    def change(doc: dict[str, Any]) -> None:
        doc[field] = value

    _edit(state, change, rehash=True)
    done: list[Any] = []
    t = threading.Thread(target=lambda: done.append(_run(world, state)), daemon=True)
    t.start()
    t.join(timeout=300)
    assert not t.is_alive(), "the monitor hung on the state"
    assert done[0].run["mode"] == "rebuild" and why in done[0].run["rebuilt_because"]
    assert done[0].evidence == first.evidence


def test_a_fifo_or_link_inside_the_state_is_refused(world: dict[str, Path],
                                                    tmp_path: Path) -> None:
    state = tmp_path / "state"
    first = _run(world, state)
    doc = json.loads((state / "state.json").read_text())
    (state / doc["window_file"]).unlink()
    os.mkfifo(state / doc["window_file"])
    t_done: list[Any] = []
    t = threading.Thread(target=lambda: t_done.append(_run(world, state)), daemon=True)
    t.start()
    t.join(timeout=300)
    assert not t.is_alive(), "the monitor waited on a FIFO"
    assert "is not a regular file" in t_done[0].run["rebuilt_because"]
    outcomes = state / json.loads((state / "state.json").read_text())["outcomes_file"]
    target = tmp_path / "elsewhere.u64"
    target.write_bytes(outcomes.read_bytes())
    outcomes.unlink()
    outcomes.symlink_to(target)
    again = _run(world, state)
    assert again.run["mode"] == "rebuild" and again.evidence == first.evidence


def test_a_forged_harm_alert_does_not_derisk(world: dict[str, Path], tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    # the attack: counts inflated with the digests recomputed (a consistent forgery);
    # it reads as a harm ALERT, but nothing is exported or promoted on it
    out = tmp_path / "out"
    state = out / "monitor.state"
    _run(world, state)

    def inflate(doc: dict[str, Any]) -> None:
        doc["buckets"]["actions"]["0"] = doc["buckets"]["actions"].get("0", 0) + 5000
        doc["buckets"]["harmful"]["0"] = doc["buckets"]["harmful"].get("0", 0) + 500

    _edit(state, inflate, rehash=True)
    forged = _run(world, state)
    assert forged.run["mode"] == "incremental" and forged.harm_alert
    assert harm_alert_recomputed(forged, _ref(world), world["decisions"],
                                 world["outcomes"]) is None
    _edit(state, inflate, rehash=True)
    versions = sorted(p.name for p in (world["models"] / "amv-guard").iterdir())
    aliases = (world["models"] / "amv-guard" / "aliases.json").read_bytes()
    code = cli.main(["-q", "monitor", "--artifact", _ref(world), "--decisions",
                     str(world["decisions"]), "--outcomes", str(world["outcomes"]),
                     "--out", str(out), "--on-alert", "derisk", "--no-tracking"])
    line = capsys.readouterr().out
    assert code == 3 and "not de-risked (the harm ALERT did not hold when recomputed" in line
    assert sorted(p.name for p in (world["models"] / "amv-guard").iterdir()) == versions
    assert (world["models"] / "amv-guard" / "aliases.json").read_bytes() == aliases


def test_the_line_and_json_label_the_harm_interval_as_it_holds(world: dict[str, Path]
                                                              ) -> None:
    report, _ = monitor(_ref(world), world["decisions"], world["outcomes"])
    assert "97.5 % confidence sequence (98.75 % each side) [" in report.line()
    assert report.to_dict()["evidence"]["harm_cs_confidence"] == pytest.approx(0.975)
    assert any("97.5 % confidence sequence (98.75 % each side)" in r for r in report.reasons)


# -- an ALERT means danger ------------------------------------------------------------------
def _calibration_run(shift: float, seed: int, uses: int = 21_000, days: int = 94
                     ) -> tuple[str, list[str], float, float]:
    """A world of ``uses`` labelled uses over ``days`` days with p drawn as the shipped
    gate's (Beta(1.2, 8): mean about 0.13) and ``y ~ Bernoulli(p + shift)``, judged every
    day as a daily run does; returns the worst status, the ALERT reasons, the final mean p
    minus the observed rate (an independent computation), and the largest e-value of p
    too low seen on any day."""
    rng = np.random.default_rng([seed, 7])
    b = DayBuckets()
    per = uses // days
    worst, alerts = "OK", []
    ys, ps = [], []
    top = 0.0
    for d in range(days):
        p = rng.beta(1.2, 8.0, size=per)
        y = (rng.random(per) < np.clip(p + shift, 0.0, 1.0)).astype(float)
        ys.append(y)
        ps.append(p)
        b.add_uses(np.full(per, d), y, p, 0.0, 0.005)
        ev = evidence(b, d, None, 0.05, margin=0.005)
        top = max(top, ev.in_the_large_log_m)
        a, w, _ = judge(ev)
        if a:
            worst, alerts = "ALERT", alerts or a
        elif w and worst != "ALERT":
            worst = "WARN"
    return (worst, alerts, float(np.concatenate(ps).mean() - np.concatenate(ys).mean()),
            math.exp(top))


@pytest.mark.parametrize("seed", range(3))
def test_p_too_high_by_a_point_never_alerts(seed: int) -> None:
    # the shipped gate's case: p overstates staleness (the safe direction): not a page
    worst, alerts, gap, _ = _calibration_run(-0.01, seed, uses=60_000, days=200)
    assert gap > 0.008 and worst != "ALERT" and not alerts


@pytest.mark.parametrize("seed", range(3))
def test_p_too_low_by_two_points_alerts_within_9000_actions(seed: int) -> None:
    # about 21,000 labelled uses in 9,000 actions of the shipped gate's production
    worst, alerts, gap, _ = _calibration_run(0.02, seed)
    assert gap < -0.015 and worst == "ALERT"
    assert alerts[0].startswith("calibration: p too low (the dangerous direction")


@pytest.mark.slow
def test_false_alert_rate_at_the_margin_is_within_its_level() -> None:
    # the least favourable null: p too low by exactly the margin, 21,000 uses judged every
    # day for 94 days; Ville bounds the chance that the detector ever reaches c by 1/c,
    # so the chance of any ALERT (c = 40) by delta / 2
    runs = 200
    results = [_calibration_run(0.005, 1000 + s) for s in range(runs)]
    top = np.array([r[3] for r in results])
    alerts = sum(r[0] == "ALERT" for r in results)
    assert alerts == int((top >= 40).sum())  # the status follows the detector

    def within(c: float) -> bool:
        share = float((top >= c).mean())
        return share <= 1 / c + 3 * ((1 / c) * (1 - 1 / c) / runs) ** 0.5

    assert all(within(c) for c in (2.0, 40**0.5, 40.0))
    # not met by a detector that never moves: at the boundary its e-value is a fair bet,
    # and reaches 2 in about a quarter of the runs (Ville allows half)
    assert (top >= 2.0).mean() >= 0.15


# -- monitor's work and memory unbounded -----------------------------------------------------------
def _log_with(tmp_path: Path, examples_dir: Path, stamp: str | None, lines: int = 400,
              after: str | None = None) -> Path:
    """The first ``lines`` records of the example log, moved to start a day after ``after``
    (an ISO time: the monitored version's go-live), after one record dated ``stamp``."""
    head = (examples_dir / "logs" / "decisions.jsonl").read_bytes().split(b"\n")[:lines]
    out = tmp_path / f"decisions-{stamp or 'plain'}.jsonl"
    records = [json.loads(line) for line in head]
    if after is not None:
        shift = (pd.Timestamp(after) + pd.Timedelta(days=1)).floor("D") \
            - pd.Timestamp(records[0]["time"])
        for r in records:
            r["time"] = (pd.Timestamp(r["time"]) + shift).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    extra = [{**records[0], "time": stamp, "action_id": "outlier"}] if stamp else []
    out.write_bytes(b"".join(json.dumps(r).encode() + b"\n" for r in [*extra, *records]))
    return out


@pytest.mark.parametrize("stamp,window,capped", [
    ("9999-12-31T00:00:00Z", "7d", True), ("1700-01-01T00:00:00Z", "7d", False),
    ("0001-01-01T00:00:00Z", "7d", False), (None, "1m", True)],
    ids=["year-9999-7d", "year-1700-7d", "year-1-7d", "26-days-1m"])
def test_monitor_answers_at_once_whatever_the_span(
        tmp_path: Path, examples_dir: Path, repo_root: Path, stamp: str | None,
        window: str, capped: bool) -> None:
    # Attack: one record dated 1700 made --window 7d run past 120 s at 1.6 GB (17,049
    # windows, each a pass over every use, and a figure with a patch and a label per
    # window); --window 1m over 26 days past 180 s; year 1 gave a traceback. Now windows
    # start at go-live (older uses are left out, counted and said) and at most MAX_WINDOWS
    # (the newest) are made, the rest counted and said; every step bounded.
    from amv_calib.contract import load_artifact
    from amv_calib.monitoring import monitor, write_monitor_outputs
    from amv_calib.monitoring._monitor import MAX_WINDOWS

    art = repo_root / "models" / "amv-guard" / "v1"
    live = load_artifact(art).manifest["created_utc"]
    log = _log_with(tmp_path, examples_dir, stamp, after=live)
    t0 = time.process_time()
    report, claims = monitor(art, [log], window=window)
    write_monitor_outputs(report, claims, tmp_path / "out")
    spent = time.process_time() - t0
    assert spent < 30, f"{spent:.1f} s of CPU"
    table = (tmp_path / "out" / "monitor.txt").read_text()
    if capped:
        assert len(report.windows) == MAX_WINDOWS
        assert report.counts["windows_dropped"] > 0
        assert f"{report.counts['windows_dropped']} older windows were not made" in table
    else:  # the outlier is older than go-live: its uses are left out, no window made for it
        outlier = json.loads(log.read_text().splitlines()[0])
        assert report.uses_outside == len(outlier["premises"])
        assert f"{report.uses_outside} uses dated before" in table
        assert len(report.windows) <= 5  # 26 days of 7-day windows
    assert report.uses_read - report.uses_outside > 0
    assert json.loads((tmp_path / "out" / "monitor.json").read_text())["counts"] \
        == report.counts


@pytest.mark.parametrize("argv,message", [
    (["--window", "99999999999d"], "is wider than 36525 days"),
    (["--since", "10000-01-01"], "out of range (years 1 to 9999)"),
], ids=["huge-window", "since-year-10000"])
def test_monitor_refuses_impossible_windows_with_exit_2(
        tmp_path: Path, examples_dir: Path, repo_root: Path, argv: list[str], message: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    from amv_calib.cli import main

    log = _log_with(tmp_path, examples_dir, None, lines=50)
    assert main(["monitor", "--artifact", str(repo_root / "models" / "amv-guard" / "v1"),
                 "--decisions", str(log), "--no-tracking", *argv]) == 2
    assert message in capsys.readouterr().err


# -- logs of another artifact judged against this one ----------------------------------------------
def test_monitor_says_when_another_artifact_decided(
        tmp_path: Path, examples_dir: Path, repo_root: Path,
        capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture) -> None:
    # Attack: monitor judged logs written by another model or version against this
    # artifact's profile without a word. Now their uses are left out of every statistic,
    # counted, warned about and said in the report and the table, or (--other-artifacts
    # refuse) the run exits 2 naming them.
    from amv_calib.cli import main
    from amv_calib.contract import load_artifact
    from amv_calib.monitoring import monitor

    art = repo_root / "models" / "amv-guard" / "v1"
    log = _log_with(tmp_path, examples_dir, None, lines=300,
                    after=load_artifact(art).manifest["created_utc"])
    lines = log.read_text().splitlines()
    other = [line.replace('"version": "v1"', '"version": "v2"') for line in lines[:100]]
    assert all('"version": "v2"' in line for line in other)
    log.write_text("\n".join([*other, *lines[100:]]) + "\n")
    n_other = sum(len(json.loads(line)["premises"]) for line in other)
    report, _ = monitor(art, [log], window="7d")
    assert report.counts["uses_other_versions"] == n_other
    assert sum(w.uses for w in report.windows) == report.uses_read - n_other
    note = f"{n_other} uses decided by other artifacts than amv-guard@v1"
    assert any(r.startswith(note) for r in report.reasons)
    assert note in report.table() and note in caplog.text
    assert main(["monitor", "--artifact", str(art), "--decisions", str(log), "--no-tracking",
                 "--other-artifacts", "refuse"]) == 2
    err = capsys.readouterr().err
    assert f"the decision logs hold {n_other} uses decided by other artifacts than " \
           f"amv-guard@v1" in err


@pytest.mark.parametrize(("path", "message"), [
    ("/proc/self/mem", "/proc/self/mem: cannot read the decision log"),
    ("/proc/self/status", "/proc/self/status: decision log reports size 0 but holds bytes"),
    ("/dev/null", "/dev/null: input file is a device, not a regular file"),
    ("missing.jsonl", "input file missing.jsonl does not exist"),
], ids=["proc-mem-unreadable", "proc-status-size-lies", "device", "missing"])
def test_monitor_refuses_an_unreadable_or_special_log_with_exit_2(
        tmp_path: Path, repo_root: Path, path: str, message: str,
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    # Attack: /proc/self/mem is a regular file of size 0 that fails to read: the monitor
    # read it as an empty log and exited 0.
    from amv_calib.cli import main

    monkeypatch.chdir(tmp_path)
    assert main(["monitor", "--artifact", str(repo_root / "models" / "amv-guard" / "v1"),
                 "--decisions", path, "--no-tracking"]) == 2
    assert message in capsys.readouterr().err
