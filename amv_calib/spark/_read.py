"""Reading decision logs on Spark: the byte ranges (or Parquet row groups) of each file, and
their parse on the executors with the single-machine parser (the same aliases, types, blank /
torn / corrupt lines and line numbers)."""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, Final

import numpy as np

from amv_calib.claims.engine import (
    MISSING_US,
    EntryAccumulator,
    invalid_detail,
    kind_bad,
    read_chunks,
)
from amv_calib.contract import CLAIM_FEATURES
from amv_calib.exceptions import DataContractError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


_READ_BYTES: Final = 16 << 20
_PARQUET: Final = (".parquet", ".pq")
#: The ids of a record (``rec``), an entry (``eid``) and a signal (``sid``): the task in the
#: high bits, the position in the task below (so ids follow the log order, as the
#: single-machine positions do, which is all the join reads of them).
_EID_SHIFT: Final = 40

_FEATS: Final = tuple(CLAIM_FEATURES)
_STATS: Final = ("lines", "records", "blank", "torn", "corrupt", "fragments")

# ---------------------------------------------------------------------------------------------
# Files and their splits
# ---------------------------------------------------------------------------------------------
def _filesystem(path: str) -> tuple[Any, str]:
    """A pyarrow filesystem and the path in it: a URI (``s3://``, ``gs://``, ``hdfs://``,
    ``file://``) or a local path."""
    import pyarrow.fs as pafs

    if "://" in path:
        fs, inner = pafs.FileSystem.from_uri(path)
        return fs, inner
    return pafs.LocalFileSystem(), os.path.abspath(path)


def _is_parquet(path: str) -> bool:
    return path.lower().endswith(_PARQUET)


_LOG_SUFFIXES: Final = (".jsonl", ".ndjson", ".json", *_PARQUET)


def _expand(paths: Sequence[str]) -> list[str]:
    """The decision logs: a folder (or an object-store prefix) stands for its log files
    (``.jsonl``, ``.ndjson``, ``.json``, ``.parquet``, ``.pq``), in name order."""
    import pyarrow.fs as pafs

    out: list[str] = []
    for path in paths:
        fs, inner = _filesystem(path)
        if fs.get_file_info(inner).type != pafs.FileType.Directory:
            out.append(path)
            continue
        found = sorted(i.path for i in fs.get_file_info(pafs.FileSelector(inner))
                       if i.type == pafs.FileType.File and i.path.lower().endswith(_LOG_SUFFIXES))
        if not found:
            raise DataContractError(f"decision-log folder {path} holds no log files "
                                    f"({', '.join(_LOG_SUFFIXES)})")
        base = path.rstrip("/")
        out += [f"{base}/{f.rsplit('/', 1)[-1]}" for f in found]
    return out


def _splits(paths: Sequence[str], split_bytes: int) -> list[tuple[int, str, int, int]]:
    """``(file index, path, start, end)`` of each task: byte ranges of a JSONL log, row
    groups ``[start, end)`` of a Parquet one."""
    import pyarrow.fs as pafs
    import pyarrow.parquet as pq

    out: list[tuple[int, str, int, int]] = []
    for i, path in enumerate(paths):
        fs, inner = _filesystem(path)
        info = fs.get_file_info(inner)
        if info.type != pafs.FileType.File:
            raise DataContractError(f"decision log {path} does not exist or is not a file")
        if _is_parquet(path):
            with fs.open_input_file(inner) as fh:
                groups = pq.ParquetFile(fh).metadata.num_row_groups
            out += [(i, path, g, g + 1) for g in range(groups)]
            continue
        size = int(info.size)
        out += [(i, path, s, min(size, s + split_bytes)) for s in range(0, size, split_bytes)]
    return out


def _count_newlines(task: tuple[int, str, int, int]) -> tuple[int, bool]:
    """Newlines in a byte range, and whether the byte before it is one (or it starts the
    file); rows of a Parquet row group."""
    _, path, start, end = task
    fs, inner = _filesystem(path)
    if _is_parquet(path):
        import pyarrow.parquet as pq

        with fs.open_input_file(inner) as fh:
            return int(pq.ParquetFile(fh).metadata.row_group(start).num_rows), True
    with fs.open_input_file(inner) as fh:
        fh.seek(max(0, start - 1))
        at_start = start == 0 or fh.read(1) == b"\n"
        n = 0
        pos = start
        while pos < end:
            data = fh.read(min(_READ_BYTES, end - pos))
            if not data:
                break
            n += data.count(b"\n")
            pos += len(data)
    return n, at_start


