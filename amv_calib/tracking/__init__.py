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
from amv_calib.tracking._tracker import (
    DEFAULT_EXPERIMENT,
    MODEL_ARTIFACT_KEY,
    MODEL_NAME,
    REGISTRY_ALIASES,
    PipelineTracker,
    RegisteredVersion,
    ensure_tracking_db,
    log_artifact_export,
    log_comparison,
    log_replay,
    log_tuning,
    pipeline_run,
    register_champion,
    registry_promote,
    resolve_tracking_uri,
    sync_registry_aliases,
    trials_figure,
)

__all__ = [
    "REGISTRY_ALIASES",
    "sync_registry_aliases",
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
