"""A compiled extraction of the fields the label join and the episodes read from decision-log
lines: the fast reader of :mod:`amv_calib.claims._logread`, whose other reader is the line
parser.

:func:`extract_block` walks a block's bytes once: it validates each line as strict JSON,
refuses a key given twice in an object (the contract's rule,
:func:`amv_calib.contract.loads_strict`), copies the string values it reads to their columns
and converts the numbers (exactly, by Clinger's fast path, else by Arrow's conversion), and
reads the verifier signals and, with ``offers``, the offered verifiers as the line parser
does. Blocks are extracted on two threads (:func:`amv_calib.claims._logread.read_chunks`).

It takes only what it can vouch for and returns None for anything else, so that the block
goes to the line parser, which gives the same result: a line that is not a JSON object in
strict JSON syntax, a byte >= 0x80 outside a string value or that does not begin a
well-formed UTF-8 sequence, a blank line, a key holding an escape or a byte >= 0x80, a key
given twice,
nesting deeper than :data:`MAX_DEPTH`, a ``\\u`` escape of a surrogate in any string (a lone
one is not Unicode text), a string value of a field it reads holding an escape, a value of a
field it reads of another JSON type than it reads (strings: the ids, names, times, memory
kinds, an offered verifier's id and the premise ids it resolves, a call's verifier (or a
boolean); numbers: theta, kappa, ``p``, the features, the reliabilities and costs; a
boolean: the contradiction flag; objects: the calibrator, a premise, its claim, a call, an
offered verifier; lists: the premises, the calls, the offered verifiers and what one
resolves; null anywhere but in what an offered verifier resolves), a number Arrow refuses,
or a cost or reliability that does not convert exactly (the reader runs the contract's rule
on the memory kinds taken). ``tests/claims/test_logextract.py`` holds the read equal to the
line parser's on generated logs of every spelling and odd value.

Importing this module imports numba, which compiles the walk on first use (cached on disk).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
from numba import njit
from numpy.typing import NDArray

from amv_calib.contract import (
    DECISION_ALIASES,
    MEMORY_KIND_FIELDS,
    OFFERED_VERIFIER_ALIASES,
    VERIFIER_CALL_ALIASES,
)

#: Deeper nesting goes to the line parser (Python's own limit is near 1,000).
MAX_DEPTH: Final = 64
#: A line with more keys than this (of the keys not read) in objects open at once goes to
#: the line parser. The table is never grown: a compiled function returning a new array on
#: each key costs reference counting on every key.
MAX_OPEN_KEYS: Final = 4096
#: FNV-1a's constants (:func:`key_word_hash`; :mod:`amv_calib.claims._hashing` hashes
#: strings with them too).
FNV_OFFSET: Final = np.uint64(0xCBF29CE484222325)
FNV_PRIME: Final = np.uint64(0x100000001B3)
#: Bytes a string's walk must stop at: a quote, a backslash, a control byte or >= 0x80.
_STRING_STOPS: Final = np.zeros(256, dtype=np.uint8)
_STRING_STOPS[:32] = 1
_STRING_STOPS[128:] = 1
_STRING_STOPS[[34, 92]] = 1

# What a key's value is for (a target), per kind of object holding it (a role).
# Record columns: strings, then numbers.
_T_ACTION, _T_TOOL, _T_REGIME, _T_TIME, _T_CAL_NAME, _T_CAL_VERSION = range(6)
_T_THETA, _T_KAPPA = 6, 7
# Containers of a record.
_T_PREMISES, _T_CALIBRATOR, _T_CALLS = 8, 9, 10
# Entry columns: strings, numbers, the flag; then a premise's claim and a premise itself.
_T_PREMISE_ID, _T_CLAIM_ID = 11, 12
_T_P, _T_RECENCY, _T_TRUST, _T_CONFIDENCE = 13, 14, 15, 16
_T_FLAG = 17
_T_CLAIM = 18
_T_PREMISE = 19
# A verifier call (an element of the calls), its fields, its signals and one signal (a
# value under a premise id).
_T_CALL, _T_CALL_VERIFIER, _T_CALL_RELIABILITY, _T_SIGNALS, _T_SIGNAL = 20, 21, 22, 23, 24
# The offered verifiers (a record's list, read with ``offers``), one of them, its id, the
# premise ids it resolves (the list and one of them), its cost and reliability.
_T_OFFERS, _T_OFFER, _T_OFFER_ID, _T_RESOLVES, _T_RESOLVE = 25, 26, 27, 28, 29
_T_COST, _T_OFFER_RELIABILITY = 30, 31
# A memory kind: of a premise (``memory_kind``, ``memoryKind``), then of its claim (the
# same), each kept apart (the contract's rule reads both spellings and where they stand).
_T_KIND = 32
_N_KINDS: Final = 4
_T_NONE = -1

_ROLE_TOP, _ROLE_CALIBRATOR, _ROLE_PREMISE, _ROLE_CLAIM, _ROLE_CALL, _ROLE_OFFER = range(6)
_ROLE_PREMISES, _ROLE_CALLS, _ROLE_SIGNALS, _ROLE_OFFERS, _ROLE_RESOLVES = 6, 7, 8, 9, 10
_ROLE_OTHER = 11
_N_KEYED_ROLES: Final = 6
#: The string columns: the record's, the entry's two ids, a call's verifier, a signal's
#: premise id.
_N_REC_STRINGS: Final = 6
_COL_VERIFIER: Final = _N_REC_STRINGS + 2
_COL_SIGNAL: Final = _N_REC_STRINGS + 3
#: The string columns of the memory kinds (:data:`_N_KINDS`), after the signals'; then an
#: offered verifier's id and the premise ids it resolves.
_COL_KIND: Final = _COL_SIGNAL + 1
_COL_OFFER_ID: Final = _COL_KIND + _N_KINDS
_COL_RESOLVE: Final = _COL_OFFER_ID + 1
_N_COLS: Final = _COL_RESOLVE + 1
#: The role of an object, and of an array, holding a value of target ``t``, at ``t + 1``
#: (-1: the schema has no such container there). A call, a call's signals or a signal of
#: another type is passed over, as the line parser passes it over.
_OBJECT_ROLE: Final = np.full(_T_KIND + _N_KINDS + 1, -1, dtype=np.int64)
_OBJECT_ROLE[[_T_NONE + 1, _T_PREMISE + 1, _T_CALIBRATOR + 1, _T_CLAIM + 1, _T_CALL + 1,
              _T_SIGNALS + 1, _T_SIGNAL + 1, _T_OFFER + 1]] = (
    _ROLE_OTHER, _ROLE_PREMISE, _ROLE_CALIBRATOR, _ROLE_CLAIM, _ROLE_CALL, _ROLE_SIGNALS,
    _ROLE_OTHER, _ROLE_OFFER)
_ARRAY_ROLE: Final = np.full(_T_KIND + _N_KINDS + 1, -1, dtype=np.int64)
_ARRAY_ROLE[[_T_NONE + 1, _T_PREMISES + 1, _T_CALLS + 1, _T_CALL + 1, _T_SIGNALS + 1,
             _T_SIGNAL + 1, _T_OFFERS + 1, _T_RESOLVES + 1]] = (
    _ROLE_OTHER, _ROLE_PREMISES, _ROLE_CALLS, _ROLE_OTHER, _ROLE_OTHER, _ROLE_OTHER,
    _ROLE_OFFERS, _ROLE_RESOLVES)
#: The target of an array's elements, by the array's role.
_ELEMENT: Final = np.full(_ROLE_OTHER + 1, _T_NONE, dtype=np.int64)
_ELEMENT[[_ROLE_PREMISES, _ROLE_CALLS, _ROLE_OFFERS, _ROLE_RESOLVES]] = (
    _T_PREMISE, _T_CALL, _T_OFFER, _T_RESOLVE)

#: Record string columns, in the order of :attr:`Extracted.record_strings`.
RECORD_STRINGS: Final = ("action_id", "tool_name", "regime", "time", "calibrator_name",
                         "calibrator_version")
#: Record number columns (:attr:`Extracted.record_numbers`).
RECORD_NUMBERS: Final = ("theta", "kappa")
#: Entry number columns (:attr:`Extracted.entry_numbers`).
ENTRY_NUMBERS: Final = ("p", "recency_hours", "source_trust_score", "model_confidence")


def _keys() -> list[tuple[int, str, int, int]]:
    """(role, key, target, rank): the keys read, per kind of object. A column given under
    several keys takes the value of the lowest rank that is not null, as the contract picks
    a field's spellings (:func:`amv_calib.contract.normalize_decision`)."""
    d, c, o = DECISION_ALIASES, VERIFIER_CALL_ALIASES, OFFERED_VERIFIER_ALIASES
    # (role, spellings in rank order, target, rank of the first spelling)
    table: list[tuple[int, tuple[str, ...], int, int]] = [
        *((_ROLE_TOP, d[name], target, 0) for name, target in (
            ("action_id", _T_ACTION), ("tool_name", _T_TOOL), ("regime", _T_REGIME),
            ("time", _T_TIME), ("theta", _T_THETA), ("kappa", _T_KAPPA),
            ("premises", _T_PREMISES), ("calibrator", _T_CALIBRATOR),
            ("verifier_calls", _T_CALLS), ("verifiers", _T_OFFERS))),
        *((_ROLE_OFFER, o[name], target, 0) for name, target in (
            ("id", _T_OFFER_ID), ("resolves_premise_ids", _T_RESOLVES),
            ("execution_cost", _T_COST), ("symmetric_reliability", _T_OFFER_RELIABILITY))),
        *((_ROLE_CALL, c[name], target, 0) for name, target in (
            ("verifier", _T_CALL_VERIFIER), ("reliability", _T_CALL_RELIABILITY),
            ("signals", _T_SIGNALS))),
        (_ROLE_CALIBRATOR, ("name",), _T_CAL_NAME, 0),
        (_ROLE_CALIBRATOR, ("version",), _T_CAL_VERSION, 0),
        (_ROLE_PREMISE, ("id", "premise_id", "premiseId"), _T_PREMISE_ID, 0),
        (_ROLE_PREMISE, ("claim_id", "claimId"), _T_CLAIM_ID, 0),
        (_ROLE_CLAIM, ("claim_id", "claimId", "id"), _T_CLAIM_ID, 2),
        (_ROLE_PREMISE, ("p", "calibratedViolationProbability",
                         "calibrated_violation_probability"), _T_P, 0),
        (_ROLE_PREMISE, ("claim",), _T_CLAIM, 0),
        *((role, (name,), _T_KIND + k, 0) for k, (role, name) in enumerate(
            (r, n) for r in (_ROLE_PREMISE, _ROLE_CLAIM) for n in MEMORY_KIND_FIELDS)),
    ]
    for target, names in ((_T_RECENCY, ("recency_hours", "recencyHours")),
                          (_T_TRUST, ("source_trust_score", "sourceTrustScore")),
                          (_T_CONFIDENCE, ("model_confidence", "modelConfidence")),
                          (_T_FLAG, ("contradiction_flag", "contradictionFlag"))):
        table += [(_ROLE_PREMISE, names, target, 0), (_ROLE_CLAIM, names, target, 2)]
    keys = [(role, n, target, first + r) for role, names, target, first in table
            for r, n in enumerate(names)]
    return keys


