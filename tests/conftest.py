"""Fixtures shared across the test folders (one folder per stage of ``amv_calib``), and the
rule for tests that need something outside Python.

A test marked ``requires_node``, ``requires_npm``, ``requires_seed`` or ``requires_spark``
skips, naming what is missing, where that is not installed; when the environment variable
``CI`` is set (and not ``false`` or ``0``) it fails instead, naming it: there they must run.
"""

from __future__ import annotations

import fcntl
import functools
import importlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from repo_paths import REPO_ROOT

# One BLAS thread per test process (unless the environment says otherwise): ``make test``
# runs two workers on two cores, where OpenBLAS's own threads oversubscribe the cores and
# spin while they wait (about 30% more CPU in the calibration fits, twice as much under
# load). Set before the workers and the tests' subprocesses start, so they inherit it; this
# process loaded numpy already (a plugin imports it), so its pool is limited as well.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
if os.environ["OPENBLAS_NUM_THREADS"] == "1":
    from threadpoolctl import threadpool_limits

    threadpool_limits(limits=1, user_api="blas")

sys.path.insert(0, str(REPO_ROOT / "tests" / "gate" / "seed_engine"))
#: Runs the seed document's TypeScript engine under node (``tests/gate/seed_engine/``).
SEED_HARNESS: ModuleType = importlib.import_module("seed_harness")


def _node_missing() -> str | None:
    return None if shutil.which("node") else "the node executable is not on PATH"


def _npm_missing() -> str | None:
    return None if shutil.which("npm") else "the npm executable is not on PATH"


def _seed_missing() -> str | None:
    if SEED_HARNESS.seed_file(REPO_ROOT) is not None:
        return None
    return (f"no .txt holding class AMVGuardEngine in {REPO_ROOT.parent / 'shared' / 'seed'}, "
            f"../shared/seed/ beside the checkout")


def _spark_missing() -> str | None:
    from amv_calib.spark import spark_unavailable

    return spark_unavailable()


#: marker -> (what the test needs, why it is missing here or None)
REQUIREMENTS: dict[str, tuple[str, Callable[[], str | None]]] = {
    "requires_node": ("node (to run the TypeScript engines)", _node_missing),
    "requires_npm": ("npm (to build clients/typescript)", _npm_missing),
    "requires_seed": ("the seed document", _seed_missing),
    "requires_spark": ("the Spark engine (pyspark and Java 17)", _spark_missing),
}


@functools.cache
def _missing(marker: str) -> str | None:
    return REQUIREMENTS[marker][1]()


def in_ci() -> bool:
    """Whether ``CI`` is set (to anything but an empty string, ``false``, ``no`` or ``0``)."""
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def pytest_runtest_setup(item: pytest.Item) -> None:
    missing = [f"{what} ({why})" for marker, (what, _) in REQUIREMENTS.items()
               if item.get_closest_marker(marker) is not None
               and (why := _missing(marker)) is not None]
    if not missing:
        return
    if in_ci():
        pytest.fail(f"CI is set, so this test must run, but it needs {'; '.join(missing)}",
                    pytrace=False)
    pytest.skip(f"needs {'; '.join(missing)}")
#: The Spark test files' folder (one scheduling unit: :func:`pytest_xdist_make_scheduler`).
_SPARK = "tests/spark/"
#: The files that take longest (the Spark files, one unit for one worker: a session and
#: jobs of tens of seconds; then the others of more than ~20 s, longest first, as measured
#: from a fresh clone): run first, so that under ``make test``'s two workers (pytest-xdist,
#: one file per worker at a time) no long file starts last and both workers finish about
#: together.
_LONG_FIRST = (_SPARK, "tests/monitoring/test_monitor.py",
               "tests/test_readme_recipes.py", "tests/tuning/test_certify_validity.py",
               "tests/claims/test_episodes.py", "tests/pipeline/test_pipeline.py",
               "tests/tracking/test_tracking.py", "tests/tracking/test_mlflow_server.py",
               "tests/monitoring/test_sequential.py")


