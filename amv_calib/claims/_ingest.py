"""Ingestion of claim-outcome tables: validation, quarantine of bad rows, summaries.

Every input row ends up in exactly one of two places: the accepted claims table (canonical
snake_case columns, proper dtypes) or the rejects table (its 1-based row number, the reason,
and the original fields as read). The rules are documented in ``docs/data.md``.

Reading streams: CSV through pyarrow's streaming CSV reader (a plain CSV file first through
a faster pass, :class:`_FastCsv`, that lets pyarrow parse the numbers, flags and timestamps
and hands any chunk with a row to reject back to the text path), Parquet through
``iter_batches`` (or a ``pyarrow.dataset`` scan for a directory of Parquet files), JSONL a
block of lines at a time. Validation is vectorised per chunk; Python loops run over bad rows
only.
"""

from __future__ import annotations

import csv
import io
import json
import logging
import math
import os
import queue
import re
import threading
from collections import Counter
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal, TypeAlias, TypeVar, cast, get_args

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.dataset as pads
import pyarrow.parquet as pq
from numpy.typing import NDArray

from amv_calib.claims._arrow import (
    NUMBER_LIKE,
    BoolArray,
    IntArray,
    arrow_column,
    cast_subset,
    is_number_type,
    is_stringish,
    np_mask,
    null_mask,
    string_view,
    strip_ids,
    text_of,
)
from amv_calib.claims._outputs import claim_outputs, record_outputs, spreadsheet_safe
from amv_calib.claims._times import PROBLEMS as TIMESTAMP_PROBLEMS
from amv_calib.claims._times import UTC_US as _UTC_US
from amv_calib.claims._times import parse_timestamps
from amv_calib.contract import (
    ALIASES,
    OPTIONAL_COLUMNS,
    REQUIRED_COLUMNS,
    canonical_name,
    loads_strict,
    require_regular,
)
from amv_calib.exceptions import AmvCalibError, DataContractError, MissingColumnsError, check_choice

_log = logging.getLogger("amv_calib.claims._ingest")

Format = Literal["csv", "parquet", "jsonl"]
FORMATS: Final[tuple[str, ...]] = get_args(Format)

#: Rows per validation chunk (CSV chunks are whole parser blocks, so about this many).
DEFAULT_CHUNKSIZE: Final = 250_000

#: Progress is logged (INFO) each time this many more rows have been read.
_PROGRESS_EVERY: Final = 1_000_000

Source: TypeAlias = "str | os.PathLike[str] | pd.DataFrame | pa.Table | Iterable[Any]"

_TRUE: Final = ("true", "t", "yes", "y", "1")
_FALSE: Final = ("false", "f", "no", "n", "0")
_BOOL_HINT: Final = "true/false, yes/no, t/f, 1/0"

_Kind = Literal["id", "timestamp", "float", "bool", "str"]


@dataclass(frozen=True, kw_only=True)
class _Spec:
    kind: _Kind
    required: bool
    lo: float = -math.inf
    hi: float = math.inf


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
}
assert set(_SPECS) == set(REQUIRED_COLUMNS) | set(OPTIONAL_COLUMNS)

_ARROW_TYPES: Final[dict[_Kind, pa.DataType]] = {
    "id": pa.large_string(),
    "timestamp": _UTC_US,
    "float": pa.float64(),
    "bool": pa.bool_(),
    "str": pa.large_string(),
}

#: Arrow schema of the accepted claims with every optional column present.
CLAIMS_SCHEMA: Final = pa.schema(
    [(name, _ARROW_TYPES[_SPECS[name].kind]) for name in (*REQUIRED_COLUMNS, *OPTIONAL_COLUMNS)]
)


# --------------------------------------------------------------------------------------
# summary


@dataclass(frozen=True, kw_only=True)
class IngestSummary:
    """What one ingestion did.

    Parameters
    ----------
    read, accepted, rejected : int
        Rows read, accepted and rejected; ``read == accepted + rejected`` always.
    rejected_by_reason : Mapping[str, int]
        Rejected rows per kind of problem (``"source_trust_score outside [0, 1]"``). A row
        with several problems counts under each, so the values may sum to more than
        ``rejected``.
    ignored_columns : tuple of str
        Input columns that are not part of the data contract (or lost to a preferred
        spelling of the same column); they are not copied into the claims table.
    format : {"csv", "parquet", "jsonl"}
        Format the input was read as (``"frame"`` for an in-memory table).
    input : str
        The input path, or ``"<frame>"``.
    out : str or None
        Output directory, when files were written.
    """

    read: int
    accepted: int
    rejected: int
    rejected_by_reason: Mapping[str, int]
    ignored_columns: tuple[str, ...] = ()
    format: str = "csv"
    input: str = ""
    out: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """Plain-data form, reasons sorted by name (stable output)."""
        return {
            "read": self.read,
            "accepted": self.accepted,
            "rejected": self.rejected,
            "rejected_by_reason": dict(sorted(self.rejected_by_reason.items())),
            "ignored_columns": list(self.ignored_columns),
            "format": self.format,
            "input": self.input,
            "out": self.out,
        }

    def to_json(self) -> str:
        """One JSON line (no newline)."""
        return json.dumps(self.to_dict(), separators=(",", ":"))


# --------------------------------------------------------------------------------------
# format detection and column resolution


def detect_format(path: str | os.PathLike[str], format: str | None = None) -> Format:
    """The input format: ``format`` if given, else from the file ending (a directory is Parquet).

    Raises
    ------
    DataContractError
        If ``format`` is not one of csv/parquet/jsonl, or the ending is not recognised.
    """
    if format is not None:
        if format not in FORMATS:
            raise DataContractError(f"format={format!r} is not one of {', '.join(FORMATS)}")
        return cast(Format, format)
    p = Path(path)
    if p.is_dir():
        return "parquet"
    suffixes = [s.lower() for s in p.suffixes]
    if suffixes and suffixes[-1] in (".gz", ".bz2", ".zst", ".lz4"):
        suffixes = suffixes[:-1]
    ending = suffixes[-1] if suffixes else ""
    if ending in (".csv", ".tsv", ".txt"):
        return "csv"
    if ending in (".parquet", ".pq", ".parq"):
        return "parquet"
    if ending in (".jsonl", ".ndjson", ".json"):
        return "jsonl"
    raise DataContractError(
        f"cannot tell the format of {p.name!r} from its ending; pass --format csv|parquet|jsonl"
    )


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


# --------------------------------------------------------------------------------------
# reading: every reader yields _Chunk objects with the original column names


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
    # Set when some ``columns`` were parsed to their output types by the reader (the fast
    # CSV path): the same fields as text, for when the chunk has a row to reject.
    as_text: Callable[[], dict[str, pa.Array]] | None = None
    # Set when the reader has parsed the chunk already (``columns`` may then be empty).
    parsed: _ParsedChunk | None = None
    # Set when the chunk is still being put together: the chunk to use in this one's place.
    future: Future[_Chunk] | None = None
    # The text of each row exactly as read (JSONL), for the lossless rejects.jsonl.
    lines: list[str] | None = None
    # Per column, the rows whose JSON value is a list or an object (JSONL): text now.
    nested: dict[str, BoolArray] = field(default_factory=dict)


@dataclass(kw_only=True)
class _Reader:
    format: str
    columns: list[str]
    chunks: Iterator[_Chunk]
    late_columns: set[str] = field(default_factory=set)


def _batch_columns(batch: pa.RecordBatch | pa.Table) -> dict[str, pa.Array]:
    out: dict[str, pa.Array] = {}
    for name, col in zip(batch.schema.names, batch.columns, strict=True):
        arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
        out[name] = arr
    return out


def _rechunk(batches: Iterable[pa.RecordBatch], chunksize: int) -> Iterator[pa.Table]:
    """Regroup record batches into tables of ``chunksize`` rows (the last may be short)."""
    pending: list[pa.RecordBatch] = []
    n = 0
    for b in batches:
        while b.num_rows:
            take = min(b.num_rows, chunksize - n)
            pending.append(b.slice(0, take))
            n += take
            b = b.slice(take)
            if n == chunksize:
                yield pa.Table.from_batches(pending)
                pending, n = [], 0
    if pending:
        yield pa.Table.from_batches(pending)