def key_word_hash(key: bytes) -> int:
    """The walk's 64-bit hash of a key's raw bytes: FNV-1a over little-endian 8-byte words
    (the last one zero-padded; a key holds no zero byte), then a shift-xor. A word at a
    time: a byte at a time, the multiplications' chain took ~40 % of the walk."""
    h = int(FNV_OFFSET)
    words = [key[k:k + 8] for k in range(0, len(key), 8)] or [b""]
    if len(key) % 8 == 0 and key:
        words.append(b"")
    for word in words:
        h = ((h ^ int.from_bytes(word, "little")) * int(FNV_PRIME)) & 0xFFFFFFFFFFFFFFFF
    return h ^ (h >> 29)


#: A key longer than this is none of the keys read (the longest has 32 bytes).
_KEY_WORDS: Final = 4


def _words(key: bytes) -> list[int]:
    """``key``'s bytes as :data:`_KEY_WORDS` little-endian words, zero-padded."""
    padded = key.ljust(8 * _KEY_WORDS, b"\0")
    return [int.from_bytes(padded[k:k + 8], "little") for k in range(0, len(padded), 8)]


@dataclass(frozen=True)
class _KeyTable:
    """The keys read, as a direct-mapped table of their hashes: slot ``(h * mult) >>
    shift`` holds hash ``h``, its length and bytes (as :func:`_words`) and, per role,
    its target and rank (-1: not read in that role). :data:`_SLOTS` slots: an object's
    keys read are noted in a 64-bit mask per 64 slots."""

    hashes: NDArray[np.uint64]
    length: NDArray[np.int64]
    words: NDArray[np.uint64]
    target: NDArray[np.int64]
    rank: NDArray[np.int64]
    mult: np.uint64
    shift: np.uint64


#: The key table's slots (a power of two, a multiple of 64).
_SLOTS: Final = 256


