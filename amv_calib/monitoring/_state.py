"""The monitor's incremental state: what was read, what was counted, what still waits.

A folder (``OUT/monitor.state``) holds:

- ``state.json``: the scope (artifact name and version, go-live, ``since``, window width,
  loss margin, label horizon: any change restarts from scratch), per decision file its
  identity (device, inode, sha256 of its first bytes) and the byte offset and line read
  up to, the per-day buckets of the sequential statistics, the counts, the frozen
  descriptive statistics of closed windows, and the pending partitions;
- ``outcomes.u64``: the sorted hashes of the outcome records seen (new ones select the
  pending uses to join again);
- ``window.npz``: the latest window's raw values (its descriptive statistics);
- ``pending-NNNNNN.arrow`` (Arrow IPC, memory-mapped) with ``pending-NNNNNN.mask-S.npy``
  and its key hashes sorted with their rows (``.akey.npy``, ``.akey-order.npy``, the same
  for ``ckey``): the decision-log
  entries of actions not yet fully labelled, in scope, within the label horizon, and per
  entry whether it was counted (and as what) and whether its action is done.

Files are written under new names and ``state.json`` is replaced atomically last, so a run
killed half-way leaves the previous state whole.

Binding. ``state.json`` names its format's version, its scope (the artifact's manifest
digest included), the logs' identities and offsets, and the sha256 of every other file of
the state; ``state.sha256`` beside it holds the sha256 of its bytes. Every name it gives
must be one this module writes (no path, no ``..``), and every file is opened without
following links and must be a regular file (a FIFO is refused, never waited on). A state
that does not check out is never continued: :meth:`MonitorState.load` says why and the run
rebuilds from the logs. The digests catch an edit, a torn save and a stale file; they do
not stop someone who rewrites them too, which is why de-risking acts only on evidence
recomputed from the logs in that run.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from amv_calib.claims.engine import GOLDEN, mix64, sort_keys
from amv_calib.contract import open_regular
from amv_calib.exceptions import ConfigError
from amv_calib.monitoring._sequential import DayBuckets

STATE_DIR: Final = "monitor.state"
STATE_FILE: Final = "state.json"
DIGEST_FILE: Final = "state.sha256"
_FORMAT: Final = "amv-calib/monitor-state"
#: 2: hash_strings of FNV-1a; 3: hash_rows of outcomes; 4: one-sided calibration buckets,
#: the state bound to its files' digests and the artifact
_FORMAT_VERSION: Final = 4
#: The names of the files a state may give (anything else, a path above all, is refused).
_NAME: Final = re.compile(r"(window-[0-9]{1,12}\.npz|outcomes-[0-9]{1,12}\.u64"
                          r"|pending-[0-9]{6,12}\.(arrow|mask-[0-9]{1,12}\.npy"
                          r"|(akey|ckey)(-order)?\.npy))")
_MAX_STATE_BYTES: Final = 1 << 30  # state.json: the frozen windows and buckets, far below
_HEAD_BYTES: Final = 4096
_TAIL_BLOCK: Final = 1 << 16
#: Beside each pending partition: its key hashes sorted, and the rows in that order.
_INDEX_FILES: Final = ("akey", "akey-order", "ckey", "ckey-order")
_WRITE_ROWS: Final = 1 << 20  # rows of a pending partition taken and written at a time

U64Array = NDArray[np.uint64]
BoolArray = NDArray[np.bool_]
IntArray = NDArray[np.int64]


def hash_rows(columns: Sequence[NDArray[Any]]) -> U64Array:
    """A 64-bit hash of each row of integer-like columns (key hashes, times, flags), in
    column order: how the outcome records already seen are recognised."""
    n = len(columns[0]) if columns else 0
    h = np.zeros(n, dtype=np.uint64)
    for col in columns:
        h = mix64((h * GOLDEN) ^ np.asarray(col).astype(np.int64).view(np.uint64))
    return h


def unique_keys(keys: NDArray[Any]) -> NDArray[Any]:
    """``np.unique`` of hash keys or row numbers, by sorting: numpy 2's ``unique`` (a hash
    table) and ``union1d`` take 15-35x longer on a million random keys."""
    out = np.sort(keys)
    if out.size:
        out = out[np.concatenate([[True], out[1:] != out[:-1]])]
    return out


def is_in(keys: U64Array, among: U64Array) -> BoolArray:
    """Whether each of ``keys`` is one of ``among``: ``np.isin``'s answer, by sorting both
    and searching (``np.isin`` sorts with a stable argsort, some 20x slower on millions of
    hashes; searching in key order keeps the search in cache)."""
    if not len(among) or not len(keys):
        return np.zeros(len(keys), dtype=bool)
    ref = np.sort(among)
    order = np.argsort(keys)
    pos = np.minimum(np.searchsorted(ref, keys[order]), len(ref) - 1)
    out = np.empty(len(keys), dtype=bool)
    out[order] = ref[pos] == keys[order]
    return out


def complete_end(path: str, size: int) -> int:
    """The byte offset just after the last newline of the file's first ``size`` bytes (a
    line still being written is read next time)."""
    with open(path, "rb") as fh:
        pos = size
        while pos > 0:
            start = max(0, pos - _TAIL_BLOCK)
            fh.seek(start)
            block = fh.read(pos - start)
            cut = block.rfind(b"\n")
            if cut >= 0:
                return start + cut + 1
            pos = start
    return 0


def _head_sha(path: str, n: int) -> str:
    with open(path, "rb") as fh:
        return hashlib.sha256(fh.read(n)).hexdigest()


def _open_regular(path: Path) -> int:
    """A read descriptor of ``path``: not followed if a link, not waited on if a FIFO, and
    refused (OSError naming it) unless a regular file."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) \
        | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)
    fd = os.open(path, flags)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(f"{path.name} is not a regular file")
    return fd


