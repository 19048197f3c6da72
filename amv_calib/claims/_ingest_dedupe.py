"""Streaming detection of duplicate (claim_id, timestamp) keys across the chunks of an input.

Keys are 64-bit hashes of the pair, kept per accepted row (:class:`_SeenKeys`), so a file of
any number of chunks is checked with bounded memory per row and no second pass.

Why not a library: exact keys in pyarrow (``dictionary_encode`` of the pair, ``is_in``
against the keys of earlier chunks) measured 2 to 3.5 times the time of this module per
million keys; DuckDB 4 to 6 times (a window over each chunk, a join against a table of
accepted keys), and 10 times for merely inserting the keys into a table with a primary key.
The pyarrow and join forms keep no lookup structure between calls, so they look at every
accepted key again for each new chunk: their cost grows with the square of the chunk count.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Final

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from numpy.typing import NDArray

from amv_calib.claims._arrow import BoolArray, IntArray

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
        self._runs.append(_merge_sorted(*self._fresh))
        self._fresh = []
        # Binary-counter merging: each key is merged O(log(n / chunk)) times in all.
        while len(self._runs) > 1 and len(self._runs[-2]) <= len(self._runs[-1]):
            b = self._runs.pop()
            a = self._runs.pop()
            self._runs.append(_merge_sorted(a, b))


def _merge_sorted(*runs: NDArray[np.uint64]) -> NDArray[np.uint64]:
    # numpy's stable sort (timsort) finds the sorted runs laid end to end and merges them,
    # in linear time for two; its default sort starts from scratch: 12 times slower for two
    # runs of 4 M keys. Equal keys are indistinguishable, so the result is the same array.
    merged = np.concatenate(runs)
    merged.sort(kind="stable")  # in place: np.sort would copy the fresh array once more
    return merged


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