@functools.cache
def _key_table() -> _KeyTable:
    keys = _keys()
    distinct = sorted({k for _, k, _, _ in keys})
    assert max(len(k) for k in distinct) <= 8 * _KEY_WORDS
    hashes = np.array([key_word_hash(k.encode()) for k in distinct], dtype=np.uint64)
    size = _SLOTS  # the ~50 keys fall in distinct slots after a few hundred multipliers
    shift = np.uint64(64 - (size.bit_length() - 1))
    for k in range(1, 1 << 16):  # odd multipliers, in a fixed order
        mult = np.uint64((k * 0x9E3779B97F4A7C15 | 1) & 0xFFFFFFFFFFFFFFFF)
        if np.unique((hashes * mult) >> shift).size == hashes.size:
            break
    else:  # pragma: no cover - the keys are fixed; tests build the table
        raise AssertionError(f"no collision-free slot table of {size} slots")
    slots = ((hashes * mult) >> shift).astype(np.int64)
    table = _KeyTable(hashes=np.zeros(size, dtype=np.uint64),
                      length=np.full(size, -1, dtype=np.int64),
                      words=np.zeros((size, _KEY_WORDS), dtype=np.uint64),
                      target=np.full((size, _N_KEYED_ROLES), _T_NONE, dtype=np.int64),
                      rank=np.zeros((size, _N_KEYED_ROLES), dtype=np.int64),
                      mult=mult, shift=shift)
    slot_of = {}
    for name, h, slot in zip(distinct, hashes.tolist(), slots.tolist(), strict=True):
        table.hashes[slot], table.length[slot] = h, len(name)
        table.words[slot] = _words(name.encode())
        slot_of[name] = slot
    for role, name, target, rank in keys:
        table.target[slot_of[name], role] = target
        table.rank[slot_of[name], role] = rank
    return table


_NO_RANK: Final = 127
_S_KEY_OR_END, _S_KEY, _S_VALUE_OR_END, _S_VALUE, _S_AFTER = range(5)


@njit(cache=True, nogil=True, inline="always")
def _ws(buf: Any, i: int, e: int) -> int:  # pragma: no cover - compiled
    while i < e:
        c = buf[i]
        if c != 32 and c != 9 and c != 13:
            return i
        i += 1
    return i


@njit(cache=True, nogil=True, inline="always")
def _string_end(buf: Any, i: int, e: int) -> Any:  # pragma: no cover - compiled
    """From the byte after an opening quote: (index of the closing quote or -1 if the
    string is not strict JSON of UTF-8 bytes, whether it holds an escape). A byte >= 0x80
    must begin a well-formed UTF-8 sequence (:func:`_utf8_end`)."""
    escaped = False
    while i < e:
        c = buf[i]
        if _STRING_STOPS[c] == 0:
            i += 1
            continue
        if c == 34:
            return i, escaped
        if c == 92:
            escaped = True
            if i + 1 >= e:
                return -1, escaped
            d = buf[i + 1]
            if d == 117:  # \uXXXX
                if i + 5 >= e:
                    return -1, escaped
                for k in range(i + 2, i + 6):
                    h = buf[k]
                    if not (48 <= h <= 57 or 65 <= h <= 70 or 97 <= h <= 102):
                        return -1, escaped
                # a surrogate (D800-DFFF), paired or not: the strict parser's to judge
                if (buf[i + 2] | 32) == 100 and (56 <= buf[i + 3] <= 57
                                                 or 97 <= (buf[i + 3] | 32) <= 102):
                    return -1, escaped
                i += 6
                continue
            if not (d == 34 or d == 92 or d == 47 or d == 98 or d == 102 or d == 110
                    or d == 114 or d == 116):
                return -1, escaped
            i += 2
            continue
        if c < 128:  # a control byte
            return -1, escaped
        i = _utf8_end(buf, i, e)
        if i < 0:
            return -1, escaped
    return -1, escaped


@njit(cache=True, nogil=True, inline="always")
def _utf8_end(buf: Any, i: int, e: int) -> int:  # pragma: no cover - compiled
    """The index after the UTF-8 sequence starting at ``buf[i]`` (>= 0x80), or -1 if it is
    not well-formed (The Unicode Standard, table 3-7: no overlong form, no surrogate, none
    past U+10FFFF; what Python's strict decoder takes)."""
    c = buf[i]
    lo, hi = 0x80, 0xBF  # the second byte's range
    if 0xC2 <= c <= 0xDF:
        n = 1
    elif 0xE0 <= c <= 0xEF:
        n = 2
        if c == 0xE0:
            lo = 0xA0
        elif c == 0xED:
            hi = 0x9F
    elif 0xF0 <= c <= 0xF4:
        n = 3
        if c == 0xF0:
            lo = 0x90
        elif c == 0xF4:
            hi = 0x8F
    else:
        return -1
    if i + n >= e or not lo <= buf[i + 1] <= hi:
        return -1
    for k in range(i + 2, i + n + 1):
        if not 0x80 <= buf[k] <= 0xBF:
            return -1
    return i + n + 1


@njit(cache=True, nogil=True, inline="always")
def _number_end(buf: Any, i: int, e: int) -> int:  # pragma: no cover - compiled
    """The index after a JSON number starting at ``i``, or -1 if none starts there."""
    if i < e and buf[i] == 45:  # "-"
        i += 1
    if i >= e:
        return -1
    if buf[i] == 48:  # "0": no digit may follow
        i += 1
    elif 49 <= buf[i] <= 57:
        while i < e and 48 <= buf[i] <= 57:
            i += 1
    else:
        return -1
    if i < e and buf[i] == 46:  # "."
        i += 1
        if i >= e or not 48 <= buf[i] <= 57:
            return -1
        while i < e and 48 <= buf[i] <= 57:
            i += 1
    if i < e and (buf[i] == 101 or buf[i] == 69):  # "e"
        i += 1
        if i < e and (buf[i] == 43 or buf[i] == 45):
            i += 1
        if i >= e or not 48 <= buf[i] <= 57:
            return -1
        while i < e and 48 <= buf[i] <= 57:
            i += 1
    return i


@njit(cache=True, nogil=True, inline="always")
def _literal(buf: Any, i: int, e: int, word: Any) -> Any:  # pragma: no cover - compiled
    """The index after ``word`` if it starts at ``i``, else -1."""
    n = word.shape[0]
    if i + n > e:
        return -1
    for k in range(n):
        if buf[i + k] != word[k]:
            return -1
    return i + n


@njit(cache=True, nogil=True, inline="always")
def _put(spans: Any, row: int, col: int, a: int, b: int, r: int) -> None:  # pragma: no cover
    """Note value ``[a, b)`` of rank ``r`` for ``spans[row, col]`` unless a lower rank has
    one."""
    if r < spans[row, col, 2]:
        spans[row, col, 0] = a
        spans[row, col, 1] = b
        spans[row, col, 2] = r