def _to_newline(fh: Any) -> tuple[bytes, bool]:
    """Read up to and including the next newline; whether there was one."""
    parts: list[bytes] = []
    while True:
        data = fh.read(1 << 16)
        if not data:
            return b"".join(parts), False
        cut = data.find(b"\n")
        if cut >= 0:
            parts.append(data[:cut + 1])
            return b"".join(parts), True
        parts.append(data)


def _range_chunks(path: str, start: int, end: int) -> Iterator[bytes]:
    """The lines that start in ``[start, end)`` of a file, in chunks."""
    fs, inner = _filesystem(path)
    with fs.open_input_file(inner) as fh:
        pos = start
        if start > 0:
            fh.seek(start - 1)
            if fh.read(1) != b"\n":  # the line under way belongs to the previous range
                skipped, found = _to_newline(fh)
                if not found:
                    return
                pos += len(skipped)
        fh.seek(pos)
        while pos < end:
            data = fh.read(min(_READ_BYTES, end - pos))
            if not data:
                return
            pos += len(data)
            if pos >= end and not data.endswith(b"\n"):
                # finish the last line that starts in the range
                yield data + _to_newline(fh)[0]
                return
            yield data


def _parquet_chunks(path: str, group: int) -> Iterator[bytes]:
    """The rows of a Parquet row group as JSON lines (one record per row)."""
    import pyarrow.parquet as pq

    fs, inner = _filesystem(path)
    with fs.open_input_file(inner) as fh:
        table = pq.ParquetFile(fh).read_row_group(group)
    for batch in table.to_batches(max_chunksize=50_000):
        rows = batch.to_pylist()
        yield "".join(json.dumps({k: v for k, v in r.items() if v is not None},
                                 default=str) + "\n" for r in rows).encode("utf-8")


# ---------------------------------------------------------------------------------------------
# Parsing on the executors
# ---------------------------------------------------------------------------------------------
_PARSED_SCHEMA: Final = (
    "kind byte, task int, rec long, file int, line long, t_us long, action_id string, "
    "tool_name string, calibrator string, regime string, theta double, kappa double, "
    "n_premises int, has_verifiers boolean, "
    "premises array<struct<pidx:int, eid:long, premise_id:string, claim_id:string, "
    "recency_hours:double, source_trust_score:double, model_confidence:double, "
    "contradiction_flag:double, p:double, memory_kind:string, kind_bad:boolean, "
    "detail:string>>, "
    "signals array<struct<sid:long, premise_id:string, verifier:string, confirmed:boolean, "
    "reliability:double>>, "
    "offers array<struct<id:string, resolves:array<string>, cost:double, reliability:double>>, "
    "lines long, records long, blank long, torn long, corrupt long, fragments long, "
    "corrupt_lines array<long>, kinds boolean, "
    "error string"
)


def _strings(chunks: list[Any]) -> Any:
    """Per-block string (or dictionary) arrays as one plain string array."""
    import pyarrow as pa

    if not chunks:
        return pa.array([], type=pa.string())
    parts = [c.cast(pa.string()) if pa.types.is_dictionary(c.type) else c for c in chunks]
    return pa.concat_arrays([p.cast(pa.string()) for p in parts])


def _nested(counts: Any, fields: dict[str, Any]) -> Any:
    """A list<struct> array with ``counts`` items per row."""
    import pyarrow as pa

    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
    struct = pa.StructArray.from_arrays(list(fields.values()), names=list(fields))
    return pa.ListArray.from_arrays(pa.array(offsets, type=pa.int32()), struct)


