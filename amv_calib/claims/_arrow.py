"""Arrow column helpers shared by the ingest validator and the timestamp parser.

Masks as numpy booleans, element-wise casts that flag the values pyarrow refuses, a text view
of any column, and the conversion of pandas / Python columns to Arrow.
"""

from __future__ import annotations

import math
from typing import Any, Final, TypeAlias

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from numpy.typing import NDArray

BoolArray: TypeAlias = NDArray[np.bool_]
IntArray: TypeAlias = NDArray[np.int64]
FloatArray: TypeAlias = NDArray[np.float64]
Column: TypeAlias = "pa.Array | pa.ChunkedArray"

# A generous pre-filter: a superset of what pyarrow's float parser accepts, so it only saves
# work and never changes which values are accepted (tests check the superset property).
NUMBER_LIKE: Final = r"(?i)^[+-]?(nan|inf(inity)?|[0-9.]+([eE][+-]?[0-9]*)?)$"


def strip_ids(arr: Column) -> Column:
    """Identifiers without surrounding white space (Unicode's), the rule every reader of a
    ``claim_id`` applies (``docs/data.md``): ``" c1"`` and ``"c1"`` are one claim."""
    if isinstance(arr, pa.Array) and _plainly_trimmed(arr):
        return arr
    return pc.utf8_trim_whitespace(arr)


def _plainly_trimmed(arr: pa.Array) -> bool:
    """Whether no value of a string array can begin or end with white space: each first and
    last byte is printable ASCII other than a space (read off the buffers, no copy)."""
    if not (pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type)):
        return False
    offsets_buf, data_buf = arr.buffers()[1:3]
    if data_buf is None or offsets_buf is None:
        return bool(len(arr) == arr.null_count)
    width = np.int64 if pa.types.is_large_string(arr.type) else np.int32
    offsets = np.frombuffer(offsets_buf, dtype=width)[arr.offset: arr.offset + len(arr) + 1]
    data = np.frombuffer(data_buf, dtype=np.uint8)
    begin, end = offsets[:-1].astype(np.int64), offsets[1:].astype(np.int64)
    valid = end > begin  # nulls and empty strings hold no byte (an empty id is refused later)
    if not valid.any():
        return True
    first, last = data[begin[valid]], data[end[valid] - 1]
    return bool(((first > 0x20) & (first < 0x7F) & (last > 0x20) & (last < 0x7F)).all())


def np_mask(arr: Column) -> BoolArray:
    """A boolean Arrow column as a numpy mask (nulls must be filled first)."""
    return np.asarray(arr.to_numpy(zero_copy_only=False), dtype=bool)


def null_mask(arr: Column) -> BoolArray:
    """Where ``arr`` is null."""
    if arr.null_count == 0:
        return np.zeros(len(arr), dtype=bool)
    return np_mask(arr.is_null())


def cast_each(arr: pa.Array, typ: pa.DataType) -> tuple[pa.Array, BoolArray]:
    """Cast elementwise; values pyarrow cannot cast become null and are flagged.

    Splits the array in halves on failure, so the cost grows with the number of bad values,
    and a value is accepted exactly when pyarrow accepts it on its own.
    """
    try:
        return pc.cast(arr, typ), np.zeros(len(arr), dtype=bool)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        pass
    n = len(arr)
    if n == 1:
        return pa.nulls(1, typ), np.ones(1, dtype=bool)
    mid = n // 2
    a, fa = cast_each(arr.slice(0, mid), typ)
    b, fb = cast_each(arr.slice(mid), typ)
    return pa.concat_arrays([a, b]), np.concatenate([fa, fb])


