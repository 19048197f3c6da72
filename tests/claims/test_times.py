"""The one timestamp rule: ISO-8601 or epoch seconds (milliseconds from 1e11), years 1..9999.

Expected instants come from independent computations: pandas parsing the ISO text, and
``datetime`` arithmetic in whole microseconds.
"""

from __future__ import annotations

import warnings
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from amv_calib.claims import load_claims, parse_timestamps
from amv_calib.claims._outcomes import load_outcomes

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _us(when: datetime) -> int:
    """Microseconds since the epoch by exact integer arithmetic."""
    d = when - EPOCH
    return (d.days * 86_400 + d.seconds) * 1_000_000 + d.microseconds


def test_iso_text_agrees_with_pandas() -> None:
    texts = ["2026-01-01T00:00:00Z", "2026-01-01T02:00:00+02:00", "2026-01-01T02:00:00+0200",
             "2026-03-01 12:30:00", "2026-03-01", "2026-03-01T12:30:00.123456",
             "2300-07-04T01:02:03.000001Z", "0001-01-01T00:00:00Z",
             "9999-12-31T23:59:59.999999Z"]
    got = parse_timestamps(texts)
    assert not got.bad.any()
    want = [int(pd.to_datetime(t, utc=True, format="ISO8601").as_unit("us").asm8.view("i8"))
            for t in texts]
    assert got.us().tolist() == want


def test_nanosecond_fractions_are_truncated_to_microseconds() -> None:
    got = parse_timestamps(["2026-01-01T00:00:00.123456789Z", "x"])
    assert got.us()[0] == _us(datetime(2026, 1, 1, 0, 0, 0, 123456, tzinfo=UTC))


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (1_767_225_600, datetime(2026, 1, 1, tzinfo=UTC)),
        (1_767_225_600.5, datetime(2026, 1, 1, 0, 0, 0, 500000, tzinfo=UTC)),
        ("1767225600", datetime(2026, 1, 1, tzinfo=UTC)),
        (1_767_225_600_123, datetime(2026, 1, 1, 0, 0, 0, 123000, tzinfo=UTC)),  # Date.now()
        ("1767225600123", datetime(2026, 1, 1, 0, 0, 0, 123000, tzinfo=UTC)),
        (99_999_999_999, EPOCH + timedelta(seconds=99_999_999_999)),  # the last seconds value
        (100_000_000_000, EPOCH + timedelta(milliseconds=100_000_000_000)),  # the first ms
        (-100_000_000_000, EPOCH - timedelta(milliseconds=100_000_000_000)),
        (253_402_300_799_999, datetime(9999, 12, 31, 23, 59, 59, 999000, tzinfo=UTC)),
        (-62_135_596_800, datetime(1, 1, 1, tzinfo=UTC)),
        (10_413_792_000_001, datetime(2300, 1, 1, 0, 0, 0, 1000, tzinfo=UTC)),
    ],
)
def test_epoch_numbers_seconds_then_milliseconds(value: Any, expected: datetime) -> None:
    for column in ([value], pd.Series([value]), [value, "not a time"]):
        got = parse_timestamps(column)
        assert got.us()[0] == _us(expected), column


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("0000-12-31T23:59:59Z",
         "timestamp=0000-12-31T23:59:59Z is out of range (years 1 to 9999)"),
        (1e15, "timestamp=1e+15 is out of range (years 1 to 9999)"),
        ("1e15", "timestamp=1e15 is out of range (years 1 to 9999)"),
        (253_402_300_800_000, "timestamp=253402300800000 is out of range (years 1 to 9999)"),
        # past 2**53: no double holds it (a safe cast to float refused it, a crash)
        (2**53 + 1, "timestamp=9007199254740993 is out of range (years 1 to 9999)"),
        ("-62135596801", "timestamp=-62135596801 is out of range (years 1 to 9999)"),
        ("nan", "timestamp=nan is not finite"),
        ("yesterday", "timestamp='yesterday' is not ISO-8601 or epoch seconds"),
        ("2026-02-30", "timestamp='2026-02-30' is not ISO-8601 or epoch seconds"),
        ("  ", "timestamp is empty"),
        (None, "timestamp is missing"),
        (True, "timestamp='true' is not ISO-8601 or epoch seconds"),
    ],
)
def test_bad_values_are_flagged_with_a_reason(value: Any, reason: str) -> None:
    got = parse_timestamps([value])
    assert got.bad[0] and got.values[0].as_py() is None
    assert got.reason(0) == reason
    assert got.us(fill=-1)[0] == -1


def test_every_kind_of_text_column_flags_year_zero() -> None:
    # A whole column of one kind takes pyarrow's cast at once; year 0 parses there too.
    for column in (["0000-01-01T00:00:00"] * 2, ["0000-01-01T00:00:00Z"] * 2,
                   ["0000-01-01T00:00:00", "x"]):
        got = parse_timestamps(column)
        assert got.out_of_range[0], column


