"""Attacks on `amv-calib run` replayed: two runs of one pipeline at once, a lock left by a
dead run, a workdir of the wrong type, an input that is a device.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from threat_helpers import answers_within


# -- two pipeline runs at once corrupt the result --------------------------------------------------
@pytest.fixture(scope="module")
def small_pipeline(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from amv_calib.datasets import synth_claims, write_claims

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


@pytest.mark.slow
def test_second_run_of_a_pipeline_fails_at_once_naming_the_holder(small_pipeline: Path) -> None:
    # Attack: two `amv-calib run` of one pipeline shared its folders and Optuna study.
    lock = small_pipeline.parent / "work" / ".lock"
    first = _run(small_pipeline)
    deadline = time.monotonic() + 120
    while not (lock.exists() and lock.read_text()):  # the first run holds the folder
        assert first.poll() is None and time.monotonic() < deadline, "first run never locked"
        time.sleep(0.01)
    second = _run(small_pipeline)
    outs = [(p.wait(timeout=300), p.communicate()[1]) for p in (first, second)]
    codes = sorted(code for code, _ in outs)
    assert codes == [0, 75], outs
    refused = next(err for code, err in outs if code == 75)
    assert re.search(r"pipeline 'small' .* is locked by pid \d+ on \S+ since "
                     r"\d{4}-\d\d-\d\dT", refused), refused
    assert "--wait" in refused


@pytest.mark.slow
def test_wait_takes_the_lock_when_the_holder_is_done(small_pipeline: Path) -> None:
    workdir = small_pipeline.parent / "work"
    workdir.mkdir(exist_ok=True)
    # the holder keeps the lock until its stdin closes (not for a fixed time, which a loaded
    # machine's start-up of the short run could outlast)
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys; from amv_calib.locks import exclusive\n"
         "with exclusive(sys.argv[1], what='test'):\n"
         "    print('held', flush=True); sys.stdin.read()", str(workdir / ".lock")],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    short = _run(small_pipeline, "--wait", "0.2")
    assert short.wait(timeout=120) == 75
    assert "waited 0.2 s" in short.communicate()[1]
    patient = _run(small_pipeline, "--wait")
    time.sleep(1.0)  # the patient run is waiting (or still starting): either way it must wait
    assert patient.poll() is None
    assert holder.stdin is not None
    holder.stdin.close()
    assert holder.wait(timeout=30) == 0
    assert patient.wait(timeout=300) == 0, patient.communicate()[1]


@pytest.mark.slow
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


# -- an input that is a device hangs the run -------------------------------------------------------
def test_pipeline_input_of_dev_zero_is_refused_at_once(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Attack: a pipeline input of /dev/zero hung in the step's cache-key hashing.
    toml = tmp_path / "p.toml"
    toml.write_text("""
[pipeline]
name = "zero"
workdir = "work"
tracking = false

[[steps]]
name = "ingest"
kind = "ingest"
input = "/dev/zero"
""", encoding="utf-8")
    assert answers_within(["run", str(toml)]) == 2
    err = capsys.readouterr().err
    assert "/dev/zero: pipeline input is a device, not a regular file" in err, err
