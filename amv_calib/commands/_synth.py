"""``synth``: synthetic claims, episodes or production logs with a known truth."""

from __future__ import annotations

import argparse
import datetime
import hashlib
from pathlib import Path
from typing import Any

from amv_calib.commands._parts import command, emit, seed_option
from amv_calib.exceptions import ConfigError
from amv_calib.settings import DEFAULT_SEED
from amv_calib.stages import where

__all__ = ["add_synth"]


#: Sizes of the bundled sample files (data/sample/).
_SYNTH_DEFAULT_N: dict[str, int] = {"claims": 20_000, "episodes": 3_520, "logs": 2_500}


def add_synth(subparsers: Any) -> None:
    """Add the ``synth`` sub-command with its ``claims`` and ``episodes`` kinds."""
    p = command(
        subparsers, "synth", _run_synth,
        help="generate synthetic claim outcomes or action episodes with a known truth",
        description=(
            "Generate synthetic data from ten perturbation families (see docs/data.md). "
            "claims: CSV, Parquet or JSONL by the ending of --out; episodes: JSONL; logs: "
            "the folder --out gets decisions.jsonl, written by the gate of --artifact running "
            "over synthetic actions with a verifier less reliable than declared, and "
            "outcomes.csv (data/examples/logs/ is made this way). "
            "The same --seed gives the same bytes."
        ),
    )
    p.add_argument("kind", choices=("claims", "episodes", "logs"),
                   help="claims: labelled claim outcomes; episodes: action episodes; logs: "
                   "a simulated production's decision log and outcomes")
    p.add_argument("--n", type=int, default=None, metavar="N",
                   help="rows / instances / actions (default: 20000 claims, 3520 episodes, "
                   "2500 actions)")
    p.add_argument("--artifact", default=None, metavar="REF",
                   help="logs: the artifact whose gate decides (default: the shipped "
                   "models/amv-guard/v1)")
    p.add_argument("--true-reliability", type=float, default=0.85, metavar="R",
                   help="logs: how often cache-api answers right (default 0.85)")
    p.add_argument("--declared-reliability", type=float, default=0.95, metavar="R",
                   help="logs: the reliability cache-api declares (default 0.95)")
    p.add_argument("--kinds", action="store_true",
                   help="claims: the world whose memory kinds age differently (a "
                   "memory_kind column; default: the ten families, no kinds)")
    p.add_argument("--start", default=None, metavar="TIME",
                   help="logs: time of the first decision, ISO-8601 (UTC when no offset; "
                   "default: midnight UTC after the artifact went live, so that "
                   "'amv-calib monitor' counts them)")
    seed_option(p, f"random seed (default: {DEFAULT_SEED})")
    p.add_argument("--out", required=True, metavar="PATH",
                   help="output file (a folder for logs)")


def _run_synth(args: argparse.Namespace) -> int:
    """Generate and write; print the summary line."""
    from amv_calib.datasets import synth_claims, synth_episodes, write_claims, write_episodes

    n = _SYNTH_DEFAULT_N[args.kind] if args.n is None else args.n
    out = Path(args.out)
    if args.kind == "logs":
        from amv_calib.datasets import simulate_production
        from amv_calib.settings import DEFAULT_MODEL_NAME, models_dir

        artifact = args.artifact or str(models_dir() / DEFAULT_MODEL_NAME / "v1")
        start = _synth_start(artifact, args.start)
        try:
            sim = simulate_production(artifact, out, n_actions=n, seed=args.seed,
                                      true_reliability=args.true_reliability,
                                      declared_reliability=args.declared_reliability,
                                      start=start)
        except ValueError as exc:  # an argument out of range: said as such, exit 2
            raise ConfigError(str(exc)) from None
        data = {"kind": "logs", "n": n, "seed": args.seed, "artifact": artifact,
                "start": start.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
                "answers": sim.answers, "outcome_records": sim.outcome_records,
                "sha256": {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
                           for p in (sim.decisions, sim.outcomes)}}
        emit(args, data, [
            f"simulated {n:,} actions of {artifact} (seed {args.seed}) from "
            f"{data['start']}: {sim.outcome_records:,} outcome records",
            f"  decisions: {where(sim.decisions)}", f"  outcomes:  {where(sim.outcomes)}",
            f"next: amv-calib label --decisions {sim.decisions} --outcomes {sim.outcomes} "
            "--out claims.parquet"])
        return 0
    if args.kinds and args.kind != "claims":
        raise ConfigError(f"--kinds is for synth claims, not synth {args.kind}")
    if args.kind == "claims":
        path = write_claims(synth_claims(n, seed=args.seed, kinds=args.kinds), out)
    else:
        if out.suffix.lower() not in (".jsonl", ".ndjson"):
            raise ConfigError(f"episodes are JSONL: --out {str(out)!r} must end in .jsonl")
        path = write_episodes(synth_episodes(n, seed=args.seed), out)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    emit(args, {"kind": args.kind, "n": n, "seed": args.seed, "out": str(path),
                 "sha256": digest},
          [f"wrote {n:,} synthetic {args.kind} (seed {args.seed}): {where(path)}",
           f"  sha256 {digest}"])
    return 0


def _synth_start(artifact: str, start: str | None) -> datetime.datetime:
    """``synth logs``' first decision: ``--start``, else midnight UTC after the artifact
    went live (the monitor counts only decisions since go-live)."""
    from amv_calib.monitoring import go_live, parse_since

    if start is not None:
        t_us = parse_since(start)
    else:
        from amv_calib.contract import load_artifact

        day_us = 86_400_000_000
        t_us = (parse_since(go_live(load_artifact(artifact))) // day_us + 1) * day_us
    return (datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
            + datetime.timedelta(microseconds=t_us))
