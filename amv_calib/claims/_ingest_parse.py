"""Column parsers of ingestion: one input column to its output type, with its problem rows.

Each parser returns the values (null where missing or bad) and, per kind of problem, the rows
that have it and how to word the reason from the field's text; the validation of a chunk
(:mod:`amv_calib.claims._ingest_validate`) turns those into rejects.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from amv_calib.claims._arrow import (
    NUMBER_LIKE,
    BoolArray,
    cast_subset,
    is_number_type,
    is_stringish,
    np_mask,
    null_mask,
    string_view,
    strip_ids,
)
from amv_calib.claims._ingest_columns import _Kind, _Spec
from amv_calib.claims._times import PROBLEMS as TIMESTAMP_PROBLEMS
from amv_calib.claims._times import parse_timestamps
from amv_calib.contract import MEMORY_KIND_PROBLEMS, MemoryKindError, check_memory_kind

_TRUE: Final = ("true", "t", "yes", "y", "1")
_FALSE: Final = ("false", "f", "no", "n", "0")
_BOOL_HINT: Final = "true/false, yes/no, t/f, 1/0"


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


def _parse_kind(col: str, arr: pa.Array, spec: _Spec) -> _Parsed:
    # A memory kind names a class of the calibrator's closed vocabulary, by the contract's
    # rule (check_memory_kind): text, never a number, a list or an object. Absent or null is
    # allowed (the kind is unknown); an empty field is null, as for every optional field (a
    # CSV cannot tell an empty string from a missing value).
    n = len(arr)
    typed_text = is_stringish(arr) or pa.types.is_null(arr.type)
    s = pc.cast(string_view(arr), pa.large_string())
    if isinstance(s, pa.ChunkedArray):
        s = s.combine_chunks()
    empty = pc.equal(s, "")
    if pc.any(empty).as_py():
        s = pc.if_else(empty, pa.scalar(None, pa.large_string()), s)
    nulls = null_mask(s)
    problems = [_Problem(
        key=f"{col} not a string", mask=np.full(n, not typed_text) & ~nulls,
        message=lambda t: f"{col}={t} is not a string (a memory kind is a name such as "
                          "'preference')")]
    bad = problems[0].mask.copy()
    if typed_text:
        # the rule runs once per distinct kind (a table holds a handful)
        refused: dict[str, list[str]] = {}
        for v in pc.unique(s).to_pylist():
            if v is None:
                continue
            try:
                check_memory_kind(v, col)
            except MemoryKindError as exc:
                refused.setdefault(exc.problem, []).append(v)
        for problem in MEMORY_KIND_PROBLEMS:
            if problem not in refused:
                continue
            mask = np_mask(pc.fill_null(
                pc.is_in(s, value_set=pa.array(refused[problem], pa.large_string())), False))
            problems.append(_Problem(key=f"{col} {problem}", mask=mask,
                                     message=functools.partial(_kind_message, col)))
            bad |= mask
    if bad.any():
        s = pc.if_else(pa.array(bad), pa.scalar(None, pa.large_string()), s)
    return _Parsed(values=s, problems=problems)


def _kind_message(col: str, text: str | None) -> str:
    """Why the contract's rule refuses the kind ``text``."""
    try:
        check_memory_kind(text, col)
    except MemoryKindError as exc:
        return str(exc)
    raise AssertionError(f"{col}={text!r} was refused but is a memory kind")  # pragma: no cover


_PARSERS: Final[dict[_Kind, Callable[[str, pa.Array, _Spec], _Parsed]]] = {
    "id": _parse_id,
    "timestamp": _parse_timestamp,
    "float": _parse_float,
    "bool": _parse_bool,
    "str": _parse_str,
    "kind": _parse_kind,
}
