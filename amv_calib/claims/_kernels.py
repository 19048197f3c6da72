"""Compiled loops of the label join (numba), where numpy has no fast whole-array form.

Importing this module imports numba, which compiles a loop on its first call (and caches it
beside the module, as :mod:`amv_calib.claims._logextract` does).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from amv_calib.claims._arrow import BoolArray, IntArray

#: A record with more premises than this is checked for repeated keys by a sort of its keys,
#: a smaller one by comparing every pair.
_PAIRWISE_MAX: int = 64


@njit(cache=True, nogil=True)
def _repeated(rec: IntArray, key: IntArray, out: BoolArray) -> bool:  # pragma: no cover
    n = rec.size
    i = 0
    while i < n:
        j = i + 1
        while j < n and rec[j] == rec[i]:
            j += 1
        if j < n and rec[j] < rec[i]:
            return False
        if j - i <= _PAIRWISE_MAX:
            for a in range(i, j):
                if key[a] >= 0:
                    for b in range(a + 1, j):
                        if key[b] == key[a]:
                            out[a] = True
                            out[b] = True
        else:
            ks = key[i:j]
            order = np.argsort(ks, kind="mergesort")
            for t in range(1, j - i):
                a, b = order[t - 1], order[t]
                if ks[a] >= 0 and ks[a] == ks[b]:
                    out[i + a] = True
                    out[i + b] = True
        i = j
    return True


def repeated_in_records(rec: IntArray, key: IntArray) -> BoolArray:
    """Per row: whether another row of its record has the same ``key`` (keys -1 never
    count). Rows come in record order (``rec`` non-decreasing), so a record's rows are one
    run: each is checked alone, in memory of the output's size (sorting the pairs of a 10
    M-line log's 25 M entries took ~0.8 GB).

    Raises
    ------
    ValueError
        If ``rec`` decreases somewhere.
    """
    out = np.zeros(rec.size, dtype=bool)
    if not _repeated(np.ascontiguousarray(rec, dtype=np.int64),
                     np.ascontiguousarray(key, dtype=np.int64), out):
        raise ValueError("repeated_in_records: rows must come in record order")
    return out
