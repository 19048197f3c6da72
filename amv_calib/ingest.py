"""Ingestion of claim-outcome tables: validation, quarantine of bad rows, summaries.

The implementation lives in :mod:`amv_calib._ingest` and is imported on first use, so that
importing this module (the CLI does, for :data:`ADAPTERS`) costs no pandas or pyarrow.

Public API: :func:`load_claims`, :func:`ingest_file`, :func:`iter_claim_chunks`,
:class:`IngestSummary`, :func:`detect_format`, :data:`ADAPTERS`. The accepted and rejected
outcomes of every kind of bad value are documented in ``data/README.md``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from amv_calib._ingest import (
        CLAIMS_SCHEMA,
        DEFAULT_CHUNKSIZE,
        FORMATS,
        Format,
        IngestSummary,
        detect_format,
        ingest_file,
        iter_claim_chunks,
        load_claims,
    )

__all__ = [
    "ADAPTERS",
    "CLAIMS_SCHEMA",
    "DEFAULT_CHUNKSIZE",
    "FORMATS",
    "Format",
    "IngestSummary",
    "detect_format",
    "ingest_file",
    "iter_claim_chunks",
    "load_claims",
]

#: Input adapters for ``amv-calib ingest --adapter NAME``: name -> ``"module:function"``.
#: The function takes the input path and returns the claim-outcome table (a pandas
#: DataFrame or pyarrow Table, canonical or alias column names), or an iterable of such
#: tables; it is then validated like any other input (row numbers count its output rows).
ADAPTERS: dict[str, str] = {
    "mem0": "amv_calib.adapters:mem0_adapter",
    "graphiti": "amv_calib.adapters:graphiti_adapter",
}

_LAZY = frozenset(__all__) - {"ADAPTERS"}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'amv_calib.ingest' has no attribute {name!r}")
    value = getattr(importlib.import_module("amv_calib._ingest"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
