"""Claim outcomes from memory-store histories: mem0 history records, Graphiti/Zep edges.

A memory store knows when a memory changed, not when the agent relied on it. The *uses*
come from the gate's decision logs (a premise's ``claim_id`` is the memory id or edge
uuid) or from a *uses table* (``claim_id`` / ``memory_id`` / ``uuid``, ``time``, optionally
``action_id``, ``tool_name`` and any of the four claim features). Each use becomes one
claim-outcome row, or is reported as unjoined with its reason.

mem0
----
mem0 keeps a ``history`` table (SQLite; ``Memory.history(memory_id)`` returns its rows):
``id, memory_id, old_memory, new_memory, event, created_at, updated_at, is_deleted,
actor_id, role`` with ``event`` in ``ADD`` / ``UPDATE`` / ``DELETE``. An event's *record
time* is ``updated_at`` for UPDATE and DELETE (``created_at`` there is the memory's original
creation time) and ``created_at`` for ADD. A *change* is a DELETE or an UPDATE whose
``new_memory`` differs from ``old_memory`` (an UPDATE to the same text, or ``NONE``, has no
effect). Its *effect time* is the optional column ``effective_at`` when the application
records one (mem0 itself does not), else its record time minus ``correction_window_hours``
(default 0): a correction recorded that soon after a use is taken to concern a state that
was already wrong at the use.

The version a use at time ``t`` read is ``t - recency_hours`` when the use carries its
recency (the decision log does), else the last ADD or effective UPDATE recorded at or
before ``t``. **The use was violated iff a change recorded after that version took effect
at or before** ``t``: the agent acted on content the store has since replaced or deleted.

Graphiti / Zep
--------------
An entity edge (``graphiti_core.edges.EntityEdge``: ``uuid, group_id, source_node_uuid,
target_node_uuid, name, fact, episodes, created_at, expired_at, valid_at, invalid_at,
reference_time, attributes``) is a fact that holds on ``[valid_at, invalid_at)`` (valid
time; a missing bound is open). **A use at** ``t`` **was violated iff** ``invalid_at <= t``
(or ``valid_at > t``: the fact did not hold yet). ``contradiction_flag`` is derived: the
edge had been *expired* (superseded by a newer edge in the graph) at or before ``t``.

Both
----
``recency_hours`` is the age of the memory at use (from the history when the use does not
carry it). Fields the stores lack come from the use when it has them (the decision log
has all four features) and otherwise from ``defaults`` (:data:`DEFAULT_FEATURES`: trust
and confidence 0.5, the uninformative midpoint, and no contradiction for mem0); the column
``defaulted_features`` names the features filled in that way (comma-separated, empty when
none). Unjoined reasons: ``invalid_use`` (bad id, time or feature), ``unknown_claim`` (not
in the export), ``use_before_creation`` (the memory did not exist yet), and
``no_outcome_yet`` (not violated, but within ``followup_hours`` of ``as_of``, the export
time, so a correction may still come). ``joined + sum(unjoined) == uses_read`` always.
"""

from __future__ import annotations

import json
import logging
import math
import os
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, cast

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from amv_calib.claims._codes import _cat_take, _factorize, _from_codes
from amv_calib.claims._join import _collect_uses
from amv_calib.claims._logread import _NAT, PathLike, read_uses
from amv_calib.claims._logvalues import _as_flag
from amv_calib.claims._outcomes import _id_series, _read_table, _resolve
from amv_calib.claims._times import _time_reasons, _time_series, us_to_datetime
from amv_calib.contract import CLAIM_FEATURES, loads_strict, read_regular, require_regular
from amv_calib.exceptions import DataContractError, MissingColumnsError

_log = logging.getLogger(__name__)

#: Values of the claim features a memory store does not record (see module docs).
DEFAULT_FEATURES: Final[Mapping[str, float | bool]] = {
    "source_trust_score": 0.5,
    "model_confidence": 0.5,
    "contradiction_flag": False,
}

ADAPTER_UNJOINED_REASONS: Final = (
    "invalid_use",
    "unknown_claim",
    "use_before_creation",
    "no_outcome_yet",
)

_US_PER_HOUR: Final = 3_600_000_000
_BIG: Final = np.iinfo(np.int64).max

_USE_ALIASES: Final[dict[str, tuple[str, ...]]] = {
    "claim_id": ("claim_id", "claimId", "memory_id", "memoryId", "uuid", "edge_uuid",
                 "edgeUuid"),
    "time": ("time", "timestamp", "used_at", "usedAt", "ts"),
    "action_id": ("action_id", "actionId"),
    "tool_name": ("tool_name", "toolName"),
    "recency_hours": ("recency_hours", "recencyHours"),
    "source_trust_score": ("source_trust_score", "sourceTrustScore"),
    "model_confidence": ("model_confidence", "modelConfidence"),
    "contradiction_flag": ("contradiction_flag", "contradictionFlag"),
}

_MEM0_ALIASES: Final[dict[str, tuple[str, ...]]] = {
    "memory_id": ("memory_id", "memoryId"),
    "event": ("event",),
    "old_memory": ("old_memory", "oldMemory", "prev_value", "previous_value"),
    "new_memory": ("new_memory", "newMemory", "new_value"),
    "created_at": ("created_at", "createdAt"),
    "updated_at": ("updated_at", "updatedAt"),
    "effective_at": ("effective_at", "effectiveAt"),
    "timestamp": ("timestamp",),
    "memory_kind": ("memory_kind", "memoryKind"),
    "metadata": ("metadata",),
    "category": ("category",),
    "categories": ("categories",),
}
#: Where a mem0 record names its memory's kind, in order of preference: an explicit column,
#: the application's ``metadata`` (``memory_kind``, ``memoryKind`` or ``kind``), mem0's
#: ``category``, the first of its ``categories``.
_MEM0_KIND_KEYS: Final = ("memory_kind", "memoryKind", "kind")

