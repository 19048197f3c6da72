"""What ``label`` and ``ingest`` write, and which command wrote which file of a folder.

Both commands write ``claims.parquet``. Pointed at the same folder, one would silently
replace the other's table and leave the other's reports (``claims.join_report.json``,
``rejects.csv``) describing data that is gone. So each folder they write into holds
``written_by.json``: file name -> the command that wrote it (no timestamps, so the same
run writes the same bytes). Before writing, a command refuses (:class:`OutputConflictError`,
naming the file and its writer) to replace a file another command wrote, unless told to
``overwrite``; then every file of that other command in the folder is removed first, so
nothing stale is left. Files the record does not list (written before the record existed,
or by hand) are replaced as before.
"""

from __future__ import annotations

import contextlib
import csv
import functools
import io
import itertools
import json
import os
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import numpy as np
import pandas as pd

from amv_calib.contract import loads_strict
from amv_calib.exceptions import ConfigError, DataContractError

if TYPE_CHECKING:
    import pyarrow as pa

    from amv_calib.claims._join import JoinedUses

#: The record of a folder's writers.
WRITTEN_BY: Final = "written_by.json"
#: Endings of a claims table ``label --out`` writes as a file (anything else is a folder).
TABLE_SUFFIXES: Final = (".parquet", ".pq", ".csv", ".jsonl", ".ndjson")
#: What ``label --out DIR`` writes into the folder.
LABEL_FOLDER_FILES: Final = ("claims.parquet", "claims.join_report.json", "claims.unjoined.csv",
                             "episodes.jsonl", "verifiers.json")


class OutputConflictError(ConfigError):
    """A command would overwrite a file another command wrote (exit code 2 on the CLI)."""


def _record(folder: Path) -> dict[str, str]:
    path = folder / WRITTEN_BY
    if not path.is_file():
        return {}
    try:
        files = loads_strict(path.read_text(encoding="utf-8")).get("files", {})
    except (OSError, ValueError, RecursionError, AttributeError) as exc:
        raise DataContractError(f"{path}: not a written_by record ({exc}); remove it") from exc
    return {str(k): str(v) for k, v in files.items()} if isinstance(files, Mapping) else {}


def _save(folder: Path, files: Mapping[str, str]) -> None:
    text = json.dumps({"files": dict(sorted(files.items()))}, indent=2) + "\n"
    tmp = folder / f".{WRITTEN_BY}.{os.getpid()}.tmp"
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, folder / WRITTEN_BY)


def claim_outputs(folder: str | os.PathLike[str], command: str, files: Iterable[str], *,
                  overwrite: bool = False) -> None:
    """Make room for ``command`` to write ``files`` into ``folder`` (module docs).

    Raises
    ------
    OutputConflictError
        A file of ``files`` exists and another command wrote it, and ``overwrite`` is false.
    """
    where = Path(folder)
    record = _record(where)
    names = list(files)
    others = {record[n] for n in names if n in record and record[n] != command
              and (where / n).exists()}
    if not others:
        return
    if not overwrite:
        name = next(n for n in names if record.get(n) in others and (where / n).exists())
        theirs = sorted(n for n, c in record.items() if c == record[name] and n != name)
        stale = f" and its {', '.join(theirs)} would describe data that is gone" if theirs \
            else ""
        raise OutputConflictError(
            f"{where / name} was written by `amv-calib {record[name]}`; `amv-calib {command}` "
            f"would overwrite it{stale}: pass --overwrite to replace all of that command's "
            f"files there, or write to another folder")
    for name, who in list(record.items()):
        if who in others:
            (where / name).unlink(missing_ok=True)
            del record[name]
    _save(where, record)


def record_outputs(folder: str | os.PathLike[str], command: str, files: Iterable[str]) -> None:
    """Note in ``folder/written_by.json`` that ``command`` wrote ``files``."""
    where = Path(folder)
    record = _record(where)
    record.update(dict.fromkeys(files, command))
    _save(where, record)


