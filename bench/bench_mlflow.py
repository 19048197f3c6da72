"""Benchmark: what tracking and the servable model cost, beside named baselines, same run.

Measured:

* **trial logging** -- the per-trial metrics of a 200-trial study (every numeric column of
  ``trials.csv`` as ``trial/<column>`` with step = trial number, ~2,000 values) into a fresh
  SQLite store, the way :mod:`amv_calib.tracking` does it (``log_batch`` in chunks of 1,000),
  beside the baseline of one ``mlflow.log_metric`` call per value (each call one SQLite
  commit), both logging every value, the same number of rounds, rounds alternating, after
  the same warm-up (one run of each on the first 20 values). Wall time on both sides (the
  commits wait on the disk). Ratio: baseline / ours. Both sides' runs are read back: they
  must hold the same (key, step, value) entries.
* **whole comparison + tuning logging** -- ``PipelineTracker.log_comparison`` and
  ``log_tuning`` of small stage folders (figures, tables, nested runs), in seconds; no
  baseline, reported so that the pipeline's tracking share is known.
* **probabilities through the pyfunc** -- ``GateModel.predict`` (``mlflow.pyfunc`` loaded
  model: schema enforcement plus the row checks) on 100,000 claims, beside the bare
  ``PortableCalibrator.predict`` on the same array (equal results required). Process CPU
  on both sides. Ratio: pyfunc / bare (the wrapper's overhead).
* **one decision through the pyfunc** -- a one-row decision request, beside the same
  request by hand (``json.loads``, ``CandidateAction.from_dict``, ``Gate.evaluate``: end to
  end) and beside ``Gate.evaluate`` on the parsed action (engine only); the same decision
  required. Process CPU on both sides. Ratios: pyfunc / each.

Run ``.venv/bin/python bench/bench_mlflow.py [--quick] [--check]``; numbers go to
``bench/results/mlflow.json`` (``--out``). The machine is shared: read the ratios, not the
absolute numbers.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import _bench

ROOT = _bench.ROOT
#: Values each side logs in its untimed warm-up run.
WARMUP_VALUES = 20
sys.path.insert(0, str(ROOT / "tests" / "tracking"))


def _trial_logging(tmp: Path, n_trials: int, rounds: int) -> dict[str, Any]:
    import mlflow
    from _mlflow_stages import fake_tune_dir
    from mlflow import MlflowClient

    from amv_calib import tracking
    from amv_calib.tracking._values import _log_batch, _trial_metrics

    tune = fake_tune_dir(tmp / "t", n_trials=n_trials)
    import pandas as pd

    trials = pd.read_csv(tune / "trials.csv")
    metrics = _trial_metrics(trials)
    uri = tracking.ensure_tracking_db(f"sqlite:///{tmp / 'bench.db'}")
    client = MlflowClient(tracking_uri=uri)
    exp = client.create_experiment("bench", artifact_location=(tmp / "mlruns").as_uri())
    mlflow.set_tracking_uri(uri)

    def ours(values: list[Any]) -> str:
        rid = client.create_run(exp).info.run_id
        _log_batch(client, rid, metrics=values)
        return str(rid)

    def per_call(values: list[Any]) -> str:
        with mlflow.start_run(experiment_id=exp) as run:
            for m in values:
                mlflow.log_metric(m.key, m.value, step=m.step)
        return str(run.info.run_id)

    def logged(rid: str) -> list[tuple[str, int, float]]:
        keys = client.get_run(rid).data.metrics
        return sorted((m.key, m.step, m.value) for k in keys
                      for m in client.get_metric_history(rid, k))

    for side in (ours, per_call):
        side(metrics[:WARMUP_VALUES])
    t = _bench.alternate({"log_batch": lambda: ours(metrics),
                          "per_call": lambda: per_call(metrics)}, rounds=rounds, warmup=0)
    want = sorted((m.key, m.step, m.value) for m in metrics)
    same = logged(t["log_batch"].last) == want == logged(t["per_call"].last)
    ours_s, base_s = t["log_batch"].wall_median, t["per_call"].wall_median
    return {"values": len(metrics), "trials": n_trials, "rounds": rounds,
            "log_batch_s": ours_s, "per_call_s": base_s,
            "log_batch_s_rounds": t["log_batch"].wall, "per_call_s_rounds": t["per_call"].wall,
            "ratio_per_call_over_batch": base_s / ours_s, "same_values_logged": same}


def _stage_logging(tmp: Path) -> dict[str, Any]:
    from _mlflow_stages import fake_compare_dir, fake_tune_dir, make_claims

    from amv_calib import tracking
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

    t = _bench.alternate({"stages": run}, rounds=3, warmup=0)["stages"]
    return {"comparison_and_tuning_s": t.wall_median}


def _pyfunc(tmp: Path, n_claims: int, rounds: int, calls: int) -> dict[str, Any]:
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
    p = _bench.alternate({"pyfunc": lambda: model.predict(frame), "bare": lambda: cal.predict(X)},
                         rounds=rounds)
    same_p = bool(np.array_equal(p["pyfunc"].last["p_violation"].to_numpy(), p["bare"].last))

    cell = mlflow_model.decision_example()["action"][0]
    one = pd.DataFrame({"action": [cell]})
    request = json.loads(cell)
    action = CandidateAction.from_dict(request["action"])
    verifiers = [Verifier.from_dict(v) for v in request["verifiers"]]

    def by_hand() -> Any:
        req = json.loads(cell)
        return gate.evaluate(CandidateAction.from_dict(req["action"]),
                             [Verifier.from_dict(v) for v in req["verifiers"]])

    def repeat(fn: Any) -> Any:
        return lambda: [fn() for _ in range(calls)][-1]

    d = _bench.alternate({"pyfunc": repeat(lambda: model.predict(one)),
                          "by_hand": repeat(by_hand),
                          "evaluate": repeat(lambda: gate.evaluate(action, verifiers))},
                         rounds=rounds)
    dec = d["pyfunc"].last
    same_d = all(dec.loc[0, "decision"] == x.regime and dec.loc[0, "reason"] == x.reason
                 for x in (d["by_hand"].last, d["evaluate"].last))
    ms = {k: v.cpu_median * 1e3 / calls for k, v in d.items()}
    return {"claims": n_claims, "rounds": rounds, "decision_calls_per_round": calls,
            "pyfunc_predict_cpu_s": p["pyfunc"].cpu_median,
            "bare_predict_cpu_s": p["bare"].cpu_median,
            "ratio_pyfunc_over_bare": p["pyfunc"].cpu_median / p["bare"].cpu_median,
            "same_probabilities": same_p,
            "pyfunc_decision_ms": ms["pyfunc"], "by_hand_decision_ms": ms["by_hand"],
            "gate_evaluate_ms": ms["evaluate"],
            "ratio_decision_pyfunc_over_by_hand": ms["pyfunc"] / ms["by_hand"],
            "ratio_decision_pyfunc_over_gate": ms["pyfunc"] / ms["evaluate"],
            "same_decision": same_d}


def main(argv: list[str] | None = None) -> int:
    args = _bench.parser(__doc__, "mlflow").parse_args(argv)
    n_trials, n_claims, rounds, calls = (5, 2_000, 3, 20) if args.quick \
        else (200, 100_000, 5, 200)
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        results: dict[str, Any] = {"quick": args.quick,
                                   "trial_logging": _trial_logging(tmp / "a", n_trials, rounds),
                                   "pyfunc": _pyfunc(tmp / "c", n_claims, rounds, calls)}
        if not args.quick:
            results["stage_logging"] = _stage_logging(tmp / "b")
    t, p = results["trial_logging"], results["pyfunc"]
    targets = [
        _bench.holds("log_batch and one log_metric per value log the same entries",
                     t["same_values_logged"]),
        _bench.holds("the pyfunc's probabilities equal the bare calibrator's",
                     p["same_probabilities"]),
        _bench.holds("the pyfunc decides as Gate.evaluate", p["same_decision"]),
        _bench.reported("trial metrics: log_batch speed over one log_metric per value, wall",
                        t["ratio_per_call_over_batch"], unit="x", ours=t["log_batch_s"],
                        baseline=t["per_call_s"], side_unit=" s",
                        baseline_name="mlflow.log_metric, one call per value"),
        _bench.reported("probabilities: pyfunc overhead over the bare calibrator, CPU",
                        p["ratio_pyfunc_over_bare"], unit="x",
                        ours=p["pyfunc_predict_cpu_s"] * 1e3,
                        baseline=p["bare_predict_cpu_s"] * 1e3, side_unit=" ms CPU",
                        baseline_name="PortableCalibrator.predict, same claims"),
        _bench.reported("one decision: pyfunc overhead over parse + Gate.evaluate, CPU",
                        p["ratio_decision_pyfunc_over_by_hand"], unit="x",
                        ours=p["pyfunc_decision_ms"], baseline=p["by_hand_decision_ms"],
                        side_unit=" ms CPU",
                        baseline_name="json.loads + from_dict + Gate.evaluate"),
    ]
    _bench.write_results(args.out, results, targets, quick=args.quick)
    print(f"trial metrics ({t['values']} values, median of {t['rounds']} rounds, wall): "
          f"log_batch {t['log_batch_s']:.3f} s, one log_metric per value "
          f"{t['per_call_s']:.2f} s -> {t['ratio_per_call_over_batch']:.0f}x faster")
    print(f"probabilities for {p['claims']} claims (CPU): pyfunc "
          f"{p['pyfunc_predict_cpu_s'] * 1e3:.1f} ms, bare calibrator "
          f"{p['bare_predict_cpu_s'] * 1e3:.1f} ms -> {p['ratio_pyfunc_over_bare']:.1f}x")
    print(f"one decision (CPU): pyfunc {p['pyfunc_decision_ms']:.2f} ms, by hand (parse + "
          f"evaluate) {p['by_hand_decision_ms']:.3f} ms, Gate.evaluate "
          f"{p['gate_evaluate_ms']:.3f} ms -> {p['ratio_decision_pyfunc_over_by_hand']:.0f}x / "
          f"{p['ratio_decision_pyfunc_over_gate']:.0f}x")
    if "stage_logging" in results:
        print(f"log_comparison + log_tuning (4 calibrators, 200 trials): "
              f"{results['stage_logging']['comparison_and_tuning_s']:.2f} s")
    print(f"wrote {args.out}")
    return _bench.finish(targets, quick=args.quick, check=args.check)


if __name__ == "__main__":
    sys.exit(main())