_EDGE_ALIASES: Final[dict[str, tuple[str, ...]]] = {
    "uuid": ("uuid",),
    "fact": ("fact",),
    "name": ("name",),
    "group_id": ("group_id", "groupId"),
    "created_at": ("created_at", "createdAt"),
    "valid_at": ("valid_at", "validAt"),
    "invalid_at": ("invalid_at", "invalidAt"),
    "expired_at": ("expired_at", "expiredAt"),
}

BoolArray = NDArray[np.bool_]
IntArray = NDArray[np.int64]
FloatArray = NDArray[np.float64]
_Source = PathLike | pd.DataFrame | Sequence[Mapping[str, Any]]


# ---------------------------------------------------------------------------------------------
# The report
# ---------------------------------------------------------------------------------------------
@dataclass(kw_only=True)
class AdapterReport:
    """Where every store record and every use went.

    ``records_read == records_valid + sum(records_invalid.values())`` and ``joined +
    sum(unjoined.values()) == uses_read``; :meth:`check` verifies both.
    """

    store: str
    records_read: int
    records_valid: int
    records_invalid: dict[str, int]
    uses_read: int
    joined: int
    violated: int
    unjoined: dict[str, int]
    defaulted: dict[str, int]
    as_of: str | None
    details: pd.DataFrame = field(default_factory=pd.DataFrame, repr=False)

    def check(self) -> None:
        """Raise ``AssertionError`` if an accounting invariant does not hold."""
        if self.records_valid + sum(self.records_invalid.values()) != self.records_read:
            raise AssertionError(f"records {self.records_valid} + {self.records_invalid} != "
                                 f"{self.records_read}")
        if self.joined + sum(self.unjoined.values()) != self.uses_read:
            raise AssertionError(f"joined {self.joined} + {self.unjoined} != {self.uses_read}")

    def to_dict(self) -> dict[str, Any]:
        """Plain-data summary."""
        return {
            "store": self.store, "records_read": self.records_read,
            "records_valid": self.records_valid, "records_invalid": dict(self.records_invalid),
            "uses_read": self.uses_read, "joined": self.joined, "violated": self.violated,
            "unjoined": dict(self.unjoined), "defaulted": dict(self.defaulted),
            "as_of": self.as_of,
        }


# ---------------------------------------------------------------------------------------------
# Reading exports
# ---------------------------------------------------------------------------------------------
def _records_table(source: _Source, list_keys: tuple[str, ...],
                   sqlite_table: str | None = None) -> pd.DataFrame:
    """A DataFrame from a frame, a list of dicts, or a JSON / JSONL / CSV / Parquet /
    SQLite file; a JSON object holding the list under one of ``list_keys`` is unwrapped."""
    if isinstance(source, pd.DataFrame):
        return source.reset_index(drop=True)
    if not isinstance(source, (str, os.PathLike)):
        return pd.DataFrame.from_records([dict(r) for r in source])
    p = Path(source)
    require_regular(p, what="store export")
    suffix = p.suffix.lower()
    if suffix in (".db", ".sqlite", ".sqlite3") and sqlite_table is not None:
        uri = f"{p.resolve().as_uri()}?mode=ro"
        with sqlite3.connect(uri, uri=True) as conn:
            try:
                return pd.read_sql_query(f"SELECT * FROM {sqlite_table}", conn)
            except (sqlite3.Error, pd.errors.DatabaseError) as exc:
                raise DataContractError(f"{p}: cannot read table {sqlite_table!r}: {exc}") \
                    from exc
    if suffix == ".json":
        try:
            text = read_regular(p, what="store export").decode("utf-8")
        except UnicodeDecodeError as exc:
            raise DataContractError(f"{p}: not UTF-8 text ({exc.reason} at byte "
                                    f"{exc.start})") from None
        stripped = text.lstrip()
        if stripped.startswith("{") and "\n{" not in stripped.rstrip():
            try:
                obj = loads_strict(text)
            except (ValueError, RecursionError) as exc:
                raise DataContractError(f"{p}: not valid JSON ({exc})") from exc
            for key in list_keys:
                if isinstance(obj, dict) and isinstance(obj.get(key), list):
                    return pd.DataFrame.from_records([r if isinstance(r, dict) else {}
                                                      for r in obj[key]])
            raise DataContractError(
                f"{p}: a JSON object must hold the records under one of {list(list_keys)}"
            )
    table, bad = _read_table(p)
    if bad:
        row, why = bad[0]
        raise DataContractError(f"{p}: row {row}: {why}")
    return table


def _columns(table: pd.DataFrame, aliases: Mapping[str, tuple[str, ...]],
             required: Mapping[str, tuple[str, ...]]
             ) -> tuple[Callable[[str], pd.Series], list[str]]:
    """Find the columns of ``table`` by their ``aliases``.

    Returns
    -------
    col : callable
        ``col(name)``: the column found for the canonical ``name``, or all None when the
        table lacks it.
    missing : list of str
        The keys of ``required`` none of whose canonical names was found.
    """
    found = _resolve(table.columns, aliases)
    missing = [key for key, names in required.items() if not any(c in found for c in names)]

    def col(name: str) -> pd.Series:
        if name in found:
            return table[found[name]].reset_index(drop=True)
        return pd.Series([None] * len(table), dtype=object)

    return col, missing


def _invalid_records(rows: IntArray, ok: BoolArray, reason: NDArray[Any]) -> pd.DataFrame:
    """``row`` and ``reason`` of the records that are not ``ok``."""
    return pd.DataFrame({"row": rows[~ok],
                         "reason": pd.array(reason[~ok].tolist(), dtype="str")})


