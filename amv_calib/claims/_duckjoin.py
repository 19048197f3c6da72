"""The label join (:mod:`amv_calib.claims._sql`) run by DuckDB, in process."""

from __future__ import annotations

import contextlib
import functools
import os
import re
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

import numpy as np
import pandas as pd

from amv_calib.claims._arrow import BoolArray, IntArray
from amv_calib.claims._codes import _codes_against, _codes_in, _factorize
from amv_calib.claims._sql import (
    CONFLICTING_OUTCOMES,
    FEW,
    INVALID_USE,
    JOINED,
    NO_OUTCOME_YET,
    RESULTS,
    VALUES_OK,
    join_statements,
)
from amv_calib.contract import CLAIM_FEATURES

if TYPE_CHECKING:
    import duckdb

    from amv_calib.claims._logread import LogEntries


def _cores() -> int:
    """The cores this process may run on (its affinity where the OS tells it)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def connect(*, memory_limit: str | None = None, temp_directory: str | None = None,
            threads: int | None = None) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection: ``threads`` (default: the cores this process may
    use), ``memory_limit`` (DuckDB's default when None: 80% of the RAM) and
    ``temp_directory`` (where it spills past the limit; None: DuckDB's, a ``.tmp`` folder
    made in the working directory only when it spills)."""
    import duckdb

    con = duckdb.connect(":memory:")
    con.execute(f"SET threads = {int(threads or _cores())}")
    con.execute("SET enable_progress_bar = false")
    # every result the join reads is put in order by numpy
    con.execute("SET preserve_insertion_order = false")
    if memory_limit is not None:
        con.execute("SET memory_limit = ?", [memory_limit])
    if temp_directory is not None:
        con.execute("SET temp_directory = ?", [temp_directory])
    return con


#: DuckDB's share of the label join's memory (its tables and hash tables; the log's arrays
#: it reads are the process's): past it, DuckDB spills to the session's folder. By
#: measurement on the 10 M-line bench log, 1 GB lowered the join's peak by 277 MiB (from
#: 2,953 MiB, 80% of the RAM being DuckDB's default) and took no longer.
JOIN_MEMORY_LIMIT: Final = "1GB"


@contextlib.contextmanager
def session() -> Iterator[duckdb.DuckDBPyConnection]:
    """:func:`connect` with :data:`JOIN_MEMORY_LIMIT` and its spill folder a fresh one under
    the system's temporary folder (``TMPDIR``, as the decision log's spill file), removed
    with the connection."""
    with tempfile.TemporaryDirectory(prefix="amv-calib-duckdb-") as tmp:
        con = connect(memory_limit=JOIN_MEMORY_LIMIT, temp_directory=tmp)
        try:
            yield con
        finally:
            con.close()


#: The steps DuckDB runs as views (read once, or cheaper to run again than to store), by
#: measurement on a million-line log; the rest are stored as tables.
VIEWS: Final = frozenset({"signals_used", "live2", "groups3_used", "flags3", "next3_few",
                          "next3", "outcome_state", "use_verdicts"})


@dataclass(frozen=True)
class JoinState:
    """What the SQL join decided (:mod:`amv_calib.claims._sql`'s results, as numpy)."""

    entry_of_use: IntArray | None  # the entry of each use, in use order (None: use i is
    # entry i, every entry a use: the common case, no array of the entries' size built)
    valid: BoolArray
    final: BoolArray
    label: BoolArray
    reason: np.ndarray  # int8: -1 joined by an outcome, else an UNJOINED_REASONS index
    answers: pd.DataFrame  # uid, verifier, confirmed, reliability, n, contrib, first
    outcome_status: np.ndarray  # per outcome record (out_df order), OUTCOME_STATUSES index
    signals_used: int
    entry_use: IntArray | None  # per entry, the position of its use (None: the same)

    @property
    def eid(self) -> IntArray:
        """The entry of each use, in use order."""
        if self.entry_of_use is not None:
            return self.entry_of_use
        return np.arange(self.valid.size, dtype=np.int64)


