"""The claim-outcome data contract: canonical column names, their aliases and meaning.

Standard library only, so the runtime gate can share these names without importing pandas.
"""

from __future__ import annotations

from typing import Final

#: The four raw claim features every calibrator reads, in canonical order. A plain array
#: handed to a calibrator has its columns in this order.
CLAIM_FEATURES: Final = (
    "recency_hours",
    "source_trust_score",
    "model_confidence",
    "contradiction_flag",
)

#: Columns a claim-outcome table must have.
REQUIRED_COLUMNS: Final = ("claim_id", "timestamp", *CLAIM_FEATURES, "violated")

#: Columns kept when present; ``p_true`` (synthetic truth) is never used for training.
OPTIONAL_COLUMNS: Final = (
    "statement",
    "source",
    "tool_name",
    "family",
    "action_id",
    "p_true",
    "label_weight",
    "defaulted_features",
    "memory_kind",
)

#: Accepted spellings of each canonical column (the seed's TypeScript gate writes camelCase).
ALIASES: Final[dict[str, tuple[str, ...]]] = {
    "claim_id": ("claimId", "id"),
    "timestamp": ("ts", "usedAt", "used_at"),
    "recency_hours": ("recencyHours",),
    "source_trust_score": ("sourceTrustScore",),
    "model_confidence": ("modelConfidence",),
    "contradiction_flag": ("contradictionFlag",),
    "violated": ("isViolated", "violation"),
    "tool_name": ("toolName",),
    "action_id": ("actionId",),
    "p_true": ("pTrue",),
    "label_weight": ("labelWeight",),
    "defaulted_features": ("defaultedFeatures",),
    "memory_kind": ("memoryKind",),
}


def canonical_name(name: str) -> str | None:
    """Return the canonical column for ``name`` (itself or an alias), or None if unknown."""
    if name in REQUIRED_COLUMNS or name in OPTIONAL_COLUMNS:
        return name
    for canonical, aliases in ALIASES.items():
        if name in aliases:
            return canonical
    return None
