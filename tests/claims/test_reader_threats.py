"""Threats to the data readers: one verdict for one line, whatever its neighbours; one bad
row never stops the run.

The decision-log read parses a block by one of two paths (a compiled extraction, a line
parser), chosen by what the other lines of the block hold.
The corpus below places each odd line beside each kind of neighbour and asserts that the
odd line gets the same verdict (read, skipped as corrupt, or the read refused naming it)
and the same values in every placement, read column by column or line by line, with and
without skipping corrupt lines. The verdicts are stated by the rule (strict JSON lines,
RFC 8259), not by any reader, so the test outlives the readers.
"""

from __future__ import annotations

import json
import math
import re
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from amv_calib.claims import load_claims, read_uses
from amv_calib.claims._outcomes import load_outcomes
from amv_calib.exceptions import DataContractError
from amv_calib.gate import LogReadStats, read_decision_log

_PREMISE = ('{"id":"p0","claim_id":"c1","recency_hours":RH,"source_trust_score":0.5,'
            '"model_confidence":0.5,"contradiction_flag":false,"p":0.25PX}')


def _line(action: str = "a", *, extra: str = "", premise: str = "", rh: str = "5.0",
          tool: str = "t", time: str = '"2026-01-01T00:00:00Z"') -> bytes:
    """A decision record as raw bytes (``action`` and the others inserted as JSON text)."""
    prem = _PREMISE.replace("RH", rh).replace("PX", premise)
    return (f'{{"time":{time},"action_id":"{action}","tool_name":"{tool}",'
            f'"premises":[{prem}]{extra}}}').encode()


_SURROGATE_ACTION = _line("\\ud800")
#: The odd lines: (name, bytes, verdict, recency_hours if read). ``corrupt``: not a line of
#: the contract (skipped with skip, the read refused naming its line without).
ODD: list[tuple[str, bytes, str, float | None]] = [
    ("Inf in an unknown field", _line(extra=',"voi2":Inf'), "corrupt", None),
    ("-Inf", _line(extra=',"voi2":-Inf'), "corrupt", None),
    ("Infinity", _line(extra=',"voi2":Infinity'), "corrupt", None),
    ("-Infinity", _line(extra=',"voi2":-Infinity'), "corrupt", None),
    ("NaN", _line(extra=',"voi2":NaN'), "corrupt", None),
    ("-NaN", _line(extra=',"voi2":-NaN'), "corrupt", None),
    ("NaN as a feature", _line(rh="NaN"), "corrupt", None),
    ("Infinity as a feature", _line(rh="Infinity"), "corrupt", None),
    ("-0", _line(rh="-0"), "read", 0.0),
    ("-0.0", _line(rh="-0.0"), "read", 0.0),
    ("1e400", _line(rh="1e400"), "read", math.inf),
    ("-1e400", _line(rh="-1e400"), "read", -math.inf),
    ("401-digit integer", _line(rh="1" + "0" * 400), "read", math.inf),
    ("401-digit negative integer", _line(rh="-1" + "0" * 400), "read", -math.inf),
    ("401-digit integer, unknown field", _line(extra=',"z":1' + "0" * 400), "read", 5.0),
    ("1e400, unknown field", _line(extra=',"z":1e400'), "read", 5.0),
    ("lone surrogate in action_id", _SURROGATE_ACTION, "corrupt", None),
    ("lone low surrogate in tool_name", _line(tool="x\\udc00"), "corrupt", None),
    ("lone surrogate in a premise field", _line(premise=',"note":"\\ud800"'), "corrupt",
     None),
    ("lone surrogate in a premise id", _line().replace(b'"p0"', b'"\\ud800"'), "corrupt",
     None),
    ("lone surrogate in an unknown field", _line(extra=',"z":"\\udbff"'), "corrupt", None),
    ("lone surrogate in an unknown key", _line(extra=',"\\ud800":1'), "corrupt", None),
    ("surrogate as raw bytes", _line("RAW").replace(b"RAW", b"\xed\xa0\x80"), "corrupt",
     None),
    ("bytes that are not UTF-8", _line("RAW").replace(b"RAW", b"\xff"), "corrupt", None),
    ("a surrogate pair", _line("\\ud83d\\ude00"), "read", 5.0),
    ("an escaped backslash before u", _line("\\\\ud800"), "read", 5.0),
    ("key given twice, escaped", _line(extra=',"action_\\u0069d":"x"'), "corrupt", None),
    ("key given twice in a premise", _line(premise=',"\\u0070":0.9'), "corrupt", None),
    ("BOM", b"\xef\xbb\xbf" + _line(), "read", 5.0),
    ("NUL in a string", _line("a\x00b"), "corrupt", None),
    ("CRLF", _line() + b"\r", "read", 5.0),
]
#: Neighbours: a clean line, one with a verifier call, one with offered verifiers, one that
#: sends the block to the line parser (a time given as a number), one with bytes >= 0x80
#: (the same), a corrupt line.
NEIGHBOURS: dict[str, bytes | None] = {
    "alone": None,
    "clean": _line("n"),
    "verifier call": _line("n", extra=(
        ',"verifier_calls":[{"verifier":"v","reliability":0.9,"signals":{"p0":true}}]')),
    "offered verifiers": _line("n", extra=(
        ',"verifiers":[{"id":"v","resolves_premise_ids":["p0"],"execution_cost":0.2,'
        '"symmetric_reliability":0.9}]')),
    "line parser": _line("n", time="1767225600"),
    "non-ASCII": _line("n\u00e9"),
    "corrupt": b'{"time":',
}


