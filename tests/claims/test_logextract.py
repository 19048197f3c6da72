"""The compiled extraction of decision-log blocks against the line parser: whatever it takes,
it reads as the line parser does; whatever it cannot vouch for, it refuses."""

from __future__ import annotations

import json
import re
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from kind_corpus import CASES as KIND_CASES
from kind_corpus import IDS as KIND_IDS
from kind_corpus import after

from amv_calib.claims import _logextract, read_uses
from amv_calib.claims._logextract import MAX_DEPTH, MAX_OPEN_KEYS, line_bounds, strict_objects
from amv_calib.contract import (
    DECISION_ALIASES,
    MEMORY_KIND_FIELDS,
    OFFERED_VERIFIER_ALIASES,
    PREMISE_ALIASES,
    VERIFIER_CALL_ALIASES,
    loads_strict,
)


def _extract(*lines: bytes, offers: bool = False) -> Any:
    block = b"".join(line + b"\n" for line in lines)
    return _logextract.extract_block(block, *line_bounds(block), offers)


def _read_both(path: Path, monkeypatch: pytest.MonkeyPatch, block_bytes: int,
               offers: bool = False) -> tuple[Any, Any, list[bool]]:
    """The log read by the line parser and by blocks of ``block_bytes``; and, per block,
    whether the extraction took it."""
    import amv_calib.claims._logread as logread

    slow = read_uses(path, columnar=False, offers=offers)
    taken: list[bool] = []
    extract = _logextract.extract_block

    def spy(block: bytes, starts: Any, ends: Any, offers: bool = False) -> Any:
        out = extract(block, starts, ends, offers)
        taken.append(out is not None)
        return out

    monkeypatch.setattr(_logextract, "extract_block", spy)
    monkeypatch.setattr(logread, "_BLOCK_BYTES", block_bytes)
    fast = read_uses(path, columnar=True, offers=offers)
    return slow, fast, taken


def _assert_same_read(slow: Any, fast: Any) -> None:
    pd.testing.assert_frame_equal(fast.wide(), slow.wide())
    pd.testing.assert_frame_equal(fast.signals, slow.signals)
    for k, v in slow.records.items():
        assert pd.Series(np.asarray(fast.records[k])).equals(pd.Series(np.asarray(v))), k
    assert fast.records.keys() == slow.records.keys()
    assert fast.offers.schema == slow.offers.schema
    pd.testing.assert_frame_equal(fast.offers.to_pandas(), slow.offers.to_pandas())
    assert [s.to_dict() for s in fast.stats] == [s.to_dict() for s in slow.stats]


# ---------------------------------------------------------------------------------------------
# Records of every spelling and odd value, written in any JSON layout
# ---------------------------------------------------------------------------------------------
_NUMBER_TEXTS = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
    st.integers(-10**25, 10**25).map(str),
    st.tuples(st.integers(0, 10**20), st.integers(0, 30), st.integers(-340, 320)).map(
        lambda t: f"{t[0]}.{'0' * t[1]}1e{t[2]}"),
    st.sampled_from(["0", "-0", "0.0", "-0.0", "1e5", "2.5E+3", "1E-7", "0.1", "1e22",
                     "1e23", "9007199254740993", "123456789012345678901", "1e400",
                     "4.9e-324", "2.2250738585072014e-308"]),
)


class _Raw:
    """A JSON value written as given (a number's text)."""

    def __init__(self, text: str) -> None:
        self.text = text


_IDS = st.one_of(st.sampled_from(["p0", "p1", "c7", "", " c7 ", "a\\b", "caf\u00e9",
                                  "q\"uote"]),
                 st.text("abc01 -_", max_size=6))
#: Any value, of any type, escapes and bytes >= 0x80 included.
_VALUE = st.one_of(st.none(), st.booleans(), _NUMBER_TEXTS.map(_Raw), _IDS,
                   st.lists(st.integers(0, 3), max_size=2),
                   st.dictionaries(st.sampled_from(["x", "y"]), st.integers(0, 3), max_size=2))
#: Any value a field not read may hold in a line the extraction takes.
_ASCII_VALUE = st.one_of(st.none(), st.booleans(), st.integers(-5, 5).map(str).map(_Raw),
                         st.sampled_from(["a\\b", "q\"uote", "\\u00e9", ""]),
                         st.lists(st.integers(0, 3), max_size=2))


def _odd(draw: Any, odd: float) -> bool:
    return odd > 0 and draw(st.floats(0, 1)) < odd


def _field(draw: Any, names: tuple[str, ...], value: Any, odd: float) -> dict[str, Any]:
    """Any subset of the spellings of one field (usually one), each a typical value or,
    with probability ``odd``, any value."""
    k = draw(st.sampled_from([0, 1, 1, 1, 1, 2]))
    picked = draw(st.permutations(list(names)))[:k]
    return {n: draw(_VALUE) if _odd(draw, odd) else draw(value) for n in picked}


_PLAIN_IDS = st.sampled_from(["p0", "p1", "p2", "c1", "c2", ""])
#: A memory kind's value: a kind, null, or any odd value of the contract's corpus (another
#: type, blank, padded, too long, unicode).
_KIND = st.one_of(st.sampled_from(["event", "fact", None]),
                  st.sampled_from([v for _, fields, _ in KIND_CASES for v in fields.values()]))
