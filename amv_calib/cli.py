"""The ``amv-calib`` command line: one sub-command per pipeline stage.

Each stage lives in its own module exposing ``register(subparsers)``, which adds a parser
whose ``func`` runs the command. Modules import heavy libraries inside their ``func`` only,
so ``amv-calib --help`` and ``amv-calib gate`` start fast.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence

from amv_calib import __version__
from amv_calib._exceptions import AmvCalibError

__all__ = ["main"]

# One line per stage module; each defines ``register(subparsers) -> None``.
_COMMAND_MODULES: tuple[str, ...] = (
    "amv_calib._cmd_ingest",
    "amv_calib._cmd_synth",
    "amv_calib._cmd_artifacts",
    "amv_calib._cmd_mlflow",
    "amv_calib._cmd_label",
    "amv_calib._cmd_gate",
    "amv_calib._cmd_replay",
    "amv_calib._cmd_compare",
    "amv_calib._cmd_run",
)


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with every registered sub-command."""
    parser = argparse.ArgumentParser(
        prog="amv-calib",
        description="Calibrate memory-staleness probabilities and gate irreversible actions.",
    )
    parser.add_argument("--version", action="version", version=f"amv-calib {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging on stderr")
    parser.add_argument("-q", "--quiet", action="store_true", help="only errors on stderr")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in _COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the process exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    level = logging.DEBUG if args.verbose else logging.ERROR if args.quiet else logging.INFO
    logging.basicConfig(level=level, stream=sys.stderr, format="%(message)s")
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help(sys.stderr)
        return 2
    try:
        code = func(args)
    except AmvCalibError as exc:
        print(f"amv-calib {args.command}: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print(f"amv-calib {args.command}: interrupted", file=sys.stderr)
        return 130
    return int(code or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
