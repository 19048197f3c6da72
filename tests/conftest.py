"""Fixtures shared across the test folders (one folder per stage of ``amv_calib``)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parent.parent
#: Files that take minutes each (a Spark session and jobs of tens of seconds): run first, so
#: that under ``make test``'s two workers (pytest-xdist, one file per worker at a time) the
#: longest files start first and both workers finish about together.
_LONG_FIRST = "tests/spark/"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # a stable sort keeps each file's tests together and in their written order
    items.sort(key=lambda item: not item.nodeid.startswith(_LONG_FIRST))


@pytest.fixture(scope="session")
def repo_root() -> Path:
    """The checkout: ``pipelines/``, ``data/``, ``models/`` and ``bench/`` live here."""
    return REPO


@pytest.fixture(scope="session")
def examples_dir() -> Path:
    """``data/examples``: the hand-written decision logs, outcomes and store exports."""
    return REPO / "data" / "examples"


@pytest.fixture(scope="session")
def sample_dir() -> Path:
    """``data/sample``: the bundled synthetic claims and episodes."""
    return REPO / "data" / "sample"


@pytest.fixture
def run_bench(tmp_path: Path) -> Callable[..., dict[str, Any]]:
    """Run ``bench/<name>.py --quick`` (so that a benchmark does not rot) and return the JSON
    it writes; ``out_flag`` is the script's option naming its output file."""

    def run(name: str, *, out_flag: str = "--out", timeout: float = 300) -> dict[str, Any]:
        out = tmp_path / f"{name}.json"
        proc = subprocess.run(
            [sys.executable, str(REPO / "bench" / f"{name}.py"), "--quick", out_flag, str(out)],
            capture_output=True, text=True, timeout=timeout, cwd=REPO, check=False,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        result: dict[str, Any] = json.loads(out.read_text(encoding="utf-8"))
        return result

    return run