# ---------------------------------------------------------------------------------------------
# CSV files for people
# ---------------------------------------------------------------------------------------------
#: How times are written (``date_format`` of ``to_csv``).
STAMP: Final = "%Y-%m-%dT%H:%M:%S.%fZ"
#: The characters tried for :func:`_quote_triggers` (the ASCII controls, comma, quote).
_CANDIDATES: Final = "".join(chr(c) for c in range(32)) + ',"\x7f'


@functools.cache
def _quote_triggers() -> str:
    """The characters that make Python's csv writer quote a field, as pandas configures it
    (``QUOTE_MINIMAL``, ``\\n`` line ends): asked of the csv module itself, because the
    set has changed between Python versions (``\\r``, which DuckDB always quotes)."""
    found = []
    for ch in _CANDIDATES:
        buf = io.StringIO()
        csv.writer(buf, lineterminator="\n").writerow([f"a{ch}b", "x"])
        if buf.getvalue().startswith('"'):
            found.append(ch)
    return "".join(found)


def _csv_field(text: str, alone: bool) -> str:
    """``text`` as Python's csv writer writes a field (``alone``: the row's only field)."""
    if alone and not text:
        return '""'
    if any(ch in text for ch in _quote_triggers()):
        return '"' + text.replace('"', '""') + '"'
    return text


def _sql_field(ident: str, alone: bool) -> str:
    """The SQL of :func:`_csv_field` of a text expression (NULL stays NULL: an empty field,
    unless ``alone``)."""
    needs = " OR ".join(f"contains({ident}, chr({ord(ch)}))" for ch in _quote_triggers())
    text = f"CASE WHEN {needs} THEN '\"' || replace({ident}, '\"', '\"\"') || '\"' " \
        f"ELSE {ident} END"
    return f"CASE WHEN coalesce({ident}, '') = '' THEN '\"\"' ELSE {text} END" if alone \
        else text


def _plain_type(typ: Any, name: str) -> Any:
    """The type a column is written from: large text, int64, naive microsecond UTC times."""
    import pyarrow as pa

    if is_text(typ) or pa.types.is_null(typ):
        return pa.large_string()
    if pa.types.is_integer(typ):
        return pa.int64()
    if pa.types.is_timestamp(typ) and typ.unit == "us" and typ.tz in (None, "UTC", "+00:00"):
        return pa.timestamp("us")
    raise TypeError(f"write_csv: column {name!r} has type {typ}; only strings, integers and "
                    "UTC microsecond times are written here (pandas writes the rest)")


