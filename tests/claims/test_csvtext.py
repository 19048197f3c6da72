"""The Arrow CSV writer (``amv_calib.claims._csvtext``) against pandas' ``to_csv``, the
reference it replaces for label's unjoined-records file."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from amv_calib.claims._csvtext import STAMP, csv_rows

#: Characters that matter to CSV, spreadsheets or UTF-8, and plain ones.
_ALPHABET = [",", '"', "\n", "\r", "\t", " ", "=", "+", "-", "@", "'", "\x00", "\x1f",
             "\u2028", "é", "猫", "a", "b", "0", "9"]
_YEAR_1_US = -62_135_596_800_000_000
_YEAR_10000_US = 253_402_300_800_000_000


def _strings(rng: np.random.Generator, n: int) -> list[str | None]:
    out: list[str | None] = []
    for _ in range(n):
        k = int(rng.integers(0, 6))
        out.append(None if rng.random() < 0.1
                   else "".join(rng.choice(_ALPHABET, size=k).tolist()))
    return out


def _times(us: np.ndarray, rng: np.random.Generator) -> pd.Series:
    s = pd.Series(us.astype("datetime64[us]")).dt.tz_localize("UTC")
    s[rng.random(len(s)) < 0.1] = pd.NaT
    return s


def _arrow(frame: pd.DataFrame) -> pa.Table:
    """``frame`` as a table (zoned times through numpy: pyarrow reads a zoned Series by its
    deprecated ``.values``)."""
    cols = {}
    for name, col in frame.items():
        if isinstance(col.dtype, pd.DatetimeTZDtype):
            naive = col.dt.tz_convert(None).to_numpy(dtype="datetime64[us]")
            cols[name] = pa.array(naive, from_pandas=True).cast(pa.timestamp("us", "UTC"))
        else:
            cols[name] = pa.Array.from_pandas(col)
    return pa.table(cols)


def _reference(frame: pd.DataFrame, header: bool) -> bytes:
    return frame.to_csv(index=False, header=header, date_format=STAMP).encode()


@pytest.mark.parametrize("seed", range(6), ids=lambda s: f"seed-{s}")
@pytest.mark.parametrize("header", [True, False], ids=["header", "no-header"])
def test_random_tables_are_written_as_pandas_writes_them(seed: int, header: bool) -> None:
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
    table = _arrow(frame)
    assert csv_rows(table, header=header) == _reference(frame, header)


@pytest.mark.parametrize("us", [
    [_YEAR_1_US, _YEAR_10000_US - 1, 0, -1, 1, 951_782_400_000_000],  # 2000-02-29
    [_YEAR_10000_US, 0],  # a year of five digits
    [_YEAR_1_US - 1, -70_000_000_000_000_000],  # years 0 and -249: pandas' own form
], ids=["edges", "year-10000", "before-year-1"])
def test_times_at_the_edges(us: list[int]) -> None:
    frame = pd.DataFrame({"time": pd.Series(np.array(us, dtype="datetime64[us]"))
                          .dt.tz_localize("UTC"), "n": range(len(us))})
    got = csv_rows(_arrow(frame), header=True)
    assert got == _reference(frame, True)


def test_a_slice_of_a_table_is_written_as_its_rows() -> None:
    rng = np.random.default_rng(9)
    frame = pd.DataFrame({"text": pd.array(_strings(rng, 50), dtype="str"),
                          "category": pd.Categorical(_strings(rng, 50)),
                          "time": _times(rng.integers(0, 2**50, 50), rng)})
    table = _arrow(frame).slice(7, 20)
    assert csv_rows(table) == _reference(frame.iloc[7:27], False)


def test_empty_table_writes_only_its_header() -> None:
    frame = pd.DataFrame({"a": pd.array([], dtype="str"), "b": np.zeros(0, np.int64)})
    table = _arrow(frame)
    assert csv_rows(table, header=True) == b"a,b\n" == _reference(frame, True)
    assert csv_rows(table) == b""


@pytest.mark.parametrize(("table", "error", "match"), [
    (pa.table({"x": [1.5], "y": ["a"]}), TypeError, "column 'x' has type double"),
    (pa.table({"x": ["a"]}), ValueError, "1 column"),
    (pa.table({"t": pa.array([0], pa.timestamp("ns", "UTC")), "y": ["a"]}), TypeError,
     "column 't'"),
], ids=["float", "one-column", "nanoseconds"])
def test_refuses_what_it_cannot_write_as_pandas_does(table: pa.Table, error: type[Exception],
                                                     match: str) -> None:
    with pytest.raises(error, match=match):
        csv_rows(table)
