"""The stages: each workflow written once, its command and its pipeline step made from it.

A :class:`Stage` holds a workflow's inputs, its options object, its run function (which
returns a result and prints nothing) and its summary for people. :mod:`amv_calib.cli` makes
each stage's ``amv-calib`` sub-command from it (:func:`add_command`), and
:mod:`amv_calib.pipeline` its step kind; :data:`STAGES` lists them in pipeline order.
"""

from __future__ import annotations

from amv_calib.stages._command import add_command, add_options, call_from, run_command, with_default
from amv_calib.stages._ingest import INGEST
from amv_calib.stages._promote import (
    PROMOTE,
    Promotion,
    alias_json,
    alias_lines,
    check_promotion,
    resolve_version,
    sync_registry,
)
from amv_calib.stages._stage import CLI_ONLY, NO_TRACKER, SHARED, Call, Input, Stage
from amv_calib.stages._text import compare_command, where

#: Every stage, in pipeline order: ``{name: Stage}``.
STAGES: dict[str, Stage] = {s.name: s for s in (INGEST, PROMOTE)}

__all__ = [
    "CLI_ONLY",
    "INGEST",
    "NO_TRACKER",
    "PROMOTE",
    "SHARED",
    "STAGES",
    "Call",
    "Input",
    "Promotion",
    "Stage",
    "add_command",
    "add_options",
    "alias_json",
    "alias_lines",
    "call_from",
    "check_promotion",
    "compare_command",
    "resolve_version",
    "run_command",
    "sync_registry",
    "where",
    "with_default",
]
