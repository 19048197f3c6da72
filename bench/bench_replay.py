"""Benchmark: episode replay and Optuna tuning throughput, beside the scalar gate, same run.

Measured (targets of issue 6 and of the compiled batch engine) on 10,000 synthetic episodes
(``amv_calib.claims.synth_episodes``):

* replay throughput of the batch gate (``replay``: sequential stopping over all active
  instances with ``evaluate_batch``, the compiled engine), in instances/s and
  premise-evaluations/s, for the myopic rule, the seed engine and the lookahead planner;
  targets: >= 1 M premise-evaluations/s with the lookahead planner, the lookahead replay
  within 15x the myopic replay's time and the seed-mode replay within 10x. A
  *premise-evaluation* is one premise entering one gate decision: sum over decision steps
  of the premises of the instances still active.
* the named baseline: the scalar ``Gate.run`` loop (one ``CandidateAction`` per instance,
  the same answer stream) on a subset, timed in the same run; the ratio is batch / scalar.
  The subset's decisions are compared with the batch replay's (they must be identical).
* Optuna trials/s of ``tune_thresholds`` (constrained, tuning split of the 10,000
  episodes): the myopic planner sequentially and with 2 worker processes on a journal
  file (target 200 trials in under a minute), and the lookahead planner, 200 real trials
  sequentially (target under 20 s). Baseline: the same study loop with a constant
  objective (Optuna's own overhead per trial).

Run ``.venv/bin/python bench/bench_replay.py [--quick]``; the numbers go to
``bench/results/replay.json``.
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
PREMISE_EVAL_TARGET = 1_000_000  # per second, at least (lookahead planner)
LOOKAHEAD_OVER_MYOPIC = 15.0  # replay time ratio, at most
SEED_OVER_MYOPIC = 10.0  # replay time ratio, at most
TRIALS_TARGET_S = 60.0  # 200 trials, myopic planner, at most
LOOKAHEAD_TRIALS_TARGET_S = 20.0  # 200 trials, lookahead planner, at most


def _timed(fn: Callable[[], Any], rounds: int) -> tuple[float, float, Any]:
    """Median wall and CPU seconds of ``rounds`` calls after one warm-up call, last result.

    The machine is shared, so CPU time (``time.process_time``, this process only) is what an
    idle core would take; wall time is reported beside it.
    """
    out = fn()
    wall, cpu = [], []
    for _ in range(rounds):
        t0, c0 = time.perf_counter(), time.process_time()
        out = fn()
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return statistics.median(wall), statistics.median(cpu), out


def _calibrator() -> tuple[Any, str]:
    from amv_calib.contract._artifact import load_artifact
    from amv_calib.contract._features import seed_prior_calibrator

    try:
        art = load_artifact(None)
        return art.calibrator, f"champion {art.name}/{art.version}"
    except Exception:  # noqa: BLE001 - any refusal: fall back, say so
        return seed_prior_calibrator(), "seed prior (no champion artifact found)"


def _premise_evals(es: Any, gate: Any, p: Any, seed: int) -> tuple[int, Any, Any]:
    from amv_calib.tuning._replay import _gate_policy

    proceed, calls, steps = _gate_policy(es, gate, p, seed)
    m = es.premise_mask.sum(axis=1)
    # steps verifications -> steps + 1 decisions (the last one stops)
    return int((m * (steps + 1)).sum()), proceed, calls


def _scalar_loop(records: list[dict[str, Any]], probs: Any, gate: Any, seed: int
                 ) -> list[tuple[bool, int]]:
    from amv_calib.gate import CandidateAction, Premise, Verifier
    from amv_calib.tuning._replay import answer_uniform

    out = []
    for i, rec in enumerate(records):
        action = CandidateAction(
            action_id=rec["instance_id"], tool_name=rec["tool_name"],
            impact_cost_theta=rec["impact_cost_theta"],
            abstention_cost_kappa=rec["abstention_cost_kappa"],
            premises=tuple(Premise(id=pm["id"],
                                   calibrated_violation_probability=float(probs[i, j]))
                           for j, pm in enumerate(rec["premises"])),
        )
        verifiers = [Verifier.from_dict(v) for v in rec["verifiers"]]
        truth = {pm["id"]: pm["violated"] for pm in rec["premises"]}
        iid = rec["instance_id"]

        def verify(v: Any, _a: Any, iid: str = iid, truth: dict[str, bool] = truth
                   ) -> dict[str, bool]:
            return {pid: (answer_uniform(seed, iid, v.id, pid, 0) < v.symmetric_reliability)
                    != truth[pid] for pid in v.resolves_premise_ids}

        trace = gate.run(action, verifiers, verify)
        out.append((trace.final.regime == "PROCEED", trace.verifications))
    return out


def bench_replay(n: int, n_scalar: int, rounds: int, seed: int) -> dict[str, Any]:
    from amv_calib.claims._synth import synth_episodes
    from amv_calib.gate import Gate
    from amv_calib.tuning._replay import episode_set, replay

    records = synth_episodes(n, seed=seed)
    t0 = time.perf_counter()
    es = episode_set(records)
    load_s = time.perf_counter() - t0
    cal, cal_desc = _calibrator()
    p = es.probabilities(cal)
    out: dict[str, Any] = {"n_instances": n, "n_premises": es.n_premises, "calibrator": cal_desc,
                           "episode_set_s": load_s, "policies": {}}
    for name, kw in (("myopic", {"planner": "myopic"}), ("seed", {"mode": "seed"}),
                     ("lookahead", {"planner": "lookahead"})):
        gate = Gate(calibrator=cal, **kw)  # type: ignore[arg-type]
        secs, cpu, (evals, proceed, calls) = _timed(
            lambda g=gate: _premise_evals(es, g, p, seed), rounds)
        sub = records[:n_scalar]
        t0, c0 = time.perf_counter(), time.process_time()
        scalar = _scalar_loop(sub, p[:n_scalar], gate, seed)
        scalar_s, scalar_cpu = time.perf_counter() - t0, time.process_time() - c0
        same = all(
            (bool(proceed[i]), int(calls[i].sum())) == scalar[i] for i in range(len(sub))
        )
        out["policies"][name] = {
            "seconds": secs,
            "cpu_seconds": cpu,
            "instances_per_s": n / secs,
            "instances_per_cpu_s": n / cpu,
            "premise_evaluations": evals,
            "premise_evaluations_per_s": evals / secs,
            "premise_evaluations_per_cpu_s": evals / cpu,
            "scalar_loop_instances_per_s": len(sub) / scalar_s,
            "scalar_loop_instances_per_cpu_s": len(sub) / scalar_cpu,
            "ratio_batch_over_scalar": (n / secs) / (len(sub) / scalar_s),
            "ratio_batch_over_scalar_cpu": (n / cpu) / (len(sub) / scalar_cpu),
            "scalar_subset": len(sub),
            "identical_to_scalar": same,
        }
    my = out["policies"]["myopic"]
    for name in ("seed", "lookahead"):
        r = out["policies"][name]
        r["time_over_myopic"] = r["seconds"] / my["seconds"]
        r["cpu_time_over_myopic"] = r["cpu_seconds"] / my["cpu_seconds"]
    t0 = time.perf_counter()
    replay(es, "always-verify", seed=seed, n_boot=1000)
    out["always_verify_with_bootstrap_1000_s"] = time.perf_counter() - t0
    return out


def bench_tuning(n: int, trials: int, seed: int) -> dict[str, Any]:
    import optuna

    from amv_calib.claims._synth import synth_episodes
    from amv_calib.tuning._replay import episode_set
    from amv_calib.tuning._search import tune_thresholds

    es = episode_set(synth_episodes(n, seed=seed))
    cal, _ = _calibrator()
    out: dict[str, Any] = {"n_instances": n, "trials": trials}
    with tempfile.TemporaryDirectory() as tmp:
        for workers in (1, 2):
            t0, c0 = time.perf_counter(), time.process_time()
            res = tune_thresholds(es, calibrator=cal, trials=trials,
                                  storage=str(Path(tmp) / f"w{workers}.log"), study_name="b",
                                  seed=seed, planner="myopic", n_boot=0, n_workers=workers)
            secs, cpu = time.perf_counter() - t0, time.process_time() - c0
            out[f"workers_{workers}"] = {"seconds": secs, "trials_per_s": res.n_trials / secs,
                                         "n_tune": res.n_tune, "n_trials": res.n_trials,
                                         # the workers' CPU is not this process's
                                         "cpu_seconds_this_process": cpu}
        # the lookahead planner: the same number of real trials, one process
        t0, c0 = time.perf_counter(), time.process_time()
        res = tune_thresholds(es, calibrator=cal, trials=trials,
                              storage=str(Path(tmp) / "la.log"), study_name="b", seed=seed,
                              planner="lookahead", n_boot=0)
        secs, cpu = time.perf_counter() - t0, time.process_time() - c0
        out["lookahead_workers_1"] = {"seconds": secs, "cpu_seconds": cpu,
                                      "trials": res.n_trials,
                                      "trials_per_s": res.n_trials / secs}
        # baseline: Optuna's own per-trial cost (same sampler, journal storage, no replay)
        storage = optuna.storages.JournalStorage(
            optuna.storages.journal.JournalFileBackend(str(Path(tmp) / "base.log")))
        study = optuna.create_study(storage=storage, study_name="base")
        t0 = time.perf_counter()
        for k in range(trials):
            study.sampler = optuna.samplers.TPESampler(seed=k)
            t = study.ask()
            t.suggest_float("a", 0.01, 10, log=True)
            t.suggest_float("b", 0.05, 100, log=True)
            t.suggest_float("c", 0.001, 0.5, log=True)
            t.suggest_int("d", 1, 6)
            t.set_constraint("h", -1.0)
            study.tell(t, 1.0)
        secs = time.perf_counter() - t0
        out["optuna_overhead_only"] = {"seconds": secs, "trials_per_s": trials / secs}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="tiny run (smoke test)")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "replay.json")
    ap.add_argument("--seed", type=int, default=20261202)
    args = ap.parse_args(argv)
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    n, n_scalar, rounds, trials = (300, 100, 1, 4) if args.quick else (10_000, 1000, 7, 200)
    res = {"quick": args.quick, "replay": bench_replay(n, n_scalar, rounds, args.seed),
           "tuning": bench_tuning(n, trials, args.seed)}
    pol = res["replay"]["policies"]
    la = pol["lookahead"]
    res["targets"] = {
        "lookahead_premise_evaluations_per_s": PREMISE_EVAL_TARGET,
        "lookahead_premise_evaluations_per_s_met":
            la["premise_evaluations_per_s"] >= PREMISE_EVAL_TARGET,
        "lookahead_premise_evaluations_per_cpu_s_met":
            la["premise_evaluations_per_cpu_s"] >= PREMISE_EVAL_TARGET,
        "lookahead_over_myopic": LOOKAHEAD_OVER_MYOPIC,
        "lookahead_over_myopic_met": la["time_over_myopic"] <= LOOKAHEAD_OVER_MYOPIC,
        "seed_over_myopic": SEED_OVER_MYOPIC,
        "seed_over_myopic_met": pol["seed"]["time_over_myopic"] <= SEED_OVER_MYOPIC,
        "trials_200_seconds": TRIALS_TARGET_S,
        "trials_200_met_2_workers": (not args.quick)
        and res["tuning"]["workers_2"]["seconds"] <= TRIALS_TARGET_S,
        "lookahead_trials_200_seconds": LOOKAHEAD_TRIALS_TARGET_S,
        "lookahead_trials_200_met": (not args.quick)
        and res["tuning"]["lookahead_workers_1"]["seconds"] <= LOOKAHEAD_TRIALS_TARGET_S,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(res, indent=2) + "\n", encoding="utf-8")
    for name, r in res["replay"]["policies"].items():
        print(f"replay {name:9s}: {r['instances_per_s']:>9,.0f} inst/s "
              f"({r['instances_per_cpu_s']:>9,.0f}/CPU-s)  "
              f"{r['premise_evaluations_per_s']:>10,.0f} premise-evals/s "
              f"({r['premise_evaluations_per_cpu_s']:>10,.0f}/CPU-s)  scalar loop "
              f"{r['scalar_loop_instances_per_s']:>7,.0f} inst/s  ratio "
              f"{r['ratio_batch_over_scalar']:5.1f}x (CPU {r['ratio_batch_over_scalar_cpu']:5.1f}x)"
              f"  identical={r['identical_to_scalar']}"
              + (f"  time {r['time_over_myopic']:.1f}x the myopic replay's "
                 f"(CPU {r['cpu_time_over_myopic']:.1f}x)" if "time_over_myopic" in r else ""))
    t = res["tuning"]
    base = t["optuna_overhead_only"]["trials_per_s"]
    print(f"tuning 1 worker, CPU: {t['workers_1']['cpu_seconds_this_process']:.1f} s")
    for w in (1, 2):
        r = t[f"workers_{w}"]
        print(f"tuning {w} worker(s): {trials} trials in {r['seconds']:.1f} s "
              f"({r['trials_per_s']:.1f} trials/s; Optuna alone {base:.1f}/s, "
              f"ratio {r['trials_per_s'] / base:.2f})")
    la = t["lookahead_workers_1"]
    print(f"tuning lookahead planner, 1 worker: {la['trials']} trials in {la['seconds']:.1f} s "
          f"(CPU {la['cpu_seconds']:.1f} s; target 200 in < {LOOKAHEAD_TRIALS_TARGET_S:.0f} s)")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