@njit(cache=True, nogil=True, inline="always")
def _copy(buf: Any, a: int, b: int, out: Any, col: int, used: Any, spans: Any, row: int,
          scol: int, r: int) -> None:  # pragma: no cover - compiled
    """Copy string ``buf[a:b]`` of rank ``r`` to the end of string column ``col``
    (``out[col]``, ``used[col]`` bytes of it taken) as ``spans[row, scol]``'s value unless
    a lower rank has one; a value of a higher rank is overwritten, in place: the row is the
    column's last (rows are filled in order). While the walk has just read them, the bytes
    are at hand; cut out afterwards, each row's another cache miss (~1.8 ms a column of a
    16 MiB block)."""
    if r < spans[row, scol, 2]:
        at = spans[row, scol, 0] if spans[row, scol, 0] >= 0 else used[col]
        for k in range(a, b):
            out[col, at + k - a] = buf[k]
        spans[row, scol, 0] = at
        spans[row, scol, 1] = at + b - a
        spans[row, scol, 2] = r
        used[col] = at + b - a


@njit(cache=True, nogil=True, inline="always")
def _take(counts: Any, k: int, room: int) -> int:  # pragma: no cover - compiled
    """The next row of table ``k`` (``counts[k]`` taken of ``room``), or -1 if it is full."""
    at: int = counts[k]
    if at >= room:
        return -1
    counts[k] += 1
    return at


@njit(cache=True, nogil=True, inline="always")
def _open_item(counts: Any, k: int, owner: Any, spelling: Any, of: int,
               spelled: int) -> int:  # pragma: no cover - compiled
    """The next row of table ``k`` (:func:`_take`), with its owner (``of``: the line or the
    offer it belongs to) and the spelling of the key that opened it; -1 if it is full."""
    at = _take(counts, k, owner.shape[0])
    if at >= 0:
        owner[at] = of
        spelling[at] = spelled
    return at


