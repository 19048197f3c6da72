"""The monitor's acceptance figures (issue 28), measured by simulation.

Two levels, both using the monitor's own code:

- **statistics**: labelled harm indicators and calibrated (or not) uses drawn directly into
  the day buckets (:class:`amv_calib.monitoring._sequential.DayBuckets`), the status read
  after every day exactly as a daily run reads it; many runs, cheap.
- **gate**: the real gate deciding in ``tests/monitoring/sim_world.py``'s world and writing
  real decision logs and outcomes; ``amv-calib``'s :func:`~amv_calib.monitoring.monitor`
  runs once a day on the files as they had grown that day (incremental, from its state).

Scenarios (alpha 1%, delta 0.05; 300 labelled actions a day at the statistics level, 375
decided a day with 80% labelled in the gate world):

1. **no drift**: harm alpha/2 (the gate world: the shipped champion in its own world,
   harm ~0.47%), 60 days: share of runs with any ALERT, share of daily runs that WARN;
2. **harm drift**: harm 1.5 alpha from day 30 (the gate world: verifiers 0.25 less reliable
   than declared from day 30): delay to ALERT, against the per-window rule the monitor used
   before (7-day windows, each alone: Gate Harmful's 99.9% Clopper-Pearson lower bound
   above alpha), on the same runs;
3. **wrong world**: harm ~1.7% (verifiers 0.3 less reliable): ALERT within 6,000 labelled
   actions.

Run: ``.venv/bin/python bench/sim_monitor.py [--runs N] [--gate-runs M]``; figures to
``bench/results/sim_monitor.json``.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
ALPHA, DELTA = 0.01, 0.05
PER_DAY = 300


def _status(ev: Any) -> str:
    from amv_calib.monitoring._sequential import insufficient, judge

    alerts, warns, _ = judge(ev)
    return ("ALERT" if alerts else "WARN" if warns
            else "INSUFFICIENT DATA" if insufficient(ev) else "OK")


def _window_rule(n: np.ndarray, s: np.ndarray, start: int, days: int) -> int | None:
    """The first day (the end of a 7-day window) the per-window rule alerts, or None."""
    from amv_calib.calibration import clopper_pearson

    for w0 in range(0, days, 7):
        w1 = min(w0 + 7, days)
        nn, ss = int(n[w0:w1].sum()), int(s[w0:w1].sum())
        if w1 > start and nn and clopper_pearson(ss, nn, 0.999)[0] > ALPHA:
            return w1 - 1
    return None


def stats_level(runs: int, seed: int) -> dict[str, Any]:
    from amv_calib.monitoring._sequential import DayBuckets, evidence

    rng = np.random.default_rng(seed)
    out: dict[str, Any] = {}
    # 1. no drift, with calibrated uses (2.5 labelled uses an action)
    any_alert = 0
    statuses: list[str] = []
    for _ in range(runs):
        b = DayBuckets()
        alerted = False
        for d in range(60):
            b.add_actions(np.full(PER_DAY, d), rng.random(PER_DAY) < ALPHA / 2)
            p = rng.beta(1.0, 6.0, size=750)
            b.add_uses(np.full(750, d), (rng.random(750) < p).astype(float), p, 0.0)
            st = _status(evidence(b, d, ALPHA, DELTA))
            statuses.append(st)
            alerted |= st == "ALERT"
        any_alert += alerted
    out["no_drift"] = {"runs": runs, "any_alert_share": any_alert / runs,
                       "daily_warn_share": statuses.count("WARN") / len(statuses),
                       "daily_insufficient_share":
                           statuses.count("INSUFFICIENT DATA") / len(statuses)}
    # 2. harm drift: alpha/2, then 1.5 alpha from day 30; followed to day 120
    seq, win = [], []
    for _ in range(runs):
        days = 120
        rate = np.where(np.arange(days) < 30, ALPHA / 2, 1.5 * ALPHA)
        s = rng.binomial(PER_DAY, rate)
        n = np.full(days, PER_DAY)
        b = DayBuckets()
        hit = None
        for d in range(days):
            b.add_actions(np.full(PER_DAY, d), np.arange(PER_DAY) < s[d])
            if _status(evidence(b, d, ALPHA, DELTA)) == "ALERT":
                hit = d
                break
        seq.append(None if hit is None else hit - 29)
        w = _window_rule(n, s, 30, days)
        win.append(None if w is None else w - 29)
    out["harm_drift"] = {"runs": runs, "sequential": _delays(seq), "per_window": _delays(win)}
    # 3. wrong world: 1.7% from the start, ALERT within 6,000 labelled actions (20 days)
    hits = 0
    for _ in range(runs):
        b = DayBuckets()
        for d in range(20):
            b.add_actions(np.full(PER_DAY, d), rng.random(PER_DAY) < 0.017)
            if _status(evidence(b, d, ALPHA, DELTA)) == "ALERT":
                hits += 1
                break
    out["wrong_world"] = {"runs": runs, "alert_within_6000_share": hits / runs}
    return out


def _delays(days: list[int | None]) -> dict[str, Any]:
    got = np.array([d for d in days if d is not None], dtype=float)
    censored = len(days) - len(got)
    # undetected runs count as +inf: the quantiles are those of all runs
    full = np.concatenate([got, np.full(censored, np.inf)])
    q = np.quantile(full, [0.5, 0.9], method="inverted_cdf") if len(full) else [math.nan] * 2
    return {"median_days": float(q[0]), "p90_days": float(q[1]),
            "undetected_share": censored / len(days) if days else math.nan}


def gate_level(runs: int, seed: int, work: Path) -> dict[str, Any]:
    sys.path.insert(0, str(ROOT / "tests" / "monitoring"))
    from sim_world import START, make_pool, replay_daily, simulate

    from amv_calib.monitoring import monitor

    pool = make_pool()
    models = work / "models"
    shutil.copytree(ROOT / "models" / "amv-guard", models / "amv-guard")
    ref = f"{models}/amv-guard@production"
    since = str(START)
    per_day = 375  # 80% labelled: 300 labelled actions a day
    out: dict[str, Any] = {}

    def daily(name: str, rep: int, days: int, **world: Any) -> list[dict[str, Any]]:
        folder = work / f"{name}-{rep}"
        d, o = simulate(pool, ref, folder / "world", days=days, per_day=per_day,
                        seed=seed + rep, drift_day=None, **world)
        seen = []
        for dd, oo in replay_daily(d, o, folder / "daily"):
            r, _ = monitor(ref, dd, oo, since=since, state=folder / "state")
            seen.append({"status": r.status, "ev": r.evidence,
                         "windows": [(w.harm.get("n", 0), w.harm.get("harmful", 0))
                                     for w in r.windows]})
        shutil.rmtree(folder, ignore_errors=True)
        return seen

    t0 = time.perf_counter()
    statuses, any_alert, harm = [], 0, []
    for rep in range(runs):
        seen = daily("nodrift", rep, 60)
        st = [x["status"] for x in seen]
        statuses += st
        any_alert += "ALERT" in st
        harm.append(seen[-1]["ev"]["harm_rate"])
    out["no_drift"] = {"runs": runs, "any_alert_share": any_alert / runs,
                       "daily_warn_share": statuses.count("WARN") / len(statuses),
                       "daily_insufficient_share":
                           statuses.count("INSUFFICIENT DATA") / len(statuses),
                       "harm_rate_mean": float(np.mean(harm))}
    print(f"gate no drift: {out['no_drift']} ({time.perf_counter() - t0:.0f} s)", flush=True)
    seq, win, rates = [], [], []
    for rep in range(runs):
        seen = daily("drift", rep, 75, reliability_drop=0.25, drop_day=30)
        hit = next((i for i, x in enumerate(seen) if x["status"] == "ALERT"), None)
        seq.append(None if hit is None else hit - 29)
        # the per-window rule on the windows' final counts (labels that came late included:
        # if anything, in its favour)
        wins = seen[-1]["windows"]
        n = np.array([a for a, _ in wins], dtype=float)
        s = np.array([b for _, b in wins], dtype=float)
        from amv_calib.calibration import clopper_pearson

        w = next((7 * k + 6 for k in range(len(wins)) if 7 * k + 6 > 29 and n[k]
                  and clopper_pearson(int(s[k]), int(n[k]), 0.999)[0] > ALPHA), None)
        win.append(None if w is None else w - 29)
        after = [x for x in seen[30:]]
        rates.append(after[-1]["ev"]["harm_rate"] if after else math.nan)
    out["harm_drift"] = {"runs": runs, "days": 75, "sequential": _delays(seq),
                         "per_window": _delays(win)}
    print(f"gate harm drift: {out['harm_drift']} ({time.perf_counter() - t0:.0f} s)",
          flush=True)
    hits = 0
    for rep in range(runs):
        seen = daily("wrong", rep, 22, reliability_drop=0.3)
        hits += any(x["status"] == "ALERT" and x["ev"]["labelled_actions"] <= 6000
                    for x in seen)
    out["wrong_world"] = {"runs": runs, "alert_within_6000_share": hits / runs}
    print(f"gate wrong world: {out['wrong_world']} ({time.perf_counter() - t0:.0f} s)",
          flush=True)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=1000, help="statistics-level runs")
    ap.add_argument("--gate-runs", type=int, default=20, help="real-gate worlds a scenario")
    ap.add_argument("--seed", type=int, default=28)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "sim_monitor.json"))
    args = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    t0 = time.perf_counter()
    result: dict[str, Any] = {"alpha": ALPHA, "delta": DELTA}
    result["statistics"] = stats_level(args.runs, args.seed)
    print(json.dumps(result["statistics"], indent=1), flush=True)
    if args.gate_runs:
        with tempfile.TemporaryDirectory(prefix="sim-monitor-") as tmp:
            result["gate"] = gate_level(args.gate_runs, args.seed, Path(tmp))
    result["seconds"] = time.perf_counter() - t0
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
