"""Benchmark: the single-machine data stages beside the Spark engine on local[2] (issue 19).

For each size (decision lines; default 1 M and 10 M) the same generated decision log and
outcomes (``bench_labels.make_data``: 1-4 premises a line, one outcome per ten lines) go
through:

- **label, single machine**: ``label_claims`` (``seconds``), then the files ``label --out
  claims.parquet`` writes (``seconds_with_files``: claims, join report, unjoined CSV);
- **label, Spark local[2]**: ``write_label_spark`` on the same files, writing the same
  three files (the rows stream from the executors' part files; session start-up included;
  Spark's default cap on collected results); its files are checked equal to the
  single-machine ones (SHA-256), its claim rows too (a hash of the table read back) and its
  report counts;
- **compare, single machine**: ``compare_calibrators`` on the labelled claims;
- **compare, Spark local[2]**: ``compare_calibrators_spark`` on the same claims (Parquet read
  by Spark), session start-up included.

Both compares use the same settings (``--calibrators``, ``--folds``, ``--n-boot``). Each side
runs in its own subprocess: peak memory is that process's ``ru_maxrss`` (for Spark, the Python
driver; ``label_peak_mib``: taken when the label's files are written, before the checks read
them back) and, for Spark, the JVM's peak resident set (``VmHWM``; in local mode the JVM holds
the driver and the executors). The report gives each time, the scaling from the smallest to
the largest size (time ratio over size ratio), and where the Spark line would cross the
single-machine one if both grew linearly between the measured sizes.

Times are wall clock, each side inside its own process (``bench/README.md``). Targets, per
size: the Spark label writes the same files byte for byte, the same claim rows and report
counts; both compares pick the same champion with log losses within ``LOG_LOSS_TOL``; every
side finished.

Run: ``.venv/bin/python bench/bench_spark.py [--quick] [--check] [--lines 1000000
10000000]``. Numbers go to ``bench/results/spark.json``.
"""

from __future__ import annotations

import argparse
import json
import logging
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
#: Largest difference of the champion's log loss between the two compares.
LOG_LOSS_TOL = 1e-9
#: The measured sides, each in its own process, in this order (the slowest last, so that a
#: run cut short still has the others).
SIDES = ("label", "compare_local", "compare_spark", "label_spark")
sys.path.insert(0, str(ROOT / "bench"))


def _peaks() -> dict[str, float]:
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    kids = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024.0
    return {"peak_mib": round(own, 1), "peak_children_mib": round(kids, 1)}