@njit(cache=True, nogil=True)
def _extract(  # noqa: C901 - one state machine, compiled whole
        buf: Any, starts: Any, ends: Any, hashes: Any, length: Any, words: Any, target: Any,
        rank: Any, mult: Any, shift: Any, max_depth: int, max_keys: int, tens: Any,
        rec_spans: Any, rec_num: Any, n_prem: Any, ent_spans: Any, ent_num: Any, flag: Any,
        parents: Any, inexact: Any, out: Any, used: Any, calls_min: Any, call_line: Any,
        call_spelling: Any, call_rel: Any, ver_spans: Any, sig_call: Any, sig_conf: Any,
        sig_spans: Any, counts: Any, kind_spans: Any, offers: bool, offers_min: Any,
        offer_line: Any, offer_spelling: Any, offer_num: Any, offer_spans: Any,
        resolves_min: Any, resolve_offer: Any, resolve_spelling: Any,
        resolve_spans: Any) -> int:  # pragma: no cover - compiled
    """Walk every line; -1 if one is outside what this takes (module docstring), -2 if
    there are more premise entries than ``parents`` has room for, else their number.

    Per line: ``rec_spans`` (lines x 8 x (start, end, rank)) receives the record columns'
    values, ``n_prem`` counts its premises, ``calls_min`` the lowest rank of a spelling of
    the verifier calls given as a list (the one the line parser reads). Per verifier call
    (an object in such a list; ``counts[0]`` of them): ``call_line``, ``call_spelling``
    (the list's rank), ``call_rel`` (reliability and rank; NaN where null) and
    ``ver_spans`` (its verifier). Per signal (a true or false under a premise id in a
    call's ``signals``; ``counts[1]``): ``sig_call``, ``sig_conf`` and ``sig_spans`` (the
    premise id). With ``offers``, per line ``offers_min``, the lowest rank of a spelling of
    the offered verifiers given as a list; per offered verifier (an object or null in such a
    list; ``counts[2]``): ``offer_line``, ``offer_spelling`` (the list's rank),
    ``offer_num`` (offers x 2 x (value, rank): the cost and the reliability; NaN where
    null), ``offer_spans`` (its id) and ``resolves_min`` (the lowest rank of a spelling of
    the premise ids it resolves given as a list); per premise id in such a list
    (``counts[3]``): ``resolve_offer``, ``resolve_spelling`` and ``resolve_spans``. Per
    premise entry:
    ``ent_spans`` (entries x 6 x 3) its ids and numbers, ``flag`` (entries x 2: value,
    rank) the contradiction flag, ``kind_spans`` (entries x 4 x 3) its memory kinds (a
    string each; any other value than null refuses the line), ``parents`` its line. A
    span's start is -1 where the value is null. String values are copied to ``out`` as
    they are read (:func:`_copy`; their spans are into it); numbers are converted by
    :func:`_decimal` into ``rec_num`` and ``ent_num`` (``inexact`` per number column: some
    did not convert exactly).

    A key given twice in an object is refused, as the line parser refuses it: a key read is
    known by its bytes (a bit of the object's masks marks it), any other by its hash (a
    collision refuses a clean line)."""
    true_ = np.array([116, 114, 117, 101], dtype=np.uint8)
    false_ = np.array([102, 97, 108, 115, 101], dtype=np.uint8)
    null_ = np.array([110, 117, 108, 108], dtype=np.uint8)
    is_obj = np.zeros(max_depth + 2, dtype=np.bool_)
    role = np.zeros(max_depth + 2, dtype=np.int64)
    frame = np.zeros(max_depth + 2, dtype=np.int64)  # first key index of each object
    keys = np.empty(max_keys, dtype=np.uint64)  # the hashes of keys not read
    seen = np.zeros((max_depth + 2, _SLOTS // 64), dtype=np.uint64)  # the keys read, by slot
    kw = np.zeros(_KEY_WORDS, dtype=np.uint64)  # a key's first words

    n_ent = 0
    cap = parents.shape[0]
    for line in range(starts.shape[0]):
        e = ends[line]
        i = _ws(buf, starts[line], e)
        if i >= e or buf[i] != 123:
            return -1
        depth = 0
        is_obj[0] = True
        role[0] = _ROLE_TOP
        i += 1
        state = _S_KEY_OR_END
        tgt = _T_NONE
        rnk = 0
        ent = -1
        nkeys = 0
        frame[0] = 0
        seen[0, :] = 0
        open_call = -1  # the spelling of the verifier calls whose value is being read
        call = -1
        open_offers = open_resolves = -1  # the same, of the offered verifiers, of a resolves
        offer = -1
        key_a = key_b = 0  # a signal's premise id
        while True:
            i = _ws(buf, i, e)
            if i >= e:
                return -1
            c = buf[i]
            close = False
            if state == _S_KEY_OR_END or state == _S_KEY:
                if c == 125 and state == _S_KEY_OR_END:
                    close = True
                elif c == 34:
                    # the key's hash, eight bytes at a time (key_word_hash), and its
                    # first words
                    h = FNV_OFFSET
                    w = np.uint64(0)
                    sh = np.uint64(0)
                    nw = 0
                    for k in range(_KEY_WORDS):
                        kw[k] = 0
                    j = i + 1
                    while j < e:
                        d = buf[j]
                        if _STRING_STOPS[d] != 0:
                            break
                        w |= np.uint64(d) << sh
                        sh += np.uint64(8)
                        if sh == np.uint64(64):
                            h = (h ^ w) * FNV_PRIME
                            if nw < _KEY_WORDS:
                                kw[nw] = w
                            nw += 1
                            w = np.uint64(0)
                            sh = np.uint64(0)
                        j += 1
                    if j >= e or buf[j] != 34:  # an escape, a control byte, >= 0x80
                        return -1
                    h = (h ^ w) * FNV_PRIME
                    h ^= h >> np.uint64(29)
                    if nw < _KEY_WORDS:
                        kw[nw] = w
                    slot = int((h * mult) >> shift)
                    tgt = _T_NONE
                    rnk = 0
                    if (hashes[slot] == h and length[slot] == j - i - 1
                            and words[slot, 0] == kw[0] and words[slot, 1] == kw[1]
                            and words[slot, 2] == kw[2] and words[slot, 3] == kw[3]):
                        bit = np.uint64(1) << np.uint64(slot & 63)
                        word = slot >> 6
                        if seen[depth, word] & bit:
                            return -1
                        seen[depth, word] |= bit
                        if role[depth] < _N_KEYED_ROLES:
                            tgt = target[slot, role[depth]]
                            rnk = rank[slot, role[depth]]
                    else:
                        for k in range(frame[depth], nkeys):
                            if keys[k] == h:
                                return -1
                        if nkeys == max_keys:
                            return -1
                        keys[nkeys] = h
                        nkeys += 1
                    if tgt == _T_CALLS:
                        open_call = rnk
                    elif tgt == _T_OFFERS:
                        if offers:
                            open_offers = rnk
                        else:  # not read: any value
                            tgt = _T_NONE
                    elif role[depth] == _ROLE_SIGNALS:
                        tgt = _T_SIGNAL
                        key_a = i + 1
                        key_b = j
                    i = _ws(buf, j + 1, e)
                    if i >= e or buf[i] != 58:
                        return -1
                    i += 1
                    state = _S_VALUE
                    continue
                else:
                    return -1
            elif state == _S_AFTER:
                if depth == 0:
                    open_call = -1
                if c == 44:
                    if is_obj[depth]:
                        state = _S_KEY
                    else:
                        state = _S_VALUE
                        tgt = _ELEMENT[role[depth]]
                    i += 1
                    continue
                if (c == 125 and is_obj[depth]) or (c == 93 and not is_obj[depth]):
                    close = True
                else:
                    return -1
            else:  # a value
                if c == 93 and state == _S_VALUE_OR_END:
                    close = True
                else:
                    # a field read whose value must be of the schema's type
                    typed = not (tgt == _T_NONE or tgt == _T_CALL or tgt == _T_SIGNALS
                                 or tgt == _T_SIGNAL)
                    if c == 123 or c == 91:
                        if depth + 2 > max_depth:  # the depth counts from 1, the line's object too
                            return -1
                        new_role = (_OBJECT_ROLE if c == 123 else _ARRAY_ROLE)[tgt + 1]
                        if new_role < 0:  # the schema has no such container here
                            return -1
                        if new_role == _ROLE_PREMISE:
                            if n_ent >= cap:
                                return -2
                            ent = n_ent
                            n_ent += 1
                            parents[ent] = line
                            n_prem[line] += 1
                        elif new_role == _ROLE_CALLS:
                            calls_min[line] = min(calls_min[line], rnk)
                        elif new_role == _ROLE_CALL:
                            call = _open_item(counts, 0, call_line, call_spelling, line,
                                              open_call)
                            if call < 0:
                                return -2
                        elif new_role == _ROLE_OFFERS:
                            offers_min[line] = min(offers_min[line], rnk)
                        elif new_role == _ROLE_OFFER:
                            offer = _open_item(counts, 2, offer_line, offer_spelling, line,
                                               open_offers)
                            if offer < 0:
                                return -2
                        elif new_role == _ROLE_RESOLVES:
                            resolves_min[offer] = min(resolves_min[offer], rnk)
                            open_resolves = rnk
                        depth += 1
                        is_obj[depth] = c == 123
                        role[depth] = new_role
                        frame[depth] = nkeys
                        seen[depth, :] = 0
                        i += 1
                        if c == 123:
                            state = _S_KEY_OR_END
                        else:
                            state = _S_VALUE_OR_END
                            tgt = _ELEMENT[new_role]
                        continue
                    if c == 34:
                        j, escaped = _string_end(buf, i + 1, e)
                        if j < 0:
                            return -1
                        if typed:
                            if escaped or not (tgt <= _T_CAL_VERSION or tgt == _T_PREMISE_ID
                                               or tgt == _T_CLAIM_ID
                                               or tgt == _T_CALL_VERIFIER
                                               or tgt == _T_OFFER_ID or tgt == _T_RESOLVE
                                               or tgt >= _T_KIND):
                                return -1
                            if tgt >= _T_KIND:
                                _copy(buf, i + 1, j, out, _COL_KIND + tgt - _T_KIND, used,
                                      kind_spans, ent, tgt - _T_KIND, 0)
                            elif tgt == _T_CALL_VERIFIER:
                                _copy(buf, i + 1, j, out, _COL_VERIFIER, used, ver_spans, call,
                                      0, rnk)
                            elif tgt <= _T_CAL_VERSION:
                                _copy(buf, i + 1, j, out, tgt, used, rec_spans, line, tgt, rnk)
                            elif tgt == _T_OFFER_ID:
                                _copy(buf, i + 1, j, out, _COL_OFFER_ID, used, offer_spans,
                                      offer, 0, rnk)
                            elif tgt == _T_RESOLVE:
                                k = _open_item(counts, 3, resolve_offer, resolve_spelling,
                                               offer, open_resolves)
                                if k < 0:
                                    return -2
                                _copy(buf, i + 1, j, out, _COL_RESOLVE, used, resolve_spans,
                                      k, 0, 0)
                            else:
                                _copy(buf, i + 1, j, out, tgt - _T_PREMISE_ID + _N_REC_STRINGS,
                                      used, ent_spans, ent, tgt - _T_PREMISE_ID, rnk)
                        i = j + 1
                    elif c == 45 or 48 <= c <= 57:
                        j = _number_end(buf, i, e)
                        if j < 0:
                            return -1
                        if typed:
                            if tgt == _T_CALL_RELIABILITY:
                                if rnk < call_rel[call, 1]:
                                    v, exact = _decimal(buf, i, j, tens)
                                    if not exact:  # seldom: the line parser's
                                        return -1
                                    call_rel[call, 0] = v
                                    call_rel[call, 1] = rnk
                            elif tgt == _T_THETA or tgt == _T_KAPPA:
                                if rnk < rec_spans[line, tgt, 2]:
                                    _put(rec_spans, line, tgt, i, j, rnk)
                                    v, exact = _decimal(buf, i, j, tens)
                                    rec_num[line, tgt - _T_THETA] = v
                                    inexact[tgt - _T_THETA] |= not exact
                            elif _T_P <= tgt <= _T_CONFIDENCE:
                                col = tgt - _T_PREMISE_ID
                                if rnk < ent_spans[ent, col, 2]:
                                    _put(ent_spans, ent, col, i, j, rnk)
                                    v, exact = _decimal(buf, i, j, tens)
                                    ent_num[ent, col - 2] = v
                                    inexact[col] |= not exact
                            elif tgt == _T_COST or tgt == _T_OFFER_RELIABILITY:
                                m = tgt - _T_COST
                                if rnk < offer_num[offer, m, 1]:
                                    v, exact = _decimal(buf, i, j, tens)
                                    if not exact:  # seldom: the line parser's
                                        return -1
                                    offer_num[offer, m, 0] = v
                                    offer_num[offer, m, 1] = rnk
                            else:
                                return -1
                        i = j
                    elif c == 116 or c == 102:
                        j = _literal(buf, i, e, true_ if c == 116 else false_)
                        if j < 0:
                            return -1
                        if tgt == _T_SIGNAL:
                            k = _take(counts, 1, sig_call.shape[0])
                            if k < 0:
                                return -2
                            sig_call[k] = call
                            sig_conf[k] = c == 116
                            _copy(buf, key_a, key_b, out, _COL_SIGNAL, used, sig_spans, k, 0, 0)
                        elif tgt == _T_CALL_VERIFIER:  # the line parser's "true", "false"
                            _copy(buf, i, j, out, _COL_VERIFIER, used, ver_spans, call, 0, rnk)
                        elif typed:
                            if tgt != _T_FLAG:
                                return -1
                            if rnk < flag[ent, 1]:
                                flag[ent, 0] = 1 if c == 116 else 0
                                flag[ent, 1] = rnk
                        i = j
                    elif c == 110:
                        j = _literal(buf, i, e, null_)
                        if j < 0:
                            return -1
                        if tgt == _T_PREMISE:  # a null premise: an entry of nulls
                            if n_ent >= cap:
                                return -2
                            parents[n_ent] = line
                            n_ent += 1
                            n_prem[line] += 1
                        elif tgt == _T_OFFER:  # a null offered verifier: a row of nulls
                            offer = _open_item(counts, 2, offer_line, offer_spelling, line,
                                               open_offers)
                            if offer < 0:
                                return -2
                        elif tgt == _T_RESOLVE:  # the line parser reads no list holding one
                            return -1
                        i = j
                    else:
                        return -1
                    state = _S_AFTER
                    continue
            if close:
                i += 1
                if is_obj[depth]:
                    nkeys = frame[depth]
                depth -= 1
                if depth < 0:
                    if _ws(buf, i, e) != e:
                        return -1
                    break
                state = _S_AFTER
    return n_ent


@njit(cache=True, nogil=True)
def _gather(buf: Any, spans: Any, col: int) -> Any:  # pragma: no cover - compiled
    """The bytes of ``spans[:, col]`` one after another, their int32 offsets and validity."""
    n = spans.shape[0]
    offsets = np.zeros(n + 1, dtype=np.int32)
    valid = np.zeros(n, dtype=np.bool_)
    total = 0
    for r in range(n):
        a = spans[r, col, 0]
        if a >= 0:
            valid[r] = True
            total += spans[r, col, 1] - a
        offsets[r + 1] = total
    data = np.empty(total, dtype=np.uint8)
    for r in range(n):
        a = spans[r, col, 0]
        if a >= 0:
            data[offsets[r]:offsets[r + 1]] = buf[a:spans[r, col, 1]]
    return data, offsets, valid


#: Powers of ten a double holds exactly (10**22 = 2**22 * 5**22, 5**22 < 2**53).
_EXACT_TENS: Final = np.array([10.0 ** k for k in range(23)])


@njit(cache=True, nogil=True, inline="always")
def _decimal(buf: Any, i: int, e: int, tens: Any) -> Any:  # pragma: no cover - compiled
    """The JSON number ``buf[i:e]`` as a double, and whether it converted exactly: a number
    whose digits make an integer m <= 2**53 and whose decimal exponent k has |k| <= 22 is
    m * 10**k or m / 10**-k, one correctly rounded operation on exact operands, so the
    correctly rounded value of the decimal (Clinger's fast path), as Python's float() and
    Arrow's conversion give it. For any other (False), the caller asks Arrow."""
    neg = buf[i] == 45
    if neg:
        i += 1
    m = np.uint64(0)
    digits = 0
    k = 0
    frac = False
    while i < e:
        c = buf[i]
        if 48 <= c <= 57:
            if m != 0 or c != 48:
                digits += 1
                if digits > 19:
                    return np.nan, False
            m = m * np.uint64(10) + np.uint64(c - 48)
            if frac:
                k -= 1
        elif c == 46:
            frac = True
        else:  # the exponent
            i += 1
            sign = 1
            if buf[i] == 45 or buf[i] == 43:
                if buf[i] == 45:
                    sign = -1
                i += 1
            x = 0
            while i < e:
                x = x * 10 + (buf[i] - 48)
                if x > 400:
                    return np.nan, False
                i += 1
            k += sign * x
            break
        i += 1
    if m > np.uint64(1 << 53) or k < -22 or k > 22:
        return np.nan, False
    v = float(m)
    v = v * tens[k] if k >= 0 else v / tens[-k]
    return (-v if neg else v), True


def _copied(out: NDArray[np.uint8], used: int, spans: NDArray[np.int32], col: int) -> Any:
    """String column ``col`` of ``spans`` (spans into ``out``, filled in row order by
    :func:`_copy`, ``used`` bytes) as an Arrow string array (null where no value)."""
    import pyarrow as pa

    n = spans.shape[0]
    valid = spans[:, col, 0] >= 0
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.maximum.accumulate(np.where(valid, spans[:, col, 1], 0), out=offsets[1:])
    nulls = None if valid.all() else pa.py_buffer(np.packbits(valid, bitorder="little"))
    return pa.StringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(out[:used].copy()),
                                       nulls)


def _strings(buf: NDArray[np.uint8], spans: NDArray[np.int32], col: int) -> Any:
    """Column ``col`` of ``spans`` as an Arrow string array (null where no value)."""
    import pyarrow as pa

    data, offsets, valid = _gather(buf, spans, col)
    n = spans.shape[0]
    nulls = None if valid.all() else pa.py_buffer(np.packbits(valid, bitorder="little"))
    return pa.StringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(data), nulls)


