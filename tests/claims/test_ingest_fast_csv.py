"""The fast CSV pass (pyarrow parses numbers, flags and timestamps itself) against the text path.

Every test reads the same file twice, once through
:class:`amv_calib.claims._ingest_fastcsv._FastCsv` and once with it switched off (the streaming
text reader, which validates every field from its text), and requires the same claims, the
same rejects and the same output bytes. Spies check that the fast pass really ran (typed
chunks, fallbacks), and the expected outcomes of the bad values are written out by hand.
"""

from __future__ import annotations

import csv
import hashlib
import io
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import amv_calib.claims._arrow as arrow
import amv_calib.claims._ingest_fastcsv as ingest_fastcsv
import amv_calib.claims._ingest_read as ingest_read
from amv_calib.claims._ingest import ingest_file, iter_claim_chunks, load_claims
from amv_calib.claims._ingest_chunk import _Chunk
from amv_calib.claims._ingest_dedupe import _GOLDEN, _MUL, _string_hash
from amv_calib.claims._ingest_fastcsv import _FastCsv
from amv_calib.claims._ingest_parse import _FALSE_FAST, _TRUE_FAST, _empty_mask
from amv_calib.exceptions import DataContractError

HEADER = ["claim_id", "timestamp", "recency_hours", "source_trust_score", "model_confidence",
          "contradiction_flag", "violated", "source", "p_true"]


def _good(i: int) -> list[str]:
    return [f"c{i}", f"2026-01-01T00:00:{i % 60:02d}Z", f"{i % 97}.25", "0.5", "0.75",
            "true" if i % 2 else "false", "false" if i % 3 else "true", "chat", "0.125"]


def _write(path: Path, rows: list[list[str]], *, header: list[str] | None = None,
           newline: str = "\n") -> Path:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator=newline)
    w.writerow(header or HEADER)
    w.writerows(rows)
    path.write_bytes(buf.getvalue().encode("utf-8"))
    return path


@dataclass
class _Spy:
    typed: int = 0  # chunks handed over parsed by the fast pass
    text: int = 0  # chunks the fast pass read as text
    fallbacks: int = 0  # typed chunks that were validated from their text after all
    stopped_at: int | None = None  # first row left to the text reader, if the pass stopped


