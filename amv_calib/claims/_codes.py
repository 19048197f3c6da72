"""Integer codes of id columns for the label join and the adapters: factorising, matching
codes across tables, and categoricals built from codes."""

from __future__ import annotations

from typing import Any, TypeAlias, cast

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from amv_calib.claims._arrow import FloatArray, IntArray
from amv_calib.claims._spill import SpilledColumns


def _is_str_dtype(s: pd.Series) -> bool:
    return isinstance(s.dtype, pd.StringDtype) or str(s.dtype) in ("str", "string")


def _arrow_chunks(s: Any) -> list[Any]:
    """The string data of a pandas column as pyarrow ``large_string`` chunks (no copy of the
    characters for pyarrow-backed columns)."""
    import pyarrow as pa

    ser = pd.Series(s, copy=False)
    if isinstance(ser.dtype, pd.CategoricalDtype) or not _is_str_dtype(ser):
        ser = ser.astype("str")
    if not len(ser):
        return []
    arr = pa.array(ser.array)
    chunks = arr.chunks if isinstance(arr, pa.ChunkedArray) else [arr]
    return [c if c.type == pa.large_string() else c.cast(pa.large_string()) for c in chunks]


def _codes(chunked: Any) -> tuple[IntArray, Any]:
    """Dictionary codes of a chunked string array (one dictionary across chunks, in order of
    first appearance), -1 = null; and that dictionary (None when there is no chunk)."""
    enc = chunked.dictionary_encode()
    parts = [c.indices.fill_null(-1).to_numpy(zero_copy_only=False) for c in enc.chunks]
    codes = np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, np.int64)
    # each chunk's dictionary holds the values seen so far: the last one holds them all
    return codes, enc.chunk(enc.num_chunks - 1).dictionary if enc.num_chunks else None


def _factorize(*series: Any) -> list[IntArray]:
    """Shared integer codes for several string columns, in order of first appearance
    (so unique values given first get codes 0, 1, ...); missing values get -1."""
    import pyarrow as pa

    chunk_lists = [_arrow_chunks(s) for s in series]
    sizes = [sum(len(c) for c in cl) for cl in chunk_lists]
    codes, _ = _codes(pa.chunked_array([c for cl in chunk_lists for c in cl],
                                       type=pa.large_string()))
    out: list[IntArray] = []
    start = 0
    for n in sizes:
        out.append(codes[start:start + n])
        start += n
    return out


