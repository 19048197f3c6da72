"""The gate benchmark runs (``--quick``), so that it does not rot; timings are not asserted."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_bench_gate_quick(tmp_path: Path) -> None:
    out = tmp_path / "gate.json"
    subprocess.run([sys.executable, str(ROOT / "bench" / "bench_gate.py"), "--quick",
                    "--out", str(out)], check=True, capture_output=True, text=True, timeout=300)
    report = json.loads(out.read_text())
    assert report["quick"] is True
    assert report["lookahead_6v_3p"]["lookahead_ms_median"] > 0
    assert "python_amv_myopic_ns" in report["single_one_premise_verifiers"]
