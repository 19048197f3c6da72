"""Outcome records for the label join: CSV, Parquet or JSONL tables -> checked outcome rows.

:func:`load_outcomes` reads outcome records (``claim_id`` and/or ``action_id``, ``time``,
``violated``; the aliases below accepted) and sets aside, with a reason, each record that
breaks the data contract. The rules of how outcomes label uses are the join's
(:mod:`amv_calib.claims._join`).
"""

from __future__ import annotations

import csv
import io
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import numpy as np
import pandas as pd

from amv_calib.claims._arrow import BoolArray, FloatArray, IntArray, strip_ids
from amv_calib.claims._codes import _from_codes, _is_str_dtype
from amv_calib.claims._logread import _NAT, PathLike, _json_object
from amv_calib.claims._logvalues import _FALSE, _TRUE, _as_flag, _as_id
from amv_calib.claims._times import _time_reasons, _time_series, us_to_datetime
from amv_calib.contract import (
    loads_strict,
    lone_surrogate,
    read_regular,
    require_regular,
    surrogate_message,
)
from amv_calib.exceptions import DataContractError, MissingColumnsError

#: What became of each outcome record.
OUTCOME_STATUSES: Final = (
    "used", "conflicting", "ambiguous", "superseded", "before_use", "no_matching_use", "invalid",
)

_OUTCOME_ALIASES: Final[dict[str, tuple[str, ...]]] = {
    "claim_id": ("claim_id", "claimId"),
    "action_id": ("action_id", "actionId"),
    "time": ("time", "timestamp", "observed_at", "observedAt", "resolved_at", "resolvedAt", "ts"),
    "violated": ("violated", "isViolated", "violation"),
}


# ---------------------------------------------------------------------------------------------
# Outcomes
# ---------------------------------------------------------------------------------------------
def _read_table(path: PathLike) -> tuple[pd.DataFrame, list[tuple[int, str]]]:
    """A raw table and (row, reason) for lines that could not even be parsed (JSONL).

    ``path`` may be a URI that pyarrow opens (``s3://``, ``gs://``, ``hdfs://``): the file
    is read whole, as a local one is.
    """
    name = os.fspath(path)
    suffix = os.path.splitext(name)[1].lower()
    if suffix not in (".parquet", ".pq", ".csv", ".tsv", ".jsonl", ".ndjson", ".json"):
        raise DataContractError(
            f"{name}: unknown outcome file type {suffix!r}; use .jsonl, .csv or .parquet"
        )
    if "://" in name:
        import pyarrow.fs as pafs

        try:
            fs, inner = pafs.FileSystem.from_uri(name)
            with fs.open_input_stream(inner) as fh:
                source: Any = io.BytesIO(fh.read())
        except (OSError, ValueError) as exc:  # missing object, bad URI, no credentials
            raise DataContractError(f"{name}: cannot read the outcome file ({exc})") from exc
    else:
        source = Path(name)
        require_regular(source, what="outcome file")
    if suffix in (".parquet", ".pq"):
        import pyarrow as pa

        try:
            return pd.read_parquet(source), []
        except (pa.ArrowException, OSError) as exc:
            raise DataContractError(f"{name}: cannot read the outcome file as Parquet "
                                    f"({exc})") from None
    raw = source.getvalue() if isinstance(source, io.BytesIO) else read_regular(
        source, what="outcome file")
    if suffix in (".csv", ".tsv"):
        return _read_csv_table(raw, name, "\t" if suffix == ".tsv" else ",")
    return _read_jsonl_table(raw, name)