def load_mem0_history(source: _Source) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Read and validate mem0 history records.

    Parameters
    ----------
    source : path, DataFrame or list of dicts
        ``Memory.history()`` output as JSON (a list, or an object with ``results`` /
        ``history``), JSONL, CSV, Parquet, or mem0's SQLite history database.

    Returns
    -------
    events : DataFrame
        Valid records: ``row`` (1-based), ``memory_id``, ``event`` (upper case), ``text``
        (the memory after the event), ``rec_us`` (record time), ``eff_us`` (``effective_at``
        or ``_NAT``), ``change`` (a DELETE or an UPDATE that changed the text), ``version``
        (an ADD or such an UPDATE).
    invalid : DataFrame
        ``row`` and ``reason`` of every invalid record.
    """
    table = _records_table(source, ("results", "history"), sqlite_table="history")
    col, missing = _columns(table, _MEM0_ALIASES, {
        "memory_id": ("memory_id",), "event": ("event",),
        "created_at or updated_at": ("created_at", "updated_at", "timestamp"),
    })
    if missing and len(table):
        raise MissingColumnsError(f"mem0 history lacks column(s) {missing}; found "
                                  f"{list(table.columns)}")
    n = len(table)
    mid = _id_series(col("memory_id"))
    event = pd.Series([str(e).strip().upper() if isinstance(e, str) else "" for e in
                       col("event").tolist()])
    old = col("old_memory").tolist()
    new = col("new_memory").tolist()
    created = _time_series(col("created_at"))
    updated = _time_series(col("updated_at"))
    legacy = _time_series(col("timestamp"))
    eff = _time_series(col("effective_at"))
    is_add = (event == "ADD").to_numpy()
    later = np.where(updated != _NAT, updated, np.where(created != _NAT, created, legacy))
    first = np.where(created != _NAT, created, np.where(updated != _NAT, updated, legacy))
    rec = np.where(is_add, first, later)
    reason = np.full(n, "", dtype=object)
    known = event.isin(["ADD", "UPDATE", "DELETE", "NONE", "NOOP"]).to_numpy()
    for i in range(n):
        if mid.iloc[i] is None or pd.isna(mid.iloc[i]):
            reason[i] = "memory_id missing"
        elif not known[i]:
            reason[i] = f"event={col('event').iloc[i]!r} is not ADD, UPDATE or DELETE"
        elif rec[i] == _NAT:
            reason[i] = "no parseable created_at / updated_at"
    ok = reason == ""
    kinds = [_mem0_kind(*v) for v in zip(col("memory_kind"), col("metadata"), col("category"),
                                         col("categories"), strict=True)]
    text = [None if not isinstance(v, str) else v for v in new]
    same = np.array([isinstance(a, str) and isinstance(b, str) and a == b
                     for a, b in zip(old, new, strict=True)], dtype=bool)
    ev = event.to_numpy(dtype=object)
    change = (ev == "DELETE") | ((ev == "UPDATE") & ~same)
    version = (ev == "ADD") | ((ev == "UPDATE") & ~same)
    rows = np.arange(1, n + 1, dtype=np.int64)
    events = pd.DataFrame({
        "row": rows[ok], "memory_id": mid[ok].reset_index(drop=True),
        "event": pd.array(ev[ok].tolist(), dtype="str"),
        "text": pd.array([t for t, k in zip(text, ok, strict=True) if k], dtype="str"),
        "rec_us": rec[ok], "eff_us": eff[ok], "change": change[ok], "version": version[ok],
        "memory_kind": pd.Series([k for k, good in zip(kinds, ok, strict=True) if good],
                                 dtype=object),
    })
    invalid = _invalid_records(rows, ok, reason)
    return events, invalid


def _mem0_kind(explicit: Any, metadata: Any, category: Any, categories: Any) -> str | None:
    """The kind a mem0 record gives its memory (:data:`_MEM0_KIND_KEYS`), or None."""
    def text(v: Any) -> str | None:
        return v.strip() or None if isinstance(v, str) else None

    def parsed(v: Any) -> Any:
        if isinstance(v, str) and v.lstrip()[:1] in ("{", "["):
            try:
                return json.loads(v)
            except ValueError:
                return None
        return v

    meta = parsed(metadata)
    found = [text(explicit)]
    if isinstance(meta, Mapping):
        found += [text(meta.get(k)) for k in _MEM0_KIND_KEYS]
    found.append(text(category))
    cats = parsed(categories)
    if isinstance(cats, (list, tuple, np.ndarray)) and len(cats):
        found.append(text(cats[0]))
    return next((k for k in found if k is not None), None)


def load_graphiti_edges(source: _Source) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Read and validate Graphiti / Zep entity edges.

    Parameters
    ----------
    source : path, DataFrame or list of dicts
        ``EntityEdge.model_dump(mode="json")`` records as JSON (a list, or an object with
        ``edges``), JSONL, CSV or Parquet.

    Returns
    -------
    edges : DataFrame
        Valid edges: ``row``, ``uuid``, ``fact``, ``name``, ``group_id`` and ``created_us``,
        ``valid_us``, ``invalid_us``, ``expired_us`` (``_NAT`` when absent).
    invalid : DataFrame
        ``row`` and ``reason`` of every invalid edge (missing uuid or created_at, an
        unparseable time, a repeated uuid).
    """
    table = _records_table(source, ("edges", "entity_edges", "results"))
    col, missing = _columns(table, _EDGE_ALIASES,
                            {"uuid": ("uuid",), "created_at": ("created_at",)})
    if missing and len(table):
        raise MissingColumnsError(f"Graphiti edges lack column(s) {missing}; found "
                                  f"{list(table.columns)}")
    n = len(table)
    uuid = _id_series(col("uuid"))
    times = {k: _time_series(col(k)) for k in ("created_at", "valid_at", "invalid_at",
                                               "expired_at")}
    raw = {k: col(k).tolist() for k in times}
    reason = np.full(n, "", dtype=object)
    dup = uuid.duplicated(keep="first").to_numpy() & uuid.notna().to_numpy()
    for i in range(n):
        if pd.isna(uuid.iloc[i]):
            reason[i] = "uuid missing"
        elif times["created_at"][i] == _NAT:
            shown = None if _absent(raw["created_at"][i]) else raw["created_at"][i]
            reason[i] = f"created_at={shown!r} is not a time"
        elif dup[i]:
            reason[i] = f"uuid {uuid.iloc[i]!r} repeats an earlier edge"
        else:
            for k in ("valid_at", "invalid_at", "expired_at"):
                v = raw[k][i]
                if not _absent(v) and times[k][i] == _NAT:
                    reason[i] = f"{k}={v!r} is not a time"
                    break
    ok = reason == ""
    rows = np.arange(1, n + 1, dtype=np.int64)

    def strs(name: str) -> Any:
        vals = col(name).tolist()
        return pd.array([v if isinstance(v, str) else None
                         for v, k in zip(vals, ok, strict=True) if k], dtype="str")

    edges = pd.DataFrame({
        "row": rows[ok], "uuid": uuid[ok].reset_index(drop=True), "fact": strs("fact"),
        "name": strs("name"), "group_id": strs("group_id"),
        "created_us": times["created_at"][ok], "valid_us": times["valid_at"][ok],
        "invalid_us": times["invalid_at"][ok], "expired_us": times["expired_at"][ok],
    })
    invalid = _invalid_records(rows, ok, reason)
    return edges, invalid


