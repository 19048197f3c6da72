"""The gate's writers and a running LiveGate: nothing blocks on a log that is not a file, no
alias that is gone keeps serving, no time out of range raises anything but ValueError."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from amv_calib import ConfigError
from amv_calib.artifacts import promote
from amv_calib.exceptions import DataContractError
from amv_calib.gate import (
    CandidateAction,
    Gate,
    LiveGate,
    LogReadStats,
    OutcomeLog,
    Premise,
    read_decision_log,
)

ACTION = CandidateAction(action_id="tx-1", tool_name="bank_transfer", impact_cost_theta=100.0,
                         abstention_cost_kappa=5.0,
                         premises=(Premise(id="p1", calibrated_violation_probability=0.01),))


def _within(call: Callable[[], Any], seconds: float = 60.0) -> Any:
    """``call()`` in a thread that must finish within ``seconds`` (a hang fails)."""
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            out["value"] = call()
        except BaseException as exc:  # handed to the test
            out["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), "hung"
    if "error" in out:
        raise out["error"]
    return out.get("value")


# -- a log path that is not a regular file ----------------------------------------------------
def _not_a_file(tmp_path: Path, kind: str) -> tuple[Path, str]:
    """A path of ``kind`` ending in .jsonl, and how the refusal names it."""
    path = tmp_path / "log.jsonl"
    if kind == "fifo":
        os.mkfifo(path)
        return path, "is a FIFO, not a regular file"
    if kind == "link to a fifo":
        os.mkfifo(tmp_path / "pipe")
        path.symlink_to(tmp_path / "pipe")
        return path, "is a FIFO, not a regular file"
    if kind == "device":
        path.symlink_to(os.devnull)
        return path, "is a device, not a regular file"
    path.mkdir()
    return path, "is a directory, not a regular file"


_KINDS = ["fifo", "link to a fifo", "device", "folder"]


@pytest.mark.parametrize("kind", _KINDS)
def test_a_decision_log_that_is_not_a_file_is_refused_when_opened(
        tmp_path: Path, kind: str) -> None:
    # Attack: Gate(decision_log=FIFO) opened it, and evaluate blocked forever once ~150
    # records filled the pipe's buffer (nobody read it).
    path, says = _not_a_file(tmp_path, kind)
    with pytest.raises(ConfigError, match=f"{path}: decision log {says}"):
        _within(lambda: Gate(decision_log=path))


@pytest.mark.parametrize("kind", _KINDS)
def test_an_outcome_log_that_is_not_a_file_is_refused_when_opened(
        tmp_path: Path, kind: str) -> None:
    path, says = _not_a_file(tmp_path, kind)
    with pytest.raises(ConfigError, match=f"{path}: outcome log {says}"):
        _within(lambda: OutcomeLog(path))


def test_a_live_gate_log_that_is_a_fifo_is_refused_when_opened(
        live_models: Path, tmp_path: Path) -> None:
    promote("m", "v1", alias="production", models_dir=live_models)
    path, says = _not_a_file(tmp_path, "fifo")
    with pytest.raises(ConfigError, match=f"decision log {says}"):
        _within(lambda: LiveGate(f"{live_models / 'm'}@production", decision_log=path))


def test_the_gate_command_refuses_a_fifo_decision_log(tmp_path: Path, repo_root: Path) -> None:
    fifo, _ = _not_a_file(tmp_path, "fifo")
    action = tmp_path / "action.json"
    action.write_text(json.dumps({"action": {
        "actionId": "tx-1", "toolName": "t", "impactCostTheta": 50.0,
        "abstentionCostKappa": 4.0,
        "premises": [{"id": "p1", "calibratedViolationProbability": 0.01}]}}))
    done = subprocess.run(
        [sys.executable, "-m", "amv_calib", "gate", "--action", str(action), "--no-artifact",
         "--decision-log", str(fifo)],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(repo_root)})
    assert done.returncode == 2, done.stderr
    assert f"{fifo}: decision log is a FIFO, not a regular file" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_regular_log_through_a_link_is_still_appended(tmp_path: Path) -> None:
    (tmp_path / "real.jsonl").touch()
    link = tmp_path / "log.jsonl"
    link.symlink_to(tmp_path / "real.jsonl")
    gate = Gate(decision_log=link)
    for _ in range(300):  # past what a pipe holds; each record is one os.write, unbuffered
        gate.evaluate(ACTION)
    records = list(read_decision_log(tmp_path / "real.jsonl"))
    assert len(records) == 300 and all(r["action_id"] == "tx-1" for r in records)


# -- a LiveGate whose alias is gone -----------------------------------------------------------
def _drop_alias(mdir: Path, alias: str = "production") -> None:
    path = mdir / "aliases.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    del data["aliases"][alias]
    tmp = path.with_name(".aliases.json.edit")
    tmp.write_text(json.dumps(data, indent=2), encoding="utf-8")
    os.replace(tmp, path)


@pytest.mark.parametrize("how", ["alias removed", "aliases.json removed", "model folder removed"])
def test_a_live_gate_whose_alias_is_gone_abstains_and_says_so(
        live_models: Path, how: str) -> None:
    # Attack: the alias was withdrawn (or the model deleted) and a running LiveGate kept
    # PROCEEDing with the version it had loaded, for as long as the process lived.
    mdir = live_models / "m"
    promote("m", "v1", alias="production", models_dir=live_models)
    promote("m", "v2", alias="challenger", models_dir=live_models)
    records: list[dict[str, Any]] = []
    live = LiveGate(f"{mdir}@production", poll_seconds=0, decision_log=records.append)
    assert live.evaluate(ACTION).regime == "PROCEED" and live.version == "v1"
    if how == "alias removed":
        _drop_alias(mdir)
    elif how == "aliases.json removed":
        (mdir / "aliases.json").unlink()
    else:
        shutil.rmtree(mdir)
    d = live.evaluate(ACTION)
    assert d.regime == "ABSTAIN"
    assert d.reason.startswith("artifact refused: alias 'production' is gone, version v1 no "
                               "longer serves: "), d.reason
    if how == "model folder removed":
        assert "the model folder is gone" in d.reason
    status = live.status()
    assert live.version is None and not status["verified"] and status["refusals"] == 1
    assert records[-1]["calibrator"] == {"name": None, "version": None}
    assert "is gone" in records[-1]["refused"]["reason"]
    if how != "model folder removed":  # it comes back when the alias names a version again
        promote("m", "v1", alias="production", models_dir=live_models)
        assert live.evaluate(ACTION).regime == "PROCEED" and live.version == "v1"
        assert live.status()["refused"] is None


@pytest.mark.parametrize("damage", ["torn", "not an object", "unreadable"])
def test_a_torn_or_unreadable_alias_file_keeps_the_last_verified_version(
        live_models: Path, damage: str) -> None:
    mdir = live_models / "m"
    promote("m", "v1", alias="production", models_dir=live_models)
    live = LiveGate(f"{mdir}@production", poll_seconds=0)
    expected = live.evaluate(ACTION)
    path = mdir / "aliases.json"
    if damage == "torn":
        path.write_bytes(path.read_bytes()[:40])
    elif damage == "not an object":
        path.write_text("[]", encoding="utf-8")
    else:
        path.unlink()
        os.mkfifo(path)  # a reader of it would hang; it is refused, and says nothing
    assert live.evaluate(ACTION) == expected and live.version == "v1"
    assert live.status()["refused"] is not None


# -- times out of range ------------------------------------------------------------------------
@pytest.mark.parametrize("when", [
    "0001-01-01T00:00:00+14:00",
    "9999-12-31T23:59:59-14:00",
    datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=1))),
])
def test_an_outcome_time_out_of_range_in_utc_is_a_value_error(
        tmp_path: Path, when: str | datetime) -> None:
    # Attack: OutcomeLog.record(time="0001-01-01T00:00:00+14:00") raised OverflowError
    # where ValueError is documented.
    with OutcomeLog(tmp_path / "o.jsonl") as log:
        with pytest.raises(ValueError, match=r"time=.* is out of range: in UTC it falls "
                                             r"outside the years 1 to 9999"):
            log.record(action_id="tx-1", violated=False, time=when)
        assert log.records_written == 0


def test_an_early_outcome_time_is_written_with_a_four_digit_year(tmp_path: Path) -> None:
    # strftime's %Y wrote year 5 as "5-01-01...", which no ISO-8601 reader takes
    with OutcomeLog(tmp_path / "o.jsonl") as log:
        rec = log.record(action_id="tx-1", violated=False, time="0005-01-01T01:00:00+01:00")
    assert rec["time"] == "0005-01-01T00:00:00.000000Z"
    parsed = datetime.fromisoformat(rec["time"])
    assert parsed == datetime(5, 1, 1, tzinfo=UTC)


def test_source_date_epoch_out_of_range_is_a_config_error(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from amv_calib.artifacts import _export

    monkeypatch.setenv("SOURCE_DATE_EPOCH", "9" * 30)
    with pytest.raises(ConfigError, match=r"\$SOURCE_DATE_EPOCH='9+' is out of range"):
        _export._utc_now()
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "86400")
    assert _export._utc_now() == "1970-01-02T00:00:00Z"


# -- a decision-log record lost after a failed write -----------------------------------------------
_FULL_DISK = textwrap.dedent("""
    import os, resource, signal, sys
    from amv_calib.gate import DecisionLogWriter

    path = sys.argv[1]
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead of being killed
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    w = DecisionLogWriter(path)
    w.append({"action_id": "before", "regime": "PROCEED"})
    limit = os.path.getsize(path) + 40  # room for part of the next record only
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
    try:
        w.append({"action_id": "lost", "regime": "VERIFY", "reason": "x" * 200})
    except OSError as exc:
        print("failed:", exc.errno)
    resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))  # the disk has room again
    w.append({"action_id": "after", "regime": "ABSTAIN"})
    w.close()