def _codes_in(categories: pd.Index, other: Any) -> IntArray:
    """Codes of the strings ``other`` in the code space of the distinct ``categories`` (a
    value's code is its position there), as :func:`_factorize` of the two gives them: values
    not among the categories numbered after them, in order of first appearance; missing
    values -1. Only ``other``'s values are hashed and the categories probed against them
    (a log's million action ids against an outcome file's few: 0.02 s, where hashing the
    million took 0.2-0.5 s)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    chunks = _arrow_chunks(other)
    if not chunks:
        return np.zeros(0, np.int64)
    local, distinct = _codes(pa.chunked_array(chunks, type=pa.large_string()))
    if not len(distinct):
        return local  # every value missing
    code = np.full(len(distinct), -1, dtype=np.int64)
    if len(categories):
        cats = pa.chunked_array(_arrow_chunks(pd.Series(categories.array, copy=False)),
                                type=pa.large_string())
        at = pc.fill_null(pc.index_in(cats, value_set=distinct), -1).to_numpy()
        known = np.flatnonzero(at >= 0)
        code[at[known].astype(np.int64)] = known
    unknown = code < 0
    code[unknown] = len(categories) + np.arange(int(unknown.sum()), dtype=np.int64)
    return np.where(local >= 0, code[np.maximum(local, 0)], -1)


def _codes_against(known: Any, other: Any) -> tuple[IntArray, Codes]:
    """Codes of the strings ``known`` (as :func:`_factorize` gives them) and of ``other`` in
    the same space (int32 when ``known`` has fewer than 2**31 - 1 values: the outcomes'
    claims): a value of ``other`` among ``known`` takes its code, every other value one
    shared code after ``known``'s; missing values -1.

    For matching that needs only ``known``'s values told apart (the log's claim ids against
    the outcomes'): the outcomes' few are hashed and the log's many probed against them
    (10 M lines' 25 M claim ids: half the time of numbering them all).
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    chunks = _arrow_chunks(known)
    k_codes, distinct = _codes(pa.chunked_array(chunks, type=pa.large_string()))
    if distinct is None:
        distinct = pa.array([], pa.large_string())
    values = pa.chunked_array(_arrow_chunks(other), type=pa.large_string())
    at = pc.index_in(values, value_set=distinct)  # one hash table of ``distinct``
    codes: Codes = np.empty(len(values),
                            dtype=np.int32 if len(distinct) < 2**31 - 1 else np.int64)
    step = 1 << 22  # the conversion's temporaries a few MB, not the log's size
    for lo in range(0, len(values), step):
        a, v = at.slice(lo, step), values.slice(lo, step)
        codes[lo:lo + len(a)] = np.where(
            a.is_valid().to_numpy(), a.fill_null(0).to_numpy(),
            np.where(v.is_valid().to_numpy(), len(distinct), -1))
    return k_codes, codes


def _from_codes(codes: NDArray[Any], categories: Any) -> Any:
    """A pandas ``str`` array from integer codes into ``categories`` (-1 = missing)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    c = np.asarray(codes, dtype=np.int64)
    cats = pa.array(list(categories) if not isinstance(categories, pa.Array) else categories,
                    type=pa.string())
    if len(cats) == 0:
        return pd.array([None] * c.size, dtype="str")
    dictionary = pa.DictionaryArray.from_arrays(
        pa.array(np.where(c < 0, 0, c).astype(np.int32), mask=c < 0), cats)
    return pd.array(pc.cast(dictionary, pa.string()), dtype="str")


def categorical(codes: NDArray[Any], categories: Any) -> pd.Categorical:
    """A categorical of string ``categories`` from integer codes (-1 = missing)."""
    cats = pd.Index(list(categories) if not isinstance(categories, pd.Index) else categories,
                    dtype="str")
    return pd.Categorical.from_codes(np.asarray(codes, dtype=np.int64), categories=cats)


def _cat_subset(col: pd.Series, idx: IntArray) -> pd.Categorical:
    """``col[idx]`` of a categorical column, sharing its categories (no copy of them)."""
    dtype = cast(pd.CategoricalDtype, col.dtype)
    return cast(pd.Categorical, pd.Categorical.from_codes(col.cat.codes.to_numpy()[idx],
                                                          dtype=dtype))


def _cat_take(col: pd.Series, idx: IntArray) -> Any:
    """``col[idx]`` of a categorical column as a pandas ``str`` array."""
    import pyarrow as pa

    codes = col.cat.codes.to_numpy()[idx]
    return _from_codes(codes, pa.array(col.cat.categories.array, type=pa.string()))


def _floats_at(u: pd.DataFrame, name: str, which: IntArray, spilled: SpilledColumns | None,
               entry_of_use: IntArray | None) -> FloatArray:
    """Column ``name`` (a feature or ``p``) of the uses ``which`` (ascending), from the
    uses' frame or, when the log was read with ``spill=True``, from its file."""
    if spilled is None:
        return np.asarray(u[name].to_numpy()[which], dtype=np.float64)
    return spilled.take(name, which if entry_of_use is None else entry_of_use[which])


#: Codes held per use or entry through the join: int32 when they fit (:func:`_narrow`).
Codes: TypeAlias = NDArray[np.signedinteger[Any]]


def _narrow(codes: IntArray) -> Codes:
    """``codes`` (-1 or more) as int32 when they fit, else as they are."""
    return codes.astype(np.int32, copy=False) if codes.max(initial=-1) < 2**31 - 1 else codes
