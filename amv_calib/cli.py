"""The ``amv-calib`` command line: wiring only.

Every stage of :mod:`amv_calib.stages` (monitor, ingest, label, compare, tune, transfer,
certify, export, promote, register, replay) is a command made from its definition
(:func:`~amv_calib.stages.add_command`), as its pipeline step kind is. The commands that are
not stages, having no step kind, live in :mod:`amv_calib.commands` (synth, rollback,
verify-artifact, keygen, sign, bundle, unbundle, registry-promote, ui-command, gate); the
one written here is ``run``, which runs a pipeline. Commands import heavy libraries inside
their run function only, so ``amv-calib --help`` and ``amv-calib gate`` start fast (no
pandas, no MLflow). Results go to stdout (JSON where a script reads them), progress and
logs to stderr.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence
from typing import Any, Final

from amv_calib import __version__
from amv_calib.commands import COMMANDS, command, json_option, tracking_uri_option
from amv_calib.exceptions import AmvCalibError
from amv_calib.settings import set_process_env
from amv_calib.stages import MONITOR_ALERT_EXIT, STAGES, add_command, quiet_optuna

__all__ = ["MONITOR_ALERT_EXIT", "build_parser", "main"]


# -- run ---------------------------------------------------------------------------------------

def _parsers_run(sub: Any) -> None:
    """Add the ``run`` sub-command."""
    p = command(
        sub, "run", _run_run,
        help="run a pipeline file (pipelines/retrain.toml, tune.toml, evaluate.toml)",
        description="Run the steps of a pipeline file in order; unchanged steps are skipped.")
    p.add_argument("pipeline", help="the pipeline TOML file")
    p.add_argument("--set", dest="overrides", action="append", default=[],
                   metavar="STEP.KEY=VALUE",
                   help="override a parameter, e.g. --set tune.trials=20 (repeatable; default: "
                   "the file's values)")
    p.add_argument("--force", action="store_true", help="re-run steps even if unchanged")
    p.add_argument("--wait", nargs="?", const=True, default=False, type=float,
                   metavar="SECONDS",
                   help="when another run of this pipeline holds its work folder, wait for "
                   "it (at most SECONDS if given) instead of failing at once (default: fail "
                   "at once)")
    p.add_argument("--no-tracking", action="store_true", help="run without MLflow")
    tracking_uri_option(p, "MLflow tracking URI (default: the file's [pipeline] "
                         "tracking_uri, else $MLFLOW_TRACKING_URI, else sqlite:///mlflow.db)")
    json_option(p, "print a JSON summary on stdout")
    p.add_argument("-q", "--quiet", action="store_true", default=argparse.SUPPRESS,
                   help="no progress on stderr, no report on stdout")


def _run_run(args: argparse.Namespace) -> int:
    """Run the pipeline and print its summary."""
    from amv_calib.pipeline import load_pipeline, pipeline_report, run_pipeline

    spec = load_pipeline(args.pipeline, args.overrides)
    if any(s.kind == "tune" for s in spec.steps):
        quiet_optuna(args.verbose)
    result = run_pipeline(spec, force=args.force, wait=args.wait,
                          tracking=False if args.no_tracking else None,
                          tracking_uri=args.tracking_uri)
    if args.json:
        json.dump(result.to_json(), sys.stdout, sort_keys=True)
        sys.stdout.write("\n")
    elif not getattr(args, "quiet", False):
        sys.stdout.write(pipeline_report(result))
    return 0



# -- the entry point ------------------------------------------------------------------------

def _retrain(*args: Any, **kwargs: Any) -> Any:
    """The monitor's ``pipeline`` hook: :func:`amv_calib.pipeline.run_on_alert`."""
    from amv_calib.pipeline import run_on_alert

    return run_on_alert(*args, **kwargs)


#: What a stage's calls are lent that the stage may not import: ``{stage: hooks}``.
_HOOKS: Final = {"monitor": {"pipeline": _retrain}}


#: Commands whose output is already what a script reads and a person can read.
_NO_SUMMARY: Final = ("gate", "ui-command")


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with every sub-command."""
    parser = argparse.ArgumentParser(
        prog="amv-calib",
        description="Calibrate memory-staleness probabilities and gate irreversible actions.",
    )
    parser.add_argument("--version", action="version", version=f"amv-calib {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging on stderr")
    parser.add_argument("-q", "--quiet", action="store_true", help="only errors on stderr")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for stage in STAGES.values():
        add_command(sub, stage, _HOOKS.get(stage.name))
    for add in (*COMMANDS, _parsers_run):
        add(sub)
    # Every command prints a summary for a person, or with --json the full object; the
    # gate's product is its decision, JSON already, and ui-command's a shell command.
    for name, parser_of in sub.choices.items():
        if name not in _NO_SUMMARY and not any("--json" in a.option_strings
                                                 for a in parser_of._actions):
            json_option(parser_of)
    return parser


#: Libraries whose INFO lines would interleave with the commands' own progress.
_QUIET_LIBRARIES: Final = ("optuna", "mlflow", "alembic", "py4j", "numba", "matplotlib",
                           "urllib3", "httpx")


def _quiet_libraries() -> None:
    """Keep the libraries' logging at WARNING and up (``-v`` shows it all)."""
    for name in _QUIET_LIBRARIES:
        logging.getLogger(name).setLevel(logging.WARNING)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the process exit code."""
    set_process_env()
    parser = build_parser()
    args = parser.parse_args(argv)
    level = logging.DEBUG if args.verbose else logging.ERROR if args.quiet else logging.INFO
    logging.basicConfig(level=level, stream=sys.stderr, format="%(message)s")
    if not args.verbose:  # one progress display: the libraries' INFO lines only with -v
        _quiet_libraries()
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help(sys.stderr)
        return 2
    try:
        code = func(args)
    except AmvCalibError as exc:
        if args.verbose:  # the original traceback, through a wrapped step's cause
            import traceback

            traceback.print_exception(exc, file=sys.stderr)
        print(f"amv-calib {args.command}: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print(f"amv-calib {args.command}: interrupted", file=sys.stderr)
        return 130
    return int(code or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