def _start_rank(item: pytest.Item) -> int:
    return next((i for i, prefix in enumerate(_LONG_FIRST) if item.nodeid.startswith(prefix)),
                len(_LONG_FIRST))


@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Under ``--dist loadfile``, the Spark files as one unit: one worker runs them all, in
    one Spark session (each session's first label pays seconds of the JVM's start-up and
    compilation), while the other runs the rest."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class _SparkTogether(LoadFileScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return _SPARK if nodeid.startswith(_SPARK) else \
                super()._split_scope(nodeid)

    return _SparkTogether(config, log)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # a stable sort keeps each file's tests together and in their written order
    items.sort(key=_start_rank)


#: Compiles the batch gate's two entry points (``amv_calib/gate/_compiled.py``: the myopic
#: rule and the planner) into numba's on-disk cache, as the first ``evaluate_batch`` of a
#: process does when the cache is cold, holding the lock file it is given until it is done.
_WARM_BATCH_GATE = """
import fcntl, sys
import numpy as np
from amv_calib.gate import Gate
fcntl.flock(int(sys.argv[1]), fcntl.LOCK_EX)  # taken by the parent already: a no-op
row = {"p": np.full((1, 3), 0.01), "premise_mask": np.ones((1, 3), dtype=bool),
       "theta": [100.0], "kappa": [5.0], "resolves": np.ones((1, 2, 3), dtype=bool),
       "cost": np.full((1, 2), 0.01), "reliability": np.full((1, 2), 0.9)}
for planner in ("myopic", "lookahead"):
    Gate(planner=planner).evaluate_batch(**row)
"""
#: The lock file the warm-up holds, for the workers (they inherit the environment).
_WARMING_ENV = "AMV_CALIB_TESTS_BATCH_GATE_WARMING"
_WARMING = pytest.StashKey[tuple[subprocess.Popen[bytes], Path]]()