def signal_weights(reliability: np.ndarray) -> pd.DataFrame:
    """The usable reliabilities and their log-likelihood ratios (the ``weights`` relation)."""
    r = np.unique(reliability[np.isfinite(reliability)])
    r = r[(r > 0.5) & (r <= 1.0)]
    with np.errstate(divide="ignore"):
        w = np.log(r) - np.log1p(-r)
    return pd.DataFrame({"reliability": r, "w": w})


def _ints(codes: np.ndarray, missing: int | None = None) -> Any:
    """Integers as an Arrow array of their width: codes, negative ones (missing) as null;
    or, with ``missing``, any values, that one as null."""
    import pyarrow as pa

    c = np.asarray(codes)
    if c.dtype.kind != "i":
        raise TypeError(f"codes: expected signed integers, not {c.dtype}")
    null = c.size and ((c.min() < 0) if missing is None else (c == missing).any())
    if not null:  # the array is the numpy buffer itself, no mask built
        return pa.array(c)
    return pa.array(c, mask=c < 0 if missing is None else c == missing)


def _strings(values: Any) -> Any:
    """A string column as Arrow (a categorical as a dictionary array: its codes and
    categories, no string per row built)."""
    import pyarrow as pa

    if isinstance(values, pd.Series):
        values = values.array
    if isinstance(values, pd.Categorical):
        codes = np.asarray(values.codes)
        return pa.DictionaryArray.from_arrays(
            pa.array(np.maximum(codes, 0).astype(np.int32), mask=codes < 0),
            pa.array(np.asarray(values.categories, dtype=object), type=pa.string()))
    return pa.array(values, type=pa.string(), from_pandas=True)


def kind_bad(entries: pd.DataFrame) -> BoolArray:
    """Per entry: whether its memory kind breaks the contract's rule (its ``kind_error``
    set; all False when no premise gives a kind)."""
    if "kind_error" not in entries.columns:
        return np.zeros(len(entries), dtype=bool)
    return np.asarray(entries["kind_error"].notna().to_numpy(), dtype=bool)


#: Entries whose values :func:`values_ok` checks at once (about 40 MB of columns).
CHECK_ROWS: Final = 1 << 20


def values_ok(n: int, column: Callable[[str, int, int], np.ndarray], bad_kind: BoolArray
              ) -> BoolArray:
    """:data:`~amv_calib.claims._sql.VALUES_OK` for ``n`` entries, evaluated by DuckDB
    window by window over ``column(name, lo, hi)`` (rows ``lo:hi`` of a claim feature,
    :data:`~amv_calib.contract.CLAIM_FEATURES`, as float64) and ``bad_kind``
    (:func:`kind_bad`'s): the features are never held whole, nor read by the join's steps."""
    import duckdb
    import pyarrow as pa

    out = np.empty(n, dtype=bool)
    con = duckdb.connect(":memory:")  # its own: the caller's may be running the join
    try:
        con.execute("SET threads = 1")
        for lo in range(0, n, CHECK_ROWS):
            hi = min(lo + CHECK_ROWS, n)
            con.register("vals", pa.table({
                **{c: pa.array(np.asarray(column(c, lo, hi), dtype=np.float64))
                   for c in CLAIM_FEATURES}, "kind_bad": pa.array(bad_kind[lo:hi])}))
            out[lo:hi] = con.execute(f"SELECT {VALUES_OK} AS ok FROM vals").fetchnumpy()["ok"]
            con.unregister("vals")
    finally:
        con.close()
    return out


def _positions(n: int) -> IntArray:
    """``0 .. n-1``, int32 when it fits (half the memory touched of int64)."""
    return np.arange(n, dtype=np.int32 if n < 2**31 else np.int64)


def _key_claims(claim: Any, pid: np.ndarray) -> IntArray | None:
    """``pc``: codes of the claim ids of the entries without premise id, -1 elsewhere; None
    when every entry has a premise id (the common case: nothing built)."""
    na = np.flatnonzero(pid < 0)
    if not na.size:
        return None
    out = np.full(pid.size, -1, dtype=np.int64)
    (out[na],) = _factorize(pd.Series(pd.Series(claim, copy=False).array[na]))
    return out