def _open_csv(path: Path, chunksize: int) -> _Reader:
    header = _csv_header(path)
    if not header:
        return _Reader(format="csv", columns=[], chunks=iter(()))
    _resolve_columns(header)  # fail before reading rows

    def reader(threaded: bool, on_invalid: Callable[[Any], str],
               block_size: int = _CSV_BLOCK) -> pacsv.CSVStreamingReader:
        return pacsv.open_csv(
            path,
            read_options=pacsv.ReadOptions(use_threads=threaded, block_size=block_size),
            parse_options=pacsv.ParseOptions(
                newlines_in_values=True, invalid_row_handler=on_invalid
            ),
            convert_options=pacsv.ConvertOptions(
                column_types={c: pa.large_string() for c in header},
                strings_can_be_null=False,
                quoted_strings_can_be_null=False,
            ),
        )

    def threaded_pass(skip: int = 0) -> Iterator[_Chunk]:
        """Multithreaded parsing, exact while no row is malformed (rows are then 1, 2, ...).

        ``skip``: rows already read (all well-formed), as whole chunks, by :func:`fast_pass`.

        A threaded parser cannot number a malformed row, so the first one (or any parse
        error) ends this pass; rows from there on are read again by :func:`exact_pass`.
        Every batch arrives after its rows were parsed, so an empty ``malformed`` list when
        a chunk is complete means that chunk and all before it were well-formed.
        """
        malformed: list[Any] = []

        def on_invalid(row: Any) -> str:
            malformed.append(row)
            return "skip"

        next_row = 1 + skip
        stream: pacsv.CSVStreamingReader | None = None
        try:
            stream = reader(True, on_invalid)
            for table in _rechunk(_skip_rows(stream, skip), chunksize):
                if malformed:
                    break
                n = table.num_rows
                yield _Chunk(columns=_batch_columns(table),
                             rows=np.arange(next_row, next_row + n, dtype=np.int64))
                next_row += n
            else:
                if not malformed:
                    return
        except pa.ArrowInvalid:
            pass
        finally:
            if stream is not None:  # stop its read-ahead before reading again
                stream.close()
        # Only whole chunks of well-formed rows were yielded, so the exact pass continues
        # on the same chunk boundaries as if it had read the file from the start.
        yield from exact_pass(skip=next_row - 1)

    def exact_pass(skip: int, first_row: int | None = None,
                   block_size: int = _CSV_BLOCK) -> Iterator[_Chunk]:
        """Single-threaded parsing from data row ``first_row`` (default ``skip + 1``), after
        ``skip`` well-formed rows; a value larger than a block reads again with larger
        blocks from the first row not yet yielded."""
        invalid: list[tuple[int, int, int, str]] = []
        next_row = 1 + skip if first_row is None else first_row
        start = next_row

        def on_invalid(row: Any) -> str:
            # Records are numbered from 1 with the header as record 1 (use_threads=False).
            if int(row.number) - 1 >= start:
                invalid.append((int(row.number) - 1, int(row.expected_columns),
                                int(row.actual_columns), str(row.text)))
            return "skip"

        parsed = skip  # well-formed rows yielded so far, the header not counted
        try:
            for table in _rechunk(_skip_rows(reader(False, on_invalid, block_size), skip),
                                  chunksize):
                n = table.num_rows
                bad = sorted(r for r, *_ in invalid if r >= next_row)
                if bad:
                    cand = np.arange(next_row, next_row + n + len(bad), dtype=np.int64)
                    rows = cand[~np.isin(cand, np.asarray(bad, dtype=np.int64))][:n]
                else:
                    rows = np.arange(next_row, next_row + n, dtype=np.int64)
                last = int(rows[-1]) if n else next_row - 1
                mine = [t for t in invalid if t[0] <= last]
                invalid[:] = [t for t in invalid if t[0] > last]
                yield _Chunk(
                    columns=_batch_columns(table),
                    rows=rows,
                    raw_rejects=[_csv_raw_reject(t, header) for t in mine],
                )
                parsed += n
                next_row = last + 1
        except pa.ArrowInvalid as exc:
            if "straddl" in str(exc) and block_size < _CSV_MAX_BLOCK:
                yield from exact_pass(parsed, next_row, block_size * 8)
                return
            raise DataContractError(f"cannot read {path.name} as CSV: {_csv_error(exc)}") \
                from exc
        if invalid:
            yield _Chunk(
                columns={c: pa.array([], pa.string()) for c in header},
                rows=np.empty(0, dtype=np.int64),
                raw_rejects=[_csv_raw_reject(t, header) for t in invalid],
            )

    def fast_pass() -> Iterator[_Chunk]:
        fast = _FastCsv(path, header, chunksize)
        yield from fast.chunks()
        if not fast.complete:
            yield from threaded_pass(skip=fast.next_row - 1)

    chunks = fast_pass() if _FAST_CSV else threaded_pass()
    return _Reader(format="csv", columns=list(header), chunks=chunks)


#: Block size of pyarrow's CSV reader; a single value larger than a block makes the exact
#: pass read again with blocks 8 times larger, up to ``_CSV_MAX_BLOCK``.
_CSV_BLOCK: Final = 1 << 22
_CSV_MAX_BLOCK: Final = 1 << 30


def _csv_error(exc: Exception) -> str:
    """pyarrow's CSV error, its "Row #N" (which counts the header) restated as a line."""
    text = str(exc)
    m = re.search(r"Row #(\d+)", text)
    if m is None:
        return text
    line = int(m.group(1))
    what = "a field is not valid UTF-8 text" if "UTF8" in text else text
    return f"line {line} (data row {line - 1}): {what}"


#: Whether CSV files go through :class:`_FastCsv` first (tests turn it off to compare).
_FAST_CSV = True
#: Bytes per block of the fast CSV path (cut at a line end; pyarrow parses each one with
#: all cores).
_FAST_BLOCK: Final = 1 << 25
_FIRST_BLOCK: Final = 1 << 21
# After a chunk needed its text, this many blocks are read as text only: a file with bad
# rows throughout would otherwise pay for two reads of every block.
_TEXT_BLOCKS_AFTER_FALLBACK: Final = 8
_FAST_SUFFIXES: Final = (".csv", ".tsv", ".txt")


def _resizable(buf: bytearray) -> bool:
    """Whether nothing holds a view of ``buf`` (a bytearray with exports cannot resize)."""
    try:
        buf.append(0)
    except BufferError:
        return False
    buf.pop()
    return True


@dataclass(kw_only=True)
class _CsvBlock:
    offset: int  # of its first byte in the file
    length: int
    ascii: bool = False
    typed: pa.Table | None = None
    text: pa.Table | None = None
    parsed: Future[_ParsedChunk] | None = None  # of ``typed``


def _pieces(parts: Sequence[pa.Array | pa.ChunkedArray]) -> pa.ChunkedArray:
    """One chunked array of the chunks of ``parts`` (no copy)."""
    chunks: list[pa.Array] = []
    for p in parts:
        chunks.extend(p.chunks if isinstance(p, pa.ChunkedArray) else [p])
    return pa.chunked_array(chunks, type=parts[0].type)


