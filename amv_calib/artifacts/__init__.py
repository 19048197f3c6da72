"""The export side of artifacts: export a version, promote or roll back an alias, bundle and
verify. The format and the loader the gate uses live in :mod:`amv_calib.contract`.
"""

from __future__ import annotations

from amv_calib.artifacts._aliases import promote, rollback
from amv_calib.artifacts._bundle import bundle, verify_artifact
from amv_calib.artifacts._export import (
    CLAIMS_FINGERPRINT_SCHEME,
    DEFAULT_THRESHOLDS,
    ExportResult,
    claims_fingerprint,
    export_artifact,
    list_versions,
)
from amv_calib.artifacts._profile import PROFILE_FILE, build_profile
from amv_calib.artifacts._promotion import (
    PromotionDecision,
    decide_promotion,
    describe_training_rate,
    paired_log_loss,
    training_violation_rate,
)
from amv_calib.artifacts._signing import (
    PRIVATE_KEY_FILE,
    PUBLIC_KEY_FILE,
    keygen,
    sign_artifact,
    signed_with,
)
from amv_calib.artifacts._unbundle import unbundle
from amv_calib.settings import PromoteOptions

__all__ = [
    "PROFILE_FILE",
    "build_profile",
    "PromoteOptions",
    "PromotionDecision",
    "decide_promotion",
    "describe_training_rate",
    "paired_log_loss",
    "training_violation_rate",
    "PRIVATE_KEY_FILE",
    "PUBLIC_KEY_FILE",
    "keygen",
    "sign_artifact",
    "signed_with",
    "CLAIMS_FINGERPRINT_SCHEME",
    "DEFAULT_THRESHOLDS",
    "ExportResult",
    "bundle",
    "claims_fingerprint",
    "export_artifact",
    "list_versions",
    "promote",
    "rollback",
    "unbundle",
    "verify_artifact",
]