def load_uses_table(source: _Source) -> pd.DataFrame:
    """Read a uses table into the columns the adapters join on.

    Returns ``claim_id``, ``t_us``, ``action_id``, ``tool_name``, the four claim features
    (NaN when absent), ``detail`` (why the row is invalid, else empty), ``origin`` and
    ``line`` (1-based row).
    """
    table = _records_table(source, ("uses",))
    col, missing = _columns(table, _USE_ALIASES,
                            {"claim_id": ("claim_id",), "time": ("time",)})
    if missing and len(table):
        hints = "; ".join(f"{c}: {list(_USE_ALIASES[c])}" for c in missing)
        raise MissingColumnsError(f"uses table lacks column(s) {missing} (accepted names: "
                                  f"{hints})")
    n = len(table)
    t = _time_series(col("time"))
    out = pd.DataFrame({
        "claim_id": _id_series(col("claim_id")),
        "t_us": t,
        "action_id": _id_series(col("action_id")),
        "tool_name": _id_series(col("tool_name")),
        "origin": "uses",
        "line": np.arange(1, n + 1, dtype=np.int64),
    })
    detail = np.full(n, "", dtype=object)
    detail[out["claim_id"].isna().to_numpy()] = "claim_id missing"
    raw_t = col("time").tolist()
    where = np.flatnonzero((t == _NAT) & (detail == ""))
    detail[where] = _time_reasons("time", [raw_t[i] for i in where.tolist()])
    for name in CLAIM_FEATURES:
        vals = col(name).tolist()
        if name == "contradiction_flag":
            arr = np.array([math.nan if _absent(v) else _as_flag(v) for v in vals],
                           dtype=np.float64)
            bad = np.array([not _absent(v) and math.isnan(_as_flag(v)) for v in vals],
                           dtype=bool)
            msg = "contradiction_flag={!r} is not a boolean"
        else:
            arr = np.array([math.nan if _absent(v) else _num(v) for v in vals],
                           dtype=np.float64)
            bad = np.array([not _absent(v) and math.isnan(_num(v)) for v in vals], dtype=bool)
            with np.errstate(invalid="ignore"):
                if name == "recency_hours":
                    bad |= ~np.isnan(arr) & ~(arr >= 0)
                    msg = "recency_hours={!r} must be a finite number >= 0"
                else:
                    bad |= ~np.isnan(arr) & ~((arr >= 0) & (arr <= 1))
                    msg = name + "={!r} outside [0, 1]"
            arr[~np.isfinite(arr)] = math.nan
        for i in np.flatnonzero(bad & (detail == "")):
            detail[i] = msg.format(vals[i])
        out[name] = arr
    out["detail"] = pd.array(detail.tolist(), dtype="str")
    return out


def _absent(v: Any) -> bool:
    """None, NaN, NaT, NA or an empty string."""
    if v is None or (isinstance(v, str) and v == ""):
        return True
    if isinstance(v, (str, bytes, list, tuple, dict)):
        return False
    return bool(pd.isna(v))


def _num(v: Any) -> float:
    if isinstance(v, bool):
        return math.nan
    try:
        f = float(v)
    except (TypeError, ValueError):
        return math.nan
    return f if math.isfinite(f) else math.nan


def _decision_uses(decisions: PathLike | Sequence[PathLike]) -> pd.DataFrame:
    """The uses of decision logs, in the layout of :func:`load_uses_table`."""
    plist = [decisions] if isinstance(decisions, (str, os.PathLike)) else list(decisions)
    log = read_uses(plist)
    uses = _collect_uses(log)
    u = uses.u
    rec = u["rec"].to_numpy()
    recs = {c: pd.Series(log.records[c], copy=False) for c in ("action_id", "tool_name")}
    out = pd.DataFrame({
        "claim_id": u["claim_id"].array,
        "t_us": log.records["t_us"][rec],
        "action_id": _cat_take(recs["action_id"], rec),
        "tool_name": _cat_take(recs["tool_name"], rec),
        "origin": _from_codes(log.records["file"][rec], [os.fspath(p) for p in plist]),
        "line": log.records["line"][rec].astype(np.int64),
    })
    for name in CLAIM_FEATURES:
        out[name] = u[name].to_numpy(dtype=np.float64)
    # A premise that carries only a probability has no features: the store and the
    # defaults fill them, so here only a present-but-wrong field makes the use invalid.
    cats = list(uses.detail_categories)
    keep = np.array([not ("missing" in c and c != "claim_id missing") for c in cats], dtype=bool)
    codes = np.where(keep[uses.detail_codes], uses.detail_codes, 0)
    out["detail"] = _from_codes(codes, cats)
    return out


