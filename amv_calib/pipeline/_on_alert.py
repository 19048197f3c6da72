"""A pipeline run on a monitor's ALERT: the ``pipeline`` hook the command line lends the
monitor stage (a stage does not import the pipeline)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from amv_calib.pipeline._report import pipeline_report
from amv_calib.pipeline._runner import load_pipeline, run_pipeline

__all__ = ["run_on_alert"]


def _log_overrides(pipeline: str, decisions: Sequence[str], outcomes: Sequence[str]
                   ) -> list[str]:
    """``--set`` overrides giving the logs to every monitor and label step of a pipeline."""
    out: list[str] = []
    for step in load_pipeline(pipeline).steps:
        if step.kind in ("monitor", "label"):
            for key, files in (("decisions", decisions), ("outcomes", outcomes)):
                out.append(f"{step.name}.{key}="
                           + json.dumps([str(Path(f).resolve()) for f in files]))
    return out


def run_on_alert(pipeline: str, decisions: Sequence[str], outcomes: Sequence[str],
                 overrides: Sequence[str], *, tracking: bool, tracking_uri: str | None
                 ) -> tuple[dict[str, Any], str]:
    """Run ``pipeline`` with the monitored logs as the decisions and outcomes of its monitor
    and label steps (then ``overrides``): its JSON summary and its report."""
    spec = load_pipeline(pipeline, [*_log_overrides(pipeline, decisions, outcomes),
                                    *overrides])
    result = run_pipeline(spec, tracking=None if tracking else False, tracking_uri=tracking_uri)
    return result.to_json(), pipeline_report(result)