@pytest.fixture
def spy(monkeypatch: pytest.MonkeyPatch) -> _Spy:
    s = _Spy()
    chunk_of = _FastCsv._chunk
    chunks_of = _FastCsv.chunks

    def chunk(self: _FastCsv, pieces: Any, rows: Any) -> _Chunk:
        c = chunk_of(self, pieces, rows)
        if c.as_text is None:
            s.text += 1
            return c
        s.typed += 1
        as_text = c.as_text

        def counted() -> dict[str, pa.Array]:
            s.fallbacks += 1
            return as_text()

        c.as_text = counted
        return c

    def chunks(self: _FastCsv) -> Iterator[_Chunk]:
        yield from chunks_of(self)
        if not self.complete:
            s.stopped_at = self.next_row

    monkeypatch.setattr(_FastCsv, "_chunk", chunk)
    monkeypatch.setattr(_FastCsv, "chunks", chunks)
    return s


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _both(src: Path, tmp: Path, monkeypatch: pytest.MonkeyPatch, chunksize: int = 1000,
          ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """load_claims / ingest_file through the fast pass and the text path; asserts they agree."""
    fast = load_claims(src, chunksize=chunksize)
    fast_sum = ingest_file(src, tmp / "fast", chunksize=chunksize).to_dict()
    with monkeypatch.context() as m:
        m.setattr(ingest_read, "_FAST_CSV", False)
        slow = load_claims(src, chunksize=chunksize)
        slow_sum = ingest_file(src, tmp / "slow", chunksize=chunksize).to_dict()
    pd.testing.assert_frame_equal(fast[0], slow[0])
    pd.testing.assert_frame_equal(fast[1], slow[1])
    assert {**fast_sum, "out": None} == {**slow_sum, "out": None}
    for name in ("claims.parquet", "rejects.csv"):
        assert _digest(tmp / "fast" / name) == _digest(tmp / "slow" / name), name
    return fast


@pytest.fixture
def small_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    # Many blocks and chunks from a small file (chunks then span blocks).
    monkeypatch.setattr(ingest_fastcsv, "_FAST_BLOCK", 4096)
    monkeypatch.setattr(ingest_fastcsv, "_FIRST_BLOCK", 1024)


# -- clean files take the fast pass ----------------------------------------------------------

def test_clean_file_is_parsed_typed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                    spy: _Spy, small_blocks: None) -> None:
    src = _write(tmp_path / "c.csv", [_good(i) for i in range(3000)])
    claims, rejects = _both(src, tmp_path, monkeypatch, chunksize=700)
    # 5 chunks, read twice (load_claims and ingest_file)
    assert (spy.typed, spy.text, spy.fallbacks, spy.stopped_at) == (10, 0, 0, None)
    assert len(claims) == 3000 and rejects.empty
    row6 = claims.loc[6]  # _good(5)
    assert row6["recency_hours"] == 5.25 and row6["p_true"] == 0.125
    assert row6["timestamp"] == pd.Timestamp("2026-01-01T00:00:05Z")
    assert bool(row6["contradiction_flag"]) and not row6["violated"]
    assert bool(claims.loc[7, "violated"]) and not claims.loc[7, "contradiction_flag"]
    assert str(claims["timestamp"].dtype) == "datetime64[us, UTC]"


# -- one value in a typed column: both paths give the same outcome ------------------------------

FLOATS = ["0.5", "1e3", "1E-3", " 0.5 ", "0.5 ", "\t0.25", "+0.5", ".5", "5.", "-0", "0", "1",
          "NaN", "nan", "-nan", "inf", "-inf", "Infinity", "1e400", "", " ", "abc", "0x1",
          "1.0001", "-3", "1_0", "\u00a00.5", "１", "None", "null", "N/A"]
BOOLS = ["true", "false", "TRUE", "False", "yes", "No", "Y", "n", "t", "F", "1", "0", " y ",
         "TrUe", "yEs", "maybe", "2", "", " ", "on", "NULL"]
TIMESTAMPS = ["2026-01-01T00:00:00Z", "2026-01-01 00:00:00+01:00", "2026-01-01T00:00:00+0530",
              "2026-01-01T00Z", "2026-01-01T00:00:00.123Z", "2026-01-01T00:00:00.123456789Z",
              "2026-01-01T00:00:00", "2026-01-01", " 2026-01-01T00:00:00Z", "1767225600",
              "1767225600000", "1767225600.5", "-1", "1e15", "nan", "inf", "", " ",
              "yesterday", "2026-02-30", "2026-01-01t00:00:00z", "0001-01-01T00:00:00Z",
              "9999-12-31T23:59:59Z", "NaT", "null"]
CASES = ([("recency_hours", v) for v in FLOATS] + [("source_trust_score", v) for v in FLOATS]
         + [("p_true", v) for v in FLOATS] + [("violated", v) for v in BOOLS]
         + [("contradiction_flag", v) for v in BOOLS] + [("timestamp", v) for v in TIMESTAMPS]
         + [("claim_id", v) for v in ["", " ", "\t", "x y"]] + [("source", v) for v in ["", " "]])


@pytest.mark.parametrize(("column", "value"), CASES, ids=[f"{c}={v!r}" for c, v in CASES])
def test_one_value_same_outcome_on_both_paths(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spy: _Spy, column: str, value: str
) -> None:
    rows = [_good(i) for i in range(30)]
    rows[17][HEADER.index(column)] = value
    claims, rejects = _both(_write(tmp_path / "v.csv", rows), tmp_path, monkeypatch)
    assert len(claims) + len(rejects) == 30
    assert spy.stopped_at is None  # no quote, no malformed row: the fast pass read it all
    if len(rejects):
        assert rejects["row"].tolist() == [18]
        assert rejects[column].tolist() == [value]  # the original text, untouched