def _read_csv_table(raw: bytes, name: str, sep: str
                    ) -> tuple[pd.DataFrame, list[tuple[int, str]]]:
    """An outcome CSV as text columns, and (row, reason) for rows that cannot be read.

    pyarrow reads a well-formed file; a file it refuses (a row with more or fewer fields
    than the header, bad UTF-8) is read again row by row, each such row rejected with its
    line and reason (pandas would shift the columns of a row with one field too many, or
    cut it, without a word). An empty file holds no record."""
    import pyarrow as pa
    import pyarrow.csv as pacsv

    def text_rows(text: bytes) -> Any:
        return csv.reader(io.StringIO(text.decode("utf-8", "surrogateescape")
                                      .removeprefix("\ufeff"), newline=""), delimiter=sep)

    # the header from the first line alone (a header with a quoted line break differs from
    # pyarrow's, and the file is then read row by row, as any file pyarrow refuses)
    try:
        header = next(text_rows(raw[:raw.find(b"\n") + 1] if b"\n" in raw else raw), None)
    except csv.Error as exc:
        raise DataContractError(f"{name}: line 1: {exc}") from None
    if header is None:
        return pd.DataFrame(), []
    if _undecodable(header):
        raise DataContractError(f"{name}: line 1 (the header) is not UTF-8 text")
    try:
        table = pacsv.read_csv(
            pa.BufferReader(raw), parse_options=pacsv.ParseOptions(delimiter=sep),
            convert_options=pacsv.ConvertOptions(column_types=dict.fromkeys(
                header, pa.string())))
        if table.column_names == header:
            return table.to_pandas(), []
    except pa.ArrowInvalid:
        pass
    rows = text_rows(raw)
    try:
        header = next(rows)
        records: list[dict[str, str]] = []
        bad: list[tuple[int, str]] = []
        for fields in rows:
            if not fields:
                continue  # a blank line is no record
            where = f"line {rows.line_num}"
            if _undecodable(fields):
                bad.append((len(records) + 1, f"{where}: not UTF-8 text"))
            elif len(fields) != len(header):
                bad.append((len(records) + 1, f"{where}: the row has {len(fields)} fields, "
                                              f"the header {len(header)}"))
            else:
                records.append(dict(zip(header, fields, strict=True)))
                continue
            records.append({})
    except csv.Error as exc:
        raise DataContractError(f"{name}: line {rows.line_num}: {exc}") from None
    return pd.DataFrame(records, columns=header), bad


def _undecodable(fields: Sequence[str]) -> bool:
    """Whether text decoded with ``surrogateescape`` held bytes that are not UTF-8."""
    try:
        for f in fields:
            f.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _vouched(raw: bytes) -> bool:
    """Whether the decision-log walk vouches for every line of ``raw`` (whole lines) as a
    JSON object the strict parser reads alike (ASCII, no blank line: ``strict_objects``)."""
    from amv_calib.claims._logextract import strict_objects

    return strict_objects(raw)


def _read_jsonl_table(raw: bytes, name: str) -> tuple[pd.DataFrame, list[tuple[int, str]]]:
    import pyarrow as pa
    import pyarrow.json as pj

    if raw.lstrip().startswith(b"["):
        try:
            rows = loads_strict(raw)
        except (ValueError, RecursionError) as exc:
            raise DataContractError(f"{name}: not valid JSON ({exc})") from exc
        kept: list[dict[str, Any]] = []
        refused: list[tuple[int, str]] = []
        for r in rows:
            odd = lone_surrogate(r)
            if odd is not None:  # no Arrow string holds it: the row, not the file, is refused
                refused.append((len(kept) + 1, surrogate_message(odd)))
            kept.append(r if isinstance(r, dict) and odd is None else {})
        return pd.DataFrame.from_records(kept), refused
    # pyarrow's JSON reader takes bad UTF-8 into its strings, and NaN/Inf literals and keys
    # given twice, which the line parser refuses: a file with a line the walk does not
    # vouch for is read line by line, so that a line's verdict never depends on the others
    if raw.endswith(b"\n") and _vouched(raw):
        try:
            return pj.read_json(pa.BufferReader(raw)).to_pandas(), []
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            pass
    records: list[dict[str, Any]] = []
    bad: list[tuple[int, str]] = []
    lines = raw.split(b"\n")
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            obj = _json_object(line)
        except (ValueError, UnicodeDecodeError) as exc:
            torn = i == len(lines) - 1
            bad.append((len(records) + 1, "torn last line" if torn
                        else f"not a JSON object ({exc})"))
            records.append({})
            continue
        records.append(obj)
    return pd.DataFrame(records), bad  # a row of {} each line that did not parse


def _resolve(columns: Iterable[str], aliases: Mapping[str, tuple[str, ...]]) -> dict[str, str]:
    cols = list(columns)
    found: dict[str, str] = {}
    for canonical, names in aliases.items():
        for n in names:
            if n in cols:
                found[canonical] = n
                break
    return found


def _id_series(s: pd.Series) -> pd.Series:
    """Identifiers as strings (integral numbers without ``.0``); empty / missing -> NA."""
    s = s.reset_index(drop=True)
    if _is_str_dtype(s):
        out = s.astype("str")
    elif isinstance(s.dtype, pd.CategoricalDtype):
        out = s.astype("str")
    else:
        out = pd.Series(pd.array([None if _missing(v) else _as_id(v) for v in s.tolist()],
                                 dtype="str"))
    return out.where(out != "", None)