def pytest_configure(config: pytest.Config) -> None:
    # From a fresh clone numba's cache is cold, and under pytest-xdist each worker compiled
    # the batch gate at its first use, at the same time (about 40 s of CPU each). The
    # controller compiles it once, in the background, while the workers collect and run
    # the first files; a worker's first evaluate_batch waits for it (pytest_collection_finish)
    # and then loads it from the cache.
    if hasattr(config, "workerinput") or not getattr(config.option, "numprocesses", None):
        return
    fd, name = tempfile.mkstemp(prefix="amv-calib-batch-gate-", suffix=".lock")
    fcntl.flock(fd, fcntl.LOCK_EX)  # held by the warm-up's copy of fd until it exits
    warming = subprocess.Popen([sys.executable, "-c", _WARM_BATCH_GATE, str(fd)], cwd=REPO_ROOT,
                               pass_fds=(fd,), stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    os.close(fd)
    os.environ[_WARMING_ENV] = name
    config.stash[_WARMING] = (warming, Path(name))


def pytest_collection_finish(session: pytest.Session) -> None:
    # On a worker of such a run: the first evaluate_batch waits for the warm-up to finish
    # (or to fail: the lock goes with its process).
    name = os.environ.get(_WARMING_ENV)
    if name is None or not hasattr(session.config, "workerinput"):
        return
    from amv_calib.gate import _compiled

    decide_rows = _compiled.decide_rows

    @functools.wraps(decide_rows)
    def after_warm_up(*args: Any, **kwargs: Any) -> int:
        with open(name, "rb") as lock:
            fcntl.flock(lock, fcntl.LOCK_SH)
        _compiled.decide_rows = decide_rows
        return decide_rows(*args, **kwargs)

    _compiled.decide_rows = after_warm_up


def pytest_unconfigure(config: pytest.Config) -> None:
    if _WARMING not in config.stash:
        return
    warming, lock = config.stash[_WARMING]
    if warming.poll() is None:
        warming.kill()  # numba writes each cache file whole, by a rename: none is left half
        warming.wait()
    lock.unlink(missing_ok=True)


@pytest.fixture(scope="session")
def seed_harness() -> ModuleType:
    """The seed engine's harness module (``tests/gate/seed_engine/seed_harness.py``)."""
    return SEED_HARNESS


@pytest.fixture(scope="session")
def repo_root() -> Path:
    """The checkout: ``pipelines/``, ``data/``, ``models/`` and ``bench/`` live here."""
    return REPO_ROOT


@functools.cache
def _shipped_model_files() -> tuple[tuple[str, bytes], ...]:
    """The files of ``models/`` as the repository ships them: each git-tracked path with its
    content in the index (a fresh clone's), never what a run left in the working tree."""
    try:
        listed = subprocess.run(["git", "ls-files", "-z", "--", "models"], cwd=REPO_ROOT,
                                capture_output=True, check=True).stdout.decode()
    except (OSError, subprocess.CalledProcessError):
        listed = ""
    names = [n for n in listed.split("\0") if n]
    if not names:
        # Not a git checkout (an unpacked source archive): its models/ is what shipped.
        return tuple((p.relative_to(REPO_ROOT).as_posix(), p.read_bytes())
                     for p in sorted((REPO_ROOT / "models").rglob("*")) if p.is_file())
    return tuple((n, subprocess.run(["git", "show", f":{n}"], cwd=REPO_ROOT, capture_output=True,
                                    check=True).stdout) for n in names)


@pytest.fixture(scope="session")
def shipped_models() -> Callable[[Path], Path]:
    """A function that writes the shipped ``models/`` folder (``amv-guard/v1``, its
    ``aliases.json`` with ``production`` -> v1, ``README.md``) into a new folder and returns
    it: tests that promote, roll back or resolve aliases start from what a fresh clone has,
    whatever a user's runs did to the working tree."""

    def write(dest: Path) -> Path:
        for name, data in _shipped_model_files():
            target = dest / Path(name).relative_to("models")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        return dest

    return write


@pytest.fixture
def models_with_v2(tmp_path: Path, shipped_models: Callable[[Path], Path]) -> Path:
    """A models folder of the shipped files plus ``amv-guard/v2``, an export of v1's own
    calibrator and thresholds; production stays at v1 (for promote and rollback tests)."""
    import json

    from amv_calib.artifacts import export_artifact

    models = shipped_models(tmp_path / "models")
    v1 = models / "amv-guard" / "v1"
    thresholds = tmp_path / "thresholds.json"
    thresholds.write_text(json.dumps(
        json.loads((v1 / "manifest.json").read_text(encoding="utf-8"))["gate"]), "utf-8")
    assert export_artifact(calibrator=v1 / "calibrator.json", thresholds=thresholds,
                           name="amv-guard", models_dir=models).version == "v2"
    return models


@pytest.fixture(scope="session")
def examples_dir() -> Path:
    """``data/examples``: the hand-written decision logs, outcomes and store exports."""
    return REPO_ROOT / "data" / "examples"


@pytest.fixture(scope="session")
def sample_dir() -> Path:
    """``data/sample``: the bundled synthetic claims and episodes."""
    return REPO_ROOT / "data" / "sample"


@pytest.fixture
def run_bench(tmp_path: Path) -> Callable[..., dict[str, Any]]:
    """Run ``bench/<name>.py --quick --check`` (so that a benchmark does not rot, and the
    targets checked at the quick size hold), writing its JSON under ``tmp_path`` (never
    over ``bench/results/``), and return that JSON."""

    def run(name: str, *, timeout: float = 300) -> dict[str, Any]:
        out = tmp_path / f"{name}.json"
        proc = subprocess.run(
            [sys.executable, str(REPO_ROOT / "bench" / f"{name}.py"), "--quick", "--check",
             "--out", str(out)],
            capture_output=True, text=True, timeout=timeout, cwd=REPO_ROOT, check=False,
        )
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
        result: dict[str, Any] = json.loads(out.read_text(encoding="utf-8"))
        assert result["quick"] is True
        return result

    return run
