"""The contract shared by training and the runtime gate: numpy and the standard library only.

The claim columns and their aliases (``_schema``), the closed feature vocabulary, the
portable calibrator and the one sigmoid (``_features``), the ``log``, ``log1p`` and ``exp``
every language evaluates a claim with (``_portable_math``), the artifact format with its
loader (``_artifact``, ``_folder``, ``_signature``), the decision log's format and reader
(``_decision_log``), and the two rules for reading anything from outside: strict JSON
(``_json``) and regular files only (``_files``).
Training writes what this package defines; the gate reads it without importing anything else.
The gate writes decision logs in the format defined here, and training reads them with the
reader defined here, without importing the gate.
"""

from __future__ import annotations

from amv_calib.contract._artifact import (
    ALIASES_FILE,
    ALIASES_FORMAT,
    ALIASES_FORMAT_VERSION,
    ARTIFACT_FORMAT,
    ARTIFACT_FORMAT_VERSION,
    CALIBRATOR_FILE,
    GATE_KEYS,
    MANIFEST_FILE,
    LoadedArtifact,
    calibrator_sha256,
    canonical_json_bytes,
    check_certificate_binding,
    check_thresholds,
    gate_from_artifact,
    load_artifact,
    read_aliases,
    read_json_object,
    read_regular_bytes,
    resolve_reference,
    thresholds_sha256,
    unknown_alias_message,
    with_gate_clamp,
)
from amv_calib.contract._decision_log import (
    DECISION_ALIASES,
    OFFERED_VERIFIER_ALIASES,
    PREMISE_ALIASES,
    VERIFIER_CALL_ALIASES,
    DecisionLogWarning,
    LogReadStats,
    decision_verifier_calls,
    encode_record,
    normalize_decision,
    parse_decision_line,
    read_decision_log,
    utc_now_iso,
)
from amv_calib.contract._features import (
    DEFAULT_EPS,
    MEMORY_KIND_FIELDS,
    MEMORY_KIND_PROBLEMS,
    PORTABLE_FORMAT,
    PORTABLE_FORMAT_VERSION,
    SEED_CLAMP,
    SEED_COEF,
    SEED_FEATURE_MAP,
    SEED_INTERCEPT,
    TRANSFORMS,
    FeatureMap,
    MemoryKindError,
    PortableCalibrator,
    Term,
    Transform,
    as_feature_frame,
    check_memory_kind,
    premise_memory_kind,
    seed_prior_calibrator,
    sigmoid,
)
from amv_calib.contract._features import MAX_KIND_LENGTH as _MAX_KIND_LENGTH
from amv_calib.contract._files import (
    file_kind,
    open_regular,
    read_regular,
    read_toml,
    require_regular,
)
from amv_calib.contract._json import (
    DuplicateKeyError,
    loads_line,
    loads_strict,
    lone_surrogate,
    surrogate_message,
)
from amv_calib.contract._portable_math import portable_exp, portable_log, portable_log1p
from amv_calib.contract._schema import (
    ALIASES,
    CLAIM_FEATURES,
    OPTIONAL_COLUMNS,
    REQUIRED_COLUMNS,
    canonical_name,
)
from amv_calib.contract._signature import SIGNATURE_FILE, verify_signature

#: Longest ``memory_kind`` a claim, a premise or a calibrator's vocabulary may name (one
#: number, read from ``artifact_rules.json``).
MEMORY_KIND_MAX_CHARS: int = _MAX_KIND_LENGTH

__all__ = [
    "DuplicateKeyError",
    "SIGNATURE_FILE",
    "file_kind",
    "loads_line",
    "loads_strict",
    "lone_surrogate",
    "surrogate_message",
    "open_regular",
    "read_regular",
    "read_toml",
    "require_regular",
    "verify_signature",
    "DEFAULT_EPS",
    "ALIASES",
    "ALIASES_FILE",
    "ALIASES_FORMAT",
    "ALIASES_FORMAT_VERSION",
    "ARTIFACT_FORMAT",
    "ARTIFACT_FORMAT_VERSION",
    "CALIBRATOR_FILE",
    "CLAIM_FEATURES",
    "GATE_KEYS",
    "MANIFEST_FILE",
    "MEMORY_KIND_FIELDS",
    "MEMORY_KIND_MAX_CHARS",
    "MEMORY_KIND_PROBLEMS",
    "MemoryKindError",
    "OPTIONAL_COLUMNS",
    "PORTABLE_FORMAT",
    "PORTABLE_FORMAT_VERSION",
    "REQUIRED_COLUMNS",
    "SEED_CLAMP",
    "SEED_COEF",
    "SEED_FEATURE_MAP",
    "SEED_INTERCEPT",
    "TRANSFORMS",
    "FeatureMap",
    "LoadedArtifact",
    "PortableCalibrator",
    "Term",
    "Transform",
    "as_feature_frame",
    "calibrator_sha256",
    "canonical_json_bytes",
    "canonical_name",
    "check_memory_kind",
    "check_certificate_binding",
    "check_thresholds",
    "gate_from_artifact",
    "load_artifact",
    "premise_memory_kind",
    "read_aliases",
    "read_json_object",
    "read_regular_bytes",
    "resolve_reference",
    "portable_exp",
    "portable_log",
    "portable_log1p",
    "seed_prior_calibrator",
    "sigmoid",
    "thresholds_sha256",
    "unknown_alias_message",
    "with_gate_clamp",
    # the decision log's format and reader
    "DECISION_ALIASES", "OFFERED_VERIFIER_ALIASES", "PREMISE_ALIASES", "VERIFIER_CALL_ALIASES",
    "DecisionLogWarning", "LogReadStats", "decision_verifier_calls", "encode_record",
    "normalize_decision", "parse_decision_line", "read_decision_log", "utc_now_iso",
]
