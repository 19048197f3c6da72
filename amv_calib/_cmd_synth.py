"""``amv-calib synth claims|episodes --n N --seed S --out PATH``: synthetic data, known truth.

Prints one JSON line on stdout: what was written, how many rows, the seed and the file's
sha256 (the same seed gives the same bytes).
"""

from __future__ import annotations

import argparse
import hashlib
import json
from pathlib import Path
from typing import Any

from amv_calib.settings import DEFAULT_SEED

__all__ = ["register", "run"]

#: Sizes of the bundled sample files (data/sample/).
DEFAULT_N: dict[str, int] = {"claims": 20_000, "episodes": 3_520}


def register(subparsers: Any) -> None:
    """Add the ``synth`` sub-command with its ``claims`` and ``episodes`` kinds."""
    p = subparsers.add_parser(
        "synth",
        help="generate synthetic claim outcomes or action episodes with a known truth",
        description=(
            "Generate synthetic data from ten perturbation families (see data/README.md). "
            "claims: CSV, Parquet or JSONL by the ending of --out; episodes: JSONL. "
            "The same --seed gives the same bytes."
        ),
    )
    p.add_argument("kind", choices=("claims", "episodes"))
    p.add_argument("--n", type=int, default=None, metavar="N",
                   help="rows / instances (default: 20000 claims, 3520 episodes)")
    p.add_argument("--seed", type=int, default=DEFAULT_SEED,
                   help=f"random seed (default: {DEFAULT_SEED})")
    p.add_argument("--out", required=True, metavar="PATH", help="output file")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Generate and write; print the summary line."""
    from amv_calib import synth

    n = DEFAULT_N[args.kind] if args.n is None else args.n
    out = Path(args.out)
    if args.kind == "claims":
        path = synth.write_claims(synth.synth_claims(n, seed=args.seed), out)
    else:
        if out.suffix.lower() not in (".jsonl", ".ndjson"):
            from amv_calib._exceptions import ConfigError

            raise ConfigError(f"episodes are JSONL: --out {str(out)!r} must end in .jsonl")
        path = synth.write_episodes(synth.synth_episodes(n, seed=args.seed), out)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    print(json.dumps({"kind": args.kind, "n": n, "seed": args.seed, "out": str(path),
                      "sha256": digest}, separators=(",", ":")), flush=True)
    return 0