REASONS = [
    ("recency_hours", "NaN", "recency_hours=NaN is not finite"),
    ("recency_hours", "1e400", "recency_hours=1e400 is not finite"),
    ("recency_hours", "-3", "recency_hours=-3 is negative"),
    ("recency_hours", "abc", "recency_hours='abc' is not a number"),
    ("recency_hours", "", "recency_hours is empty"),
    ("source_trust_score", " 1.5 ", "source_trust_score= 1.5  outside [0, 1]"),
    ("violated", "", "violated is empty"),
    ("violated", "maybe", "violated='maybe' is not a boolean (true/false, yes/no, t/f, 1/0)"),
    ("timestamp", "1e15", "timestamp=1e15 is out of range (years 1 to 9999)"),
    ("p_true", "nan", "p_true=nan is not finite"),
]


@pytest.mark.parametrize(("column", "value", "reason"), REASONS,
                         ids=[f"{c}={v!r}" for c, v, _ in REASONS])
def test_bad_value_in_a_late_chunk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spy: _Spy, small_blocks: None,
    column: str, value: str, reason: str,
) -> None:
    rows = [_good(i) for i in range(3000)]
    rows[2500][HEADER.index(column)] = value
    claims, rejects = _both(_write(tmp_path / "late.csv", rows), tmp_path, monkeypatch,
                            chunksize=700)
    assert rejects["row"].tolist() == [2501]
    assert rejects["reason"].tolist() == [reason]
    assert rejects[column].tolist() == [value]
    assert len(claims) == 2999 and 2501 not in claims.index
    assert spy.typed >= 3  # the chunks before it were parsed typed
    assert spy.stopped_at is None


def test_optional_empty_number_is_accepted_typed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spy: _Spy
) -> None:
    rows = [_good(i) for i in range(20)]
    rows[3][HEADER.index("p_true")] = ""
    claims, rejects = _both(_write(tmp_path / "o.csv", rows), tmp_path, monkeypatch)
    assert rejects.empty and bool(claims["p_true"].isna()[4])
    assert (spy.typed, spy.fallbacks) == (2, 0)  # one chunk, read twice


def test_duplicate_in_a_late_chunk_names_the_first_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spy: _Spy, small_blocks: None
) -> None:
    rows = [_good(i) for i in range(3000)]
    rows[2600] = list(rows[10])  # every field parses: only the key repeats
    claims, rejects = _both(_write(tmp_path / "d.csv", rows), tmp_path, monkeypatch,
                            chunksize=700)
    assert rejects["row"].tolist() == [2601]
    assert rejects["reason"].tolist() == ["duplicate (claim_id, timestamp) of row 11"]
    assert rejects["recency_hours"].tolist() == [rows[10][2]]
    # found by the consumer, which then validated the text (of each of the two reads)
    assert spy.fallbacks == 2


def test_many_bad_rows_read_as_text_then_typed_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spy: _Spy, small_blocks: None
) -> None:
    rows = [_good(i) for i in range(6000)]
    for i in range(0, 1500, 50):
        rows[i][2] = "-1"
    _, rejects = _both(_write(tmp_path / "m.csv", rows), tmp_path, monkeypatch, chunksize=500)
    assert len(rejects) == 30
    assert spy.text > 0 and spy.typed > 0


@pytest.mark.parametrize("stamp", ["2026-01-01T00:00:00", "1767225600000"],
                         ids=["naive", "epoch-ms"])
