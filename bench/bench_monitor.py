"""Benchmark: monitoring 10 M decision lines with 1 M outcomes beside the label join of the
same logs, in the same run.

Issue 18: ``amv-calib monitor`` must take no more than 1.5x the ``label`` join of the same
logs. Both read the logs and join the outcomes (monitoring reuses the join: one read of the
logs, the join with outcome labels only); monitoring then windows the uses and computes the
drift, calibration and harm statistics, and writes its report, timeline and labelled claims.

- **ours**: :func:`amv_calib.monitoring.monitor` with 7-day windows against the shipped
  champion, then :func:`~amv_calib.monitoring.write_monitor_outputs` (what ``amv-calib
  monitor --out DIR --no-tracking`` does).
- **baseline**: :func:`amv_calib.claims.label_claims` and the claims written as Parquet
  (what ``amv-calib label --out claims.parquet`` does, soft labels on, its default).

The data are ``bench_labels.make_data``'s (one decision a second: 10 M lines span 116 days,
17 windows). Each side runs in its own subprocess, timed by wall clock inside it
(``bench/README.md``), the sides alternating ``--rounds`` times each; the fastest run of each
side counts. Peak memory is its ``ru_maxrss``. Monitoring must label exactly the uses the
label join labels from outcomes (it takes no soft labels from verifier calls).

Run: ``.venv/bin/python bench/bench_monitor.py [--quick] [--check] [--lines N]
[--outcomes M]``. Numbers go to ``bench/results/monitor.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import _bench

ROOT = _bench.ROOT
TIME_TARGET = 1.5  # monitor / label, time, at most
ARTIFACT = str(ROOT / "models" / "amv-guard@production")


def _peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def child_monitor(log: str, outcomes: str, out: str) -> dict[str, Any]:
    import warnings

    from amv_calib.monitoring import monitor, write_monitor_outputs

    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        report, claims = monitor(ARTIFACT, log, outcomes, window="7d")
        write_monitor_outputs(report, claims, out)
    seconds = time.perf_counter() - t0
    return {"seconds": seconds, "peak_mib": _peak_mib(), "windows": len(report.windows),
            "statuses": [w.status for w in report.windows], "labelled": len(claims),
            "uses": report.uses_read}


def child_label(log: str, outcomes: str, out: str) -> dict[str, Any]:
    import warnings

    from amv_calib.claims import label_claims

    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        claims, report = label_claims(log, outcomes)
        Path(out).mkdir(parents=True, exist_ok=True)
        claims.to_parquet(Path(out) / "claims.parquet", index=False)
    seconds = time.perf_counter() - t0
    return {"seconds": seconds, "peak_mib": _peak_mib(), "rows": len(claims),
            "uses": report.uses_read, "joined_by_outcome": report.joined_by_source["outcome"]}


def _run_child(side: str, data: dict[str, Any], out: Path) -> dict[str, Any]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", side, "--log",
           data["log"], "--outcomes-file", data["outcomes"], "--child-out", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{side} failed:\n{proc.stderr}")
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def main(argv: list[str] | None = None) -> int:
    ap = _bench.parser(__doc__, "monitor")
    ap.add_argument("--lines", type=int, default=None, help="decision lines (default 10 M)")
    ap.add_argument("--outcomes", type=int, default=None, help="outcome records (default 1 M)")
    ap.add_argument("--seed", type=int, default=20261202)
    ap.add_argument("--data-dir", default=None, help="where to write the generated data")
    ap.add_argument("--rounds", type=int, default=1,
                    help="alternating runs of each side; the fastest of each counts")
    ap.add_argument("--child", choices=("monitor", "label"), help=argparse.SUPPRESS)
    ap.add_argument("--log", help=argparse.SUPPRESS)
    ap.add_argument("--outcomes-file", help=argparse.SUPPRESS)
    ap.add_argument("--child-out", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        sys.path.insert(0, str(ROOT))
        fn = child_monitor if args.child == "monitor" else child_label
        print(json.dumps(fn(args.log, args.outcomes_file, args.child_out)))
        return 0
    sys.path.insert(0, str(ROOT / "bench"))
    from bench_labels import make_data

    n_lines = args.lines or (10_000 if args.quick else 10_000_000)
    n_out = args.outcomes or (1_000 if args.quick else 1_000_000)
    folder = Path(tempfile.mkdtemp(prefix="bench-monitor-", dir=args.data_dir))
    try:
        t0 = time.perf_counter()
        data = make_data(folder, n_lines, n_out, args.seed)
        print(f"data: {n_lines:,} lines ({data['log_bytes'] / 2**20:,.0f} MiB), {n_out:,} "
              f"outcomes, generated in {time.perf_counter() - t0:.1f} s", flush=True)
        runs: dict[str, list[dict[str, Any]]] = {"label": [], "monitor": []}
        for k in range(args.rounds):
            for side in runs:
                r = _run_child(side, data, folder / f"{side}-out-{k}")
                runs[side].append(r)
                print(f"{side + ':':8s} {r['seconds']:8.1f} s  peak {r['peak_mib']:8,.0f} MiB",
                      flush=True)
        label, mon = (min(runs[side], key=lambda r: r["seconds"]) for side in runs)
        print(f"monitor: {mon['windows']} windows", flush=True)
        ratio = mon["seconds"] / label["seconds"]
        print(f"ratio monitor/label: time {ratio:.2f}x (target <= 1.5x), peak memory "
              f"{mon['peak_mib'] / label['peak_mib']:.2f}x")
        result = {"quick": args.quick,
                  "data": {"lines": n_lines, "outcome_records": n_out,
                           "premise_entries": data["premise_entries"],
                           "log_bytes": data["log_bytes"]},
                  "monitor": {**mon, "all_seconds": [r["seconds"] for r in runs["monitor"]]},
                  "label": {**label, "all_seconds": [r["seconds"] for r in runs["label"]]},
                  "ratios": {"time_monitor_over_label": ratio,
                             "memory_monitor_over_label": mon["peak_mib"] / label["peak_mib"]},
                  "target": TIME_TARGET}
        targets = [
            _bench.holds("monitor reads the uses the label join reads",
                         mon["uses"] == label["uses"]),
            _bench.holds("monitor labels the uses the label join labels from outcomes",
                         mon["labelled"] == label["joined_by_outcome"]),
            _bench.at_most("monitor / label join, time", ratio, TIME_TARGET, unit="x",
                           full_only=True),
        ]
        result["targets"] = _bench.report_targets(targets, quick=args.quick)
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
        print(f"wrote {out}")
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return _bench.finish(targets, quick=args.quick, check=args.check)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    sys.exit(main())
