"""Benchmark: what tracking and the servable model cost, beside named baselines, same run.

Measured:

* **trial logging** -- the per-trial metrics of a 200-trial study (every numeric column of
  ``trials.csv`` as ``trial/<column>`` with step = trial number, ~2,000 values) into a fresh
  SQLite store, the way :mod:`amv_calib.tracking` does it (``log_batch`` in chunks of 1,000),
  beside the baseline of one ``mlflow.log_metric`` call per value (timed on the first 300
  values and scaled linearly: each call is one SQLite commit). Ratio: baseline / ours.
* **whole comparison + tuning logging** -- ``PipelineTracker.log_comparison`` and
  ``log_tuning`` of small stage folders (figures, tables, nested runs), in seconds; no
  baseline, reported so that the pipeline's tracking share is known.
* **probabilities through the pyfunc** -- ``GateModel.predict`` (``mlflow.pyfunc`` loaded
  model: schema enforcement plus the row checks) on 100,000 claims, beside the bare
  ``PortableCalibrator.predict`` on the same array. Ratio: pyfunc / bare (the overhead).
* **one decision through the pyfunc** -- a one-row decision request, beside
  ``Gate.evaluate`` on the same parsed action. Ratio: pyfunc / bare.

Run ``.venv/bin/python bench/bench_mlflow.py [--quick]``; numbers go to
``bench/results/mlflow.json``. Timings are wall-clock medians; the machine is shared, so read
the ratios, not the absolute numbers.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
#: Values the per-call baseline logs (then scaled to the full count; it is linear).
BASELINE_VALUES = 300
sys.path.insert(0, str(ROOT / "tests" / "tracking"))


def _timed(fn: Callable[[], Any], rounds: int) -> tuple[float, Any]:
    times, out = [], None
    for _ in range(rounds):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def _trial_logging(tmp: Path, n_trials: int) -> dict[str, Any]:
    import mlflow
    from _mlflow_stages import fake_tune_dir
    from mlflow import MlflowClient

    from amv_calib.tracking import _tracker as tracking
    from amv_calib.tracking._tracker import _log_batch, _trial_metrics

    tune = fake_tune_dir(tmp / "t", n_trials=n_trials)
    import pandas as pd

    trials = pd.read_csv(tune / "trials.csv")
    metrics = _trial_metrics(trials)
    uri = tracking.ensure_tracking_db(f"sqlite:///{tmp / 'bench.db'}")
    client = MlflowClient(tracking_uri=uri)
    exp = client.create_experiment("bench", artifact_location=(tmp / "mlruns").as_uri())

    def ours() -> None:
        rid = client.create_run(exp).info.run_id
        _log_batch(client, rid, metrics=metrics)

    # One commit per call makes the baseline linear in the values: time a prefix, scale up.
    subset = metrics[:BASELINE_VALUES]

    def baseline() -> None:
        mlflow.set_tracking_uri(uri)
        with mlflow.start_run(experiment_id=exp):
            for m in subset:
                mlflow.log_metric(m.key, m.value, step=m.step)

    t_ours, _ = _timed(ours, 3)
    t_sub, _ = _timed(baseline, 1)
    t_base = t_sub * len(metrics) / len(subset)
    return {"values": len(metrics), "trials": n_trials, "log_batch_s": t_ours,
            "per_call_s": t_base, "per_call_timed_values": len(subset),
            "ratio_per_call_over_batch": t_base / t_ours}


def _stage_logging(tmp: Path) -> dict[str, Any]:
    from _mlflow_stages import fake_compare_dir, fake_tune_dir, make_claims

    from amv_calib.tracking import _tracker as tracking
    claims = make_claims(2000)
    tmp.mkdir(parents=True, exist_ok=True)
    claims_path = tmp / "claims.parquet"
    claims.to_parquet(claims_path)
    compare = fake_compare_dir(tmp / "s", claims, claims_path)
    tune = fake_tune_dir(tmp / "s", n_trials=200)
    uri = f"sqlite:///{tmp / 'stages.db'}"
    tracking.ensure_tracking_db(uri)

    def run() -> None:
        with tracking.pipeline_run("bench", tracking_uri=uri) as t:
            t.log_comparison(compare, claims=claims, claims_path=claims_path)
            t.log_tuning(tune)

    seconds, _ = _timed(run, 3)
    return {"comparison_and_tuning_s": seconds}


def _pyfunc(tmp: Path, n_claims: int) -> dict[str, Any]:
    import mlflow
    import numpy as np
    import pandas as pd
    from _mlflow_stages import make_claims

    from amv_calib.artifacts._export import export_artifact
    from amv_calib.contract._features import seed_prior_calibrator
    from amv_calib.gate import CandidateAction, Gate, Verifier
    from amv_calib.tracking import _pyfunc as mlflow_model

    art = export_artifact(calibrator=seed_prior_calibrator(), name="bench",
                          models_dir=tmp / "models")
    path = tmp / "model"
    mlflow.pyfunc.save_model(str(path), python_model=mlflow_model.__file__,
                             artifacts={mlflow_model.ARTIFACT_KEY: str(art.path)},
                             signature=mlflow_model.model_signature(),
                             input_example=mlflow_model.input_example(),
                             pip_requirements=mlflow_model.pip_requirements())
    model = mlflow.pyfunc.load_model(str(path))
    claims = make_claims(n_claims, seed=5)
    frame = claims[["recency_hours", "source_trust_score", "model_confidence",
                    "contradiction_flag"]]
    gate = Gate.from_artifact(art.path, strict=True)
    assert gate.calibrator is not None
    cal = gate.calibrator
    X = frame.to_numpy(dtype=float)
    t_py, out = _timed(lambda: model.predict(frame), 3)
    t_bare, want = _timed(lambda: cal.predict(X), 5)
    assert np.array_equal(out["p_violation"].to_numpy(), want)

    request = json.loads(mlflow_model.decision_example()["action"][0])
    one = pd.DataFrame({"action": [json.dumps(request)]})
    action = CandidateAction.from_dict(request["action"])
    verifiers = [Verifier.from_dict(v) for v in request["verifiers"]]
    t_dec, dec = _timed(lambda: model.predict(one), 20)
    t_gate, d = _timed(lambda: gate.evaluate(action, verifiers), 200)
    assert dec["decision"][0] == d.regime
    return {"claims": n_claims, "pyfunc_predict_s": t_py, "bare_predict_s": t_bare,
            "ratio_pyfunc_over_bare": t_py / t_bare,
            "pyfunc_decision_ms": t_dec * 1e3, "gate_evaluate_ms": t_gate * 1e3,
            "ratio_decision_pyfunc_over_gate": t_dec / t_gate}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="tiny sizes, for the smoke test")
    args = ap.parse_args(argv)
    n_trials, n_claims = (5, 2_000) if args.quick else (200, 100_000)
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        results = {"quick": args.quick,
                   "trial_logging": _trial_logging(tmp / "a", n_trials),
                   "pyfunc": _pyfunc(tmp / "c", n_claims)}
        if not args.quick:
            results["stage_logging"] = _stage_logging(tmp / "b")
    out = ROOT / "bench" / "results" / "mlflow.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    t, p = results["trial_logging"], results["pyfunc"]
    print(f"trial metrics ({t['values']} values): log_batch {t['log_batch_s']:.3f} s, "
          f"one log_metric per value {t['per_call_s']:.2f} s -> "
          f"{t['ratio_per_call_over_batch']:.0f}x faster")
    print(f"probabilities for {p['claims']} claims: pyfunc {p['pyfunc_predict_s'] * 1e3:.1f} ms,"
          f" bare calibrator {p['bare_predict_s'] * 1e3:.1f} ms -> "
          f"{p['ratio_pyfunc_over_bare']:.1f}x")
    print(f"one decision: pyfunc {p['pyfunc_decision_ms']:.2f} ms, Gate.evaluate "
          f"{p['gate_evaluate_ms']:.3f} ms -> {p['ratio_decision_pyfunc_over_gate']:.0f}x")
    if "stage_logging" in results:
        print(f"log_comparison + log_tuning (4 calibrators, 200 trials): "
              f"{results['stage_logging']['comparison_and_tuning_s']:.2f} s")
    print(f"wrote {out.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
