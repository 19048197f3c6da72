"""The README's "Your three jobs" recipes run as written, in order, in a fresh copy of the
repository (its tracked and untracked-but-not-ignored files, ``models/`` as shipped; ``.venv``
linked, not copied).

Each ```bash block runs in its own ``bash -e`` in the copy, so a failing command fails the
test with the block and its output. Two substitutions, printed when they happen:

- ``mlflow ui ... --port 5000`` serves until stopped: it runs in the background on a free port
  until it answers HTTP, then it is stopped (with one server worker, ``MLFLOW_WORKERS=1``, not
  its default four: one answers as well, and four cost three more imports of the server);
- ``AMV_CALIB_MODELS_DIR`` points at the copy's ``models/`` (unless a block sets it), because
  the installed package (an editable install of this checkout) would otherwise look in this
  checkout's.

The recipes need no other placeholder: where a user gives their own files, the README names
the example ones (``data/examples/logs/``).
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
from repo_paths import REPO_ROOT


def recipe_blocks(readme: str) -> list[str]:
    """The ```bash blocks of the section "Your three jobs", in order."""
    start = readme.index("## Your three jobs")
    end = readme.index("\n## ", start + 1)
    return re.findall(r"```bash\n(.*?)```", readme[start:end], flags=re.S)


def _fresh_copy(dest: Path, shipped_models: Callable[[Path], Path]) -> None:
    files = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO_ROOT, capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, files):
        src = REPO_ROOT / name
        if name.startswith("models/") or not src.is_file():
            continue  # models/ as shipped (below); or deleted in the working tree
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dest / name)
    # What a fresh clone has, whatever a run of this checkout did to its models/.
    shipped_models(dest / "models")
    (dest / ".venv").symlink_to(REPO_ROOT / ".venv")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _serve_until_up(command: str, cwd: Path, env: dict[str, str]) -> None:
    """Run a blocking ``mlflow ui`` command on a free port until it answers, then stop it."""
    port = _free_port()
    command = re.sub(r"--port \d+", f"--port {port}", command)
    print(f"substituted: running `{command.strip()}` with MLFLOW_WORKERS=1 until it answers, "
          f"then stopping it")
    proc = subprocess.Popen(["bash", "-c", f"exec {command}"], cwd=cwd,
                            env={**env, "MLFLOW_WORKERS": "1"},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            assert proc.poll() is None, proc.stdout.read().decode() if proc.stdout else ""
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2) as r:
                    assert r.status == 200
                    return
            except OSError:
                time.sleep(1)
        pytest.fail(f"`{command}` did not answer within 120 s")
    finally:
        os.killpg(proc.pid, 15)
        proc.wait(timeout=30)


def test_the_readme_names_three_jobs_with_recipes(repo_root: Path) -> None:
    blocks = recipe_blocks((repo_root / "README.md").read_text(encoding="utf-8"))
    assert len(blocks) >= 4
    assert any("retrain-from-logs.toml" in b for b in blocks)
    assert any("promote" in b and "rollback" in b for b in blocks)


@pytest.mark.slow
def test_readme_recipes_run_as_written(tmp_path: Path,
                                      shipped_models: Callable[[Path], Path]) -> None:
    copy = tmp_path / "repo"
    _fresh_copy(copy, shipped_models)
    env = {**os.environ, "AMV_CALIB_MODELS_DIR": str(copy / "models"),
           "PYTHONHASHSEED": "0"}
    env.pop("MLFLOW_TRACKING_URI", None)
    env.pop("AMV_CALIB_TRUSTED_KEYS", None)
    print(f"substituted: AMV_CALIB_MODELS_DIR={copy / 'models'}")
    for i, block in enumerate(recipe_blocks((copy / "README.md").read_text(encoding="utf-8"))):
        if "mlflow ui" in block:
            _serve_until_up(block, copy, env)
            continue
        proc = subprocess.run(["bash", "-e", "-c", block], cwd=copy, env=env,
                              capture_output=True, text=True, timeout=1800, check=False)
        assert proc.returncode == 0, (f"README block {i + 1} failed ({proc.returncode}):\n"
                                      f"{block}\n--- stdout\n{proc.stdout[-3000:]}\n"
                                      f"--- stderr\n{proc.stderr[-3000:]}")
    # The shipped models/ is as a fresh clone has it: the recipes wrote to out/models.
    shipped = shipped_models(tmp_path / "shipped")
    for path in sorted(p for p in shipped.rglob("*") if p.is_file()):
        rel = path.relative_to(shipped)
        assert (copy / "models" / rel).read_bytes() == path.read_bytes(), f"models/{rel} changed"
    assert sorted(p.name for p in (copy / "models" / "amv-guard").iterdir()) == \
        sorted(p.name for p in (shipped / "amv-guard").iterdir())
    assert (copy / "out" / "models" / "amv-guard" / "aliases.json").is_file()


def test_pipelines_write_versions_to_an_ignored_folder(repo_root: Path) -> None:
    # make demo (and every pipeline) must leave the tracked models/ as shipped: their
    # versions go to out/models, which git ignores.
    import tomllib

    for toml in sorted((repo_root / "pipelines").glob("*.toml")):
        spec = tomllib.loads(toml.read_text(encoding="utf-8"))["pipeline"]
        target = (toml.parent / spec["models_dir"]).resolve()
        assert target == repo_root / "out" / "models", toml.name
        ignored = subprocess.run(["git", "check-ignore", "-q", "out/models/amv-guard/v9"],
                                 cwd=repo_root, check=False)
        assert ignored.returncode == 0, "out/models/ is not ignored by git"

