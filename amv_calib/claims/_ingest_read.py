"""Readers of ingestion: CSV, Parquet, JSONL, and in-memory tables or streams of them.

Every reader yields chunks with the input's own column names and 1-based row numbers; a row
the reader cannot split into fields travels with its chunk as a raw reject. CSV fields are
read as text, whatever they hold: the parsers give each value its verdict.
"""

from __future__ import annotations

import csv
import io
import json
import os
import queue
import re
import threading
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, TypeVar, cast

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.dataset as pads
import pyarrow.parquet as pq

from amv_calib.claims._arrow import arrow_column
from amv_calib.claims._ingest_chunk import _batch_columns, _Chunk, _RawReject
from amv_calib.claims._ingest_columns import _resolve_columns
from amv_calib.contract import (
    canonical_name,
    loads_strict,
    lone_surrogate,
    open_regular,
    require_regular,
    surrogate_message,
)
from amv_calib.exceptions import DataContractError, MissingColumnsError

# --------------------------------------------------------------------------------------
# reading: every reader yields _Chunk objects with the original column names


@dataclass(kw_only=True)
class _Reader:
    format: str
    columns: list[str]
    chunks: Iterator[_Chunk]
    late_columns: set[str] = field(default_factory=set)


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

    def threaded_pass() -> Iterator[_Chunk]:
        """Multithreaded parsing, exact while no row is malformed (rows are then 1, 2, ...).

        A threaded parser cannot number a malformed row, so the first one (or any parse
        error) ends this pass; rows from there on are read again by :func:`exact_pass`.
        Every batch arrives after its rows were parsed, so an empty ``malformed`` list when
        a chunk is complete means that chunk and all before it were well-formed.
        """
        malformed: list[Any] = []

        def on_invalid(row: Any) -> str:
            malformed.append(row)
            return "skip"

        next_row = 1
        stream: pacsv.CSVStreamingReader | None = None
        try:
            stream = reader(True, on_invalid)
            for table in _rechunk(stream, chunksize):
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

    return _Reader(format="csv", columns=list(header), chunks=threaded_pass())


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
    # open_regular: a read that fails (EIO) raises DataContractError naming the file
    return cast(io.BufferedIOBase, open_regular(path))


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
    if "\\u" in text:  # only an escape makes a lone surrogate (the text decoded as UTF-8)
        bad = lone_surrogate(rec)
        if bad is not None:  # no Arrow string holds it: the row, not the run, is refused
            return None, text, ("not Unicode text", f"line: {surrogate_message(bad)}")
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
