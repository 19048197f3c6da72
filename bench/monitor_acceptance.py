"""The shipped gate in its own simulated production, monitored weekly: does an ALERT mean
danger?

Per seed: ``amv-calib synth logs --n 9000 --true-reliability R`` (the shipped champion's
gate deciding, its first decision at midnight UTC after the version went live, an action
every 15 minutes: about 94 days), then ``monitor`` of ``models/amv-guard@production`` run
at the end of every simulated week on the files as they had grown by then (the decisions
dated before it, the outcomes arrived by it), incremental from its state. Reported per
seed: the worst status of the weekly runs and the final one, the ALERT reasons' subjects,
the harm since go-live, and the mean p of the labelled uses against their observed rate.

``--too-low X`` makes the world where p is ``X`` too low on average: every outcome record
that says valid is turned violated with probability ``(mean_p + X - rate) / (1 - rate)``
(``mean_p``: the mean p of the logged premises; ``rate``: the violated share of the outcome
records; seeded), after the gate decided, so that the observed rate is about ``mean_p +
X``.

    .venv/bin/python bench/monitor_acceptance.py --seeds 1-10 [--too-low 0.02] [--json]
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
_WEEK_US = 7 * 86_400_000_000


def _seeds(text: str) -> list[int]:
    if "-" in text:
        a, b = text.split("-")
        return list(range(int(a), int(b) + 1))
    return [int(x) for x in text.split(",")]


def _t_us(stamp: str) -> int:
    return int(np.datetime64(stamp.rstrip("Z"), "us").astype(np.int64))


def _make_too_low(outcomes: Path, mean_p: float, shift: float, seed: int) -> None:
    """Turn valid outcome records violated until the rate is about ``mean_p + shift``."""
    with open(outcomes, encoding="utf-8", newline="") as fh:
        rows = list(csv.reader(fh))
    head, body = rows[0], rows[1:]
    col = head.index("violated")
    rate = sum(r[col] == "true" for r in body) / len(body)
    rng = np.random.default_rng([seed, 49])
    flip = rng.random(len(body)) < (mean_p + shift - rate) / (1.0 - rate)
    for r, f in zip(body, flip, strict=True):
        if f and r[col] == "false":
            r[col] = "true"
    with open(outcomes, "w", encoding="utf-8", newline="") as fh:
        csv.writer(fh, lineterminator="\n").writerows([head, *body])


def run_seed(seed: int, n: int, reliability: float, too_low: float, work: Path
             ) -> dict[str, Any]:
    """One simulated production, monitored weekly; its row of the table."""
    from amv_calib import cli
    from amv_calib.monitoring import monitor

    src = work / f"sim-{seed}"
    code = cli.main(["-q", "synth", "logs", "--n", str(n), "--seed", str(seed),
                     "--true-reliability", str(reliability), "--out", str(src)])
    if code:
        raise SystemExit(f"synth logs exited {code}")
    lines = (src / "decisions.jsonl").read_bytes().splitlines(keepends=True)
    if too_low:
        ps = [q["p"] for x in lines for q in json.loads(x)["premises"]]
        _make_too_low(src / "outcomes.csv", float(np.mean(ps)), too_low, seed)
    times = [_t_us(json.loads(x)["time"]) for x in lines]
    with open(src / "outcomes.csv", encoding="utf-8", newline="") as fh:
        out_rows = list(csv.reader(fh))
    out_t = [_t_us(r[2]) for r in out_rows[1:]]
    live = work / f"live-{seed}"
    live.mkdir()
    dec, outc = live / "decisions.jsonl", live / "outcomes.csv"
    dec.write_bytes(b"")
    artifact = REPO / "models" / "amv-guard@production"
    t0 = times[0]
    end = max(times[-1], max(out_t)) + _WEEK_US
    at, week = 0, 0
    worst, alert_subjects, first_alert = "OK", set(), None
    rank = {"OK": 0, "INSUFFICIENT DATA": 0, "WARN": 1, "ALERT": 2}
    report = None
    while t0 + week * _WEEK_US < end:
        week += 1
        cut = t0 + week * _WEEK_US
        upto = at
        while upto < len(times) and times[upto] < cut:
            upto += 1
        with open(dec, "ab") as fh:
            fh.write(b"".join(lines[at:upto]))
        at = upto
        with open(outc, "w", encoding="utf-8", newline="") as fh:
            w = csv.writer(fh, lineterminator="\n")
            w.writerow(out_rows[0])
            w.writerows(r for r, t in zip(out_rows[1:], out_t, strict=True) if t <= cut)
        report, _ = monitor(str(artifact), [dec], [outc], state=live / "monitor.state")
        if rank[report.status] > rank[worst]:
            worst = report.status
        if report.status == "ALERT":
            first_alert = first_alert or (week, report.evidence["labelled_actions"])
            for r in report.reasons:
                if r.startswith("harm:") and "above the certified alpha" in r:
                    alert_subjects.add("harm")
                elif r.startswith("calibration: p too low") and "harm ahead" in r:
                    alert_subjects.add("p too low")
        if at == len(times) and cut > end - _WEEK_US:
            break
    assert report is not None
    ev = report.evidence
    return {"seed": seed, "weekly_runs": week, "worst": worst, "final": report.status,
            "alert_on": sorted(alert_subjects),
            "first_alert_week_actions": first_alert,
            "harm": ev["harm_rate"], "harm_cs": ev["harm_cs"],
            "labelled_actions": ev["labelled_actions"], "labelled_uses": ev["labelled_uses"],
            "mean_p": ev["mean_p"], "observed": ev["observed_rate"],
            "too_low_e": ev["in_the_large_e"], "too_high_e": ev["too_high_e"],
            "log_loss_e": ev["log_loss_e"]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", default="1-10")
    ap.add_argument("--n", type=int, default=9000)
    ap.add_argument("--true-reliability", type=float, default=0.95)
    ap.add_argument("--too-low", type=float, default=0.0)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in _seeds(args.seeds):
            row = run_seed(seed, args.n, args.true_reliability, args.too_low, Path(tmp))
            rows.append(row)
            if args.json:
                print(json.dumps(row), flush=True)
            else:
                print(f"seed {row['seed']:>3}  worst {row['worst']:<7} final "
                      f"{row['final']:<17} alert on {','.join(row['alert_on']) or '-':<14} "
                      f"harm {row['harm']:.4f} CS [{row['harm_cs'][0]:.4f}, "
                      f"{row['harm_cs'][1]:.4f}]  mean p {row['mean_p']:.4f} vs observed "
                      f"{row['observed']:.4f}  e(too low) {row['too_low_e']:.3g} "
                      f"e(too high) {row['too_high_e']:.3g} e(log loss) "
                      f"{row['log_loss_e']:.3g}  first ALERT (week, actions) "
                      f"{row['first_alert_week_actions']}", flush=True)
    alerts = sum(r["worst"] == "ALERT" for r in rows)
    print(f"runs with an ALERT: {alerts} of {len(rows)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
