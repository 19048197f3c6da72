"""The Arrow schema of a decision-log line for pyarrow's JSON reader, narrowed to the keys
present in a block, and the helpers that read its columns back."""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any, Final

import numpy as np
from numpy.typing import NDArray

from amv_calib.contract import DECISION_ALIASES, MEMORY_KIND_FIELDS, OFFERED_VERIFIER_ALIASES

_FEATURE_ALIASES: Final = (("recency_hours", "recencyHours"),
                           ("source_trust_score", "sourceTrustScore"),
                           ("model_confidence", "modelConfidence"),
                           ("contradiction_flag", "contradictionFlag"))

_OFFER_COLUMNS: Final = ("rec", "id", "resolves", "cost", "reliability")


def _offers_table(cols: Mapping[str, Any]) -> Any:
    """The offered verifiers of a block as a pyarrow table (columns :data:`_OFFER_COLUMNS`)."""
    import pyarrow as pa

    return pa.table({
        "rec": pa.array(cols["rec"], type=pa.int64()),
        "id": pa.array(cols["id"], type=pa.string()),
        "resolves": pa.array(cols["resolves"], type=pa.list_(pa.string())),
        "cost": pa.array(np.asarray(cols["cost"], dtype=np.float64), type=pa.float64()),
        "reliability": pa.array(np.asarray(cols["reliability"], dtype=np.float64),
                                type=pa.float64()),
    })


@functools.lru_cache(maxsize=64)  # a few spelling sets per log; bounded whatever the log
def _arrow_schema(offers: bool, present: frozenset[str] | None = None) -> Any:
    """The schema pyarrow parses decision records with: every spelling of every field the
    reader takes; with ``present``, only the fields so named (a struct none of whose fields
    is present keeps them all). pyarrow fills each absent field of the schema with a null,
    row by row: a block is parsed fastest with the spellings it uses alone."""
    import pyarrow as pa

    feats = []
    for snake, camel in _FEATURE_ALIASES:
        typ = pa.bool_() if snake == "contradiction_flag" else pa.float64()
        feats += [(snake, typ), (camel, typ)]
    # a kind of another JSON type than a string makes pyarrow refuse the block: the line
    # parser words why the contract's rule refuses it
    kinds = [(n, pa.string()) for n in MEMORY_KIND_FIELDS]
    claim = pa.struct([("id", pa.string()), ("claim_id", pa.string()),
                       ("claimId", pa.string()), *feats, *kinds])
    premise = pa.struct([
        ("id", pa.string()), ("premise_id", pa.string()), ("premiseId", pa.string()),
        ("claim_id", pa.string()), ("claimId", pa.string()), *feats,
        ("p", pa.float64()), ("calibratedViolationProbability", pa.float64()),
        ("calibrated_violation_probability", pa.float64()), *kinds, ("claim", claim),
    ])
    call = pa.struct([("reliability", pa.float64())])
    offered = pa.struct(
        [(n, pa.string()) for n in OFFERED_VERIFIER_ALIASES["id"]]
        + [(n, pa.list_(pa.string())) for n in OFFERED_VERIFIER_ALIASES["resolves_premise_ids"]]
        + [(n, pa.float64()) for n in (*OFFERED_VERIFIER_ALIASES["execution_cost"],
                                       *OFFERED_VERIFIER_ALIASES["symmetric_reliability"])])
    fields = [(n, pa.string()) for n in ("time", "timestamp", "ts", "decidedAt", "decided_at",
                                         "action_id", "actionId", "tool_name", "toolName",
                                         "regime")]
    fields += [
        ("calibrator", pa.struct([("name", pa.string()), ("version", pa.string())])),
        ("premises", pa.list_(premise)),
        ("verifier_calls", pa.list_(call)), ("verifierCalls", pa.list_(call)),
    ]
    fields += [(n, pa.float64()) for n in (*DECISION_ALIASES["theta"],
                                           *DECISION_ALIASES["kappa"])]
    if offers:  # only the episodes need them: the label join alone does not parse them
        fields += [(n, pa.list_(offered)) for n in DECISION_ALIASES["verifiers"]]
    schema = pa.schema(fields)
    return schema if present is None else pa.schema(_narrow(list(schema), present))


def _narrow(fields: Sequence[Any], present: frozenset[str]) -> list[Any]:
    """The ``fields`` named in ``present``, their structs narrowed alike."""
    import pyarrow as pa

    return [pa.field(f.name, _narrow_type(f.type, present)) for f in fields
            if f.name in present]


def _narrow_type(typ: Any, present: frozenset[str] | None) -> Any:
    """``typ`` with the fields of its structs (within lists too) narrowed to ``present``
    (as :func:`_arrow_schema` narrows them; None: all)."""
    import pyarrow as pa

    if present is None:
        return typ
    if pa.types.is_struct(typ):
        kept = _narrow(list(typ), present)
        return pa.struct(kept) if kept else typ
    if pa.types.is_list(typ):
        return pa.list_(_narrow_type(typ.value_type, present))
    return typ


@functools.cache
def _schema_names(offers: bool) -> tuple[str, ...]:
    """Every field name of :func:`_arrow_schema`, at every depth."""
    import pyarrow as pa

    names: set[str] = set()

    def walk(t: Any) -> None:
        if pa.types.is_struct(t):
            for f in t:
                names.add(f.name)
                walk(f.type)
        elif pa.types.is_list(t):
            walk(t.value_type)

    for f in _arrow_schema(offers):
        names.add(f.name)
        walk(f.type)
    return tuple(sorted(names))


def _child(arr: Any, full: Any, name: str, present: frozenset[str] | None) -> Any:
    """Field ``name`` of a struct array parsed with a narrowed schema; where the block did
    not have it, nulls of its type in the full struct type ``full``, narrowed alike (so
    that it coalesces with the spellings the block had)."""
    import pyarrow as pa

    if arr.type.get_field_index(name) >= 0:
        return arr.field(name)
    return pa.nulls(len(arr), _narrow_type(full.field(name).type, present))


def _coalesce(*arrays: Any) -> Any:
    import pyarrow.compute as pc

    return arrays[0] if len(arrays) == 1 else pc.coalesce(*arrays)


def _no_empty(arr: Any) -> Any:
    """Empty strings as nulls, as the line parser reads them."""
    import pyarrow as pa
    import pyarrow.compute as pc

    empty = pc.fill_null(pc.equal(arr, ""), False)
    return pc.if_else(empty, pa.scalar(None, pa.string()), arr)


def _number_column(values: Any) -> NDArray[np.float64]:
    """``values`` (a sequence or array of floats) as float64, every zero ``+0.0``.

    ``-0`` is one value on every parse path: the compiled extraction and pyarrow read the
    text ``-0`` as ``-0.0``, Python's ``json`` as the integer 0; adding ``+0.0`` maps
    ``-0.0`` to ``0.0`` (IEEE 754) and leaves every other value as it is."""
    out: NDArray[np.float64] = np.asarray(values, dtype=np.float64) + 0.0
    return out
