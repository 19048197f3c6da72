"""The compiled key scan against the strict parser: every line it passes, the strict parser
accepts as an object; every line giving a key twice, it sends to the strict parser."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from amv_calib.claims import _keyscan
from amv_calib.claims._keyscan import MAX_DEPTH, MAX_OPEN_KEYS, scan_block, suspect_lines
from amv_calib.contract import loads_strict


def _strict_ok(line: bytes) -> bool:
    try:
        return isinstance(loads_strict(line), dict)
    except (ValueError, RecursionError):
        return False


def _scan(*lines: bytes) -> list[bool]:
    return suspect_lines(b"".join(line + b"\n" for line in lines), len(lines)).tolist()


@pytest.mark.parametrize(("line", "suspect"), [
    (b'{"a": 1, "b": {"a": 2}, "c": [{"a": 1}, {"a": 2}]}', False),
    (b'{"a": 1, "a": 2}', True),
    (b'{"x": {"k": 1, "k": 2}}', True),
    (b'{"x": [{"k": 1, "j": {"k": 1}, "k": 3}]}', True),
    (b'{"a": 1, "\\u0061": 2}', True),  # the same key, escaped
    (b'{"s": "a \\" quoted \\\\ value", "t": "\\u00e9"}', False),  # escapes in values
    ('{"s": "caf\u00e9"}'.encode(), True),  # non-ASCII: the strict parser judges UTF-8
    (b'{"s": "\xff"}', True),  # not UTF-8
    (b'{"s": "tab\there"}', True),  # a raw control byte in a string
    (b'[1, 2]', True),  # not an object
    (b'  {"a": {}}  ', False),
    (b'{"a": ' + b'[' * (MAX_DEPTH + 1) + b']' * (MAX_DEPTH + 1) + b'}', True),
    (b'{"a": ' + b'[' * (MAX_DEPTH - 2) + b']' * (MAX_DEPTH - 2) + b'}', False),
    (b'{"": 1, "b": ""}', False),
    (("{" + ", ".join(f'"k{i}": 1' for i in range(MAX_OPEN_KEYS + 1)) + "}").encode(), True),
    (("{" + ", ".join(f'"k{i}": 1' for i in range(MAX_OPEN_KEYS)) + "}").encode(), False),
    # more keys than the table holds, but never open at once: each object's keys are freed
    (('{"a": [' + ", ".join(f'{{"k{i}": 1, "j": 2}}' for i in range(MAX_OPEN_KEYS))
      + "]}").encode(), False),
], ids=["nested-same-names", "top-level-twice", "nested-twice", "in-a-list-twice",
        "escaped-key", "escapes-in-values", "non-ascii", "bad-utf8", "control-byte",
        "array", "spaces", "too-deep", "deep-enough", "empty-key", "too-many-open-keys",
        "open-keys-at-the-limit", "many-keys-in-closed-objects"])
def test_hand_cases(line: bytes, suspect: bool) -> None:
    assert _scan(line) == [suspect]
    if not suspect:
        assert _strict_ok(line)


def test_lines_are_judged_one_by_one() -> None:
    lines = [b'{"a": 1}', b'{"a": 1, "a": 1}', b'{"b": {"a": 1}, "a": 2}', b'{"k": 1}']
    assert _scan(*lines) == [False, True, False, False]


_KEYS = st.sampled_from(["a", "b", "id", "p", "claim_id", "", "x y", "\\u0061", "é"])
_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-5, 5),
                     st.floats(allow_nan=False, allow_infinity=False),
                     st.text(max_size=4))


def _render(v: Any) -> str:
    """JSON text of ``v``, where an object is a list of pairs (so keys can repeat) and a
    key is written as given (so it can be escaped)."""
    if isinstance(v, tuple) and v and v[0] == "obj":
        return "{" + ", ".join(f'"{k}": {_render(x)}' for k, x in v[1]) + "}"
    if isinstance(v, list):
        return "[" + ", ".join(_render(x) for x in v) + "]"
    return json.dumps(v)


_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.tuples(st.just("obj"), st.lists(st.tuples(_KEYS, inner), max_size=4))),
    max_leaves=20)


@pytest.mark.slow
@settings(max_examples=600, deadline=None)
@given(st.lists(st.tuples(_KEYS, _VALUES), max_size=6))
def test_a_passed_line_is_one_the_strict_parser_accepts(pairs: list[tuple[str, Any]]) -> None:
    line = _render(("obj", pairs)).encode("utf-8")
    (suspect,) = _scan(line)
    if not suspect:
        assert _strict_ok(line), line
    if not _strict_ok(line):  # a duplicate key (or anything else refused) is never passed
        assert suspect, line


_WANTED = (b"verifier_calls", b"verifierCalls")
_TOP_KEYS = st.sampled_from(["verifier_calls", "verifierCalls", "a", "premises", "\\u0061"])


@pytest.mark.parametrize(("line", "values"), [
    (b'{"verifier_calls": [{"a": 1}], "b": 2}', [b' [{"a": 1}]', None]),
    (b'{"b": 2, "verifierCalls": null}', [None, b' null']),
    (b'{"x": {"verifier_calls": [1]}, "s": "verifier_calls"}', [None, None]),
    (b'{"verifier_calls":[],"verifierCalls":{"k":[1,2]}}', [b"[]", b'{"k":[1,2]}']),
], ids=["first-key", "last-key", "nested-and-in-a-string", "both"])
def test_spans_hand_cases(line: bytes, values: list[bytes | None]) -> None:
    block = line + b"\n"
    scan = scan_block(block, 1, _WANTED)
    assert not scan.suspect[0]
    assert [scan.value(block, 0, j, k) for j, k in enumerate(_WANTED)] == values


@pytest.mark.slow  # 400 generated lines: ~20 s; the hand cases above run in test-fast
@settings(max_examples=400, deadline=None)
@given(st.lists(st.tuples(_TOP_KEYS, _VALUES), max_size=5))
def test_spans_read_what_the_strict_parser_reads(pairs: list[tuple[str, Any]]) -> None:
    line = _render(("obj", pairs)).encode("utf-8")
    block = line + b"\n"
    scan = scan_block(block, 1, _WANTED)
    assume(not scan.suspect[0])
    obj = loads_strict(line)
    for j, key in enumerate(_WANTED):
        raw = scan.value(block, 0, j, key)
        if key.decode() in obj:
            assert raw is not None and json.loads(raw) == obj[key.decode()], line
        else:
            assert raw is None, line


def test_a_block_scanned_on_threads_equals_one_scanned_on_one(
        monkeypatch: pytest.MonkeyPatch) -> None:
    lines = [b'{"a": 1, "verifier_calls": [{"s": {"p0": true}}]}', b'{"a": 1, "a": 2}',
             b'{"b": "\\u00e9", "verifierCalls": []}', b'[1]'] * 40_000  # ~3.6 MB
    block = b"".join(line + b"\n" for line in lines)
    monkeypatch.setattr(_keyscan, "_workers", lambda n_bytes: 3)
    threaded = scan_block(block, len(lines), _WANTED)
    monkeypatch.setattr(_keyscan, "_workers", lambda n_bytes: 1)
    single = scan_block(block, len(lines), _WANTED)
    assert threaded.suspect.tolist() == single.suspect.tolist() == [False, True, False,
                                                                    True] * 40_000
    assert np.array_equal(threaded.spans, single.spans)
    assert threaded.value(block, 4, 0, b"verifier_calls") == b' [{"s": {"p0": true}}]'


_NAMES = ("a", "b", "id", "p", "claim_id", "x y", "absent", "f")


def _keys(v: Any) -> set[str]:
    """Every key of the parsed JSON value ``v``, at any depth."""
    if isinstance(v, dict):
        return set(v).union(*(_keys(x) for x in v.values()))
    if isinstance(v, list):
        return set().union(*(_keys(x) for x in v))
    return set()


@pytest.mark.parametrize(("lines", "present"), [
    ([b'{"a": {"b": 1}, "c": [{"id": 2}], "p": "f"}'], {"a", "b", "id", "p"}),  # "f": a value
    ([b'{"a": 1}', b'{"x y": {"claim_id": null}}'], {"a", "x y", "claim_id"}),
    ([b'{"a": 1}', b'{"b": 1, "b": 2}'], None),  # a suspect line: its keys are unknown
    ([b'{"\\u0061": 1}'], None),  # an escaped key could spell any name
], ids=["nested-not-values", "across-lines", "suspect", "escaped"])
def test_present_hand_cases(lines: list[bytes], present: set[str] | None) -> None:
    block = b"".join(line + b"\n" for line in lines)
    got = scan_block(block, len(lines), names=_NAMES).present
    assert got == (None if present is None else frozenset(present))


@settings(max_examples=150, deadline=None)
@given(st.lists(st.lists(st.tuples(_KEYS, _VALUES), max_size=4), min_size=1, max_size=4))
def test_present_holds_every_key_the_strict_parser_reads(
        objects: list[list[tuple[str, Any]]]) -> None:
    lines = [_render(("obj", pairs)).encode("utf-8") for pairs in objects]
    scan = scan_block(b"".join(line + b"\n" for line in lines), len(lines), names=_NAMES)
    if scan.present is None:
        assert scan.suspect.any()
        return
    keys = set().union(*(_keys(loads_strict(line)) for line in lines))
    # the names hash apart, so nothing is added by a collision: exactly the keys named
    assert scan.present == frozenset(keys & set(_NAMES))


def test_present_on_threads_equals_one_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    lines = [b'{"a": 1}'] * 50_000 + [b'{"b": {"claim_id": 1}}'] + [b'{"p": 2}'] * 50_000
    block = b"".join(line + b"\n" for line in lines)
    monkeypatch.setattr(_keyscan, "_workers", lambda n_bytes: 3)
    threaded = scan_block(block, len(lines), names=_NAMES).present
    monkeypatch.setattr(_keyscan, "_workers", lambda n_bytes: 1)
    assert threaded == scan_block(block, len(lines), names=_NAMES).present \
        == frozenset({"a", "b", "claim_id", "p"})