@dataclass(frozen=True)
class Late:
    """A relation that comes in two steps: ``early`` (None: none), the columns the join's
    steps before :data:`READS_LATE` read, and ``whole``, called once, at the first of
    those steps, for the whole relation (it waits for what it is computed from, and starts
    it if ``start`` has not)."""

    early: Any | None
    whole: Callable[[], Any]
    start: Callable[[], None] = lambda: None  # begins building ``whole`` (on threads)


#: The first steps that read the entries' claim codes or the outcomes (the steps before
#: them run while :func:`relations` computes those).
READS_LATE: Final = frozenset({"invalid_uses", "valid_uses"})

#: The step after which the late relations start being built (:attr:`Late.start`): the
#: first, the aggregate over every entry, whose hash table is the join's largest, runs alone
#: (10 M lines: a peak 240 MB lower; the builds still end before :data:`READS_LATE`).
STARTS_LATE: Final = "repeat_actions"

#: The last step that reads the entries' late columns (their claim codes, time, features and
#: kind check): after it :func:`run_join` registers the entries' ``early`` columns alone, and
#: the late ones (about 50 bytes an entry) are freed before the outcome stages run. A later
#: step that read one would fail to bind, not read stale data.
LAST_READS_LATE: Final = "valid_uses"


def relations(log: LogEntries, out_df: pd.DataFrame) -> dict[str, Any]:
    """The input relations of :mod:`amv_calib.claims._sql` of a log read by
    :func:`~amv_calib.claims._logread.read_uses` and of :func:`load_outcomes`'s valid
    records, as Arrow tables (DuckDB scans them in place). The ids become the codes of
    the log's categoricals: only the entries' claim ids are hashed (against the outcomes'
    claims, the few). That, the outcomes' action codes and the columns only the validity
    checks read (times, features) are built on threads while DuckDB runs the steps before
    :data:`READS_LATE`: the entries and the outcomes are :class:`Late`."""
    import pyarrow as pa

    from amv_calib.claims._logread import _NAT

    e = log.entries
    rec = e["rec"].to_numpy().astype(np.int64, copy=False)

    def column(name: str, lo: int, hi: int) -> np.ndarray:
        if log.spilled is not None:
            return log.spilled.read(name, lo, hi)
        return e[name].to_numpy(dtype=np.float64)[lo:hi]

    def checked() -> dict[str, Any]:
        # the columns only the validity checks read: the time and the values' verdict
        t = np.asarray(log.records["t_us"], dtype=np.int64)[rec]
        return {"t_us": _ints(t, missing=_NAT),
                "values_ok": pa.array(values_ok(len(e), column, kind_bad(e)))}

    # what the steps before READS_LATE do not read is built on threads while they run
    # (Arrow's hashing and numpy's gathers hold no GIL), the longest started first
    actions = log.records["action_id"]
    # taken out (popped) by the one call of each Late's ``whole``, so that nothing here
    # holds the late columns once run_join lets them go
    pending: dict[str, Future[Any]] = {}

    @functools.cache  # once, whoever asks first
    def start() -> None:
        pool = ThreadPoolExecutor(max_workers=3, thread_name_prefix="amv-calib-sqljoin")
        pending.update(
            claims=pool.submit(_codes_against, out_df["claim_id"], e["claim_id"]),
            o_action=pool.submit(_codes_in, actions.categories, out_df["action_id"]),
            checked=pool.submit(checked))
        pool.shutdown(wait=False)

    claim_codes: dict[str, Any] = {}

    def claims(side: str) -> Any:
        # the outcomes' ("o") or the entries' ("e") claim codes, each given once
        if not claim_codes:
            start()
            claim_codes["o"], claim_codes["e"] = pending.pop("claims").result()
        return _ints(claim_codes.pop(side))

    # the codes keep the width of the log's (no array of the entries' size copied to widen)
    r_a = np.asarray(actions.codes)
    pid = np.asarray(e["premise_id"].cat.codes)
    pc = _key_claims(e["claim_id"], pid)
    early = pa.table({
        "eid": pa.array(_positions(len(e))), "rec": pa.array(rec),
        "pidx": pa.array(e["pidx"].to_numpy().astype(np.int32, copy=False)),
        "a": _ints(r_a[rec]),
        "pid": _ints(pid), "pc": pa.nulls(len(e)) if pc is None else _ints(pc)})
    s = log.signals
    reliability = s["reliability"].to_numpy().astype(np.float64)
    signals = pa.table({
        "sid": pa.array(np.arange(len(s), dtype=np.int64)),
        "rec": pa.array(s["rec"].to_numpy().astype(np.int64)),
        "pid": _ints(_codes_in(e["premise_id"].cat.categories, s["premise_id"])),
        "verifier": _strings(s["verifier"]),
        "confirmed": pa.array(s["confirmed"].to_numpy().astype(bool)),
        "reliability": pa.array(reliability)})

    def outcomes() -> Any:
        start()
        return pa.table({
            "oid": pa.array(np.arange(len(out_df), dtype=np.int64)),
            "a": _ints(pending.pop("o_action").result()), "c": claims("o"),
            "o_t": pa.array(out_df["t_us"].to_numpy(dtype=np.int64)),
            "v": pa.array(out_df["violated"].to_numpy(dtype=bool))})

    def entries() -> Any:
        start()
        whole = early.append_column("c", claims("e"))
        for name, col in pending.pop("checked").result().items():
            whole = whole.append_column(name, col)
        return whole

    return {"entries": Late(early, entries, start), "signals": signals,
            "weights": signal_weights(reliability), "outcomes": Late(None, outcomes, start)}


