"""Benchmark: load an artifact, and one probability from it, beside scikit-learn.

Targets (issue 5): ``load_artifact`` and ``Gate.from_artifact`` under 5 ms; one probability
through ``PortableCalibrator.predict_one`` at least 20x faster than scikit-learn's
``predict_proba`` on one row (the same probability required). Both sides run in the same
process, on the same fitted model, timed alike (``bench/README.md``): process CPU time,
rounds of the same number of calls alternating, one untimed warm-up call each; so the ratio
is meaningful on a noisy machine.

Run: ``.venv/bin/python bench/bench_artifacts.py [--quick] [--check] [--out FILE]``. Numbers
go to ``bench/results/artifacts.json``.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import _bench
import numpy as np
import pandas as pd

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


def _per_call_us(sides: dict[str, Callable[[], Any]], calls: int, rounds: int
                 ) -> dict[str, list[float]]:
    """CPU microseconds per call of each side, one figure per round of ``calls`` calls."""
    def loop(fn: Callable[[], Any]) -> Callable[[], None]:
        def run() -> None:
            for _ in range(calls):
                fn()
        return run

    t = _bench.alternate({k: loop(fn) for k, fn in sides.items()}, rounds=rounds)
    return {k: [c / calls * 1e6 for c in r.cpu] for k, r in t.items()}


def main(argv: list[str] | None = None) -> int:
    args = _bench.parser(__doc__, "artifacts").parse_args(argv)
    n_rows, load_calls, one_calls, rounds = (2_000, 20, 200, 3) if args.quick \
        else (20_000, 200, 5_000, 7)

    from sklearn.linear_model import LogisticRegression

    from amv_calib.artifacts._export import export_artifact
    from amv_calib.calibration._calibrators import PlattCalibrator
    from amv_calib.contract._artifact import load_artifact
    from amv_calib.contract._features import SEED_FEATURE_MAP, PortableCalibrator
    from amv_calib.gate import Gate

    claims = _claims(n_rows, seed=20261202)
    y = claims["violated"].to_numpy()
    design = SEED_FEATURE_MAP.transform(claims)
    lr = LogisticRegression(C=100.0, max_iter=5000).fit(design, y)
    portable = PortableCalibrator(
        kind="linear", feature_map=SEED_FEATURE_MAP, intercept=float(lr.intercept_[0]),
        coef=tuple(float(c) for c in lr.coef_[0]), source="bench-logistic")
    platt = PlattCalibrator().fit(claims, y)

    results: dict[str, Any] = {"quick": args.quick, "rows_fitted": n_rows, "rounds": rounds}
    with tempfile.TemporaryDirectory() as tmp:
        fig = Path(tmp) / "reliability.png"
        # A realistic artifact: joblib copy and a ~60 KB figure, all hashed on every load.
        fig.write_bytes(np.random.default_rng(0).bytes(60_000))
        res = export_artifact(calibrator=portable, name="bench", models_dir=Path(tmp) / "m",
                              thresholds=None, figures=[fig], joblib_model=lr)
        loads = _per_call_us({"load_artifact": lambda: load_artifact(res.path),
                              "gate_from_artifact":
                                  lambda: Gate.from_artifact(res.path, strict=True)},
                             load_calls, rounds)
        results["load_artifact_ms"] = statistics.median(loads["load_artifact"]) / 1e3
        results["load_artifact_ms_rounds"] = [u / 1e3 for u in loads["load_artifact"]]
        results["gate_from_artifact_ms"] = statistics.median(loads["gate_from_artifact"]) / 1e3
        # First load in a fresh interpreter (modules imported, nothing else warm), wall time.
        probe = ("import sys, time\nfrom amv_calib.contract._artifact import load_artifact\n"
                 "t0 = time.perf_counter()\nload_artifact(sys.argv[1])\n"
                 "print((time.perf_counter() - t0) * 1e3)\n")
        firsts = [float(subprocess.run([sys.executable, "-c", probe, str(res.path)],
                                       capture_output=True, text=True, check=True).stdout)
                  for _ in range(3 if args.quick else 5)]
        results["load_artifact_first_call_wall_ms"] = statistics.median(firsts)
        loaded = load_artifact(res.path).calibrator

    row = claims.iloc[[123]]
    claim = {c: float(row[c].iloc[0]) for c in
             ("recency_hours", "source_trust_score", "model_confidence", "contradiction_flag")}
    design_row = design[[123]]
    p_ours = loaded.predict_one(claim)
    p_sklearn = float(lr.predict_proba(design_row)[0, 1])
    results["p_predict_one"], results["p_sklearn"] = p_ours, p_sklearn
    same_p = abs(p_ours - max(0.001, min(0.999, p_sklearn))) < 1e-12

    one = _per_call_us({"predict_one": lambda: loaded.predict_one(claim),
                        "sklearn": lambda: lr.predict_proba(design_row),
                        "platt": lambda: platt.predict_proba(row)}, one_calls, rounds)
    ours, bare, full = (statistics.median(one[k]) for k in ("predict_one", "sklearn", "platt"))
    results["predict_one_us"] = ours
    results["sklearn_lr_predict_proba_1row_us"] = bare
    results["predict_one_speedup_vs_sklearn"] = bare / ours
    results["predict_one_speedup_vs_sklearn_rounds"] = [
        b / o for b, o in zip(one["sklearn"], one["predict_one"], strict=True)]
    results["platt_predict_proba_1row_dataframe_us"] = full
    results["predict_one_speedup_vs_platt_dataframe"] = full / ours
    targets = [
        _bench.at_most("load_artifact (CPU)", results["load_artifact_ms"], LOAD_TARGET_MS,
                       unit=" ms"),
        _bench.at_most("Gate.from_artifact (CPU)", results["gate_from_artifact_ms"],
                       LOAD_TARGET_MS, unit=" ms"),
        _bench.holds("predict_one gives sklearn's probability (clamped to the seed's range)",
                     same_p),
        _bench.at_least("predict_one speed over sklearn predict_proba on one row",
                        results["predict_one_speedup_vs_sklearn"], SPEEDUP_TARGET, unit="x",
                        full_only=True, ours=ours, baseline=bare, side_unit=" µs CPU",
                        baseline_name="scikit-learn predict_proba, one row"),
    ]

    print("\n".join([
        f"load_artifact            {results['load_artifact_ms']:8.3f} ms CPU",
        f"  first call, fresh process {results['load_artifact_first_call_wall_ms']:6.3f} ms wall",
        f"Gate.from_artifact       {results['gate_from_artifact_ms']:8.3f} ms CPU",
        f"predict_one              {ours:8.2f} us CPU",
        f"sklearn predict_proba    {bare:8.2f} us CPU (LogisticRegression, 1 row, design given)",
        f"  speedup                {bare / ours:8.1f} x",
        f"PlattCalibrator.predict_proba {full:8.2f} us CPU (1-row DataFrame)",
        f"  speedup                {full / ours:8.1f} x",
    ]))
    _bench.write_results(args.out, results, targets, quick=args.quick)
    return _bench.finish(targets, quick=args.quick, check=args.check)


if __name__ == "__main__":
    sys.exit(main())