class _FastCsv:
    """Fast first pass over an uncompressed CSV file: numbers, flags and timestamps parsed
    by pyarrow's multithreaded reader itself.

    The file is read in blocks cut at line ends, which are record ends as
    long as no quote character occurs (so no value holds a newline). Each block is parsed
    by pyarrow with the numeric / boolean / timestamp columns in their output types (a
    block where that fails is parsed as text), then checked row by row in a second thread
    while the next block is read. A chunk whose rows all pass goes to the consumer parsed,
    with an ``as_text`` re-read of its blocks for when the consumer finds a duplicate; any
    other chunk goes as text. So rejects and their reasons always come from the text path.
    pyarrow's typed parsing accepts a subset of what the text path accepts, with the same
    values (the tests compare both paths).

    The pass stops at the first block it cannot take (a quote character, a malformed row,
    unreadable text) with :attr:`complete` false; :attr:`next_row` is then the first row
    not yet yielded, every row before it well-formed and yielded in whole chunks.
    """

    def __init__(self, path: Path, header: Sequence[str], chunksize: int) -> None:
        self.path = path
        self.header = list(header)
        self.chunksize = chunksize
        self.next_row = 1
        self.complete = False
        self._text_left = 0
        mapping, _ = _resolve_columns(self.header)
        self._mapping = mapping
        self._out_columns = [c for c in _SPECS if c in mapping]
        self._pool: ThreadPoolExecutor | None = None
        self._text_types = {name: pa.large_string() for name in self.header}
        self._types = dict(self._text_types)
        for canonical, name in mapping.items():
            kind = _SPECS[canonical].kind
            if kind in ("float", "bool", "timestamp"):
                self._types[name] = _ARROW_TYPES[kind]

    def _open_body(self) -> io.BufferedReader | None:
        """The file, positioned after its header line, or None if not eligible."""
        if self.path.suffix.lower() not in _FAST_SUFFIXES:
            return None
        if any(len(names) > 1 for names in _spellings(self.header).values()):
            return None  # a column spelled twice is merged from its text (_merged_column)
        try:
            fh = open(self.path, "rb")  # closed by _blocks
        except OSError:
            return None
        line = fh.readline(1 << 20)
        ok = line.endswith(b"\n")
        line = line[:-1]
        line = line[:-1] if line.endswith(b"\r") else line
        ok = ok and b'"' not in line and b"\r" not in line
        try:
            ok = ok and line.decode("utf-8").removeprefix("\ufeff").split(",") == self.header
        except UnicodeDecodeError:
            ok = False
        if not ok:
            fh.close()
            return None
        return fh

    def _read(self, data: pa.Buffer, types: Mapping[str, pa.DataType], ascii: bool
              ) -> pa.Table:
        """``data`` parsed; pa.ArrowInvalid if a value does not parse or a row is malformed.

        ``ascii``: ``data`` is plain ASCII, hence valid UTF-8 (pyarrow's check is skipped).
        No invalid-row handler: it slows pyarrow's parser, and the text reader numbers
        malformed rows anyway.
        """
        return pacsv.read_csv(
            data,
            read_options=pacsv.ReadOptions(column_names=self.header, use_threads=True),
            convert_options=pacsv.ConvertOptions(
                column_types=types,
                strings_can_be_null=False,
                quoted_strings_can_be_null=False,
                # Only an empty field is null (it is 'empty' for a required column, so that
                # chunk goes to the text path); 'NaN' or 'null' must parse or fail.
                null_values=[""],
                true_values=_TRUE_FAST.to_pylist(),
                false_values=_FALSE_FAST.to_pylist(),
                check_utf8=not ascii,
            ),
        )

    def _blocks(self) -> Iterator[_CsvBlock | None]:
        """Blocks with ``typed`` or ``text`` set; None where the pass must stop."""
        fh = self._open_body()
        if fh is None:
            yield None
            return
        with fh:
            yield from self._blocks_of(fh)

    def _blocks_of(self, fh: io.BufferedReader) -> Iterator[_CsvBlock | None]:
        # Read, not memory-mapped: a file truncated while mapped kills the process with
        # SIGBUS, where a read just ends early. A block ends at its last line end; the
        # partial line after it is read again as the start of the next block. The buffer
        # is reused once pyarrow has parsed it (its tables hold copies; a buffer still
        # exported is never written again), and a block needed as text later is read
        # again from the file (_text_of). Small first blocks, so validation starts early.
        step = min(_FAST_BLOCK, _FIRST_BLOCK)
        pos = fh.tell()
        # one buffer of the largest block (or the whole rest of a smaller file)
        largest = max(step, min(_FAST_BLOCK, os.fstat(fh.fileno()).st_size - pos + 1))
        buf = bytearray()
        while True:
            if len(buf) < step or not _resizable(buf):
                buf = bytearray(max(largest, step))
            with memoryview(buf) as whole, whole[:step] as room:
                got = fh.readinto(room)
            if not got:
                return
            if got < step:  # the end of the file
                data: bytes | bytearray = buf
                end = got
            else:
                step = min(2 * step, _FAST_BLOCK)
                cut = buf.rfind(b"\n", 0, got)
                data, end = buf, cut + 1
                if cut < 0:  # one very long line: read on until it ends, into new bytes
                    longer = bytes(buf[:got])
                    while cut < 0:
                        more = fh.read(step)
                        if not more:
                            break
                        at = len(longer)
                        longer += more
                        cut = longer.find(b"\n", at)
                    data = longer
                    end = len(longer) if cut < 0 else cut + 1
                    got = len(longer)
                fh.seek(end - got, os.SEEK_CUR)
            if data.find(b'"', 0, end) >= 0:
                yield None
                return
            block = _CsvBlock(offset=pos, length=end)
            pos += end
            raw = pa.py_buffer(memoryview(data)[:end])
            block.ascii = bool(np.frombuffer(raw, dtype=np.uint8).max(initial=0) < 0x80)
            try:
                block = self._parse_block(block, raw)
            except pa.ArrowInvalid:  # a malformed row or bad text: the text reader's job
                yield None
                return
            del raw  # the buffer is free for the next block unless something still holds it
            yield block

    def _parse_block(self, block: _CsvBlock, raw: pa.Buffer) -> _CsvBlock:
        """``block`` with ``typed`` (and its row checks submitted) or ``text`` set."""
        if self._text_left > 0:
            self._text_left -= 1
        else:
            try:
                block.typed = self._read(raw, self._types, block.ascii)
                assert self._pool is not None
                block.parsed = self._pool.submit(self._parse, block.typed)
            except pa.ArrowInvalid:  # a value not of its column's type, or a bad row
                self._text_left = _TEXT_BLOCKS_AFTER_FALLBACK
        if block.typed is None:
            block.text = self._read(raw, self._text_types, block.ascii)
        return block

    def _text_of(self, block: _CsvBlock) -> pa.Table:
        if block.text is None:
            # The same bytes parsed typed without a malformed row: as text they parse too.
            with open(self.path, "rb") as fh:
                fh.seek(block.offset)
                raw = fh.read(block.length)
            if len(raw) != block.length:
                raise AmvCalibError(
                    f"ingest: {self.path} changed while it was read (bytes {block.offset} to "
                    f"{block.offset + block.length} are gone)")
            try:
                text = self._read(pa.py_buffer(raw), self._text_types, block.ascii)
            except pa.ArrowInvalid as exc:  # pragma: no cover - see above
                raise AmvCalibError(f"ingest: a CSV block read typed but not as text: {exc}"
                                    ) from exc
            typed = block.typed
            if typed is None or text.num_rows != typed.num_rows:
                raise AmvCalibError("ingest: a CSV block read typed and as text differ"
                                    )  # pragma: no cover - see above
            block.text = text
        return block.text

    def _columns(self, tables: list[pa.Table]) -> dict[str, pa.Array]:
        return _batch_columns(tables[0] if len(tables) == 1 else pa.concat_tables(tables))

    def _parse(self, typed: pa.Table) -> _ParsedChunk:
        # Parsing is row by row (a value's outcome does not depend on its neighbours), so
        # a block parsed whole gives each of its rows what the chunk parsed whole would.
        # The columns stay in pyarrow's pieces (the parsers take chunked arrays, and the
        # values are put together once, for the output), except the id, which is hashed
        # from its buffers.
        ids = self._mapping["claim_id"]
        columns = {name: (col.combine_chunks() if name == ids else col)
                   for name, col in zip(typed.schema.names, typed.columns, strict=True)}
        chunk = _Chunk(columns=columns, rows=np.zeros(typed.num_rows, dtype=np.int64))
        return _parse_chunk(chunk, self._mapping, self._out_columns)

    def _chunk(self, pieces: list[tuple[_CsvBlock, int, int]], rows: IntArray) -> _Chunk:
        n = len(rows)

        def text() -> dict[str, pa.Array]:
            self._text_left = _TEXT_BLOCKS_AFTER_FALLBACK
            return self._columns([self._text_of(b).slice(o, k) for b, o, k in pieces])

        if not all(b.parsed is not None for b, _, _ in pieces):
            return _Chunk(columns=self._columns([self._text_of(b).slice(o, k)
                                                 for b, o, k in pieces]), rows=rows)
        parts = [(cast("Future[_ParsedChunk]", b.parsed).result(), o, k) for b, o, k in pieces]
        if any(p.bad[o:o + k].any() for p, o, k in parts):
            return _Chunk(columns=text(), rows=rows)
        # No row with a problem of its own; duplicates are for the consumer to find, and
        # then it validates the text (``as_text``).
        chunk = _Chunk(columns={}, rows=rows, as_text=text)
        chunk.parsed = _ParsedChunk(
            chunk=chunk,
            parsed={c: _Parsed(values=_pieces([p.parsed[c].values.slice(o, k)
                                               for p, o, k in parts]), problems=[])
                    for c in self._out_columns},
            sources={},  # no row of this chunk is rejected, so no reason needs its text
            bad=np.zeros(n, dtype=bool),
            key_ok=np.concatenate([p.key_ok[o:o + k] for p, o, k in parts]),
            keys=np.concatenate([p.keys[o:o + k] for p, o, k in parts]),
        )
        return chunk

    def chunks(self) -> Iterator[_Chunk]:
        """Chunks of ``chunksize`` rows (the last may be short) while the pass can go on."""
        # Blocks are parsed, and chunks put together, in a thread of their own while the
        # next blocks are read; each chunk is yielded at once with the future of its parts.
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="amv-calib-ingest-parse")
        try:
            yield from self._chunks()
        except GeneratorExit:
            self._pool.shutdown(wait=True, cancel_futures=True)
            raise
        finally:
            self._pool.shutdown(wait=False)  # the queued work still runs
            self._pool = None

    def _submit(self, pieces: list[tuple[_CsvBlock, int, int]]) -> _Chunk:
        n = sum(k for _, _, k in pieces)
        rows = np.arange(self.next_row, self.next_row + n, dtype=np.int64)
        self.next_row += n
        assert self._pool is not None
        return _Chunk(columns={}, rows=rows, future=self._pool.submit(self._chunk, pieces, rows))

    def _chunks(self) -> Iterator[_Chunk]:
        pending: list[tuple[_CsvBlock, int, int]] = []
        have = 0
        for block in self._blocks():
            if block is None:
                return
            table = block.typed if block.typed is not None else block.text
            assert table is not None
            offset = 0
            while offset < table.num_rows:
                take = min(table.num_rows - offset, self.chunksize - have)
                pending.append((block, offset, take))
                have += take
                offset += take
                if have == self.chunksize:
                    yield self._submit(pending)
                    pending, have = [], 0
        if pending:
            yield self._submit(pending)
        self.complete = True


def _skip_rows(batches: Iterable[pa.RecordBatch], skip: int) -> Iterator[pa.RecordBatch]:
    """``batches`` without their first ``skip`` rows."""
    for b in batches:
        if skip >= b.num_rows:
            skip -= b.num_rows
            continue
        yield b.slice(skip) if skip else b
        skip = 0


def _csv_header(path: Path) -> list[str]:
    """The first CSV record (the header), read from the first 1 MiB only."""
    with _open_binary(path) as fh:
        head = fh.read(1 << 20)
    text = head.decode("utf-8", errors="replace").removeprefix("\ufeff")
    try:
        return next(csv.reader(io.StringIO(text, newline="")), [])
    except csv.Error as exc:
        raise DataContractError(f"cannot read {path.name} as CSV: line 1 (the header): "
                                f"{exc}; a column name is this long only in a broken file") \
            from None


def _open_binary(path: Path) -> io.BufferedIOBase:
    suffix = path.suffix.lower()
    if suffix == ".gz":
        import gzip

        return cast(io.BufferedIOBase, gzip.open(path, "rb"))
    if suffix == ".bz2":
        import bz2

        return cast(io.BufferedIOBase, bz2.open(path, "rb"))
    return cast(io.BufferedIOBase, open(path, "rb"))