def _gather_uses(uses: _Source | None, decisions: PathLike | Sequence[PathLike] | None
                 ) -> pd.DataFrame:
    parts = []
    if decisions is not None:
        parts.append(_decision_uses(decisions))
    if uses is not None:
        parts.append(load_uses_table(uses))
    if not parts:
        raise DataContractError(
            "a memory-store export says when memories changed, not when they were used: "
            "pass the uses (decision logs, or a uses table with claim_id and time)"
        )
    return pd.concat(parts, ignore_index=True) if len(parts) > 1 else parts[0]


# ---------------------------------------------------------------------------------------------
# Shared assembly
# ---------------------------------------------------------------------------------------------
def _fill_features(uses: pd.DataFrame, derived: Mapping[str, FloatArray],
                   defaults: Mapping[str, float | bool]
                   ) -> tuple[dict[str, FloatArray], dict[str, BoolArray]]:
    """Features from the use, else derived from the store, else the defaults; and, per
    feature, which rows took the default."""
    n = len(uses)
    feats: dict[str, FloatArray] = {}
    gaps: dict[str, BoolArray] = {}
    for name in CLAIM_FEATURES:
        vals = uses[name].to_numpy(dtype=np.float64).copy()
        gap = np.isnan(vals)
        if name in derived:
            vals[gap] = derived[name][gap]
            gap = np.isnan(vals)
        if name in defaults:
            vals[gap] = float(defaults[name])
            gaps[name] = gap
        else:
            gaps[name] = np.zeros(n, dtype=bool)
        feats[name] = vals
    return feats, gaps


@dataclass(frozen=True)
class _Joined:
    """The uses, their claim ids coded together with the store's record ids."""

    uses: pd.DataFrame
    t: IntArray
    record_codes: IntArray
    use_codes: IntArray
    n_codes: int


@dataclass(frozen=True)
class _Outcome:
    """What a store's records say about each use.

    ``created`` is ``_BIG`` where the claim is not ``known``; ``derived`` holds features the
    store gives (NaN where it gives none); ``stamps`` are the record times, from which the
    export time is inferred when ``as_of`` is not given.
    """

    known: BoolArray
    created: IntArray
    violated: BoolArray
    derived: Mapping[str, FloatArray]
    statement: NDArray[Any]
    stamps: IntArray
    memory_kind: NDArray[Any] | None = None  # per use, when the store names kinds


def _join_uses(record_ids: pd.Series, uses: _Source | None,
               decisions: PathLike | Sequence[PathLike] | None) -> _Joined:
    """Read the uses and code their claim ids together with ``record_ids``."""
    u = _gather_uses(uses, decisions)
    record_codes, use_codes = _factorize(record_ids, u["claim_id"])
    n_codes = int(max(record_codes.max(initial=-1), use_codes.max(initial=-1))) + 1
    return _Joined(u, u["t_us"].to_numpy(dtype=np.int64), record_codes, use_codes, n_codes)