def child(side: str, args: argparse.Namespace) -> dict[str, Any]:
    """One measured side, in this (fresh) process."""
    t0 = time.perf_counter()
    out: dict[str, Any] = {"side": side}
    if side == "label":
        from amv_calib.claims import label_claims, write_claims_table, write_join_report

        claims, report = label_claims(args.log, args.outcomes_file)
        out["seconds"] = time.perf_counter() - t0
        out["label_peak_mib"] = _peaks()["peak_mib"]
        # the files `label --out claims.parquet` writes, to compare with the Spark side's
        files = Path(args.claims).parent / "local-out" / "claims.parquet"
        write_claims_table(claims, files)
        write_join_report(report, files, [args.outcomes_file])
        out["seconds_with_files"] = time.perf_counter() - t0
        out["files_sha256"] = _sha256(files)
        # The generator reuses a claim within one action at one time: both compares refuse
        # such duplicates (the data contract), so the measured table keeps the first.
        before = len(claims)
        claims = claims.drop_duplicates(["claim_id", "timestamp", "violated"])
        out["duplicates_dropped"] = before - len(claims)
        claims.to_parquet(args.claims, index=False)
        out.update(rows=len(claims), uses=report.uses_read, joined=report.joined,
                   claims_hash=_hash(claims), report=_counts(report))
    elif side == "label_spark":
        import pandas as pd

        from amv_calib.spark import spark_session, write_label_spark

        # Spark's own cap on what the driver collects (1g): the label collects no per-use rows
        spark = spark_session("local[2]", driver_memory=args.driver_memory,
                              shuffle_partitions=args.shuffle_partitions)
        out["max_result_size"] = spark.sparkContext.getConf().get(
            "spark.driver.maxResultSize", "unset (1g)")
        t1 = time.perf_counter()
        stages = _StageLog(t0)  # the engine's progress lines, in seconds from the start
        logging.getLogger("amv_calib.spark").addHandler(stages)
        logging.getLogger("amv_calib.spark").setLevel(logging.INFO)
        files = Path(args.claims).parent / "spark-out" / "claims.parquet"
        _, report, _ = write_label_spark(args.log, [args.outcomes_file], spark=spark, out=files)
        out["stages"] = stages.lines
        out["seconds"] = time.perf_counter() - t0
        out["startup_seconds"] = t1 - t0
        out["label_peak_mib"] = _peaks()["peak_mib"]
        out["jvm_peak_mib"] = _jvm_peak_mib(spark)
        spark.stop()
        out["files_sha256"] = _sha256(files)
        claims = pd.read_parquet(files)  # the checks below, after the peaks are taken
        before = len(claims)
        claims = claims.drop_duplicates(["claim_id", "timestamp", "violated"])
        out["duplicates_dropped"] = before - len(claims)
        out.update(rows=len(claims), uses=report.uses_read, joined=report.joined,
                   claims_hash=_hash(claims), report=_counts(report))
    elif side == "compare_local":
        import pandas as pd

        from amv_calib.calibration import compare_calibrators

        result = compare_calibrators(pd.read_parquet(args.claims), **_compare_kw(args))
        out["seconds"] = time.perf_counter() - t0
        out.update(champion=result.champion, rows=int(result.y.size),
                   log_loss=float(result.table.set_index("name").loc[result.champion,
                                                                    "log_loss"]))
    else:
        from amv_calib.spark import compare_calibrators_spark, spark_session

        # the compare collects a few numbers per claim row (docs/scale.md): uncapped, as before
        spark = spark_session("local[2]", driver_memory=args.driver_memory,
                              conf={"spark.driver.maxResultSize": "0"})
        t1 = time.perf_counter()
        result = compare_calibrators_spark(args.claims, spark=spark, **_compare_kw(args))
        out["seconds"] = time.perf_counter() - t0
        out["startup_seconds"] = t1 - t0
        out.update(champion=result.champion, rows=int(result.y.size),
                   log_loss=float(result.table.set_index("name").loc[result.champion,
                                                                    "log_loss"]))
        out["jvm_peak_mib"] = _jvm_peak_mib(spark)
        spark.stop()
    out.update(_peaks())
    return out


class _StageLog(logging.Handler):
    """Keeps each log line with its time since ``t0``."""

    def __init__(self, t0: float) -> None:
        super().__init__()
        self.t0 = t0
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(f"{time.perf_counter() - self.t0:.1f} s: {record.getMessage()}")


def _sha256(claims_file: Path) -> dict[str, str]:
    """Digests of the claims file and the unjoined CSV ``label`` writes beside it."""
    import hashlib

    out = {}
    for f in (claims_file, claims_file.with_name("claims.unjoined.csv")):
        h = hashlib.sha256()
        with open(f, "rb") as fh:
            for block in iter(lambda fh=fh: fh.read(1 << 24), b""):
                h.update(block)
        out[f.name] = h.hexdigest()
    return out


def _hash(claims: Any) -> str:
    """A digest of the claim rows (values and order), to check two engines agree."""
    import pandas as pd

    return f"{int(pd.util.hash_pandas_object(claims, index=False).sum()) & (2**64 - 1):016x}"


def _counts(report: Any) -> dict[str, Any]:
    d = dict(report.to_dict())
    d.pop("decision_files", None)
    return d