""")


def test_failed_append_loses_only_its_own_record(tmp_path: Path) -> None:
    # Attack: a full disk (here RLIMIT_FSIZE) cut a record in the middle; the next append
    # was glued onto the fragment and lost, and the reader then refused the whole log.
    log = tmp_path / "decisions.jsonl"
    done = subprocess.run([sys.executable, "-c", _FULL_DISK, str(log)], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("failed: 27")  # EFBIG: the write really failed part-way
    lines = log.read_bytes().split(b"\n")
    assert len(lines) == 4 and lines[-1] == b""  # before, the fragment, after
    assert lines[1] and not lines[1].endswith(b"}")  # the fragment is a line of its own

    with pytest.raises(DataContractError, match=r"line 2 is not a JSON object"):
        list(read_decision_log(log))
    stats = LogReadStats()
    with pytest.warns(UserWarning, match="skipped corrupt line 2"):
        records = list(read_decision_log(log, on_corrupt="skip", stats=stats))
    assert [r["action_id"] for r in records] == ["before", "after"]
    assert (stats.records, stats.corrupt, stats.corrupt_lines) == (2, 1, [2])


def test_failed_append_before_any_byte_leaves_the_file_as_it_was(tmp_path: Path) -> None:
    log = tmp_path / "decisions.jsonl"
    script = _FULL_DISK.replace("os.path.getsize(path) + 40", "os.path.getsize(path)")
    done = subprocess.run([sys.executable, "-c", script, str(log)], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert [r["action_id"] for r in records] == ["before", "after"]


# -- one writer's failed append swallows another process's record ----------------------------------
_OTHER_WRITER = textwrap.dedent("""
    import sys
    from amv_calib.gate import DecisionLogWriter

    w = DecisionLogWriter(sys.argv[1])  # opened before the other writer fails
    w.append({"action_id": "b-first", "regime": "PROCEED"})
    print("ready", flush=True)
    sys.stdin.readline()
    w.append({"action_id": "b-second", "regime": "ABSTAIN"})
    w.close()
