"""Benchmark: load an artifact, and one probability from it, beside scikit-learn.

Targets (issue 5): ``load_artifact`` and ``Gate.from_artifact`` under 5 ms; one probability
through ``PortableCalibrator.predict_one`` at least 20x faster than scikit-learn's
``predict_proba`` on one row. Both sides run in the same process, on the same fitted model,
so the ratio is meaningful on a noisy machine.

Run: ``.venv/bin/python bench/bench_artifacts.py [--quick] [--out FILE]``. Numbers go to
``bench/results/artifacts.json``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
LOAD_TARGET_MS = 5.0
SPEEDUP_TARGET = 20.0


def _claims(n: int, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    frame = pd.DataFrame({
        "recency_hours": rng.exponential(300.0, n),
        "source_trust_score": rng.uniform(0.0, 1.0, n),
        "model_confidence": rng.beta(5.0, 2.0, n),
        "contradiction_flag": rng.random(n) < 0.1,
    })
    from amv_calib.contract._features import seed_prior_calibrator

    frame["violated"] = rng.random(n) < seed_prior_calibrator().predict(frame)
    return frame


def _per_call_us(fn: Callable[[], Any], calls: int, rounds: int) -> list[float]:
    """Microseconds per call, one figure per round of ``calls`` calls."""
    fn()  # warm caches and lazy imports
    out = []
    for _ in range(rounds):
        t0 = time.perf_counter_ns()
        for _ in range(calls):
            fn()
        out.append((time.perf_counter_ns() - t0) / calls / 1e3)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="tiny run (smoke test)")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "artifacts.json")
    args = ap.parse_args(argv)
    n_rows, load_calls, one_calls, rounds = (2_000, 20, 200, 3) if args.quick \
        else (20_000, 200, 5_000, 7)

    from sklearn.linear_model import LogisticRegression

    from amv_calib.artifacts._export import export_artifact
    from amv_calib.contract._artifact import load_artifact
    from amv_calib.contract._features import SEED_FEATURE_MAP, PortableCalibrator

    claims = _claims(n_rows, seed=20261202)
    y = claims["violated"].to_numpy()
    design = SEED_FEATURE_MAP.transform(claims)
    lr = LogisticRegression(C=100.0, max_iter=5000).fit(design, y)
    portable = PortableCalibrator(
        kind="linear", feature_map=SEED_FEATURE_MAP, intercept=float(lr.intercept_[0]),
        coef=tuple(float(c) for c in lr.coef_[0]), source="bench-logistic")
    platt: Any = None
    try:
        from amv_calib.calibration._calibrators import PlattCalibrator

        platt = PlattCalibrator().fit(claims, y)
    except ImportError:
        pass

    results: dict[str, Any] = {"quick": args.quick, "rows_fitted": n_rows}
    with tempfile.TemporaryDirectory() as tmp:
        fig = Path(tmp) / "reliability.png"
        # A realistic artifact: joblib copy and a ~60 KB figure, all hashed on every load.
        fig.write_bytes(np.random.default_rng(0).bytes(60_000))
        res = export_artifact(calibrator=portable, name="bench", models_dir=Path(tmp) / "m",
                              thresholds=None, figures=[fig], joblib_model=lr)
        load_us = _per_call_us(lambda: load_artifact(res.path), load_calls, rounds)
        results["load_artifact_ms"] = statistics.median(load_us) / 1e3
        results["load_artifact_ms_rounds"] = [u / 1e3 for u in load_us]
        gate_ms: float | None = None
        try:
            from amv_calib.gate import Gate

            gate_us = _per_call_us(lambda: Gate.from_artifact(res.path, strict=True),
                                   load_calls, rounds)
            gate_ms = statistics.median(gate_us) / 1e3
        except (ImportError, AttributeError) as exc:
            results["gate_from_artifact_skipped"] = f"amv_calib.gate.Gate unavailable: {exc}"
        results["gate_from_artifact_ms"] = gate_ms
        # First load in a fresh interpreter (modules imported, nothing else warm).
        probe = ("import sys, time\nfrom amv_calib.contract._artifact import load_artifact\n"
                 "t0 = time.perf_counter()\nload_artifact(sys.argv[1])\n"
                 "print((time.perf_counter() - t0) * 1e3)\n")
        firsts = [float(subprocess.run([sys.executable, "-c", probe, str(res.path)],
                                       capture_output=True, text=True, check=True).stdout)
                  for _ in range(3 if args.quick else 5)]
        results["load_artifact_first_call_ms"] = statistics.median(firsts)
        loaded = load_artifact(res.path).calibrator

    row = claims.iloc[[123]]
    claim = {c: float(row[c].iloc[0]) for c in
             ("recency_hours", "source_trust_score", "model_confidence", "contradiction_flag")}
    design_row = design[[123]]
    p_ours = loaded.predict_one(claim)
    p_sklearn = float(lr.predict_proba(design_row)[0, 1])
    assert abs(p_ours - max(0.001, min(0.999, p_sklearn))) < 1e-12, (p_ours, p_sklearn)

    ours = statistics.median(_per_call_us(lambda: loaded.predict_one(claim), one_calls, rounds))
    bare = statistics.median(_per_call_us(lambda: lr.predict_proba(design_row), one_calls,
                                          rounds))
    results["predict_one_us"] = ours
    results["sklearn_lr_predict_proba_1row_us"] = bare
    results["predict_one_speedup_vs_sklearn"] = bare / ours
    if platt is not None:
        full = statistics.median(_per_call_us(lambda: platt.predict_proba(row), one_calls,
                                              rounds))
        results["platt_predict_proba_1row_dataframe_us"] = full
        results["predict_one_speedup_vs_platt_dataframe"] = full / ours
    results["targets"] = {
        "load_artifact_under_5ms": results["load_artifact_ms"] < LOAD_TARGET_MS,
        "gate_from_artifact_under_5ms": None if gate_ms is None else gate_ms < LOAD_TARGET_MS,
        "predict_one_20x_sklearn": results["predict_one_speedup_vs_sklearn"] >= SPEEDUP_TARGET,
    }

    lines = [
        f"load_artifact            {results['load_artifact_ms']:8.3f} ms   "
        f"(target < {LOAD_TARGET_MS:g} ms)",
        f"  first call, fresh process {results['load_artifact_first_call_ms']:6.3f} ms",
        "Gate.from_artifact       " + ("   n/a" if gate_ms is None else f"{gate_ms:8.3f} ms"),
        f"predict_one              {ours:8.2f} us",
        f"sklearn predict_proba    {bare:8.2f} us   (LogisticRegression, 1 row, design given)",
        f"  speedup                {bare / ours:8.1f} x    (target >= {SPEEDUP_TARGET:g}x)",
    ]
    if platt is not None:
        lines += [
            f"PlattCalibrator.predict_proba {results['platt_predict_proba_1row_dataframe_us']:8.2f}"
            " us (1-row DataFrame)",
            f"  speedup                {results['predict_one_speedup_vs_platt_dataframe']:8.1f} x",
        ]
    print("\n".join(lines))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