_FEATURES = (("recency_hours", "recencyHours"), ("source_trust_score", "sourceTrustScore"),
             ("model_confidence", "modelConfidence"))


@st.composite
def _premise(draw: Any, odd: float, kinds: bool = False) -> Any:
    """A premise; ``kinds``: its memory kinds (and its claim's) may be anything, else only
    null or absent."""
    kind = _KIND if kinds else st.none()
    if draw(st.floats(0, 1)) < 0.05:
        return draw(st.sampled_from([None, 3, "p", []] if odd else [None]))
    num = st.one_of(st.none(), _NUMBER_TEXTS.map(_Raw)) if odd else \
        st.one_of(st.none(), st.floats(-1e6, 1e6).map(repr).map(_Raw))
    prem: dict[str, Any] = {}
    prem.update(_field(draw, ("id", "premise_id", "premiseId"), _PLAIN_IDS, odd))
    prem.update(_field(draw, ("claim_id", "claimId"), _PLAIN_IDS, odd))
    prem.update(_field(draw, ("p", "calibratedViolationProbability",
                              "calibrated_violation_probability"), num, odd))
    for names in _FEATURES:
        prem.update(_field(draw, names, num, odd))
    prem.update(_field(draw, ("contradiction_flag", "contradictionFlag"),
                       st.one_of(st.none(), st.booleans()), odd))
    if draw(st.booleans()):
        prem.update(_field(draw, MEMORY_KIND_FIELDS, kind, 0.0))
    if draw(st.booleans()):
        claim: dict[str, Any] = {}
        claim.update(_field(draw, ("claim_id", "claimId", "id"), _PLAIN_IDS, odd))
        for names in _FEATURES:
            claim.update(_field(draw, names, num, odd))
        claim.update(_field(draw, ("contradiction_flag", "contradictionFlag"),
                            st.one_of(st.none(), st.booleans()), odd))
        if draw(st.booleans()):
            claim.update(_field(draw, MEMORY_KIND_FIELDS, kind, 0.0))
        prem["claim"] = draw(_VALUE) if _odd(draw, odd) else claim
    if draw(st.booleans()):
        prem["note"] = draw(_VALUE if odd else _ASCII_VALUE)
    return prem


@st.composite
def _call(draw: Any, odd: float) -> Any:
    """A verifier call: usually an object of any spellings, its signals true, false or
    anything else under premise ids."""
    if draw(st.floats(0, 1)) < 0.05:
        return draw(st.sampled_from([None, 3, "v", [1]]))
    v = VERIFIER_CALL_ALIASES
    call: dict[str, Any] = {}
    call.update(_field(draw, v["verifier"], st.sampled_from(["v", "w", "", None, True]), odd))
    call.update(_field(draw, v["reliability"], st.one_of(
        st.none(), st.sampled_from(["0.9", "0.75", "1", "0"]).map(_Raw)), odd))
    call.update(_field(draw, v["cost"], st.just(_Raw("0.1")), odd))
    if draw(st.floats(0, 1)) < 0.9:
        signal = st.one_of(st.booleans(), st.booleans(),
                           _VALUE if odd else _ASCII_VALUE)
        call["signals"] = draw(st.dictionaries(_PLAIN_IDS, signal, min_size=1, max_size=3)) \
            if not _odd(draw, odd) else draw(_VALUE)
    keys = draw(st.permutations(list(call)))
    return {k: call[k] for k in keys}


@st.composite
def _offer(draw: Any, odd: float) -> Any:
    """An offered verifier: usually an object of any spellings (the premise ids it
    resolves, its cost and reliability), sometimes null or anything else."""
    if draw(st.floats(0, 1)) < 0.05:
        return draw(st.sampled_from([None, 3, "v", [1]] if odd else [None]))
    o = OFFERED_VERIFIER_ALIASES
    num = st.one_of(st.none(), (_NUMBER_TEXTS if odd else st.sampled_from(
        ["0.2", "0.9", "1", "0", "-0", "0.05"])).map(_Raw))
    offer: dict[str, Any] = {}
    offer.update(_field(draw, o["id"], st.sampled_from(["v", "cache-api", "", None]), odd))
    offer.update(_field(draw, o["resolves_premise_ids"], st.one_of(
        st.none(), st.lists(_PLAIN_IDS, max_size=3)), odd))
    offer.update(_field(draw, o["execution_cost"], num, odd))
    offer.update(_field(draw, o["symmetric_reliability"], num, odd))
    keys = draw(st.permutations(list(offer)))
    return {k: offer[k] for k in keys}


