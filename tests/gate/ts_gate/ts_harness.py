"""Build and run the TypeScript gate (``clients/typescript``) for the tests and the benchmark.

``built_dist()`` runs
``npm ci`` when ``node_modules`` is absent and ``npm run build`` when a source is newer than
``dist``, under a file lock (test workers may ask at once). ``run_harness()`` sends every
request to ONE node process running ``harness.mjs``, JSON lines in and out. Loaded through
``importlib`` (``tests/`` has no ``__init__``).
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parents[2]
TS_DIR = REPO_ROOT / "clients" / "typescript"
DIST = TS_DIR / "dist"
HARNESS = HERE / "harness.mjs"
#: The artifact rules both loaders read; the build copies them into dist/.
RULES = REPO_ROOT / "amv_calib" / "contract" / "artifact_rules.json"


def unavailable_reason() -> str | None:
    """Why the TypeScript gate cannot run here, or None (the benchmark says it and stops;
    the tests are marked ``requires_node`` and ``requires_npm``, tests/conftest.py)."""
    for tool in ("node", "npm"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed, so the TypeScript gate cannot be built and run"
    return None


@contextmanager
def _locked() -> Iterator[None]:
    with open(TS_DIR / ".build.lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _stale() -> bool:
    index = DIST / "index.js"
    if not index.is_file():
        return True
    built = index.stat().st_mtime
    sources = [*(TS_DIR / "src").glob("*.ts"), TS_DIR / "tsconfig.json", TS_DIR / "package.json",
               *(TS_DIR / "scripts").glob("*.mjs"), RULES]
    return any(p.stat().st_mtime > built for p in sources)


def _npm(*args: str) -> None:
    done = subprocess.run(["npm", *args], cwd=TS_DIR, capture_output=True, text=True,
                          timeout=600, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"npm {' '.join(args)} failed ({done.returncode}):\n"
                           f"{done.stdout[-2000:]}\n{done.stderr[-2000:]}")


def built_dist() -> Path:
    """``clients/typescript/dist``, built from the sources if it is missing or stale."""
    with _locked():
        if not (TS_DIR / "node_modules" / "typescript").is_dir():
            _npm("ci", "--no-audit", "--no-fund")
        if _stale():
            _npm("run", "build")
    return DIST


def run_harness(requests: Sequence[dict[str, Any]], *, env: dict[str, str] | None = None,
                timeout: float = 600) -> dict[int, dict[str, Any]]:
    """Answers of the TypeScript gate to ``requests`` (each with an ``id``), by id."""
    payload = "".join(json.dumps(r, allow_nan=False) + "\n" for r in requests)
    done = subprocess.run(["node", str(HARNESS)], input=payload, capture_output=True, text=True,
                          timeout=timeout, check=False, env={**os.environ, **(env or {})})
    if done.returncode != 0:
        raise RuntimeError(f"node failed ({done.returncode}): {done.stderr[-4000:]}")
    # "\n" alone ends an answer: splitlines() would also cut at a U+2028 in a string
    out = [json.loads(line) for line in done.stdout.split("\n") if line.strip()]
    return {a["id"]: a for a in out}