def cast_subset(
    arr: pa.Array, take: BoolArray, typ: pa.DataType
) -> tuple[pa.Array, BoolArray]:
    """Cast ``arr[take]`` elementwise; returns full-length values (null elsewhere) and the
    rows of ``take`` that failed."""
    n = len(arr)
    failed = np.zeros(n, dtype=bool)
    idx = np.flatnonzero(take)
    if len(idx) == n:
        values, bad = cast_each(arr, typ)
        return values, bad
    out = pa.nulls(n, typ)
    if len(idx) == 0:
        return out, failed
    values, bad = cast_each(arr.take(pa.array(idx)), typ)
    failed[idx[bad]] = True
    # Scatter back: build with numpy where possible.
    full_idx = np.full(n, -1, dtype=np.int64)
    full_idx[idx] = np.arange(len(idx), dtype=np.int64)
    out = values.take(pa.array(full_idx, mask=full_idx < 0))
    return out, failed


def string_view(arr: pa.Array) -> pa.Array:
    """``arr`` as a string array (lists joined by commas, nulls kept)."""
    if pa.types.is_dictionary(arr.type):
        arr = arr.dictionary_decode()
    if pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type):
        return arr
    if pa.types.is_string_view(arr.type):
        return pc.cast(arr, pa.large_string())
    if pa.types.is_list(arr.type) or pa.types.is_large_list(arr.type):
        return pc.binary_join(pc.cast(arr, pa.list_(pa.string())), ",")
    if pa.types.is_binary(arr.type) or pa.types.is_large_binary(arr.type):
        return cast_subset(arr, np.ones(len(arr), dtype=bool), pa.string())[0]
    if pa.types.is_null(arr.type):
        return pa.nulls(len(arr), pa.string())
    return pc.cast(arr, pa.string())


def is_stringish(arr: Column) -> bool:
    """Whether ``arr`` holds text (strings, binary, or a dictionary of them)."""
    t = arr.type
    return bool(pa.types.is_string(t) or pa.types.is_large_string(t)
                or pa.types.is_string_view(t) or pa.types.is_dictionary(t)
                or pa.types.is_binary(t) or pa.types.is_large_binary(t))


def is_number_type(t: pa.DataType) -> bool:
    """Whether ``t`` is an integer, floating-point or decimal type."""
    return bool(pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t))


def text_of(arr: pa.Array, idx: IntArray) -> pa.Array:
    """The fields ``arr[idx]`` as text (a string array)."""
    sub = arr.take(pa.array(idx, type=pa.int64()))
    try:
        return pc.cast(string_view(sub), pa.string())
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return pa.array([None if v is None else str(v) for v in sub.to_pylist()],
                        type=pa.string())


def is_na(v: Any) -> bool:
    """Whether a Python value stands for a missing one (None, NaN, ``pd.NA``)."""
    return v is None or (isinstance(v, float) and math.isnan(v)) or v is pd.NA


def zoned_datetimes(s: pd.Series) -> pa.Array:
    """A zoned datetime Series as Arrow timestamps in its zone, as pyarrow converts it.

    pyarrow's own conversion reads ``Series.values``, which pandas 3.1 deprecates for zoned
    data (a warning per column); the UTC wall times with the zone attached are the same array.
    """
    unit = s.dt.unit
    utc = s.dt.tz_convert("UTC").dt.tz_localize(None).to_numpy()
    zone = pa.lib.tzinfo_to_string(s.dt.tz)
    return pa.array(utc, type=pa.timestamp(unit), from_pandas=True).cast(
        pa.timestamp(unit, tz=zone))


def arrow_column(values: Any) -> Column:
    """``values`` (an Arrow array, a pandas Series, a numpy array or a sequence) as Arrow.

    A column Arrow cannot type as one (text mixed with numbers, say) becomes text, each
    value as ``str`` prints it, missing values null; so a number keeps its digits.
    """
    if isinstance(values, (pa.Array, pa.ChunkedArray)):
        return values
    if isinstance(values, pd.Series) and isinstance(values.dtype, pd.DatetimeTZDtype):
        return zoned_datetimes(values)
    try:
        return pa.array(values, from_pandas=True)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
        return pa.array([None if is_na(v) else str(v) for v in values], type=pa.string())