def _assemble(store: str, joined: _Joined, records: tuple[pd.DataFrame, pd.DataFrame],
              outcome: _Outcome, defaults: Mapping[str, float | bool], as_of: Any,
              followup_hours: float) -> tuple[pd.DataFrame, AdapterReport]:
    """The claims of one store's export and its report, which is logged at INFO.

    ``records`` are the valid and the invalid records as the store's loader returns them.
    """
    uses, t, (valid_records, invalid_records) = joined.uses, joined.t, records
    known, created, violated = outcome.known, outcome.created, outcome.violated
    n = len(uses)
    n_records = len(valid_records) + len(invalid_records)
    horizon = _as_of_us(as_of)
    if horizon is None:
        horizon = _latest(outcome.stamps, t)
    reason = np.full(n, "", dtype=object)
    detail = uses["detail"].to_numpy(dtype=object).copy()
    bad = detail != ""
    reason[bad] = "invalid_use"
    reason[~bad & ~known] = "unknown_claim"
    reason[~bad & known & (t < created)] = "use_before_creation"
    if horizon is not None:
        # Not violated (yet) so close to the export that a correction may still come.
        censor_from = horizon - int(round(followup_hours * _US_PER_HOUR))
        reason[(reason == "") & ~violated & (t > censor_from)] = "no_outcome_yet"
    ok = reason == ""
    feats, gaps = _fill_features(uses, outcome.derived, defaults)
    # A feature that had to be defaulted on a row that is otherwise fine is still a row;
    # ``defaulted_features`` says which features are not the store's or the use's own.
    names = list(CLAIM_FEATURES)
    idx = np.flatnonzero(ok)
    gap_rows = np.column_stack([gaps[c][idx] for c in names]) if idx.size else \
        np.zeros((0, len(names)), dtype=bool)
    defaulted = [",".join(c for c, g in zip(names, row, strict=True) if g)
                 for row in gap_rows.tolist()]
    claims = pd.DataFrame({
        "claim_id": uses["claim_id"].to_numpy()[idx],
        "timestamp": us_to_datetime(t[idx]),
        **{name: feats[name][idx] for name in names if name != "contradiction_flag"},
        "contradiction_flag": feats["contradiction_flag"][idx] > 0.5,
        "violated": violated[idx],
        "action_id": uses["action_id"].to_numpy()[idx],
        "tool_name": uses["tool_name"].to_numpy()[idx],
        "statement": np.asarray(outcome.statement, dtype=object)[idx],
        "source": np.full(idx.size, store, dtype=object),
        "defaulted_features": np.asarray(defaulted, dtype=object),
    })
    if outcome.memory_kind is not None and any(k is not None for k in outcome.memory_kind):
        claims["memory_kind"] = pd.array(outcome.memory_kind[idx].tolist(), dtype="str")
    for c in ("claim_id", "action_id", "tool_name", "statement", "source",
              "defaulted_features"):
        claims[c] = pd.array(claims[c].to_numpy(dtype=object).tolist(), dtype="str")
    nj = np.flatnonzero(~ok)
    details = pd.DataFrame({
        "origin": uses["origin"].to_numpy()[nj], "line": uses["line"].to_numpy()[nj],
        "claim_id": uses["claim_id"].to_numpy()[nj],
        "action_id": uses["action_id"].to_numpy()[nj],
        "time": us_to_datetime(t[nj]),
        "reason": pd.array(reason[nj].tolist(), dtype="str"),
        "detail": pd.array(detail[nj].tolist(), dtype="str"),
    })
    inv_counts: dict[str, int] = {}
    for r in invalid_records["reason"].tolist():
        key = r.split("=")[0].split(" ")[0]
        inv_counts[key] = inv_counts.get(key, 0) + 1
    unj = reason[~ok]
    report = AdapterReport(
        store=store,
        records_read=n_records,
        records_valid=n_records - len(invalid_records),
        records_invalid=inv_counts,
        uses_read=n,
        joined=int(ok.sum()),
        violated=int(violated[ok].sum()),
        unjoined={r: int((unj == r).sum()) for r in ADAPTER_UNJOINED_REASONS},
        defaulted={c: int(gaps[c][idx].sum()) for c in names if c in defaults},
        as_of=None if horizon is None else us_to_datetime(np.array([horizon]))[0].isoformat(),
        details=details,
    )
    report.check()
    _log.info("%s: %s", store, json.dumps(report.to_dict()))
    return claims, report


def _take(values: NDArray[Any], idx: IntArray, mask: BoolArray, fill: Any) -> NDArray[Any]:
    """``values[idx]`` where ``mask``, ``fill`` elsewhere (safe when ``values`` is empty)."""
    out = np.full(mask.shape, fill, dtype=object if fill is None else values.dtype)
    out[mask] = values[idx[mask]]
    return out


def _as_of_us(as_of: Any) -> int | None:
    if as_of is None:
        return None
    t = _time_series(pd.Series([as_of], dtype=object))[0]
    if t == _NAT:
        raise DataContractError(f"as_of={as_of!r} is not a time")
    return int(t)


def _latest(*stamps: IntArray) -> int | None:
    """The latest of ``stamps`` that is a time (not ``_NAT``), or None when none is."""
    flat = np.concatenate(stamps)
    flat = flat[flat != _NAT]
    return int(flat.max()) if flat.size else None


# ---------------------------------------------------------------------------------------------
# mem0
# ---------------------------------------------------------------------------------------------
def mem0_history_to_claims(
    history: _Source,
    *,
    uses: _Source | None = None,
    decisions: PathLike | Sequence[PathLike] | None = None,
    defaults: Mapping[str, float | bool] | None = None,
    correction_window_hours: float = 0.0,
    followup_hours: float = 0.0,
    as_of: Any = None,
) -> tuple[pd.DataFrame, AdapterReport]:
    """Claim outcomes from a mem0 history export and the uses of its memories.

    Parameters
    ----------
    history : path, DataFrame or list of dicts
        mem0 history records (see :func:`load_mem0_history`).
    uses : path, DataFrame or list of dicts, optional
        A uses table (``memory_id`` or ``claim_id``, ``time``, optional features).
    decisions : path or paths, optional
        Gate decision logs whose premises' ``claim_id`` is the mem0 memory id.
    defaults : mapping, optional
        Values of features neither the use nor the store gives; default
        :data:`DEFAULT_FEATURES`.
    correction_window_hours : float, default 0
        A change recorded at most this long after a use counts as in effect at the use
        (when the record has no ``effective_at``).
    followup_hours : float, default 0
        Uses not violated within this long before ``as_of`` are ``no_outcome_yet``.
    as_of : time, optional
        When the export was taken; default the latest time in the history and the uses.

    Returns
    -------
    claims : DataFrame
        One row per joined use: the data contract's columns plus ``action_id``,
        ``tool_name``, ``statement`` (the memory text of the version used, when known),
        ``source`` (``"mem0"``), ``defaulted_features`` and, when the records name kinds,
        ``memory_kind`` (a record's ``memory_kind``, its ``metadata``'s ``memory_kind`` /
        ``memoryKind`` / ``kind``, its ``category``, or the first of its ``categories``;
        the last a memory's records give).
    report : AdapterReport
    """
    if correction_window_hours < 0 or followup_hours < 0:
        raise ValueError("correction_window_hours and followup_hours must be >= 0")
    dflt = dict(DEFAULT_FEATURES if defaults is None else defaults)
    events, invalid = load_mem0_history(history)
    joined = _join_uses(events["memory_id"], uses, decisions)
    outcome = _mem0_outcome(events, joined, correction_window_hours)
    return _assemble("mem0", joined, (events, invalid), outcome, dflt, as_of, followup_hours)