def write_csv(tables: Iterable[pa.Table], path: Path, *, header: bool = True) -> None:
    """Write consecutive tables to ``path`` as one CSV file, with DuckDB's CSV writer: the
    bytes ``pandas.concat([t.to_pandas() for t in tables]).to_csv(path, index=False,
    header=header, date_format=STAMP)`` writes (``tests/claims/test_csv_writer.py``).

    Python's csv module (which ``to_csv`` writes through) and DuckDB quote different fields
    (``\\r``, an empty string), so fields are quoted here in SQL and DuckDB quotes none.

    Parameters
    ----------
    tables : iterable of pyarrow.Table
        At least one (possibly empty), with the same column names (none empty, unless it is
        the only one); columns of strings (or dictionaries of strings), integers (without
        missing values: pandas would write floats), UTC microsecond times or nulls. They
        are read one at a time.
    path : Path
        The file, replaced.
    header : bool, default True
        Start with a line of the column names.
    """
    import duckdb
    import pyarrow as pa

    parts = iter(tables)
    first = next(parts, None)
    if first is None:
        raise ValueError(f"write_csv {path}: no tables (give at least one, possibly empty)")
    names = first.column_names
    types = [_plain_type(t, n) for n, t in zip(names, first.schema.types, strict=True)]
    # DuckDB reads the columns as c0, c1, ... (any name is then a plain identifier)
    schema = pa.schema([(f"c{i}", t) for i, t in enumerate(types)])
    if len(names) > 1 and "" in names:
        raise ValueError(f"write_csv {path}: column {names.index('')} has no name (DuckDB "
                         "names no column of a header by an empty field)")
    failed: list[BaseException] = []

    def batches() -> Iterator[pa.RecordBatch]:
        try:
            for i, table in enumerate(itertools.chain([first], parts)):
                if table.column_names != names:
                    raise ValueError(f"write_csv {path}: table {i} has the columns "
                                     f"{table.column_names}, the first {names}")
                cols = []
                for name, col, typ in zip(names, table.columns, types, strict=True):
                    try:
                        cols.append(col.cast(typ))
                    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                        raise TypeError(f"write_csv {path}: column {name!r} of table {i} is "
                                        f"{col.type}, not {typ} as in the first ({exc})"
                                        ) from exc
                yield from pa.table(cols, schema=schema).to_batches()
        except BaseException as exc:
            failed.append(exc)  # DuckDB wraps it: raised as it is below
            raise

    alone = len(names) == 1
    fields = []
    for i, (name, typ) in enumerate(zip(names, types, strict=True)):
        field = f"c{i}"
        if pa.types.is_timestamp(typ):
            field = f"strftime({field}, '{STAMP}')"
            field = f"coalesce({field}, '\"\"')" if alone else field
        elif not pa.types.is_integer(typ):
            field = _sql_field(field, alone)
        # the header line is the aliases, written as they are
        alias = _csv_field(name, alone).replace('"', '""')
        fields.append(f'{field} AS "{alias}"')
    con = duckdb.connect(":memory:")
    try:
        con.execute("SET preserve_insertion_order = true")  # rows in the order read
        # the stream is read by one thread; a second only puts the rows back in order (by
        # measurement on 2 M unjoined uses: slower, and more CPU time)
        con.execute("SET threads = 1")
        con.register("parts", pa.RecordBatchReader.from_batches(schema, batches()))
        # DuckDB quotes no field: they are quoted above
        con.execute(f"COPY (SELECT {', '.join(fields)} FROM parts) TO ? (FORMAT csv, "
                    f"HEADER {str(header).lower()}, QUOTE '', NULLSTR '', NEW_LINE '\\n')",
                    [str(path)])
    except duckdb.Error:
        if failed:
            raise failed[0] from None
        raise
    finally:
        con.close()


def is_text(typ: Any) -> bool:
    """Whether an Arrow type is text: a string, or a dictionary of strings."""
    import pyarrow as pa

    if pa.types.is_dictionary(typ):
        typ = typ.value_type
    return bool(pa.types.is_string(typ) or pa.types.is_large_string(typ))


def on_values(col: Any, fn: Callable[[Any], Any]) -> Any:
    """``fn`` of a string column; of a dictionary column, ``fn`` of its values under the
    same indices (each distinct value done once). Chunked columns chunk by chunk."""
    import pyarrow as pa

    if isinstance(col, pa.ChunkedArray):
        chunks = [on_values(c, fn) for c in col.chunks]
        return pa.chunked_array(chunks, type=chunks[0].type if chunks else None) \
            if chunks else col
    if pa.types.is_dictionary(col.type):
        return pa.DictionaryArray.from_arrays(col.indices, fn(col.dictionary))
    return fn(col)


#: First characters that make a spreadsheet read a cell as a formula (OWASP, CSV injection).
FORMULA_START: Final = ("=", "+", "-", "@", "\t", "\r")