def _csv_raw_reject(t: tuple[int, int, int, str], header: Sequence[str]) -> _RawReject:
    row, expected, actual, text = t
    values = next(csv.reader([text]), [])
    fields: dict[str, str | None] = {
        name: (values[i] if i < len(values) else None) for i, name in enumerate(header)
    }
    extra = values[len(header):]
    message = f"row has {actual} fields, header has {expected}"
    if extra:
        message += f" (extra: {', '.join(repr(v) for v in extra)})"
    return _RawReject(row=row, key="wrong number of fields", message=message, fields=fields,
                      line=text)


def _parquet_dataset(path: Path) -> pads.Dataset:
    """A folder of Parquet files read with the union of the files' columns.

    pyarrow takes a dataset's schema from its first file; a column that only later files
    carry would be dropped without a word. Each file's missing columns read as nulls.
    """
    # pyarrow passes over a FIFO or a link to a device without a word: refuse them instead
    # (the names it ignores, "_SUCCESS", ".crc", aside)
    for root, _, names in os.walk(path):
        for name in names:
            if not name.startswith(("_", ".")):
                require_regular(Path(root, name), what="file of the Parquet folder")
    dataset = pads.dataset(path, format="parquet", partitioning="hive")
    schemas = [dataset.schema, *(f.physical_schema for f in dataset.get_fragments())]
    try:
        union = pa.unify_schemas(schemas, promote_options="permissive")
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        raise DataContractError(
            f"cannot read {path.name} as one table: its Parquet files disagree on a "
            f"column's type ({exc})") from exc
    if union.names == dataset.schema.names:
        return dataset
    return pads.dataset(path, schema=union, format="parquet", partitioning="hive")


def _open_parquet(path: Path, chunksize: int) -> _Reader:
    try:
        if path.is_dir():
            dataset = _parquet_dataset(path)
            columns = list(dataset.schema.names)
            _resolve_columns(columns)
            batches: Iterator[pa.RecordBatch] = iter(
                dataset.to_batches(batch_size=chunksize, use_threads=True)
            )
        else:
            # pre_buffer reads each row group's column chunks in one go (2x faster).
            pf = pq.ParquetFile(path, pre_buffer=True)
            columns = list(pf.schema_arrow.names)
            _resolve_columns(columns)
            batches = pf.iter_batches(batch_size=chunksize)
    except (pa.ArrowInvalid, OSError) as exc:
        raise DataContractError(f"cannot read {path.name} as Parquet: {exc}") from exc

    def chunks() -> Iterator[_Chunk]:
        next_row = 1
        try:
            for table in _rechunk(batches, chunksize):
                n = table.num_rows
                yield _Chunk(
                    columns=_batch_columns(table),
                    rows=np.arange(next_row, next_row + n, dtype=np.int64),
                )
                next_row += n
        except pa.ArrowInvalid as exc:
            raise DataContractError(f"cannot read {path.name} as Parquet: {exc}") from exc

    return _Reader(format="parquet", columns=columns, chunks=chunks())


_NULL, _BOOL, _NUMBER, _TEXT, _NESTED = range(5)
_INT64: Final = (-(2**63), 2**63)


#: The JSON type of each Python type ``json`` parses to (lists and dicts: nested).
_KINDS: Final[dict[type, int]] = {type(None): _NULL, bool: _BOOL, int: _NUMBER,
                                  float: _NUMBER, str: _TEXT}


def _scalar_texts(values: list[Any]) -> list[str]:
    """Booleans or numbers as Arrow writes them (``true``, ``1`` for 1.0, ``0.5``); an
    integer beyond int64 in full."""
    big = [isinstance(v, int) and not _INT64[0] <= v < _INT64[1] for v in values]
    rest = [v for v, b in zip(values, big, strict=True) if not b]
    texts = iter(pa.array(rest).cast(pa.string()).to_pylist() if rest else [])
    return [str(v) if b else next(texts) for v, b in zip(values, big, strict=True)]


def _json_column(values: list[Any]) -> pa.Array:
    """One JSONL column of a chunk, each value read by its own JSON type.

    A column of one JSON type (integers and decimals are one: JSON has one number type)
    becomes an Arrow column of that type. A column mixing types becomes text, each value
    written as Arrow writes a value of its own type (``true``, ``1`` for 1.0, ``0.5``): the
    parsers then reach, for every value, the verdict its type alone gives (a number is a 0/1
    boolean or a score, ``true`` is no number), whatever the other rows of the chunk hold.
    Lists and objects become their JSON text.
    """
    # (pa.array alone would take [0.5, true] as the numbers [0.5, 1.0])
    if len({_KINDS.get(t, _NESTED) for t in set(map(type, values))} - {_NULL}) <= 1:
        try:
            arr = pa.array(values)
            if not (pa.types.is_nested(arr.type) or pa.types.is_null(arr.type)):
                return arr
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
            pass  # an integer beyond int64
    kinds = [_KINDS.get(type(v), _NESTED) for v in values]
    texts: list[str | None] = [None] * len(values)
    for kind in set(kinds) - {_NULL}:
        idx = [i for i, k in enumerate(kinds) if k == kind]
        if kind == _TEXT:
            got = [values[i] for i in idx]
        elif kind == _NESTED:
            got = [json.dumps(values[i]) for i in idx]
        else:
            got = _scalar_texts([values[i] for i in idx])
        for i, t in zip(idx, got, strict=True):
            texts[i] = t
    return pa.array(texts, type=pa.string())


_TWICE: Final = "key given twice"