def _jvm_peak_mib(spark: Any) -> float | None:
    """Peak resident memory of the Spark JVM (in local mode: the driver and the executors)."""
    try:
        pid = int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024.0, 1)
    except Exception:  # noqa: BLE001 - not Linux, or no JVM handle: no figure
        return None
    return None


def _compare_kw(args: argparse.Namespace) -> dict[str, Any]:
    return {"calibrators": args.calibrators.split(","), "folds": args.folds,
            "n_boot": args.n_boot, "sample_weight": "label_weight"}


def _run_child(side: str, data: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--child", side, "--log", data["log"],
           "--outcomes-file", data["outcomes"], "--claims", data["claims"],
           "--calibrators", args.calibrators, "--folds", str(args.folds),
           "--n-boot", str(args.n_boot), "--driver-memory", args.driver_memory,
           "--shuffle-partitions", str(max(4, int(data["lines"]) // 250_000))]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        return {"side": side, "error": proc.stderr[-2000:],
                "wall_seconds": time.perf_counter() - t0}
    res: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    res["wall_seconds"] = time.perf_counter() - t0
    return res


def _crossing(sizes: list[int], local: list[float], spark: list[float]) -> float | None:
    """Lines at which linear fits through the two measured points of each side cross."""
    if len(sizes) < 2:
        return None
    (n0, n1), (a0, a1), (b0, b1) = sizes[:2], local[:2], spark[:2]
    sa, sb = (a1 - a0) / (n1 - n0), (b1 - b0) / (n1 - n0)
    if sa == sb:
        return None
    n = n0 + (b0 - a0) / (sa - sb)
    return n if n > 0 else None


def main(argv: list[str] | None = None) -> int:
    ap = _bench.parser(__doc__, "spark")
    ap.add_argument("--lines", type=int, nargs="+", default=None,
                    help="decision-line counts (default 1000000 10000000)")
    ap.add_argument("--calibrators", default="platt,isotonic,seed_prior")
    ap.add_argument("--folds", type=int, default=3)
    ap.add_argument("--n-boot", type=int, default=0)
    ap.add_argument("--sides", nargs="+", choices=SIDES, default=list(SIDES),
                    help="which sides to measure, in this order ('label' first: it writes "
                    "the claims the compares read)")
    ap.add_argument("--reuse-data", action="store_true",
                    help="with --data-dir: use the data (and claims) a cut-short run left")
    ap.add_argument("--driver-memory", default="6g")
    ap.add_argument("--shuffle-partitions", type=int, default=4, help=argparse.SUPPRESS)
    ap.add_argument("--seed", type=int, default=20261202)
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--child", choices=SIDES,
                    help=argparse.SUPPRESS)
    ap.add_argument("--log", help=argparse.SUPPRESS)
    ap.add_argument("--outcomes-file", help=argparse.SUPPRESS)
    ap.add_argument("--claims", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, args)))
        return 0
    from bench_labels import make_data

    sizes = args.lines or ([20_000, 60_000] if args.quick else [1_000_000, 10_000_000])
    base = Path(args.data_dir or tempfile.mkdtemp(prefix="amv-bench-spark-"))
    runs: list[dict[str, Any]] = []
    for n in sizes:
        folder = base / f"n{n}"
        folder.mkdir(parents=True, exist_ok=True)
        if args.reuse_data and (folder / "decisions.jsonl").is_file():
            data = {"log": folder / "decisions.jsonl", "outcomes": folder / "outcomes.csv"}
        else:
            data = make_data(folder, n, max(10, n // 10), args.seed)
        data = {"log": str(data["log"]), "outcomes": str(data["outcomes"]),
                "claims": str(folder / "claims.parquet"), "lines": n}
        row: dict[str, Any] = {"lines": n}
        runs.append(row)
        for side in args.sides:
            row[side] = _run_child(side, data, args)
            print(json.dumps({"lines": n, **row[side]}), file=sys.stderr, flush=True)
            out_path = Path(args.out)  # partial results, in case a run is cut short
            out_path.parent.mkdir(parents=True, exist_ok=True)
            out_path.write_text(json.dumps({"runs": runs, "partial": True}, indent=2) + "\n")
        if all(s in row and "error" not in row[s] for s in ("label", "label_spark")):
            row["label_equal"] = (row["label"]["claims_hash"] == row["label_spark"]["claims_hash"]
                                  and row["label"]["report"] == row["label_spark"]["report"])
            row["label_files_equal"] = (row["label"]["files_sha256"]
                                        == row["label_spark"]["files_sha256"])
        shutil.rmtree(folder, ignore_errors=True)
    ok = all("error" not in r[s] for r in runs for s in args.sides)
    summary: dict[str, Any] = {"quick": args.quick, "runs": runs, "settings": {
        "calibrators": args.calibrators, "folds": args.folds, "n_boot": args.n_boot,
        "master": "local[2]", "driver_memory": args.driver_memory}}
    if ok and len(runs) >= 2:
        ratio = sizes[-1] / sizes[0]
        for side in args.sides:
            summary[f"scaling_{side}"] = runs[-1][side]["seconds"] / runs[0][side]["seconds"] \
                / ratio
        for stage, local, spark in (("compare", "compare_local", "compare_spark"),
                                    ("label", "label", "label_spark")):
            if local in args.sides and spark in args.sides:
                summary[f"{stage}_crossing_lines"] = _crossing(
                    sizes, [r[local]["seconds"] for r in runs],
                    [r[spark]["seconds"] for r in runs])
    targets = _targets(runs, args.sides)
    out = Path(args.out)
    _bench.write_results(out, summary, targets, quick=args.quick)
    print(json.dumps(summary, indent=2))
    code = _bench.finish(targets, quick=args.quick, check=args.check)
    return code if ok else 1


def _side_ratio(name: str, spark: dict[str, Any], local: dict[str, Any], local_key: str,
                local_name: str) -> _bench.Target:
    """The Spark side's time over the single-machine one's (reported, no target)."""
    s, b = spark.get("seconds"), local.get(local_key, local.get("seconds"))
    return _bench.reported(name, s / b if s and b else None, unit="x", ours=s, baseline=b,
                           side_unit=" s", baseline_name=local_name,
                           missing="a side failed")


def _targets(runs: list[dict[str, Any]], sides: list[str]) -> list[_bench.Target]:
    out = []
    for row in runs:
        n = f"{row['lines']:,} lines"
        errors = [s for s in sides if "error" in row[s]]
        out.append(_bench.holds(f"{n}: every side finished", not errors,
                                missing=f"failed: {', '.join(errors)}" if errors else ""))
        if "label" in sides and "label_spark" in sides:
            out.append(_bench.holds(f"{n}: Spark label gives the same claim rows and counts",
                                    row.get("label_equal"), missing="a label side failed"))
            out.append(_bench.holds(f"{n}: Spark label writes the same files byte for byte",
                                    row.get("label_files_equal"), missing="a label side failed"))
            out.append(_side_ratio(f"{n}: label, Spark local[2] / one machine, wall",
                                   row["label_spark"], row["label"], "seconds_with_files",
                                   "label with its files, one machine"))
        if "compare_local" in sides and "compare_spark" in sides:
            a, b = row["compare_local"], row["compare_spark"]
            both = "error" not in a and "error" not in b
            out.append(_bench.holds(f"{n}: both compares pick the same champion",
                                    a.get("champion") == b.get("champion") if both else None,
                                    missing="a compare side failed"))
            out.append(_bench.at_most(f"{n}: champion's log loss, Spark minus one machine",
                                      abs(a["log_loss"] - b["log_loss"]) if both else None,
                                      LOG_LOSS_TOL, missing="a compare side failed"))
            out.append(_side_ratio(f"{n}: compare, Spark local[2] / one machine, wall", b, a,
                                   "seconds", "compare_calibrators, one machine"))
    return out


if __name__ == "__main__":
    sys.exit(main())
