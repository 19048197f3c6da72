"""Benchmark: the runtime gate beside the seed's TypeScript engine under node, same run.

Measured (targets of issue 3 and of the compiled batch engine):

* one myopic ``Gate.evaluate`` call (the pure-Python reference engine), 3 premises and 3
  verifiers, against the seed engine's ``evaluate`` timed inside node over many calls on the
  same cases: at most 5x the node time;
* the lookahead planner with 6 verifiers (``Gate.evaluate``, pure Python): median under
  1 ms per decision; the compiled engine's time for the same plans is reported beside it;
* ``Gate.evaluate_batch`` throughput (the compiled engine) against node's per-call
  throughput: at least 20x for the myopic rule; the lookahead planner's batch throughput
  is reported too;
* the compiled engine's load time on a warm on-disk cache and its compile time cold (a
  fresh cache directory, in a child process; not in ``--quick``).

Times are CPU time (``time.thread_time`` in Python, ``process.cpuUsage`` in node), so that
other processes on a loaded machine do not skew the ratios; wall-clock figures are kept in
the JSON too. Python and node rounds alternate and each side's median round is used; the
cyclic garbage collector is off while timing, as ``timeit`` does.

Run ``.venv/bin/python bench/bench_gate.py [--quick]``; the numbers go to
``bench/results/gate.json``. Needs node and the seed document beside the checkout
(``../shared/seed/``) for the node side; without them the Python figures alone are
reported.
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
SINGLE_TARGET = 5.0  # Python time / node time, at most
BATCH_TARGET = 20.0  # batch throughput / node throughput, at least
PLAN_TARGET_MS = 1.0


def _harness() -> ModuleType:
    path = ROOT / "tests" / "gate" / "seed_engine" / "seed_harness.py"
    spec = importlib.util.spec_from_file_location("seed_harness", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


H = _harness()


def _calibrated(cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Premises get their seed-prior probability up front, on both sides alike."""
    from amv_calib.gate import seed_calibrate

    out = []
    for c in cases:
        prem = []
        for pm in c["action"]["premises"]:
            pm = dict(pm)
            claim = pm.pop("claim", None)
            if pm.get("calibratedViolationProbability") is None:
                pm["calibratedViolationProbability"] = seed_calibrate(
                    claim["recencyHours"], claim["sourceTrustScore"], claim["modelConfidence"],
                    claim["contradictionFlag"])
            prem.append(pm)
        out.append({**c, "action": {**c["action"], "premises": prem}})
    return out


def _build(cases: list[dict[str, Any]], **gate_kw: Any) -> list[tuple[Any, Any, list[Any]]]:
    from amv_calib.gate import CandidateAction, Gate, Verifier

    items = []
    for c in cases:
        e = c["engine"]
        gate = Gate(lambda_cost_scale=e["lambda"], delta_loss_threshold=e["delta"],
                    epsilon_harm_bound=e["epsilon"], **gate_kw)
        items.append((gate, CandidateAction.from_dict(c["action"]),
                      [Verifier.from_dict(v) for v in c["verifiers"]]))
    return items