def _parse_task(task: tuple[int, str, int, int], task_idx: int, first_line: int,
                on_corrupt: str, columnar: bool, offers: bool, schema: Any) -> list[Any]:
    """One task's records (a RecordBatch of :data:`_PARSED_SCHEMA`, kind 0) and its stats
    (kind 1); a corrupt line with ``on_corrupt="raise"`` becomes one error row (kind 2)."""
    import pyarrow as pa

    file_idx, path, start, end = task
    acc = EntryAccumulator(offers)
    chunks = _parquet_chunks(path, start) if _is_parquet(path) \
        else _range_chunks(path, start, end)
    try:
        with warnings.catch_warnings():  # skipped lines are counted in the report
            warnings.simplefilter("ignore")
            st = read_chunks(chunks, path, file_idx, first_line, on_corrupt, columnar, acc)
    except DataContractError as exc:
        return [_batch(schema, 1, {"kind": [2], "task": [task_idx], "file": [file_idx],
                                   "error": [str(exc)]})]
    r = acc.rec
    n_rec = acc.n_records
    base = np.int64(task_idx) << _EID_SHIFT

    def nums(k: str, dtype: Any) -> Any:
        return np.concatenate(r[k]).astype(dtype) if r[k] else np.zeros(0, dtype)

    rec_cols: dict[str, Any] = {
        "kind": pa.array(np.zeros(n_rec, np.int8)),
        "task": pa.array(np.full(n_rec, task_idx, np.int32)),
        "rec": pa.array(base + np.arange(n_rec, dtype=np.int64)),
        "file": pa.array(nums("file", np.int32)),
        "line": pa.array(nums("line", np.int64)),
        "t_us": pa.array(nums("t_us", np.int64)),
        **{k: _strings(r[k]) for k in ("action_id", "tool_name", "calibrator", "regime")},
        "theta": pa.array(nums("theta", np.float64)),
        "kappa": pa.array(nums("kappa", np.float64)),
        "n_premises": pa.array(nums("n", np.int32)),
        "has_verifiers": pa.array(nums("has_verifiers", bool)),
    }
    bad_times = dict(acc.bad_times)
    entries, signals = acc.finish()
    e_rec = entries["rec"].to_numpy()
    # a premise giving a memory kind (or one the contract's rule refuses): the entries have
    # the kind columns (``KIND_COLUMNS``), and the rule's refusal is checked as the single
    # machine checks it
    kinds = "memory_kind" in entries.columns
    check = entries[["rec", "premise_id", "claim_id", *_FEATS,
                     *(["kind_error"] if kinds else [])]]
    no_time = (rec_cols["t_us"].to_numpy() == MISSING_US)[e_rec]
    invalid, codes, messages = invalid_detail(check, no_time, bad_times)
    detail = pa.array(np.asarray(messages, dtype=object)[codes], type=pa.string())
    detail = pa.compute.if_else(pa.array(invalid), detail, pa.scalar(None, pa.string()))
    rec_cols["premises"] = _nested(np.bincount(e_rec, minlength=n_rec), {
        "pidx": pa.array(entries["pidx"].to_numpy(np.int32)),
        "eid": pa.array(base + np.arange(len(entries), dtype=np.int64)),
        "premise_id": pa.array(entries["premise_id"]).cast(pa.string())
        if len(entries) else pa.array([], pa.string()),
        "claim_id": pa.array(entries["claim_id"].array, type=pa.string()),
        **{k: pa.array(entries[k].to_numpy(np.float64)) for k in (*_FEATS, "p")},
        "memory_kind": pa.array(entries["memory_kind"]).cast(pa.string())
        if kinds and len(entries) else pa.nulls(len(entries), pa.string()),
        "kind_bad": pa.array(kind_bad(entries)),
        "detail": detail,
    })
    rec_cols["signals"] = _nested(np.bincount(signals["rec"].to_numpy(), minlength=n_rec), {
        "sid": pa.array(base + np.arange(len(signals), dtype=np.int64)),
        "premise_id": pa.array(signals["premise_id"].array, type=pa.string()),
        "verifier": pa.array(signals["verifier"].array, type=pa.string()),
        "confirmed": pa.array(signals["confirmed"].to_numpy(bool)),
        "reliability": pa.array(signals["reliability"].to_numpy(np.float64)),
    })
    off = pa.concat_tables(acc.offers) if acc.offers else None
    o_rec = off.column("rec").to_numpy() if off is not None else np.zeros(0, np.int64)
    rec_cols["offers"] = _nested(np.bincount(o_rec, minlength=n_rec), {
        "id": off.column("id").combine_chunks() if off is not None else pa.array([], pa.string()),
        "resolves": off.column("resolves").combine_chunks() if off is not None
        else pa.array([], pa.list_(pa.string())),
        "cost": off.column("cost").combine_chunks() if off is not None
        else pa.array([], pa.float64()),
        "reliability": off.column("reliability").combine_chunks() if off is not None
        else pa.array([], pa.float64()),
    })
    stats = _batch(schema, 1, {
        "kind": [1], "task": [task_idx], "file": [file_idx], "lines": [st.lines],
        "records": [st.records], "blank": [st.blank], "torn": [st.torn],
        "corrupt": [st.corrupt], "fragments": [st.fragments],
        "corrupt_lines": [list(st.corrupt_lines)], "kinds": [kinds],
    })
    return [_batch(schema, n_rec, rec_cols), stats]