@st.composite
def _record(draw: Any, odd: float, kinds: bool = False) -> dict[str, Any]:
    """A decision record; ``odd``: how often a field read holds a value of any type (0:
    never, and no byte >= 0x80 anywhere); ``kinds``: the premises' memory kinds may be
    anything (else null or absent)."""
    d = DECISION_ALIASES
    times = st.sampled_from(["2026-05-01T10:00:00Z", "2026-05-01T10:00:00+02:00",
                             "not a time", "", None])
    rec: dict[str, Any] = {}
    rec.update(_field(draw, d["time"], times, odd))
    rec.update(_field(draw, d["action_id"], st.sampled_from(["a1", "a2", "", None]), odd))
    rec.update(_field(draw, d["tool_name"], st.sampled_from(["bank", None]), odd))
    rec.update(_field(draw, d["regime"], st.sampled_from(["PROCEED", "", None]), odd))
    num = _NUMBER_TEXTS if odd else st.floats(-1e6, 1e6).map(repr)
    rec.update(_field(draw, d["theta"], num.map(_Raw), odd))
    rec.update(_field(draw, d["kappa"], num.map(_Raw), odd))
    if draw(st.booleans()):
        cal = {"name": draw(st.sampled_from(["g", "", None])),
               "version": draw(st.sampled_from(["1", "", None]))}
        rec["calibrator"] = draw(_VALUE) if _odd(draw, odd) else cal
    if draw(st.floats(0, 1)) < 0.9:
        rec["premises"] = draw(_VALUE) if _odd(draw, odd) else \
            draw(st.lists(_premise(odd, kinds), max_size=4))
    for name in d["verifier_calls"]:
        if draw(st.booleans()):
            rec[name] = None if draw(st.floats(0, 1)) < 0.1 else \
                [draw(_call(odd)) for _ in range(draw(st.integers(0, 3)))]
    for name in d["verifiers"]:
        if draw(st.floats(0, 1)) < 0.4:
            rec[name] = None if draw(st.floats(0, 1)) < 0.1 else \
                draw(_VALUE) if _odd(draw, odd) else \
                [draw(_offer(odd)) for _ in range(draw(st.integers(0, 3)))]
    if draw(st.booleans()):
        junk = _VALUE if odd else _ASCII_VALUE
        rec["planner"] = {"nested": [draw(junk), {"premises": draw(junk)}]}
    keys = draw(st.permutations(list(rec)))
    return {k: rec[k] for k in keys}


def _dump(value: Any, sep: tuple[str, str]) -> str:
    if isinstance(value, _Raw):
        return value.text
    if isinstance(value, dict):
        return "{" + sep[0].join(json.dumps(k) + sep[1] + _dump(v, sep)
                                 for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + sep[0].join(_dump(v, sep) for v in value) + "]"
    return json.dumps(value, ensure_ascii=False)


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data(), odd=st.sampled_from([0.0, 0.0, 0.01, 0.1]),
       sep=st.sampled_from([(",", ":"), (", ", ": "), (" ,\t", " :\r ")]),
       block_bytes=st.sampled_from([256, 4096, 1 << 20]), kinds=st.booleans(),
       offers=st.booleans())