def _py_round_ns(items: Sequence[tuple[Any, Any, list[Any]]], calls: int
                 ) -> tuple[float, float]:
    """(wall, CPU) nanoseconds per call over about ``calls`` calls."""
    n = len(items)
    reps = max(1, calls // n)
    c0 = time.thread_time_ns()
    t0 = time.perf_counter_ns()
    for _ in range(reps):
        for gate, act, vs in items:
            gate.evaluate(act, vs)
    wall = (time.perf_counter_ns() - t0) / (reps * n)
    return wall, (time.thread_time_ns() - c0) / (reps * n)


def _single_call(cases: list[dict[str, Any]], *, calls: int, rounds: int,
                 node: bool) -> dict[str, Any]:
    out: dict[str, Any] = {}
    sides: dict[str, Callable[[], tuple[float, float]]] = {}
    for label, kw in (("amv_myopic", {"planner": "myopic"}), ("seed", {"mode": "seed"})):
        items = _build(cases, **kw)
        _py_round_ns(items, len(items))  # warm up
        sides[label] = lambda items=items: _py_round_ns(items, calls)  # type: ignore[misc]
    per: dict[str, list[tuple[float, float]]] = {k: [] for k in sides}
    node_wall: list[float] = []
    node_cpu: list[float] = []
    for _ in range(rounds):
        if node:
            res = H.run_node({"mode": "bench", "cases": cases, "calls": calls, "rounds": 1})
            node_wall.extend(res["nsPerCall"])
            node_cpu.extend(res["cpuNsPerCall"])
        for label, fn in sides.items():
            per[label].append(fn())
    for label, vals in per.items():
        out[f"python_{label}_ns"] = statistics.median(v[1] for v in vals)
        out[f"python_{label}_wall_ns"] = statistics.median(v[0] for v in vals)
    if node_cpu:
        out["node_ns"] = statistics.median(node_cpu)
        out["node_best_ns"] = min(node_cpu)
        out["node_wall_ns"] = statistics.median(node_wall)
        for label in per:
            out[f"ratio_{label}_vs_node"] = out[f"python_{label}_ns"] / out["node_ns"]
    return out


def _lookahead(cases: list[dict[str, Any]], *, rounds: int) -> dict[str, Any]:
    """``Gate.evaluate`` with the lookahead planner, one call at a time (pure Python), and
    the compiled engine on the same rows (``evaluate_batch``, one row per call and all rows
    in one call)."""
    items = _build(cases)  # default planner: lookahead
    for gate, act, vs in items[:20]:
        gate.evaluate(act, vs)
    times = []
    regimes: dict[str, int] = {}
    for _ in range(rounds):
        for gate, act, vs in items:
            t0 = time.thread_time_ns()
            d = gate.evaluate(act, vs)
            times.append((time.thread_time_ns() - t0) / 1e6)
            regimes[d.regime] = regimes.get(d.regime, 0) + 1
    arr = np.asarray(times)
    out: dict[str, Any] = {"lookahead_ms_median": float(np.median(arr)),
                           "lookahead_ms_p95": float(np.quantile(arr, 0.95)),
                           "lookahead_ms_max": float(arr.max()), "lookahead_regimes": regimes}
    one = [{**c, "engine": {"lambda": 1.0, "delta": 10.0, "epsilon": 0.05}} for c in cases]
    from amv_calib.gate import Gate

    gate = Gate()
    rows = [_batch_arrays([c], 1) for c in one]
    gate.evaluate_batch(**rows[0])  # load the engine
    per_row = []
    for _ in range(rounds):
        for a in rows:
            t0 = time.thread_time_ns()
            gate.evaluate_batch(**a)
            per_row.append((time.thread_time_ns() - t0) / 1e6)
    every = _batch_arrays(one, len(one))
    t0 = time.thread_time_ns()
    for _ in range(rounds):
        gate.evaluate_batch(**every)
    out["compiled_one_row_ms_median"] = float(np.median(per_row))
    out["compiled_batch_us_per_row"] = (time.thread_time_ns() - t0) / 1e3 / (rounds * len(one))
    return out


_COMPILE_PROBE = """
import time, numpy as np
t0 = time.perf_counter()
from amv_calib.gate import Gate
c = {"p": np.full((2, 3), 0.04), "premise_mask": np.ones((2, 3), bool),
     "theta": np.array([10.0, 10.0]), "kappa": np.array([1.0, 1.0]),
     "resolves": np.stack([np.eye(3, dtype=bool)] * 2), "cost": np.full((2, 3), 0.01),
     "reliability": np.ones((2, 3))}
t1 = time.perf_counter()
Gate(planner="myopic").evaluate_batch(**c)
t2 = time.perf_counter()
Gate(planner="lookahead", reuse_verifiers=True).evaluate_batch(**c)
Gate(mode="seed").evaluate_batch(**c)
print(t2 - t1, time.perf_counter() - t1)
"""


def _compile_time() -> dict[str, Any]:
    """Seconds of the first ``evaluate_batch`` calls in a fresh process: with an empty cache
    directory (cold: numba compiles the engine) and again with the cache it left (warm)."""
    import os
    import subprocess
    import tempfile

    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "NUMBA_CACHE_DIR": tmp}
        for label in ("cold", "warm"):
            res = subprocess.run([sys.executable, "-c", _COMPILE_PROBE], env=env, check=True,
                                 capture_output=True, text=True, cwd=str(ROOT))
            first, every = (float(x) for x in res.stdout.split())
            out[f"{label}_first_call_s"] = first
            out[f"{label}_all_settings_s"] = every
    return out