def test_timestamps_pyarrow_does_not_parse_typed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spy: _Spy, small_blocks: None, stamp: str
) -> None:
    rows = [_good(i) for i in range(2000)]
    for r in rows:
        r[1] = stamp
        r[0] = f"id{len(r[0])}{r[0]}"
    claims, rejects = _both(_write(tmp_path / "t.csv", rows), tmp_path, monkeypatch,
                            chunksize=600)
    assert rejects.empty
    assert (claims["timestamp"] == pd.Timestamp("2026-01-01", tz="UTC")).all()
    assert spy.text > 0


# -- where the fast pass stops, the text reader takes over at the same row ----------------------

def test_quote_in_a_late_block(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spy: _Spy,
                               small_blocks: None) -> None:
    rows = [_good(i) for i in range(3000)]
    rows[2800][7] = 'said "hi",\nthen left'
    claims, rejects = _both(_write(tmp_path / "q.csv", rows), tmp_path, monkeypatch,
                            chunksize=700)
    assert rejects.empty and claims.loc[2801, "source"] == 'said "hi",\nthen left'
    assert spy.stopped_at is not None and spy.stopped_at > 1


def test_malformed_row_in_a_late_block(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                       spy: _Spy, small_blocks: None) -> None:
    src = _write(tmp_path / "m.csv", [_good(i) for i in range(3000)])
    lines = src.read_text().splitlines(keepends=True)
    lines[2700] = "c_short,2026-01-01T00:00:00Z\n"
    src.write_text("".join(lines))
    claims, rejects = _both(src, tmp_path, monkeypatch, chunksize=700)
    assert rejects["row"].tolist() == [2700]
    assert rejects["reason"].tolist() == ["row has 2 fields, header has 9"]
    assert len(claims) == 2999
    assert spy.stopped_at is not None and spy.stopped_at > 1


def test_invalid_utf8_in_a_late_block(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                      small_blocks: None) -> None:
    src = _write(tmp_path / "u.csv", [_good(i) for i in range(3000)])
    data = src.read_bytes()
    src.write_bytes(data[:-500] + b"\xff" + data[-500:])
    errors = []
    for fast in (True, False):
        with monkeypatch.context() as m:
            m.setattr(ingest_read, "_FAST_CSV", fast)
            with pytest.raises(DataContractError, match="cannot read u.csv as CSV") as e:
                load_claims(src, chunksize=700)
            errors.append(str(e.value))
    assert errors[0] == errors[1]


@pytest.mark.parametrize("layout", ["crlf", "bom", "blank-lines", "no-final-newline",
                                    "non-ascii", "cr-only", "aliases+extra", "header-only"])
def test_file_layouts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, small_blocks: None,
                      layout: str) -> None:
    rows = [_good(i) for i in range(1500)]
    header = None
    if layout == "non-ascii":
        rows[1400][7] = "café ☕"
    if layout == "aliases+extra":
        header = ["claimId", "timestamp", "recencyHours", "sourceTrustScore",
                  "modelConfidence", "contradictionFlag", "violated", "zzz", "p_true"]
    newline = {"crlf": "\r\n", "cr-only": "\r"}.get(layout, "\n")
    src = _write(tmp_path / "l.csv", [] if layout == "header-only" else rows, header=header,
                 newline=newline)
    data = src.read_bytes()
    if layout == "bom":
        data = b"\xef\xbb\xbf" + data
    if layout == "blank-lines":
        data = data.replace(b"\nc700,", b"\n\n\nc700,").replace(b"\nc9,", b"\n\nc9,")
    if layout == "no-final-newline":
        data = data.rstrip(b"\n")
    src.write_bytes(data)
    claims, rejects = _both(src, tmp_path, monkeypatch, chunksize=400)
    assert len(claims) == (0 if layout == "header-only" else 1500) and rejects.empty


# -- the assumption the fast pass rests on ---------------------------------------------------

_TYPES = {"recency_hours": pa.float64(), "violated": pa.bool_(),
          "timestamp": pa.timestamp("us", tz="UTC")}
