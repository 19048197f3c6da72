"""Artifact commands: ``export``, ``promote``, ``rollback``, ``verify-artifact``, ``bundle``.

Each prints one JSON object on stdout (logs go to stderr), so scripts can read the result.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from amv_calib.settings import DEFAULT_ALIAS

__all__ = ["register"]


def _print(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj, indent=2, sort_keys=True) + "\n")


def _models_dir_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--models-dir", metavar="DIR", default=None,
                   help="artifact root (default: $AMV_CALIB_MODELS_DIR or models/ in the checkout)")


def register(subparsers: Any) -> None:
    """Add the five artifact sub-commands."""
    p = subparsers.add_parser(
        "export", help="write a new artifact version models/NAME/vN",
        description="Export a fitted calibrator and gate thresholds as models/NAME/vN "
                    "(manifest.json, calibrator.json, calibrator.joblib, report files).")
    p.add_argument("--calibrator", required=True, metavar="FITTED",
                   help="a compare DIR, a portable champion.json, or a fitted .joblib")
    p.add_argument("--thresholds", metavar="TUNED", default=None,
                   help="thresholds.json from tuning (default: the seed's gate settings)")
    p.add_argument("--name", required=True, help="model name (folder under the models dir)")
    _models_dir_arg(p)
    p.add_argument("--claims", metavar="CLAIMS", default=None,
                   help="training claims (.parquet/.csv/.jsonl) for the data fingerprint")
    p.add_argument("--metrics", metavar="JSON", default=None,
                   help="a JSON object of extra metrics for the manifest")
    p.add_argument("--figure", metavar="FILE", action="append", default=[],
                   help="copy FILE into the artifact (repeatable)")
    p.add_argument("--no-joblib", action="store_true", help="leave calibrator.joblib out")
    p.add_argument("--promote", metavar="ALIAS", default=None,
                   help="also point ALIAS at the new version")
    p.set_defaults(func=_run_export)

    p = subparsers.add_parser(
        "promote", help="point an alias at a verified version",
        description="Verify models/NAME/VERSION and point ALIAS at it (atomic alias file).")
    p.add_argument("name", metavar="NAME")
    p.add_argument("version", metavar="VERSION", help="vN")
    p.add_argument("--alias", default=DEFAULT_ALIAS, help=f"default: {DEFAULT_ALIAS}")
    _models_dir_arg(p)
    p.set_defaults(func=_run_promote)

    p = subparsers.add_parser(
        "rollback", help="move an alias back to its previous version",
        description="Point ALIAS back at the version it named before the current one.")
    p.add_argument("name", metavar="NAME")
    p.add_argument("--alias", default=DEFAULT_ALIAS, help=f"default: {DEFAULT_ALIAS}")
    _models_dir_arg(p)
    p.set_defaults(func=_run_rollback)

    p = subparsers.add_parser(
        "verify-artifact", help="check an artifact as the gate would; print its summary",
        description="Check manifest, sha256 of every file and calibrator.json; print the "
                    "manifest summary as JSON. Exit 1 when the artifact is refused.")
    p.add_argument("path", metavar="PATH", help="models/NAME/vN or models/NAME@ALIAS")
    p.set_defaults(func=_run_verify)

    p = subparsers.add_parser(
        "bundle", help="write one version as a deterministic .tar.gz",
        description="Verify models/NAME/VERSION and write it as one reproducible .tar.gz "
                    "(extract with: tar -xzf FILE -C models).")
    p.add_argument("name", metavar="NAME")
    p.add_argument("version", metavar="VERSION", help="vN")
    p.add_argument("--out", metavar="FILE", default=None,
                   help="output file (default: NAME-VERSION.tar.gz)")
    _models_dir_arg(p)
    p.set_defaults(func=_run_bundle)


def _run_export(args: argparse.Namespace) -> int:
    from pathlib import Path

    from amv_calib._exceptions import ConfigError
    from amv_calib.artifacts import export_artifact, promote

    metrics = None
    if args.metrics:
        try:
            metrics = json.loads(Path(args.metrics).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ConfigError(f"{args.metrics}: cannot read metrics ({exc})") from None
        if not isinstance(metrics, dict):
            raise ConfigError(f"{args.metrics}: metrics must be a JSON object")
    res = export_artifact(
        calibrator=args.calibrator,
        thresholds=args.thresholds,
        name=args.name,
        models_dir=args.models_dir,
        claims=args.claims,
        metrics=metrics,
        figures=args.figure,
        include_joblib=not args.no_joblib,
    )
    out: dict[str, Any] = {"path": str(res.path), "name": res.name, "version": res.version}
    if args.promote:
        promote(res.name, res.version, alias=args.promote, models_dir=args.models_dir)
        out["alias"] = args.promote
    _print(out)
    return 0


def _run_promote(args: argparse.Namespace) -> int:
    from amv_calib.artifacts import promote

    entry = promote(args.name, args.version, alias=args.alias, models_dir=args.models_dir)
    _print({"name": args.name, "alias": args.alias, "version": entry["version"],
            "history": [h["version"] for h in entry["history"]]})
    return 0


def _run_rollback(args: argparse.Namespace) -> int:
    from amv_calib.artifacts import rollback

    entry = rollback(args.name, alias=args.alias, models_dir=args.models_dir)
    _print({"name": args.name, "alias": args.alias, "version": entry["version"],
            "history": [h["version"] for h in entry["history"]]})
    return 0


def _run_verify(args: argparse.Namespace) -> int:
    from amv_calib.artifacts import verify_artifact

    _print(verify_artifact(args.path))
    return 0


def _run_bundle(args: argparse.Namespace) -> int:
    import hashlib

    from amv_calib.artifacts import bundle

    path = bundle(args.name, args.version, args.out, models_dir=args.models_dir)
    _print({"bundle": str(path), "sha256": hashlib.sha256(path.read_bytes()).hexdigest()})
    return 0