def _numbers(buf: NDArray[np.uint8], spans: NDArray[np.int32], col: int) -> Any:
    """Column ``col`` of ``spans`` (JSON numbers) by Arrow's conversion (the one pyarrow's
    reader uses) as float64, NaN where no value; None if it refuses one."""
    import pyarrow as pa
    import pyarrow.compute as pc

    try:
        floats = pc.cast(_strings(buf, spans, col), pa.float64())
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None
    return pc.fill_null(floats, np.nan).to_numpy(zero_copy_only=False)


@dataclass(frozen=True)
class Extracted:
    """The columns :func:`extract_block` took from a block: per line the record's strings
    (Arrow string arrays, :data:`RECORD_STRINGS`), numbers (float64, NaN where null,
    :data:`RECORD_NUMBERS`) and number of premises; per premise entry its line
    (``parents``), ``premise_id`` and ``claim_id`` (Arrow strings), numbers
    (:data:`ENTRY_NUMBERS`) and contradiction flag (1.0, 0.0, NaN). Each column is the
    first spelling that is not null, as the contract picks them; strings as given (empty
    ones not yet nulls). ``signals``: the verifier signals as the line parser reads them
    (``_signals_of``): ``rec`` (the line), ``premise_id`` and ``verifier`` (Arrow strings),
    ``confirmed`` and ``reliability`` (numpy)."""

    record_strings: dict[str, Any]
    record_numbers: dict[str, NDArray[np.float64]]
    n_premises: NDArray[np.int64]
    parents: NDArray[np.int64]
    premise_id: Any
    claim_id: Any
    entry_numbers: dict[str, NDArray[np.float64]]
    contradiction_flag: NDArray[np.float64]
    signals: dict[str, Any]
    #: per entry its ``memory_kind``, ``memoryKind`` and its claim's (Arrow strings, as
    #: given; null where null or absent)
    kinds: list[Any]
    #: per line, whether it lists offered verifiers (all False when not read)
    has_verifiers: NDArray[np.bool_]
    #: read with ``offers``: one row per offered verifier, as the line parser reads them:
    #: ``rec`` (the line), ``id`` (Arrow strings, as given), ``resolves`` (an Arrow list of
    #: strings, null where no list of strings is given), ``cost`` and ``reliability``
    #: (numpy, NaN where null); else None
    offers: dict[str, Any] | None = None