def _jsonl_record(raw: bytes) -> tuple[Any, str, tuple[str, str] | None]:
    """``(record, text, problem)`` of one JSONL line (without its line end): the parsed
    object, the line as text, and ``(reject key, reason)`` when it is not an object."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        text = raw.decode("utf-8", "backslashreplace")
        return None, text, ("not UTF-8", f"line is not valid UTF-8 text ({exc.reason} at byte "
                                         f"{exc.start}): {text[:80]!r}")
    try:
        rec = loads_strict(text)
    except json.JSONDecodeError as exc:
        return None, text, ("not a JSON object", f"line is not a JSON object ({exc.msg} at "
                                                 f"column {exc.colno}): {text[:80]!r}")
    except RecursionError:
        return None, text, ("not a JSON object",
                            f"line is not a JSON object (nested too deeply): {text[:80]!r}")
    except ValueError as exc:  # a key given twice: which value counts is ambiguous
        return None, text, (_TWICE, f"line gives {exc}, so which value counts is ambiguous: "
                                    f"{text[:80]!r}")
    if not isinstance(rec, dict):
        return None, text, ("not a JSON object", f"line is not a JSON object (got "
                                                 f"{type(rec).__name__}): {text[:80]!r}")
    return rec, text, None


def _jsonl_lines(path: Path) -> Generator[tuple[int, bytes], None, None]:
    """``(line number, line without its end)`` of every non-blank line of a JSONL file,
    read as bytes (each line is decoded on its own: bad UTF-8 rejects its line only)."""
    with _open_binary(path) as fh:
        for lineno, raw in enumerate(fh, start=1):
            if lineno == 1:
                raw = raw.removeprefix(b"\xef\xbb\xbf")  # a UTF-8 byte-order mark
            raw = raw.rstrip(b"\r\n")
            if raw.strip():
                yield lineno, raw


def _jsonl_columns(path: Path) -> list[str]:
    """Every key of every JSON object line, in order of first appearance.

    A first pass over the whole file: a column that first appears late (an optional
    ``p_true`` from line 300,000 on) is then validated in every row, whatever the chunk
    size, instead of being ignored in the rows read before it appeared.
    """
    columns: dict[str, None] = {}
    for _, raw in _jsonl_lines(path):
        if b"{" in raw:
            # a line that is not a record is rejected in the second pass; one that gives a
            # key twice still names its columns
            rec, text, problem = _jsonl_record(raw)
            if problem is not None and problem[0] == _TWICE:
                rec = json.loads(text)
            if isinstance(rec, dict):
                columns.update(dict.fromkeys(rec))
    return list(columns)


def _open_jsonl(path: Path, chunksize: int) -> _Reader:
    lines = _jsonl_lines(path)

    def read_block() -> tuple[list[int], list[dict[str, Any]], list[_RawReject], list[str]]:
        rows: list[int] = []
        records: list[dict[str, Any]] = []
        bad: list[_RawReject] = []
        texts: list[str] = []
        for lineno, raw in lines:
            rec, text, problem = _jsonl_record(raw)
            if problem is None:
                rows.append(lineno)
                records.append(rec)
                texts.append(text)
            else:
                bad.append(_RawReject(row=lineno, key=problem[0], message=problem[1],
                                      fields={}, line=text))
            if len(rows) + len(bad) >= chunksize:
                break
        return rows, records, bad, texts

    try:
        columns = _jsonl_columns(path)
        _resolve_columns(columns)
    except DataContractError:
        lines.close()
        raise
    first = read_block()
    reader = _Reader(format="jsonl", columns=columns, chunks=iter(()))

    def chunks() -> Iterator[_Chunk]:
        block = first
        try:
            while block[0] or block[2]:
                rows, records, bad, texts = block
                cols, nested = {}, {}
                for c in columns:
                    values = [rec.get(c) for rec in records]
                    cols[c] = _json_column(values)
                    if not pa.types.is_string(cols[c].type):
                        continue  # one scalar JSON type: nothing nested
                    mask = np.fromiter((isinstance(v, (list, dict)) for v in values),
                                       dtype=bool, count=len(values))
                    if mask.any():
                        nested[c] = mask
                yield _Chunk(columns=cols, rows=np.asarray(rows, dtype=np.int64),
                             raw_rejects=bad, lines=texts, nested=nested)
                block = read_block()
        finally:
            lines.close()

    reader.chunks = chunks()
    return reader


def _frame_table(frame: pd.DataFrame) -> pa.Table:
    def by_column() -> pa.Table:
        return pa.Table.from_arrays(
            [arrow_column(frame.iloc[:, i]) for i in range(frame.shape[1])],
            names=[str(c) for c in frame.columns])

    if any(isinstance(t, pd.DatetimeTZDtype) for t in frame.dtypes):
        return by_column()  # zoned datetimes: see _arrow.zoned_datetimes
    try:
        return pa.Table.from_pandas(frame, preserve_index=False)
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return by_column()


def _open_table(table: pa.Table, chunksize: int) -> _Reader:
    columns = list(table.schema.names)
    _resolve_columns(columns)

    def chunks() -> Iterator[_Chunk]:
        next_row = 1
        for batch in table.to_batches(max_chunksize=chunksize):
            n = batch.num_rows
            if n == 0:
                continue
            yield _Chunk(
                columns=_batch_columns(batch),
                rows=np.arange(next_row, next_row + n, dtype=np.int64),
            )
            next_row += n

    return _Reader(format="frame", columns=columns, chunks=chunks())


_T = TypeVar("_T")


def _prefetch(items: Iterator[_T], depth: int = 2) -> Iterator[_T]:
    """Run ``items`` in a background thread, ``depth`` items ahead.

    Parsing (pyarrow, which releases the GIL) then overlaps validation (numpy, likewise).
    Exceptions in the reader surface in the consumer; closing the consumer stops the reader.
    """
    q: queue.Queue[tuple[int, Any]] = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def put(item: tuple[int, Any]) -> bool:
        while not stop.is_set():
            try:
                q.put(item, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def work() -> None:
        try:
            for item in items:
                if not put((0, item)):
                    return
            put((1, None))
        except BaseException as exc:  # handed to the consumer, which re-raises it
            put((2, exc))
        finally:
            close = getattr(items, "close", None)
            if close is not None:
                close()

    thread = threading.Thread(target=work, name="amv-calib-ingest-reader", daemon=True)
    thread.start()
    try:
        while True:
            kind, value = q.get()
            if kind == 0:
                yield cast(_T, value)
            elif kind == 1:
                return
            else:
                raise value
    finally:
        stop.set()
        thread.join()


def _open_frames(frames: Iterator[Any], chunksize: int) -> _Reader:
    """A stream of DataFrames / Tables (what an adapter may return); columns of the first."""
    def as_table(f: Any) -> pa.Table:
        if isinstance(f, pd.DataFrame):
            return _frame_table(f)
        if isinstance(f, pa.Table):
            return f
        raise DataContractError(
            f"an adapter yielded {type(f).__name__}; expected a DataFrame or pyarrow Table"
        )

    first = next(frames, None)
    if first is None:
        raise MissingColumnsError("the input stream yielded no table (no columns at all)")
    head = as_table(first)
    reader = _open_table(head, chunksize)
    columns = reader.columns

    def chunks() -> Iterator[_Chunk]:
        next_row = 1
        for table in (head, *(as_table(f) for f in frames)):
            late = [c for c in table.schema.names if c not in columns]
            known = [c for c in late if canonical_name(c) is not None]
            if known:
                raise DataContractError(
                    f"a later table of the input stream adds the data-contract column(s) "
                    f"{known} that the first lacks; every table of a stream must carry the "
                    f"same contract columns (rows before it were validated without them)")
            reader.late_columns.update(late)
            for batch in table.to_batches(max_chunksize=chunksize):
                n = batch.num_rows
                if n == 0:
                    continue
                cols = _batch_columns(batch)
                yield _Chunk(
                    columns={c: cols.get(c, pa.nulls(n)) for c in columns},
                    rows=np.arange(next_row, next_row + n, dtype=np.int64),
                )
                next_row += n

    reader.chunks = chunks()
    return reader


def _open(source: Source, format: str | None, chunksize: int) -> tuple[_Reader, str]:
    if chunksize < 1:
        raise ValueError(f"chunksize={chunksize} must be >= 1")
    if isinstance(source, pd.DataFrame):
        return _open_table(_frame_table(source), chunksize), "<frame>"
    if isinstance(source, pa.Table):
        return _open_table(source, chunksize), "<frame>"
    if not isinstance(source, str | os.PathLike):
        return _open_frames(iter(source), chunksize), "<frames>"
    path = Path(source)
    if not path.exists():
        raise DataContractError(f"input {str(path)!r} does not exist")
    if not path.is_dir():
        require_regular(path)  # a FIFO or a device: refused at once, never waited on
    fmt = detect_format(path, format)
    if fmt == "csv":
        reader = _open_csv(path, chunksize)
    elif fmt == "parquet":
        reader = _open_parquet(path, chunksize)
    else:
        reader = _open_jsonl(path, chunksize)
    reader.chunks = _prefetch(reader.chunks)
    return reader, str(path)


# --------------------------------------------------------------------------------------
# column parsers: each returns values plus the rows with each kind of problem


@dataclass(kw_only=True)
class _Problem:
    key: str
    mask: BoolArray
    # Builds the reason from the original text of the field (None when missing).
    message: Callable[[str | None], str]


@dataclass(kw_only=True)
class _Parsed:
    values: pa.Array  # output type; null where missing or bad
    problems: list[_Problem]


def _empty_mask(s: pa.Array, nulls: BoolArray) -> BoolArray:
    """Non-null strings that are empty or all whitespace."""
    n = len(s)
    if n and pa.types.is_large_string(s.type) and s.buffers()[2] is not None:
        # Only a string that is empty or starts with a control, space or non-ASCII byte
        # can trim to nothing: the trim runs on those alone.
        offsets = np.frombuffer(s.buffers()[1], dtype=np.int64)[s.offset: s.offset + n + 1]
        data = np.frombuffer(s.buffers()[2], dtype=np.uint8)
        begin, lengths = offsets[:-1], np.diff(offsets)
        first = data[np.minimum(begin, max(len(data) - 1, 0))] if len(data) else begin * 0
        maybe = (lengths == 0) | (first <= 0x20) | (first >= 0x7F)
        if not maybe.any():
            return np.zeros(n, dtype=bool)
        if maybe.sum() * 4 < n:
            idx = np.flatnonzero(maybe)
            sub = s.take(pa.array(idx, type=pa.int64()))
            empty = np.zeros(n, dtype=bool)
            empty[idx] = np_mask(pc.fill_null(pc.equal(pc.utf8_trim_whitespace(sub), ""),
                                               False))
            return empty & ~nulls
    empty = np_mask(pc.fill_null(pc.equal(pc.utf8_trim_whitespace(s), ""), False))
    return empty & ~nulls


def _missing_problems(col: str, nulls: BoolArray, empty: BoolArray) -> list[_Problem]:
    return [
        _Problem(key=f"{col} missing", mask=nulls, message=lambda _t: f"{col} is missing"),
        _Problem(key=f"{col} empty", mask=empty, message=lambda _t: f"{col} is empty"),
    ]


def _text_to_float(s: pa.Array) -> tuple[pa.Array, BoolArray]:
    """Parse strings as float64; returns values (null where not a number) and the non-null,
    non-empty rows that did not parse."""
    try:
        return pc.cast(s, pa.float64()), np.zeros(len(s), dtype=bool)
    except pa.ArrowInvalid:
        pass
    trimmed = pc.utf8_trim_whitespace(s)
    nonempty = np_mask(pc.fill_null(pc.not_equal(trimmed, ""), False))
    looks = np_mask(pc.fill_null(pc.match_substring_regex(trimmed, NUMBER_LIKE), False))
    values, failed = cast_subset(trimmed, looks, pa.float64())
    return values, failed | (nonempty & ~looks)


def _parse_float(col: str, arr: pa.Array, spec: _Spec) -> _Parsed:
    nulls = null_mask(arr)
    n = len(arr)
    empty = np.zeros(n, dtype=bool)
    if is_stringish(arr):
        s = string_view(arr)
        values, invalid = _text_to_float(s)
        if invalid.any() or values.null_count > int(nulls.sum()):
            empty = _empty_mask(s, nulls)
            invalid &= ~empty
    elif is_number_type(arr.type):
        values, invalid = pc.cast(arr, pa.float64()), np.zeros(n, dtype=bool)
    elif pa.types.is_null(arr.type):
        values, invalid = pa.nulls(n, pa.float64()), np.zeros(n, dtype=bool)
    else:  # booleans, timestamps, nested: not a number
        values, invalid = pa.nulls(n, pa.float64()), ~nulls
    x = np.asarray(values.to_numpy(zero_copy_only=False), dtype=np.float64)
    parsed = ~(nulls | empty | invalid)
    with np.errstate(invalid="ignore"):
        nonfinite = parsed & ~np.isfinite(x)
        finite = parsed & ~nonfinite
        below = finite & (x < spec.lo)
        above = finite & (x > spec.hi)
    problems = []
    if spec.required:
        problems += _missing_problems(col, nulls, empty)
    problems.append(_Problem(key=f"{col} not a number", mask=invalid,
                             message=lambda t: f"{col}={t!r} is not a number"))
    problems.append(_Problem(key=f"{col} not finite", mask=nonfinite,
                             message=lambda t: f"{col}={t} is not finite"))
    if spec.hi < math.inf:
        bounds = f"[{_fmt(spec.lo)}, {_fmt(spec.hi)}]"
        problems.append(_Problem(key=f"{col} outside {bounds}", mask=below | above,
                                 message=lambda t: f"{col}={t} outside {bounds}"))
    elif spec.lo == 0.0:
        problems.append(_Problem(key=f"{col} negative", mask=below,
                                 message=lambda t: f"{col}={t} is negative"))
    rejected = ~finite | below | above
    if rejected.any() or values.type != pa.float64():
        values = pa.array(x, mask=rejected)
    return _Parsed(values=values, problems=problems)


def _fmt(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else repr(x)


_TRUE_SET: Final = pa.array(_TRUE)
_FALSE_SET: Final = pa.array(_FALSE)
_TRUE_FAST: Final = pa.array(sorted({f(v) for v in _TRUE for f in (str, str.upper, str.title)}))
_FALSE_FAST: Final = pa.array(sorted({f(v) for v in _FALSE for f in (str, str.upper, str.title)}))
_BOOL_FAST: Final = pa.concat_arrays([_TRUE_FAST, _FALSE_FAST])


def _parse_bool(col: str, arr: pa.Array, spec: _Spec) -> _Parsed:
    nulls = null_mask(arr)
    n = len(arr)
    empty = np.zeros(n, dtype=bool)
    if pa.types.is_boolean(arr.type):
        values = arr
        invalid = np.zeros(n, dtype=bool)
    elif is_number_type(arr.type):
        x = np.asarray(pc.cast(arr, pa.float64()).to_numpy(zero_copy_only=False))
        with np.errstate(invalid="ignore"):
            is_true, is_false = x == 1.0, x == 0.0
        invalid = ~(is_true | is_false | nulls)
        values = pa.array(is_true, mask=~(is_true | is_false))
    elif is_stringish(arr):
        s = string_view(arr)
        try:
            # Arrow's cast takes true/false in any case and 1/0 (a subset of the spellings
            # accepted here, mapped alike) and fails on anything else; nulls stay null.
            values = pc.cast(s, pa.bool_())
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            pass
        else:
            return _Parsed(values=values, problems=_bool_problems(col, nulls, empty, spec))
        # Common spellings first; only a column with others pays for trim + lower-case.
        where = pc.index_in(s, value_set=_BOOL_FAST)
        code = np.asarray(pc.fill_null(where, -1).to_numpy(zero_copy_only=False))
        is_true = (code >= 0) & (code < len(_TRUE_FAST))
        is_false = code >= len(_TRUE_FAST)
        ok = code >= 0
        if not (ok | nulls).all():
            s = pc.utf8_lower(pc.utf8_trim_whitespace(s))
            is_true = np_mask(pc.fill_null(pc.is_in(s, value_set=_TRUE_SET), False))
            is_false = np_mask(pc.fill_null(pc.is_in(s, value_set=_FALSE_SET), False))
            ok = is_true | is_false
            empty = np_mask(pc.fill_null(pc.equal(s, ""), False)) & ~nulls
        invalid = ~(ok | nulls | empty)
        values = pa.array(is_true, mask=~ok)
    else:
        values = pa.nulls(n, pa.bool_())
        invalid = ~nulls
    return _Parsed(values=values, problems=_bool_problems(col, nulls, empty, spec, invalid))


def _bool_problems(col: str, nulls: BoolArray, empty: BoolArray, spec: _Spec,
                   invalid: BoolArray | None = None) -> list[_Problem]:
    problems = _missing_problems(col, nulls, empty) if spec.required else []
    problems.append(_Problem(
        key=f"{col} not a boolean",
        mask=np.zeros(len(nulls), dtype=bool) if invalid is None else invalid,
        message=lambda t: f"{col}={t!r} is not a boolean ({_BOOL_HINT})",
    ))
    return problems


def _parse_timestamp(col: str, arr: pa.Array, spec: _Spec) -> _Parsed:
    t = parse_timestamps(arr)
    problems = _missing_problems(col, t.missing, t.empty)
    for attr, key, message in TIMESTAMP_PROBLEMS:
        problems.append(_Problem(key=f"{col} {key}", mask=getattr(t, attr),
                                 message=_reason(message, col)))
    return _Parsed(values=t.values, problems=problems)


def _reason(message: str, col: str) -> Callable[[str | None], str]:
    return lambda text: message.format(field=col, text=text)


def _parse_id(col: str, arr: pa.Array, spec: _Spec) -> _Parsed:
    s = string_view(arr)
    nulls = null_mask(s)
    empty = _empty_mask(s, nulls)
    problems = _missing_problems(col, nulls, empty)
    if pa.types.is_nested(arr.type):  # a typed list or struct column: no id
        problems.append(_not_scalar(col, ~nulls))
    # the one rule of every claim_id reader: surrounding white space is no part of an id
    return _Parsed(values=pc.cast(strip_ids(s), pa.large_string()), problems=problems)


def _not_scalar(col: str, mask: BoolArray) -> _Problem:
    return _Problem(key=f"{col} not a string or number", mask=mask,
                    message=lambda t: f"{col}={t} is a list or an object, not a string or "
                                      f"number")


def _parse_str(col: str, arr: pa.Array, spec: _Spec) -> _Parsed:
    # An empty optional field is missing (null), as in every other format.
    s = pc.cast(string_view(arr), pa.large_string())
    empty = pc.equal(s, "")
    if pc.any(empty).as_py():
        s = pc.if_else(empty, pa.scalar(None, pa.large_string()), s)
    return _Parsed(values=s, problems=[])


_PARSERS: Final[dict[_Kind, Callable[[str, pa.Array, _Spec], _Parsed]]] = {
    "id": _parse_id,
    "timestamp": _parse_timestamp,
    "float": _parse_float,
    "bool": _parse_bool,
    "str": _parse_str,
}


# --------------------------------------------------------------------------------------
# duplicate (claim_id, timestamp) detection across chunks

_GOLDEN: Final = np.uint64(0x9E3779B97F4A7C15)
_MUL: Final = np.uint64(0xFF51AFD7ED558CCD)


def _mix64(h: NDArray[np.uint64]) -> NDArray[np.uint64]:
    """splitmix64 finaliser (in place on a fresh array)."""
    h = h ^ (h >> np.uint64(30))
    h *= np.uint64(0xBF58476D1CE4E5B9)
    h ^= h >> np.uint64(27)
    h *= np.uint64(0x94D049BB133111EB)
    h ^= h >> np.uint64(31)
    return h


# _BYTE_MASKS[r] keeps the low r bytes of a little-endian 8-byte word.
_BYTE_MASKS: Final = np.array([(1 << (8 * r)) - 1 for r in range(9)], dtype=np.uint64)


def _string_hash(arr: pa.Array) -> NDArray[np.uint64]:
    """64-bit hash of each string, vectorised over 8-byte words of the UTF-8 data.

    Word ``k`` of every string is read at once through an unaligned view of the data
    buffer, so the cost is one pass per word of the longest string, not per byte.
    """
    if not pa.types.is_large_string(arr.type):
        arr = pc.cast(arr, pa.large_string())
    n = len(arr)
    if n == 0:
        return np.zeros(0, dtype=np.uint64)
    offsets = np.frombuffer(arr.buffers()[1], dtype=np.int64)[arr.offset: arr.offset + n + 1]
    start, stop = int(offsets[0]), int(offsets[-1])
    width = (stop - start) // n
    if width and width * n == stop - start and (np.diff(offsets) == width).all():
        return _fixed_width_hash(arr.buffers()[2], start, n, width)
    padded = np.zeros(stop - start + 8, dtype=np.uint8)
    data_buf = arr.buffers()[2]
    if data_buf is not None and stop > start:
        padded[: stop - start] = np.frombuffer(data_buf, dtype=np.uint8)[start:stop]
    words = np.ndarray(shape=(stop - start + 1,), dtype=np.uint64, buffer=padded, strides=(1,))
    begin = offsets[:-1] - start
    lengths = np.diff(offsets)
    shortest, longest = int(lengths.min()), int(lengths.max())
    h = lengths.astype(np.uint64) * _GOLDEN
    for k in range(-(-longest // 8)):
        w = words[np.minimum(begin + 8 * k, stop - start)]
        if shortest < 8 * (k + 1):
            w &= _BYTE_MASKS[np.clip(lengths - 8 * k, 0, 8)]
        step = (h ^ w) * _MUL
        step ^= step >> np.uint64(29)
        # Strings that have ended keep their hash: it must not depend on the chunk.
        h = step if shortest > 8 * k else np.where(lengths > 8 * k, step, h)
    return h


def _fixed_width_hash(data: pa.Buffer, start: int, n: int, width: int
                      ) -> NDArray[np.uint64]:
    """:func:`_string_hash` of ``n`` strings of ``width`` bytes each, stored from ``start``.

    The same words, zero-padded past the end of each string, read as rows of a matrix.
    """
    words = -(-width // 8)
    padded = np.zeros((n, 8 * words), dtype=np.uint8)
    padded[:, :width] = np.frombuffer(data, dtype=np.uint8)[start: start + n * width
                                                            ].reshape(n, width)
    w = padded.view(np.uint64)
    h = np.full(n, width, dtype=np.uint64) * _GOLDEN
    for k in range(words):
        step = (h ^ w[:, k]) * _MUL
        step ^= step >> np.uint64(29)
        h = step
    return h


def _pair_hash(ids: pa.Array, ts_us: pa.Array) -> NDArray[np.uint64]:
    t = np.asarray(pc.cast(ts_us, pa.int64()).fill_null(0).to_numpy(), dtype=np.int64)
    h = _string_hash(ids)
    h ^= (t.astype(np.uint64) + _GOLDEN) * _MUL
    return _mix64(h)


class _SeenKeys:
    """Hashes of accepted (claim_id, timestamp) pairs and the rows that hold them.

    Membership: a bitmap over the keys' top 26 bits (8 MiB) screens each lookup, and the
    keys it lets through are searched in sorted runs: up to ``_FRESH`` per-chunk runs, then
    their merge, merged log-structured (amortised O(n log n)); a file of a few chunks is
    never merged at all, as lookups in a few runs cost less than merging them. The row of a
    hit is looked up in the unsorted per-chunk arrays, which only happens for duplicates.
    24 bytes per accepted row (240 MB for 10 M rows), plus the run being merged.
    """

    # A bitmap over the top bits of the keys screens lookups: only keys whose bit is set
    # (seen keys, plus about n / 2**26 of the others) are searched in the runs.
    _FILTER_BITS: Final = 26
    _FRESH: Final = 8

    def __init__(self) -> None:
        self._runs: list[NDArray[np.uint64]] = []
        self._fresh: list[NDArray[np.uint64]] = []
        self._keys: list[NDArray[np.uint64]] = []
        self._rows: list[IntArray] = []
        self._filter = np.zeros(1 << (self._FILTER_BITS - 3), dtype=np.uint8)

    def _bits(self, q: NDArray[np.uint64]) -> tuple[IntArray, NDArray[np.uint8]]:
        top = (q >> np.uint64(64 - self._FILTER_BITS)).astype(np.int64)
        return top >> 3, np.left_shift(np.uint8(1), (top & 7).astype(np.uint8))

    def contains(self, q: NDArray[np.uint64]) -> BoolArray:
        """Which of the sorted keys ``q`` are present."""
        hit = np.zeros(len(q), dtype=bool)
        if not (self._runs or self._fresh) or len(q) == 0:
            return hit
        byte, bit = self._bits(q)
        maybe = np.flatnonzero(self._filter[byte] & bit)
        if len(maybe) == 0:
            return hit
        cand = q[maybe]
        found = np.zeros(len(cand), dtype=bool)
        for run in (*self._runs, *self._fresh):
            pos = np.searchsorted(run, cand)
            np.minimum(pos, len(run) - 1, out=pos)
            found |= run[pos] == cand
        hit[maybe] = found
        return hit

    def rows_of(self, keys: Iterable[int]) -> dict[int, int]:
        wanted = np.fromiter(keys, dtype=np.uint64)
        found: dict[int, int] = {}
        for k, r in zip(self._keys, self._rows, strict=True):
            sel = np.isin(k, wanted)
            for key, row in zip(k[sel].tolist(), r[sel].tolist(), strict=True):
                found.setdefault(key, row)
        return found

    def add(self, keys: NDArray[np.uint64], rows: IntArray, *,
            sorted_keys: NDArray[np.uint64] | None = None) -> None:
        """Register new, distinct keys (``sorted_keys``: the same keys sorted, if at hand)."""
        if len(keys) == 0:
            return
        self._keys.append(keys)
        self._rows.append(rows)
        run = np.sort(keys) if sorted_keys is None else sorted_keys
        byte, bit = self._bits(run)  # sorted keys: byte indices ascending
        starts = np.flatnonzero(np.r_[True, byte[1:] != byte[:-1]])
        self._filter[byte[starts]] |= np.bitwise_or.reduceat(bit, starts)
        self._fresh.append(run)
        if len(self._fresh) < self._FRESH:
            return
        self._runs.append(np.sort(np.concatenate(self._fresh)))
        self._fresh = []
        # Binary-counter merging: each key is merged O(log(n / chunk)) times in all.
        while len(self._runs) > 1 and len(self._runs[-2]) <= len(self._runs[-1]):
            b = self._runs.pop()
            a = self._runs.pop()
            self._runs.append(_merge_sorted(a, b))


def _merge_sorted(a: NDArray[np.uint64], b: NDArray[np.uint64]) -> NDArray[np.uint64]:
    # numpy's vectorised sort of the concatenation beats an insertion merge by far.
    return np.sort(np.concatenate([a, b]))


def _duplicates(
    keys: NDArray[np.uint64], candidate: BoolArray, valid: BoolArray, rows: IntArray,
    seen: _SeenKeys,
) -> tuple[IntArray, Callable[[], None]]:
    """Row of the earlier accepted occurrence for each row (0 if none), and the call that
    registers the new keys in ``seen`` (nothing is registered until it is made).

    ``candidate``: rows whose key parsed; ``valid``: candidates without other problems.
    The first valid occurrence of a key is accepted; later occurrences (valid or not) are
    duplicates of it.
    """
    n = len(keys)
    dup_of = np.zeros(n, dtype=np.int64)
    ck = keys[candidate]
    s = np.sort(ck)
    repeated = s[1:][s[1:] == s[:-1]]
    in_seen = seen.contains(s) if len(s) else np.zeros(0, dtype=bool)
    involved_keys = np.unique(np.concatenate([repeated, s[in_seen]]))
    if len(involved_keys) == 0:
        if valid.sum() == len(s):  # every key is new and accepted: s is already sorted
            return dup_of, lambda: seen.add(ck, rows[candidate], sorted_keys=s)
        new = valid
    else:
        involved = candidate & np.isin(keys, involved_keys)
        earlier = seen.rows_of(s[in_seen].tolist())
        new = valid & ~involved
        for i in np.flatnonzero(involved).tolist():
            key = int(keys[i])
            first = earlier.get(key)
            if first is not None:
                dup_of[i] = first
            elif valid[i]:
                earlier[key] = int(rows[i])
                new[i] = True
    return dup_of, lambda: seen.add(keys[new], rows[new])


# --------------------------------------------------------------------------------------
# validation of one chunk


@dataclass(kw_only=True)
class _ChunkResult:
    claims: pa.Table
    rejects: pa.Table
    reason_counts: Counter[str]
    # per rejects row, its text exactly as read where the reader kept it (else None)
    reject_lines: list[str | None] = field(default_factory=list)


@dataclass(kw_only=True)
class _ParsedChunk:
    chunk: _Chunk
    parsed: dict[str, _Parsed]
    sources: dict[str, pa.Array]  # the input column each output column was parsed from
    filled: set[str] = field(default_factory=set)  # other spellings that filled a row
    bad: BoolArray  # rows with a problem other than being a duplicate
    key_ok: BoolArray  # rows whose (claim_id, timestamp) parsed
    keys: NDArray[np.uint64]


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
    *,
    clean_only: bool = False,
) -> _ChunkResult | None:
    """Duplicates, reasons and the two output tables of one parsed chunk (sequential).

    ``clean_only``: return None, leaving ``seen`` as it was, if any row is to be rejected.
    """
    chunk, parsed = pchunk.chunk, pchunk.parsed
    n = len(chunk.rows)
    if clean_only and (chunk.raw_rejects or pchunk.bad.any()):
        return None
    bad = pchunk.bad.copy()
    dup_of, register = _duplicates(pchunk.keys, pchunk.key_ok, pchunk.key_ok & ~bad,
                                   chunk.rows, seen)
    is_dup = dup_of > 0
    if clean_only and is_dup.any():
        return None
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


# --------------------------------------------------------------------------------------
# public API


@dataclass(kw_only=True)
class _Run:
    reader: _Reader
    input: str
    mapping: dict[str, str]
    ignored: list[str]
    out_columns: list[str]
    claims_schema: pa.Schema
    rejects_schema: pa.Schema
    read: int = 0
    accepted: int = 0
    rejected: int = 0
    counts: Counter[str] = field(default_factory=Counter)
    filled: set[str] = field(default_factory=set)  # alias spellings that supplied values

    def summary(self, out: str | None) -> IngestSummary:
        ignored = [*(c for c in self.ignored if c not in self.filled),
                   *sorted(self.reader.late_columns)]
        return IngestSummary(
            read=self.read, accepted=self.accepted, rejected=self.rejected,
            rejected_by_reason=dict(sorted(self.counts.items())),
            ignored_columns=tuple(ignored), format=self.reader.format, input=self.input,
            out=out,
        )


def _start(source: Source, format: str | None, chunksize: int) -> _Run:
    reader, name = _open(source, format, chunksize)
    mapping, ignored = _resolve_columns(reader.columns)
    out_columns = [c for c in _SPECS if c in mapping]
    if ignored:
        _log.info("ingest: ignoring columns not in the data contract: %s", ", ".join(ignored))
    claims_schema = pa.schema(
        [("row", pa.int64())] + [(c, _ARROW_TYPES[_SPECS[c].kind]) for c in out_columns]
    )
    rejects_schema = pa.schema(
        [("row", pa.int64()), ("reason", pa.string())]
        + [(_reject_name(c), pa.string()) for c in reader.columns]
    )
    return _Run(reader=reader, input=name, mapping=mapping, ignored=ignored,
                out_columns=out_columns, claims_schema=claims_schema,
                rejects_schema=rejects_schema)


def _results(run: _Run) -> Iterator[_ChunkResult]:
    seen = _SeenKeys()
    next_report = _PROGRESS_EVERY
    # Parsing runs in the consumer's thread: a pipeline stage of its own for it measured
    # slower (its many short numpy / pyarrow calls then contend for the GIL with validation).
    def parse(chunk: _Chunk) -> _ParsedChunk:
        if chunk.future is not None:
            chunk = chunk.future.result()
        if chunk.parsed is not None:
            return chunk.parsed
        return _parse_chunk(chunk, run.mapping, run.out_columns)

    parsed: Iterator[_ParsedChunk] = (parse(chunk) for chunk in run.reader.chunks)
    for pchunk in parsed:
        chunk = pchunk.chunk
        run.filled |= pchunk.filled
        res = _validate(pchunk, run.mapping, run.reader.columns, run.out_columns, seen,
                        clean_only=chunk.as_text is not None)
        if res is None:
            # Parsed by the reader and some row is to be rejected: validate its text, so the
            # reasons and the rejected fields are exactly those of the text path.
            assert chunk.as_text is not None
            chunk = _Chunk(columns=chunk.as_text(), rows=chunk.rows)
            res = _validate(_parse_chunk(chunk, run.mapping, run.out_columns), run.mapping,
                            run.reader.columns, run.out_columns, seen)
            assert res is not None
        run.read += len(chunk.rows) + len(chunk.raw_rejects)
        run.accepted += res.claims.num_rows
        run.rejected += res.rejects.num_rows
        run.counts.update(res.reason_counts)
        if run.read >= next_report:
            _log.info("ingest: %s rows read, %s rejected", f"{run.read:,}", f"{run.rejected:,}")
            next_report = (run.read // _PROGRESS_EVERY + 1) * _PROGRESS_EVERY
        yield res
    if run.read != run.accepted + run.rejected:  # pragma: no cover - an internal invariant
        raise AmvCalibError(
            f"ingest lost rows: read {run.read} != accepted {run.accepted} + rejected "
            f"{run.rejected}"
        )


def iter_claim_chunks(
    source: Source, *, format: str | None = None, chunksize: int = DEFAULT_CHUNKSIZE
) -> Iterator[tuple[pa.Table, pa.Table]]:
    """Validate ``source`` chunk by chunk, yielding ``(claims, rejects)`` Arrow tables.

    The streaming form of :func:`load_claims`, for inputs too large to hold at once.
    ``claims`` has a leading ``row`` column (1-based input row). Missing required columns
    raise :class:`MissingColumnsError` before the first chunk is read.
    """
    run = _start(source, format, chunksize)

    def gen() -> Iterator[tuple[pa.Table, pa.Table]]:
        for res in _results(run):
            yield res.claims.combine_chunks(), res.rejects

    return gen()


def load_claims(
    source: Source,
    *,
    format: str | None = None,
    chunksize: int = DEFAULT_CHUNKSIZE,
    on_reject: Literal["return", "raise"] = "return",
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Read and validate a claim-outcome table.

    Parameters
    ----------
    source : path, pandas.DataFrame or pyarrow.Table
        A CSV, Parquet or JSONL file, a directory of Parquet files (a partitioned dataset),
        or an in-memory table. Column names may use the aliases of ``amv_calib.contract._schema``.
    format : {"csv", "parquet", "jsonl"}, optional
        Overrides the format read from the file ending.
    chunksize : int
        Rows validated at a time.
    on_reject : {"return", "raise"}, default "return"
        What a row that breaks the contract does: go to ``rejects``, or fail the whole read
        with a :class:`DataContractError` naming the first such row and its reasons (for a
        table that must be used whole, such as the training rows of a comparison).

    Returns
    -------
    claims : pandas.DataFrame
        Accepted rows, canonical columns (required ones, then the optional ones present),
        indexed by their 1-based input row number (index name ``row``). ``timestamp`` is
        ``datetime64[us, UTC]``, the scores float64, the flags bool.
    rejects : pandas.DataFrame
        Columns ``row``, ``reason`` and the input's own columns as text.

    Raises
    ------
    MissingColumnsError
        If a required column is absent (before any row is read).
    DataContractError
        If the file cannot be read at all, or the format is unknown; with
        ``on_reject="raise"``, if a row breaks the contract.

    Examples
    --------
    Every row is accepted or rejected with its row number and the reason:

    >>> import pandas as pd
    >>> from amv_calib.claims import load_claims
    >>> table = pd.DataFrame({
    ...     "claim_id": ["iban-42", "addr-7"],
    ...     "timestamp": ["2026-11-02T10:00:00Z", "2026-11-03T09:30:00Z"],
    ...     "recency_hours": [310.0, 12.0], "source_trust_score": [0.8, 1.7],
    ...     "model_confidence": [0.93, 0.6], "contradiction_flag": [False, True],
    ...     "violated": [False, True]})
    >>> claims, rejects = load_claims(table)
    >>> claims["claim_id"].tolist(), rejects[["row", "reason"]].values.tolist()
    (['iban-42'], [[2, 'source_trust_score=1.7 outside [0, 1]']])
    """
    check_choice("on_reject", on_reject, ("return", "raise"))
    run = _start(source, format, chunksize)
    claims_parts: list[pa.Table] = []
    reject_parts: list[pa.Table] = []
    for res in _results(run):
        claims_parts.append(res.claims)
        reject_parts.append(res.rejects)
    claims_t = pa.concat_tables(claims_parts) if claims_parts else run.claims_schema.empty_table()
    rejects_t = (pa.concat_tables(reject_parts) if reject_parts
                 else run.rejects_schema.empty_table())
    if on_reject == "raise" and rejects_t.num_rows:
        raise _rejected(run, rejects_t)
    claims = claims_t.to_pandas().set_index("row")
    rejects = rejects_t.to_pandas()
    return claims, rejects