def encode(entries: pd.DataFrame, signals: pd.DataFrame, outcomes: pd.DataFrame
           ) -> dict[str, Any]:
    """The input relations from frames that name the ids as strings: ``entries`` (``eid``,
    ``rec``, ``pidx``, ``action_id``, ``premise_id``, ``claim_id``, ``t_us``, the four
    features), ``signals`` (``sid``, ``rec``, ``premise_id``, ``verifier``, ``confirmed``,
    ``reliability``) and ``outcomes`` (``oid``, ``action_id``, ``claim_id``, ``o_t``,
    ``v``); every id numbered in one space per kind (tests and small inputs)."""
    e_a, o_a = _factorize(entries["action_id"], outcomes["action_id"])
    e_c, o_c = _factorize(entries["claim_id"], outcomes["claim_id"])
    e_p, s_p = _factorize(entries["premise_id"], signals["premise_id"])
    rec = entries["rec"].to_numpy(dtype=np.int64)
    ent = pd.DataFrame({
        "eid": entries["eid"].to_numpy(dtype=np.int64), "rec": rec,
        "pidx": entries["pidx"].to_numpy(dtype=np.int32), "a": _masked(e_a),
        "pid": _masked(e_p),
        "pc": _masked(np.full(len(e_p), -1) if (pc := _key_claims(entries["claim_id"], e_p))
                      is None else pc),
        "c": _masked(e_c), "t_us": entries["t_us"].astype("Int64").array,
        "values_ok": values_ok(len(entries),
                               lambda c, lo, hi: entries[c].to_numpy(dtype=np.float64)[lo:hi],
                               kind_bad(entries))})
    sig = pd.DataFrame({
        "sid": signals["sid"].to_numpy(dtype=np.int64),
        "rec": signals["rec"].to_numpy(dtype=np.int64), "pid": _masked(s_p),
        "verifier": signals["verifier"].astype(object),
        "confirmed": signals["confirmed"].to_numpy(dtype=bool),
        "reliability": signals["reliability"].to_numpy(dtype=np.float64)})
    out = pd.DataFrame({
        "oid": outcomes["oid"].to_numpy(dtype=np.int64), "a": _masked(o_a),
        "c": _masked(o_c), "o_t": outcomes["o_t"].to_numpy(dtype=np.int64),
        "v": outcomes["v"].to_numpy(dtype=bool)})
    return {"entries": ent, "signals": sig,
            "weights": signal_weights(sig["reliability"].to_numpy()), "outcomes": out}


