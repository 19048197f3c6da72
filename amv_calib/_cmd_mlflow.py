"""``amv-calib register``, ``amv-calib registry-promote`` and ``amv-calib ui-command``.

The MLflow model registry side of shipping. (``amv-calib promote NAME vN --alias X`` moves
the *file* alias of an artifact folder; ``registry-promote`` moves a registered model's alias.)
MLflow is imported inside the commands only.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from amv_calib.settings import DEFAULT_REGISTERED_MODEL

__all__ = ["register", "ui_command"]

_URI_HELP = "MLflow tracking URI (default: $MLFLOW_TRACKING_URI, else sqlite:///mlflow.db)"


def register(subparsers: Any) -> None:
    """Add the ``register``, ``registry-promote`` and ``ui-command`` sub-commands."""
    p = subparsers.add_parser(
        "register",
        help="register an exported artifact as the servable MLflow gate model",
        description="Log ARTIFACT (a version folder models/NAME/vN, or models/NAME@ALIAS) as "
                    "an MLflow pyfunc model, register it and point an alias at it.",
    )
    p.add_argument("artifact", metavar="ARTIFACT", help="artifact version folder or reference")
    p.add_argument("--name", default=DEFAULT_REGISTERED_MODEL,
                   help=f"registered model name (default: {DEFAULT_REGISTERED_MODEL})")
    p.add_argument("--alias", default="champion", help="alias to set (default: champion); "
                   "'' sets none")
    p.add_argument("--experiment", default="amv-calib", help="MLflow experiment of the run")
    p.add_argument("--tracking-uri", default=None, help=_URI_HELP)
    p.add_argument("--json", action="store_true", help="print the result as one JSON object")
    p.set_defaults(func=_run_register)

    q = subparsers.add_parser(
        "registry-promote",
        help="move a registered MLflow model's alias to another version",
        description="Point ALIAS of registered model NAME at VERSION: a registry version "
                    "number (3), an artifact version (v3), or an artifact folder.",
    )
    q.add_argument("name", metavar="NAME", help="registered model name")
    q.add_argument("version", metavar="VERSION", help="registry version, vN or artifact folder")
    q.add_argument("--alias", default="champion", help="alias to move (default: champion)")
    q.add_argument("--tracking-uri", default=None, help=_URI_HELP)
    q.add_argument("--json", action="store_true", help="print the result as one JSON object")
    q.set_defaults(func=_run_promote)

    u = subparsers.add_parser(
        "ui-command",
        help="print the command that opens MLflow's UI on the tracked runs",
    )
    u.add_argument("--tracking-uri", default=None, help=_URI_HELP)
    u.add_argument("--port", type=int, default=5000, help="port for the UI (default: 5000)")
    u.set_defaults(func=_run_ui)


def _print(result: Any, as_json: bool, verb: str) -> None:
    if as_json:
        print(json.dumps({
            "name": result.name, "version": result.version, "alias": result.alias,
            "model_uri": result.model_uri, "run_id": result.run_id,
            "artifact_name": result.artifact_name, "artifact_version": result.artifact_version,
            "artifact_sha256": result.artifact_sha256,
        }, sort_keys=True))
        return
    alias = f" @{result.alias}" if result.alias else ""
    print(f"{verb} {result.name} version {result.version}{alias} "
          f"(artifact {result.artifact_name} {result.artifact_version}, "
          f"manifest sha256 {result.artifact_sha256[:12]})")
    print(f"model URI: {result.model_uri}")


def _run_register(args: argparse.Namespace) -> int:
    from amv_calib import tracking

    result = tracking.register_champion(
        args.artifact, registered_name=args.name, alias=args.alias or None,
        tracking_uri=args.tracking_uri, experiment=args.experiment)
    _print(result, args.json, "registered")
    return 0


def _run_promote(args: argparse.Namespace) -> int:
    from amv_calib import tracking

    result = tracking.registry_promote(args.version, args.alias, registered_name=args.name,
                                       tracking_uri=args.tracking_uri)
    _print(result, args.json, "promoted")
    return 0


def ui_command(tracking_uri: str | None = None, *, port: int = 5000) -> str:
    """The shell command that opens MLflow's UI on the tracked runs (no MLflow import)."""
    from amv_calib.settings import tracking_uri as default_uri

    uri = tracking_uri or default_uri()
    if uri.startswith(("http://", "https://")):
        return f"open {uri} in a browser (the tracking server serves the UI)"
    return f"mlflow ui --backend-store-uri {uri} --host 127.0.0.1 --port {port}"


def _run_ui(args: argparse.Namespace) -> int:
    print(ui_command(args.tracking_uri, port=args.port))
    return 0
