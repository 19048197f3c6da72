"""``amv-calib run PIPELINE.toml``: run a declarative pipeline."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

__all__ = ["register"]


def register(sub: Any) -> None:
    """Add the ``run`` sub-command."""
    p: argparse.ArgumentParser = sub.add_parser(
        "run", help="run a pipeline file (pipelines/retrain.toml, tune.toml, evaluate.toml)",
        description="Run the steps of a pipeline file in order; unchanged steps are skipped.")
    p.add_argument("pipeline", help="the pipeline TOML file")
    p.add_argument("--set", dest="overrides", action="append", default=[],
                   metavar="STEP.KEY=VALUE",
                   help="override a parameter, e.g. --set tune.trials=20 (repeatable)")
    p.add_argument("--force", action="store_true", help="re-run steps even if unchanged")
    p.add_argument("--no-tracking", action="store_true", help="run without MLflow")
    p.add_argument("--tracking-uri", default=None, help="MLflow tracking URI")
    p.add_argument("--json", action="store_true", help="print a JSON summary on stdout")
    p.add_argument("-q", "--quiet", action="store_true", default=argparse.SUPPRESS,
                   help="no progress on stderr, no report on stdout")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run the pipeline and print its summary."""
    from amv_calib._report import pipeline_report
    from amv_calib.pipeline import load_pipeline, run_pipeline

    spec = load_pipeline(args.pipeline, args.overrides)
    result = run_pipeline(spec, force=args.force,
                          tracking=False if args.no_tracking else None,
                          tracking_uri=args.tracking_uri)
    if args.json:
        json.dump(result.to_json(), sys.stdout, sort_keys=True)
        sys.stdout.write("\n")
    elif not getattr(args, "quiet", False):
        sys.stdout.write(pipeline_report(result))
    return 0