def _batch_arrays(cases: list[dict[str, Any]], n: int) -> dict[str, np.ndarray]:
    m = max(len(c["action"]["premises"]) for c in cases)
    k = max(len(c["verifiers"]) for c in cases)
    rows = [cases[i % len(cases)] for i in range(n)]
    p = np.zeros((n, m))
    mask = np.zeros((n, m), dtype=bool)
    resolves = np.zeros((n, k, m), dtype=bool)
    cost = np.zeros((n, k))
    rel = np.full((n, k), 0.75)
    avail = np.zeros((n, k), dtype=bool)
    theta = np.empty(n)
    kappa = np.empty(n)
    for i, c in enumerate(rows):
        ids = [pm["id"] for pm in c["action"]["premises"]]
        for j, pm in enumerate(c["action"]["premises"]):
            p[i, j] = pm["calibratedViolationProbability"]
            mask[i, j] = True
        for j, v in enumerate(c["verifiers"]):
            for pid in v["resolvesPremiseIds"]:
                resolves[i, j, ids.index(pid)] = True
            cost[i, j] = v["executionCost"]
            rel[i, j] = v["symmetricReliability"]
            avail[i, j] = True
        theta[i] = c["action"]["impactCostTheta"]
        kappa[i] = c["action"]["abstentionCostKappa"]
    return {"p": p, "premise_mask": mask, "theta": theta, "kappa": kappa,
            "resolves": resolves, "cost": cost, "reliability": rel, "available": avail}


def _batch_round(gate: Any, arrays: dict[str, np.ndarray], calls: int) -> float:
    """CPU seconds per row of ``calls`` back-to-back ``evaluate_batch`` calls."""
    c0 = time.thread_time_ns()
    for _ in range(calls):
        gate.evaluate_batch(**arrays)
    return (time.thread_time_ns() - c0) / 1e9 / (calls * len(arrays["theta"]))