def read_regular(path: Path, limit: int = _MAX_STATE_BYTES) -> bytes:
    """The bytes of a regular file (:func:`_open_regular`), at most ``limit``."""
    fd = _open_regular(path)
    with os.fdopen(fd, "rb") as fh:
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise OSError(f"{path.name} is larger than {limit} bytes")
    return data


def file_sha256(path: Path) -> str:
    """sha256 of a regular file's bytes (:func:`_open_regular`), read in blocks."""
    h = hashlib.sha256()
    with os.fdopen(_open_regular(path), "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def state_name(name: Any, field_name: str) -> str:
    """``name`` if it is one of the names a state writes, else ValueError naming the field."""
    if not isinstance(name, str) or _NAME.fullmatch(name) is None:
        raise ValueError(f"{field_name} = {name!r} is not a file name of a monitor state")
    return name


@dataclass(kw_only=True)
class FileMark:
    """One decision file: identity and how far it was read."""

    path: str
    dev: int
    ino: int
    head_len: int
    head_sha256: str
    offset: int = 0
    lines: int = 0

    def to_dict(self) -> dict[str, Any]:
        """Plain data."""
        return dict(vars(self))


def require_readable_log(path: str | os.PathLike[str]) -> None:
    """Raise :class:`ConfigError` naming ``path`` unless it is a readable regular file whose
    size is what it holds.

    The monitor reads a log up to its size: a file that says size 0 but fails to read
    (``/proc/self/mem``) or holds bytes (``/proc``'s other files) would pass as empty.
    """
    with open_regular(path, what="decision log", error=ConfigError) as fh:
        size = os.fstat(fh.fileno()).st_size
        first = fh.read(1)  # a read error is raised naming the file
    if size == 0 and first:
        raise ConfigError(f"{os.fspath(path)}: decision log reports size 0 but holds bytes "
                          f"(a special file): copy it to a regular file")


def plan_reads(paths: Sequence[str], marks: list[FileMark]
               ) -> tuple[list[int], list[tuple[int, int, int]], str | None]:
    """Per path its index among ``marks`` (new files appended) and the span to read.

    A file is known by device and inode, and checked by the sha256 of the first bytes
    seen; a known file that is shorter than what was read, or whose first bytes changed,
    was truncated or rewritten: the returned reason asks for a rebuild.
    """
    index: list[int] = []
    spans: list[tuple[int, int, int]] = []
    by_id = {(m.dev, m.ino): i for i, m in enumerate(marks)}
    for p in paths:
        st = os.stat(p)
        end = complete_end(p, st.st_size)
        i = by_id.get((st.st_dev, st.st_ino))
        if i is not None:
            m = marks[i]
            if st.st_size < m.offset:
                return [], [], (f"{p} is shorter ({st.st_size} bytes) than what was read "
                                f"({m.offset}): truncated or replaced")
            if _head_sha(p, m.head_len) != m.head_sha256:
                return [], [], f"{p}: its first {m.head_len} bytes changed: rewritten"
            m.path = os.fspath(p)
            spans.append((m.offset, end, m.lines + 1))
        else:
            head = min(st.st_size, _HEAD_BYTES)
            marks.append(FileMark(path=os.fspath(p), dev=st.st_dev, ino=st.st_ino,
                                  head_len=head, head_sha256=_head_sha(p, head)))
            i = len(marks) - 1
            by_id[(st.st_dev, st.st_ino)] = i
            spans.append((0, end, 1))
        index.append(i)
    return index, spans, None


# -- the pending store ---------------------------------------------------------------------
@dataclass(kw_only=True)
class Partition:
    """One pending partition: its entries file, mask file and what it spans."""

    part: int
    rows: int
    mask: str
    t_min: int
    t_max: int

    @property
    def file(self) -> str:
        """The Arrow IPC file of its entries."""
        return f"pending-{self.part:06d}.arrow"


@dataclass(kw_only=True)
class Pending:
    """Entries waiting for labels, partitioned by the run that read them.

    Columns of a partition: the decision-log entry columns of
    :class:`amv_calib.claims.LogEntries` (``file`` indexes the state's files), ``akey`` /
    ``ckey`` (hashes of the action and claim id) and ``recid`` (the record, unique within
    the partition). Its mask holds three bits per entry: 1 counted (a labelled use already
    in the buckets), 2 done (its action labelled or expired), 4 the label it was counted
    with (violated).
    """

    folder: Path
    parts: list[Partition] = field(default_factory=list)
    next_part: int = 1
    masks: dict[int, NDArray[np.uint8]] = field(default_factory=dict)
    changed: set[int] = field(default_factory=set)
    #: sha256 of each file of the partitions (a file is never rewritten under its name)
    digests: dict[str, str] = field(default_factory=dict)
    _writes: dict[int, Future[None]] = field(default_factory=dict, repr=False)

    def file_digests(self) -> dict[str, str]:
        """sha256 of every file of the partitions kept, computed once per file."""
        self._written()
        out: dict[str, str] = {}
        for p in self.parts:
            for name in (p.file, p.mask, *(f"pending-{p.part:06d}.{k}.npy"
                                           for k in _INDEX_FILES)):
                if name not in self.digests:
                    self.digests[name] = file_sha256(self.folder / name)
                out[name] = self.digests[name]
        self.digests = dict(out)
        return out

    def _table(self, p: Partition) -> Any:
        import pyarrow as pa

        self._written(p)
        return pa.ipc.open_file(pa.memory_map(str(self.folder / p.file))).read_all()

    def mask(self, p: Partition) -> NDArray[np.uint8]:
        """The partition's mask (loaded once)."""
        if p.part not in self.masks:
            self.masks[p.part] = np.load(self.folder / p.mask)
        return self.masks[p.part]

    def _index(self, p: Partition, name: str) -> tuple[U64Array, IntArray]:
        """A key column of the partition sorted, and the rows in that order (kept beside
        the partition: finding a few keys costs their logarithm, not a scan)."""
        self._written(p)
        base = self.folder / f"pending-{p.part:06d}.{name}"
        return (np.load(f"{base}.npy", mmap_mode="r"),
                np.load(f"{base}-order.npy", mmap_mode="r"))

    def candidates(self, akeys: U64Array, ckeys: U64Array
                   ) -> tuple[pd.DataFrame, list[tuple[int, IntArray]]]:
        """The entries of pending records with an entry whose action hash is in ``akeys``
        or claim hash in ``ckeys``: a frame (entry columns, ``counted``, ``counted_y``)
        and, per partition, the rows taken."""
        wanted = {"akey": unique_keys(akeys), "ckey": unique_keys(ckeys)}
        frames: list[pd.DataFrame] = []
        taken: list[tuple[int, IntArray]] = []
        for p in self.parts:
            m = self.mask(p)
            t = self._table(p)
            hits: list[IntArray] = []
            for name, keys in wanted.items():
                if not len(keys):
                    continue
                sorted_col, order = self._index(p, name)
                lo = np.searchsorted(sorted_col, keys, "left")
                hi = np.searchsorted(sorted_col, keys, "right")
                if (hi > lo).any():
                    hits.append(np.asarray(order[_ranges(lo, hi)], dtype=np.int64))
            hit = unique_keys(np.concatenate(hits)) if hits else np.zeros(0, np.int64)
            hit = hit[(m[hit] & 2) == 0]
            if not len(hit):
                continue
            rows = _record_rows(t.column("recid"), hit)
            rows = rows[(m[rows] & 2) == 0]
            sub = _take_plain(t.drop_columns(["akey", "ckey", "recid"]), rows).to_pandas()
            sub["counted"] = (m[rows] & 1) > 0
            sub["counted_y"] = (m[rows] & 4) > 0
            frames.append(sub)
            taken.append((p.part, rows))
        frame = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
        return frame, taken

    def update(self, taken: Sequence[tuple[int, IntArray]], counted: BoolArray,
               done: BoolArray, counted_y: BoolArray) -> None:
        """Set the bits of the rows ``candidates`` returned (in the same order)."""
        at = 0
        for part, rows in taken:
            p = self._get(part)
            m = self.mask(p).copy()
            n = len(rows)
            m[rows] |= counted[at:at + n].astype(np.uint8)
            m[rows] |= (done[at:at + n].astype(np.uint8) << 1)
            m[rows] |= (counted_y[at:at + n].astype(np.uint8) << 2)
            self.masks[part] = m
            self.changed.add(part)
            at += n

    def _get(self, part: int) -> Partition:
        return next(p for p in self.parts if p.part == part)

    def add(self, entries: pd.DataFrame, keep: BoolArray, counted: BoolArray,
            counted_y: BoolArray, recid: IntArray, akey: U64Array, ckey: U64Array) -> None:
        """A new partition of the ``keep`` rows of ``entries`` (records kept whole,
        ``recid`` non-decreasing) with their action and claim hashes; the arrays run over
        every row of ``entries``."""
        import pyarrow as pa

        rows = np.flatnonzero(keep)
        if not len(rows):
            return
        t_us = entries["t_us"].to_numpy()[rows]
        # the frame as Arrow (its numbers not copied); the rows are taken a slice at a time
        # while the file is written: taking them all at once copied every column first
        table = pa.Table.from_pandas(entries, preserve_index=False)
        p = Partition(part=self.next_part, rows=len(rows), mask="",
                      t_min=int(t_us.min()), t_max=int(t_us.max()))
        self.next_part += 1
        self.folder.mkdir(parents=True, exist_ok=True)
        # written on a thread (Arrow's writer and the compiled sort hold no GIL) while the
        # run computes its windows; whatever reads the partition's files waits for it first
        pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="amv-pending")
        self._writes[p.part] = pool.submit(self._write, p, table, rows, recid[rows],
                                           akey[rows], ckey[rows])
        pool.shutdown(wait=False)
        self.masks[p.part] = (counted[rows].astype(np.uint8)
                              | (counted_y[rows].astype(np.uint8) << 2)).astype(np.uint8)
        self.changed.add(p.part)
        self.parts.append(p)

    def _write(self, p: Partition, table: Any, rows: IntArray, recid: IntArray,
               akey: U64Array, ckey: U64Array) -> None:
        """The partition's table (``rows`` of ``table`` with their hashes and records) and
        its key indexes (see :meth:`_index`)."""
        import pyarrow as pa

        for name in (p.file, *(f"pending-{p.part:06d}.{k}.npy" for k in _INDEX_FILES)):
            (self.folder / name).unlink(missing_ok=True)  # a planted link is not followed
        keys = pa.table({"akey": akey, "ckey": ckey, "recid": recid})
        schema = pa.unify_schemas([table.schema, keys.schema])
        with pa.OSFile(str(self.folder / p.file), "wb") as sink, \
                pa.ipc.new_file(sink, schema) as writer:
            for at in range(0, len(rows), _WRITE_ROWS):
                part = table.take(pa.array(rows[at:at + _WRITE_ROWS]))
                for name in keys.column_names:
                    part = part.append_column(name, keys.column(name)
                                              .slice(at, _WRITE_ROWS))
                writer.write_table(part.replace_schema_metadata(schema.metadata))
        for name, key in (("akey", akey), ("ckey", ckey)):
            sorted_keys, order = sort_keys(key)
            np.save(self.folder / f"pending-{p.part:06d}.{name}.npy", sorted_keys)
            np.save(self.folder / f"pending-{p.part:06d}.{name}-order.npy", order)

    def _written(self, p: Partition | None = None) -> None:
        """Wait for the partition's files (every partition's when None); a failed write
        raises here."""
        parts = list(self._writes) if p is None else [p.part]
        for part in parts:
            fut = self._writes.pop(part, None)
            if fut is not None:
                fut.result()

    def expire(self, cutoff_us: int) -> tuple[int, int]:
        """Mark done the entries decided before ``cutoff_us``; returns the uses and records
        that expired unlabelled (records by their first entry)."""
        uses = records = 0
        for p in self.parts:
            if p.t_min >= cutoff_us:
                continue
            t = self._table(p)
            m = self.mask(p).copy()
            old = (t.column("t_us").to_numpy() < cutoff_us) & ((m & 2) == 0)
            if not old.any():
                continue
            recid = t.column("recid").to_numpy()
            uses += int((old & ((m & 1) == 0)).sum())
            records += len(unique_keys(recid[old]))
            m[old] |= 2
            self.masks[p.part] = m
            self.changed.add(p.part)
        return uses, records

    def size(self) -> int:
        """Entries still pending."""
        return int(sum(int(((self.mask(p) & 2) == 0).sum()) for p in self.parts))

    def commit(self, seq: int) -> list[str]:
        """Write the changed masks under new names, drop finished partitions; returns the
        files the previous state used that can go once ``state.json`` is replaced."""
        self._written()
        stale: list[str] = []
        keep: list[Partition] = []
        for p in self.parts:
            m = self.mask(p)
            if p.part in self.changed:
                if p.mask:
                    stale.append(p.mask)
                if bool(np.all((m & 2) > 0)):
                    stale += [p.file, *(f"pending-{p.part:06d}.{k}.npy"
                                        for k in _INDEX_FILES)]
                    continue
                p.mask = f"pending-{p.part:06d}.mask-{seq}.npy"
                (self.folder / p.mask).unlink(missing_ok=True)
                np.save(self.folder / p.mask, m)
            keep.append(p)
        self.parts = keep
        self.changed.clear()
        return stale


