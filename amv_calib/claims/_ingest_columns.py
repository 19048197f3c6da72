"""The data contract's columns as ingestion reads them, and which input column spells each.

Each column's kind, bounds and Arrow type (``_SPECS``, ``_ARROW_TYPES``), and the resolution of
an input's column names to them. A module of its own because the readers (which check the
header before reading any row), the column parsers and chunk validation all go by it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Literal

import pyarrow as pa

from amv_calib.claims._times import UTC_US as _UTC_US
from amv_calib.contract import ALIASES, OPTIONAL_COLUMNS, REQUIRED_COLUMNS
from amv_calib.exceptions import DataContractError, MissingColumnsError

_Kind = Literal["id", "timestamp", "float", "bool", "str", "kind"]


@dataclass(frozen=True, kw_only=True)
class _Spec:
    kind: _Kind
    required: bool
    lo: float = -math.inf
    hi: float = math.inf


#: The columns ``label`` writes beside the data contract's: where each labelled use came from
#: (its decision-log line, premise, use and label source). Ingest knows them: they are not
#: calibration inputs, so they are left out of the claims table without a warning.
LABEL_COLUMNS: Final[frozenset[str]] = frozenset({
    "premise_id", "use_id", "label_source", "signal_llr", "p_logged", "calibrator", "regime",
    "decision_file", "decision_line"})

_SPECS: Final[dict[str, _Spec]] = {
    "claim_id": _Spec(kind="id", required=True),
    "timestamp": _Spec(kind="timestamp", required=True),
    "recency_hours": _Spec(kind="float", required=True, lo=0.0),
    "source_trust_score": _Spec(kind="float", required=True, lo=0.0, hi=1.0),
    "model_confidence": _Spec(kind="float", required=True, lo=0.0, hi=1.0),
    "contradiction_flag": _Spec(kind="bool", required=True),
    "violated": _Spec(kind="bool", required=True),
    "statement": _Spec(kind="str", required=False),
    "source": _Spec(kind="str", required=False),
    "tool_name": _Spec(kind="str", required=False),
    "family": _Spec(kind="str", required=False),
    "action_id": _Spec(kind="str", required=False),
    "p_true": _Spec(kind="float", required=False, lo=0.0, hi=1.0),
    "label_weight": _Spec(kind="float", required=False, lo=0.0),
    "defaulted_features": _Spec(kind="str", required=False),
    "memory_kind": _Spec(kind="kind", required=False),
}
assert set(_SPECS) == set(REQUIRED_COLUMNS) | set(OPTIONAL_COLUMNS)


_ARROW_TYPES: Final[dict[_Kind, pa.DataType]] = {
    "id": pa.large_string(),
    "timestamp": _UTC_US,
    "float": pa.float64(),
    "bool": pa.bool_(),
    "str": pa.large_string(),
    "kind": pa.large_string(),
}


# --------------------------------------------------------------------------------------
# column resolution


def _resolve_columns(columns: Sequence[str]) -> tuple[dict[str, str], list[str]]:
    """Map canonical name -> input column, and list the input columns left unused.

    The canonical spelling wins over an alias; among aliases, the order in ``ALIASES`` wins.
    Other spellings of the same column count as unused unless they fill a row whose
    preferred spelling is empty (:func:`_merged_column`).

    Raises
    ------
    MissingColumnsError
        If a required column has no spelling among ``columns``.
    """
    present = set(columns)
    if len(present) != len(columns):
        dup = sorted({c for c in columns if list(columns).count(c) > 1})
        raise DataContractError(f"duplicate column names in the input: {', '.join(dup)}")
    spellings = _spellings(columns)
    mapping = {canonical: names[0] for canonical, names in spellings.items()}
    missing = [c for c in REQUIRED_COLUMNS if c not in mapping]
    if missing:
        parts = []
        for c in missing:
            aliases = ALIASES.get(c, ())
            parts.append(f"{c} (aliases: {', '.join(aliases)})" if aliases else c)
        raise MissingColumnsError(
            f"missing required columns: {'; '.join(parts)}; columns found: "
            f"{', '.join(columns) if columns else '(none)'}"
        )
    used = set(mapping.values())
    return mapping, [c for c in columns if c not in used]


def _spellings(columns: Sequence[str]) -> dict[str, tuple[str, ...]]:
    """Canonical name -> every spelling of it among ``columns``, in priority order.

    A table may spell one column two ways (``claim_id`` in some JSON lines, ``claimId`` in
    others): each row then takes its first non-null spelling (:func:`_merged_column`).
    """
    present = set(columns)
    out: dict[str, tuple[str, ...]] = {}
    for canonical in _SPECS:
        names = tuple(n for n in (canonical, *ALIASES.get(canonical, ())) if n in present)
        if names:
            out[canonical] = names
    return out
