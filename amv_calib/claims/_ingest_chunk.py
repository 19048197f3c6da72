"""A chunk of input rows: as a reader hands it to validation, and as parsed.

A module of its own so that the readers, which build chunks, and chunk validation, which
parses them, both build on it without importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
from numpy.typing import NDArray

from amv_calib.claims._arrow import BoolArray, IntArray
from amv_calib.claims._ingest_parse import _Parsed


@dataclass(kw_only=True)
class _RawReject:
    """A row the reader itself could not split into fields (malformed CSV / JSON line)."""

    row: int
    key: str
    message: str
    fields: dict[str, str | None]
    line: str | None = None  # the row's text exactly as read, for rejects.jsonl


@dataclass(kw_only=True)
class _Chunk:
    columns: dict[str, pa.Array]
    rows: IntArray
    raw_rejects: list[_RawReject] = field(default_factory=list)
    # The text of each row exactly as read (JSONL), for the lossless rejects.jsonl.
    lines: list[str] | None = None
    # Per column, the rows whose JSON value is a list or an object (JSONL): text now.
    nested: dict[str, BoolArray] = field(default_factory=dict)


@dataclass(kw_only=True)
class _ParsedChunk:
    chunk: _Chunk
    parsed: dict[str, _Parsed]
    sources: dict[str, pa.Array]  # the input column each output column was parsed from
    filled: set[str] = field(default_factory=set)  # other spellings that filled a row
    bad: BoolArray  # rows with a problem other than being a duplicate
    key_ok: BoolArray  # rows whose (claim_id, timestamp) parsed
    keys: NDArray[np.uint64]


def _batch_columns(batch: pa.RecordBatch | pa.Table) -> dict[str, pa.Array]:
    out: dict[str, pa.Array] = {}
    for name, col in zip(batch.schema.names, batch.columns, strict=True):
        arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
        out[name] = arr
    return out