def _spans(rows: int, cols: int) -> NDArray[np.int32]:
    """Empty spans (start -1, rank none) for ``rows`` x ``cols`` values."""
    spans = np.full((rows, cols, 3), -1, dtype=np.int32)
    spans[:, :, 2] = _NO_RANK
    return spans


def _string_room(columns: int, size: int) -> NDArray[np.uint8] | None:
    """Room for ``columns`` string columns of at most ``size`` bytes each (a block's); the
    pages never written are never backed, but a system that commits memory strictly may
    refuse the address space: then None, and the block goes to the line parser."""
    try:
        return np.empty((columns, size), dtype=np.uint8)
    except MemoryError:
        return None


class _Room:
    """The walk's tables (:func:`_extract`) for ``n`` lines: ``cap`` premise entries,
    ``calls`` verifier calls and as many signals, ``offers`` offered verifiers and
    ``resolves`` premise ids they resolve."""

    def __init__(self, n: int, cap: int, calls: int, offers: int, resolves: int) -> None:
        self.rec_spans = _spans(n, 8)
        self.rec_num = np.full((n, len(RECORD_NUMBERS)), np.nan)
        self.n_prem = np.zeros(n, dtype=np.int64)
        self.ent_spans = _spans(cap, 6)
        self.ent_num = np.full((cap, len(ENTRY_NUMBERS)), np.nan)
        self.flag = np.full((cap, 2), -1, dtype=np.int8)
        self.flag[:, 1] = _NO_RANK
        self.parents = np.empty(cap, dtype=np.int64)
        self.inexact = np.zeros(len(RECORD_NUMBERS) + len(ENTRY_NUMBERS), dtype=np.bool_)
        self.used = np.zeros(_N_COLS, dtype=np.int64)
        self.calls_min = np.full(n, _NO_RANK, dtype=np.int64)
        self.call_line = np.empty(calls, dtype=np.int64)
        self.call_spelling = np.empty(calls, dtype=np.int64)
        self.call_rel = np.full((calls, 2), np.nan)
        self.call_rel[:, 1] = _NO_RANK
        self.ver_spans = _spans(calls, 1)
        self.sig_call = np.empty(calls, dtype=np.int64)
        self.sig_conf = np.empty(calls, dtype=np.bool_)
        self.sig_spans = _spans(calls, 1)
        self.counts = np.zeros(4, dtype=np.int64)
        self.kind_spans = _spans(cap, _N_KINDS)
        self.offers_min = np.full(n if offers else 0, _NO_RANK, dtype=np.int64)
        self.offer_line = np.empty(offers, dtype=np.int64)
        self.offer_spelling = np.empty(offers, dtype=np.int64)
        self.offer_num = np.full((offers, 2, 2), np.nan)
        self.offer_num[:, :, 1] = _NO_RANK
        self.offer_spans = _spans(offers, 1)
        self.resolves_min = np.full(offers, _NO_RANK, dtype=np.int64)
        self.resolve_offer = np.empty(resolves, dtype=np.int64)
        self.resolve_spelling = np.empty(resolves, dtype=np.int64)
        self.resolve_spans = _spans(resolves, 1)

    def walk(self, buf: NDArray[np.uint8], starts: NDArray[np.int64],
             ends: NDArray[np.int64], t: _KeyTable, offers: bool,
             out: NDArray[np.uint8]) -> int:
        """:func:`_extract` on these tables."""
        r = self
        return int(_extract(
            buf, starts, ends, t.hashes, t.length, t.words, t.target, t.rank, t.mult,
            t.shift, MAX_DEPTH, MAX_OPEN_KEYS, _EXACT_TENS, r.rec_spans, r.rec_num, r.n_prem,
            r.ent_spans, r.ent_num, r.flag, r.parents, r.inexact, out, r.used, r.calls_min,
            r.call_line, r.call_spelling, r.call_rel, r.ver_spans, r.sig_call, r.sig_conf,
            r.sig_spans, r.counts, r.kind_spans, offers, r.offers_min, r.offer_line,
            r.offer_spelling, r.offer_num, r.offer_spans, r.resolves_min, r.resolve_offer,
            r.resolve_spelling, r.resolve_spans))


def line_bounds(block: bytes) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """Start and end (the newline's offset) of each newline-terminated line of ``block``."""
    buf = np.frombuffer(block, dtype=np.uint8)
    ends = np.flatnonzero(buf == 10).astype(np.int64)
    starts = np.empty_like(ends)
    if ends.size:
        starts[0] = 0
        starts[1:] = ends[:-1] + 1
    return starts, ends