def _safe_text(col: Any) -> Any:
    """A pyarrow string column with every formula-like cell prefixed by ``'``."""
    import pyarrow as pa
    import pyarrow.compute as pc

    risky = pc.starts_with(col, FORMULA_START[0])
    for start in FORMULA_START[1:]:
        risky = pc.or_(risky, pc.starts_with(col, start))
    risky = pc.fill_null(risky, False)
    if not pc.any(risky).as_py():
        return col
    quoted = pc.binary_join_element_wise(pa.scalar("'", col.type), col,
                                         pa.scalar("", col.type))
    return pc.if_else(risky, quoted, col)


def spreadsheet_safe(table: pa.Table) -> pa.Table:
    """The text columns of ``table`` (all but ``row``) with every cell a spreadsheet would
    run as a formula (starting ``=``, ``+``, ``-``, ``@``, a tab or a carriage return)
    prefixed by ``'``, as OWASP recommends; numbers and times are left as they are. A
    dictionary column of text keeps its indices and has its values made safe."""
    import pyarrow as pa

    cols = [on_values(col, _safe_text) if name != "row" and is_text(col.type) else col
            for name, col in zip(table.column_names, table.columns, strict=True)]
    return pa.table(cols, names=table.column_names)


def spreadsheet_safe_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """:func:`spreadsheet_safe` of a DataFrame: its text columns (strings, categories,
    objects holding strings) escaped, the others left as they are (a copy)."""
    import pyarrow as pa

    out = frame.copy()
    for name in frame.columns:
        col = frame[name]
        if pd.api.types.infer_dtype(col, skipna=True) in ("string", "categorical") and (
                not isinstance(col.dtype, pd.CategoricalDtype)
                or pd.api.types.infer_dtype(col.cat.categories, skipna=True) == "string"):
            text = pa.Array.from_pandas(col.astype("string"))
            out[name] = pd.Series(_safe_text(text).to_numpy(zero_copy_only=False),
                                  index=col.index, dtype=object)
    return out


# ---------------------------------------------------------------------------------------------
# label's files
# ---------------------------------------------------------------------------------------------
#: Rows of a Parquet row group: pyarrow's default, which ``DataFrame.to_parquet`` uses.
PARQUET_ROW_GROUP: Final = 1024 * 1024


def write_claims_table(claims: pd.DataFrame | Iterable[pd.DataFrame], out: Path) -> None:
    """Write a claims table as Parquet, CSV or JSONL, chosen by the file ending.

    The CSV is for people: a text cell a spreadsheet would run as a formula is prefixed by
    ``'`` (:func:`spreadsheet_safe_frame`); Parquet and JSONL keep every value as it is.

    Parameters
    ----------
    claims : DataFrame or iterable of DataFrame
        The table, or its consecutive parts (the same columns and dtypes, at least one part,
        possibly empty), which are written one at a time to the same bytes as their
        concatenation (Parquet: row groups of :data:`PARQUET_ROW_GROUP` rows, as
        ``DataFrame.to_parquet`` writes them).
    out : Path
        The file; its ending chooses the format.
    """
    suffix = _claims_target(out)
    if not isinstance(claims, pd.DataFrame):
        _write_claim_parts(claims, out, suffix)
    elif suffix in (".parquet", ".pq"):
        claims.to_parquet(out, index=False)
    elif suffix == ".csv":
        spreadsheet_safe_frame(claims).to_csv(out, index=False, date_format=STAMP)
    else:
        claims.to_json(out, orient="records", lines=True, date_format="iso", date_unit="us")