def _verdict(path: Path, on_corrupt: str, columnar: bool, odd_line: int,
             offers: bool = False) -> Any:
    """What the read makes of line ``odd_line``: its values if read, ``corrupt`` if skipped
    (or the read refused naming it); None if a neighbour stopped the read first."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            r = read_uses(path, on_corrupt=on_corrupt,  # type: ignore[arg-type]
                          columnar=columnar, offers=offers)
        except DataContractError as exc:
            named = re.search(r"line (\d+)", str(exc))
            assert named is not None, str(exc)
            return "corrupt" if int(named.group(1)) == odd_line else None
    assert r.stats[0].lines >= odd_line
    wide = r.wide()
    row = wide[wide["line"] == odd_line]
    if row.empty:
        assert odd_line in r.stats[0].corrupt_lines
        return "corrupt"
    rh = float(row["recency_hours"].iloc[0])
    return ("read", str(row["action_id"].iloc[0]), rh, math.copysign(1.0, rh))


@pytest.mark.parametrize(("name", "odd", "verdict", "rh"), ODD, ids=[o[0] for o in ODD])
def test_one_verdict_for_one_line_whatever_its_neighbours(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, odd: bytes,
        verdict: str, rh: float | None) -> None:
    import amv_calib.claims._logread as logread

    seen: dict[Any, list[str]] = {}
    for nb_name, nb in NEIGHBOURS.items():
        lines = [odd] if nb is None else [nb, odd, nb]
        odd_line = 1 if nb is None else 2
        path = tmp_path / "d.jsonl"
        path.write_bytes(b"\n".join(lines) + b"\n")
        for block_bytes in (1 << 20, len(lines[0]) + 1):  # one block; a block a line
            monkeypatch.setattr(logread, "_BLOCK_BYTES", block_bytes)
            for on_corrupt in ("skip", "raise"):
                # the line parser reads the offered verifiers or not alike; the compiled
                # extraction reads them with offers
                for columnar, offers in ((True, False), (True, True), (False, False)):
                    got = _verdict(path, on_corrupt, columnar, odd_line, offers)
                    if got is None:  # the corrupt neighbour, read first, stopped it
                        assert nb_name == "corrupt" and on_corrupt == "raise"
                        continue
                    seen.setdefault(got, []).append(
                        f"{nb_name}/{block_bytes}/{on_corrupt}/{columnar}/{offers}")
    assert len(seen) == 1, seen
    (got,) = seen
    if verdict == "corrupt":
        assert got == "corrupt"
    else:
        assert got[0] == "read" and got[2] == rh
        assert got[3] == math.copysign(1.0, rh)  # -0 is 0.0, on every path


def test_skip_corrupt_keeps_every_good_line(tmp_path: Path) -> None:
    """Every odd line of the corpus in one log, between clean lines: the corrupt ones are
    skipped and named, every other line is read, on both read modes."""
    lines: list[bytes] = []
    want_read: list[int] = []
    want_corrupt: list[int] = []
    for i, (_, odd, verdict, _) in enumerate(ODD):
        lines += [_line(f"g{i}"), odd]
        want_read.append(2 * i + 1)
        (want_read if verdict == "read" else want_corrupt).append(2 * i + 2)
    path = tmp_path / "d.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n" + _line("torn")[:30])
    for columnar in (True, False):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            r = read_uses(path, on_corrupt="skip", columnar=columnar)
        assert r.wide()["line"].tolist() == sorted(want_read)
        assert r.stats[0].corrupt_lines == [*want_corrupt, len(lines) + 1]
        assert r.stats[0].torn == 1


# ---------------------------------------------------------------------------------------------
# One bad row never stops the run: lone surrogates in outcome and claim rows
# ---------------------------------------------------------------------------------------------
_OUTCOME = '{"claim_id":"CID","time":"2026-01-01T00:00:00Z","violated":true EXTRA}'


def _outcome(cid: str, extra: str = "") -> bytes:
    return _OUTCOME.replace("CID", cid).replace(" EXTRA", extra).encode()


@pytest.mark.parametrize("odd", [
    _outcome("\\ud800"), _outcome("c", ',"note":"\\udc00"'), _outcome("c", ',"\\ud800":1'),
    _outcome("c", ',"action_id":"\\ud800"'), _outcome("c", ',"more":{"x":["\\udfff"]}'),
], ids=["claim_id", "unknown field", "unknown key", "action_id", "nested"])
@pytest.mark.parametrize("neighbour", [b"", _outcome("n\u00e9"),
                                       b'{"claim_id":'], ids=["clean", "non-ASCII", "corrupt"])
def test_a_lone_surrogate_in_an_outcome_row_rejects_that_row(
        tmp_path: Path, odd: bytes, neighbour: bytes) -> None:
    good = [_outcome("g1"), _outcome("g2")]
    lines = [good[0], odd, *([neighbour] if neighbour else []), good[1]]
    path = tmp_path / "o.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    valid, invalid = load_outcomes(path)
    assert {"g1", "g2"} <= set(valid["claim_id"])
    bad = invalid[invalid["row"] == 2]
    assert len(bad) == 1 and "lone surrogate" in str(bad["reason"].iloc[0])
    # the same row of a JSON array of rows
    array = tmp_path / "o.json"
    array.write_bytes(b"[" + b",".join([good[0], odd, good[1]]) + b"]")
    valid, invalid = load_outcomes(array)
    assert sorted(valid["claim_id"]) == ["g1", "g2"]
    assert invalid["row"].tolist() == [2]
    assert "lone surrogate" in str(invalid["reason"].iloc[0])


def test_a_lone_surrogate_in_an_ingest_row_rejects_that_row(tmp_path: Path) -> None:
    good = {"claim_id": "c1", "timestamp": "2026-01-01T00:00:00Z", "recency_hours": 1,
            "source_trust_score": 0.5, "model_confidence": 0.5, "contradiction_flag": 0,
            "violated": 0}

    def row(cid: str, extra: str = "") -> str:
        return json.dumps({**good, "claim_id": "CID"})[:-1].replace("CID", cid) + extra + "}"

    lines = [row("c1"), row("\\ud800"), row("c3", ',"note":"\\udc00"'),
             row("c4", ',"\\ud800":1'), row("c5", ',"statement":"x\\ud83d\\ude00"'),
             row("c6", ',"statement":"\\\\ud800"')]
    path = tmp_path / "c.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    claims, rejects = load_claims(path)
    assert list(claims.index) == [1, 5, 6]
    assert claims.loc[5, "statement"] == "x\U0001F600"
    assert claims.loc[6, "statement"] == "\\ud800"  # an escaped backslash: plain text
    assert rejects["row"].tolist() == [2, 3, 4]
    assert all("lone surrogate" in r for r in rejects["reason"])


def test_label_skip_corrupt_reads_past_a_lone_surrogate(tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]
                                                        ) -> None:
    """The CLI end to end: no traceback; without --skip-corrupt a clear error naming the
    line, with it the other lines are labelled."""
    from amv_calib.cli import main

    log = tmp_path / "d.jsonl"
    log.write_bytes(b"\n".join([_line("a1"), _SURROGATE_ACTION, _line("a3",
                                extra=',"voi2":Inf'), _line("a4", rh="1" + "0" * 400),
                                _line("a5", rh="-0")]) + b"\n")
    out = tmp_path / "o.jsonl"
    out.write_bytes(_outcome("c1", ',"action_id":"a1"') + b"\n"
                    + _outcome("\\ud800") + b"\n")
    args = ["label", "--decisions", str(log), "--outcomes", str(out), "--out",
            str(tmp_path / "claims.parquet")]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "line 2" in err and "Traceback" not in err
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        code = main([*args, "--skip-corrupt"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "Traceback" not in captured.err
    import pandas as pd

    claims = pd.read_parquet(tmp_path / "claims.parquet")
    assert claims["action_id"].astype(str).tolist() == ["a1"]
    assert np.all(np.isfinite(claims["recency_hours"]))


# -- a fragment with a record glued onto it --------------------------------------------------------
def _glued_log(tmp_path: Path) -> Path:
    """A log an older writer left: a fragment with the next record glued onto it."""
    from amv_calib.gate import encode_record

    rec = {"time": "2026-01-01T00:00:00Z", "action_id": "a", "theta": 5.0, "kappa": 1.0,
           "premises": [{"id": "p", "claim_id": "c", "recency_hours": 1.0,
                         "source_trust_score": 0.5, "model_confidence": 0.5,
                         "contradiction_flag": False, "p": 0.1}], "regime": "PROCEED"}
    fragment = encode_record({**rec, "action_id": "lost"})[:70]
    log = tmp_path / "glued.jsonl"
    log.write_bytes(encode_record(rec) + fragment + encode_record({**rec, "action_id": "b"})
                    + encode_record({**rec, "action_id": "c"}))
    return log


def test_reader_resynchronises_at_the_record_inside_a_corrupt_line(tmp_path: Path) -> None:
    from amv_calib.claims import read_uses

    log = _glued_log(tmp_path)
    assert log.read_bytes().count(b"\n") == 3  # the fragment and b share line 2
    with pytest.raises(DataContractError, match=r"line 2 starts with 70 bytes that are not a "
                                                r"record .* before a whole record"):
        list(read_decision_log(log))
    stats = LogReadStats()
    with pytest.warns(UserWarning, match="line 2: skipped a 70-byte fragment"):
        records = list(read_decision_log(log, on_corrupt="skip", stats=stats))
    assert [r["action_id"] for r in records] == ["a", "b", "c"]
    assert (stats.lines, stats.records, stats.corrupt, stats.fragments) == (3, 3, 0, 1)
    for columnar in (True, False):  # label reads it the same way
        with pytest.warns(UserWarning, match="70-byte fragment"):
            log_entries = read_uses(log, on_corrupt="skip", columnar=columnar)
        assert log_entries.wide()["action_id"].astype(str).tolist() == ["a", "b", "c"]
        assert log_entries.stats[0].fragments == 1


# -- a decision-log or outcome record giving a key twice -------------------------------------------
def test_decision_log_and_outcome_records_giving_a_key_twice_are_refused(
        tmp_path: Path) -> None:
    from amv_calib.claims import load_outcomes, read_uses

    record = {"time": "2026-01-01T00:00:00Z", "action_id": "a", "theta": 5.0, "kappa": 1.0,
              "premises": [{"id": "p", "claim_id": "c", "recency_hours": 1.0,
                            "source_trust_score": 0.5, "model_confidence": 0.5,
                            "contradiction_flag": False, "p": 0.1}], "regime": "PROCEED"}
    line = json.dumps(record)
    for twice in (line[:-1] + ', "regime": "ABSTAIN"}',  # a key the join reads
                  line[:-1] + ', "reason": "x", "reason": "y"}'):  # and one it does not
        log = tmp_path / "decisions.jsonl"
        log.write_text(line + "\n" + twice + "\n" + line.replace('"a"', '"b"') + "\n")
        with pytest.raises(DataContractError, match=r"line 2 is not a JSON object \(key "):
            list(read_decision_log(log))
        for columnar in (True, False):  # the fast reader and the line reader agree
            with pytest.raises(DataContractError, match=r"line 2 is not a JSON object"):
                read_uses(log, columnar=columnar)
            with pytest.warns(UserWarning, match="skipped corrupt line 2"):
                entries = read_uses(log, columnar=columnar, on_corrupt="skip")
            assert sorted(entries.wide()["action_id"].astype(str)) == ["a", "b"]
    outcomes = tmp_path / "outcomes.jsonl"
    outcomes.write_text('{"claim_id": "c", "time": "2026-01-02T00:00:00Z", "violated": false}\n'
                        '{"claim_id": "c", "time": "2026-01-02T00:00:00Z", "violated": false,'
                        ' "violated": true}\n')
    valid, invalid = load_outcomes(outcomes)
    assert len(valid) == 1 and invalid["row"].tolist() == [2]
    assert "key 'violated' appears twice" in invalid["reason"].iloc[0]