_ALPHABET = "0123456789.eE+-:TZ tnaifyesrulNFYT\t"


def _typed_parse(column: str, text: str) -> Callable[[], Any] | None:
    """What pyarrow's typed CSV parsing (the fast pass's options) makes of ``text``."""
    data = f"x\n{text}\n".encode()
    try:
        table = pacsv.read_csv(
            pa.py_buffer(data),
            convert_options=pacsv.ConvertOptions(
                column_types={"x": _TYPES[column]}, strings_can_be_null=False,
                quoted_strings_can_be_null=False, null_values=[""],
                true_values=_TRUE_FAST.to_pylist(),
                false_values=_FALSE_FAST.to_pylist()),
        )
    except pa.ArrowInvalid:
        return None
    if table.num_rows == 0:  # a blank line
        return None
    value = table["x"][0].as_py()
    return lambda: value


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=st.text(alphabet=_ALPHABET, min_size=1, max_size=26),
       column=st.sampled_from(sorted(_TYPES)))
def test_typed_parse_accepts_only_what_the_text_path_accepts(
    tmp_path_factory: pytest.TempPathFactory, text: str, column: str
) -> None:
    """Whatever pyarrow parses typed, the text path accepts too, with the same value; where
    pyarrow gives a value the text path rejects (NaN, out of range), the chunk falls back."""
    typed = _typed_parse(column, text)
    if typed is None:
        return
    d = tmp_path_factory.mktemp("typed")
    row = _good(1)
    row[HEADER.index(column)] = text
    with pytest.MonkeyPatch.context() as m:
        m.setattr(ingest_read, "_FAST_CSV", False)
        claims, rejects = load_claims(_write(d / "t.csv", [row]))
    value = typed()
    if len(claims):
        got = claims.iloc[0][column]
        if column == "timestamp":
            assert got == pd.Timestamp(value)
        else:
            assert got == value
    else:  # rejected by the text path for its value, not for its form
        assert value is None or column != "violated"
        reason = rejects["reason"].iloc[0]
        assert "not a number" not in reason and "not ISO-8601" not in reason
        assert "not a boolean" not in reason


_CELL = st.one_of(st.sampled_from(["0.5", "1e-1", " 0.25", "NaN", "", "-1", "2", "x", "inf"]),
                  st.floats(0, 1, allow_nan=False).map(repr))
_FLAG = st.sampled_from(["true", "false", "yes", "N", "1", "", "maybe", " t "])
_STAMP = st.sampled_from(["2026-01-01T00:00:00Z", "2026-01-01T00:00:01Z", "2026-01-01T00:00:00",
                          "1767225600", "", "bad", "2026-01-01T01:00:00+01:00"])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=st.lists(st.tuples(st.sampled_from(["a", "b", "c", "d", ""]), _STAMP, _CELL, _CELL,
                               _CELL, _FLAG, _FLAG), min_size=1, max_size=120),
       clean_prefix=st.integers(0, 300), chunksize=st.sampled_from([7, 50, 1000]))
@pytest.mark.slow
def test_property_fast_and_text_paths_agree(
    tmp_path_factory: pytest.TempPathFactory, rows: list[tuple[str, ...]], clean_prefix: int,
    chunksize: int,
) -> None:
    d = tmp_path_factory.mktemp("agree")
    body = [_good(i) for i in range(clean_prefix)] + [[*r, "chat", "0.5"] for r in rows]
    with pytest.MonkeyPatch.context() as m:
        m.setattr(ingest_fastcsv, "_FAST_BLOCK", 2048)
        m.setattr(ingest_fastcsv, "_FIRST_BLOCK", 512)
        _both(_write(d / "p.csv", body), d, m, chunksize=chunksize)


# -- shortcuts in the per-row checks keep their results ------------------------------------------

_MASK64 = (1 << 64) - 1


