"""Learned staleness per memory kind against the field's hand-set decay rules, and a first
month from the shipped prior.

``--part kinds``: a world of this script's own (five kinds that age differently, none of
them the synthetic generator's defaults), ``--n`` claims (60,000): ``compare`` with its
defaults. Targets: the kind-aware champion's log loss above the oracle's (the true
probabilities) at most 0.6 %, and the champion better than the pooled champion and every
field rule by more than their bootstrap intervals (its excess log loss interval lies below
theirs, the intervals paired over the same resamples).

``--part prior``: ``compare --prior models/amv-guard/v1`` on 5,000 and on 60,000 claims of a
world unlike the sample (the same five-kind world, its kinds hidden), for each of ``--seeds``
(12-19): a table per seed and the count of seeds meeting each target. Targets, per seed: with
5,000 claims, the champion's excess log loss at most 0.5 %; with 60,000 no worse than without
the prior.

    .venv/bin/python bench/kinds_acceptance.py [--part kinds|prior|all] [--n 60000]
        [--seeds 12,13,14,15,16,17,18,19] [--check]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

from _bench import Target, at_most, finish, holds  # noqa: E402

from amv_calib.datasets import KindLaw, KindWorld, synth_kind_claims  # noqa: E402

#: Five kinds, each with its own age distribution and staleness law; the shared evidence
#: differs from the default world's too.
WORLD = KindWorld(
    kinds=(
        KindLaw(name="credential", weight=0.2, recency_median=200.0, recency_sigma=1.5,
                pi=0.6, scale=400.0, shape=1.1),
        KindLaw(name="location", weight=0.2, recency_median=900.0, recency_sigma=1.5,
                pi=0.45, scale=5000.0, shape=1.6),
        KindLaw(name="preference", weight=0.25, recency_median=2000.0, recency_sigma=1.5,
                pi=0.3, scale=15000.0, shape=0.9),
        KindLaw(name="project_status", weight=0.2, recency_median=300.0, recency_sigma=1.5,
                pi=0.8, scale=700.0, shape=2.0),
        KindLaw(name="relationship", weight=0.15, recency_median=3000.0, recency_sigma=1.5,
                pi=0.25, scale=40000.0, shape=1.0),
    ),
    wrong=0.04, conf_low=1.2, conf_high=0.35, trust_beta=(6.0, 2.0), conf_beta=(4.5, 1.5),
    contradiction_rate=0.08,
)
POOLED = ("platt", "beta", "isotonic")
SEED = 11


def _pct(v: float) -> str:
    return f"{100 * v:.2f}%"


def _table(result: Any) -> list[str]:
    lines = ["| calibrator | log loss [95% CI] | excess over oracle [95% CI] | relative |",
             "|---|---:|---:|---:|"]
    for r in result.table.to_dict(orient="records"):
        name = str(r["name"])
        tag = " (champion)" if r["champion"] else " (baseline)" if r.get("baseline") is True \
            else ""
        lines.append(
            f"| {name}{tag} | {r['log_loss']:.4f} [{r['log_loss_low']:.4f}, "
            f"{r['log_loss_high']:.4f}] | {r['excess_log_loss']:.5f} "
            f"[{r['excess_log_loss_low']:.5f}, {r['excess_log_loss_high']:.5f}] | "
            f"{_pct(r['excess_log_loss_rel'])} |")
    return lines


def part_kinds(n: int, n_boot: int, out: Path | None = None
               ) -> tuple[list[Target], dict[str, Any]]:
    from amv_calib.calibration import compare_calibrators, write_comparison
    from amv_calib.settings import FIELD_RULES

    claims = synth_kind_claims(n, seed=SEED, world=WORLD)
    t = time.perf_counter()
    result = compare_calibrators(claims, n_boot=n_boot)
    seconds = time.perf_counter() - t
    print(f"## Kinds: {n} claims, {len(WORLD.kinds)} kinds, compare in {seconds:.0f} s")
    print("\n".join(_table(result)))
    print(f"chosen by the folds: {json.dumps(result.config.get('chosen_by_folds', {}))}")
    if out is not None:
        write_comparison(result, out)
        print(f"wrote the comparison (kinds.md, kinds_staleness.png, ...) to {out}")
        print((out / "kinds.md").read_text(encoding="utf-8"))
    table = result.table.set_index("name")
    champ = result.champion
    pooled = min(POOLED, key=lambda name: float(table.loc[name, "log_loss"]))
    high = float(table.loc[champ, "excess_log_loss_high"])
    targets = [
        holds(f"champion {champ} is kind-aware", champ.endswith("_kind")),
        at_most("kind-aware champion's excess log loss over the oracle",
                100 * float(table.loc[champ, "excess_log_loss_rel"]), 0.6, unit="%"),
    ]
    for other in (pooled, *FIELD_RULES):
        low = float(table.loc[other, "excess_log_loss_low"])
        targets.append(holds(f"champion beats {other} beyond the intervals ({high:.5f} < "
                             f"{low:.5f})", high < low))
    return targets, {"table": json.loads(result.table.to_json(orient="records")),
                     "champion": champ, "seconds": seconds}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--part", choices=("kinds", "prior", "all"), default="all")
    ap.add_argument("--n", type=int, default=60_000, help="claims of the kinds part")
    ap.add_argument("--n-boot", type=int, default=200)
    ap.add_argument("--seeds", default=None,
                    help="prior part: comma-separated seeds of the claims (default 12-19)")
    ap.add_argument("--json", type=Path, help="write the tables and targets here")
    ap.add_argument("--out", type=Path, help="kinds part: write the comparison folder here")
    ap.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    args = ap.parse_args(argv)
    targets: list[Target] = []
    report: dict[str, Any] = {}
    if args.part in ("kinds", "all"):
        got, report["kinds"] = part_kinds(args.n, args.n_boot, args.out)
        targets += got
    if args.part in ("prior", "all"):
        from kinds_prior import SEEDS, part_prior  # the prior part: bench/kinds_prior.py

        seeds = SEEDS if args.seeds is None else tuple(int(s) for s in args.seeds.split(","))
        got, report["prior"] = part_prior(WORLD, args.n_boot, seeds)
        targets += got
    if args.json:
        report["targets"] = [t.to_dict() for t in targets]
        args.json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return finish(targets, quick=False, check=args.check)


if __name__ == "__main__":
    raise SystemExit(main())