def _arrow_schema(ddl: str) -> Any:
    """The Arrow schema of a Spark DDL schema string (a mapInArrow function's output)."""
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import StructType, _parse_datatype_string

    spark_schema = _parse_datatype_string(ddl)
    assert isinstance(spark_schema, StructType)
    return to_arrow_schema(spark_schema)


def _batch(schema: Any, n: int, cols: dict[str, Any]) -> Any:
    """A RecordBatch of ``schema`` from some of its columns (the others null)."""
    import pyarrow as pa

    arrays = [cols[f.name] if f.name in cols else pa.nulls(n, f.type) for f in schema]
    arrays = [a if isinstance(a, pa.Array) else pa.array(a, type=f.type)
              for a, f in zip(arrays, schema, strict=True)]
    arrays = [a.cast(f.type) if a.type != f.type else a for a, f in zip(arrays, schema,
                                                                       strict=True)]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _parse_fn(tasks: list[tuple[int, str, int, int]], first_lines: list[int],
              on_corrupt: str, columnar: bool, offers: bool) -> Any:
    """The mapInArrow function: each input row is a task index (``spark.range``)."""
    schema = _arrow_schema(_PARSED_SCHEMA)

    def run(batches: Iterator[Any]) -> Iterator[Any]:
        for batch in batches:
            for t in batch.column(0).to_pylist():
                yield from _parse_task(tasks[t], t, first_lines[t], on_corrupt, columnar,
                                       offers, schema)

    return run


def _read_logs(spark: SparkSession, paths: list[str], on_corrupt: str, columnar: bool,
               offers: bool, split_bytes: int
               ) -> tuple[DataFrame, list[Any], list[int], bool]:
    """Parse the logs on the executors: the records frame (persisted), the stats of each
    file, the first line of each task (the driver's only look at the files is their
    sizes and the newline count of each range), and whether some premise gives a memory
    kind (the claim rows then have the column ``memory_kind``)."""
    from pyspark import StorageLevel

    tasks = _splits(paths, split_bytes)
    n = len(tasks)
    first_lines: list[int] = []
    if n:
        counts = spark.sparkContext.parallelize(list(range(n)), n) \
            .map(lambda t: _count_newlines(tasks[t])).collect()
        before = 0
        prev_file = -1
        for t, (nl, at_start) in zip(tasks, counts, strict=True):
            if t[0] != prev_file:
                before, prev_file = 0, t[0]
            first_lines.append(1 + before + (0 if at_start else 1))
            before += nl
    parsed = spark.range(n, numPartitions=max(n, 1)).mapInArrow(
        _parse_fn(tasks, first_lines, on_corrupt, columnar, offers), _PARSED_SCHEMA)
    parsed = parsed.persist(StorageLevel.MEMORY_AND_DISK)
    meta = parsed.filter("kind <> 0").select(
        "kind", "task", "file", *_STATS, "corrupt_lines", "kinds", "error").toPandas()
    errors = meta[meta["kind"] == 2].sort_values("task")
    if len(errors):
        parsed.unpersist()
        raise DataContractError(str(errors["error"].iloc[0]))
    from amv_calib.contract import LogReadStats

    stats = [LogReadStats() for _ in paths]
    for row in meta[meta["kind"] == 1].sort_values("task").to_dict("records"):
        st = stats[int(row["file"])]
        for k in _STATS:
            setattr(st, k, getattr(st, k) + int(row[k]))
        lines = row["corrupt_lines"]
        st.corrupt_lines.extend(int(x) for x in (lines if lines is not None else []))
    has_kinds = bool(meta.loc[meta["kind"] == 1, "kinds"].fillna(False).astype(bool).any())
    return parsed, stats, first_lines, has_kinds


