"""The ``amv-calib`` commands that are not stages: they have no pipeline step kind.

synth (synthetic data), the artifact commands (rollback, verify-artifact, keygen, sign,
bundle, unbundle), the MLflow commands (registry-promote, ui-command) and the gate's one
decision: each adds its parsers with an ``add_<group>`` function whose sub-commands point
at a ``_run_<command>`` function, which imports its libraries when it runs.
"""

from __future__ import annotations

from amv_calib.commands._artifacts import add_artifacts
from amv_calib.commands._gate import add_gate
from amv_calib.commands._mlflow import add_mlflow
from amv_calib.commands._parts import (
    URI_HELP,
    command,
    emit,
    json_option,
    print_json,
    tracking_uri_option,
)
from amv_calib.commands._synth import add_synth

#: The ``add_<group>(subparsers)`` functions of the commands that are not stages.
COMMANDS = (add_synth, add_artifacts, add_mlflow, add_gate)

__all__ = [
    "COMMANDS",
    "URI_HELP",
    "add_artifacts",
    "add_gate",
    "add_mlflow",
    "add_synth",
    "command",
    "emit",
    "json_option",
    "print_json",
    "tracking_uri_option",
]