def _claims_target(out: Path) -> str:
    """The claims file's ending, checked, with its folder made."""
    suffix = out.suffix.lower()
    if suffix not in TABLE_SUFFIXES:
        raise unknown_table_ending(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    return suffix


def _write_claim_parts(parts: Iterable[pd.DataFrame], out: Path, suffix: str) -> None:
    """:func:`write_claims_table` of consecutive parts, holding one row group at a time."""
    if suffix not in (".parquet", ".pq"):
        def jsonl(part: pd.DataFrame) -> str:
            return str(part.to_json(orient="records", lines=True, date_format="iso",
                                    date_unit="us"))

        rows, last = 0, None
        with open(out, "w", encoding="utf-8", newline="") as fh:
            for i, part in enumerate(parts):
                if suffix == ".csv":
                    spreadsheet_safe_frame(part).to_csv(fh, index=False, header=i == 0,
                                                        date_format=STAMP)
                elif len(part):
                    fh.write(jsonl(part))
                rows, last = rows + len(part), part
            if suffix != ".csv" and not rows and last is not None:
                fh.write(jsonl(last))  # what an empty table writes
        return
    import pyarrow as pa
    import pyarrow.parquet as pq

    writer: Any = None
    pending: list[Any] = []
    n_pending = 0
    groups = 0
    try:
        for part in parts:
            with warnings.catch_warnings():
                # what DataFrame.to_parquet silences too: pyarrow reads a UTC time column
                # through Series.values, which pandas 3.1 deprecates for such columns
                warnings.filterwarnings("ignore", message=r"Series\.values returning an "
                                        r"ndarray that drops timezone")
                table = pa.Table.from_pandas(part, preserve_index=False)
            if writer is None:
                writer = pq.ParquetWriter(out, table.schema, compression="snappy")
            pending.append(table)
            n_pending += table.num_rows
            while n_pending >= PARQUET_ROW_GROUP:
                whole = pa.concat_tables(pending)
                group, pending = [whole.slice(0, PARQUET_ROW_GROUP)], \
                    [whole.slice(PARQUET_ROW_GROUP)]
                del whole
                _write_row_group(writer, group)
                groups += 1
                n_pending -= PARQUET_ROW_GROUP
        if writer is None:
            raise ValueError(f"{out}: no parts to write (give at least one, possibly empty)")
        if n_pending or not groups:  # an empty table is one empty row group, as pandas writes
            _write_row_group(writer, pending)
    finally:
        if writer is not None:
            writer.close()


def _write_row_group(writer: Any, tables: list[Any]) -> None:
    """Write ``tables`` (the parts of one row group; the list is emptied) as one row group
    of single-chunk columns: a column written in chunks can fall back from dictionary
    encoding at another row than the whole column does, which changes the bytes. Columns
    are joined one at a time, each freeing its parts, so the row group is held about once.
    """
    import pyarrow as pa

    whole = pa.concat_tables(tables)
    tables.clear()
    schema = whole.schema
    columns = list(whole.columns)
    del whole
    for i, col in enumerate(columns):
        columns[i] = col.combine_chunks()
        del col
    writer.write_table(pa.table(columns, schema=schema))


def write_label_table(joined: JoinedUses, out: Path,
                      outcome_files: Sequence[str]) -> dict[str, Any]:
    """Write what ``label --out FILE`` writes: the claims table ``out``, the join report and
    the unjoined-records CSV beside it; return the summary line.

    The claim rows and the unjoined uses are built and written part by part
    (:meth:`~amv_calib.claims.JoinedUses.claim_parts`), never held whole: the same bytes as
    :func:`write_claims_table` and :func:`write_join_report` of :func:`label_claims`'s
    tables.

    Parameters
    ----------
    joined : JoinedUses
        The join (:func:`~amv_calib.claims.join_logs`).
    out : Path
        The claims file; its ending chooses the format.
    outcome_files : sequence of str
        The outcome files (named in the report and the unjoined CSV).
    """
    with _claims_written_beside(joined.claim_parts(), out):
        return write_join_report(joined.report, out, outcome_files,
                                 use_parts=joined.unjoined_parts())


@contextlib.contextmanager
def _claims_written_beside(claims: pd.DataFrame | Iterable[pd.DataFrame],
                           out: Path) -> Iterator[None]:
    """:func:`write_claims_table` of ``claims`` on a thread while the body writes the other
    files; its error, if any, is raised after theirs. The Parquet writer and DuckDB's CSV
    writer (one thread) each leave most of a core idle: on a 2 M-line log the two files took
    3.4-3.5 s at once, 4.1-4.8 s one after the other."""
    _claims_target(out)  # a bad ending or folder fails before any file is written
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="amv-calib-claims") as pool:
        done = pool.submit(write_claims_table, claims, out)
        yield
        done.result()


