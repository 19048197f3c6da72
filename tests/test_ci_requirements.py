"""The rule of ``tests/conftest.py`` for tests that need node, the seed document or Spark:
skipped where missing, failed naming what is missing when ``CI`` is set."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

TEST = "tests/gate/test_gate_seed_node.py::test_harness_strips_every_annotation"


@pytest.fixture(scope="module")
def bare_checkout(repo_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The seed-engine tests and their conftest in a folder with no ``../shared/seed/``."""
    root = tmp_path_factory.mktemp("elsewhere") / "checkout"
    for rel in ("pyproject.toml", "tests/conftest.py", "tests/repo_paths.py",
                "tests/gate/test_gate_seed_node.py"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(repo_root / rel, root / rel)
    engine = Path("tests", "gate", "seed_engine")
    shutil.copytree(repo_root / engine, root / engine)
    assert not (root.parent / "shared").exists()
    return root


def _pytest(root: Path, ci: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env["PATH"] = str(Path(sys.executable).parent)  # no node on it
    if ci is not None:
        env["CI"] = ci
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider",
                           TEST], cwd=root, env=env, capture_output=True, text=True,
                          timeout=120, check=False)


@pytest.mark.slow  # each runs pytest in a subprocess on a bare checkout
def test_ci_turns_the_skip_into_a_failure_naming_what_is_missing(bare_checkout: Path) -> None:
    proc = _pytest(bare_checkout, "true")
    assert proc.returncode == 1, proc.stdout
    assert "CI is set, so this test must run, but it needs node" in proc.stdout
    assert "the node executable is not on PATH" in proc.stdout
    assert (f"the seed document (no .txt holding class AMVGuardEngine in "
            f"{bare_checkout.parent / 'shared' / 'seed'}") in proc.stdout
    assert "1 error" in proc.stdout and "skipped" not in proc.stdout


@pytest.mark.slow
@pytest.mark.parametrize("ci", [None, "false"], ids=["unset", "false"])
def test_without_ci_the_test_skips_naming_what_is_missing(bare_checkout: Path,
                                                          ci: str | None) -> None:
    proc = _pytest(bare_checkout, ci)
    assert proc.returncode == 0, proc.stdout
    assert "1 skipped" in proc.stdout
    assert "needs node" in proc.stdout and "the seed document (no .txt" in proc.stdout
