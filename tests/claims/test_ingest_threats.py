"""Attacks on ingest replayed: every row judged by its own values whatever its chunk or its
neighbours, impossible times and malformed files rejected with a reason, and rejects files
safe to open in a spreadsheet and lossless.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from threat_helpers import CLAIM_ROW

from amv_calib.exceptions import DataContractError


# -- silent data loss at ingest when columns appear late -------------------------------------------
def _late_column_records(n_early: int) -> list[dict[str, Any]]:
    """``n_early`` plain rows, then the rows the attack used: late optional columns with bad
    values, a soft-label pair, and a claimId spelling after claim_id."""
    out = [{**CLAIM_ROW, "claim_id": f"e{i}", "timestamp": f"2026-01-01T00:{i % 60:02d}:00Z"}
           for i in range(n_early)]
    out += [
        {**CLAIM_ROW, "claim_id": "bad-p", "p_true": 7, "label_weight": -1},
        {**CLAIM_ROW, "claim_id": "soft", "violated": True, "label_weight": 0.3},
        {**CLAIM_ROW, "claim_id": "soft", "violated": False, "label_weight": 0.7},
        {**{k: v for k, v in CLAIM_ROW.items() if k != "claim_id"}, "claimId": "camel",
         "statement": "late text"},
    ]
    return out


def _ingest_outputs(src: Path, out: Path, chunksize: int | None) -> tuple[bytes, bytes, Any]:
    from amv_calib.claims import DEFAULT_CHUNKSIZE, ingest_file

    s = ingest_file(src, out, chunksize=chunksize or DEFAULT_CHUNKSIZE)
    claims = pd.read_parquet(out / "claims.parquet")
    return (claims.to_csv(index=False).encode(), (out / "rejects.csv").read_bytes(),
            (s.read, s.accepted, s.rejected, s.ignored_columns))


def test_late_jsonl_columns_are_validated_in_every_row(tmp_path: Path) -> None:
    from amv_calib.claims import load_claims

    src = tmp_path / "late.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in _late_column_records(5)))
    claims, rejects = load_claims(src, chunksize=2)  # the late columns start in chunk 3
    assert rejects["row"].tolist() == [6]  # p_true=7 and label_weight=-1 are refused
    assert "p_true=7" in rejects["reason"].iloc[0] and "label_weight" in rejects["reason"].iloc[0]
    soft = claims[claims["claim_id"] == "soft"]
    assert sorted(soft["label_weight"].tolist()) == [0.3, 0.7]  # a pair, not a "duplicate"
    camel = claims[claims["claim_id"] == "camel"]
    assert len(camel) == 1 and camel["statement"].iloc[0] == "late text"


def test_parquet_folder_reads_the_union_of_its_files_columns(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from amv_calib.claims import load_claims

    folder = tmp_path / "claims"
    folder.mkdir()
    records = _late_column_records(3)
    first = [{k: v for k, v in r.items() if k in CLAIM_ROW} for r in records[:3]]
    pq.write_table(pa.Table.from_pylist(first), folder / "part-0.parquet")
    pq.write_table(pa.Table.from_pylist(records[3:6]), folder / "part-1.parquet")
    claims, rejects = load_claims(folder)
    assert "p_true" in claims.columns and "label_weight" in claims.columns
    assert rejects["row"].tolist() == [4]
    assert sorted(claims.loc[claims["claim_id"] == "soft", "label_weight"]) == [0.3, 0.7]


#: Values of another JSON type than their neighbours', and (as raw JSON
#: lines, JSONL only) a line giving a key twice.
_MIXED_ROWS: list[dict[str, Any] | str] = [
    {**CLAIM_ROW, "claim_id": "m-v1", "violated": 1.0},
    {**CLAIM_ROW, "claim_id": "m-v2", "violated": 2},
    {**CLAIM_ROW, "claim_id": "m-vs", "violated": "yes"},
    {**CLAIM_ROW, "claim_id": "m-t", "source_trust_score": True},
    {**CLAIM_ROW, "claim_id": "m-ts", "source_trust_score": "0.25"},
    {**CLAIM_ROW, "claim_id": "m-cf", "contradiction_flag": 0},
    {**CLAIM_ROW, "claim_id": "m-big", "recency_hours": 10**30},
    {**CLAIM_ROW, "claim_id": "m-list", "statement": ["a", 1]},
    {**CLAIM_ROW, "claim_id": 7},
    json.dumps({**CLAIM_ROW, "claim_id": "m-dup"})[:-1] + ', "violated": true}',
]

records_st = st.lists(st.sampled_from([*_late_column_records(4), *_MIXED_ROWS]), min_size=1,
                      max_size=25)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                   HealthCheck.function_scoped_fixture])
@given(records=records_st, fmt=st.sampled_from(["jsonl", "csv"]))
def test_outputs_do_not_depend_on_the_chunk_size(
        tmp_path: Path, records: list[dict[str, Any] | str], fmt: str) -> None:
    # every record set, written once, must give the same two files for any chunk size
    if fmt == "csv":  # a CSV row cannot give a key twice
        records = [r for r in records if isinstance(r, dict)] or [CLAIM_ROW]
    rows = [{**r, "timestamp": f"2026-01-0{1 + i % 9}T00:00:{i % 60:02d}Z"}
            if i % 3 and isinstance(r, dict) else r for i, r in enumerate(records)]
    src = tmp_path / f"in-{uuid.uuid4().hex}.{fmt}"
    if fmt == "jsonl":
        src.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n"
                               for r in rows))
    else:
        pd.DataFrame(rows).to_csv(src, index=False)
    outs = [_ingest_outputs(src, tmp_path / f"o-{uuid.uuid4().hex}", size)
            for size in (1, 2, 7, None)]
    assert all(o == outs[0] for o in outs[1:])
    assert outs[0][2][0] == outs[0][2][1] + outs[0][2][2] == len(rows)


# -- impossible timestamps accepted ----------------------------------------------------------------
@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
@pytest.mark.parametrize("stamp", ["0000-06-01T00:00:00Z", "10000-01-01T00:00:00Z",
                                   -62_200_000_000, 260_000_000_000],
                         ids=["year-0", "year-10000", "epoch-before-year-1", "epoch-ms-2"])
def test_times_outside_years_1_to_9999_are_rejected(tmp_path: Path, fmt: str,
                                                    stamp: Any) -> None:
    from amv_calib.claims import load_claims

    row = {**CLAIM_ROW, "timestamp": stamp}
    src = tmp_path / f"t.{fmt}"
    if fmt == "csv":
        pd.DataFrame([row]).to_csv(src, index=False)
    else:
        src.write_text(json.dumps(row) + "\n")
    claims, rejects = load_claims(src)
    if stamp == 260_000_000_000:  # milliseconds: 1978, a valid time
        assert len(claims) == 1
        return
    assert claims.empty and "out of range (years 1 to 9999)" in rejects["reason"].iloc[0]


def test_typed_parquet_timestamp_beyond_year_9999_does_not_wrap(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from amv_calib.claims import load_claims

    table = pa.Table.from_pylist([{**CLAIM_ROW, "claim_id": "a"}, {**CLAIM_ROW, "claim_id": "b"}])
    ts = pa.array([1_700_000_000, 100_000_000_000_000], type=pa.timestamp("s", tz="UTC"))
    table = table.set_column(table.schema.get_field_index("timestamp"), "timestamp", ts)
    pq.write_table(table, tmp_path / "t.parquet")
    claims, rejects = load_claims(tmp_path / "t.parquet")
    assert claims["claim_id"].tolist() == ["a"]
    assert rejects["row"].tolist() == [2] and "out of range" in rejects["reason"].iloc[0]


# -- crashes instead of clear errors ---------------------------------------------------------------
_HEADER = ("claim_id,timestamp,recency_hours,source_trust_score,model_confidence,"
           "contradiction_flag,violated")
_ROW = "c1,2026-01-01T00:00:00Z,5,0.5,0.5,false,false"


def test_header_cell_over_128_kib_is_a_clear_error(tmp_path: Path) -> None:
    from amv_calib.claims import load_claims

    src = tmp_path / "h.csv"
    src.write_text(f"{_HEADER},{'x' * 200_000}\n{_ROW},1\n")
    with pytest.raises(DataContractError, match=r"h\.csv as CSV: line 1 \(the header\)"):
        load_claims(src)


def test_one_20_mb_field_does_not_sink_the_file(tmp_path: Path) -> None:
    from amv_calib.claims import load_claims

    src = tmp_path / "big.csv"
    src.write_text(f"{_HEADER},statement\n{_ROW},{'y' * 20_000_000}\n"
                   f"{_ROW.replace('c1', 'c2')},short\n")
    claims, rejects = load_claims(src)
    assert rejects.empty and claims["claim_id"].tolist() == ["c1", "c2"]
    assert len(claims["statement"].iloc[0]) == 20_000_000


def test_deeply_nested_jsonl_line_is_a_rejected_row(tmp_path: Path) -> None:
    from amv_calib.claims import load_claims

    src = tmp_path / "deep.jsonl"
    src.write_text(json.dumps(CLAIM_ROW) + "\n" + "[" * 100_000 + "]" * 100_000 + "\n")
    claims, rejects = load_claims(src)
    assert len(claims) == 1 and rejects["row"].tolist() == [2]
    assert "nested too deeply" in rejects["reason"].iloc[0]


def test_bad_utf8_error_names_the_line_and_the_data_row(tmp_path: Path) -> None:
    from amv_calib.claims import load_claims

    src = tmp_path / "u.csv"
    src.write_bytes(f"{_HEADER}\n".encode() + b"c\xff1" + _ROW[2:].encode() + b"\n")
    with pytest.raises(DataContractError,
                       match=r"u\.csv as CSV: line 2 \(data row 1\): a field is not valid UTF-8"):
        load_claims(src)


def test_jsonl_claim_of_bad_utf8_is_a_rejected_row(tmp_path: Path) -> None:
    # Attack: ingest of JSONL with bad UTF-8 gave a traceback. Now the line is rejected.
    from amv_calib.claims import ingest_file

    src = tmp_path / "claims.jsonl"
    src.write_bytes(json.dumps(CLAIM_ROW).encode() + b"\n" + b'{"claim_id": "c\xff"}\n'
                    + json.dumps({**CLAIM_ROW, "claim_id": "d"}).encode() + b"\n")
    s = ingest_file(src, tmp_path / "out")
    assert (s.read, s.accepted, s.rejected) == (3, 2, 1)
    assert s.rejected_by_reason == {"not UTF-8": 1}
    rejects = pd.read_csv(tmp_path / "out" / "rejects.csv")
    assert rejects["row"].tolist() == [2]
    assert rejects["reason"].iloc[0].startswith("line is not valid UTF-8 text (invalid start "
                                                "byte at byte 15)")


# -- rejects.csv unsafe in a spreadsheet, and lossy ------------------------------------------------
def test_rejects_csv_is_spreadsheet_safe_and_rejects_jsonl_lossless(tmp_path: Path) -> None:
    import csv as csv_module

    from amv_calib.claims import ingest_file

    long_line = json.dumps({**CLAIM_ROW, "claim_id": "x" * 500, "source_trust_score": 2})
    rows = [
        json.dumps({**CLAIM_ROW, "claim_id": '=HYPERLINK("http://evil","click")',
                    "source_trust_score": 1.5}),
        json.dumps({**CLAIM_ROW, "claim_id": "@SUM(A1)", "label_weight": -1}),
        json.dumps({**CLAIM_ROW, "claim_id": "\tTAB", "recency_hours": -3}),
        "{not json " + "z" * 300,
        long_line,
    ]
    src = tmp_path / "in.jsonl"
    src.write_text("\n".join(rows) + "\n")
    s = ingest_file(src, tmp_path / "out")
    assert s.rejected == 5
    with open(tmp_path / "out" / "rejects.csv", newline="", encoding="utf-8") as fh:
        table = list(csv_module.DictReader(fh))
    for rec in table:
        for value in rec.values():
            assert not value.startswith(("=", "+", "-", "@", "\t", "\r")), value
    assert table[0]["claim_id"] == "'=HYPERLINK(\"http://evil\",\"click\")"
    lossless = [json.loads(line) for line in
                (tmp_path / "out" / "rejects.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [r["row"] for r in lossless] == [1, 2, 3, 4, 5]
    assert [r["line"] for r in lossless] == rows  # every rejected line, byte for byte
    assert lossless[0]["fields"]["claim_id"] == '=HYPERLINK("http://evil","click")'
    assert lossless[1]["fields"]["label_weight"] == "-1"


# -- a key given twice read last-wins --------------------------------------------------------------
def test_jsonl_claim_giving_a_key_twice_is_rejected_with_the_reason(tmp_path: Path) -> None:
    from amv_calib.claims import ingest_file

    src = tmp_path / "twice.jsonl"
    good = json.dumps(CLAIM_ROW)
    twice = good[:-1] + ', "violated": true}'
    src.write_text(f"{good}\n{twice}\n")
    s = ingest_file(src, tmp_path / "out")
    assert (s.read, s.accepted, s.rejected) == (2, 1, 1)
    assert s.rejected_by_reason == {"key given twice": 1}
    reason = pd.read_csv(tmp_path / "out" / "rejects.csv")["reason"].iloc[0]
    assert "key 'violated' appears twice" in reason


# -- JSONL values judged by their neighbours' type -------------------------------------------------
def test_jsonl_value_is_judged_by_its_own_type_whatever_the_chunk(tmp_path: Path) -> None:
    # Attack: one row with "violated": 1.0, another with "source_trust_score": true. With
    # the default chunk the first was rejected and the second accepted as trust 1.0; with
    # --chunksize 1 the other way round. Now each value by its own JSON type, one rule: a
    # number is a boolean if it is 0 or 1 (as in a typed Parquet column); true is no score.
    from amv_calib.claims import load_claims

    src = tmp_path / "mixed.jsonl"
    rows = [{**CLAIM_ROW, "claim_id": "v", "violated": 1.0},
            {**CLAIM_ROW, "claim_id": "t", "source_trust_score": True},
            {**CLAIM_ROW, "claim_id": "plain"}]
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    for size in (1, 2, 3, 250_000):
        claims, rejects = load_claims(src, chunksize=size)
        assert claims["claim_id"].tolist() == ["v", "plain"], size
        assert claims["violated"].tolist() == [True, False]
        assert rejects["row"].tolist() == [2]
        assert rejects["reason"].iloc[0] == "source_trust_score='true' is not a number"


# -- claim ids that differ by white space or are not text ------------------------------------------
@pytest.mark.parametrize("fmt", ["csv", "jsonl", "parquet"])
def test_claim_ids_differing_by_surrounding_space_are_one_claim(tmp_path: Path,
                                                                fmt: str) -> None:
    # Attack: "c1" and " c1" became two claims. The rule (docs/data.md): every reader strips
    # a claim id's surrounding white space; the second row is then a duplicate of the first.
    from amv_calib.claims import load_claims

    rows = [{**CLAIM_ROW, "claim_id": "c1"}, {**CLAIM_ROW, "claim_id": " c1"},
            {**CLAIM_ROW, "claim_id": "\tc2 "}, {**CLAIM_ROW, "claim_id": "  "}]
    src = tmp_path / f"ids.{fmt}"
    if fmt == "jsonl":
        src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    elif fmt == "csv":
        pd.DataFrame(rows).to_csv(src, index=False)
    else:
        pd.DataFrame(rows).to_parquet(src)
    claims, rejects = load_claims(src)
    assert claims["claim_id"].tolist() == ["c1", "c2"]
    assert rejects["row"].tolist() == [2, 4]
    assert rejects["reason"].tolist() == ["duplicate (claim_id, timestamp) of row 1",
                                          "claim_id is empty"]


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_claim_id_that_is_a_list_is_rejected(tmp_path: Path, fmt: str) -> None:
    # Attack: a JSONL claim_id given as a list was accepted as its text.
    from amv_calib.claims import load_claims

    src = tmp_path / f"list.{fmt}"
    rows = [{**CLAIM_ROW, "claim_id": ["a", "b"]}, {**CLAIM_ROW, "claim_id": ["c"]}]
    if fmt == "jsonl":  # alone, and beside a string id
        src.write_text("".join(json.dumps(r) + "\n" for r in rows)
                       + json.dumps({**CLAIM_ROW, "claim_id": "ok"}) + "\n")
    else:
        pd.DataFrame(rows).to_parquet(src)
    for size in (1, 250_000):
        claims, rejects = load_claims(src, chunksize=size)
        assert rejects["row"].tolist() == [1, 2]
        assert all("is a list or an object, not a string or number" in r
                   for r in rejects["reason"])
        assert claims["claim_id"].tolist() == (["ok"] if fmt == "jsonl" else [])