def _rejected(run: _Run, rejects: pa.Table) -> DataContractError:
    """The error for a table that had to be accepted whole: its first rejected row."""
    first = int(pc.min(rejects["row"]).as_py())
    at = pc.index(rejects["row"], first).as_py()
    reason = rejects["reason"][at].as_py()
    where = "the claims table" if run.input.startswith("<") else run.input
    more = rejects.num_rows - 1
    also = f"; {more} more row{'s' if more > 1 else ''} break{'' if more > 1 else 's'} it" \
        if more else ""
    return DataContractError(
        f"row {first} of {where} (1-based) breaks the data contract: {reason}{also}")


_LOW_CARDINALITY: Final = ("source", "tool_name", "family", "defaulted_features")


def ingest_file(
    source: Source,
    out_dir: str | os.PathLike[str],
    *,
    format: str | None = None,
    chunksize: int = DEFAULT_CHUNKSIZE,
    overwrite: bool = False,
) -> IngestSummary:
    """Validate ``source``; write ``claims.parquet``, ``rejects.csv`` and ``rejects.jsonl``.

    The files are written incrementally (bounded memory) to temporary names and renamed
    into place at the end, so a failure leaves no half-written output. ``claims.parquet``
    holds the canonical columns without the row number. ``rejects.csv`` (to read, in a
    spreadsheet too) has the columns ``row, reason`` and then the input's own columns as
    text, a cell that a spreadsheet would run as a formula (starting ``=``, ``+``, ``-``,
    ``@``, a tab or a carriage return) prefixed with ``'`` as OWASP recommends.
    ``rejects.jsonl`` (to process, or to fix and ingest again) holds the same rows
    losslessly: ``{"row", "reason", "fields": {column: text}, "line": text as read}``
    (``line`` is the exact input line where the reader kept it: JSONL, and malformed CSV
    rows; else null).

    The folder's ``written_by.json`` records that ``ingest`` wrote these files; files another
    command wrote there (``label``'s ``claims.parquet``) are not replaced unless
    ``overwrite``, and then that command's other files are removed too
    (:mod:`amv_calib.claims._outputs`).

    Returns
    -------
    IngestSummary
        Counts, with ``read == accepted + rejected``.

    Raises
    ------
    OutputConflictError
        ``out_dir`` holds a file of the same name that another command wrote.
    """
    out = Path(out_dir)
    names = ("claims.parquet", "rejects.csv", "rejects.jsonl")
    claim_outputs(out, "ingest", names, overwrite=overwrite)
    run = _start(source, format, chunksize)
    out.mkdir(parents=True, exist_ok=True)
    final = {name: out / name for name in names}
    tmp = {name: out / f".{name}.{os.getpid()}.tmp" for name in final}
    claims_schema = run.claims_schema.remove(0)
    # Dictionary pages only pay off for the low-cardinality text columns; for ids and
    # floats they cost time (the writer tries them, then falls back).
    dictionary = [c for c in _LOW_CARDINALITY if c in claims_schema.names]
    try:
        with pq.ParquetWriter(tmp["claims.parquet"], claims_schema,
                              use_dictionary=dictionary) as pw, \
                pacsv.CSVWriter(tmp["rejects.csv"], run.rejects_schema) as cw, \
                open(tmp["rejects.jsonl"], "w", encoding="utf-8", newline="\n") as jw:
            cw.write_table(run.rejects_schema.empty_table())  # the header, even if no rows
            # Validation runs ahead in a thread, so writing overlaps the next chunk.
            for res in _prefetch(_results(run)):
                if res.claims.num_rows:
                    # One contiguous array per column: the pages written depend on it.
                    pw.write_table(res.claims.drop_columns(["row"]).combine_chunks())
                if res.rejects.num_rows:
                    cw.write_table(spreadsheet_safe(res.rejects))
                    _write_reject_lines(jw, res)
            if run.accepted == 0:
                pw.write_table(claims_schema.empty_table())
        for name, path in final.items():
            os.replace(tmp[name], path)
        record_outputs(out, "ingest", names)
    finally:
        for path in tmp.values():
            path.unlink(missing_ok=True)
    return run.summary(str(out))