def _masked(codes: np.ndarray) -> Any:
    """Codes as a nullable int64 column, -1 as missing."""
    c = np.asarray(codes, dtype=np.int64)
    return pd.arrays.IntegerArray(np.where(c < 0, 0, c), c < 0)


def _verifiers(signals: Any, sid: IntArray) -> Any:
    """The verifiers of the signals ``sid`` (positions) of the ``signals`` relation: a
    categorical from an Arrow table's dictionary column, else an array of the frame's."""
    if isinstance(signals, pd.DataFrame):
        return signals["verifier"].to_numpy()[sid]
    return signals.column("verifier").take(sid).to_pandas().array


def released_after(steps: list[tuple[str, str]], inputs: Sequence[str] = ()
                   ) -> dict[str, list[str]]:
    """For each of the join's ``steps`` (``(name, SELECT)``, in order), the stored steps
    (tables: not :data:`VIEWS`) and the ``inputs`` (input relations) that no later step nor
    reading the results needs once it is created: a relation is read by the steps whose
    statement names it, and through a view by whatever reads the view. The results
    (:data:`~amv_calib.claims._sql.RESULTS`) and what the views among them read are kept."""
    names = [n for n, _ in steps]
    direct = {n: {m for m in [*inputs, *names[:i]] if re.search(rf"\b{m}\b", sql)}
              for i, (n, sql) in enumerate(steps)}

    def reads(n: str) -> set[str]:
        # what creating (a table) or reading (a view) step n reads, views seen through
        out: set[str] = set()
        for m in direct[n]:
            out |= {m} | (reads(m) if m in VIEWS else set())
        return out

    kept: set[str] = set()
    for n in RESULTS:
        kept |= {n} | (reads(n) if n in VIEWS else set())
    last = {m: n for n in names if n not in VIEWS for m in reads(n)}
    released: dict[str, list[str]] = {n: [] for n in names}
    for m, n in last.items():
        if m not in VIEWS and m not in kept:
            released[n].append(m)
    return released


def run_join(con: duckdb.DuckDBPyConnection, rel: dict[str, Any], *, asof: bool = False,
             few: int = FEW, timings: dict[str, float] | None = None) -> JoinState:
    """Register ``rel`` (the input relations of :mod:`amv_calib.claims._sql`), create the
    join's steps and read what it decided (``asof``, ``few``: as
    :func:`~amv_calib.claims._sql.join_statements` takes them). ``timings``, when given,
    receives the seconds of each step (a view's when it is read), of reading the results
    (``fetch``) and of its parts (``fetch.*``).

    ``rel`` is consumed: an input relation leaves it (and DuckDB) after the last step that
    reads it, so that its memory goes before the results are read."""
    entries = rel["entries"]
    if isinstance(entries, Late):
        entries = entries.early
    n_entries = len(entries) if entries is not None else 0
    signals = rel["signals"]  # the answers' verifiers are read from it
    del entries
    late: dict[str, Late] = {}
    for name, table in rel.items():
        if isinstance(table, Late):
            late[name] = table
            table = table.early
        if table is not None:
            con.register(name, table)
    steps = join_statements("duckdb", asof=asof, few=few)
    released = released_after(steps, inputs=list(rel))
    for name, sql in steps:
        t0 = time.perf_counter()
        if late and name in READS_LATE:
            for n, r in late.items():
                con.register(n, r.whole())
            late = {}
            if timings is not None:
                timings["late_relations"] = time.perf_counter() - t0
                t0 = time.perf_counter()
        kind = "VIEW" if name in VIEWS else "TABLE"
        con.execute(f"CREATE OR REPLACE TEMP {kind} {name} AS {sql}")
        if name == STARTS_LATE:
            for r in late.values():
                r.start()
        if name == LAST_READS_LATE and isinstance(rel["entries"], Late):
            con.unregister("entries")  # the late columns go with their last reference
            con.register("entries", rel["entries"].early)
        for done in released[name]:  # its memory back before the next steps take theirs
            if done in rel:
                con.unregister(done)
                del rel[done]
            else:
                con.execute(f"DROP TABLE {done}")
        if timings is not None:
            timings[name] = time.perf_counter() - t0
    return read_state(lambda sql: con.execute(sql).fetchnumpy(), n_entries, signals, timings)


