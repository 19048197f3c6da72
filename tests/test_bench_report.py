"""``bench/report.py``: the benchmark page is written from the committed results files."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from repo_paths import load_module


@pytest.fixture(scope="module")
def report(repo_root: Path) -> ModuleType:
    return load_module(repo_root / "bench" / "report.py", "bench_report")


def test_the_page_is_regenerated_byte_for_byte(repo_root: Path, tmp_path: Path) -> None:
    # what `make bench-report` runs, written elsewhere: the committed page must be its output
    page = tmp_path / "benchmarks.md"
    subprocess.run([sys.executable, str(repo_root / "bench" / "report.py"), "--out", str(page)],
                   check=True, capture_output=True, timeout=60, cwd=repo_root)
    assert page.read_bytes() == (repo_root / "docs" / "benchmarks.md").read_bytes()


def test_every_benchmark_has_a_results_file_saying_when_and_where(repo_root: Path,
                                                                  report: ModuleType) -> None:
    scripts = {p.stem.removeprefix("bench_") for p in (repo_root / "bench").glob("bench_*.py")}
    assert scripts == set(report.TOPICS)
    for topic in sorted(scripts):
        res = json.loads((repo_root / "bench" / "results" / f"{topic}.json").read_text("utf-8"))
        run = res["run"]
        assert run["date"] and run["machine"]["cpu"] and run["machine"]["logical_cpus"], topic
        assert res["targets"], topic


def _target(name: str, value: float | None, bound: float | None, **kw: Any) -> dict[str, Any]:
    row = {"name": name, "value": value, "bound": bound, "op": None if bound is None else "<=",
           "unit": "x", "met": bound is None or (value is not None and value <= bound),
           "missing": None, "full_only": False, "property": False, "ours": None,
           "baseline": None, "baseline_name": None, "side_unit": "", "checked": True}
    return {**row, **kw}


def test_rows_show_ours_the_named_baseline_the_ratio_and_the_target(
        report: ModuleType, tmp_path: Path) -> None:
    run = {"date": "2026-01-02T03:04Z", "quick": False, "options": ["--check"],
           "machine": {"cpu": "Some CPU", "logical_cpus": 2, "memory_gib": 8.0,
                       "os": "Linux 6", "python": "3.11.9"}, "load_average_1min": 1.5}
    targets = [
        _target("a / b | c", 1.25, 2.0, ours=12.5, baseline=10.0, baseline_name="bare b",
                side_unit=" s"),
        _target("missed one", 3.0, 2.0),
        _target("same answers", 1.0, 1.0, property=True, op=">=", unit="", met=True),
        _target("node side", None, 2.0, missing="node is not installed", met=False),
        _target("full size only", 9.0, 1.0, checked=False, met=False),
        _target("reported", 40.0, None, ours=2.0, baseline=80.0, baseline_name="per call",
                side_unit=" ms"),
    ]
    (tmp_path / "gate.json").write_text(json.dumps({"run": run, "targets": targets}),
                                        encoding="utf-8")
    page = report.render(tmp_path)
    assert page == report.render(tmp_path)
    assert ("Run 2026-01-02T03:04Z (UTC), full size (`--check`), on Some CPU (2 logical CPUs, "
            "8 GiB), Linux 6, Python 3.11.9, load average 1.5.") in page
    rows = [line for line in page.splitlines() if line.startswith("| ")]
    assert "| a / b \\| c | 12.5 s | bare b: 10.0 s | 1.25x | <= 2x | met |" in rows
    assert "| missed one | — | — | 3.00x | <= 2x | **missed** |" in rows
    assert "| same answers | — | — | holds | holds | met |" in rows
    assert ("| node side | — | — | not measured (node is not installed) | <= 2x | **missed** |"
            in rows)
    assert "| full size only | — | — | 9.00x | <= 1x | not checked |" in rows
    assert "| reported | 2.00 ms | per call: 80.0 ms | 40.0x | none (reported) | — |" in rows
    # the summary counts the missed targets that were checked; a benchmark without results
    # is listed as not run
    assert "| [gate](#gate) | 2026-01-02T03:04Z | full | 6 | 2 |" in rows
    assert "| [spark](#spark) | not run | | | |" in rows
