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
- a ``NaN`` or ``Inf`` literal (pyarrow reads them as numbers; strict JSON has none);
- nesting deeper than :data:`MAX_DEPTH`, more than :data:`MAX_OPEN_KEYS` keys in the
  objects open at one point, or a line that does not start with ``{``.

A line it passes is one the strict parser accepts as an object, given that pyarrow parsed
the block (so every line is well-formed JSON); ``tests/claims/test_keyscan.py`` holds the
two to that on generated lines. Importing this module imports numba, which compiles the scan
on first use (cached on disk).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
from numba import njit
from numpy.typing import NDArray

#: Deeper nesting goes to the strict parser (Python's own limit is near 1,000).
MAX_DEPTH: Final = 64
#: A line with more keys than this in objects open at once goes to the strict parser. The
#: table is never grown: a scan function returning a new array on each key costs reference
#: counting on every key (2.6x the scan's time on the bench log).
MAX_OPEN_KEYS: Final = 4096
_FNV_OFFSET: Final = np.uint64(0xCBF29CE484222325)
_FNV_PRIME: Final = np.uint64(0x100000001B3)
#: Bytes a string's scan must stop at: a quote, a backslash, a control byte or >= 0x80.
_STRING_STOPS: Final = np.zeros(256, dtype=np.uint8)
_STRING_STOPS[:32] = 1
_STRING_STOPS[128:] = 1
_STRING_STOPS[[34, 92]] = 1
#: Bytes the scan of a line must look at outside strings (the rest, numbers, literals and
#: white space, are passed over with one load each): >= 0x80, ``":{[}],``, and the ``N`` and
#: ``I`` that start pyarrow's non-JSON number literals (``NaN``, ``-NaN``, ``Inf``,
#: ``Infinity``), which strict JSON refuses: outside a string they occur in nothing else.
_STRUCTURAL: Final = np.zeros(256, dtype=np.uint8)
_STRUCTURAL[128:] = 1
_STRUCTURAL[list(b'":{[}],NI')] = 1


@njit(cache=True, nogil=True, inline="always")
def _string(buf: Any, i: int, e: int, key: bool, offset: Any,
            prime: Any) -> Any:  # pragma: no cover - compiled
    """From the byte after an opening quote: (index of the closing quote, the key's
    hash, whether the line is suspect)."""
    h = offset
    if not key:
        while i < e:
            c = buf[i]
            if _STRING_STOPS[c] == 0:
                i += 1
            elif c == 34:
                return i, h, False
            elif c == 92:  # the escaped byte cannot end the string
                i += 2
            else:
                return i, h, True
        return i, h, False
    while i < e:
        c = buf[i]
        if c == 34:
            return i, h, False
        if _STRING_STOPS[c] != 0:  # a backslash too: "a" and "\u0061" are one key
            return i, h, True
        h = (h ^ np.uint64(c)) * prime
        i += 1
    return i, h, False


@njit(cache=True, nogil=True, inline="always")
def _add_key(keys: Any, first: int, nkeys: int, h: Any) -> int:  # pragma: no cover
    """The count of ``keys`` with ``h`` added, or -1 if ``h`` is among ``keys[first:nkeys]``
    or the table is full."""
    for k in range(first, nkeys):
        if keys[k] == h:
            return -1
    if nkeys == keys.shape[0]:
        return -1
    keys[nkeys] = h
    return nkeys + 1


@njit(cache=True, nogil=True, inline="always")
def _index_of(wanted: Any, h: Any) -> int:  # pragma: no cover - compiled
    for j in range(wanted.shape[0]):
        if wanted[j] == h:
            return j
    return -1


@njit(cache=True, nogil=True, inline="always")
def _mark(names: Any, shift: Any, found: Any, h: Any) -> None:  # pragma: no cover
    """Set ``found`` at ``h``'s slot of the direct-mapped table ``names`` (its size a power
    of two; :func:`_name_slots`), if ``h`` is there."""
    k = int((h >> shift) & np.uint64(names.shape[0] - 1))
    if names[k] == h:
        found[k] = True


@njit(cache=True, nogil=True)
def _one_line(buf: Any, s: int, e: int, keys: Any, frame: Any, is_obj: Any,
              max_depth: int, offset: Any, prime: Any, wanted: Any,
              span: Any, names: Any, shift: Any,
              found: Any) -> Any:  # pragma: no cover - compiled
    """Whether line ``buf[s:e]`` is suspect. For each top-level key whose hash is in
    ``wanted``, ``span[j]`` receives the offsets of its opening quote, of its value's first
    byte and of the byte after its value; a key (at any depth) whose hash is in the table
    ``names`` sets its ``found`` (:func:`_mark`)."""
    i = s
    while i < e and (buf[i] == 32 or buf[i] == 9 or buf[i] == 13):
        i += 1
    if i >= e or buf[i] != 123:  # not an object
        return True
    depth = 0
    nkeys = 0
    expect_key = False
    open_j = -1  # the wanted key whose value is being read
    while i < e:
        c = buf[i]
        if _STRUCTURAL[c] == 0:
            i += 1
            continue
        if c == 34:  # a string: a key where an object expects one
            key = expect_key and is_obj[depth]
            quote = i
            i, h, bad = _string(buf, i + 1, e, key, offset, prime)
            if bad:
                return True
            if key:
                nkeys = _add_key(keys, frame[depth], nkeys, h)
                if nkeys < 0:
                    return True
                _mark(names, shift, found, h)
                expect_key = False
                if depth == 1:
                    open_j = _index_of(wanted, h)
                    if open_j >= 0:
                        span[open_j, 0] = quote
        elif c == 58:  # ":"
            if depth == 1 and open_j >= 0 and span[open_j, 1] < 0:
                span[open_j, 1] = i + 1
        elif c == 123 or c == 91:  # "{" or "["
            depth += 1
            if depth > max_depth:
                return True
            is_obj[depth] = c == 123
            frame[depth] = nkeys
            expect_key = c == 123
        elif c == 125 or c == 93:  # "}" or "]": the object's keys are done with
            if depth == 1 and open_j >= 0:
                span[open_j, 2] = i
                open_j = -1
            if depth > 0:
                nkeys = frame[depth]
            depth -= 1
            expect_key = False
        elif c == 44:  # ","
            if depth == 1 and open_j >= 0:
                span[open_j, 2] = i
                open_j = -1
            expect_key = True
        else:  # the structural bytes left: >= 0x80, or a non-finite number literal
            return True
        i += 1
    return False


@njit(cache=True, nogil=True)
def _scan(buf: Any, starts: Any, ends: Any, max_depth: int, offset: Any, prime: Any,
          wanted: Any, names: Any, shift: Any) -> Any:  # pragma: no cover - compiled
    n = starts.shape[0]
    found = np.zeros(names.shape[0], dtype=np.bool_)
    suspect = np.zeros(n, dtype=np.bool_)
    spans = np.full((n, wanted.shape[0], 3), -1, dtype=np.int64)
    keys = np.empty(MAX_OPEN_KEYS, dtype=np.uint64)
    frame = np.empty(max_depth + 2, dtype=np.int64)  # first key index of each object
    is_obj = np.zeros(max_depth + 2, dtype=np.bool_)
    for line in range(n):
        suspect[line] = _one_line(buf, starts[line], ends[line], keys, frame, is_obj,
                                  max_depth, offset, prime, wanted, spans[line], names,
                                  shift, found)
    return suspect, spans, found


def key_hash(key: bytes) -> np.uint64:
    """The scan's 64-bit hash (FNV-1a) of a key's raw bytes."""
    h = int(_FNV_OFFSET)
    for c in key:
        h = ((h ^ c) * int(_FNV_PRIME)) & 0xFFFFFFFFFFFFFFFF
    return np.uint64(h)


def line_bounds(block: bytes, n_lines: int | None = None
                ) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """Start and end (the newline's offset) of each of the first ``n_lines`` lines of
    ``block`` (None: of every newline-terminated line)."""
    buf = np.frombuffer(block, dtype=np.uint8)
    ends = np.flatnonzero(buf == 10)[:n_lines].astype(np.int64)
    starts = np.empty_like(ends)
    if ends.size:
        starts[0] = 0
        starts[1:] = ends[:-1] + 1
    return starts, ends


@dataclass(frozen=True)
class BlockScan:
    """What :func:`scan_block` found in a block: per line, its ``starts`` and ``ends``
    (the newline's offset), whether it is ``suspect`` (module docstring), and ``spans``
    (lines x wanted keys x 3: offsets of the top-level key's opening quote, its value's
    first byte and the byte after its value; -1 where the line has no such key).

    A span is only meaningful on a line that is not suspect, and names the key by its hash:
    :meth:`value` checks the key's bytes before reading it.
    """

    starts: NDArray[np.int64]
    ends: NDArray[np.int64]
    suspect: NDArray[np.bool_]
    spans: NDArray[np.int64]
    #: Which of the names asked for are keys of some object in the block (by hash: a
    #: collision can add a name, never drop one); None if a line is suspect.
    present: frozenset[str] | None = None

    def value(self, block: bytes, line: int, j: int, key: bytes) -> bytes | None:
        """The raw JSON value of wanted key ``j`` (spelled ``key``) on ``line``; None when
        the line has no such key, or the hash matched another key."""
        return self.values(block, np.array([line]), j, key)[0]

    def values(self, block: bytes, lines: NDArray[np.int64], j: int,
               key: bytes) -> list[bytes | None]:
        """:meth:`value` for each of ``lines``."""
        q, v, end = (self.spans[lines, j, k] for k in range(3))
        quoted = np.frombuffer(b'"' + key + b'"', dtype=np.uint8)
        buf = np.frombuffer(block, dtype=np.uint8)
        ok = end >= 0
        at = np.minimum(np.where(ok, q, 0)[:, None] + np.arange(quoted.size), buf.size - 1)
        ok &= (buf[at] == quoted).all(axis=1)
        return [block[a:b] if good else None
                for a, b, good in zip(v.tolist(), end.tolist(), ok.tolist(), strict=True)]


@functools.lru_cache(maxsize=16)
def _name_slots(names: tuple[str, ...]) -> tuple[NDArray[np.uint64], np.uint64,
                                                 dict[int, tuple[str, ...]]]:
    """A direct-mapped table of the names' hashes for the scan: a power-of-two array where
    hash ``h`` sits at ``(h >> shift) & (size - 1)`` (0 where empty), the shift, and the
    names of each occupied slot. The smallest table (at least 8 slots a name) and shift at
    which the distinct hashes fall in distinct slots: one load and one compare a key."""
    by_hash: dict[int, list[str]] = {}
    for name in names:
        by_hash.setdefault(int(key_hash(name.encode())), []).append(name)
    hashes = np.array(sorted(by_hash), dtype=np.uint64)
    size = 8
    while size < 8 * max(len(hashes), 1):
        size *= 2
    while True:
        for shift in range(0, 64 - size.bit_length() + 2):
            slots = (hashes >> np.uint64(shift)) & np.uint64(size - 1)
            if np.unique(slots).size == slots.size:
                table = np.zeros(size, dtype=np.uint64)
                table[slots.astype(np.int64)] = hashes
                by_slot = {int(k): tuple(by_hash[int(h)])
                           for k, h in zip(slots.tolist(), hashes.tolist(), strict=True)}
                return table, np.uint64(shift), by_slot
        size *= 2


def scan_block(block: bytes, n_lines: int | None, wanted: Sequence[bytes] = (),
               names: Sequence[str] = ()) -> BlockScan:
    """Scan the first ``n_lines`` newline-terminated lines of ``block`` (None: all; module
    docstring), noting where the values of the top-level keys ``wanted`` lie, and which of
    ``names`` some object of the block has as a key (:attr:`BlockScan.present`).

    A large block is scanned in slices on threads (the scan holds no GIL); the answer does
    not depend on how it is sliced, since each line is judged alone.
    """
    buf = np.frombuffer(block, dtype=np.uint8)
    starts, ends = line_bounds(block, n_lines)
    hashes = np.array([key_hash(k) for k in wanted], dtype=np.uint64)
    table, shift, by_slot = _name_slots(tuple(names))
    workers = _workers(len(block))
    cuts = np.linspace(0, starts.size, workers + 1).astype(np.int64).tolist()

    def part(a: int, b: int) -> Any:
        return _scan(buf, starts[a:b], ends[a:b], MAX_DEPTH, _FNV_OFFSET, _FNV_PRIME, hashes,
                     table, shift)

    if workers == 1:
        suspect, spans, found = part(0, starts.size)
    else:
        with ThreadPoolExecutor(max_workers=workers) as pool:
            parts = list(pool.map(part, cuts[:-1], cuts[1:]))
        suspect = np.concatenate([p[0] for p in parts])
        spans = np.concatenate([p[1] for p in parts])
        found = np.logical_or.reduce([p[2] for p in parts])
    # a suspect line was left where its fault was found: its later keys are unknown
    present = None if suspect.any() else frozenset(
        n for slot in np.flatnonzero(found).tolist() for n in by_slot.get(slot, ()))
    return BlockScan(starts=starts, ends=ends, suspect=suspect, spans=spans, present=present)


def suspect_lines(block: bytes, n_lines: int) -> NDArray[np.bool_]:
    """For each of the ``n_lines`` newline-terminated lines of ``block``: whether the strict
    parser must see it (module docstring)."""
    return scan_block(block, n_lines).suspect


#: Bytes below which a block is scanned on the calling thread alone.
_SLICE_BYTES: Final = 1 << 20


def _workers(n_bytes: int) -> int:
    """Threads for a scan of ``n_bytes``: one per usable core (at most 4), one per MiB."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    return max(1, min(cores, 4, n_bytes // _SLICE_BYTES))