@pytest.mark.parametrize("unit", ["s", "ms", "us"])
def test_typed_timestamps_outside_the_years_are_flagged_not_wrapped(unit: str) -> None:
    per = {"s": 1_000_000, "ms": 1_000, "us": 1}[unit]
    first, last = _us(datetime(1, 1, 1, tzinfo=UTC)), _us(datetime(9999, 12, 31, 23, 59, 59,
                                                                   999999, tzinfo=UTC))
    lo, hi = -(-first // per), last // per
    raw = [lo, hi, lo - 1, hi + 1, 10**15 if unit == "s" else hi + 10**6, None]
    got = parse_timestamps(pa.array(raw, type=pa.timestamp(unit)))
    assert got.out_of_range.tolist() == [False, False, True, True, True, False]
    assert got.missing.tolist() == [False] * 5 + [True]
    assert got.us()[:2].tolist() == [lo * per, hi * per]


def test_chunked_typed_input_is_read_piece_by_piece() -> None:
    chunked = pa.chunked_array([pa.array([0, 10**15], type=pa.timestamp("s")),
                                pa.array([None, 5], type=pa.timestamp("s"))])
    got = parse_timestamps(chunked)
    assert got.out_of_range.tolist() == [False, True, False, False]
    assert got.missing.tolist() == [False, False, True, False]
    assert got.us(fill=-1).tolist() == [0, -1, -1, 5_000_000]


def test_typed_dates_and_zones() -> None:
    dates = pa.array([datetime(1, 1, 1).date(), datetime(9999, 12, 31).date(), None])
    got = parse_timestamps(dates)
    assert got.us()[:2].tolist() == [_us(datetime(1, 1, 1, tzinfo=UTC)),
                                     _us(datetime(9999, 12, 31, tzinfo=UTC))]
    far = pa.array(np.array([2_932_897, -719_163], dtype=np.int32)).cast(pa.date32())
    assert parse_timestamps(far).out_of_range.tolist() == [True, True]
    paris = pd.Series(pd.to_datetime(["2026-01-01T01:00:00"]).tz_localize("Europe/Paris"))
    assert parse_timestamps(paris).us()[0] == _us(datetime(2026, 1, 1, tzinfo=UTC))
    naive = pd.Series(pd.to_datetime(["2300-01-01T00:00:00"]).as_unit("us"))
    assert parse_timestamps(naive).us()[0] == _us(datetime(2300, 1, 1, tzinfo=UTC))


def test_zoned_frames_convert_as_pyarrow_does_without_deprecation_warnings() -> None:
    stamps = pd.Series(pd.to_datetime(["2026-01-01T01:00:00", None, "2300-06-01T12:00:00"],
                                      format="ISO8601")).dt.tz_localize("Europe/Paris")
    frame = pd.DataFrame({**{k: [v] * 3 for k, v in {
        "claim_id": "c", "recency_hours": 1.0, "source_trust_score": 0.5,
        "model_confidence": 0.5, "contradiction_flag": True, "violated": False}.items()},
        "timestamp": stamps})
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        got = parse_timestamps(stamps)
        claims, rejects = load_claims(frame)
    assert got.us()[[0, 2]].tolist() == [_us(datetime(2026, 1, 1, tzinfo=UTC)),
                                         _us(datetime(2300, 6, 1, 10, tzinfo=UTC))]
    assert claims["timestamp"].tolist() == [pd.Timestamp("2026-01-01", tz="UTC"),
                                            pd.Timestamp("2300-06-01T10:00:00", tz="UTC")]
    assert rejects["reason"].tolist() == ["timestamp is missing"]


def test_mixed_python_values() -> None:
    got = parse_timestamps(pd.Series(["2026-01-01T00:00:00Z", 1_767_225_600, 1_767_225_600_000,
                                      None, {"a": 1}, 10**30], dtype=object))
    t = _us(datetime(2026, 1, 1, tzinfo=UTC))
    assert got.us()[:3].tolist() == [t, t, t]
    assert got.missing.tolist() == [False, False, False, True, False, False]
    assert got.invalid.tolist() == [False, False, False, False, True, False]
    assert got.out_of_range.tolist() == [False] * 5 + [True]


def test_far_years_are_exact_on_every_path() -> None:
    """Beyond 2**53 microseconds (after 2255) float64 cannot hold every microsecond."""
    text = "2300-01-01T00:00:00.000001"
    want = _us(datetime(2300, 1, 1, 0, 0, 0, 1, tzinfo=UTC))
    assert parse_timestamps([text]).us()[0] == want  # one cast for the whole column
    assert parse_timestamps([text, "x"]).us()[0] == want  # value by value
    assert parse_timestamps([text, 5.0]).us()[0] == want  # text mixed with numbers


def test_ingest_rejects_out_of_range_typed_parquet(tmp_path: Path) -> None:
    table = pa.table({
        "claim_id": ["a", "b", "c"],
        "timestamp": pa.array([1_767_225_600, 10**15, 253_402_300_800], pa.timestamp("s")),
        "recency_hours": [1.0, 1.0, 1.0], "source_trust_score": [0.5] * 3,
        "model_confidence": [0.5] * 3, "contradiction_flag": [False] * 3,
        "violated": [True, False, True],
    })
    pq.write_table(table, tmp_path / "c.parquet")
    claims, rejects = load_claims(tmp_path / "c.parquet")
    assert claims["claim_id"].tolist() == ["a"]
    assert rejects["row"].tolist() == [2, 3]
    assert all(r.endswith("is out of range (years 1 to 9999)") for r in rejects["reason"])
    # Parquet stores seconds as milliseconds; the reason shows the value as pyarrow prints it.
    assert rejects["reason"].iloc[1] == (
        "timestamp=10000-01-01 00:00:00.000 is out of range (years 1 to 9999)")


def test_outcomes_use_the_same_rule(tmp_path: Path) -> None:
    out, bad = load_outcomes(pd.DataFrame({
        "claim_id": ["a", "b", "c", "d"],
        "time": ["2026-01-01T00:00:00Z", "1767225600000", "1e15", "0000-06-01T00:00:00Z"],
        "violated": [True, False, True, True]}))
    t = _us(datetime(2026, 1, 1, tzinfo=UTC))
    assert out["t_us"].tolist() == [t, t]
    assert bad["reason"].tolist() == ["time='1e15' is out of range (years 1 to 9999)",
                                      "time='0000-06-01T00:00:00Z' is out of range (years 1 to "
                                      "9999)"]
