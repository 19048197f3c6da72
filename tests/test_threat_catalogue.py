"""The threat catalogue: each attack of the hardening review, reproduced, and what it meets now.

One section per numbered item of the review (bad input, faults and concurrency). Each test
replays the attack as it was found and asserts the new outcome: nothing lost, nothing hangs,
nothing fails open. ``docs/failure-modes.md`` lists the refusals these tests pin down.
"""

from __future__ import annotations

import json
import re
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


# -- 7. two pipeline runs at once corrupt the result --------------------------------------
@pytest.fixture(scope="module")
def small_pipeline(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from amv_calib.claims import synth_claims, write_claims

    d = tmp_path_factory.mktemp("pipeline")
    claims = write_claims(synth_claims(3000, seed=5), d / "claims.csv")
    toml = d / "p.toml"
    toml.write_text(f"""
[pipeline]
name = "small"
workdir = "work"
tracking = false

[[steps]]
name = "ingest"
kind = "ingest"
input = "{claims}"

[[steps]]
name = "compare"
kind = "compare"
claims = "@ingest.claims"
folds = 3
n_boot = 50
""", encoding="utf-8")
    return toml


def _run(toml: Path, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "amv_calib", "-q", "run", str(toml),
                             "--force", *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_second_run_of_a_pipeline_fails_at_once_naming_the_holder(small_pipeline: Path) -> None:
    # Attack: two `amv-calib run` of one pipeline shared its folders and Optuna study.
    first, second = _run(small_pipeline), _run(small_pipeline)
    outs = [(p.wait(timeout=300), p.communicate()[1]) for p in (first, second)]
    codes = sorted(code for code, _ in outs)
    assert codes == [0, 75], outs
    refused = next(err for code, err in outs if code == 75)
    assert re.search(r"pipeline 'small' .* is locked by pid \d+ on \S+ since "
                     r"\d{4}-\d\d-\d\dT", refused), refused
    assert "--wait" in refused


def test_wait_takes_the_lock_when_the_holder_is_done(small_pipeline: Path) -> None:
    workdir = small_pipeline.parent / "work"
    workdir.mkdir(exist_ok=True)
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from amv_calib.locks import exclusive\n"
         "with exclusive(sys.argv[1], what='test'):\n"
         "    print('held', flush=True); time.sleep(1.5)", str(workdir / ".lock")],
        stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    short = _run(small_pipeline, "--wait", "0.2")
    assert short.wait(timeout=120) == 75
    assert "waited 0.2 s" in short.communicate()[1]
    patient = _run(small_pipeline, "--wait")
    assert patient.wait(timeout=300) == 0, patient.communicate()[1]
    holder.wait(timeout=30)


def test_lock_of_a_dead_run_is_taken_over_and_its_partial_folders_swept(
        small_pipeline: Path) -> None:
    workdir = small_pipeline.parent / "work"
    workdir.mkdir(exist_ok=True)
    # what a SIGKILLed run leaves: its holder record (no live flock) and a half-written step
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()
    (workdir / ".lock").write_text(json.dumps({"pid": int(dead), "host": "h",
                                               "started_utc": "2026-01-01T00:00:00Z"}))
    left = workdir / "compare.partial-deadbeef"
    left.mkdir()
    (left / "half.json").write_text("{")
    run = _run(small_pipeline)
    assert run.wait(timeout=300) == 0, run.communicate()[1]
    assert not left.exists()
    assert not list(workdir.glob("*.partial-*"))


@pytest.mark.parametrize("value", ["[]", "3", "true", '""'],
                         ids=["list", "number", "bool", "empty"])
def test_pipeline_workdir_of_the_wrong_type_is_refused(
        small_pipeline: Path, value: str, capsys: pytest.CaptureFixture[str]) -> None:
    from amv_calib.cli import main

    before = set(small_pipeline.parent.iterdir())
    code = main(["run", str(small_pipeline), "--set", f"pipeline.workdir={value}"])
    assert code == 2
    err = capsys.readouterr().err
    assert "[pipeline] workdir=" in err and "must be a non-empty string" in err, err
    assert set(small_pipeline.parent.iterdir()) == before  # no folder named '[]' appeared
