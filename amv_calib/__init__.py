"""amv-calib: calibrated memory-staleness probabilities and the runtime gate that uses them.

Public names are re-exported here lazily (PEP 562), so ``import amv_calib.gate`` pulls in
numpy and the standard library only, never scikit-learn, pandas, MLflow or Optuna.
"""

from __future__ import annotations

import importlib
from typing import Any

from amv_calib._exceptions import (
    AmvCalibError,
    ArtifactError,
    ConfigError,
    DataContractError,
    InsufficientDataError,
    MissingColumnsError,
    PipelineError,
    PortableFormatError,
)

__version__ = "0.1.0"

# public name -> module that defines it
_EXPORTS: dict[str, str] = {
    "IngestSummary": "amv_calib.ingest",
    "ingest_file": "amv_calib.ingest",
    "load_claims": "amv_calib.ingest",
    "synth_claims": "amv_calib.synth",
    "synth_episodes": "amv_calib.synth",
    "ExportResult": "amv_calib.artifacts",
    "LoadedArtifact": "amv_calib.gate._artifact",
    "bundle": "amv_calib.artifacts",
    "export_artifact": "amv_calib.artifacts",
    "load_artifact": "amv_calib.gate._artifact",
    "promote": "amv_calib.artifacts",
    "rollback": "amv_calib.artifacts",
    "verify_artifact": "amv_calib.artifacts",
    "CandidateAction": "amv_calib.gate",
    "Decision": "amv_calib.gate",
    "Gate": "amv_calib.gate",
    "MemoryClaim": "amv_calib.gate",
    "Premise": "amv_calib.gate",
    "Verifier": "amv_calib.gate",
    "BetaCalibrator": "amv_calib.calibrators",
    "IsotonicCalibrator": "amv_calib.calibrators",
    "PlattCalibrator": "amv_calib.calibrators",
    "SeedPriorCalibrator": "amv_calib.calibrators",
    "ComparisonResult": "amv_calib.compare",
    "compare_calibrators": "amv_calib.compare",
    "write_comparison": "amv_calib.compare",
    "FeatureMap": "amv_calib.features",
    "PortableCalibrator": "amv_calib.features",
    "Term": "amv_calib.features",
    "BatchDecision": "amv_calib.gate._batch",
    "EpisodeSet": "amv_calib.replay",
    "ReplayResult": "amv_calib.replay",
    "read_episodes": "amv_calib.replay",
    "replay": "amv_calib.replay",
    "TuneResult": "amv_calib.tuning",
    "transfer_check": "amv_calib.tuning",
    "tune_thresholds": "amv_calib.tuning",
    "JoinReport": "amv_calib.labels",
    "label_claims": "amv_calib.labels",
    "fit_noisy_labels": "amv_calib.labels",
    "mem0_history_to_claims": "amv_calib.adapters",
    "graphiti_edges_to_claims": "amv_calib.adapters",
    "PipelineTracker": "amv_calib.tracking",
    "ensure_tracking_db": "amv_calib.tracking",
    "pipeline_run": "amv_calib.tracking",
    "register_champion": "amv_calib.tracking",
    "registry_promote": "amv_calib.tracking",
}

__all__ = [
    "AmvCalibError",
    "ArtifactError",
    "ConfigError",
    "DataContractError",
    "InsufficientDataError",
    "MissingColumnsError",
    "PipelineError",
    "PortableFormatError",
    "__version__",
    *_EXPORTS,
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'amv_calib' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