def unknown_table_ending(out: Path) -> DataContractError:
    """The error for a claims table ``out`` whose ending names no known format."""
    return DataContractError(
        f"--out {out}: unknown ending {out.suffix!r}; use one of {', '.join(TABLE_SUFFIXES)}, "
        f"or a folder name without an ending"
    )


def label_report_paths(out: Path) -> tuple[Path, Path]:
    """``(<stem>.join_report.json, <stem>.unjoined.csv)`` beside the claims file ``out``."""
    stem = out.name[: -len(out.suffix)] if out.suffix else out.name
    return out.with_name(f"{stem}.join_report.json"), out.with_name(f"{stem}.unjoined.csv")


def write_join_report(report: Any, out: Path, outcome_files: Sequence[str],
                      extra: Mapping[str, Any] | None = None,
                      use_parts: Iterable[pd.DataFrame] | None = None) -> dict[str, Any]:
    """Write the join report and the unjoined-records CSV beside the claims file ``out``;
    return the summary line (without the per-file details).

    Parameters
    ----------
    report : JoinReport
        The report; its ``unjoined_uses`` are the CSV's use rows unless ``use_parts``.
    out : Path
        The claims file the report describes.
    outcome_files : sequence of str
        The outcome files, in the order of the report's ``source`` codes.
    extra : mapping, optional
        More keys for the report and the summary line.
    use_parts : iterable of DataFrame, optional
        The unjoined uses in consecutive parts (the columns of ``report.unjoined_uses``),
        written one at a time to the same bytes (an engine that does not hold them); the
        report then records the CSV in ``unjoined_uses_file``.
    """
    report_json, unjoined_csv = label_report_paths(out)
    summary = report.to_dict()
    full = {**summary, **(extra or {}), "outcome_files": list(outcome_files), "out": str(out)}
    report_json.write_text(json.dumps(full, indent=2) + "\n", encoding="utf-8")
    outs = report.outcome_details
    names = list(outcome_files)
    # Written in parts (uses, then outcome records) so that a log with millions of
    # unjoined uses is never materialised as one object table; DuckDB writes the text
    # (pandas' to_csv took most of label's time).
    parts = _row_slices(report.unjoined_uses) if use_parts is None else use_parts

    def tables() -> Iterator[pa.Table]:
        for uses in parts:
            yield _text_table(len(uses), {
                "kind": "use", "file": uses["decision_file"], "line": uses["decision_line"],
                "action_id": uses["action_id"], "premise_id": uses["premise_id"],
                "claim_id": uses["claim_id"], "time": uses["time"], "reason": uses["reason"],
                "detail": uses["detail"],
            })
        yield _text_table(len(outs), {
            "kind": "outcome", "file": [names[int(s)] for s in outs["source"]],
            "line": outs["row"], "action_id": outs["action_id"], "premise_id": None,
            "claim_id": outs["claim_id"], "time": outs["time"], "reason": outs["status"],
            "detail": outs["detail"],
        })

    write_csv(tables(), unjoined_csv)
    if use_parts is not None:
        report.unjoined_uses_file = str(unjoined_csv)
    line = {k: v for k, v in summary.items() if k != "decision_files"}
    line.update(extra or {})
    line.update(out=str(out), report=str(report_json), unjoined_csv=str(unjoined_csv))
    return line


#: Rows of the unjoined uses written at a time.
_CSV_ROWS: Final = 1 << 16


