"""The threat catalogue: each attack of the hardening review, reproduced, and what it meets now.

One section per numbered item of the review (bad input, faults and concurrency). Each test
replays the attack as it was found and asserts the new outcome: nothing lost, nothing hangs,
nothing fails open. ``docs/failure-modes.md`` lists the refusals these tests pin down.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from amv_calib.exceptions import DataContractError
from amv_calib.gate import LogReadStats, read_decision_log


# -- 3. a decision-log record lost after a failed write ---------------------------------------
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
