"""The CSV writer of label's unjoined-records file (``amv_calib.claims._outputs.write_csv``,
DuckDB's) against pandas' ``to_csv``, the reference whose bytes it keeps."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from amv_calib.claims._outputs import STAMP, write_csv

#: Characters that matter to CSV, spreadsheets or UTF-8, and plain ones.
_ALPHABET = [",", '"', "\n", "\r", "\t", " ", "=", "+", "-", "@", "'", "\x00", "\x1f", "\x7f",
             "\u2028", "é", "猫", "a", "b", "0", "9"]
#: Odd text cells, each on its own.
_ODD_TEXT = ["a,b", 'a"b', '"', '""', "a\rb", "\r", "a\nb", "\r\n", "a\tb", "\x00", "\x01x",
             "\x1b[31m", "\x7f", " lead", "trail ", " ", "", None, "é", "猫の手", "\u2028",
             "\ufeffbom", "😀", "x" * 100_000, "a" + '"' * 500 + ",", "=1+2", "'", "\\", "\\\""]
_YEAR_1_US = -62_135_596_800_000_000
_YEAR_10000_US = 253_402_300_800_000_000
#: Odd times (microseconds since 1970): second and year edges, before 1970, leap days.
_ODD_US = [0, -1, 1, 999_999, 1_000_000, -1_000_000, -1_000_001, 86_399_999_999,
           951_782_400_000_000, -2_208_988_800_000_000, -9_460_800_000_000_000, _YEAR_1_US,
           _YEAR_1_US + 1, _YEAR_10000_US - 1, 1_790_000_000_123_456]


def _strings(rng: np.random.Generator, n: int) -> list[str | None]:
    out: list[str | None] = []
    for _ in range(n):
        k = int(rng.integers(0, 6))
        out.append(None if rng.random() < 0.1
                   else "".join(rng.choice(_ALPHABET, size=k).tolist()))
    return out


def _utc(us: list[int] | np.ndarray) -> pd.Series:
    return pd.Series(np.asarray(us, dtype="datetime64[us]")).dt.tz_localize("UTC")


def _times(us: np.ndarray, rng: np.random.Generator) -> pd.Series:
    s = _utc(us)
    s[rng.random(len(s)) < 0.1] = pd.NaT
    return s


def _arrow(frame: pd.DataFrame) -> pa.Table:
    """``frame`` as a table (zoned times through numpy: pyarrow reads a zoned Series by its
    deprecated ``.values``)."""
    cols = {}
    for name, col in frame.items():
        if isinstance(col.dtype, pd.DatetimeTZDtype):
            naive = col.dt.tz_convert(None).to_numpy(dtype="datetime64[us]")
            cols[str(name)] = pa.array(naive, from_pandas=True).cast(pa.timestamp("us", "UTC"))
        else:
            cols[str(name)] = pa.Array.from_pandas(col)
    return pa.table(cols)


def _reference(frame: pd.DataFrame, header: bool = True) -> bytes:
    return frame.to_csv(index=False, header=header, date_format=STAMP).encode()


def _written(tmp_path: Path, tables: list[pa.Table], header: bool = True) -> bytes:
    out = tmp_path / "t.csv"
    write_csv(tables, out, header=header)
    return out.read_bytes()


def test_odd_text_is_written_as_pandas_writes_it(tmp_path: Path) -> None:
    n = len(_ODD_TEXT)
    frame = pd.DataFrame({
        "text": pd.array(_ODD_TEXT, dtype="str"),
        "objects": pd.Series(_ODD_TEXT[::-1], dtype=object),
        "category": pd.Categorical(_ODD_TEXT),
        "n": np.arange(n) - 3,
    })
    assert _written(tmp_path, [_arrow(frame)]) == _reference(frame)


def test_odd_integers_and_times_are_written_as_pandas_writes_them(tmp_path: Path) -> None:
    ints = [0, -1, 1, 2**63 - 1, -(2**63), 2**31, -(2**31) - 1, 10**18]
    frame = pd.DataFrame({"n": np.resize(np.array(ints, np.int64), len(_ODD_US)),
                          "time": _utc(_ODD_US),
                          "small": np.arange(len(_ODD_US), dtype=np.int8)})
    got = _written(tmp_path, [_arrow(frame)])
    assert got == _reference(frame)
    assert b",9999-12-31T23:59:59.999999Z," in got and b",1969-12-31T23:59:59.999999Z," in got


@pytest.mark.parametrize("us", [
    [_YEAR_10000_US, 0],  # a year of five digits
    [_YEAR_1_US - 1, -70_000_000_000_000_000],  # years 0 and -249: pandas' own form
], ids=["year-10000", "before-year-1"])
def test_times_beyond_four_digit_years(tmp_path: Path, us: list[int]) -> None:
    frame = pd.DataFrame({"time": _utc(us), "n": range(len(us))})
    assert _written(tmp_path, [_arrow(frame)]) == _reference(frame)


@pytest.mark.parametrize("value", ["", None, "a", "a,b", "\r"], ids=repr)
@pytest.mark.parametrize("header", [True, False], ids=["header", "no-header"])
def test_one_column(tmp_path: Path, value: str | None, header: bool) -> None:
    # the csv module quotes a row's only field when it is empty ("" for a missing value too)
    frame = pd.DataFrame({"only": pd.Series([value, "x", value], dtype=object)})
    assert _written(tmp_path, [_arrow(frame)], header) == _reference(frame, header)
    times = pd.DataFrame({"t": _utc([0, 1]).where([True, False])})
    assert _written(tmp_path, [_arrow(times)], header) == _reference(times, header)


@pytest.mark.parametrize("seed", range(4), ids=lambda s: f"seed-{s}")
@pytest.mark.parametrize("header", [True, False], ids=["header", "no-header"])
def test_random_tables_in_parts_are_written_as_pandas_writes_them_whole(
        tmp_path: Path, seed: int, header: bool) -> None:
    rng = np.random.default_rng(seed)
    n = 400
    frame = pd.DataFrame({
        "text": pd.array(_strings(rng, n), dtype="str"),
        "category": pd.Categorical(_strings(rng, n)),
        "line": rng.integers(-(2**62), 2**62, n),
        "time": _times(rng.integers(_YEAR_1_US, _YEAR_10000_US, n), rng),
        "objects": pd.Series(_strings(rng, n), dtype=object),
        "missing": pd.Series([None] * n, dtype=object),
    })
    cuts = np.sort(rng.integers(0, n, 3)).tolist()
    # parts of other dictionaries and types (a null column in one, text in another)
    parts = [_arrow(frame.iloc[lo:hi].reset_index(drop=True))
             for lo, hi in zip([0, *cuts], [*cuts, n], strict=True)]
    assert _written(tmp_path, parts, header) == _reference(frame, header)


def test_odd_column_names(tmp_path: Path) -> None:
    frame = pd.DataFrame({"a,b": ["x"], 'q"': ["y"], " ": ["z"], "é": [1], "\r": [2]})
    assert _written(tmp_path, [_arrow(frame)]) == _reference(frame)
    lone = pd.DataFrame({"": ["z"]})
    assert _written(tmp_path, [_arrow(lone)]) == _reference(lone) == b'""\nz\n'


def test_empty_table_writes_only_its_header(tmp_path: Path) -> None:
    frame = pd.DataFrame({"a": pd.array([], dtype="str"), "b": np.zeros(0, np.int64)})
    table = _arrow(frame)
    assert _written(tmp_path, [table]) == b"a,b\n" == _reference(frame)
    assert _written(tmp_path, [table, table], header=False) == b""


@pytest.mark.parametrize(("tables", "error", "match"), [
    ([pa.table({"x": [1.5], "y": ["a"]})], TypeError, "column 'x' has type double"),
    ([pa.table({"t": pa.array([0], pa.timestamp("ns", "UTC")), "y": ["a"]})], TypeError,
     "column 't'"),
    ([pa.table({"t": pa.array([0], pa.timestamp("us", "Europe/Paris"))})], TypeError,
     "column 't'"),
    ([], ValueError, "no tables"),
    ([pa.table({"x": ["a"]}), pa.table({"y": ["a"]})], ValueError,
     r"table 1 has the columns \['y'\], the first \['x'\]"),
    ([pa.table({"a": ["a"], "": ["b"]})], ValueError, "column 1 has no name"),
    ([pa.table({"t": pa.array([0], pa.timestamp("us"))}), pa.table({"t": ["2026-12-01Z"]})],
     TypeError, "column 't' of table 1 is string, not timestamp"),
], ids=["float", "nanoseconds", "zone", "none", "other-columns", "empty-name", "other-type"])
def test_refuses_what_it_cannot_write_as_pandas_does(
        tmp_path: Path, tables: list[pa.Table], error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        write_csv(tables, tmp_path / "t.csv")
