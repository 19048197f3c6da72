"""Which decision-log lines need the strict JSON parser: a compiled scan of raw bytes.

The columnar reader parses a block of lines with pyarrow, which takes the last copy of a key
given twice outside its schema (and never looks inside the objects it ignores). The data
contract refuses any line giving a key twice (:func:`amv_calib.contract.loads_strict`), and
parsing every line again in Python to enforce that cost most of the read (about 70 % of
``label``'s time on a 1 M-line log). This scan finds the lines that could break a rule the
strict parser enforces, so that only those are parsed again:

- an object giving a key twice (keys compared by a 64-bit hash of their raw bytes: a hash
  collision only sends a clean line to the strict parser);
- a key holding a backslash (``"a"`` and ``"\\u0061"`` are the same key);
- any byte >= 0x80 (UTF-8 is for the strict parser to judge) or a control byte in a string;
- nesting deeper than :data:`MAX_DEPTH`, or a line that does not start with ``{``.

A line it passes is one the strict parser accepts as an object, given that pyarrow parsed
the block (so every line is well-formed JSON); ``tests/claims/test_keyscan.py`` holds the
two to that on generated lines. Importing this module imports numba, which compiles the scan
on first use (cached on disk).
"""

from __future__ import annotations

from typing import Any, Final

import numpy as np
from numba import njit
from numpy.typing import NDArray

#: Deeper nesting goes to the strict parser (Python's own limit is near 1,000).
MAX_DEPTH: Final = 64
_FNV_OFFSET: Final = np.uint64(0xCBF29CE484222325)
_FNV_PRIME: Final = np.uint64(0x100000001B3)


@njit(cache=True, nogil=True, inline="always")
def _string(buf: Any, i: int, e: int, key: bool, offset: Any,
            prime: Any) -> Any:  # pragma: no cover - compiled
    """From the byte after an opening quote: (index of the closing quote, the key's
    hash, whether the line is suspect)."""
    h = offset
    while i < e:
        c = buf[i]
        if c == 34:
            return i, h, False
        if c >= 128 or c < 32 or (c == 92 and key):
            return i, h, True
        if c == 92:  # the escaped byte cannot end the string
            i += 1
        elif key:
            h = (h ^ np.uint64(c)) * prime
        i += 1
    return i, h, False


@njit(cache=True, nogil=True)
def _one_line(buf: Any, s: int, e: int, keys: Any, frame: Any, is_obj: Any,
               max_depth: int, offset: Any, prime: Any) -> Any:  # pragma: no cover
    """Whether line ``buf[s:e]`` is suspect, and the key table (grown if needed)."""
    i = s
    while i < e and (buf[i] == 32 or buf[i] == 9 or buf[i] == 13):
        i += 1
    if i >= e or buf[i] != 123:  # not an object
        return True, keys
    depth = 0
    nkeys = 0
    expect_key = False
    while i < e:
        c = buf[i]
        if c >= 128:
            return True, keys
        if c == 34:  # a string: a key where an object expects one
            key = expect_key and is_obj[depth]
            i, h, bad = _string(buf, i + 1, e, key, offset, prime)
            if bad:
                return True, keys
            if key:
                for k in range(frame[depth], nkeys):
                    if keys[k] == h:
                        return True, keys
                if nkeys == keys.shape[0]:
                    grown = np.empty(2 * nkeys, dtype=np.uint64)
                    grown[:nkeys] = keys
                    keys = grown
                keys[nkeys] = h
                nkeys += 1
                expect_key = False
        elif c == 123 or c == 91:  # "{" or "["
            depth += 1
            if depth > max_depth:
                return True, keys
            is_obj[depth] = c == 123
            frame[depth] = nkeys
            expect_key = c == 123
        elif c == 125 or c == 93:  # "}" or "]": the object's keys are done with
            if depth > 0:
                nkeys = frame[depth]
            depth -= 1
            expect_key = False
        elif c == 44:  # ","
            expect_key = True
        i += 1
    return False, keys


@njit(cache=True, nogil=True)
def _scan(buf: Any, starts: Any, ends: Any, max_depth: int, offset: Any,
         prime: Any) -> Any:  # pragma: no cover - compiled
    n = starts.shape[0]
    suspect = np.zeros(n, dtype=np.bool_)
    keys = np.empty(4096, dtype=np.uint64)
    frame = np.empty(max_depth + 2, dtype=np.int64)  # first key index of each object
    is_obj = np.zeros(max_depth + 2, dtype=np.bool_)
    for line in range(n):
        suspect[line], keys = _one_line(buf, starts[line], ends[line], keys, frame,
                                       is_obj, max_depth, offset, prime)
    return suspect


def suspect_lines(block: bytes, n_lines: int) -> NDArray[np.bool_]:
    """For each of the ``n_lines`` newline-terminated lines of ``block``: whether the strict
    parser must see it (module docstring)."""
    buf = np.frombuffer(block, dtype=np.uint8)
    ends = np.flatnonzero(buf == 10)[:n_lines]
    starts = np.concatenate([[0], ends[:-1] + 1]).astype(np.int64)
    out: NDArray[np.bool_] = _scan(buf, starts, ends.astype(np.int64), MAX_DEPTH,
                                     _FNV_OFFSET, _FNV_PRIME)
    return out