def test_reads_as_the_line_parser(data: Any, odd: float, sep: tuple[str, str],
                                  block_bytes: int, kinds: bool, offers: bool, tmp_path: Path,
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    records = data.draw(st.lists(_record(odd, kinds), min_size=1, max_size=40))
    path = tmp_path / "d.jsonl"
    path.write_bytes("".join(_dump(r, sep) + "\n" for r in records).encode())
    slow, fast, taken = _read_both(path, monkeypatch, block_bytes, offers)
    _assert_same_read(slow, fast)
    if not odd and not kinds:  # every field read of the type the schema says, every kind
        assert taken and all(taken)  # null: every block is taken


def test_a_canonical_log_is_taken_whole_and_reads_as_the_line_parser(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The gate's own form (compact, canonical names, every field typed) is what the
    extraction is for: it takes every block of it."""
    from amv_calib.contract import encode_record

    rng = np.random.default_rng(11)
    lines = []
    for i in range(2000):
        prems = [{"id": f"p{j}", "claim_id": f"c{rng.integers(0, 300)}",
                  "recency_hours": float(np.round(rng.random() * 900, 3)),
                  "source_trust_score": float(rng.random()),
                  "model_confidence": float(np.round(rng.random(), 4)),
                  "contradiction_flag": bool(rng.random() < 0.3), "p": float(rng.random())}
                 for j in range(int(rng.integers(0, 5)))]
        rec: dict[str, Any] = {"time": f"2026-05-01T10:{i // 60 % 60:02d}:{i % 60:02d}Z",
                               "action_id": f"a{i}", "tool_name": "bank_transfer",
                               "theta": 120.0, "kappa": 4.0, "premises": prems,
                               "calibrator": {"name": "g", "version": "3"},
                               "regime": "PROCEED",
                               "verifiers": [{"id": "v", "resolves_premise_ids": ["p0"],
                                              "execution_cost": 0.2,
                                              "symmetric_reliability": 0.9}]}
        if prems and rng.random() < 0.2:
            rec["verifier_calls"] = [{"verifier": "v", "reliability": 0.9, "cost": 0.1,
                                      "signals": {prems[0]["id"]: bool(rng.random() < 0.5)}}]
        lines.append(encode_record(rec))
    path = tmp_path / "d.jsonl"
    path.write_bytes(b"".join(lines))
    for offers in (False, True):
        slow, fast, taken = _read_both(path, monkeypatch, 16 << 10, offers)
        _assert_same_read(slow, fast)
        assert len(taken) > 20 and all(taken)
        assert len(slow.signals) > 100
        assert fast.offers.num_rows == (2000 if offers else 0)


# ---------------------------------------------------------------------------------------------
# Memory kinds: the contract's verdict on every path
# ---------------------------------------------------------------------------------------------
def _two_reads(path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[list[Any], bool]:
    """The log read by the line parser and by the default read; and whether the extraction
    took its one block."""
    slow, fast, taken = _read_both(path, monkeypatch, 1 << 20)
    return [slow, fast], taken == [True]


def _kinds_of(log: Any) -> list[tuple[Any, Any]]:
    """(kind, reason) per entry; both None everywhere when the columns are absent."""
    e = log.entries
    if "memory_kind" not in e.columns:
        return [(None, None)] * len(e)
    return [(None if pd.isna(k) else k, None if pd.isna(r) else r)
            for k, r in zip(e["memory_kind"], e["kind_error"], strict=True)]


@pytest.mark.parametrize("where", ["premise", "claim"])
@pytest.mark.parametrize(("fields", "verdict"), [c[1:] for c in KIND_CASES], ids=KIND_IDS)
def test_each_odd_kind_reads_as_the_contract_rule_says_on_every_path(
        fields: dict[str, Any], verdict: tuple[str, Any], where: str, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A premise giving the corpus's kind fields (or its claim giving them), beside one
    giving none: the line parser and the extraction give the corpus's verdict; the kind
    columns exist only when a kind field is not null; the extraction takes the block when
    every kind is null or a string it reads (else the line parser does)."""
    prem: dict[str, Any] = {"id": "p0", "claim_id": "c0", "p": 0.5}
    if where == "premise":
        prem.update(fields)
    else:
        prem["claim"] = {"id": "c0", **fields}
    rec = {"time": "2026-05-01T10:00:00Z", "action_id": "a1",
           "premises": [prem, {"id": "p1", "claim_id": "c1"}]}
    path = tmp_path / "d.jsonl"
    path.write_text(json.dumps(rec, ensure_ascii=False) + "\n", encoding="utf-8")
    reads, taken = _two_reads(path, monkeypatch)
    got = [_kinds_of(r) for r in reads]
    assert got[0] == got[1]
    pd.testing.assert_frame_equal(reads[1].wide(), reads[0].wide())
    (kind, reason), other = got[0]
    assert other == (None, None)
    tag, want = verdict
    has_columns = "memory_kind" in reads[0].entries.columns
    # the extraction takes kinds given as JSON strings without escapes (json.dumps escapes
    # a quote, a backslash and the control characters below U+0020), as UTF-8
    plain = all(v is None or (isinstance(v, str) and min(map(ord, v), default=32) >= 32
                              and '"' not in v and "\\" not in v) for v in fields.values())
    assert taken == plain
    if tag == "none":
        assert (kind, reason) == (None, None) and not has_columns
        return
    assert has_columns
    if tag == "kind":
        assert (kind, reason) == (want, None)
    else:
        prefix = "" if where == "premise" else r"claim\."
        assert kind is None and re.search(after(prefix, want), reason), reason


@pytest.mark.parametrize(("premise", "claim", "want"), [
    ({"memory_kind": "event"}, {"memory_kind": 3}, ("event", None)),
    ({"memoryKind": "event"}, {"memory_kind": "fact"}, ("event", None)),
    ({"memory_kind": None}, {"memoryKind": "fact"}, ("fact", None)),
    ({}, {"memory_kind": None, "memoryKind": None}, (None, None)),
    ({"memory_kind": " event"}, {"memory_kind": "fact"},
     (None, "memory_kind=' event' begins or ends with whitespace")),
    ({"memory_kind": None}, {"memory_kind": "fact", "memoryKind": "event"},
     (None, "claim.memory_kind='fact' and memoryKind='event' differ (give one)")),
], ids=["own-beside-bad-claim", "own-beside-other-claim", "claim-under-null",
        "all-null", "own-refused", "claim-refused"])
def test_a_premise_s_own_kind_comes_before_its_claim_s(
        premise: dict[str, Any], claim: dict[str, Any], want: tuple[Any, Any],
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The premise's own kind when it gives one (its claim's then unread, as a claim's
    features are), else its claim's; a kind refused is refused where it stands."""
    rec = {"time": "2026-05-01T10:00:00Z", "action_id": "a1",
           "premises": [{"id": "p0", **premise, "claim": {"id": "c0", **claim}}]}
    path = tmp_path / "d.jsonl"
    path.write_text(json.dumps(rec) + "\n", encoding="utf-8")
    reads, _ = _two_reads(path, monkeypatch)
    assert [_kinds_of(r) for r in reads] == [[want]] * 2


# ---------------------------------------------------------------------------------------------
# What it refuses, and what it takes
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("line", [
    b'{"action_id": 5}',  # a number where the schema has a string
    b'{"premises": [{"p": "0.5"}]}',  # a string where it has a number
    b'{"premises": [{"contradiction_flag": 1}]}',  # a number where it has a boolean
    b'{"premises": [{"id": true}]}',
    b'{"premises": {"id": "p0"}}',  # an object where it has a list
    b'{"premises": ["p0"]}',  # a premise that is a string
    b'{"calibrator": "g@1"}',  # a string where it has an object
    b'{"premises": [{"claim": "c1"}]}',
    b'{"verifier_calls": {"v": 1}}',
    b'{"premises": [{"id": "p\\u0030"}]}',  # an escape in a value read
    b'{"action_id": "a1", "action_id": "a2"}',  # a key twice
    b'{"x": {"k": 1, "k": 2}}',  # a key twice, in an object not read
    b'{"premises": [{"id": "p0", "id": "p1"}]}',
    b'{"premises": [{"claim": {"id": "c", "id": "d"}}]}',
    b'{"a\\u0063tion_id": "a1"}',  # an escape in a key
    '{"caf\u00e9": 1}'.encode(),  # a key of bytes >= 0x80
    '{"x": 1, "y": \u00e9}'.encode(),  # bytes >= 0x80 outside a string
    b'{"action_id": "caf\xe9"}',  # not UTF-8
    b'{"action_id": "\xc0\x80"}',  # an overlong form
    b'{"action_id": "\xed\xa0\x80"}',  # a surrogate, as raw bytes
    b'{"action_id": "\xf4\x90\x80\x80"}',  # past U+10FFFF
    b'{"action_id": "\xe2\x82"}',  # cut short
    b'\xef\xbb\xbf{"action_id": "a"}',  # a byte order mark: the line parser's
    b'{"x": "tab\there"}',  # a control byte in a string
    b'{"x": NaN}', b'{"x": 01}', b'{"x": 1.}', b'{"x": .5}', b'{"x": 1e}', b'{"x": +1}',
    b'{"x": tru}', b'{"x": nul}', b'{"x": [1,]}', b'{"x": 1,}', b'{"x" 1}', b'{x: 1}',
    b'{"x": 1} 2', b'{"x": 1}}', b'{"x": [1}', b'{"x": "\\q"}', b'{"x": "\\u12"}',
    b'[1, 2]', b'"a"', b'', b'   ',
    b'{"a": ' + b'[' * MAX_DEPTH + b']' * MAX_DEPTH + b'}',
], ids=lambda b: b.decode("utf-8", "replace")[:40])
def test_refuses_what_it_cannot_vouch_for(line: bytes) -> None:
    assert _extract(b'{"action_id": "ok"}', line) is None


@pytest.mark.parametrize("line", [
    b'{}',
    b'{"x": "a \\" quoted \\\\ value \\u00e9", "y": [1, {"z": null}, -0.5e-3, true]}',
    b'  {"premises": null, "calibrator": null, "verifier_calls": null}  \r',
    b'{"premises": [null, {}], "calibrator": {}}',
    b'{"a": ' + b'[' * (MAX_DEPTH - 2) + b']' * (MAX_DEPTH - 2) + b'}',
    b'{"x": {"k": 1}, "y": {"k": 1}, "z": [{"k": 1}, {"k": 1}]}',  # same keys, apart
    b'{"premises": [{"id": "p0", "claim": {"id": "c0"}}, {"id": "p1"}]}',
    '{"action_id": "caf\u00e9 \u4e8b\u4ef6 \U0001f600 \u07ff \uffff", "x": "\u00e9"}'.encode(),
], ids=["empty", "escapes-in-values-not-read", "nulls-and-spaces", "null-and-empty-premises",
        "deep-enough", "same-keys-in-other-objects", "nested-claims", "utf-8"])
def test_takes_strict_json_it_can_read(line: bytes) -> None:
    assert strict_objects(line + b"\n") is line.isascii()  # UTF-8: the line parser's there
    assert _extract(line) is not None and _extract(line, offers=True) is not None


def test_takes_the_first_spelling_that_is_not_null() -> None:
    ext = _extract(b'{"actionId": "b", "action_id": null, "premises": [{"premiseId": "x", '
                   b'"id": "y", "claim": {"id": "c3", "claimId": "c2"}, '
                   b'"calibrated_violation_probability": 0.5, "p": null, '
                   b'"contradictionFlag": true, "claim_id": null, '
                   b'"claim2": {"contradiction_flag": false}}], '
                   b'"calibrator": {"version": "2", "name": "g"}}')
    assert ext.record_strings["action_id"].to_pylist() == ["b"]
    assert ext.record_strings["calibrator_name"].to_pylist() == ["g"]
    assert ext.premise_id.to_pylist() == ["y"] and ext.claim_id.to_pylist() == ["c2"]
    assert ext.entry_numbers["p"].tolist() == [0.5]
    assert ext.contradiction_flag.tolist() == [1.0]


def test_counts_premises_per_line() -> None:
    ext = _extract(b'{"premises": [{}, null, {"id": "p"}], "verifier_calls": [{}, 1]}',
                   b'{"premises": [], "verifierCalls": [{"x": [1, 2]}], "verifier_calls": []}',
                   b'{"x": {"premises": [{}]}}')
    assert ext.n_premises.tolist() == [3, 0, 0]
    assert ext.parents.tolist() == [0, 0, 0]


def sig(ext: Any) -> dict[str, list[Any]]:
    return {k: v.tolist() if isinstance(v, np.ndarray) else v.to_pylist()
            for k, v in ext.signals.items()}


def test_reads_signals_as_the_line_parser() -> None:
    """The calls of the first spelling given as a list; per call the first verifier and
    reliability that are not null (a verifier given as true is "true"); per signal a
    premise id and a boolean (anything else under a premise id is no signal)."""
    ext = _extract(
        b'{"verifierCalls": [{"verifier": "x", "signals": {"p9": true}}], "verifier_calls": '
        b'[{"signals": {"p0": true, "p1": 1, "p2": false, "p3": null, "p4": {"a": true}}, '
        b'"reliability": null, "symmetricReliability": 0.75, "verifier_id": "w"}, '
        b'null, 3, {"verifier": true, "signals": {"p5": false}}, {"signals": [true]}]}',
        b'{"verifier_calls": null, "verifierCalls": [{"id": "", "signals": {"p6": true}}]}',
        b'{"verifier_calls": [], "verifierCalls": [{"signals": {"p7": true}}]}')
    assert sig(ext)["premise_id"] == ["p0", "p2", "p5", "p6"]
    assert np.isnan(sig(ext)["reliability"][2:]).all()
    assert sig(ext)["reliability"][:2] == [0.75, 0.75]
    assert sig(ext)["verifier"] == ["w", "w", "true", ""]
    assert sig(ext)["rec"] == [0, 0, 0, 1]
    assert sig(ext)["confirmed"] == [True, False, False, True]
    # the lowest rank wins, wherever it stands in the call
    ext = _extract(b'{"verifier_calls": [{"reliability": 0.25, "verifier": "a", '
                   b'"signals": {"p0": true}, "symmetric_reliability": 0.5, "verifierId": "b"}]}')
    assert (sig(ext)["reliability"], sig(ext)["verifier"]) == ([0.25], ["a"])


def test_many_premises_a_line_are_given_room() -> None:
    """Room is first made for four premises a line; a block with more takes the second,
    larger, allocation."""
    line = ('{"premises": [' + ", ".join(f'{{"id": "p{i}"}}' for i in range(300)) + "]}")
    ext = _extract(line.encode(), b'{"premises": [null, null, null, null, null, null]}')
    assert ext.n_premises.tolist() == [300, 6]
    assert ext.premise_id.to_pylist() == [f"p{i}" for i in range(300)] + [None] * 6
    calls = ", ".join(f'{{"verifier": "v{i}", "signals": {{"p{i}": true, "q": false}}}}'
                      for i in range(100))
    ext = _extract(f'{{"verifier_calls": [{calls}]}}'.encode())
    assert sig(ext)["premise_id"] == [p for i in range(100) for p in (f"p{i}", "q")]
    assert sig(ext)["verifier"] == [f"v{i}" for i in range(100) for _ in range(2)]


def test_a_block_without_room_goes_to_the_line_parser(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the system refuses the string columns' address space, the block is read by
    the line parser: the same result, no error."""
    line = b'{"action_id": "a", "premises": [{"id": "p0", "claim_id": "c", "p": 0.5}]}\n'
    path = tmp_path / "d.jsonl"
    path.write_bytes(line * 50)

    def refuse(columns: int, size: int) -> None:
        return None

    monkeypatch.setattr(_logextract, "_string_room", refuse)
    assert _extract(line.rstrip()) is None
    slow, fast, taken = _read_both(path, monkeypatch, 1 << 20)
    _assert_same_read(slow, fast)
    assert taken == [False] and len(fast.wide()) == 50


# ---------------------------------------------------------------------------------------------
# Numbers: bit for bit Python's float()
# ---------------------------------------------------------------------------------------------
def _bits(x: float) -> int:
    return struct.unpack("<q", struct.pack("<d", x))[0]


@settings(max_examples=300, deadline=None)
@given(texts=st.lists(_NUMBER_TEXTS, min_size=1, max_size=30))
def test_numbers_convert_as_python_float(texts: list[str]) -> None:
    lines = [f'{{"theta": {t}, "premises": [{{"p": {t}}}]}}'.encode() for t in texts]
    ext = _extract(*lines)
    if any(abs(float(t)) == float("inf") for t in texts):  # Arrow refuses what overflows
        return
    assert ext is not None
    want = [_bits(float(t)) for t in texts]
    assert [_bits(x) for x in ext.entry_numbers["p"].tolist()] == want
    assert [_bits(x) for x in ext.record_numbers["theta"].tolist()] == want


@pytest.mark.parametrize(("text", "exact"), [
    ("0.1", True), ("-0", True), ("123456789.5e-3", True), ("9007199254740992", True),
    ("9007199254740993", False),  # more than 2**53: Arrow converts it
    ("1e22", True), ("1e23", False), ("1.5e-21", True), ("1.5e-22", False),
    ("0.00000000000000000000001", False), ("12345678901234567890", False),
])
def test_the_fast_conversion_takes_exactly_what_it_can(text: str, exact: bool) -> None:
    buf = np.frombuffer(text.encode(), dtype=np.uint8)
    value, ok = _logextract._decimal(buf, 0, buf.size, _logextract._EXACT_TENS)
    assert ok is exact
    if ok:
        assert _bits(value) == _bits(float(text))


def test_reads_every_spelling_the_line_parser_reads() -> None:
    """A spelling added to the contract (the line parser reads it) must be read here too,
    or the extraction would take blocks and leave its field null."""
    x = _logextract
    read: dict[int, set[str]] = {}
    for role, key, _, _ in x._keys():
        read.setdefault(role, set()).add(key)
    d = DECISION_ALIASES
    top = ("time", "action_id", "tool_name", "theta", "kappa", "premises", "calibrator",
           "regime", "verifier_calls", "verifiers")
    assert {n for f in top for n in d[f]} <= read[x._ROLE_TOP]
    premise = {n for f, names in PREMISE_ALIASES.items() if f != "memory_kind_evaluated_as"
               for n in names}
    assert premise | {"claim"} <= read[x._ROLE_PREMISE]
    assert premise - {"id", "premise_id", "premiseId", "p", "calibratedViolationProbability",
                      "calibrated_violation_probability"} <= read[x._ROLE_CLAIM]
    v = VERIFIER_CALL_ALIASES
    assert {n for f in ("verifier", "signals", "reliability") for n in v[f]} \
        <= read[x._ROLE_CALL]
    assert {n for names in OFFERED_VERIFIER_ALIASES.values() for n in names} \
        <= read[x._ROLE_OFFER]


def test_key_hashes_agree_with_the_compiled_walk() -> None:
    """Every key read is found by the walk (its hash and words as the table has them): a
    line giving each spelling once yields a value for each."""
    table = _logextract._key_table()
    assert table.hashes.size == _logextract._SLOTS
    assert len({int(h) for h in table.hashes if h}) == sum(table.length >= 0)
    x = _logextract
    for role, key, target, _ in x._keys():
        if target not in (x._T_PREMISE_ID, x._T_CLAIM_ID):
            continue
        line = ('{"premises": [{"' + key + '": "v"}]}' if role == x._ROLE_PREMISE
                else '{"premises": [{"claim": {"' + key + '": "v"}}]}')
        ext = _extract(line.encode())
        got = ext.premise_id if target == x._T_PREMISE_ID else ext.claim_id
        assert got.to_pylist() == ["v"], key
    for n in DECISION_ALIASES["time"]:
        ext = _extract(f'{{"{n}": "t"}}'.encode())
        assert ext.record_strings["time"].to_pylist() == ["t"], n
    # a key that is not read, however like one it is, is not taken for it
    assert _extract(b'{"timex": "t", "tim": "u"}').record_strings["time"].to_pylist() == [None]


# ---------------------------------------------------------------------------------------------
# The offered verifiers (read with offers): as the line parser reads them
# ---------------------------------------------------------------------------------------------
def _offers_of(*lines: bytes) -> list[dict[str, Any]]:
    ext = _extract(*lines, offers=True)
    return [dict(zip(ext.offers, row, strict=True)) for row in zip(
        ext.offers["rec"].tolist(), ext.offers["id"].to_pylist(),
        ext.offers["resolves"].to_pylist(), ext.offers["cost"].tolist(),
        ext.offers["reliability"].tolist(), strict=True)]


def test_reads_offers_of_the_first_spelling_given_as_a_list() -> None:
    """The offered verifiers of the first spelling given as a list (null passes to the next
    one; an empty list is a list); per verifier, each field's first spelling not null; a
    null verifier, a row of nulls."""
    got = _offers_of(
        b'{"offeredVerifiers": [{"id": "x"}], "verifiers": [{"cost": 0.5, "verifierId": "w", '
        b'"executionCost": 0.25, "id": null, "reliability": 0.8, '
        b'"resolvesPremiseIds": ["p9"], "resolves_premise_ids": ["p0", "p1"]}, null, '
        b'{"resolves_premise_ids": null, "resolvesPremiseIds": [], "symmetricReliability": 1}]}',
        b'{"verifiers": null, "offered_verifiers": [{"id": ""}], "offeredVerifiers": null}',
        b'{"offered_verifiers": [{"id": "z"}], "offeredVerifiers": []}',
        b'{"premises": []}')
    nan = float("nan")
    want = [{"rec": 0, "id": "w", "resolves": ["p0", "p1"], "cost": 0.25, "reliability": 0.8},
            {"rec": 0, "id": None, "resolves": None, "cost": nan, "reliability": nan},
            {"rec": 0, "id": None, "resolves": [], "cost": nan, "reliability": 1.0},
            {"rec": 1, "id": "", "resolves": None, "cost": nan, "reliability": nan}]
    assert str(got) == str(want)  # NaN compares equal as text
    ext = _extract(b'{"verifiers": []}', b'{"verifiers": null}', b'{}', offers=True)
    assert ext.has_verifiers.tolist() == [True, False, False]
    assert _extract(b'{"verifiers": []}').has_verifiers.tolist() == [False]
    assert _extract(b'{"verifiers": []}').offers is None


def test_offers_read_as_the_line_parser(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The hand cases above, a block of them, read by the line parser and by the extraction:
    the same records and offers (empty ids as nulls)."""
    lines = [b'{"offeredVerifiers": [{"id": "x"}], "verifiers": [{"cost": 0.5, "verifierId": '
             b'"w", "executionCost": 0.25, "reliability": 0.8, "resolvesPremiseIds": ["p9"], '
             b'"resolves_premise_ids": ["p0", "p1"]}, null, {"resolvesPremiseIds": []}]}',
             b'{"verifiers": null, "offered_verifiers": [{"id": "", "cost": -0}]}',
             b'{"verifiers": []}', b'{"premises": [{"id": "p0"}]}']
    path = tmp_path / "d.jsonl"
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    slow, fast, taken = _read_both(path, monkeypatch, 1 << 20, offers=True)
    _assert_same_read(slow, fast)
    assert taken == [True]
    assert fast.offers.column("id").to_pylist() == ["w", None, None, None]
    assert fast.records["has_verifiers"].tolist() == [True, True, True, False]


@pytest.mark.parametrize("line", [
    b'{"verifiers": {"id": "v"}}',  # an object where a list is read
    b'{"verifiers": "v"}',
    b'{"verifiers": ["v"]}',  # a verifier that is a string
    b'{"verifiers": [[]]}',
    b'{"verifiers": [{"id": 3}]}',  # a number where a string is read
    b'{"verifiers": [{"id": "v\\u0030"}]}',  # an escape in a value read
    b'{"verifiers": [{"resolves_premise_ids": "p0"}]}',
    b'{"verifiers": [{"resolves_premise_ids": ["p0", 1]}]}',
    b'{"verifiers": [{"resolves_premise_ids": ["p0", null]}]}',  # the line parser: no list
    b'{"verifiers": [{"resolves_premise_ids": [["p0"]]}]}',
    b'{"verifiers": [{"execution_cost": "0.2"}]}',
    b'{"verifiers": [{"cost": true}]}',
    b'{"verifiers": [{"symmetric_reliability": {}}]}',
    b'{"verifiers": [{"execution_cost": 1e400}]}',  # not converted exactly
    b'{"verifiers": [{"id": "a", "id": "b"}]}',
], ids=lambda b: b.decode()[:50])
def test_refuses_offers_it_cannot_vouch_for(line: bytes) -> None:
    """With offers, a value of another type than read sends the block to the line parser;
    without, the offers are not read and the line is taken (but a key given twice)."""
    assert _extract(b'{"verifiers": []}', line, offers=True) is None
    if b'"id": "a", "id"' not in line:
        assert _extract(b'{"verifiers": []}', line) is not None


def test_many_offers_a_line_are_given_room() -> None:
    offers = ", ".join(f'{{"id": "v{i}", "resolves_premise_ids": ["p{i}", "q", "r", "s", "t"]}}'
                       for i in range(50))
    ext = _extract(f'{{"verifiers": [{offers}]}}'.encode(), b'{"verifiers": [null]}',
                   offers=True)
    assert ext.offers["id"].to_pylist() == [f"v{i}" for i in range(50)] + [None]
    assert ext.offers["resolves"].to_pylist() == [
        [f"p{i}", "q", "r", "s", "t"] for i in range(50)] + [None]
    assert ext.offers["rec"].tolist() == [0] * 50 + [1]


# ---------------------------------------------------------------------------------------------
# The walk alone (strict_objects): the check another JSON-lines reader makes
# ---------------------------------------------------------------------------------------------
def _strict_ok(line: bytes) -> bool:
    try:
        return isinstance(loads_strict(line), dict)
    except (ValueError, RecursionError):
        return False


@pytest.mark.parametrize(("line", "vouched"), [
    (b'{"a": 1, "b": {"a": 2}, "c": [{"a": 1}, {"a": 2}]}', True),
    (b'{"a": 1, "a": 2}', False),
    (b'{"x": {"k": 1, "k": 2}}', False),
    (b'{"x": [{"k": 1, "j": {"k": 1}, "k": 3}]}', False),
    (b'{"a": 1, "\\u0061": 2}', False),  # the same key, escaped
    (b'{"s": "a \\" quoted \\\\ value", "t": "\\u00e9"}', True),  # escapes in values
    (b'{"s": "\\ud83d\\ude00"}', False),  # a surrogate escape: the line parser judges it
    ('{"s": "caf\u00e9"}'.encode(), False),  # non-ASCII: the line parser judges UTF-8
    (b'{"s": "\xff"}', False),  # not UTF-8
    (b'{"s": "tab\there"}', False),  # a raw control byte in a string
    (b'{"x": NaN}', False), (b'{"x": Infinity}', False),
    (b'[1, 2]', False),  # not an object
    (b'', False), (b'  ', False),  # blank
    (b'  {"a": {}}  ', True),
    (b'{"a": ' + b'[' * MAX_DEPTH + b']' * MAX_DEPTH + b'}', False),
    (b'{"a": ' + b'[' * (MAX_DEPTH - 2) + b']' * (MAX_DEPTH - 2) + b'}', True),
    (b'{"": 1, "b": ""}', True),
    (("{" + ", ".join(f'"k{i}": 1' for i in range(MAX_OPEN_KEYS + 1)) + "}").encode(), False),
    (("{" + ", ".join(f'"k{i}": 1' for i in range(MAX_OPEN_KEYS)) + "}").encode(), True),
    # more keys than the table holds, but never open at once: each object's keys are freed
    (('{"a": [' + ", ".join(f'{{"k{i}": 1, "j": 2}}' for i in range(MAX_OPEN_KEYS))
      + "]}").encode(), True),
    # keys the extraction reads, of any type: the walk alone reads none
    (b'{"action_id": 5, "premises": {"p": "x"}, "verifiers": 1, "time": []}', True),
], ids=["nested-same-names", "top-level-twice", "nested-twice", "in-a-list-twice",
        "escaped-key", "escapes-in-values", "surrogate-escape", "non-ascii", "bad-utf8",
        "control-byte", "nan", "infinity", "array", "empty", "spaces-only", "spaces",
        "too-deep", "deep-enough", "empty-key", "too-many-open-keys",
        "open-keys-at-the-limit", "many-keys-in-closed-objects", "read-keys-any-type"])
def test_strict_objects_hand_cases(line: bytes, vouched: bool) -> None:
    assert strict_objects(line + b"\n") is vouched
    assert strict_objects(b'{"a": 1}\n' + line + b"\n" + b'{"b": 2}\n') is vouched
    if vouched:
        assert _strict_ok(line)


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


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(_KEYS, _VALUES), max_size=6))
def test_a_vouched_line_is_one_the_strict_parser_accepts(pairs: list[tuple[str, Any]]) -> None:
    """Whatever the walk vouches for, the strict parser takes as an object; whatever it
    refuses (a key twice, say), the walk never vouches for."""
    line = _render(("obj", pairs)).encode("utf-8")
    vouched = strict_objects(line + b"\n")
    if vouched:
        assert _strict_ok(line), line
    if not _strict_ok(line):
        assert not vouched, line
    assume(vouched)
