"""amv-calib: calibrated memory-staleness probabilities and the runtime gate that uses them.

Public names are re-exported here lazily (PEP 562), so ``import amv_calib.gate`` pulls in
numpy and the standard library only, never scikit-learn, pandas, MLflow or Optuna.
"""

from __future__ import annotations

import importlib
from typing import Any

from amv_calib import exceptions as _exceptions

__version__ = "0.1.0"

# public name -> module that defines it
_EXPORTS: dict[str, str] = {
    **dict.fromkeys(_exceptions.__all__, "amv_calib.exceptions"),
    "IngestSummary": "amv_calib.claims",
    "ingest_file": "amv_calib.claims",
    "load_claims": "amv_calib.claims",
    "synth_claims": "amv_calib.datasets",
    "synth_episodes": "amv_calib.datasets",
    "ExportResult": "amv_calib.artifacts",
    "LoadedArtifact": "amv_calib.contract",
    "bundle": "amv_calib.artifacts",
    "export_artifact": "amv_calib.artifacts",
    "load_artifact": "amv_calib.contract",
    "promote": "amv_calib.artifacts",
    "rollback": "amv_calib.artifacts",
    "verify_artifact": "amv_calib.artifacts",
    "CandidateAction": "amv_calib.gate",
    "Decision": "amv_calib.gate",
    "Gate": "amv_calib.gate",
    "LiveGate": "amv_calib.gate",
    "OutcomeLog": "amv_calib.gate",
    "MemoryClaim": "amv_calib.gate",
    "Premise": "amv_calib.gate",
    "Verifier": "amv_calib.gate",
    "BetaCalibrator": "amv_calib.calibration",
    "IsotonicCalibrator": "amv_calib.calibration",
    "PlattCalibrator": "amv_calib.calibration",
    "SeedPriorCalibrator": "amv_calib.calibration",
    "ComparisonResult": "amv_calib.calibration",
    "compare_calibrators": "amv_calib.calibration",
    "write_comparison": "amv_calib.calibration",
    "FeatureMap": "amv_calib.contract",
    "PortableCalibrator": "amv_calib.contract",
    "Term": "amv_calib.contract",
    "BatchDecision": "amv_calib.gate",
    "EpisodeSet": "amv_calib.tuning",
    "ReplayResult": "amv_calib.tuning",
    "read_episodes": "amv_calib.tuning",
    "replay": "amv_calib.tuning",
    "TuneResult": "amv_calib.tuning",
    "transfer_check": "amv_calib.tuning",
    "tune_thresholds": "amv_calib.tuning",
    "JoinReport": "amv_calib.claims",
    "label_claims": "amv_calib.claims",
    "fit_noisy_labels": "amv_calib.claims",
    "mem0_history_to_claims": "amv_calib.claims",
    "graphiti_edges_to_claims": "amv_calib.claims",
    "PipelineTracker": "amv_calib.tracking",
    "ensure_tracking_db": "amv_calib.tracking",
    "pipeline_run": "amv_calib.tracking",
    "register_champion": "amv_calib.tracking",
    "registry_promote": "amv_calib.tracking",
}

__all__ = ["__version__", *_EXPORTS]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'amv_calib' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
