"""Ingest throughput against a bare pandas read of the same file, in the same run.

Makes N synthetic claim rows (default 1,000,000) as CSV and as Parquet in a temporary
directory, then times, best of ``--repeat`` (interleaved, so machine noise hits all alike):

- ``bare``: ``pandas.read_csv`` / ``pandas.read_parquet`` of the file (no validation);
- ``load_claims``: read + validate + build the claims / rejects DataFrames;
- ``ingest_file``: read + validate + write ``claims.parquet`` and ``rejects.csv``.

Prints the ratios to ``bare`` (target: ``load_claims`` at most 2x) and writes them as JSON to
``bench/results/ingest.json``. ``--peak-rows N`` also writes an N-row Parquet file and runs
``amv-calib ingest`` on it in a child process, reporting the child's peak RSS.

Usage: ``.venv/bin/python bench/bench_ingest.py [--quick] [--rows N] [--peak-rows N]``
"""

from __future__ import annotations

import argparse
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

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from amv_calib.claims._ingest import ingest_file, load_claims
from amv_calib.claims._synth import synth_claims, write_claims
from amv_calib.settings import DEFAULT_SEED

RESULTS = Path(__file__).resolve().parent / "results" / "ingest.json"


def _claims(n: int, part: int = 0) -> pd.DataFrame:
    frame = synth_claims(n, seed=DEFAULT_SEED + part)
    if part:  # distinct ids across parts, so a large file has no accidental duplicates
        frame["claim_id"] = [f"clm-{part:03d}-{i:07d}" for i in range(1, n + 1)]
    return frame


def _timed(fn: Callable[[], Any]) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - wall, time.process_time() - cpu


def bench_format(path: Path, out: Path, repeat: int) -> dict[str, Any]:
    bare = pd.read_csv if path.suffix == ".csv" else pd.read_parquet
    cases: dict[str, Callable[[], Any]] = {
        "bare": lambda: bare(path),
        "load_claims": lambda: load_claims(path),
        "ingest_file": lambda: ingest_file(path, out),
    }
    wall = {k: float("inf") for k in cases}
    cpu = {k: float("inf") for k in cases}
    for _ in range(repeat):
        for name, fn in cases.items():
            w, c = _timed(fn)
            wall[name], cpu[name] = min(wall[name], w), min(cpu[name], c)
    rows = pq.read_metadata(out / "claims.parquet").num_rows
    return {
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
    cmd = [str(exe), "-q", "ingest", str(path), "--out", str(tmp / "big_out")]
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, check=True)
    wall = time.perf_counter() - start
    peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    summary = json.loads(proc.stdout)
    return {"rows": rows, "bytes": path.stat().st_size, "wall_s": wall,
            "peak_rss_mib": peak_kib / 1024, "summary": summary}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="20,000 rows, 1 repeat (smoke run)")
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--peak-rows", type=int, default=0,
                    help="also measure peak memory of ingesting an N-row Parquet file")
    ap.add_argument("--json", type=Path, default=RESULTS, help="where to write the results")
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
        "baseline": "pandas.read_csv / pandas.read_parquet of the same file",
        "target": "load_claims at most 2x the bare read",
        "rows": rows,
        "repeat": repeat,
        "python": platform.python_version(),
        "pandas": pd.__version__,
        "pyarrow": pa.__version__,
        "cpus": os.cpu_count(),
        "results": results,
        "peak_memory": peak,
    }
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
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
