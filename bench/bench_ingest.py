"""Ingest throughput against a bare pandas read of the same file, in the same run.

Makes N synthetic claim rows (default 1,000,000) as CSV and as Parquet in a temporary
directory, then times, best of ``--repeat`` (interleaved, so machine noise hits all alike):

- ``bare``: ``pandas.read_csv`` / ``pandas.read_parquet`` of the file (no validation);
- ``load_claims``: read + validate + build the claims / rejects DataFrames;
- ``ingest_file``: read + validate + write ``claims.parquet`` and ``rejects.csv``.

Every side reads the same file, the same number of rounds, none warmed up (the file was just
written: it is in the page cache for all). The clock is wall time on all sides (``bench/
README.md``: reading files); process CPU is kept beside it. ``load_claims`` must return
every row of the bare read, with the same claim ids and feature values.

Prints the ratios to ``bare`` (target: ``load_claims`` at most 1.5x) and writes them as JSON to
``bench/results/ingest.json``. ``--peak-rows N`` also writes an N-row Parquet file and runs
``amv-calib ingest`` on it in a child process, reporting the child's peak RSS.

Usage: ``.venv/bin/python bench/bench_ingest.py [--quick] [--check] [--rows N] [--peak-rows N]``
"""

from __future__ import annotations

import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import _bench
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from amv_calib.claims._ingest import ingest_file, load_claims
from amv_calib.datasets._synth import synth_claims, write_claims
from amv_calib.settings import DEFAULT_SEED

RATIO_TARGET = 1.5  # load_claims / bare read, wall, at most
FEATURES = ("recency_hours", "source_trust_score", "model_confidence")


def _claims(n: int, part: int = 0) -> pd.DataFrame:
    frame = synth_claims(n, seed=DEFAULT_SEED + part)
    if part:  # distinct ids across parts, so a large file has no accidental duplicates
        frame["claim_id"] = [f"clm-{part:03d}-{i:07d}" for i in range(1, n + 1)]
    return frame


def _timed(fn: Callable[[], Any]) -> tuple[float, float, Any]:
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn()
    return time.perf_counter() - wall, time.process_time() - cpu, out


def _same_rows(bare: pd.DataFrame, loaded: tuple[pd.DataFrame, pd.DataFrame]) -> bool:
    """Whether ``load_claims`` kept every row of the bare read, ids and features equal."""
    claims, rejects = loaded
    return (len(rejects) == 0 and len(claims) == len(bare)
            and claims["claim_id"].astype(str).tolist() == bare["claim_id"].astype(str).tolist()
            and all(np.array_equal(claims[c].to_numpy(float), bare[c].to_numpy(float))
                    for c in FEATURES))


def bench_format(path: Path, out: Path, repeat: int) -> dict[str, Any]:
    bare = pd.read_csv if path.suffix == ".csv" else pd.read_parquet
    cases: dict[str, Callable[[], Any]] = {
        "bare": lambda: bare(path),
        "load_claims": lambda: load_claims(path),
        "ingest_file": lambda: ingest_file(path, out),
    }
    wall = {k: float("inf") for k in cases}
    cpu = {k: float("inf") for k in cases}
    last: dict[str, Any] = {}
    for _ in range(repeat):
        for name, fn in cases.items():
            w, c, last[name] = _timed(fn)
            wall[name], cpu[name] = min(wall[name], w), min(cpu[name], c)
    rows = pq.read_metadata(out / "claims.parquet").num_rows
    return {
        "load_claims_same_rows_as_bare": _same_rows(last["bare"], last["load_claims"]),
        "rows": rows,
        "bytes": path.stat().st_size,
        "wall_s": wall,
        "cpu_s": cpu,
        "ratio_load_claims": wall["load_claims"] / wall["bare"],
        "ratio_ingest_file": wall["ingest_file"] / wall["bare"],
        "cpu_ratio_load_claims": cpu["load_claims"] / cpu["bare"],
        "rows_per_s_ingest_file": rows / wall["ingest_file"],
    }


