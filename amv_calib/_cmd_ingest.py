"""``amv-calib ingest INPUT --out DIR``: validate claim outcomes, quarantine bad rows.

Prints one JSON summary line on stdout; progress goes to stderr through logging.
"""

from __future__ import annotations

import argparse
import importlib
from pathlib import Path
from typing import Any

from amv_calib._exceptions import ConfigError
from amv_calib.ingest import ADAPTERS

__all__ = ["register", "resolve_adapter", "run"]


def register(subparsers: Any) -> None:
    """Add the ``ingest`` sub-command."""
    p = subparsers.add_parser(
        "ingest",
        help="validate claim outcomes into DIR/claims.parquet and DIR/rejects.csv",
        description=(
            "Read claim outcomes (CSV, Parquet, a directory of Parquet files, or JSONL), "
            "validate every row, write the accepted rows to DIR/claims.parquet and the "
            "rejected ones, each with its row number and reason, to DIR/rejects.csv. "
            "Prints one JSON line: read, accepted, rejected, rejected_by_reason, out. "
            "Exit code 2 if required columns are missing."
        ),
    )
    p.add_argument("input", metavar="INPUT", help="input file or Parquet directory")
    p.add_argument("--out", required=True, metavar="DIR", help="output directory")
    p.add_argument("--format", choices=("csv", "parquet", "jsonl"), default=None,
                   help="input format (default: from the file ending)")
    p.add_argument(
        "--adapter", default=None, metavar="NAME",
        choices=sorted(ADAPTERS) or None,
        help="read INPUT through an adapter that turns a memory-store export into claim "
             f"outcomes (available: {', '.join(sorted(ADAPTERS)) or 'none'})",
    )
    p.add_argument("--chunksize", type=int, default=None, metavar="ROWS",
                   help="rows validated at a time (default: 250000)")
    p.set_defaults(func=run)


def resolve_adapter(name: str) -> Any:
    """The adapter function registered as ``name`` in :data:`amv_calib.ingest.ADAPTERS`.

    Raises
    ------
    ConfigError
        If no adapter has that name, or its ``"module:function"`` cannot be imported.
    """
    target = ADAPTERS.get(name)
    if target is None:
        known = ", ".join(sorted(ADAPTERS)) or "none"
        raise ConfigError(f"adapter={name!r} is not registered (available: {known})")
    module, _, func = target.partition(":")
    try:
        return getattr(importlib.import_module(module), func)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"adapter {name!r} -> {target!r} cannot be loaded: {exc}") from exc


def run(args: argparse.Namespace) -> int:
    """Ingest ``args.input`` into ``args.out``; print the summary line."""
    from amv_calib.ingest import DEFAULT_CHUNKSIZE, ingest_file

    source: Any = args.input
    if args.adapter is not None:
        if args.format is not None:
            raise ConfigError("--format does not apply with --adapter (the adapter reads INPUT)")
        source = resolve_adapter(args.adapter)(Path(args.input))
    summary = ingest_file(source, args.out, format=args.format,
                          chunksize=args.chunksize or DEFAULT_CHUNKSIZE)
    print(summary.to_json(), flush=True)
    return 0