def _mem0_outcome(events: pd.DataFrame, joined: _Joined,
                  correction_window_hours: float) -> _Outcome:
    """The version of the memory each use read, and whether a later change was in effect
    at the use (see module docs)."""
    t, m_codes, u_codes = joined.t, joined.record_codes, joined.use_codes
    n = len(t)
    rec = events["rec_us"].to_numpy(dtype=np.int64)
    window = int(round(correction_window_hours * _US_PER_HOUR))
    eff_col = events["eff_us"].to_numpy(dtype=np.int64)
    eff = np.where(eff_col != _NAT, eff_col, rec - window)
    is_change = events["change"].to_numpy(dtype=bool)
    is_version = events["version"].to_numpy(dtype=bool)
    # creation = first recorded event of the memory
    created_by_code = np.full(max(joined.n_codes, 1), _BIG, dtype=np.int64)
    np.minimum.at(created_by_code, m_codes, rec)
    known = np.zeros(n, dtype=bool)
    ok_code = u_codes >= 0
    known[ok_code] = created_by_code[u_codes[ok_code]] != _BIG
    created = np.where(known, created_by_code[np.maximum(u_codes, 0)], _BIG)
    valid_t = t != _NAT
    # Version read: t - recency if the use carries it, else the last version at or before t.
    rh = joined.uses["recency_hours"].to_numpy(dtype=np.float64)
    v_order = np.flatnonzero(is_version)
    all_t = np.unique(np.concatenate([rec, t[valid_t]]))
    rank_n = all_t.size + 2
    ver_key = m_codes[v_order] * rank_n + np.searchsorted(all_t, rec[v_order])
    srt = np.argsort(ver_key, kind="stable")
    ver_key, v_order = ver_key[srt], v_order[srt]
    def version_at(when: IntArray) -> tuple[BoolArray, IntArray]:
        """Whether a version of the use's memory was recorded at or before ``when``, and
        the index (into the events) of the last one."""
        # rank of the last time <= when, so versions recorded exactly at ``when`` count
        q_key = np.where(known & (when != _NAT),
                         u_codes * rank_n + np.searchsorted(all_t, when, side="right") - 1, -1)
        pos = np.searchsorted(ver_key, q_key, side="right") - 1
        has = (pos >= 0) & known & (when != _NAT)
        has[has] = (ver_key[pos[has]] // rank_n) == u_codes[has]
        return has, _take(v_order, np.maximum(pos, 0), has, 0)

    has_ver, at_ver = version_at(t)
    ver_rec = _take(rec, at_ver, has_ver, _NAT)
    with np.errstate(invalid="ignore"):
        from_recency = np.isfinite(rh) & (rh >= 0)
    v_us = np.where(from_recency, t - np.round(np.nan_to_num(rh) * _US_PER_HOUR)
                    .astype(np.int64), np.where(has_ver, ver_rec, created))
    # The text of the version read (the one in force at v_us).
    has_read, at_read = version_at(np.where(from_recency, np.maximum(v_us, created), t))
    statement = _take(events["text"].to_numpy(dtype=object), at_read, has_read, None)
    # A change recorded after the version and in effect by the use.
    c_idx = np.flatnonzero(is_change)
    violated = np.zeros(n, dtype=bool)
    if c_idx.size and n:
        grp = pd.DataFrame({"m": m_codes[c_idx], "rec": rec[c_idx], "eff": eff[c_idx]})
        grp = grp.sort_values(["m", "rec"], kind="stable", ignore_index=True)
        # suffix minimum of the effect time within each memory
        rev = grp.iloc[::-1]
        suffix_min = rev.groupby("m", sort=False)["eff"].cummin().iloc[::-1].to_numpy()
        cm = grp["m"].to_numpy(dtype=np.int64)
        crec = grp["rec"].to_numpy(dtype=np.int64)
        ranks = np.unique(np.concatenate([crec, v_us[known & valid_t]]))
        rn = ranks.size + 2
        ck = cm * rn + np.searchsorted(ranks, crec)
        qk = u_codes * rn + np.searchsorted(ranks, v_us)
        first_after = np.searchsorted(ck, qk, side="right")
        live = known & valid_t & (first_after < ck.size)
        live[live] = cm[first_after[live]] == u_codes[live]
        violated[live] = suffix_min[first_after[live]] <= t[live]
    age = np.where(known & valid_t & (v_us != _NAT),
                   (t - v_us) / _US_PER_HOUR, np.nan).astype(np.float64)
    age[age < 0] = np.nan
    # A memory's kind: the last one its records name (mem0 keeps it on the memory).
    kind_by_code = np.full(max(joined.n_codes, 1), None, dtype=object)
    by_time = np.argsort(rec, kind="stable")
    for code, kind in zip(m_codes[by_time],
                          events["memory_kind"].to_numpy(dtype=object)[by_time], strict=True):
        if kind is not None:
            kind_by_code[code] = kind
    kinds = kind_by_code[np.maximum(u_codes, 0)]
    kinds[~known] = None
    return _Outcome(known=known, created=created, violated=violated,
                    derived={"recency_hours": age}, statement=statement, stamps=rec,
                    memory_kind=kinds)


# ---------------------------------------------------------------------------------------------
# Graphiti / Zep
# ---------------------------------------------------------------------------------------------
def graphiti_edges_to_claims(
    edges: _Source,
    *,
    uses: _Source | None = None,
    decisions: PathLike | Sequence[PathLike] | None = None,
    defaults: Mapping[str, float | bool] | None = None,
    followup_hours: float = 0.0,
    as_of: Any = None,
) -> tuple[pd.DataFrame, AdapterReport]:
    """Claim outcomes from a Graphiti / Zep entity-edge export and the uses of its facts.

    Parameters
    ----------
    edges : path, DataFrame or list of dicts
        Entity edges (see :func:`load_graphiti_edges`).
    uses, decisions, defaults, followup_hours, as_of
        As for :func:`mem0_history_to_claims`, with the edge uuid as the claim id (a uses
        table may name it ``uuid``) and the edges for the history; a use that does not
        carry ``contradiction_flag`` takes it from ``expired_at``, never from ``defaults``.

    Returns
    -------
    claims : DataFrame
        As for :func:`mem0_history_to_claims`, with the edge's ``fact`` as ``statement``
        and ``"graphiti"`` as ``source``.
    report : AdapterReport
    """
    if followup_hours < 0:
        raise ValueError("followup_hours must be >= 0")
    # contradiction_flag is derived from the graph unless the use carries one, whatever
    # ``defaults`` says
    dflt = {**dict(DEFAULT_FEATURES if defaults is None else defaults),
            "contradiction_flag": False}
    table, invalid = load_graphiti_edges(edges)
    joined = _join_uses(table["uuid"], uses, decisions)
    outcome = _graphiti_outcome(table, joined)
    return _assemble("graphiti", joined, (table, invalid), outcome, dflt, as_of, followup_hours)


def _graphiti_outcome(edges: pd.DataFrame, joined: _Joined) -> _Outcome:
    """Whether the edge each use relied on held at the use (see module docs)."""
    t, u_codes = joined.t, joined.use_codes
    where = np.full(max(joined.n_codes, 1), -1, dtype=np.int64)
    where[joined.record_codes] = np.arange(len(edges))
    at = np.where(u_codes >= 0, where[np.maximum(u_codes, 0)], -1)
    known = at >= 0
    j = np.maximum(at, 0)

    def field_us(name: str) -> IntArray:
        return cast(IntArray, _take(edges[name].to_numpy(dtype=np.int64), j, known, _NAT))

    created = np.where(known, field_us("created_us"), _BIG)
    valid_at, invalid_at, expired_at = (field_us("valid_us"), field_us("invalid_us"),
                                        field_us("expired_us"))
    ok_t = t != _NAT
    violated = known & ok_t & (((invalid_at != _NAT) & (invalid_at <= t))
                               | ((valid_at != _NAT) & (valid_at > t)))
    contradicted = (known & ok_t & (expired_at != _NAT) & (expired_at <= t)).astype(np.float64)
    age = np.where(known & ok_t, (t - created) / _US_PER_HOUR, np.nan).astype(np.float64)
    age[age < 0] = np.nan
    derived = {"recency_hours": age,
               "contradiction_flag": np.where(known & ok_t, contradicted, np.nan)}
    stamps = np.concatenate([edges[c].to_numpy(dtype=np.int64) for c in
                             ("created_us", "valid_us", "invalid_us", "expired_us")])
    return _Outcome(known=known, created=created, violated=violated, derived=derived,
                    statement=_take(edges["fact"].to_numpy(dtype=object), j, known, None),
                    stamps=stamps)


# ---------------------------------------------------------------------------------------------
# ``amv-calib ingest --adapter mem0|graphiti``
# ---------------------------------------------------------------------------------------------
_EXPORT_STEMS: Final = {"mem0": ("history", "mem0_history"),
                        "graphiti": ("edges", "graphiti_edges", "entity_edges")}
_EXPORT_ENDINGS: Final = (".json", ".jsonl", ".csv", ".parquet", ".db", ".sqlite", ".sqlite3")
_USES_ENDINGS: Final = (".csv", ".jsonl", ".json", ".parquet")


def _export_files(path: PathLike, store: str) -> tuple[Path, Path | None, list[Path]]:
    p = Path(path)
    if p.is_dir():
        folder = p
        candidates = [folder / f"{stem}{end}" for stem in _EXPORT_STEMS[store]
                      for end in _EXPORT_ENDINGS]
        found = [c for c in candidates if c.is_file()]
        if not found:
            raise DataContractError(
                f"{p}: no {store} export found (expected one of "
                f"{sorted({c.name for c in candidates})})"
            )
        export = found[0]
    elif p.is_file():
        folder, export = p.parent, p
    else:
        raise DataContractError(f"{p} does not exist")
    uses = next((folder / f"uses{end}" for end in _USES_ENDINGS
                 if (folder / f"uses{end}").is_file()), None)
    decisions = sorted(q for q in folder.glob("decisions*.jsonl") if q.is_file())
    if uses is None and not decisions:
        raise DataContractError(
            f"{p}: beside a {store} export put the uses of its memories: a uses table "
            f"(uses.csv / uses.jsonl with claim_id and time) or gate decision logs "
            f"(decisions*.jsonl) in {folder}"
        )
    return export, uses, decisions


def mem0_adapter(path: PathLike) -> pd.DataFrame:
    """``amv-calib ingest --adapter mem0 PATH``: PATH is a mem0 history export (or a folder
    holding ``history.json``/``.jsonl``/``.csv``/``.db``); the uses are read from
    ``uses.csv`` / ``uses.jsonl`` and ``decisions*.jsonl`` in the same folder. Defaults
    as in :func:`mem0_history_to_claims`; the join report is logged at INFO."""
    export, uses, decisions = _export_files(path, "mem0")
    claims, _ = mem0_history_to_claims(export, uses=uses, decisions=decisions or None)
    return claims


def graphiti_adapter(path: PathLike) -> pd.DataFrame:
    """``amv-calib ingest --adapter graphiti PATH``: PATH is a Graphiti edge export (or a
    folder holding ``edges.json``/``.jsonl``/``.csv``); uses as for :func:`mem0_adapter`."""
    export, uses, decisions = _export_files(path, "graphiti")
    claims, _ = graphiti_edges_to_claims(export, uses=uses, decisions=decisions or None)
    return claims
