"""``bench/_bench.py``: the rules every benchmark shares (``bench/README.md``), and that every
script in ``bench/`` takes ``--check``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from repo_paths import REPO_ROOT, load_module

BENCH = REPO_ROOT / "bench"
SCRIPTS = sorted(p.name for p in BENCH.glob("bench_*.py"))


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load_module(BENCH / "_bench.py", "_bench")


def test_sides_get_the_same_warm_up_and_rounds_alternating(bench: ModuleType) -> None:
    calls: list[str] = []

    def side(name: str, value: int | None) -> Any:
        def run() -> int | None:
            calls.append(name)
            return value
        return run

    t = bench.alternate({"a": side("a", 1), "b": side("b", None)}, rounds=3, warmup=2)
    assert calls == ["a", "a", "b", "b"] + ["a", "b"] * 3
    assert len(t["a"].cpu) == len(t["b"].wall) == 3 and t["a"].last == 1


def test_check_fails_naming_each_missed_target(bench: ModuleType,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    targets = [bench.at_most("time ratio", 2.5, 2.0, unit="x"),
               bench.at_least("speed-up", 30.0, 20.0, unit="x"),
               bench.holds("same decisions", False),
               bench.at_least("node ratio", None, 20.0, missing="node is not installed"),
               bench.at_most("full-size only", 9.0, 1.0, full_only=True)]
    assert bench.finish(targets, quick=True, check=False) == 0  # reported, not enforced
    assert bench.finish(targets, quick=True, check=True) == 1
    err = capsys.readouterr().err.splitlines()
    assert err == ["missed target: time ratio: 2.5x (target <= 2x)",
                   "missed target: same decisions: does not hold",
                   "missed target: node ratio: not measured (node is not installed); "
                   "target: >= 20"]
    assert bench.finish(targets, quick=False, check=True) == 1
    assert "missed target: full-size only: 9 (target <= 1)" in capsys.readouterr().err
    assert bench.finish(targets[1:2], quick=False, check=True) == 0
    rows = bench.report_targets(targets, quick=True)
    assert [(r["met"], r["checked"]) for r in rows] == [
        (False, True), (True, True), (False, True), (False, True), (False, False)]


def test_every_benchmark_takes_check() -> None:
    # one interpreter runs every script's --help (argparse exits 0 after printing it), the
    # scripts' folder first on the path, as when each runs as `python bench/<name>.py`
    probe = ("import os, runpy, sys\n"
             "sys.path.insert(0, os.path.dirname(sys.argv[1]))\n"
             "for path in sys.argv[1:]:\n"
             "    sys.argv = [path, '--help']\n"
             "    print('=== ' + path, flush=True)\n"
             "    try:\n"
             "        runpy.run_path(path, run_name='__main__')\n"
             "    except SystemExit as exc:\n"
             "        assert exc.code in (0, None), (path, exc.code)\n")
    out = subprocess.run([sys.executable, "-c", probe, *(str(BENCH / s) for s in SCRIPTS)],
                         capture_output=True, text=True, timeout=300, check=True,
                         cwd=BENCH.parent).stdout
    helps = dict(part.split("\n", 1) for part in out.split("=== ")[1:])
    assert sorted(Path(k).name for k in helps) == SCRIPTS
    lacking = [Path(k).name for k, text in helps.items()
               if not all(opt in text for opt in ("--check", "--quick", "--out"))]
    assert not lacking, lacking
