"""CSV files through the streaming text reader: layouts, late bad rows, reasons by hand.

Each test reads its file with ``load_claims`` and ``ingest_file`` and requires the same rows
and counts from both; the expected outcomes of the bad values are written out by hand.
"""

from __future__ import annotations

import csv
import io
import threading
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import amv_calib.claims._arrow as arrow
from amv_calib.claims._ingest import ingest_file, iter_claim_chunks, load_claims
from amv_calib.claims._ingest_dedupe import _GOLDEN, _MUL, _duplicates, _SeenKeys, _string_hash
from amv_calib.claims._ingest_parse import _empty_mask
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


def _both(src: Path, tmp: Path, chunksize: int = 1000) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``load_claims`` of ``src``; asserts that ``ingest_file`` wrote the same rows."""
    claims, rejects = load_claims(src, chunksize=chunksize)
    summary = ingest_file(src, tmp / "out", chunksize=chunksize, overwrite=True)
    assert (summary.accepted, summary.rejected) == (len(claims), len(rejects))
    assert summary.read == summary.accepted + summary.rejected
    written = pd.read_parquet(tmp / "out" / "claims.parquet")
    assert written["claim_id"].tolist() == claims["claim_id"].tolist()
    assert pd.read_csv(tmp / "out" / "rejects.csv")["row"].tolist() == rejects["row"].tolist()
    return claims, rejects


# -- a clean file ----------------------------------------------------------------------------

def test_clean_file_values(tmp_path: Path) -> None:
    src = _write(tmp_path / "c.csv", [_good(i) for i in range(3000)])
    claims, rejects = _both(src, tmp_path, chunksize=700)
    assert len(claims) == 3000 and rejects.empty
    row6 = claims.loc[6]  # _good(5)
    assert row6["recency_hours"] == 5.25 and row6["p_true"] == 0.125
    assert row6["timestamp"] == pd.Timestamp("2026-01-01T00:00:05Z")
    assert bool(row6["contradiction_flag"]) and not row6["violated"]
    assert bool(claims.loc[7, "violated"]) and not claims.loc[7, "contradiction_flag"]
    assert str(claims["timestamp"].dtype) == "datetime64[us, UTC]"


# -- one bad value far into the file ------------------------------------------------------------

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
def test_bad_value_in_a_late_chunk(tmp_path: Path, column: str, value: str, reason: str) -> None:
    rows = [_good(i) for i in range(3000)]
    rows[2500][HEADER.index(column)] = value
    claims, rejects = _both(_write(tmp_path / "late.csv", rows), tmp_path, chunksize=700)
    assert rejects["row"].tolist() == [2501]
    assert rejects["reason"].tolist() == [reason]
    assert rejects[column].tolist() == [value]  # the original text, untouched
    assert len(claims) == 2999 and 2501 not in claims.index


def test_optional_empty_number_is_accepted(tmp_path: Path) -> None:
    rows = [_good(i) for i in range(20)]
    rows[3][HEADER.index("p_true")] = ""
    claims, rejects = _both(_write(tmp_path / "o.csv", rows), tmp_path)
    assert rejects.empty and bool(claims["p_true"].isna()[4])


def test_duplicate_in_a_late_chunk_names_the_first_row(tmp_path: Path) -> None:
    rows = [_good(i) for i in range(3000)]
    rows[2600] = list(rows[10])  # every field parses: only the key repeats
    claims, rejects = _both(_write(tmp_path / "d.csv", rows), tmp_path, chunksize=700)
    assert rejects["row"].tolist() == [2601]
    assert rejects["reason"].tolist() == ["duplicate (claim_id, timestamp) of row 11"]
    assert rejects["recency_hours"].tolist() == [rows[10][2]]


@pytest.mark.parametrize("stamp", ["2026-01-01T00:00:00", "1767225600000"],
                         ids=["naive", "epoch-ms"])
def test_naive_and_epoch_milliseconds_timestamps(tmp_path: Path, stamp: str) -> None:
    rows = [_good(i) for i in range(2000)]
    for r in rows:
        r[1] = stamp
    claims, rejects = _both(_write(tmp_path / "t.csv", rows), tmp_path, chunksize=600)
    assert rejects.empty
    assert (claims["timestamp"] == pd.Timestamp("2026-01-01", tz="UTC")).all()


# -- quotes, malformed rows and bad text far into the file ---------------------------------------

def test_quote_in_a_late_row(tmp_path: Path) -> None:
    rows = [_good(i) for i in range(3000)]
    rows[2800][7] = 'said "hi",\nthen left'
    claims, rejects = _both(_write(tmp_path / "q.csv", rows), tmp_path, chunksize=700)
    assert rejects.empty and claims.loc[2801, "source"] == 'said "hi",\nthen left'


def test_malformed_row_in_a_late_chunk(tmp_path: Path) -> None:
    src = _write(tmp_path / "m.csv", [_good(i) for i in range(3000)])
    lines = src.read_text().splitlines(keepends=True)
    lines[2700] = "c_short,2026-01-01T00:00:00Z\n"
    src.write_text("".join(lines))
    claims, rejects = _both(src, tmp_path, chunksize=700)
    assert rejects["row"].tolist() == [2700]
    assert rejects["reason"].tolist() == ["row has 2 fields, header has 9"]
    assert len(claims) == 2999


def test_invalid_utf8_in_a_late_row(tmp_path: Path) -> None:
    src = _write(tmp_path / "u.csv", [_good(i) for i in range(3000)])
    data = src.read_bytes()
    src.write_bytes(data[:-500] + b"\xff" + data[-500:])
    with pytest.raises(DataContractError,
                       match=r"cannot read u.csv as CSV: line \d+ \(data row \d+\): a field is "
                             r"not valid UTF-8 text"):
        load_claims(src, chunksize=700)


@pytest.mark.parametrize("layout", ["crlf", "bom", "blank-lines", "no-final-newline",
                                    "non-ascii", "cr-only", "aliases+extra", "header-only"])
def test_file_layouts(tmp_path: Path, layout: str) -> None:
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
    claims, rejects = _both(src, tmp_path, chunksize=400)
    assert len(claims) == (0 if layout == "header-only" else 1500) and rejects.empty
    if layout == "non-ascii":
        assert claims.loc[1401, "source"] == "café ☕"
    if len(claims):
        assert claims["claim_id"].tolist() == [f"c{i}" for i in range(1500)]


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


@settings(max_examples=40, deadline=None)
@given(chunks=st.lists(st.lists(st.integers(0, 300), max_size=40), min_size=1, max_size=60))
def test_duplicates_across_many_chunks_name_the_first_row(chunks: list[list[int]]) -> None:
    # Enough chunks that the seen keys' sorted runs are merged, several times over.
    seen = _SeenKeys()
    first: dict[int, int] = {}
    row = 1
    for keys in chunks:
        k = np.asarray(keys, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
        rows = np.arange(row, row + len(keys), dtype=np.int64)
        ok = np.ones(len(keys), dtype=bool)
        dup_of, register = _duplicates(k, ok, ok, rows, seen)
        register()
        expected = []
        for key, r in zip(k.tolist(), rows.tolist(), strict=True):
            expected.append(first.get(key, 0))
            first.setdefault(key, r)
        assert dup_of.tolist() == expected
        row += len(keys)


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


def test_stopping_early_leaves_no_thread_behind(tmp_path: Path) -> None:
    src = _write(tmp_path / "s.csv", [_good(i) for i in range(5000)])
    before = set(threading.enumerate())
    chunks = iter_claim_chunks(src, chunksize=300)
    claims, rejects = next(chunks)
    chunks.close()  # type: ignore[attr-defined]
    assert claims.num_rows == 300 and rejects.num_rows == 0
    assert claims.column("recency_hours").num_chunks == 1  # contiguous
    for t in set(threading.enumerate()) - before:
        t.join(timeout=10)
        assert not t.is_alive(), t.name