""")


def test_failed_append_of_one_process_loses_no_record_of_another(tmp_path: Path) -> None:
    # Attack: writer A's write failed part-way (ulimit -f), leaving a fragment; writer B (its
    # own process, its file already open) appended next, glued onto the fragment, and the
    # reader skipped the whole line: B lost a record it was told was written. Now every
    # record starts on a fresh line, under a lock all writers take.
    log = tmp_path / "decisions.jsonl"
    other = subprocess.Popen([sys.executable, "-c", _OTHER_WRITER, str(log)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert other.stdout is not None and other.stdout.readline().strip() == "ready"
    # writer A fails part-way and writes nothing more (it gave up, or it exited)
    script = _FULL_DISK.replace('w.append({"action_id": "after", "regime": "ABSTAIN"})', "")
    failed = subprocess.run([sys.executable, "-c", script, str(log)], capture_output=True,
                            text=True, timeout=60)
    assert failed.returncode == 0 and failed.stdout.startswith("failed: 27"), failed.stderr
    assert not log.read_bytes().endswith(b"\n")  # A's fragment ends the file
    assert other.communicate("go\n", timeout=60)[1] is None and other.returncode == 0
    lines = log.read_bytes().split(b"\n")
    assert len(lines) == 5 and lines[2] and not lines[2].endswith(b"}")  # the fragment alone
    stats = LogReadStats()
    with pytest.warns(UserWarning, match="skipped corrupt line 3"):
        records = list(read_decision_log(log, on_corrupt="skip", stats=stats))
    assert [r["action_id"] for r in records] == ["b-first", "before", "b-second"]
    assert (stats.records, stats.corrupt, stats.fragments) == (3, 1, 0)
