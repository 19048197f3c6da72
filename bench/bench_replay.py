"""Benchmark: episode replay and Optuna tuning throughput, beside the scalar gate, same run.

Measured (targets of issue 6 and of the compiled batch engine) on 10,000 synthetic episodes
(``amv_calib.datasets.synth_episodes``):

* replay throughput of the batch gate (``replay``: sequential stopping over all active
  instances with ``evaluate_batch``, the compiled engine), in instances/s and
  premise-evaluations/s, for the myopic rule, the seed engine and the lookahead planner;
  targets: >= 1 M premise-evaluations/s with the lookahead planner, the lookahead replay
  within 15x the myopic replay's time and the seed-mode replay within 10x. A
  *premise-evaluation* is one premise entering one gate decision: sum over decision steps
  of the premises of the instances still active.
* the named baseline: the scalar ``Gate.run`` loop (one ``CandidateAction`` per instance,
  the same answer stream) on the same instances, timed in the same run, the same number of
  rounds after the same warm-up, rounds alternating with the batch's. Two ratios, batch
  throughput over scalar throughput: **engine only** (both sides start from prepared
  inputs: the batch from the ``EpisodeSet`` and its probability array, the scalar loop from
  built actions, verifiers and answer callbacks with the same probabilities) and **end to
  end** (both sides start from the episode records and the calibrator: the batch side
  builds the ``EpisodeSet`` and calibrates it, the scalar side builds its actions with
  their claims and lets the gate calibrate them). The scalar loop's decisions are compared
  with the batch replay's (they must be identical).
* Optuna trials/s of ``tune_thresholds`` (constrained, tuning split of the 10,000
  episodes): the myopic planner sequentially and with 2 worker processes on a journal
  file (target 200 trials in under a minute, wall time: the workers are processes), and
  the lookahead planner, 200 real trials sequentially (target under 20 s of CPU). Baseline:
  the same study loop with a constant objective (Optuna's own overhead per trial).

The clock is process CPU time (``bench/README.md``); wall time is kept beside it. Run
``.venv/bin/python bench/bench_replay.py [--quick] [--check]``; the numbers go to
``bench/results/replay.json``.
"""

from __future__ import annotations

import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import _bench

PREMISE_EVAL_TARGET = 1_000_000  # per CPU second, at least (lookahead planner)
LOOKAHEAD_OVER_MYOPIC = 15.0  # replay time ratio, at most
SEED_OVER_MYOPIC = 10.0  # replay time ratio, at most
TRIALS_TARGET_S = 60.0  # 200 trials, myopic planner, 2 workers, wall seconds, at most
LOOKAHEAD_TRIALS_TARGET_S = 20.0  # 200 trials, lookahead planner, CPU seconds, at most
#: (policy label, Gate keyword arguments)
POLICIES = (("myopic", {"planner": "myopic"}), ("seed", {"mode": "seed"}),
            ("lookahead", {"planner": "lookahead"}))


def _calibrator() -> tuple[Any, str]:
    from amv_calib.contract._artifact import load_artifact
    from amv_calib.contract._features import seed_prior_calibrator

    try:
        art = load_artifact(None)
        return art.calibrator, f"champion {art.name}/{art.version}"
    except Exception:  # noqa: BLE001 - any refusal: fall back, say so
        return seed_prior_calibrator(), "seed prior (no champion artifact found)"


def _answers(rec: Mapping[str, Any], seed: int) -> Callable[[Any, Any], dict[str, bool]]:
    """The replay's answer stream for one instance, as a ``Gate.run`` callback."""
    from amv_calib.tuning._stream import answer_uniform

    truth = {pm["id"]: pm["violated"] for pm in rec["premises"]}
    iid = rec["instance_id"]

    def verify(v: Any, _a: Any) -> dict[str, bool]:
        return {pid: (answer_uniform(seed, iid, v.id, pid, 0) < v.symmetric_reliability)
                != truth[pid] for pid in v.resolves_premise_ids}

    return verify


def _scalar_inputs(records: list[dict[str, Any]], probs: Any, seed: int
                   ) -> list[tuple[Any, list[Any], Callable[[Any, Any], dict[str, bool]]]]:
    """Per instance: the action (premises with their probability from ``probs``, row by
    row), the verifiers and the answer callback. ``probs`` None: premises carry their
    claims instead, for the gate's calibrator."""
    from amv_calib.gate import CandidateAction, MemoryClaim, Premise, Verifier

    out = []
    for i, rec in enumerate(records):
        if probs is None:
            premises = tuple(
                Premise(id=pm["id"], claim=MemoryClaim(
                    id=pm["claim_id"], recency_hours=pm["recency_hours"],
                    source_trust_score=pm["source_trust_score"],
                    model_confidence=pm["model_confidence"],
                    contradiction_flag=pm["contradiction_flag"]))
                for pm in rec["premises"])
        else:
            premises = tuple(Premise(id=pm["id"],
                                     calibrated_violation_probability=float(probs[i, j]))
                             for j, pm in enumerate(rec["premises"]))
        action = CandidateAction(
            action_id=rec["instance_id"], tool_name=rec["tool_name"],
            impact_cost_theta=rec["impact_cost_theta"],
            abstention_cost_kappa=rec["abstention_cost_kappa"], premises=premises)
        out.append((action, [Verifier.from_dict(v) for v in rec["verifiers"]],
                    _answers(rec, seed)))
    return out