def _batch(kinds: dict[str, tuple[list[dict[str, Any]], dict[str, Any]]], *,
           sizes: dict[str, int], rounds: int) -> dict[str, Any]:
    """``evaluate_batch`` throughput per case kind and batch size, against node's per-call
    throughput on the same kind of cases (``node_ns`` from the single-call section).

    A large batch shows the vectorised throughput with the fixed per-call overhead
    amortised; a small one what a caller batching a few hundred actions gets. Every size
    runs about ``max(rows, 200_000)`` rows per round; the rounds of all settings alternate.
    Ratios are given from the medians (as the rest of this benchmark) and from the best
    rounds of each side.
    """
    if importlib.util.find_spec("amv_calib.gate._batch") is None:
        return {"batch": "amv_calib.gate._batch not present"}
    from amv_calib.gate import Gate

    gates = (("amv_myopic", Gate(planner="myopic")), ("seed", Gate(mode="seed")),
             ("lookahead", Gate(planner="lookahead")))
    runs: dict[str, Callable[[], float]] = {}
    for kind, (cases, _) in kinds.items():
        # one engine setting for the whole batch (the batch API takes the gate's thresholds)
        same = [{**c, "engine": {"lambda": 1.0, "delta": 10.0, "epsilon": 0.05}}
                for c in cases]
        for size, n in sizes.items():
            arrays = _batch_arrays(same, n)
            calls = max(1, 200_000 // n) if size != "large" else 1
            for label, gate in gates:
                gate.evaluate_batch(**arrays)  # warm up
                runs[f"{kind}_{size}_{label}"] = (
                    lambda g=gate, a=arrays, k=calls: _batch_round(g, a, k))  # type: ignore[misc]
    secs: dict[str, list[float]] = {k: [] for k in runs}
    for _ in range(rounds):
        for key, fn in runs.items():
            secs[key].append(fn())
    out: dict[str, Any] = {"batch_sizes": sizes}
    for kind, (_, node_res) in kinds.items():
        for size, n in sizes.items():
            for label, _gate in gates:
                key = f"{kind}_{size}_{label}"
                med, best = statistics.median(secs[key]), min(secs[key])
                row: dict[str, Any] = {"rows": n, "ns_per_row": med * 1e9,
                                       "best_ns_per_row": best * 1e9, "rows_per_s": 1.0 / med}
                if "node_ns" in node_res:
                    row["node_ns_per_call"] = node_res["node_ns"]
                    row["ratio_vs_node"] = node_res["node_ns"] / (med * 1e9)
                    row["ratio_best_vs_node_best"] = node_res["node_best_ns"] / (best * 1e9)
                out[key] = row
    # the headline figures of issue 3 (3 premises, 3 one-premise verifiers, large batch)
    out["batch_rows"] = sizes["large"]
    for label, _gate in gates:
        row = out[f"one_premise_large_{label}"]
        out[f"batch_{label}_rows_per_s"] = row["rows_per_s"]
        if "ratio_vs_node" in row:
            out[f"ratio_batch_{label}_vs_node"] = row["ratio_vs_node"]
            out[f"ratio_batch_{label}_best_vs_node"] = row["ratio_best_vs_node_best"]
    return out


def main(argv: list[str] | None = None) -> int:
    # timeit's practice: no cyclic-GC pauses inside timed loops (they hit whatever runs)
    gc.disable()
    try:
        return _main(argv)
    finally:
        gc.enable()


def _main(argv: list[str] | None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="tiny run (smoke test)")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "gate.json")
    args = ap.parse_args(argv)
    quick = args.quick
    node_reason = H.unavailable_reason()
    node = node_reason is None
    n_cases = 200 if quick else 2000
    single = _calibrated(H.random_cases(31, n_cases, n_premises=3, n_verifiers=3,
                                        explicit_p=0.0, one_premise_each=True))
    mixed = _calibrated(H.random_cases(32, n_cases, n_premises=3, n_verifiers=3,
                                       explicit_p=0.0))
    six = _calibrated(H.random_cases(33, 100 if quick else 500, n_premises=3, n_verifiers=6,
                                     explicit_p=0.0, one_premise_each=True))
    six_wide = _calibrated(H.random_cases(34, 100 if quick else 500, n_premises=6,
                                          n_verifiers=6, explicit_p=0.0,
                                          one_premise_each=True))
    calls, rounds = (2000, 2) if quick else (200_000, 7)
    report: dict[str, Any] = {"node": node, "node_skipped_because": node_reason,
                              "quick": quick}
    report["single_one_premise_verifiers"] = _single_call(single, calls=calls, rounds=rounds,
                                                          node=node)
    # the same kind of case, but only 50 of them in rotation: everything stays in cache
    report["single_hot_50_cases"] = _single_call(single[:50], calls=calls, rounds=rounds,
                                                 node=node)
    report["single_mixed_verifiers"] = _single_call(mixed, calls=calls, rounds=rounds,
                                                    node=node)
    report["lookahead_6v_3p"] = _lookahead(six, rounds=1 if quick else 3)
    report["lookahead_6v_6p"] = _lookahead(six_wide, rounds=1 if quick else 3)
    report["batch"] = _batch(
        {"one_premise": (single, report["single_one_premise_verifiers"]),
         "mixed": (mixed, report["single_mixed_verifiers"])},
        sizes={"large": 2000 if quick else 200_000, "small": 100 if quick else 1000},
        rounds=2 if quick else 5)
    if not quick:
        report["compile"] = _compile_time()
    report["targets"] = {"single_myopic_vs_node_at_most": SINGLE_TARGET,
                         "batch_vs_node_at_least": BATCH_TARGET,
                         "lookahead_6_verifiers_ms_under": PLAN_TARGET_MS}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    s = report["single_one_premise_verifiers"]
    print(f"single evaluate (3 premises, 3 one-premise verifiers): "
          f"python amv myopic {s['python_amv_myopic_ns']:.0f} ns, "
          f"seed mode {s['python_seed_ns']:.0f} ns"
          + (f", node {s['node_ns']:.0f} ns -> ratios "
             f"{s['ratio_amv_myopic_vs_node']:.2f}x / {s['ratio_seed_vs_node']:.2f}x "
             f"(target <= {SINGLE_TARGET}x)" if "node_ns" in s else ""))
    s = report["single_hot_50_cases"]
    print(f"single evaluate, 50 cases in rotation (hot caches): "
          f"python amv myopic {s['python_amv_myopic_ns']:.0f} ns, "
          f"seed mode {s['python_seed_ns']:.0f} ns"
          + (f", node {s['node_ns']:.0f} ns -> ratios "
             f"{s['ratio_amv_myopic_vs_node']:.2f}x / {s['ratio_seed_vs_node']:.2f}x"
             if "node_ns" in s else ""))
    s = report["single_mixed_verifiers"]
    print(f"single evaluate (3 premises, verifiers on 1-3 premises): "
          f"python amv myopic {s['python_amv_myopic_ns']:.0f} ns, "
          f"seed mode {s['python_seed_ns']:.0f} ns"
          + (f", node {s['node_ns']:.0f} ns -> ratios "
             f"{s['ratio_amv_myopic_vs_node']:.2f}x / {s['ratio_seed_vs_node']:.2f}x"
             if "node_ns" in s else ""))
    for key in ("lookahead_6v_3p", "lookahead_6v_6p"):
        lk = report[key]
        print(f"{key}: median {lk['lookahead_ms_median']:.3f} ms, p95 "
              f"{lk['lookahead_ms_p95']:.3f} ms, max {lk['lookahead_ms_max']:.3f} ms "
              f"(target median < {PLAN_TARGET_MS} ms); compiled engine: one row per call "
              f"{lk['compiled_one_row_ms_median']:.3f} ms, all rows in one call "
              f"{lk['compiled_batch_us_per_row']:.1f} us/row")
    b = report["batch"]
    if "batch_rows" in b:
        for kind, what in (("one_premise", "one-premise verifiers"),
                           ("mixed", "verifiers on 1-3 premises")):
            for size, n in b["batch_sizes"].items():
                parts = []
                for label, name in (("amv_myopic", "amv myopic"), ("seed", "seed"),
                                    ("lookahead", "lookahead")):
                    row = b[f"{kind}_{size}_{label}"]
                    parts.append(
                        f"{name} {row['ns_per_row']:.0f} ns/row (best "
                        f"{row['best_ns_per_row']:.0f})"
                        + (f" -> {row['ratio_vs_node']:.1f}x node (best/best "
                           f"{row['ratio_best_vs_node_best']:.1f}x)"
                           if "ratio_vs_node" in row else ""))
                print(f"evaluate_batch, {n} rows, 3 premises, {what}: " + "; ".join(parts)
                      + (f" (target >= {BATCH_TARGET}x)" if kind == "one_premise"
                         and size == "large" else ""))
    else:
        print(f"evaluate_batch: {b['batch']}")
    if "compile" in report:
        cm = report["compile"]
        print(f"compiled engine, first evaluate_batch in a fresh process: cold cache "
              f"{cm['cold_first_call_s']:.1f} s (all settings {cm['cold_all_settings_s']:.1f} s), "
              f"warm cache {cm['warm_first_call_s']:.2f} s")
    if not node:
        print(f"node side skipped: {node_reason}")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
