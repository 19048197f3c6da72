"""The stages: each workflow written once, its command and its pipeline step made from it.

A :class:`Stage` holds a workflow's inputs, its options object, its run function (which
returns a result and prints nothing) and its summary for people. :mod:`amv_calib.cli` makes
each stage's ``amv-calib`` sub-command from it (:func:`add_command`), and
:mod:`amv_calib.pipeline` its step kind; :data:`STAGES` lists them in pipeline order.
"""

from __future__ import annotations

from amv_calib.stages._certify import CERTIFY, Certified
from amv_calib.stages._command import (
    add_command,
    add_options,
    call_from,
    parse_option,
    run_command,
    with_default,
)
from amv_calib.stages._compare import COMPARE, Compared
from amv_calib.stages._export import EXPORT, Exported
from amv_calib.stages._ingest import INGEST
from amv_calib.stages._inputs import default_artifact, read_json
from amv_calib.stages._label import DECISIONS, LABEL, require_inputs
from amv_calib.stages._monitor import MONITOR, MONITOR_ALERT_EXIT, Monitored
from amv_calib.stages._promote import (
    PROMOTE,
    Promotion,
    alias_json,
    alias_lines,
    check_promotion,
    resolve_version,
    sync_registry,
)
from amv_calib.stages._register import REGISTER, Registered, registered_json, registered_lines
from amv_calib.stages._replay import REPLAY, Replayed
from amv_calib.stages._stage import CLI_ONLY, NO_TRACKER, SHARED, Call, Input, Stage
from amv_calib.stages._tables import gate_from, replay_n_boot, replay_table
from amv_calib.stages._text import compare_command, where
from amv_calib.stages._transfer import TRANSFER, Transferred
from amv_calib.stages._tune import EPISODES, TUNE, Tuned, quiet_optuna, study_of

#: Every stage, in pipeline order: ``{name: Stage}``.
STAGES: dict[str, Stage] = {s.name: s for s in (
    MONITOR, INGEST, LABEL, COMPARE, TUNE, TRANSFER, CERTIFY, EXPORT, PROMOTE, REGISTER,
    REPLAY)}

__all__ = [
    "CERTIFY",
    "CLI_ONLY",
    "COMPARE",
    "Compared",
    "DECISIONS",
    "EPISODES",
    "EXPORT",
    "Exported",
    "INGEST",
    "LABEL",
    "MONITOR",
    "MONITOR_ALERT_EXIT",
    "NO_TRACKER",
    "PROMOTE",
    "REGISTER",
    "REPLAY",
    "SHARED",
    "STAGES",
    "Call",
    "Certified",
    "Input",
    "Monitored",
    "Promotion",
    "Registered",
    "Replayed",
    "Stage",
    "TRANSFER",
    "TUNE",
    "Transferred",
    "Tuned",
    "add_command",
    "add_options",
    "alias_json",
    "alias_lines",
    "call_from",
    "check_promotion",
    "compare_command",
    "default_artifact",
    "gate_from",
    "parse_option",
    "quiet_optuna",
    "read_json",
    "registered_json",
    "replay_n_boot",
    "replay_table",
    "registered_lines",
    "require_inputs",
    "resolve_version",
    "run_command",
    "study_of",
    "sync_registry",
    "where",
    "with_default",
]