def _scalar_loop(gate: Any, inputs: list[tuple[Any, list[Any], Any]]
                 ) -> list[tuple[bool, int]]:
    """``Gate.run`` on every instance: (PROCEED?, verifier calls)."""
    out = []
    for action, verifiers, verify in inputs:
        trace = gate.run(action, verifiers, verify)
        out.append((trace.final.regime == "PROCEED", trace.verifications))
    return out


def _batch_decisions(proceed: Any, calls: Any) -> list[tuple[bool, int]]:
    return [(bool(a), int(c)) for a, c in zip(proceed, calls.sum(axis=1), strict=True)]


def _rates(n: int, r: _bench.Rounds) -> dict[str, float]:
    return {"cpu_seconds": r.cpu_median, "wall_seconds": r.wall_median,
            "instances_per_cpu_s": n / r.cpu_median, "instances_per_s": n / r.wall_median}


def bench_replay(n: int, rounds: int, seed: int) -> dict[str, Any]:
    """Batch replay against the scalar loop, per policy, engine only and end to end."""
    from amv_calib.datasets._synth import synth_episodes
    from amv_calib.gate import Gate
    from amv_calib.tuning._episodes import episode_set
    from amv_calib.tuning._replay import _gate_policy

    records = synth_episodes(n, seed=seed)
    es = episode_set(records)
    cal, cal_desc = _calibrator()
    p = es.probabilities(cal)
    prepared = _scalar_inputs(records, p, seed)
    out: dict[str, Any] = {"n_instances": n, "n_premises": es.n_premises, "rounds": rounds,
                           "calibrator": cal_desc, "policies": {}}
    for name, kw in POLICIES:
        gate = Gate(calibrator=cal, **kw)  # type: ignore[arg-type]

        def batch_e2e(gate: Any = gate) -> Any:
            es2 = episode_set(records)
            return _gate_policy(es2, gate, es2.probabilities(cal), seed)

        def scalar_e2e(gate: Any = gate) -> Any:
            return _scalar_loop(gate, _scalar_inputs(records, None, seed))

        t = _bench.alternate({
            "batch_engine": lambda gate=gate: _gate_policy(es, gate, p, seed),
            "scalar_engine": lambda gate=gate: _scalar_loop(gate, prepared),
            "batch_end_to_end": batch_e2e, "scalar_end_to_end": scalar_e2e,
        }, rounds=rounds, warmup=1)
        proceed, calls, steps = t["batch_engine"].last
        batch = _batch_decisions(proceed, calls)
        m = es.premise_mask.sum(axis=1)
        # steps verifications -> steps + 1 decisions (the last one stops)
        evals = int((m * (steps + 1)).sum())
        row: dict[str, Any] = {
            "batch_engine": _rates(n, t["batch_engine"]),
            "scalar_engine": _rates(n, t["scalar_engine"]),
            "batch_end_to_end": _rates(n, t["batch_end_to_end"]),
            "scalar_end_to_end": _rates(n, t["scalar_end_to_end"]),
            "premise_evaluations": evals,
            "premise_evaluations_per_cpu_s": evals / t["batch_engine"].cpu_median,
            "premise_evaluations_per_s": evals / t["batch_engine"].wall_median,
            "identical_to_scalar": batch == t["scalar_engine"].last,
            "identical_end_to_end": (_batch_decisions(*t["batch_end_to_end"].last[:2])
                                     == t["scalar_end_to_end"].last),
        }
        for scope in ("engine", "end_to_end"):
            b, s = t[f"batch_{scope}"], t[f"scalar_{scope}"]
            row[f"ratio_{scope}_cpu"] = s.cpu_median / b.cpu_median
            row[f"ratio_{scope}_wall"] = s.wall_median / b.wall_median
        out["policies"][name] = row
    my = out["policies"]["myopic"]["batch_engine"]
    for name in ("seed", "lookahead"):
        r = out["policies"][name]
        r["cpu_time_over_myopic"] = r["batch_engine"]["cpu_seconds"] / my["cpu_seconds"]
        r["time_over_myopic"] = r["batch_engine"]["wall_seconds"] / my["wall_seconds"]
    return out


def bench_tuning(n: int, trials: int, seed: int) -> dict[str, Any]:
    import optuna

    from amv_calib.datasets._synth import synth_episodes
    from amv_calib.tuning._episodes import episode_set
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
        t0, c0 = time.perf_counter(), time.process_time()
        for k in range(trials):
            study.sampler = optuna.samplers.TPESampler(seed=k)
            t = study.ask()
            t.suggest_float("a", 0.01, 10, log=True)
            t.suggest_float("b", 0.05, 100, log=True)
            t.suggest_float("c", 0.001, 0.5, log=True)
            t.suggest_int("d", 1, 6)
            t.set_constraint("h", -1.0)
            study.tell(t, 1.0)
        secs, cpu = time.perf_counter() - t0, time.process_time() - c0
        out["optuna_overhead_only"] = {"seconds": secs, "cpu_seconds": cpu,
                                       "trials_per_s": trials / secs}
    return out


