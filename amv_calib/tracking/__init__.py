"""MLflow: the pipeline tracker, the registry, and the servable pyfunc gate model.

Importing this package imports MLflow; the runtime gate and the CLI parser never do.
"""

from __future__ import annotations

from amv_calib.tracking._pyfunc import (
    ARTIFACT_KEY,
    DECISION_COLUMNS,
    GateModel,
    input_example,
    model_signature,
    pip_requirements,
)
from amv_calib.tracking._registry import (
    MODEL_ARTIFACT_KEY,
    MODEL_NAME,
    REGISTRY_ALIASES,
    RegisteredVersion,
    describe_registry_aliases,
    registry_promote,
    sync_registry_aliases,
)
from amv_calib.tracking._store import DEFAULT_EXPERIMENT, ensure_tracking_db, resolve_tracking_uri
from amv_calib.tracking._tracker import (
    PipelineTracker,
    log_artifact_export,
    log_comparison,
    log_replay,
    log_tuning,
    pipeline_run,
    register_champion,
)
from amv_calib.tracking._values import trials_figure

__all__ = [
    "REGISTRY_ALIASES",
    "sync_registry_aliases",
    "describe_registry_aliases",
    "ARTIFACT_KEY",
    "DECISION_COLUMNS",
    "DEFAULT_EXPERIMENT",
    "MODEL_ARTIFACT_KEY",
    "MODEL_NAME",
    "GateModel",
    "PipelineTracker",
    "RegisteredVersion",
    "ensure_tracking_db",
    "input_example",
    "log_artifact_export",
    "log_comparison",
    "log_replay",
    "log_tuning",
    "model_signature",
    "pip_requirements",
    "pipeline_run",
    "register_champion",
    "registry_promote",
    "resolve_tracking_uri",
    "trials_figure",
]
