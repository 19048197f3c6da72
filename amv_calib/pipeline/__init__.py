"""Declarative TOML pipelines: the spec (``_spec``), the step kinds (``_steps``), the runner
(``_runner``), the report printed at the end (``_report``) and the run a monitor's ALERT
starts (``_on_alert``).
"""

from __future__ import annotations

from amv_calib.pipeline._on_alert import run_on_alert
from amv_calib.pipeline._report import pipeline_report
from amv_calib.pipeline._runner import load_pipeline, run_pipeline, step_kinds
from amv_calib.pipeline._spec import PipelineResult, PipelineSpec, StepResult

__all__ = [
    "PipelineResult",
    "PipelineSpec",
    "StepResult",
    "load_pipeline",
    "pipeline_report",
    "run_on_alert",
    "run_pipeline",
    "step_kinds",
]