@functools.cache
def _no_keys() -> _KeyTable:
    """A key table that reads no key: the walk then only judges the lines."""
    t = _key_table()
    return _KeyTable(hashes=np.zeros_like(t.hashes), length=np.full_like(t.length, -1),
                     words=np.zeros_like(t.words), target=np.full_like(t.target, _T_NONE),
                     rank=np.zeros_like(t.rank), mult=t.mult, shift=t.shift)


def strict_objects(block: bytes) -> bool:
    """Whether the walk vouches for every newline-terminated line of ``block`` as the line
    parser's JSON object, and the block is ASCII (module docstring: strict JSON, each key
    once, no surrogate escape, nesting within :data:`MAX_DEPTH`): what a reader of another
    JSON-lines file checks before it lets pyarrow read it (:mod:`amv_calib.claims._outcomes`;
    UTF-8 it leaves to the line parser, as before the walk judged it)."""
    starts, ends = line_bounds(block)
    if len(block) >= 1 << 31 or not starts.size or not block.isascii():
        return False
    room = _Room(0, 0, 0, 0, 0)
    out = np.empty((_N_COLS, 0), dtype=np.uint8)
    return room.walk(np.frombuffer(block, dtype=np.uint8), starts, ends, _no_keys(), False,
                     out) >= 0


def extract_block(block: bytes, starts: NDArray[np.int64], ends: NDArray[np.int64],
                  offers: bool = False) -> Extracted | None:
    """The columns of the lines ``block[starts[i]:ends[i]]``, or None if a line is outside
    what this takes (module docstring); with ``offers``, the offered verifiers too."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if len(block) >= 1 << 31:  # int32 offsets
        return None
    buf = np.frombuffer(block, dtype=np.uint8)
    n = starts.size
    t = _key_table()
    out = _string_room(_N_COLS, len(block))
    if out is None:
        return None
    # room for four premises, a verifier call and signal, two offered verifiers and four
    # premise ids they resolve a line, then (seldom) for as many as the block could hold:
    # each is at least two bytes and a separator
    most = len(block) // 3 + 1
    for cap, calls, n_off, n_res in ((4 * n + 64, n + 64, 2 * n + 64, 4 * n + 64),
                                     (most, most, most, most)):
        r = _Room(n, cap, calls, n_off if offers else 0, n_res if offers else 0)
        n_ent = r.walk(buf, starts, ends, t, offers, out)
        if n_ent != -2:
            break
    if n_ent < 0:
        return None
    ent_spans = r.ent_spans[:n_ent]
    kind_spans = r.kind_spans[:n_ent]
    rec_numbers = {}
    for k, name in enumerate(RECORD_NUMBERS):
        arr = _numbers(buf, r.rec_spans, len(RECORD_STRINGS) + k) if r.inexact[k] \
            else r.rec_num[:, k].copy()
        if arr is None:
            return None
        rec_numbers[name] = arr
    ent_numbers = {}
    for k, name in enumerate(ENTRY_NUMBERS):
        arr = _numbers(buf, ent_spans, 2 + k) if r.inexact[len(RECORD_NUMBERS) + k] \
            else r.ent_num[:n_ent, k].copy()
        if arr is None:
            return None
        ent_numbers[name] = arr
    # the signals of the calls the line parser reads: the first spelling given as a list
    n_calls, n_sigs = (int(x) for x in r.counts[:2])
    of = r.sig_call[:n_sigs]
    keep = np.flatnonzero(r.call_spelling[of] == r.calls_min[r.call_line[of]])
    of = of[keep]
    verifiers = pc.fill_null(_copied(out[_COL_VERIFIER], int(r.used[_COL_VERIFIER]),
                                     r.ver_spans[:n_calls], 0), "")
    signals = {
        "rec": r.call_line[of],
        "premise_id": _copied(out[_COL_SIGNAL], int(r.used[_COL_SIGNAL]),
                              r.sig_spans[:n_sigs], 0).take(pa.array(keep)),
        "verifier": verifiers.take(pa.array(of)),
        "confirmed": r.sig_conf[:n_sigs][keep],
        "reliability": r.call_rel[of, 0],
    }
    f = r.flag[:n_ent, 0]
    return Extracted(
        record_strings={name: _copied(out[k], int(r.used[k]), r.rec_spans, k)
                        for k, name in enumerate(RECORD_STRINGS)},
        record_numbers=rec_numbers, n_premises=r.n_prem, parents=r.parents[:n_ent].copy(),
        premise_id=_copied(out[_N_REC_STRINGS], int(r.used[_N_REC_STRINGS]), ent_spans, 0),
        claim_id=_copied(out[_N_REC_STRINGS + 1], int(r.used[_N_REC_STRINGS + 1]),
                         ent_spans, 1),
        entry_numbers=ent_numbers,
        contradiction_flag=np.where(f < 0, np.nan, f.astype(np.float64)), signals=signals,
        kinds=[_copied(out[_COL_KIND + k], int(r.used[_COL_KIND + k]), kind_spans, k)
               for k in range(_N_KINDS)],
        has_verifiers=r.offers_min < _NO_RANK if offers else np.zeros(n, dtype=bool),
        offers=_offers(r, out) if offers else None)


def _offers(r: _Room, out: NDArray[np.uint8]) -> dict[str, Any]:
    """The offered verifiers the line parser reads (:attr:`Extracted.offers`): those of the
    first spelling given as a list, each with the premise ids of its first spelling given
    as a list."""
    import pyarrow as pa

    n_off, n_res = (int(x) for x in r.counts[2:])
    line = r.offer_line[:n_off]
    kept = np.flatnonzero(r.offer_spelling[:n_off] == r.offers_min[line])
    of = r.resolve_offer[:n_res]
    taken = np.zeros(n_off, dtype=bool)
    taken[kept] = True
    first = r.resolves_min[:n_off]
    res = np.flatnonzero((r.resolve_spelling[:n_res] == first[of]) & taken[of])
    offsets = np.zeros(kept.size + 1, dtype=np.int32)
    np.cumsum(np.bincount(of[res], minlength=n_off)[kept], out=offsets[1:])
    premise_ids = _copied(out[_COL_RESOLVE], int(r.used[_COL_RESOLVE]),
                          r.resolve_spans[:n_res], 0).take(pa.array(res))
    return {
        "rec": line[kept],
        "id": _copied(out[_COL_OFFER_ID], int(r.used[_COL_OFFER_ID]),
                      r.offer_spans[:n_off], 0).take(pa.array(kept)),
        "resolves": pa.ListArray.from_arrays(pa.array(offsets), premise_ids,
                                             mask=pa.array(first[kept] == _NO_RANK)),
        "cost": r.offer_num[kept, 0, 0],
        "reliability": r.offer_num[kept, 1, 0],
    }
