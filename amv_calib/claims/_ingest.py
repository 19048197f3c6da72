"""Ingestion of claim-outcome tables: validation, quarantine of bad rows, summaries.

Every input row ends up in exactly one of two places: the accepted claims table (canonical
snake_case columns, proper dtypes) or the rejects table (its 1-based row number, the reason,
and the original fields as read). The rules are documented in ``docs/data.md``.

Reading streams: CSV through pyarrow's streaming CSV reader, every field as text (the
parsers of ``_ingest_parse`` then give every value its verdict), Parquet through
``iter_batches`` (or a ``pyarrow.dataset`` scan for a directory of Parquet files), JSONL a
block of lines at a time. Validation is vectorised per chunk; Python loops run over bad rows
only.

This module is the public API. The work is done in private modules, one concern each:
``_ingest_columns`` (the contract's columns and how an input spells them), ``_ingest_read``
(the readers), ``_ingest_chunk`` (what a reader hands to validation), ``_ingest_parse``
(column parsers), ``_ingest_dedupe`` (duplicate keys) and ``_ingest_validate`` (validation of
one chunk).
"""

from __future__ import annotations

import json
import logging
import os
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal, TypeAlias, cast, get_args

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from amv_calib.claims._ingest_chunk import _Chunk
from amv_calib.claims._ingest_columns import (
    _ARROW_TYPES,
    _SPECS,
    LABEL_COLUMNS,
    _resolve_columns,
)
from amv_calib.claims._ingest_dedupe import _SeenKeys
from amv_calib.claims._ingest_read import (
    _frame_table,
    _open_csv,
    _open_frames,
    _open_jsonl,
    _open_parquet,
    _open_table,
    _prefetch,
    _Reader,
)
from amv_calib.claims._ingest_validate import (
    _ChunkResult,
    _parse_chunk,
    _reject_name,
    _validate,
    _write_reject_lines,
)
from amv_calib.claims._outputs import claim_outputs, record_outputs, spreadsheet_safe
from amv_calib.contract import OPTIONAL_COLUMNS, REQUIRED_COLUMNS, require_regular
from amv_calib.exceptions import AmvCalibError, DataContractError, check_choice

_log = logging.getLogger(__name__)

Format = Literal["csv", "parquet", "jsonl"]
FORMATS: Final[tuple[str, ...]] = get_args(Format)

#: Rows per validation chunk (CSV chunks are whole parser blocks, so about this many).
DEFAULT_CHUNKSIZE: Final = 250_000

#: Progress is logged (INFO) each time this many more rows have been read.
_PROGRESS_EVERY: Final = 1_000_000

Source: TypeAlias = "str | os.PathLike[str] | pd.DataFrame | pa.Table | Iterable[Any]"

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
# format detection and opening a source


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
    try:
        if fmt == "csv":
            reader = _open_csv(path, chunksize)
        elif fmt == "parquet":
            reader = _open_parquet(path, chunksize)
        else:
            reader = _open_jsonl(path, chunksize)
    except OSError as exc:
        raise _unreadable(path, exc) from None
    reader.chunks = _prefetch(_naming_read_errors(reader.chunks, path))
    return reader, str(path)


def _unreadable(path: Path, exc: OSError) -> DataContractError:
    # EIO from the disk (or /proc/self/mem), a .gz that is not gzip: the file, not a traceback
    return DataContractError(f"{path}: cannot read the input file ({exc.strerror or exc})")


def _naming_read_errors(chunks: Iterator[_Chunk], path: Path) -> Iterator[_Chunk]:
    try:
        yield from chunks
    except OSError as exc:
        raise _unreadable(path, exc) from None


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
    unknown = [c for c in ignored if c not in LABEL_COLUMNS]
    if unknown:
        _log.info("ingest: ignoring columns not in the data contract: %s", ", ".join(unknown))
    if len(unknown) < len(ignored):  # label's own: known, expected, not worth a warning
        _log.debug("ingest: label's provenance columns left out of the claims table: %s",
                   ", ".join(c for c in ignored if c in LABEL_COLUMNS))
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
    for chunk in run.reader.chunks:
        pchunk = _parse_chunk(chunk, run.mapping, run.out_columns)
        run.filled |= pchunk.filled
        res = _validate(pchunk, run.mapping, run.reader.columns, run.out_columns, seen)
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
