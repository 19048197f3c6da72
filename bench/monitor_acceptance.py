"""The shipped gate in its own simulated production, monitored weekly: does an ALERT mean
danger?

Per seed: ``amv-calib synth logs --n 9000 --true-reliability R`` (the shipped champion's
gate deciding, its first decision at midnight UTC after the version went live, an action
every 15 minutes: about 94 days), then ``monitor`` of ``models/amv-guard@production`` run
at the end of every simulated week on the files as they had grown by then (the decisions
dated before it, the outcomes arrived by it), incremental from its state. Reported per
seed: the worst status of the weekly runs and the final one, the ALERT reasons' subjects,
the harm since go-live, and the mean p of the labelled uses against their observed rate.

``--too-low X`` makes the world where p is ``X`` too low on average: the same actions
(``synth_episodes`` of the seed), each premise that is valid turned stale with probability
``(mean_p + X - rate) / (1 - rate)`` before the gate decides (seeded; ``mean_p``: the mean
p the gate logs for the premises, read from the as-declared run of the seed, since p
depends on the features only; ``rate``: the premises' stale share), so that the stale share
of every premise the gate decided on is about ``mean_p + X``. The verifiers answer on the
new truth and the outcomes report it. Per seed the gap is measured three ways and
printed: over every logged premise (the truth), over the outcome records that name a
claim, and as the monitor sees it (its labelled uses: an action-level outcome labels the
premise of a one-premise action and no premise of a multi-premise one, whatever it says,
so that which premises are labelled does not depend on their truth).

    .venv/bin/python bench/monitor_acceptance.py --seeds 1-10 [--too-low 0.02] [--json]
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import io
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


def _logged(decisions: Path) -> dict[tuple[str, str], float]:
    """p of every logged premise by ``(action_id, claim_id)``."""
    out = {}
    with open(decisions, encoding="utf-8") as fh:
        for line in fh:
            rec = json.loads(line)
            for q in rec["premises"]:
                out[(rec["action_id"], q["claim_id"])] = float(q["p"])
    return out


def _staler_world(src: Path, n: int, seed: int, reliability: float, shift: float,
                  mean_p: float) -> float:
    """Simulate the seed's production again with premises staler than p says by about
    ``shift`` on average (module docstring); return the stale share of the premises."""
    from unittest import mock

    from amv_calib.commands._synth import _synth_start
    from amv_calib.datasets import _production
    from amv_calib.datasets._synth import synth_episodes

    episodes = synth_episodes(n, seed=seed)
    truth = [q["violated"] for ep in episodes for q in ep["premises"]]
    rate = float(np.mean(truth))
    flip = (mean_p + shift - rate) / (1.0 - rate)
    if not 0.0 <= flip <= 1.0:
        raise SystemExit(f"seed {seed}: no world is {shift} too low (stale share {rate:.4f},"
                         f" mean p {mean_p:.4f})")
    rng = np.random.default_rng([seed, 49])
    for ep in episodes:
        for q in ep["premises"]:
            if not q["violated"] and rng.random() < flip:
                q["violated"] = True

    def same_episodes(n_: int, *, seed: int) -> list[dict[str, Any]]:
        return episodes

    artifact = REPO / "models" / "amv-guard" / "v1"
    start = _synth_start(str(artifact), None)
    # the gate decides on the staler truth: the verifiers see it, the outcomes report it
    with mock.patch.object(_production, "synth_episodes", same_episodes):
        _production.simulate_production(artifact, src, n_actions=n, seed=seed,
                                        true_reliability=reliability, start=start)
    return float(np.mean([q["violated"] for ep in episodes for q in ep["premises"]]))


def _gaps(src: Path, truth_rate: float | None) -> dict[str, float | None]:
    """Observed stale share minus mean p: over every logged premise (``truth_rate``
    given), and over the outcome records naming a claim."""
    p = _logged(src / "decisions.jsonl")
    with open(src / "outcomes.csv", encoding="utf-8", newline="") as fh:
        rows = [r for r in csv.DictReader(fh) if r["claim_id"]]
    pp = np.array([p[(r["action_id"], r["claim_id"])] for r in rows])
    yy = np.array([r["violated"] == "true" for r in rows], dtype=np.float64)
    mean_p = float(np.mean(list(p.values())))
    return {"gap_truth": None if truth_rate is None else truth_rate - mean_p,
            "gap_claim_records": float(yy.mean() - pp.mean())}


def _alert_subjects(reasons: list[str]) -> list[str]:
    """What an ALERT's reasons name: ``harm`` and/or ``p too low``."""
    out = []
    if any(r.startswith("harm:") and "above the certified alpha" in r for r in reasons):
        out.append("harm")
    if any(r.startswith("calibration: p too low") and "harm ahead" in r for r in reasons):
        out.append("p too low")
    return out


def run_seed(seed: int, n: int, reliability: float, too_low: float, work: Path
             ) -> dict[str, Any]:
    """One simulated production, monitored weekly; its row of the table."""
    from amv_calib import cli
    from amv_calib.monitoring import monitor

    src = work / f"sim-{seed}"
    with contextlib.redirect_stdout(io.StringIO()):  # its summary is not the table's
        code = cli.main(["-q", "synth", "logs", "--n", str(n), "--seed", str(seed),
                         "--true-reliability", str(reliability), "--artifact",
                         str(REPO / "models" / "amv-guard" / "v1"), "--out", str(src)])
    if code:
        raise SystemExit(f"synth logs exited {code}")
    truth = None
    if too_low:
        mean_p = float(np.mean(list(_logged(src / "decisions.jsonl").values())))
        src = work / f"sim-{seed}-too-low"
        truth = _staler_world(src, n, seed, reliability, too_low, mean_p)
    gaps = _gaps(src, truth)
    lines = (src / "decisions.jsonl").read_bytes().splitlines(keepends=True)
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
    first_subjects: list[str] = []
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
            now = _alert_subjects(report.reasons)
            first_subjects = first_subjects or now
            alert_subjects.update(now)
        if at == len(times) and cut > end - _WEEK_US:
            break
    assert report is not None
    ev = report.evidence
    return {"seed": seed, "weekly_runs": week, "worst": worst, "final": report.status,
            "alert_on": sorted(alert_subjects),
            "first_alert_week_actions": first_alert, "first_alert_on": first_subjects,
            **gaps, "gap_monitor": ev["observed_rate"] - ev["mean_p"],
            "harm": ev["harm_rate"], "harm_cs": ev["harm_cs"],
            "labelled_actions": ev["labelled_actions"], "labelled_uses": ev["labelled_uses"],
            "mean_p": ev["mean_p"], "observed": ev["observed_rate"],
            "too_low_e": ev["in_the_large_e"], "too_high_e": ev["too_high_e"],
            "log_loss_e": ev["log_loss_e"]}


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:+.4f}"


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
                      f"{row['first_alert_week_actions']} on "
                      f"{','.join(row['first_alert_on']) or '-'}  gap (observed - mean p): "
                      f"truth {_fmt(row['gap_truth'])} claim records "
                      f"{row['gap_claim_records']:+.4f} monitor {row['gap_monitor']:+.4f}",
                      flush=True)
    alerts = sum(r["worst"] == "ALERT" for r in rows)
    print(f"runs with an ALERT: {alerts} of {len(rows)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
