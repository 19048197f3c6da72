"""The MLflow commands that are not stages: registry-promote and ui-command."""

from __future__ import annotations

import argparse
from typing import Any

from amv_calib.commands._parts import command, emit, json_option, tracking_uri_option
from amv_calib.stages import registered_json, registered_lines

__all__ = ["add_mlflow"]


def add_mlflow(subparsers: Any) -> None:
    """Add the ``registry-promote`` and ``ui-command`` sub-commands."""
    q = command(
        subparsers, "registry-promote", _run_registry_promote,
        help="move a registered MLflow model's alias to another version",
        description="Point ALIAS of registered model NAME at VERSION: a registry version "
                    "number (3), an artifact version (v3), or an artifact folder.",
    )
    q.add_argument("name", metavar="NAME", help="registered model name")
    q.add_argument("version", metavar="VERSION", help="registry version, vN or artifact folder")
    q.add_argument("--alias", default="champion", help="alias to move (default: champion)")
    tracking_uri_option(q)
    json_option(q, "print the result as one JSON object")

    u = command(
        subparsers, "ui-command", _run_ui_command,
        help="print the command that opens MLflow's UI on the tracked runs",
        description="Print the `mlflow ui` command for the tracking store (a local SQLite "
                    "store as an absolute path, so the command works from any folder), or "
                    "the address of a tracking server.",
    )
    tracking_uri_option(u)
    u.add_argument("--port", type=int, default=5000, help="port for the UI (default: 5000)")


def _run_registry_promote(args: argparse.Namespace) -> int:
    from amv_calib.tracking import registry_promote

    result = registry_promote(args.version, args.alias, registered_name=args.name,
                                       tracking_uri=args.tracking_uri)
    emit(args, registered_json(result), registered_lines(result, "promoted"))
    return 0


def _run_ui_command(args: argparse.Namespace) -> int:
    from amv_calib.settings import ui_command

    print(ui_command(args.tracking_uri, port=args.port))
    return 0
