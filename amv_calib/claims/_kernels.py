"""Compiled loops of the label join (numba), where numpy has no fast whole-array form.

Importing this module imports numba, which compiles a loop on its first call (and caches it
beside the module, as :mod:`amv_calib.claims._keyscan` does).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from amv_calib.claims._arrow import BoolArray, IntArray


@njit(cache=True, nogil=True)
def _earliest(codes: IntArray, t: IntArray, valid: BoolArray,
              out: IntArray, seen: BoolArray) -> None:  # pragma: no cover - compiled
    for i in range(codes.size):
        c = codes[i]
        if valid[i] and c >= 0:
            seen[c] = True
            if t[i] < out[c]:
                out[c] = t[i]


def earliest_per_code(codes: IntArray, t: IntArray, valid: BoolArray, n_codes: int
                      ) -> tuple[IntArray, BoolArray]:
    """Per code in ``range(n_codes)``: the smallest ``t`` among the positions where
    ``valid`` holds and ``codes`` has it (int64 max if none), and whether there is one.

    ``np.minimum.at`` gives the same minima, but took 5.3 s for a 10 M-line log's 25 M uses
    (this loop: 0.1 s), and needs the valid positions copied out first.
    """
    out = np.full(n_codes, np.iinfo(np.int64).max, dtype=np.int64)
    seen = np.zeros(n_codes, dtype=bool)
    _earliest(np.ascontiguousarray(codes, dtype=np.int64), np.ascontiguousarray(t, np.int64),
              np.ascontiguousarray(valid, dtype=bool), out, seen)
    return out, seen