def peak_memory(rows: int, tmp: Path) -> dict[str, Any]:
    """Write a ``rows``-row Parquet file in 1M-row parts, ingest it in a child process."""
    path = tmp / "big.parquet"
    part_rows = min(rows, 1_000_000)
    writer = None
    written = 0
    for part in range(1, -(-rows // part_rows) + 1):
        n = min(part_rows, rows - written)
        table = pa.Table.from_pandas(_claims(n, part), preserve_index=False)
        if writer is None:
            writer = pq.ParquetWriter(path, table.schema)
        writer.write_table(table)
        written += n
    assert writer is not None
    writer.close()
    exe = Path(sys.executable).with_name("amv-calib")
    cmd = [str(exe), "-q", "ingest", str(path), "--out", str(tmp / "big_out"), "--json"]
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, check=True)
    wall = time.perf_counter() - start
    peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    summary = json.loads(proc.stdout)
    return {"rows": rows, "bytes": path.stat().st_size, "wall_s": wall,
            "peak_rss_mib": peak_kib / 1024, "summary": summary}


def main(argv: list[str] | None = None) -> int:
    ap = _bench.parser(__doc__, "ingest")
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--peak-rows", type=int, default=0,
                    help="also measure peak memory of ingesting an N-row Parquet file")
    args = ap.parse_args(argv)
    rows, repeat = (20_000, 1) if args.quick else (args.rows, args.repeat)
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="bench-ingest-") as tmp_name:
        tmp = Path(tmp_name)
        frame = _claims(rows)
        files = {"csv": write_claims(frame, tmp / "claims.csv"),
                 "parquet": write_claims(frame, tmp / "claims.parquet")}
        del frame
        for fmt, path in files.items():
            results[fmt] = bench_format(path, tmp / f"out_{fmt}", repeat)
        peak = peak_memory(args.peak_rows, tmp) if args.peak_rows else None
    report = {
        "benchmark": "ingest",
        "quick": args.quick,
        "baseline": "pandas.read_csv / pandas.read_parquet of the same file",
        "target": "load_claims at most 1.5x the bare read",
        "rows": rows,
        "repeat": repeat,
        "python": platform.python_version(),
        "pandas": pd.__version__,
        "pyarrow": pa.__version__,
        "cpus": os.cpu_count(),
        "results": results,
        "peak_memory": peak,
    }
    targets = []
    for fmt, r in results.items():
        targets += [
            _bench.holds(f"{fmt}: load_claims keeps every row of the bare read, values equal",
                         r["load_claims_same_rows_as_bare"]),
            _bench.at_most(f"{fmt}: load_claims / bare read, wall", r["ratio_load_claims"],
                           RATIO_TARGET, unit="x", full_only=True,
                           ours=r["wall_s"]["load_claims"], baseline=r["wall_s"]["bare"],
                           baseline_name=f"pandas.read_{'csv' if fmt == 'csv' else 'parquet'}",
                           side_unit=" s"),
            _bench.reported(f"{fmt}: ingest_file (files written) / bare read, wall",
                            r["ratio_ingest_file"], unit="x",
                            ours=r["wall_s"]["ingest_file"], baseline=r["wall_s"]["bare"],
                            baseline_name=f"pandas.read_{'csv' if fmt == 'csv' else 'parquet'}",
                            side_unit=" s"),
        ]
    if peak:
        targets += [
            _bench.reported(f"`amv-calib ingest` of a {peak['rows']:,}-row Parquet file, wall",
                            peak["wall_s"], unit=" s"),
            _bench.reported(f"`amv-calib ingest` of a {peak['rows']:,}-row Parquet file, "
                            "peak RSS", peak["peak_rss_mib"], unit=" MiB")]
    print(f"ingest benchmark: {rows:,} rows, best of {repeat}")
    print(f"{'format':8} {'bare s':>8} {'load s':>8} {'ingest s':>9} "
          f"{'load/bare':>10} {'ingest/bare':>12} {'cpu load/bare':>14}")
    for fmt, r in results.items():
        w = r["wall_s"]
        print(f"{fmt:8} {w['bare']:8.3f} {w['load_claims']:8.3f} {w['ingest_file']:9.3f} "
              f"{r['ratio_load_claims']:10.2f} {r['ratio_ingest_file']:12.2f} "
              f"{r['cpu_ratio_load_claims']:14.2f}")
    if peak:
        print(f"peak memory: {peak['rows']:,}-row Parquet ({peak['bytes'] / 2**20:.0f} MiB) "
              f"ingested in {peak['wall_s']:.1f} s, peak RSS {peak['peak_rss_mib']:.0f} MiB")
    _bench.write_results(args.out, report, targets, quick=args.quick)
    return _bench.finish(targets, quick=args.quick, check=args.check)


if __name__ == "__main__":
    sys.exit(main())