def _plain(table: Any) -> Any:
    """Dictionary columns decoded to strings: a few rows taken from a partition keep its
    whole dictionary, which pandas would turn into categories of every value."""
    import pyarrow as pa

    for i, f in enumerate(table.schema):
        if pa.types.is_dictionary(f.type):
            table = table.set_column(i, f.name, table.column(i).cast(pa.string()))
    return table


def _record_rows(recid: Any, hit: IntArray) -> IntArray:
    """Every row (ascending) of the records of rows ``hit`` (ascending), ``recid`` the
    partition's non-decreasing record column (a record's rows adjoin), searched batch by
    batch of its file (its batches joined would be a copy of the whole column)."""
    views, starts = [], [0]
    for chunk in recid.chunks:
        views.append(chunk.to_numpy())
        starts.append(starts[-1] + len(chunk))
    cut = np.searchsorted(hit, starts)
    ids = unique_keys(np.concatenate(
        [v[hit[cut[i]:cut[i + 1]] - starts[i]] for i, v in enumerate(views)]))
    rows = []
    for v, start in zip(views, starts[:-1], strict=True):
        if len(v):
            near = ids[np.searchsorted(ids, v[0]):np.searchsorted(ids, v[-1], "right")]
            rows.append(start + _ranges(np.searchsorted(v, near, "left"),
                                        np.searchsorted(v, near, "right")))
    return np.concatenate(rows) if rows else np.zeros(0, np.int64)


