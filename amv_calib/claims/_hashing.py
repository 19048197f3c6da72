"""64-bit hashes of strings and what is built on them: a radix sort of hash keys and the
factorisation of many distinct strings.

The monitor matches pending entries and outcome records by these hashes
(:mod:`amv_calib.monitoring._state`); the decision-log reader codes a big log's action ids
with them (:func:`factorize_strings`). The compiled loops are built on first use (numba is
imported then, not with this module).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any, Final

import numpy as np
import pandas as pd
from numpy.typing import NDArray

U64Array = NDArray[np.uint64]
IntArray = NDArray[np.int64]

_M1: Final = np.uint64(0xBF58476D1CE4E5B9)
_M2: Final = np.uint64(0x94D049BB133111EB)
#: :func:`factorize_strings` numbers at most this many values (int32 codes).
_MAX_ROWS: Final = 2**31 - 1
#: The golden-ratio increment of splitmix64, for combining hashes.
GOLDEN: Final = np.uint64(0x9E3779B97F4A7C15)


def mix64(h: U64Array) -> U64Array:
    """splitmix64's finaliser (a bijection of 64-bit words), wrapping as unsigned."""
    h = (h ^ (h >> np.uint64(30))) * _M1
    h = (h ^ (h >> np.uint64(27))) * _M2
    return np.asarray(h ^ (h >> np.uint64(31)))


def hash_strings(values: Any) -> U64Array:
    """64-bit hashes of strings (missing values hash to 0, present ones never): how pending
    entries and outcome records are matched by key (a collision only joins an entry again,
    never mislabels). FNV-1a of the UTF-8 bytes, finished by splitmix64's mixer (FNV's low
    bits mix poorly, and the keys are sorted and searched). A categorical is hashed through
    its categories; other values through their text."""
    import pyarrow as pa

    arr = pd.Series(values, copy=False)
    if isinstance(arr.dtype, pd.CategoricalDtype):
        cats = hash_strings(pd.Series(arr.cat.categories, copy=False))
        codes = arr.cat.codes.to_numpy()
        return np.where(codes >= 0, cats[np.maximum(codes, 0)] if len(cats) else 0,
                        0).astype(np.uint64)
    text = pa.array(arr, from_pandas=True)
    if isinstance(text, pa.ChunkedArray):
        text = text.combine_chunks()
    return arrow_string_hashes(text)


def arrow_string_hashes(text: Any) -> U64Array:
    """:func:`hash_strings` of an Arrow string or large-string array, without a copy."""
    import pyarrow as pa

    if not (pa.types.is_string(text.type) or pa.types.is_large_string(text.type)):
        text = text.cast(pa.large_string())
    fnv = np.zeros(len(text), dtype=np.uint64)
    if not len(text):
        return fnv
    width = np.int64 if pa.types.is_large_string(text.type) else np.int32
    offsets = np.frombuffer(text.buffers()[1], dtype=width)[
        text.offset:text.offset + len(text) + 1]
    data = text.buffers()[2]
    _fnv_kernel()(offsets, np.frombuffer(data, dtype=np.uint8) if data is not None
                  else np.zeros(0, np.uint8), fnv)
    h = mix64(fnv)
    return np.where(text.is_valid().to_numpy(zero_copy_only=False),
                    np.where(h == 0, np.uint64(1), h), np.uint64(0)).astype(np.uint64)


def sort_keys(keys: U64Array) -> tuple[U64Array, IntArray]:
    """``keys`` sorted and the stable order that sorts them: ``np.argsort(keys,
    kind="stable")``'s order, by a least-significant-digit radix sort (8 passes of a byte;
    the argsort took 4.4-5.5 s on 25 M hashes, this 1.6 s)."""
    keys = np.ascontiguousarray(keys, dtype=np.uint64)
    if len(keys) < 2:
        return keys.copy(), np.arange(len(keys), dtype=np.int64)
    out, order = _radix_kernel()(keys)
    return out, order