def read_state(query: Callable[[str], Mapping[str, Any]], n_entries: int, signals: Any,
               timings: dict[str, float] | None = None) -> JoinState:
    """What the join decided, read from its results by ``query`` (a SELECT to its columns
    as arrays: DuckDB's or Spark's) for a log of ``n_entries`` premise entries and the
    ``signals`` relation (``timings``: as :func:`run_join`)."""
    t0 = last = time.perf_counter()

    def lap(name: str) -> None:
        # the seconds since the last lap, as ``fetch.name`` (the results read and set out)
        nonlocal last
        if timings is not None:
            now = time.perf_counter()
            timings[f"fetch.{name}"] = now - last
            last = now

    sup = query("SELECT eid, use_eid FROM superseded")
    s_eid = np.asarray(sup["eid"], dtype=np.int64)
    entry_use: IntArray | None = None
    eid: IntArray | None = None
    n_uses = n_entries
    if s_eid.size:
        is_use = np.ones(n_entries, dtype=bool)
        is_use[s_eid] = False
        eid = np.flatnonzero(is_use)
        n_uses = eid.size
        entry_use = np.cumsum(is_use, dtype=np.int64)
        entry_use -= 1  # in place: no second array of the entries' size
        entry_use[s_eid] = np.searchsorted(eid, np.asarray(sup["use_eid"], dtype=np.int64))

    def uses_of(col: Any) -> IntArray:
        e = np.asarray(col, dtype=np.int64)
        return e if eid is None else np.searchsorted(eid, e)

    valid = np.ones(n_uses, dtype=bool)
    lap("superseded")
    valid[uses_of(query("SELECT eid FROM invalid_uses")["eid"])] = False
    lap("invalid_uses")
    reason = np.full(n_uses, NO_OUTCOME_YET, dtype=np.int8)  # (np.where would make int64)
    reason[~valid] = INVALID_USE
    label = np.zeros(n_uses, dtype=bool)
    st = query(f"SELECT eid, label, reason FROM use_verdicts WHERE reason <> {NO_OUTCOME_YET}")
    at = uses_of(st["eid"])
    reason[at] = np.asarray(st["reason"], dtype=np.int8)
    label[at] = np.asarray(st["label"], dtype=bool)
    lap("use_verdicts")
    # numbers alone read back; each answer's verifier is its first signal's (``first``)
    ans = query("SELECT eid, confirmed, reliability, n, contrib, first FROM answers "
                "ORDER BY first")
    first = np.asarray(ans["first"], dtype=np.int64)
    answers = pd.DataFrame({
        "uid": uses_of(ans["eid"]), "verifier": _verifiers(signals, first),
        **{c: np.asarray(ans[c]) for c in ("confirmed", "reliability", "n", "contrib")},
        "first": first})
    lap("answers")
    status = query("SELECT oid, status FROM outcome_state")
    o_status = np.empty(len(status["oid"]), dtype=np.int64)
    o_status[np.asarray(status["oid"], dtype=np.int64)] = status["status"]
    lap("outcome_state")
    used = query("SELECT n FROM signals_used")["n"]
    if timings is not None:
        timings["fetch"] = time.perf_counter() - t0
    return JoinState(
        entry_of_use=eid, valid=valid,
        final=(reason == JOINED) | (reason == CONFLICTING_OUTCOMES), label=label,
        reason=reason, answers=answers, outcome_status=o_status,
        signals_used=int(used[0]), entry_use=entry_use)
