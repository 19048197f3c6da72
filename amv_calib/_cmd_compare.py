"""``amv-calib compare CLAIMS --out DIR``: cross-validate the calibrators, pick a champion.

Writes the compare directory (see :func:`amv_calib.compare.write_comparison`); progress per
fold goes to stderr through logging; stdout gets the champion line, or with ``--json`` one
JSON object ``{"champion", "scoring", "calibrators": [...], "oracle"}``.
"""

from __future__ import annotations

import argparse
import json
import logging
from typing import Any

from amv_calib.settings import DEFAULT_SEED

__all__ = ["register", "run"]

_log = logging.getLogger("amv_calib.compare")


def register(subparsers: Any) -> None:
    """Add the ``compare`` sub-command."""
    from amv_calib.compare import CALIBRATOR_FACTORIES, DEFAULT_CALIBRATORS

    p = subparsers.add_parser(
        "compare",
        help="cross-validate Platt, Beta, isotonic and the seed prior; write DIR",
        description=(
            "Fit every calibrator on the same leakage-safe folds of CLAIMS (time-ordered "
            "blocks, or groups of claim_id), score the out-of-fold predictions (log loss, "
            "Brier, AUC, ECE equal-width and equal-mass, MCE, smooth ECE, bootstrap "
            "intervals), choose the champion by log loss (Brier breaks ties), refit all on "
            "every row and write DIR: comparison.csv/.md/.json, reliability.png, "
            "reliability_bins.csv, champion.json/.joblib, calibrators/<name>.json/.joblib. "
            "CLAIMS is claims.parquet from `amv-calib ingest`, or any CSV/Parquet/JSONL "
            "claim table (validated the same way). Exit code 2 on too little data."
        ),
    )
    p.add_argument("claims", metavar="CLAIMS", help="claim outcomes (claims.parquet, csv, jsonl)")
    p.add_argument("--out", required=True, metavar="DIR", help="output directory")
    p.add_argument("--folds", type=int, default=5, help="number of folds (default 5)")
    p.add_argument("--split", choices=("time", "group"), default="time",
                   help="time-ordered blocked folds (default) or GroupKFold by claim_id")
    p.add_argument("--scoring", choices=("log_loss", "brier"), default="log_loss",
                   help="proper scoring rule that picks the champion (default log_loss)")
    p.add_argument("--calibrators", default=",".join(DEFAULT_CALIBRATORS), metavar="NAMES",
                   help="comma-separated names from " + ", ".join(CALIBRATOR_FACTORIES)
                   + f" (default {','.join(DEFAULT_CALIBRATORS)})")
    p.add_argument("--n-boot", type=int, default=200, metavar="N",
                   help="bootstrap resamples for the intervals (default 200; 0 = none)")
    p.add_argument("--n-bins", type=int, default=15, metavar="B",
                   help="bins of the reliability curves (default 15)")
    p.add_argument("--seed", type=int, default=DEFAULT_SEED, help="bootstrap seed")
    p.add_argument("--weight-column", default=None, metavar="COL",
                   help="non-negative sample-weight column (for example label_weight)")
    p.add_argument("--allow-constant-features", action="store_true",
                   help="compare even if a claim feature is constant over all rows")
    p.add_argument("--json", action="store_true",
                   help="print one JSON object with the champion and each calibrator's metrics")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Compare the calibrators on ``args.claims`` and write ``args.out``."""
    from amv_calib._exceptions import ConfigError
    from amv_calib.compare import compare_calibrators, write_comparison
    from amv_calib.ingest import load_claims

    names = [n.strip() for n in str(args.calibrators).split(",") if n.strip()]
    if args.n_boot < 0:
        raise ConfigError(f"--n-boot={args.n_boot} must be >= 0")
    claims, rejects = load_claims(args.claims)
    if len(rejects):
        _log.warning(
            "%d of %d rows break the data contract and are left out "
            "(run `amv-calib ingest` to see them with their reasons)",
            len(rejects), len(claims) + len(rejects),
        )
    _log.info("comparing %s on %d rows", ", ".join(names), len(claims))
    try:
        result = compare_calibrators(
            claims,
            calibrators=names,
            folds=args.folds,
            split=args.split,
            scoring=args.scoring,
            tie_break="brier" if args.scoring == "log_loss" else "log_loss",
            n_bins=args.n_bins,
            n_boot=args.n_boot,
            seed=args.seed,
            sample_weight=args.weight_column,
            allow_constant_features=args.allow_constant_features,
        )
    except ValueError as exc:
        from amv_calib._exceptions import AmvCalibError

        if isinstance(exc, AmvCalibError):
            raise
        raise ConfigError(str(exc)) from exc
    write_comparison(result, args.out)
    if args.json:
        print(json.dumps(result.summary(), allow_nan=False), flush=True)
    else:
        row = result.table.set_index("name").loc[result.champion]
        print(
            f"champion: {result.champion} (log loss {row['log_loss']:.4f}, Brier "
            f"{row['brier']:.4f}, equal-mass ECE {row['ece_mass']:.4f}); wrote {args.out}",
            flush=True,
        )
    return 0
