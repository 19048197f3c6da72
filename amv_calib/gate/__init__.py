"""The AMV runtime gate: PROCEED, VERIFY or ABSTAIN before an irreversible tool call.

Model (``_model``), scalar reference engine (``_engine``), planner (``_planner``), batch
engine (``_batch``), decision-log writer (``_decision_log``), outcome log (``_outcomes``) and
the gate that follows an alias (``_live``). Imports numpy and the standard library only; the
artifact loader and the decision log's format and reader come from :mod:`amv_calib.contract`
(re-exported here, so code that imports them from the gate keeps working).
"""

from __future__ import annotations

from amv_calib.contract import (
    DECISION_ALIASES,
    OFFERED_VERIFIER_ALIASES,
    PREMISE_ALIASES,
    VERIFIER_CALL_ALIASES,
    DecisionLogWarning,
    LoadedArtifact,
    LogReadStats,
    decision_verifier_calls,
    encode_record,
    gate_from_artifact,
    load_artifact,
    normalize_decision,
    parse_decision_line,
    read_decision_log,
    utc_now_iso,
)
from amv_calib.gate._batch import (
    ABSTAIN,
    PROCEED,
    REGIME_NAMES,
    VERIFY,
    BatchDecision,
    calibrate_batch,
    evaluate_batch,
    posterior_batch,
    stopping_value_batch,
    update_batch,
)
from amv_calib.gate._decision_log import DecisionLogWriter
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
from amv_calib.gate._live import LiveGate
from amv_calib.gate._model import (
    CandidateAction,
    DependencyType,
    GateSettings,
    MemoryClaim,
    Premise,
    Verifier,
)
from amv_calib.gate._outcomes import OutcomeLog
from amv_calib.gate._planner import MAX_EXACT_VERIFIERS, MAX_OUTCOMES, MAX_WORK

__all__ = [
    "MAX_EXACT_VERIFIERS",
    "MAX_OUTCOMES",
    "MAX_WORK",
    "REGIME_CODES",
    "VOI_TOLERANCE",
    "CandidateAction",
    "Decision",
    "DependencyType",
    "Gate",
    "GateSettings",
    "LiveGate",
    "MemoryClaim",
    "Mode",
    "OutcomeLog",
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
    "ABSTAIN", "PROCEED", "REGIME_NAMES", "VERIFY", "BatchDecision", "calibrate_batch",
    "evaluate_batch", "posterior_batch", "stopping_value_batch", "update_batch",
    "DECISION_ALIASES", "OFFERED_VERIFIER_ALIASES", "PREMISE_ALIASES",
    "VERIFIER_CALL_ALIASES", "DecisionLogWarning",
    "DecisionLogWriter", "LogReadStats", "decision_verifier_calls", "encode_record",
    "normalize_decision",
    "read_decision_log", "utc_now_iso", "parse_decision_line",
    "LoadedArtifact", "gate_from_artifact", "load_artifact",
]