def _take_plain(table: Any, rows: IntArray) -> Any:
    """``rows`` (ascending) of a partition's table, :func:`_plain`, taken batch by batch:
    a take across the batches first unifies their dictionaries (all the action ids: 2 s
    of a daily run at 10 M lines), which the batches of one file share anyway."""
    import pyarrow as pa

    pieces = []
    start = 0
    for batch in table.to_batches():
        lo, hi = np.searchsorted(rows, [start, start + batch.num_rows])
        if hi > lo:
            piece = pa.Table.from_batches([batch.take(pa.array(rows[lo:hi] - start))])
            pieces.append(_plain(piece))
        start += batch.num_rows
    return pa.concat_tables(pieces) if pieces else _plain(table.slice(0, 0))


def _ranges(lo: IntArray, hi: IntArray) -> IntArray:
    """The concatenated ``arange(lo[i], hi[i])``."""
    n = hi - lo
    keep = n > 0
    lo, n = lo[keep], n[keep]
    if not len(n):
        return np.zeros(0, np.int64)
    start = np.repeat(lo - np.concatenate([[0], np.cumsum(n)[:-1]]), n)
    return np.asarray(start + np.arange(int(n.sum())), dtype=np.int64)


# -- the whole state -----------------------------------------------------------------------
@dataclass(kw_only=True)
class MonitorState:
    """Everything a run continues from (module docstring)."""

    folder: Path | None
    scope: dict[str, Any]
    files: list[FileMark] = field(default_factory=list)
    buckets: DayBuckets = field(default_factory=DayBuckets)
    counts: dict[str, int] = field(default_factory=dict)
    newest_us: int | None = None
    anchor_us: int | None = None
    windows: list[dict[str, Any]] = field(default_factory=list)
    latest: int | None = None
    window_arrays: dict[str, NDArray[Any]] = field(default_factory=dict)
    outcome_hashes: U64Array = field(default_factory=lambda: np.zeros(0, np.uint64))
    pending: Pending | None = None
    seq: int = 0

    @classmethod
    def empty(cls, scope: Mapping[str, Any], folder: Path | None) -> MonitorState:
        """A state with nothing read (a rebuild, or a monitor without a state folder)."""
        st = cls(folder=folder, scope=dict(scope))
        if folder is not None:
            st.pending = Pending(folder=folder)
        return st

    def count(self, name: str, n: int) -> None:
        """Add to a cumulative count."""
        self.counts[name] = self.counts.get(name, 0) + int(n)

    @classmethod
    def load(cls, folder: Path, scope: Mapping[str, Any]) -> tuple[MonitorState | None, str]:
        """The state in ``folder`` and ``""``, or None and why it cannot be continued
        (module docstring: what is checked)."""
        path = folder / STATE_FILE
        if not folder.is_dir() or not os.path.lexists(path):
            return None, "no state yet"
        try:
            raw = read_regular(path)
            digest = read_regular(folder / DIGEST_FILE, 1024).decode("ascii").split()
        except (OSError, UnicodeDecodeError) as exc:
            return None, f"{path} or its digest unreadable ({exc})"
        if not digest or digest[0] != hashlib.sha256(raw).hexdigest():
            return None, (f"{path} does not match the sha256 in {DIGEST_FILE} (edited, or a "
                          f"save was interrupted): not trusted")
        try:
            from amv_calib.contract import loads_strict

            data = loads_strict(raw)
        except (ValueError, RecursionError) as exc:
            return None, f"{path} unreadable ({exc})"
        if not isinstance(data, dict) or data.get("format") != _FORMAT \
                or type(data.get("format_version")) is not int \
                or data.get("format_version") != _FORMAT_VERSION:
            return None, f"{path} is not a monitor state of this version"
        raw_scope = data.get("scope")
        old_scope: dict[str, Any] = raw_scope if isinstance(raw_scope, dict) else {}
        if old_scope != dict(scope):
            changed = sorted(k for k in set(scope) | set(old_scope)
                             if old_scope.get(k) != scope.get(k))
            return None, f"the scope changed ({', '.join(changed)})"
        try:
            return cls._from(folder, scope, data), ""
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            return None, f"{folder} does not check out ({type(exc).__name__}: {exc})"

    @classmethod
    def _from(cls, folder: Path, scope: Mapping[str, Any], data: Mapping[str, Any]
              ) -> MonitorState:
        digests = data["digests"]
        if not isinstance(digests, dict):
            raise ValueError("digests is not an object")

        def checked(name: Any, field_name: str) -> Path:
            # confined to the folder, a regular file, the bytes the state was saved with
            name = state_name(name, field_name)
            want = digests.get(name)
            try:
                got = file_sha256(folder / name)
            except FileNotFoundError:
                raise ValueError(f"{name} is missing") from None
            if got != want:
                raise ValueError(f"{name} differs from the sha256 the state recorded")
            out: Path = folder / name
            return out

        raw_pending = data["pending"]
        pending = Pending(folder=folder, next_part=_count(raw_pending["next_part"],
                                                          "pending.next_part"),
                          parts=[_partition(p) for p in raw_pending["parts"]])
        for p in pending.parts:
            if p.part >= pending.next_part:
                raise ValueError(f"pending part {p.part} is not below next_part")
            for name in (p.file, p.mask, *(f"pending-{p.part:06d}.{k}.npy"
                                           for k in _INDEX_FILES)):
                checked(name, "pending.parts")
            pending.digests.update({n: digests[n] for n in (p.file, p.mask, *(
                f"pending-{p.part:06d}.{k}.npy" for k in _INDEX_FILES))})
        arrays: dict[str, NDArray[Any]] = {}
        if data["latest"] is not None:
            _count(data["latest"], "latest", signed=True)
            with np.load(checked(data["window_file"], "window_file"),
                         allow_pickle=False) as z:
                arrays = {k: z[k] for k in z.files}
        outcomes = np.frombuffer(read_regular(checked(data["outcomes_file"],
                                                      "outcomes_file")),
                                 dtype="<u8").astype(np.uint64)
        counts = data["counts"]
        if not isinstance(counts, dict):
            raise ValueError("counts is not an object")
        for k, v in counts.items():
            _count(v, f"counts.{k}")
        files = [FileMark(**f) for f in data["files"]]
        for f in files:
            for name in ("dev", "ino", "head_len", "offset", "lines"):
                _count(getattr(f, name), f"files[{f.path!r}].{name}")
        for name in ("newest_us", "anchor_us"):
            if data[name] is not None:
                _count(data[name], name, signed=True)
        return cls(folder=folder, scope=dict(scope), files=files,
                   buckets=DayBuckets.from_dict(data["buckets"]),
                   counts=dict(counts), newest_us=data["newest_us"],
                   anchor_us=data["anchor_us"], windows=list(data["windows"]),
                   latest=data["latest"], window_arrays=arrays,
                   outcome_hashes=outcomes, pending=pending, seq=_count(data["seq"], "seq"))

    def save(self) -> None:
        """Write every file under a new name, then ``state.json`` atomically; then remove
        what the previous state used and this one does not."""
        if self.folder is None:
            return
        folder = self.folder
        folder.mkdir(parents=True, exist_ok=True)
        self.seq += 1
        stale = self.pending.commit(self.seq) if self.pending is not None else []
        window_file = f"window-{self.seq}.npz"
        outcomes_file = f"outcomes-{self.seq}.u64"
        for name in (window_file, outcomes_file):  # a link planted there is not followed
            (folder / name).unlink(missing_ok=True)
        np.savez(folder / window_file, **self.window_arrays)  # type: ignore[arg-type]
        self.outcome_hashes.astype("<u8").tofile(folder / outcomes_file)
        pending = self.pending or Pending(folder=folder)
        digests = pending.file_digests()
        for name in (window_file, outcomes_file):
            digests[name] = file_sha256(folder / name)
        data = {"format": _FORMAT, "format_version": _FORMAT_VERSION, "seq": self.seq,
                "digests": dict(sorted(digests.items())),
                "scope": self.scope, "files": [f.to_dict() for f in self.files],
                "buckets": self.buckets.to_dict(), "counts": dict(sorted(self.counts.items())),
                "newest_us": self.newest_us, "anchor_us": self.anchor_us,
                "windows": self.windows, "latest": self.latest,
                "window_file": window_file, "outcomes_file": outcomes_file,
                "pending": {"next_part": pending.next_part,
                            "parts": [dict(vars(p)) for p in pending.parts]}}
        raw = (json.dumps(data, sort_keys=True) + "\n").encode("utf-8")
        # the digest first: a run killed between the two replaces leaves a state that does
        # not check out (rebuilt next time), never one that is trusted and wrong
        for name, body in ((DIGEST_FILE, f"{hashlib.sha256(raw).hexdigest()}  {STATE_FILE}\n"
                            .encode("ascii")), (STATE_FILE, raw)):
            tmp = folder / f"{name}.tmp"
            tmp.unlink(missing_ok=True)  # whatever sits there (a link, a FIFO) is not opened
            with open(tmp, "xb") as fh:
                fh.write(body)
            os.replace(tmp, folder / name)
        keep = {STATE_FILE, DIGEST_FILE, window_file, outcomes_file,
                *(p.file for p in pending.parts), *(p.mask for p in pending.parts),
                *(f"pending-{p.part:06d}.{k}.npy" for p in pending.parts
                  for k in _INDEX_FILES)}
        for name in stale:
            (folder / name).unlink(missing_ok=True)
        for p in folder.iterdir():
            if p.name not in keep and (p.name.startswith(("window-", "outcomes-"))
                                       or p.name.startswith("pending-")):
                p.unlink(missing_ok=True)


def _count(v: Any, field_name: str, signed: bool = False) -> int:
    """``v`` if it is a JSON integer (not a boolean) in range, else ValueError naming the
    field."""
    if type(v) is not int or not (-(2**63) < v < 2**63) or (v < 0 and not signed):
        raise ValueError(f"{field_name} = {v!r} is not a valid count")
    return v


def _partition(p: Any) -> Partition:
    """A pending partition of ``state.json``, checked: its fields and its names."""
    if not isinstance(p, dict) or set(p) != {"part", "rows", "mask", "t_min", "t_max"}:
        raise ValueError(f"pending part {p!r} is not valid")
    out = Partition(part=_count(p["part"], "pending.part"),
                    rows=_count(p["rows"], "pending.rows"),
                    mask=state_name(p["mask"], "pending.mask"),
                    t_min=_count(p["t_min"], "pending.t_min", signed=True),
                    t_max=_count(p["t_max"], "pending.t_max", signed=True))
    if not p["mask"].startswith(f"pending-{out.part:06d}.mask-"):
        raise ValueError(f"pending.mask = {p['mask']!r} is not part {out.part}'s")
    return out
