"""The label join's SQL steps on DuckDB (:mod:`amv_calib.claims._sql`) beside the whole join
(:func:`amv_calib.claims._join._join`: those steps and the Python tail), on the same
decision log and outcomes: wall time, peak memory and the SQL's seconds per step.

Each side runs in a subprocess of its own, the sides alternating, ``--rounds`` times each;
the fastest round of each side counts. A subprocess reads the log with ``read_uses``
(untimed), warms up on the example logs (imports, compiled loops), then times
``load_outcomes`` of the outcome file and the join:

- **join**: ``_join`` (the SQL's decisions, the refused uses' reasons, the soft labels, the
  claim rows' positions and the report);
- **sql**: the input relations built from the log (``_duckjoin.relations``: the ids'
  codes, Arrow tables) and ``_duckjoin.run_join`` (a fresh connection, every step, the
  results read as numpy). It stops at the decisions: the Python tail the join side
  includes (reasons, soft labels, rows, report) is not in it.

CPU seconds are the side's user and system time over all its threads (the least of the
rounds): on a shared machine they say what the side costs when the wall time says whom it
waited for. Peak memory is the most resident memory sampled every 2 ms while the side runs
(the log held by both), and the most above the resident memory when it starts.

Run: ``.venv/bin/python bench/sqljoin_steps.py --data-dir DIR`` (``DIR`` holding
``decisions.jsonl`` and ``outcomes.csv``; without it, a log of ``--lines`` lines is made in
a temporary folder as ``bench_labels.py`` makes its own). Prints a table; ``--out FILE``
also writes the figures as JSON.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
_PAGE = 4096


def _rss() -> int:
    """This process's resident bytes now."""
    with open("/proc/self/statm", encoding="ascii") as fh:
        return int(fh.read().split()[1]) * _PAGE


def _cpu() -> float:
    """This process's CPU seconds so far (user and system, every thread)."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


class _Peak:
    """The most resident memory of this process while it runs, sampled every 2 ms."""

    def __init__(self) -> None:
        self.start = self.peak = _rss()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.002):
            self.peak = max(self.peak, _rss())

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, _rss())


def _side(side: str, decisions: str, outcomes: str) -> dict[str, Any]:
    """One side, timed in this process (the ``--side`` subprocess)."""
    from amv_calib.claims import _duckjoin as dj
    from amv_calib.claims._join import _join, read_with_outcomes
    from amv_calib.claims._logread import read_uses
    from amv_calib.claims._outcomes import load_outcomes

    def run(log: Any, out_path: str | Any, timings: dict[str, float] | None) -> None:
        out_df, out_invalid = load_outcomes([out_path])
        if side == "join":
            _join([decisions], log, out_df, out_invalid, "posterior")
            return
        t0 = time.perf_counter()
        rel = dj.relations(log, out_df)
        if timings is not None:
            timings["relations"] = time.perf_counter() - t0
        con = dj.connect()
        try:
            dj.run_join(con, rel, timings=timings)
        finally:
            con.close()

    examples = ROOT / "data" / "examples" / "logs"
    small, _, _ = read_with_outcomes([examples / "decisions.jsonl"], None, on_corrupt="raise")
    run(small, examples / "outcomes.csv", None)
    log = read_uses([decisions], on_corrupt="raise")
    timings: dict[str, float] = {}
    peak = _Peak()
    t0, c0 = time.perf_counter(), _cpu()
    run(log, outcomes, timings)
    seconds, cpu = time.perf_counter() - t0, _cpu() - c0
    peak.stop()
    return {"seconds": seconds, "cpu_seconds": cpu, "peak_mib": peak.peak / 2**20,
            "peak_above_start_mib": (peak.peak - peak.start) / 2**20, "steps": timings}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--data-dir", type=Path, help="folder with decisions.jsonl, outcomes.csv")
    ap.add_argument("--lines", type=int, default=1_000_000)
    ap.add_argument("--outcome-records", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--out", type=Path, help="also write the figures here (JSON)")
    ap.add_argument("--side", choices=("join", "sql"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="amv-calib-sqljoin-") as tmp:
        folder = args.data_dir
        if folder is None:
            sys.path.insert(0, str(ROOT / "bench"))
            from bench_labels import make_data

            folder = Path(tmp)
            make_data(folder, args.lines, args.outcome_records, seed=7)
        decisions, outcomes = str(folder / "decisions.jsonl"), str(folder / "outcomes.csv")
        if args.side:
            print(json.dumps(_side(args.side, decisions, outcomes)))
            return 0
        runs: dict[str, list[dict[str, Any]]] = {"join": [], "sql": []}
        for _ in range(args.rounds):
            for side in runs:
                done = subprocess.run(
                    [sys.executable, __file__, "--side", side, "--data-dir", str(folder)],
                    check=True, capture_output=True, text=True)
                runs[side].append(json.loads(done.stdout.splitlines()[-1]))
    best = {side: min(r, key=lambda x: x["seconds"]) for side, r in runs.items()}
    peak = {side: min(x["peak_mib"] for x in r) for side, r in runs.items()}
    n, s = best["join"], best["sql"]
    cpu = {side: min(x["cpu_seconds"] for x in r) for side, r in runs.items()}
    print(f"{'side':<8}{'seconds':>10}{'cpu s':>8}{'peak MiB':>10}{'above start':>13}")
    for side, x in best.items():
        print(f"{side:<8}{x['seconds']:>10.3f}{cpu[side]:>8.3f}{peak[side]:>10.0f}"
              f"{x['peak_above_start_mib']:>13.0f}")
    print(f"sql / join: time {s['seconds'] / n['seconds']:.2f}x, "
          f"cpu {cpu['sql'] / cpu['join']:.2f}x, "
          f"peak memory {peak['sql'] / peak['join']:.2f}x")
    print("SQL steps (fastest round), seconds:")
    for step, sec in sorted(s["steps"].items(), key=lambda kv: -kv[1]):
        print(f"  {step:<16}{sec:8.3f}")
    if args.out:
        args.out.write_text(json.dumps({"runs": runs, "best": best}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
