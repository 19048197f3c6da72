"""Validation of one chunk: parse its columns, find duplicates, split accepted from rejected.

Parsing (:func:`_parse_chunk`) is stateless, so a reader may run it ahead of time (the fast
CSV pass does); duplicate detection and the output tables (:func:`_validate`) run chunk after
chunk, in input order.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from amv_calib.claims._arrow import BoolArray, np_mask, null_mask, text_of
from amv_calib.claims._ingest_chunk import _Chunk, _ParsedChunk
from amv_calib.claims._ingest_columns import _SPECS, _spellings
from amv_calib.claims._ingest_dedupe import _GOLDEN, _duplicates, _mix64, _pair_hash, _SeenKeys
from amv_calib.claims._ingest_parse import _PARSERS, _not_scalar

# --------------------------------------------------------------------------------------
# validation of one chunk


@dataclass(kw_only=True)
class _ChunkResult:
    claims: pa.Table
    rejects: pa.Table
    reason_counts: Counter[str]
    # per rejects row, its text exactly as read where the reader kept it (else None)
    reject_lines: list[str | None] = field(default_factory=list)


def _parse_chunk(chunk: _Chunk, mapping: Mapping[str, str], out_columns: Sequence[str]
                 ) -> _ParsedChunk:
    """The stateless part of validation: parse every column, hash the keys."""
    n = len(chunk.rows)
    spellings = _spellings(list(chunk.columns))
    sources: dict[str, pa.Array] = {}
    filled: set[str] = set()
    for c in out_columns:
        names = spellings.get(c, (mapping[c],))
        if len(names) == 1:
            sources[c] = chunk.columns[names[0]]
        else:
            sources[c], used = _merged_column(chunk.columns, names)
            filled.update(used)
    parsed = {c: _PARSERS[_SPECS[c].kind](c, sources[c], _SPECS[c]) for c in out_columns}
    if chunk.nested:  # JSONL: a list or an object where an id belongs (now its JSON text)
        for c in out_columns:
            if _SPECS[c].kind == "id":
                mask = _taken_nested(chunk, spellings.get(c, (mapping[c],)))
                if mask.any():
                    parsed[c].problems.append(_not_scalar(c, mask))
    bad = np.zeros(n, dtype=bool)
    for p in parsed.values():
        for prob in p.problems:
            bad |= prob.mask
    ids, ts = parsed["claim_id"], parsed["timestamp"]
    key_ok = ~(null_mask(ids.values) | null_mask(ts.values))
    for prob in ids.problems:
        key_ok &= ~prob.mask
    keys = _pair_hash(ids.values, ts.values)
    weights = parsed.get("label_weight")
    if weights is not None and weights.values.null_count < len(weights.values):
        # A soft label (amv-calib label) is one use written as two weighted rows, violated
        # true and false: the label joins the key of weighted rows, so the pair is not a
        # duplicate, while a weighted row repeating the same label still is.
        weighted = ~null_mask(weights.values)
        label = np_mask(pc.fill_null(parsed["violated"].values, False)).astype(np.uint64)
        keys = np.where(weighted, _mix64(keys ^ ((label + np.uint64(1)) * _GOLDEN)), keys)
    return _ParsedChunk(chunk=chunk, parsed=parsed, sources=sources, filled=filled, bad=bad,
                        key_ok=key_ok, keys=keys)


def _taken_nested(chunk: _Chunk, names: Sequence[str]) -> BoolArray:
    """The rows whose value of the column spelt ``names`` (the first non-null spelling, as
    :func:`_merged_column` takes it) was a JSON list or object."""
    out = np.zeros(len(chunk.rows), dtype=bool)
    filled = np.zeros(len(chunk.rows), dtype=bool)
    for name in names:
        taken = ~filled & ~null_mask(chunk.columns[name])
        out |= taken & chunk.nested.get(name, False)
        filled |= taken
    return out


def _merged_column(columns: Mapping[str, pa.Array], names: Sequence[str]
                   ) -> tuple[pa.Array, set[str]]:
    """Several spellings of one column as one, as text: per row the first non-null in
    ``names`` order (the canonical spelling wins); and the spellings after the first that
    filled a row."""
    texts = [text_of(columns[name], np.arange(len(columns[name]))) for name in names]
    merged = texts[0]
    used: set[str] = set()
    for name, text in zip(names[1:], texts[1:], strict=True):
        if (null_mask(merged) & ~null_mask(text)).any():
            used.add(name)
        merged = pc.coalesce(merged, text)
    return merged, used


def _validate(
    pchunk: _ParsedChunk,
    mapping: Mapping[str, str],
    input_columns: Sequence[str],
    out_columns: Sequence[str],
    seen: _SeenKeys,
) -> _ChunkResult:
    """Duplicates, reasons and the two output tables of one parsed chunk (sequential)."""
    chunk, parsed = pchunk.chunk, pchunk.parsed
    n = len(chunk.rows)
    bad = pchunk.bad.copy()
    dup_of, register = _duplicates(pchunk.keys, pchunk.key_ok, pchunk.key_ok & ~bad,
                                   chunk.rows, seen)
    is_dup = dup_of > 0
    register()
    bad |= is_dup

    counts: Counter[str] = Counter()
    bad_idx = np.flatnonzero(bad)
    reasons: list[list[str]] = [[] for _ in range(len(bad_idx))]
    if len(bad_idx):
        slot = np.full(n, -1, dtype=np.int64)
        slot[bad_idx] = np.arange(len(bad_idx))
        for c in out_columns:
            for prob in parsed[c].problems:
                where = np.flatnonzero(prob.mask)
                if len(where) == 0:
                    continue
                counts[prob.key] += len(where)
                texts = text_of(pchunk.sources[c], where).to_pylist()
                for i, text in zip(slot[where].tolist(), texts, strict=True):
                    reasons[i].append(prob.message(text))
        where = np.flatnonzero(is_dup)
        if len(where):
            counts["duplicate (claim_id, timestamp)"] += len(where)
            for i, k in zip(slot[where].tolist(), dup_of[where].tolist(), strict=True):
                reasons[i].append(f"duplicate (claim_id, timestamp) of row {k}")

    keep = ~bad
    if len(bad_idx):
        keep_arr = pa.array(keep)
        claims = pa.table(
            {"row": pa.array(chunk.rows[keep], type=pa.int64()),
             **{c: parsed[c].values.filter(keep_arr) for c in out_columns}}
        )
    else:
        claims = pa.table({"row": pa.array(chunk.rows, type=pa.int64()),
                           **{c: parsed[c].values for c in out_columns}})
    # Rejects: the original fields as read, as text.
    rej_cols: dict[str, pa.Array] = {
        "row": pa.array(chunk.rows[bad_idx], type=pa.int64()),
        "reason": pa.array(["; ".join(r) for r in reasons], type=pa.string()),
    }
    for name in input_columns:
        col = chunk.columns.get(name)
        rej_cols[_reject_name(name)] = (
            pa.nulls(len(bad_idx), pa.string()) if col is None
            else text_of(col, bad_idx)
        )
    rejects = pa.table(rej_cols)
    lines: list[str | None] = (
        [chunk.lines[i] for i in bad_idx.tolist()] if chunk.lines is not None
        else [None] * len(bad_idx))
    if chunk.raw_rejects:
        counts.update(r.key for r in chunk.raw_rejects)
        raw = pa.table({
            "row": pa.array([r.row for r in chunk.raw_rejects], type=pa.int64()),
            "reason": pa.array([r.message for r in chunk.raw_rejects], type=pa.string()),
            **{_reject_name(name): pa.array([r.fields.get(name) for r in chunk.raw_rejects],
                                            type=pa.string())
               for name in input_columns},
        })
        rejects = pa.concat_tables([rejects, raw])
        order = pc.sort_indices(rejects["row"])
        rejects = rejects.take(order)
        lines = [*lines, *(r.line for r in chunk.raw_rejects)]
        lines = [lines[i] for i in order.to_pylist()]
    return _ChunkResult(claims=claims, rejects=rejects, reason_counts=counts,
                        reject_lines=lines)


def _write_reject_lines(fh: Any, res: _ChunkResult) -> None:
    """The rows of ``res.rejects`` as lossless JSON lines (see :func:`ingest_file`)."""
    names = res.rejects.column_names
    for rec, line in zip(res.rejects.to_pylist(), res.reject_lines, strict=True):
        fields = {k: rec[k] for k in names[2:]}
        fh.write(json.dumps({"row": rec["row"], "reason": rec["reason"], "fields": fields,
                             "line": line}, ensure_ascii=False) + "\n")


def _reject_name(name: str) -> str:
    # Keep the input's own spelling; only a clash with our two leading columns is renamed.
    return f"{name} (input)" if name in ("row", "reason") else name