def _claim_ids(s: pd.Series) -> pd.Series:
    """:func:`_id_series` of outcome claim ids, without surrounding white space (the rule
    of every claim id reader, :func:`amv_calib.claims._arrow.strip_ids`)."""
    import pyarrow as pa

    ids = _id_series(s)
    stripped = pd.Series(pd.array(strip_ids(pa.array(ids, type=pa.string())), dtype="str"))
    return stripped.where(stripped != "", None)


def _missing(v: Any) -> bool:
    if v is None:
        return True
    if isinstance(v, (str, bytes, list, tuple, dict, Mapping)):
        return False
    return bool(pd.isna(v))


def _bool_series(s: pd.Series) -> tuple[FloatArray, BoolArray]:
    """(1.0 / 0.0 / NaN, ok) from bools, 0/1 numbers or true/false/yes/no strings."""
    if s.dtype == bool:
        return s.to_numpy(dtype=np.float64), np.ones(len(s), dtype=bool)
    if _is_str_dtype(s):
        low = s.str.strip().str.lower()
        vals = np.where(low.isin(list(_TRUE)).to_numpy(), 1.0,
                        np.where(low.isin(list(_FALSE)).to_numpy(), 0.0, np.nan))
    else:
        vals = np.array([_as_flag(v) for v in s.tolist()], dtype=np.float64)
    return vals, ~np.isnan(vals)