def factorize_strings(chunks: Sequence[Any]) -> tuple[NDArray[np.int32], Any] | None:
    """The codes (-1 for a missing value) and distinct values of Arrow string arrays taken
    as one, in order of first appearance: what ``dictionary_encode`` gives, by sorting
    64-bit hashes (:func:`hash_strings`); None if two different strings share a hash.

    Arrow's hash table for a 10 M-line log's 10 M distinct action ids took 3.7 s and ~0.8
    GB; this 1.8 s and two thirds of the memory. Values sharing a hash are compared whole,
    so a collision is never taken for a repeat; so many values that int32 codes could not
    number them (2**31) are left to Arrow too (None).
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    text = pa.chunked_array(chunks, type=pa.string()).combine_chunks()  # one pass each
    n = len(text)
    if n >= _MAX_ROWS:
        return None
    h = arrow_string_hashes(text)
    hs, order = sort_keys(h)
    del h
    start = np.ones(n, dtype=bool)  # the first of a run of equal hashes, in sorted order
    start[1:] = hs[1:] != hs[:-1]
    present = hs != 0  # a missing value hashes to 0
    del hs
    group = np.cumsum(start, dtype=np.int32) - 1  # per sorted position
    first = order[start]  # each run's first position (the sort is stable)
    repeat = np.flatnonzero(~start & present)  # sorted positions that repeat a hash
    if repeat.size:
        pos = order[repeat]
        same = pc.equal(text.take(pa.array(pos)), text.take(pa.array(first[group[repeat]])))
        if not pc.all(same).as_py():
            return None
    is_first = np.zeros(n, dtype=bool)
    is_first[first] = True
    is_first[order[~present]] = False  # the missing values are no category
    rank = np.cumsum(is_first, dtype=np.int32) - 1  # per position: its first's rank
    codes = np.full(n, -1, dtype=np.int32)
    codes[order[present]] = rank[first[group[present]]]
    categories = text.filter(pa.array(is_first))
    return codes, categories


@functools.cache
def _radix_kernel() -> Any:
    """The compiled radix passes of :func:`sort_keys` (numba is imported on first use)."""
    from numba import njit

    @njit(cache=True, nogil=True)
    def kernel(keys: Any) -> Any:  # pragma: no cover - compiled
        n = keys.size
        k0, o0 = keys.copy(), np.arange(n)
        k1, o1 = np.empty_like(k0), np.empty_like(o0)
        for shift in range(0, 64, 8):
            s = np.uint64(shift)
            at = np.zeros(257, np.int64)
            for i in range(n):
                at[((k0[i] >> s) & np.uint64(255)) + np.uint64(1)] += 1
            if at.max() == n:  # every key has this byte: the pass would change nothing
                continue
            for b in range(256):
                at[b + 1] += at[b]
            for i in range(n):
                d = (k0[i] >> s) & np.uint64(255)
                j = at[d]
                at[d] = j + 1
                k1[j] = k0[i]
                o1[j] = o0[i]
            k0, k1 = k1, k0
            o0, o1 = o1, o0
        return k0, o0

    return kernel


@functools.cache
def _fnv_kernel() -> Any:
    """The compiled FNV-1a of each Arrow string (its offsets into the UTF-8 bytes) for
    :func:`hash_strings` (numba is imported on first use)."""
    from numba import njit

    from amv_calib.claims._logextract import FNV_OFFSET as basis
    from amv_calib.claims._logextract import FNV_PRIME as prime

    @njit(cache=True, nogil=True)
    def kernel(offsets: Any, data: Any, out: Any) -> None:  # pragma: no cover - compiled
        for i in range(out.shape[0]):
            h = basis
            for j in range(offsets[i], offsets[i + 1]):
                h = (h ^ np.uint64(data[j])) * prime
            out[i] = h

    return kernel
