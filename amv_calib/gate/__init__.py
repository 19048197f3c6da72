"""The AMV runtime gate: PROCEED, VERIFY or ABSTAIN before an irreversible tool call.

Imports numpy and the standard library only. ``load_artifact``, ``LoadedArtifact`` and
``gate_from_artifact`` are loaded lazily from :mod:`amv_calib.gate._artifact`.
"""

from __future__ import annotations

import importlib
from typing import Any

from amv_calib.gate._engine import (
    REGIME_CODES,
    VOI_TOLERANCE,
    Decision,
    Gate,
    Mode,
    Planner,
    Regime,
    RunStep,
    RunTrace,
    StoppingValue,
    UncalibratedPremiseError,
    posterior_confirm,
    posterior_refute,
    seed_calibrate,
    update_posteriors,
)
from amv_calib.gate._model import CandidateAction, DependencyType, MemoryClaim, Premise, Verifier
from amv_calib.gate._planner import MAX_EXACT_VERIFIERS, MAX_WORK

_LAZY: dict[str, str] = {
    "load_artifact": "amv_calib.gate._artifact",
    "LoadedArtifact": "amv_calib.gate._artifact",
    "gate_from_artifact": "amv_calib.gate._artifact",
}

__all__ = [
    "MAX_EXACT_VERIFIERS",
    "MAX_WORK",
    "REGIME_CODES",
    "VOI_TOLERANCE",
    "CandidateAction",
    "Decision",
    "DependencyType",
    "Gate",
    "MemoryClaim",
    "Mode",
    "Planner",
    "Premise",
    "Regime",
    "RunStep",
    "RunTrace",
    "StoppingValue",
    "UncalibratedPremiseError",
    "Verifier",
    "posterior_confirm",
    "posterior_refute",
    "seed_calibrate",
    "update_posteriors",
    *_LAZY,
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'amv_calib.gate' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
