"""The decision-log reader: records and premise entries of gate decision logs, column by column.

:func:`read_uses` reads decision logs into :class:`LogEntries` (one row per premise of each
record, the verifier signals and the offered verifiers); :func:`read_chunks` parses
consecutive bytes of one log (what the Spark engine runs on each split). A block is read by
the compiled extraction (:mod:`amv_calib.claims._logextract`) where it can vouch for every
line, else line by line by the strict line parser: the same result either way. The label
join (:mod:`amv_calib.claims._join`) and the log adapters read logs
through this module.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import gc
import os
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, BinaryIO, Final, Literal, cast

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from amv_calib.claims._arrow import IntArray, strip_ids
from amv_calib.claims._hashing import factorize_strings
from amv_calib.claims._logvalues import (
    _OFFER_COLUMNS,
    _PREMISE_READERS,
    _REC_NUM,
    _REC_STR,
    _REC_STR_READERS,
    _as_float,
    _as_id,
    _kind_columns,
    _no_empty,
    _number_column,
    _offers_table,
    _signals_of,
    entry_kind,
)
from amv_calib.claims._spill import SpilledColumns
from amv_calib.claims._times import MISSING_US, parse_timestamps
from amv_calib.contract import (
    CLAIM_FEATURES,
    LogReadStats,
    loads_line,
    normalize_decision,
    open_regular,
    parse_decision_line,
)
from amv_calib.exceptions import check_choice

PathLike = str | os.PathLike[str]


#: Decision-log bytes parsed per block.
_BLOCK_BYTES: Final = 16 << 20
#: How far past a block's end its last line's end is looked for (:func:`_to_line_end`).
_PEEK_BYTES: Final = 64 << 10
#: Blocks parsed at once, ahead of the one being added: the compiled extraction of a block
#: takes ~8x the time its records take to add (a 10 M-line log's read: one thread 25.7 s,
#: two 18.1 s).
_PARSE_THREADS: Final = 2

#: A time that is missing or did not parse, among int64 microseconds.
_NAT: Final = MISSING_US

#: The entry columns that ``read_uses(spill=True)`` keeps in a temporary file.
SPILLED: Final = (*CLAIM_FEATURES, "p")
#: The entry columns of a premise's memory kind: the kind (null where none is given or it
#: is refused) and why the contract's rule refuses it (null where it does not). An entry
#: frame has them only when some premise of the logs gives a kind.
KIND_COLUMNS: Final = ("memory_kind", "kind_error")


# ---------------------------------------------------------------------------------------------
# Reading decision logs: records and premise entries, column by column
# ---------------------------------------------------------------------------------------------
@dataclass(kw_only=True)
class LogEntries:
    """The premise entries of decision logs, as read by :func:`read_uses`.

    ``entries`` has one row per premise of each record, in file and line order: ``rec``
    (record index over all files), ``pidx`` (position in the record), ``premise_id``
    (categorical), ``claim_id``, the four claim features (float, NaN when missing or of the
    wrong type) and ``p`` (the gate's probability); when some premise gives a memory kind,
    also :data:`KIND_COLUMNS` (categoricals: :func:`entry_kind`'s verdict of each entry).
    ``records`` has the columns of each
    record, indexed by ``rec``: ``file`` (index into the paths), ``line`` (1-based), ``n``
    (its number of premises), ``t_us`` (decision time, int64 UTC microseconds, ``_NAT`` if
    missing or unparseable), ``action_id``, ``tool_name``, ``calibrator`` (``name@version``)
    and ``regime`` (categoricals); read with ``offers=True`` (for the episodes), also
    ``theta`` and ``kappa`` (NaN when missing) and ``has_verifiers`` (the record lists its
    offered verifiers). :meth:`wide` repeats the first eight per entry. ``signals`` has one
    row per verifier signal: ``rec``, ``premise_id``, ``verifier``, ``confirmed``,
    ``reliability``. ``offers`` (a pyarrow table) has one row
    per verifier offered in a record: ``rec``, ``id``, ``resolves`` (list of premise ids),
    ``cost`` and ``reliability`` as declared (null / NaN where missing or of the wrong type).
    ``bad_times`` maps a record index to a time value that did not parse. ``spilled``, when
    the log was read with ``spill=True``, holds the four features and ``p`` (row for row with
    ``entries``, which then lacks them) in a temporary file.
    """

    entries: pd.DataFrame
    signals: pd.DataFrame
    offers: Any
    records: dict[str, Any]
    stats: list[LogReadStats]
    bad_times: dict[int, Any]
    spilled: SpilledColumns | None = None

    def record_values(self, name: str, rec: IntArray) -> Any:
        """Record column ``name`` at the record indexes ``rec``: a numpy array, or a
        categorical sharing the column's categories."""
        col = self.records[name]
        if isinstance(col, pd.Categorical):
            return pd.Categorical.from_codes(col.codes[rec], dtype=col.dtype)
        return col[rec]

    def wide(self) -> pd.DataFrame:
        """``entries`` with their record's columns, as :data:`WIDE_COLUMNS` names them (the
        features and ``p`` only if not spilled; :data:`KIND_COLUMNS` only if read)."""
        e = self.entries
        rec = e["rec"].to_numpy()
        data: dict[str, Any] = {c: e[c] for c in e.columns}
        for name, rcol, dtype in _WIDE_RECORD_COLUMNS:
            values = self.record_values(rcol, rec)
            data[name] = values if dtype is None else np.asarray(values, dtype=dtype)
        return pd.DataFrame({c: data[c] for c in (*WIDE_COLUMNS, *KIND_COLUMNS) if c in data},
                            copy=False)

    @classmethod
    def from_wide(cls, wide: pd.DataFrame, **fields: Any) -> LogEntries:
        """The entries of a frame in :meth:`wide`'s columns whose ``rec`` numbers the records
        0, 1, ... in row order (a record's entries contiguous), with the other fields."""
        rec = wide["rec"].to_numpy()
        first = np.flatnonzero(np.diff(rec, prepend=-1) != 0)
        if rec.size and (first.size != int(rec[-1]) + 1 or rec[0] != 0):
            raise ValueError("from_wide: rec must number the records 0, 1, ... in row order")
        records: dict[str, Any] = {}
        for name, rcol, _ in _WIDE_RECORD_COLUMNS:
            col = wide[name]
            records[rcol] = pd.Categorical.from_codes(col.cat.codes.to_numpy()[first],
                                                      dtype=col.dtype) \
                if isinstance(col.dtype, pd.CategoricalDtype) else col.to_numpy()[first]
        per_record = {n for n, _, _ in _WIDE_RECORD_COLUMNS}
        entries = pd.DataFrame({c: wide[c] for c in wide.columns if c not in per_record},
                               copy=False)
        return cls(entries=entries, records=records, **fields)


#: :meth:`LogEntries.wide`'s record columns: (name per entry, record column, dtype).
_WIDE_RECORD_COLUMNS: Final = (("file", "file", np.int32), ("line", "line", np.int64),
                               ("n_premises", "n", np.int32), ("action_id", "action_id", None),
                               ("tool_name", "tool_name", None),
                               ("calibrator", "calibrator", None), ("regime", "regime", None),
                               ("t_us", "t_us", np.int64))
#: The columns of :meth:`LogEntries.wide`, in order.
WIDE_COLUMNS: Final = ("rec", "file", "line", "pidx", "n_premises", "action_id", "tool_name",
                       "calibrator", "regime", "premise_id", "claim_id", "t_us", *SPILLED)


class EntryAccumulator:
    """Per-block column chunks of records, premise entries and signals."""

    def __init__(self, offers: bool = False, spill: SpilledColumns | None = None) -> None:
        self.want_offers = offers  # read the offered verifiers (for the episodes)
        self.spill = spill  # where the features and p go, if not into ``ent``
        self.n_records = 0
        self.rec: dict[str, list[Any]] = {k: [] for k in ("file", "line", "t_us", "n",
                                                          *_REC_STR, *_REC_NUM)}
        self.offers: list[Any] = []  # pyarrow tables, see LogEntries.offers
        self.ent: dict[str, list[Any]] = {k: [] for k in ("rec", "pidx", "premise_id",
                                                          "claim_id", *CLAIM_FEATURES, "p")}
        self.sig: dict[str, list[Any]] = {k: [] for k in ("rec", "premise_id", "verifier",
                                                          "confirmed", "reliability")}
        self.bad_times: dict[int, Any] = {}
        self.rec_num: dict[str, Any] = {}  # per record: numbers and categoricals
        # per block: its entries' KIND_COLUMNS (Arrow arrays), or its number of entries
        # when none of them gives a kind
        self.kinds: list[tuple[Any, Any] | int] = []

    def add_block(self, file_idx: int, lines: IntArray, rec_str: Mapping[str, Any],
                  times: Any, n_prem: IntArray, ent: Mapping[str, Any],
                  rec_num: Mapping[str, Any], offers: Any) -> None:
        """Append one block: record columns (``rec_str`` as arrow string arrays, ``rec_num``
        as numpy arrays), the raw times (an arrow array or a list of Python values), entry
        columns whose ``rec`` indexes the block's records, and the offered verifiers (a
        pyarrow table whose ``rec`` does too)."""
        import pyarrow as pa
        import pyarrow.compute as pc

        n = int(lines.size)
        base = self.n_records
        t_us = parse_timestamps(times).us(_NAT)
        for i in np.flatnonzero(t_us == _NAT).tolist():
            raw = times[i].as_py() if isinstance(times, (pa.Array, pa.ChunkedArray)) else times[i]
            if raw is not None:
                self.bad_times[base + i] = raw
        r = self.rec
        r["file"].append(np.full(n, file_idx, dtype=np.int32))
        r["line"].append(lines.astype(np.int64))
        r["t_us"].append(t_us)
        r["n"].append(n_prem.astype(np.int32))
        for k in _REC_NUM:
            r[k].append(np.asarray(rec_num[k], dtype=bool) if k == "has_verifiers"
                        else _number_column(rec_num[k]))
        if offers.num_rows:
            offers = offers.set_column(0, "rec", pc.add(offers.column("rec"),
                                                        pa.scalar(base, pa.int64())))
            for k in ("cost", "reliability"):
                offers = offers.set_column(offers.schema.get_field_index(k), k,
                                           pa.array(_number_column(offers.column(k))))
            self.offers.append(offers)
        for k in _REC_STR:
            arr = rec_str[k] if isinstance(rec_str[k], pa.Array) \
                else pa.array(rec_str[k], type=pa.string())
            # few distinct values: keep them dictionary-encoded while the log is read
            r[k].append(arr if k == "action_id" else arr.dictionary_encode())
        e = self.ent
        e["rec"].append(np.asarray(ent["rec"], dtype=np.int64) + base)
        e["pidx"].append(np.asarray(ent["pidx"], dtype=np.int32))
        for k in ("premise_id", "claim_id"):
            arr = ent[k] if isinstance(ent[k], pa.Array) else pa.array(ent[k], type=pa.string())
            # docs/data.md: one claim, whatever the spaces (block by block: while the next
            # block is parsed, not after the last)
            e[k].append(arr.dictionary_encode() if k == "premise_id"
                        else _no_empty(strip_ids(arr)))
        if self.spill is not None:
            self.spill.append({k: _number_column(ent[k]) for k in SPILLED})
        else:
            for k in SPILLED:
                e[k].append(_number_column(ent[k]))
        kinds = ent.get("kinds")
        self.kinds.append(len(ent["rec"]) if kinds is None else kinds)
        self.n_records += n

    def add_signals(self, rec_local: Any, premise_id: Any, verifier: Any, confirmed: Any,
                    reliability: Any, base: int) -> None:
        """Append one block's signals (sequences or arrays; ``rec_local`` indexes the
        block's records), kept as arrays: a log's million signals as Python objects took
        ~0.1 GB, and their interleaving with the read's short-lived objects kept as much
        again in Python's allocator after they were freed."""
        import pyarrow as pa

        s = self.sig
        s["rec"].append(np.asarray(rec_local, dtype=np.int64) + base)
        for k, v in (("premise_id", premise_id), ("verifier", verifier)):
            s[k].append(v if isinstance(v, pa.Array) else pa.array(v, type=pa.string()))
        s["confirmed"].append(np.asarray(confirmed, dtype=bool))
        s["reliability"].append(_number_column(reliability))

    def finish(self) -> tuple[pd.DataFrame, pd.DataFrame]:
        """The entries and signals frames; the chunks are released as they are joined."""
        import pyarrow as pa

        r, e = self.rec, self.ent
        pool = pa.default_memory_pool()

        def cat(d: dict[str, list[Any]], k: str) -> pd.Categorical:
            chunks = [c for c in d.pop(k) if len(c)]  # an empty block adds no chunk
            if not chunks:
                return pd.Categorical.from_codes(np.zeros(0, np.int64),
                                                 categories=pd.Index([], dtype="str"))
            if pa.types.is_dictionary(chunks[0].type):
                enc = pa.chunked_array(chunks).unify_dictionaries()
            else:  # the action ids: most are distinct, many millions in a big log
                coded = factorize_strings(chunks)
                if coded is not None:
                    del chunks
                    return pd.Categorical.from_codes(coded[0], dtype=distinct_categories(
                        pd.Index(coded[1].to_pandas(), dtype="str")))
                # two ids share a hash (never seen): Arrow's exact hash table
                enc = pa.chunked_array(chunks, type=pa.string()).dictionary_encode()
            del chunks
            if not enc.num_chunks:  # no record at all (an empty file, or nothing new)
                return pd.Categorical.from_codes(np.zeros(0, np.int64),
                                                 categories=pd.Index([], dtype="str"))
            codes = np.concatenate([c.indices.fill_null(-1).to_numpy(zero_copy_only=False)
                                    for c in enc.chunks]).astype(np.int64)
            cats = pd.Index(enc.chunks[0].dictionary.to_pandas(), dtype="str")
            return pd.Categorical.from_codes(codes, dtype=distinct_categories(cats))

        def cat_np(d: dict[str, list[Any]], k: str, dtype: Any) -> NDArray[Any]:
            chunks = d.pop(k)
            out = np.concatenate(chunks).astype(dtype, copy=False) if chunks \
                else np.zeros(0, dtype)
            del chunks
            # Most chunks were views of Arrow's buffers: its allocator keeps freed pages
            # for reuse, and the joined columns are numpy's, so without this every column
            # would be held twice at the end of a big read (10 M lines: +1.5-2 GB).
            pool.release_unused()
            return out

        per_rec = self.rec_num
        for k, dtype in (("file", np.int32), ("line", np.int64), ("n", np.int32)):
            per_rec[k] = cat_np(r, k, dtype)
        per_rec["t_us"] = cat_np(r, "t_us", np.int64)
        # the read's freed temporaries go back before the action ids' hash table is built
        _trim_heap()
        for k in _REC_STR:
            per_rec[k] = cat(r, k)
        for k in _REC_NUM:
            if self.want_offers:
                per_rec[k] = cat_np(r, k, bool if k == "has_verifiers" else np.float64)
            else:  # only the episodes read them (~16 bytes a record)
                del r[k]
        # the entries hold their own columns only: the record columns stay per record
        # (a 10 M-line log's 25 M entries would repeat them, ~0.75 GB)
        data: dict[str, Any] = {"rec": cat_np(e, "rec", np.int64),
                                "pidx": cat_np(e, "pidx", np.int32),
                                "premise_id": cat(e, "premise_id")}
        claim = pa.chunked_array(e.pop("claim_id"), type=pa.string()).combine_chunks()
        data["claim_id"] = pd.array(claim, dtype="str")
        del claim
        if self.spill is not None:
            self.spill.finish_writing()
        else:
            for k in SPILLED:
                data[k] = cat_np(e, k, np.float64)
        if any(not isinstance(k, int) for k in self.kinds):
            for j, name in enumerate(KIND_COLUMNS):
                e[name] = [(pa.nulls(k, pa.string()) if isinstance(k, int) else k[j]
                            ).dictionary_encode() for k in self.kinds]
                data[name] = cat(e, name)
        self.kinds = []
        entries = pd.DataFrame(data, copy=False)  # no consolidation copy of ~80 B per entry
        del data
        s = self.sig

        def strings(k: str) -> Any:
            return pd.array(pa.concat_arrays(s[k]) if s[k] else pa.array([], pa.string()),
                            dtype="str")

        signals = pd.DataFrame({
            "rec": cat_np(s, "rec", np.int64),
            "premise_id": strings("premise_id"),
            "verifier": strings("verifier"),
            "confirmed": cat_np(s, "confirmed", bool),
            "reliability": cat_np(s, "reliability", np.float64),
        })
        _trim_heap()
        return entries, signals


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``, or None where the C library has none."""
    import ctypes

    try:
        return cast(Callable[[int], int], ctypes.CDLL(None).malloc_trim)
    except (OSError, AttributeError, TypeError):  # not glibc (or no C library to load)
        return None


def _trim_heap() -> None:
    """Hand the free pages of the C heap back to the system, where the C library can.

    A read frees the per-block chunks as it joins them (and the temporaries of each block
    before): below glibc's mmap threshold, they were allocated from its heap, which keeps
    the freed pages, so the process would hold them through the join (10 M lines: 0.1 GB
    of its peak, measured with the join on DuckDB).
    """
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


def distinct_categories(categories: pd.Index) -> pd.CategoricalDtype:
    """The categorical dtype of ``categories`` known to be distinct (an Arrow dictionary).

    pandas checks that categories are distinct by building a Python string for each and a
    hash table of them: for a log's million action ids ~2.4 s and ~100 MiB (kept for the
    frame's life), for nothing when Arrow's dictionary encoding made them. Its constructor
    without the check is private, so the checked one stands in should it go.
    """
    fastpath = getattr(pd.CategoricalDtype, "_from_fastpath", None)
    if fastpath is None:  # a pandas without the private constructor
        return pd.CategoricalDtype(categories)
    return cast(pd.CategoricalDtype, fastpath(categories, False))


def _python_records(recs: Sequence[tuple[int, Mapping[str, Any]]], file_idx: int,
                    acc: EntryAccumulator) -> None:
    """Add records ``(line, record as parsed)`` through plain Python (each normalised here;
    the memory kinds are read from the premises as given, :func:`entry_kind`)."""
    rec_str: dict[str, list[Any]] = {k: [] for k in _REC_STR}
    lines = np.fromiter((ln for ln, _ in recs), dtype=np.int64, count=len(recs))
    raw_times: list[Any] = []
    n_prem = np.zeros(len(recs), dtype=np.int64)
    ent: dict[str, Any] = {k: [] for k in ("rec", "pidx", "premise_id", "claim_id",
                                           *CLAIM_FEATURES, "p")}
    sig: dict[str, list[Any]] = {k: [] for k in ("rec", "premise_id", "verifier",
                                                 "confirmed", "reliability")}
    rec_num: dict[str, list[Any]] = {k: [] for k in _REC_NUM}
    off: dict[str, list[Any]] = {k: [] for k in _OFFER_COLUMNS}
    kinds: list[str | None] = []
    why: list[str | None] = []
    for i, (_, raw) in enumerate(recs):
        rec = normalize_decision(raw)
        raw_times.append(rec.get("time"))
        rec_num["theta"].append(_as_float(rec.get("theta")))
        rec_num["kappa"].append(_as_float(rec.get("kappa")))
        offered = rec.get("verifiers") if acc.want_offers else None
        rec_num["has_verifiers"].append(isinstance(offered, list))
        for v in offered if isinstance(offered, list) else ():
            vm = v if isinstance(v, Mapping) else {}
            res = vm.get("resolves_premise_ids")
            off["rec"].append(i)
            off["id"].append(_as_id(vm.get("id")))
            off["resolves"].append(
                [str(x) for x in res] if isinstance(res, list)
                and all(isinstance(x, str) for x in res) else None)
            off["cost"].append(_as_float(vm.get("execution_cost")))
            off["reliability"].append(_as_float(vm.get("symmetric_reliability")))
        for col, read in _REC_STR_READERS:
            rec_str[col].append(read(rec.get(col)))
        premises = rec.get("premises")
        plist = premises if isinstance(premises, list) else []
        n_prem[i] = len(plist)
        # "premises" has one spelling: the normalised list is the given one, item for item
        given: list[Any] = raw["premises"] if isinstance(premises, list) else []
        for idx, prem in enumerate(plist):
            pm = prem if isinstance(prem, Mapping) else {}
            ent["rec"].append(i)
            ent["pidx"].append(idx)
            for col, key, read in _PREMISE_READERS:
                ent[col].append(read(pm.get(key)))
            kind, reason = entry_kind(given[idx]) if isinstance(given[idx], Mapping) \
                else (None, None)
            kinds.append(kind)
            why.append(reason)
        _signals_of(rec.get("verifier_calls"), i, sig)
    if any(k is not None for k in kinds) or any(r is not None for r in why):
        import pyarrow as pa

        ent["kinds"] = (pa.array(kinds, type=pa.string()), pa.array(why, type=pa.string()))
    base = acc.n_records
    acc.add_block(file_idx, lines, rec_str, raw_times, n_prem, ent, rec_num,
                  _offers_table(off))
    acc.add_signals(sig["rec"], sig["premise_id"], sig["verifier"], sig["confirmed"],
                    sig["reliability"], base)


@dataclass(frozen=True)
class _Parsed:
    """What :func:`_parse_block` found in a block: its number of lines and its columns as
    the compiled extraction took them (None if the block needs the line parser)."""

    n_lines: int
    extracted: Any


def _parse_block(block: bytes, offers: bool) -> _Parsed:
    """The compiled extraction of a block of complete lines (``block`` ends with a
    newline), which holds no GIL: run on a thread while the previous block's records are
    taken apart (:func:`read_chunks`)."""
    from amv_calib.claims._logextract import extract_block, line_bounds

    starts, ends = line_bounds(block)
    return _Parsed(n_lines=starts.size, extracted=extract_block(block, starts, ends, offers))


def _columnar_block(parsed: _Parsed, file_idx: int, first_line: int,
                    acc: EntryAccumulator) -> bool:
    """Add a block of complete lines the compiled extraction took (``parsed``); False if
    it needs the line parser."""
    import pyarrow.compute as pc

    ext = parsed.extracted
    if ext is None:
        return False
    s = ext.record_strings
    version = _no_empty(s["calibrator_version"])
    name = _no_empty(s["calibrator_name"])
    rec_str = {
        "action_id": _no_empty(s["action_id"]),
        "tool_name": _no_empty(s["tool_name"]),
        "calibrator": pc.if_else(pc.is_valid(version),
                                 pc.binary_join_element_wise(name, version, "@"), name),
        "regime": _no_empty(s["regime"]),
    }
    lens = ext.n_premises
    total = int(lens.sum())
    ent: dict[str, Any] = {
        "rec": ext.parents,
        "pidx": np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(lens) - lens, lens),
        "premise_id": _no_empty(ext.premise_id),
        "claim_id": _no_empty(ext.claim_id),
        **ext.entry_numbers, "contradiction_flag": ext.contradiction_flag,
        "kinds": _kind_columns(ext.kinds),
    }
    rec_num = {**ext.record_numbers, "has_verifiers": ext.has_verifiers}
    offers = ext.offers if ext.offers is not None else {k: [] for k in _OFFER_COLUMNS}
    if ext.offers is not None:
        offers = {**offers, "id": _no_empty(offers["id"])}
    sig = ext.signals
    base = acc.n_records
    acc.add_block(file_idx, np.arange(first_line, first_line + parsed.n_lines, dtype=np.int64),
                  rec_str, s["time"], lens, ent, rec_num, _offers_table(offers))
    if len(sig["rec"]):
        acc.add_signals(sig["rec"], sig["premise_id"], sig["verifier"], sig["confirmed"],
                        sig["reliability"], base)
    return True


def _json_object(raw: bytes) -> dict[str, Any]:
    """``raw`` as a JSON object, each key given once; ValueError (UnicodeDecodeError) if it is
    anything else."""
    obj = loads_line(raw)
    if not isinstance(obj, dict):
        raise ValueError(f"expected a JSON object, got {type(obj).__name__}")
    return obj


def _parse_lines(data: bytes, first_line: int, st: LogReadStats, name: str,
                 on_corrupt: str) -> list[tuple[int, dict[str, Any]]]:
    """The records of the lines of ``data`` (as parsed), numbered from ``first_line``.

    Blank lines are counted; a line that is not a JSON object raises or is skipped as
    ``on_corrupt`` says, except an unterminated last line (``data`` not ending in a newline),
    which a writer was cut off in: that one is always skipped as torn.
    """
    lines = data.split(b"\n")
    complete = data.endswith(b"\n")
    if complete:
        lines.pop()
    out: list[tuple[int, dict[str, Any]]] = []
    for i, raw in enumerate(lines):
        lineno = first_line + i
        if not raw.strip():
            st.blank += 1
            continue
        obj = parse_decision_line(raw, name=name, lineno=lineno,
                                  last=not complete and i == len(lines) - 1,
                                  on_corrupt=on_corrupt, stats=st, stacklevel=4)
        if obj is None:
            continue
        out.append((lineno, obj))
    return out


def _read_one_log(path: PathLike, file_idx: int, on_corrupt: str, columnar: bool,
                  acc: EntryAccumulator, span: tuple[int, int, int] | None = None) -> LogReadStats:
    name = os.fspath(path)
    start, stop, first_line = (0, -1, 1) if span is None else span
    with open_regular(name, what="decision log") as fh:
        fh.seek(start)
        left = [stop - start if stop >= 0 else -1]

        def block() -> bytes:
            if left[0] == 0:
                return b""
            size = _BLOCK_BYTES if left[0] < 0 else min(_BLOCK_BYTES, left[0])
            if left[0] < 0 or left[0] > size:
                size = _to_line_end(fh, size, left[0])
            data = fh.read(size)
            if left[0] > 0:
                left[0] -= len(data)
            return data

        return read_chunks(iter(block, b""), name, file_idx, first_line, on_corrupt,
                            columnar, acc)


@contextlib.contextmanager
def _collector_paused() -> Generator[None, None, None]:
    """Pause Python's cyclic garbage collector while a log is read, if it runs.

    The reader builds many short-lived containers (the verifier calls' JSON objects, the
    per-block lists) and keeps none in a reference cycle, so the collector finds nothing;
    but each pass re-scans every tracked object the process holds: ~0.4 s of a 1 M-line
    read (``bench/bench_labels.py``). It runs again afterwards, also on an error; a caller
    that paused it itself keeps it paused.
    """
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _to_line_end(fh: BinaryIO, size: int, left: int) -> int:
    """``size`` grown to the end of the line it ends in (at most :data:`_PEEK_BYTES` more,
    and not past ``left`` bytes if ``left >= 0``), so that a block read is whole lines and
    :func:`_blocks` passes it on without a copy; ``size`` if the line is longer."""
    here = fh.tell()
    fh.seek(here + size)
    peek = fh.read(_PEEK_BYTES)
    fh.seek(here)
    nl = peek.find(b"\n")
    if nl < 0 or (left >= 0 and size + nl + 1 > left):
        return size
    return size + nl + 1


def _blocks(chunks: Iterable[bytes], tail: list[bytes]) -> Iterator[bytes]:
    """The consecutive blocks of complete lines in ``chunks``; the bytes after the last
    newline are appended to ``tail`` at the end."""
    carry = b""
    for data in chunks:
        cut = data.rfind(b"\n") + 1
        if not cut:
            carry += data
            continue
        # one copy of the block at most (none when a chunk ends a line and nothing is carried)
        block = data if not carry and cut == len(data) else \
            b"".join((carry, memoryview(data)[:cut]))
        carry = data[cut:]
        yield block
    tail.append(carry)


def _result(parsing: tuple[bytes, Future[_Parsed]]) -> tuple[bytes, _Parsed]:
    return parsing[0], parsing[1].result()


def read_chunks(chunks: Iterable[bytes], name: str, file_idx: int, first_line: int,
                 on_corrupt: str, columnar: bool, acc: EntryAccumulator) -> LogReadStats:
    """Read the lines of ``chunks`` (consecutive bytes of the log ``name``, starting at the
    start of line ``first_line``) into ``acc``; the Spark engine reads a file's byte ranges
    with it (:mod:`amv_calib.spark._label`).

    With ``columnar``, the next blocks are parsed on :data:`_PARSE_THREADS` threads (the
    compiled extraction holds no GIL) while this one's records are taken apart in Python;
    blocks are added in order, so the result does not depend on it.
    """
    st = LogReadStats()
    records_before = acc.n_records
    next_line = first_line

    def add(block: bytes, parsed: _Parsed | None) -> None:
        nonlocal next_line
        n = block.count(b"\n") if parsed is None else parsed.n_lines
        if parsed is None or not _columnar_block(parsed, file_idx, next_line, acc):
            recs = _parse_lines(block, next_line, st, name, on_corrupt)
            if recs:
                _python_records(recs, file_idx, acc)
        next_line += n
        st.lines += n

    tail: list[bytes] = []
    with _collector_paused():
        if columnar:
            with ThreadPoolExecutor(max_workers=_PARSE_THREADS,
                                    thread_name_prefix="amv-calib-parse") as pool:
                ahead: collections.deque[tuple[bytes, Future[_Parsed]]] = collections.deque()
                for block in _blocks(chunks, tail):
                    ahead.append((block, pool.submit(_parse_block, block, acc.want_offers)))
                    if len(ahead) > _PARSE_THREADS:
                        add(*_result(ahead.popleft()))
                while ahead:
                    add(*_result(ahead.popleft()))
        else:
            for block in _blocks(chunks, tail):
                add(block, None)
        if tail[0]:  # the last line, without its newline
            st.lines += 1
            recs = _parse_lines(tail[0], next_line, st, name, on_corrupt)
            if recs:
                _python_records(recs, file_idx, acc)
    st.records = acc.n_records - records_before
    return st


def read_uses(
    paths: PathLike | Sequence[PathLike],
    *,
    on_corrupt: Literal["raise", "skip"] = "raise",
    columnar: bool = True,
    offers: bool = False,
    spans: Sequence[tuple[int, int, int] | None] | None = None,
    spill: bool = False,
) -> LogEntries:
    """Read decision logs into one row per premise entry (see :class:`LogEntries`).

    Parameters
    ----------
    paths : path or sequence of paths
        Decision logs (JSON lines), read in the order given.
    on_corrupt : {"raise", "skip"}, default "raise"
        As in :func:`amv_calib.contract.read_decision_log`.
    columnar : bool, default True
        Read blocks of well-formed lines column by column (several times faster), by the
        compiled extraction; a block it does not vouch for (bytes >= 0x80, escapes in the
        values read, values of other types than it reads, blank lines, a corrupt line)
        falls back to the line parser, which gives the same result.
    offers : bool, default False
        Also read each record's offered verifiers (``LogEntries.offers``), which the
        episodes need, and the records' ``theta``, ``kappa`` and ``has_verifiers``;
        without it ``offers`` is empty and the records lack those three.
    spans : sequence of (start, stop, first_line) or None, optional
        Per file, read only the bytes ``[start, stop)`` (``stop`` -1: to the end), which
        begin at the start of line ``first_line``: what a monitor that has read the rest
        before reads (:mod:`amv_calib.monitoring`). None reads every file whole.
    spill : bool, default False
        Keep the four claim features and ``p`` in a temporary file (``LogEntries.spilled``,
        ~40 bytes an entry of temporary disk) instead of ``entries``: the label join reads
        them back as it checks them and writes its rows.
    """
    check_choice("on_corrupt", on_corrupt, ("raise", "skip"))
    plist = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
    if spans is not None and len(spans) != len(plist):
        raise ValueError(f"spans: {len(spans)} given for {len(plist)} files")
    acc = EntryAccumulator(offers, SpilledColumns(SPILLED) if spill else None)
    with _collector_paused():
        stats = [_read_one_log(p, i, on_corrupt, columnar, acc,
                               None if spans is None else spans[i])
                 for i, p in enumerate(plist)]
        if not acc.rec["file"]:
            _python_records([], 0, acc)
        entries, signals = acc.finish()
    import pyarrow as pa

    offers = (pa.concat_tables(acc.offers) if acc.offers
              else _offers_table({k: [] for k in _OFFER_COLUMNS}))
    return LogEntries(entries=entries, signals=signals, offers=offers, records=acc.rec_num,
                      stats=stats, bad_times=acc.bad_times, spilled=acc.spill)