def _reference_hash(text: str) -> int:
    """The string hash written out for one string: 8-byte little-endian words, zero-padded."""
    data = text.encode("utf-8")
    h = (len(data) * int(_GOLDEN)) & _MASK64
    for k in range(0, len(data), 8):
        w = int.from_bytes(data[k:k + 8].ljust(8, b"\0"), "little")
        step = ((h ^ w) * int(_MUL)) & _MASK64
        h = step ^ (step >> 29)
    return h


@settings(max_examples=150, deadline=None)
@given(texts=st.one_of(
    st.lists(st.text(min_size=0, max_size=20), min_size=1, max_size=30),
    st.integers(0, 24).flatmap(lambda w: st.lists(
        st.text(alphabet="abcXYZ019-_", min_size=w, max_size=w), min_size=1, max_size=30))),
    start=st.integers(0, 3))
def test_string_hash_matches_its_definition(texts: list[str], start: int) -> None:
    arr = pa.array(["pad"] * start + texts, pa.large_string()).slice(start)
    got = _string_hash(arr).tolist()
    assert got == [_reference_hash(t) for t in texts]


@settings(max_examples=150, deadline=None)
@given(texts=st.lists(st.one_of(
    st.sampled_from(["", " ", "\t", "\u00a0", "\u3000 ", "\x1c", " a ", "a", "é", "\x7f"]),
    st.text(max_size=4)), min_size=1, max_size=40), start=st.integers(0, 2))
def test_empty_mask_shortcut_keeps_the_trim_result(texts: list[str], start: int) -> None:
    arr = pa.array(["x"] * start + texts, pa.large_string()).slice(start)
    nulls = arrow.null_mask(arr)
    expected = arrow.np_mask(pc.fill_null(pc.equal(pc.utf8_trim_whitespace(arr), ""), False))
    assert _empty_mask(arr, nulls).tolist() == expected.tolist()


def test_empty_mask_shortcut_on_mostly_plain_ids() -> None:
    texts = ["clm-1"] * 50 + ["", " ", "\u00a0", " x", "\u3000"] + ["clm-2"] * 50
    arr = pa.array(texts, pa.large_string())
    got = _empty_mask(arr, arrow.null_mask(arr))
    assert np.flatnonzero(got).tolist() == [50, 51, 52, 54]


def test_stopping_early_leaves_no_thread_behind(tmp_path: Path, small_blocks: None) -> None:
    src = _write(tmp_path / "s.csv", [_good(i) for i in range(5000)])
    before = set(threading.enumerate())
    chunks = iter_claim_chunks(src, chunksize=300)
    claims, rejects = next(chunks)
    chunks.close()  # type: ignore[attr-defined]
    assert claims.num_rows == 300 and rejects.num_rows == 0
    assert claims.column("recency_hours").num_chunks == 1  # contiguous, as before
    for t in set(threading.enumerate()) - before:
        t.join(timeout=10)
        assert not t.is_alive(), t.name


def test_file_truncated_while_read_ends_the_read_without_crashing(
        tmp_path: Path, small_blocks: None, monkeypatch: pytest.MonkeyPatch) -> None:
    # The fast pass reads blocks (it does not map the file, which would end the process
    # with SIGBUS here): a file cut short mid-read (logrotate's copytruncate) just ends early.
    src = _write(tmp_path / "t.csv", [_good(i) for i in range(3000)])
    size = src.stat().st_size
    real_read = _FastCsv._read
    calls = []

    def read(self: Any, *args: Any, **kwargs: Any) -> pa.Table:
        if not calls:
            with open(src, "r+b") as fh:
                fh.truncate(size // 2)
        calls.append(1)
        return real_read(self, *args, **kwargs)

    monkeypatch.setattr(_FastCsv, "_read", read)
    claims, rejects = load_claims(src, chunksize=700)
    assert 0 < len(claims) + len(rejects) < 3000
    assert len(rejects) <= 1  # at most the row the cut went through
