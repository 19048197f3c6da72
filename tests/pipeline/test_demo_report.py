"""``make demo``'s pipeline (pipelines/retrain.toml), run on a fresh copy of the repository:
every threshold and figure its report prints is the exported manifest's."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest


def _fresh_copy(repo: Path, dest: Path) -> None:
    """The tracked and unignored files, as a clone has them (no user run's leftovers)."""
    files = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=repo, capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, files):
        src = repo / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)


@pytest.mark.slow
def test_demo_prints_what_ships(tmp_path: Path, repo_root: Path) -> None:
    copy = tmp_path / "repo"
    _fresh_copy(repo_root, copy)
    env = {k: v for k, v in os.environ.items()
           if k not in ("MLFLOW_TRACKING_URI", "AMV_CALIB_MODELS_DIR", "AMV_CALIB_TRUSTED_KEYS")}
    env["PYTHONPATH"] = str(repo_root)
    # -P: the package is this checkout's (PYTHONPATH), not the copy's that ``-m`` would put
    # first: the same source, but the copy has no numba cache, and compiling the gate's
    # kernels afresh was most of the run's CPU (a clone's `make demo` compiles them once)
    proc = subprocess.run([sys.executable, "-P", "-m", "amv_calib.cli", "run",
                           "pipelines/retrain.toml"], cwd=copy, env=env, capture_output=True,
                          text=True, timeout=1800, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    exported = re.search(r"^## artifact(?: \(cached[^)]*\))?: amv-guard (v\d+)\n(.+)$", out,
                         flags=re.M)
    assert exported, out
    version = exported.group(1)
    manifest = json.loads((Path(exported.group(2)) / "manifest.json").read_text("utf-8"))

    # the thresholds: printed once, and they are the manifest's
    blocks = re.findall(r"^\{\n.*?^\}$", out, flags=re.M | re.S)
    gates = [json.loads(b) for b in blocks if '"lambda_cost_scale"' in b]
    assert gates == [manifest["gate"]], gates
    assert out.count('"harm_price"') == 1

    # the certificate's figures are the manifest's
    cert = manifest["certificate"]
    chosen = cert["path"][cert["chosen"]]
    mu = re.search(r"^chosen: harm price (\S+),", out, flags=re.M)
    assert mu and float(mu.group(1)) == manifest["gate"]["harm_price"] \
        == chosen.get("harm_price", 0.0)
    assert f"Learn-then-Test, {cert['n']} calibration episodes" in out
    cal = cert["calibration"]
    assert f"calibration episodes: {cal['n']} of {cal['read']} given" in out
    assert f"{cal['excluded']} excluded" in out
    bound = re.search(r"Clopper-Pearson upper bound ([0-9.]+)%", out)
    assert bound and float(bound.group(1)) == round(100 * cert["observed_upper_bound"], 2)

    # a held-out table only from episodes set aside, replaying the shipped gate: its
    # instances are the certificate's set-aside ones, its bound column the certificate's
    tables = re.findall(r"^(\d+) instances, seed \d+$", out, flags=re.M)
    assert tables == [str(cal["test"])], tables
    row = re.search(rf"^AMV-Guard \({manifest['gate']['planner']}\) .* "
                    rf"{100 * cert['observed_upper_bound']:.2f} +{cal['test']}\s*$",
                    out, flags=re.M)
    assert row, out

    # promotion and registration name the exported version, both numberings
    assert re.search(rf"^## promotion: {version} ", out, flags=re.M)
    reg = re.search(rf"^## MLflow model: {version} registered as amv-guard-calibrator "
                    r"\(MLflow version (\d+)\)", out, flags=re.M)
    assert reg, out
    assert f"@champion = {version} (MLflow version {reg.group(1)})" in out
    assert "{'" not in out and "{'" not in proc.stderr  # no Python reprs
    # each alias change announced once: in the report, not also on stderr
    assert "now points at" not in proc.stderr
    # ingest knows no column here it would warn about, nor does it warn about label's
    assert "ignoring columns" not in proc.stderr