def load_outcomes(
    paths: PathLike | pd.DataFrame | Sequence[PathLike | pd.DataFrame],
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Read and validate outcome records.

    Parameters
    ----------
    paths : path, DataFrame, or a sequence of them
        Outcome files (``.jsonl``, ``.csv``, ``.parquet``) or frames, concatenated in order.

    Returns
    -------
    outcomes : DataFrame
        The valid records: ``oid`` (position over all inputs), ``source`` (input index),
        ``row`` (1-based row in its input), ``claim_id``, ``action_id`` (NA when absent),
        ``t_us`` (int64 UTC microseconds) and ``violated`` (bool).
    invalid : DataFrame
        ``oid``, ``source``, ``row`` and ``reason`` (field, value) of every invalid record.

    Raises
    ------
    MissingColumnsError
        An input lacks ``time`` or ``violated``, or both ``claim_id`` and ``action_id``.
    """
    import pyarrow as pa

    items: list[Any]
    if isinstance(paths, (str, os.PathLike, pd.DataFrame)):
        items = [paths]
    else:
        items = list(paths)
    valid_parts: list[pd.DataFrame] = []
    invalid_parts: list[pd.DataFrame] = []
    offset = 0
    for src, item in enumerate(items):
        unparsed: list[tuple[int, str]]
        if isinstance(item, pd.DataFrame):
            table, unparsed = item.reset_index(drop=True), []
            label = f"outcomes[{src}]"
        else:
            table, unparsed = _read_table(item)
            label = os.fspath(item)
        found = _resolve(table.columns, _OUTCOME_ALIASES)
        missing = [c for c in ("time", "violated") if c not in found]
        if "claim_id" not in found and "action_id" not in found:
            missing.append("claim_id or action_id")
        n = len(table)
        if missing and n > len(unparsed):
            hints = "; ".join(f"{c}: {list(_OUTCOME_ALIASES.get(c, ()))}" for c in missing
                              if c in _OUTCOME_ALIASES)
            raise MissingColumnsError(
                f"{label}: outcome records lack column(s) {missing}"
                + (f" (accepted names: {hints})" if hints else "")
            )
        if n == 0:
            continue
        rows = np.arange(1, n + 1, dtype=np.int64)
        reason = np.full(n, "", dtype=object)
        for r, why in unparsed:
            reason[r - 1] = why
        if missing:  # no row could be read at all: each is invalid, with its reason
            oid = np.arange(offset, offset + n, dtype=np.int64)
            invalid_parts.append(pd.DataFrame({
                "oid": oid, "source": np.full(n, src, dtype=np.int64), "row": rows,
                "reason": pd.array(reason.tolist(), dtype="str")}))
            offset += n
            continue
        none = pd.Series(pd.array(pa.nulls(n, pa.large_string()), dtype="str"))
        claim = _claim_ids(table[found["claim_id"]]) if "claim_id" in found else none
        action = _id_series(table[found["action_id"]]) if "action_id" in found else none
        t_us = _time_series(table[found["time"]])
        v, v_ok = _bool_series(table[found["violated"]])
        no_key = (claim.isna() & action.isna()).to_numpy()
        bad_t = t_us == _NAT
        todo = reason == ""
        tv = table[found["time"]]
        vv = table[found["violated"]]
        for i in np.flatnonzero(todo & no_key):
            reason[i] = "claim_id and action_id both missing"
        where = np.flatnonzero(todo & ~no_key & bad_t)
        raws = [None if _missing(tv.iloc[i]) else tv.iloc[i] for i in where.tolist()]
        reason[where] = _time_reasons("time", raws)
        for i in np.flatnonzero(todo & ~no_key & ~bad_t & ~v_ok):
            raw = None if _missing(vv.iloc[i]) else vv.iloc[i]
            reason[i] = f"violated={raw!r} is not a boolean"
        ok = reason == ""
        oid = np.arange(offset, offset + n, dtype=np.int64)
        valid_parts.append(pd.DataFrame({
            "oid": oid[ok], "source": np.full(int(ok.sum()), src, dtype=np.int64),
            "row": rows[ok], "claim_id": claim[ok].reset_index(drop=True),
            "action_id": action[ok].reset_index(drop=True),
            "t_us": t_us[ok], "violated": v[ok] > 0.5,
        }))
        if (~ok).any():
            invalid_parts.append(pd.DataFrame({
                "oid": oid[~ok], "source": np.full(int((~ok).sum()), src, dtype=np.int64),
                "row": rows[~ok], "reason": pd.array(reason[~ok].tolist(), dtype="str"),
            }))
        offset += n
    valid = (pd.concat(valid_parts, ignore_index=True) if valid_parts else pd.DataFrame({
        "oid": np.zeros(0, np.int64), "source": np.zeros(0, np.int64),
        "row": np.zeros(0, np.int64), "claim_id": pd.array([], dtype="str"),
        "action_id": pd.array([], dtype="str"), "t_us": np.zeros(0, np.int64),
        "violated": np.zeros(0, bool)}))
    invalid = (pd.concat(invalid_parts, ignore_index=True) if invalid_parts else pd.DataFrame({
        "oid": np.zeros(0, np.int64), "source": np.zeros(0, np.int64),
        "row": np.zeros(0, np.int64), "reason": pd.array([], dtype="str")}))
    return valid, invalid


def outcome_status(used: BoolArray, conflict: BoolArray, ambiguous: BoolArray,
                    keymatch: BoolArray, has_earlier_use: BoolArray) -> IntArray:
    """Each outcome record's status (a code into :data:`OUTCOME_STATUSES`, "invalid" aside)
    from what the join stages did with it."""
    status = np.full(used.size, -1, dtype=np.int64)
    status[used] = 0
    status[~used & conflict] = 1
    status[~used & ~conflict & ambiguous] = 2
    rest = status < 0
    status[rest & keymatch & has_earlier_use] = 3
    status[rest & keymatch & ~has_earlier_use] = 4
    status[rest & ~keymatch] = 5
    return status


def outcome_report(out_df: pd.DataFrame, out_invalid: pd.DataFrame, status: IntArray
                    ) -> tuple[dict[str, int], pd.DataFrame]:
    """The outcome counts by status and the details of every record not used."""
    counts = {s: int((status == i).sum()) for i, s in enumerate(OUTCOME_STATUSES)}
    counts["invalid"] = len(out_invalid)
    not_used = np.flatnonzero(status != 0)
    od = out_df.iloc[not_used]
    n_inv = len(out_invalid)
    outcome_details = pd.DataFrame({
        "source": np.concatenate([od["source"].to_numpy(dtype=np.int64),
                                  out_invalid["source"].to_numpy(dtype=np.int64)]),
        "row": np.concatenate([od["row"].to_numpy(dtype=np.int64),
                               out_invalid["row"].to_numpy(dtype=np.int64)]),
        "action_id": pd.array(pd.concat([od["action_id"], pd.Series([None] * n_inv,
                                                                    dtype="str")]),
                              dtype="str"),
        "claim_id": pd.array(pd.concat([od["claim_id"], pd.Series([None] * n_inv,
                                                                  dtype="str")]),
                             dtype="str"),
        "time": us_to_datetime(np.concatenate([od["t_us"].to_numpy(dtype=np.int64),
                                                np.full(n_inv, _NAT)])),
        "status": _from_codes(np.concatenate([status[not_used], np.full(n_inv, 6)]),
                              OUTCOME_STATUSES),
        "detail": pd.array([""] * len(od) + out_invalid["reason"].tolist(), dtype="str"),
    }).sort_values(["source", "row"], kind="stable", ignore_index=True)
    return counts, outcome_details