def _targets(res: dict[str, Any]) -> list[_bench.Target]:
    pol = res["replay"]["policies"]
    la, tune = pol["lookahead"], res["tuning"]
    out = [_bench.holds(f"{name} batch replay decides as the scalar Gate.run loop",
                        r["identical_to_scalar"]) for name, r in pol.items()]
    my = pol["myopic"]["batch_engine"]["cpu_seconds"]
    for name, r in pol.items():
        for scope, what in (("engine", "engine only"), ("end_to_end", "end to end")):
            out.append(_bench.reported(
                f"{name} batch replay speed over the scalar loop, {what}, CPU",
                r[f"ratio_{scope}_cpu"], unit="x", ours=r[f"batch_{scope}"]["cpu_seconds"],
                baseline=r[f"scalar_{scope}"]["cpu_seconds"], side_unit=" s CPU",
                baseline_name="the scalar Gate.run loop, same instances"))
    out += [
        _bench.at_least("lookahead replay, premise-evaluations per CPU second",
                        la["premise_evaluations_per_cpu_s"], PREMISE_EVAL_TARGET,
                        full_only=True),
        _bench.at_most("lookahead replay CPU time over the myopic replay's",
                       la["cpu_time_over_myopic"], LOOKAHEAD_OVER_MYOPIC, unit="x",
                       full_only=True, ours=la["batch_engine"]["cpu_seconds"], baseline=my,
                       side_unit=" s CPU", baseline_name="the myopic batch replay"),
        _bench.at_most("seed-mode replay CPU time over the myopic replay's",
                       pol["seed"]["cpu_time_over_myopic"], SEED_OVER_MYOPIC, unit="x",
                       full_only=True, ours=pol["seed"]["batch_engine"]["cpu_seconds"],
                       baseline=my, side_unit=" s CPU",
                       baseline_name="the myopic batch replay"),
        _bench.at_most(f"{tune['trials']} trials, myopic planner, 2 workers, wall",
                       tune["workers_2"]["seconds"], TRIALS_TARGET_S, unit=" s",
                       full_only=True),
        _bench.at_most(f"{tune['trials']} trials, lookahead planner, 1 process, CPU",
                       tune["lookahead_workers_1"]["cpu_seconds"], LOOKAHEAD_TRIALS_TARGET_S,
                       unit=" s", full_only=True),
    ]
    return out


def main(argv: list[str] | None = None) -> int:
    ap = _bench.parser(__doc__, "replay")
    ap.add_argument("--seed", type=int, default=20261202)
    args = ap.parse_args(argv)
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    n, rounds, trials = (300, 3, 4) if args.quick else (10_000, 7, 200)
    res: dict[str, Any] = {"quick": args.quick, "replay": bench_replay(n, rounds, args.seed),
                           "tuning": bench_tuning(n, trials, args.seed)}
    targets = _targets(res)
    _bench.write_results(args.out, res, targets, quick=args.quick)
    for name, r in res["replay"]["policies"].items():
        b = r["batch_engine"]
        print(f"replay {name:9s}: {b['instances_per_cpu_s']:>9,.0f} inst/CPU-s "
              f"{r['premise_evaluations_per_cpu_s']:>11,.0f} premise-evals/CPU-s; scalar loop "
              f"{r['scalar_engine']['instances_per_cpu_s']:>7,.0f} inst/CPU-s; batch over "
              f"scalar: engine only {r['ratio_engine_cpu']:5.1f}x (wall "
              f"{r['ratio_engine_wall']:5.1f}x), end to end {r['ratio_end_to_end_cpu']:5.1f}x "
              f"(wall {r['ratio_end_to_end_wall']:5.1f}x); identical={r['identical_to_scalar']}"
              + (f"; CPU time {r['cpu_time_over_myopic']:.1f}x the myopic replay's"
                 if "cpu_time_over_myopic" in r else ""))
    t = res["tuning"]
    base = t["optuna_overhead_only"]["trials_per_s"]
    for w in (1, 2):
        r = t[f"workers_{w}"]
        print(f"tuning {w} worker(s): {trials} trials in {r['seconds']:.1f} s "
              f"({r['trials_per_s']:.1f} trials/s; Optuna alone {base:.1f}/s)")
    la = t["lookahead_workers_1"]
    print(f"tuning lookahead planner, 1 worker: {la['trials']} trials in {la['seconds']:.1f} s "
          f"(CPU {la['cpu_seconds']:.1f} s)")
    print(f"wrote {args.out}")
    return _bench.finish(targets, quick=args.quick, check=args.check)


if __name__ == "__main__":
    sys.exit(main())