def _row_slices(frame: pd.DataFrame) -> Iterator[pd.DataFrame]:
    """``frame`` in consecutive slices of :data:`_CSV_ROWS` rows (one, empty, if it is)."""
    for lo in range(0, max(len(frame), 1), _CSV_ROWS):
        yield frame.iloc[lo:lo + _CSV_ROWS]


def _text_table(n: int, columns: Mapping[str, Any]) -> pa.Table:
    """A spreadsheet-safe (:func:`spreadsheet_safe`) Arrow table of ``n`` rows for
    :func:`write_csv`: a str value repeats, None is missing, a categorical column stays a
    dictionary (each distinct value is made safe and formatted once) unless it has more
    values than rows."""
    import pyarrow as pa

    cols = {}
    for name, value in columns.items():
        if value is None:
            col = pa.nulls(n, pa.string())
        elif isinstance(value, str):
            col = pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, np.int32)), [value])
        elif isinstance(value, list):
            col = pa.array(value, pa.string())
        elif isinstance(value.dtype, pd.DatetimeTZDtype):
            # through numpy: pyarrow would read a zoned Series by its deprecated .values
            naive = value.dt.tz_convert(None).to_numpy(dtype="datetime64[us]")
            col = pa.array(naive, from_pandas=True).cast(pa.timestamp("us", "UTC"))
        else:
            col = pa.Array.from_pandas(value)
        if pa.types.is_dictionary(col.type) and len(col.dictionary) > n:
            col = col.dictionary_decode()  # more values than rows (a log's action ids)
        cols[name] = col
    return spreadsheet_safe(pa.table(cols))


def write_label_folder(result: Any, folder: str | os.PathLike[str],
                       outcome_files: Sequence[str], *,
                       claim_parts: Iterable[pd.DataFrame] | None = None,
                       use_parts: Iterable[pd.DataFrame] | None = None,
                       episode_parts: Iterable[Any] | None = None) -> dict[str, Any]:
    """Write what ``label --out DIR`` writes (:data:`LABEL_FOLDER_FILES`) from a
    :class:`~amv_calib.claims.LogLabels`; return the summary line. The caller claims the
    folder first (:func:`claim_outputs`).

    Parameters
    ----------
    result : LogLabels
        The labels, report, episodes and verifiers.
    folder : path
        The output folder.
    outcome_files : sequence of str
        The outcome files (named in the report and the unjoined CSV).
    claim_parts, use_parts : iterable of DataFrame, optional
        The claim rows and the unjoined uses in consecutive parts, instead of
        ``result.claims`` and ``result.report.unjoined_uses`` (an engine that does not hold
        them: :func:`write_claims_table`, :func:`write_join_report`); the same bytes.
    episode_parts : iterable of pyarrow string arrays, optional
        The episode lines in consecutive parts, instead of ``result.episodes``.
    """
    from amv_calib.claims._episodes import write_episodes_jsonl

    where = Path(folder)
    where.mkdir(parents=True, exist_ok=True)
    claims = where / "claims.parquet"
    with _claims_written_beside(result.claims if claim_parts is None else claim_parts, claims):
        write_episodes_jsonl(result.episodes if episode_parts is None else episode_parts,
                             where / "episodes.jsonl")
        ep = result.episode_report.to_dict()
        flagged = sorted(v for v, r in result.verifiers.items()
                         if r["declared_outside_interval"])
        (where / "verifiers.json").write_text(json.dumps({
            "min_verifier_calls": result.episode_report.min_verifier_calls,
            "prior": "Beta(1, 1)", "interval": "equal-tailed 95%",
            "verifiers": result.verifiers}, indent=2) + "\n", encoding="utf-8")
        line = write_join_report(result.report, claims, outcome_files, extra={
            "episodes": ep, "verifiers_flagged": flagged}, use_parts=use_parts)
    line.update(episodes_file=str(where / "episodes.jsonl"),
                verifiers_file=str(where / "verifiers.json"))
    record_outputs(where, "label", LABEL_FOLDER_FILES)
    return line
