"""The one timestamp rule of the data contract: ISO-8601 or epoch numbers -> UTC microseconds.

Accepted (DESIGN section 3; ``docs/data.md`` lists examples):

- ISO-8601 text with an offset (``Z``, ``+02:00``, ``+0200``), converted to UTC, or without
  one, read as UTC; fractions down to nanoseconds, truncated to microseconds;
- a number, or text that is a number: epoch **seconds**, or epoch **milliseconds** from a
  magnitude of 1e11 on (JavaScript's ``Date.now()``; 1e11 seconds would be the year 5138);
- typed timestamps and dates (Parquet, pandas, Arrow); one without a zone is read as UTC.

Every instant is int64 microseconds since 1970-01-01T00:00:00Z, and one outside the years 1
to 9999 is flagged *out of range*, never wrapped: ``datetime64[us]``, Python's ``datetime``
and ISO-8601's four-digit years all hold that span, nanoseconds do not (they end in 2262).
The ingest validator, the label join, the log adapters, the comparison's folds and the
artifact fingerprint all read times through :func:`parse_timestamps`; the label join and the
log adapters read and write their time columns with the helpers at the end of this module
(int64 microseconds, ``MISSING_US`` where missing).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from amv_calib.claims import _arrow
from amv_calib.claims._arrow import BoolArray, Column, FloatArray, IntArray

UTC_US: Final = pa.timestamp("us", tz="UTC")

#: Epoch numbers of at least this magnitude are milliseconds, smaller ones seconds.
EPOCH_MS_FROM: Final = 1e11

#: The first and the last microsecond of the accepted span (years 1 to 9999, UTC).
US_MIN: Final = -62_135_596_800_000_000  # 0001-01-01T00:00:00Z
US_MAX: Final = 253_402_300_799_999_999  # 9999-12-31T23:59:59.999999Z

#: What :meth:`ParsedTimestamps.us` writes for a value that did not parse (int64's minimum).
MISSING_US: Final = int(np.iinfo(np.int64).min)

# Pre-filters for text: they only spare failed casts (a value they misjudge falls through to
# the next stage), so acceptance never depends on them.
_HAS_OFFSET: Final = r"(?i)(z|[+-][0-9]{2}(:?[0-9]{2})?)$"
_DATE_LIKE: Final = r"^[0-9]{4}-"
# A date of ISO-8601's expanded form with a year beyond 9999 or before 0 (pyarrow parses four
# digits only): out of range, rather than not a date at all.
_FAR_YEAR: Final = r"^(-[0-9]{4,}|\+?[0-9]{5,})-[0-9]{2}-[0-9]{2}([T ]|$)"

#: Each problem besides missing and empty: mask attribute, reason key, reason.
PROBLEMS: Final = (
    ("invalid", "not ISO-8601 or epoch seconds",
     "{field}={text!r} is not ISO-8601 or epoch seconds"),
    ("nonfinite", "not finite", "{field}={text} is not finite"),
    ("out_of_range", "out of range", "{field}={text} is out of range (years 1 to 9999)"),
)


@dataclass(frozen=True, kw_only=True)
class ParsedTimestamps:
    """Times read by :func:`parse_timestamps`, and what kept each bad one from parsing.

    Attributes
    ----------
    values : pyarrow.Array or pyarrow.ChunkedArray
        ``timestamp[us, tz=UTC]``; null wherever a value did not parse.
    missing, empty, invalid, nonfinite, out_of_range : ndarray of bool
        Per value, at most one set: null; blank text; neither ISO-8601 nor a number; a
        number that is NaN or infinite; an instant outside the years 1 to 9999.
    source : pyarrow.Array or pyarrow.ChunkedArray
        The input as read, for the reasons.
    """

    values: Column
    missing: BoolArray
    empty: BoolArray
    invalid: BoolArray
    nonfinite: BoolArray
    out_of_range: BoolArray
    source: Column

    @property
    def bad(self) -> BoolArray:
        """Where a value did not parse (for whatever reason)."""
        return self.missing | self.empty | self.invalid | self.nonfinite | self.out_of_range

    def us(self, fill: int = MISSING_US) -> IntArray:
        """int64 microseconds since 1970-01-01T00:00:00Z, ``fill`` where a value is bad."""
        ints = pc.fill_null(pc.cast(self.values, pa.int64()), fill)
        return np.asarray(ints.to_numpy(zero_copy_only=False), dtype=np.int64)

    def reason(self, i: int, field: str = "timestamp") -> str | None:
        """Why value ``i`` did not parse, as the ingest's rejects say it; None if it did.

        Examples: ``"timestamp is missing"``, ``"timestamp='yesterday' is not ISO-8601 or
        epoch seconds"``, ``"timestamp=1e15 is out of range (years 1 to 9999)"``.
        """
        if self.missing[i]:
            return f"{field} is missing"
        if self.empty[i]:
            return f"{field} is empty"
        for attr, _key, message in PROBLEMS:
            if getattr(self, attr)[i]:
                src = self.source
                arr = src.combine_chunks() if isinstance(src, pa.ChunkedArray) else src
                text = _arrow.text_of(arr, np.array([i], dtype=np.int64))[0].as_py()
                return message.format(field=field, text=text)
        return None


def parse_timestamps(values: Any) -> ParsedTimestamps:
    """Read times by the data contract's one rule (see the module docstring).

    Parameters
    ----------
    values : pyarrow.Array, pyarrow.ChunkedArray, pandas.Series, numpy array or sequence
        ISO-8601 text, epoch numbers (or their text), typed timestamps or dates, or a mix
        (a mixed column is read as text, each value as ``str`` prints it).

    Returns
    -------
    ParsedTimestamps
        The instants as ``timestamp[us, tz=UTC]`` (:meth:`ParsedTimestamps.us` gives int64
        microseconds) and, per value, why it did not parse.
    """
    arr = _arrow.arrow_column(values)
    source = arr
    nulls = _arrow.null_mask(arr)
    n = len(arr)
    empty, nonfinite, out_of_range, invalid = (np.zeros(n, dtype=bool) for _ in range(4))
    if pa.types.is_dictionary(arr.type):
        arr = (arr.combine_chunks() if isinstance(arr, pa.ChunkedArray) else arr
               ).dictionary_decode()
    t = arr.type
    if pa.types.is_timestamp(t) or pa.types.is_date(t):
        values_, out_of_range = _typed_to_us(arr)
    elif _arrow.is_number_type(t):
        # an integer past 2**53 to the nearest double, as Python's float() takes it (a
        # safe cast refuses it): far out of range as a time, and said so
        x = np.asarray(pc.cast(arr, pa.float64(), safe=False).to_numpy(zero_copy_only=False))
        with np.errstate(invalid="ignore"):
            nonfinite = ~nulls & ~np.isfinite(x)
        us, rng = _epoch_to_us(x)
        out_of_range = rng & ~nulls & ~nonfinite
        values_ = pc.cast(pa.array(us, type=pa.int64(), mask=nulls | nonfinite | out_of_range),
                          UTC_US)
    elif _arrow.is_stringish(arr):
        s = _arrow.string_view(arr.combine_chunks() if isinstance(arr, pa.ChunkedArray) else arr)
        values_, empty, nonfinite, out_of_range, invalid = _text_to_timestamp(s, nulls)
    else:  # booleans, nested values: not a time
        values_ = pa.nulls(n, UTC_US)
        invalid = ~nulls
    return ParsedTimestamps(values=values_, missing=nulls, empty=empty, invalid=invalid,
                            nonfinite=nonfinite, out_of_range=out_of_range, source=source)


def _epoch_to_us(x: FloatArray) -> tuple[IntArray, BoolArray]:
    """Epoch seconds (milliseconds from 1e11 on) -> microseconds; flags out-of-range values.

    One multiplication, by 1e6 or 1e3; whole numbers below 2**53 in integer arithmetic, so
    ``1767225600123`` ms is exactly ``1767225600123000`` us in any year.
    """
    with np.errstate(invalid="ignore", over="ignore"):
        per = np.where(np.abs(x) >= EPOCH_MS_FROM, 1e3, 1e6)
        scaled = x * per
        # Generous float bounds first, so the int64 conversion below cannot overflow.
        bad = ~((scaled >= US_MIN - 1e6) & (scaled <= US_MAX + 1e6))
        whole = ~bad & (np.abs(x) < 2.0**53) & (x == np.trunc(x))
        us = np.where(bad, 0.0, np.round(scaled)).astype(np.int64)
    us[whole] = x[whole].astype(np.int64) * per[whole].astype(np.int64)
    bad |= (us < US_MIN) | (us > US_MAX)
    us[bad] = 0
    return us, bad


def _outside_span(ints: Column, per_us: int) -> BoolArray:
    """Where integer counts of ``per_us`` microseconds fall outside the years 1 to 9999."""
    n = len(ints)
    lo, hi = -(-US_MIN // per_us), US_MAX // per_us
    if not n or ints.null_count == n:
        return np.zeros(n, dtype=bool)
    mm = pc.min_max(ints)
    if lo <= mm["min"].as_py() and mm["max"].as_py() <= hi:  # the common case: one pass
        return np.zeros(n, dtype=bool)
    raw = np.asarray(pc.fill_null(ints, 0).to_numpy(zero_copy_only=False), dtype=np.int64)
    return ((raw < lo) | (raw > hi)) & ~_arrow.null_mask(ints)


def _typed_to_us(arr: Column) -> tuple[Column, BoolArray]:
    """Typed timestamps or dates as ``timestamp[us, UTC]``, and those outside the span.

    The range is checked in the input's own unit before any conversion, so a far-away
    instant is flagged rather than overflowing into some other year.
    """
    t = arr.type
    out_of_range = np.zeros(len(arr), dtype=bool)
    if pa.types.is_date32(t):
        ints, per_us = pc.cast(arr, pa.int32()), 86_400_000_000
    elif pa.types.is_date64(t):
        ints, per_us = pc.cast(arr, pa.int64()), 1_000
    else:
        ints = pc.cast(arr, pa.int64())
        per_us = {"s": 1_000_000, "ms": 1_000, "us": 1}.get(t.unit, 0)  # ns: 1677 to 2262
    if per_us:
        out_of_range = _outside_span(ints, per_us)
        if out_of_range.any():
            arr = pc.if_else(pa.array(~out_of_range), arr, pa.scalar(None, type=t))
    if pa.types.is_date(t):
        arr = pc.cast(arr, pa.timestamp("us"))
    unit = arr.type.unit
    # A timestamp without a zone is read as UTC (the cast only attaches the zone).
    values = pc.cast(pc.cast(arr, pa.timestamp(unit, tz="UTC")), UTC_US, safe=False)
    return values, out_of_range


def _text_to_timestamp(
    s: pa.Array, nulls: BoolArray
) -> tuple[pa.Array, BoolArray, BoolArray, BoolArray, BoolArray]:
    """Text -> (values, empty, nonfinite, out_of_range, invalid)."""
    n = len(s)
    # Fast paths: a whole column of one kind.
    for typ in (UTC_US, pa.timestamp("us")):
        try:
            values = pc.cast(pc.cast(s, typ), UTC_US)
        except pa.ArrowInvalid:
            continue
        out_of_range = _outside_span(pc.cast(values, pa.int64()), 1)
        if out_of_range.any():  # year 0 parses as ISO-8601
            values = pc.if_else(pa.array(~out_of_range), values, pa.scalar(None, UTC_US))
        nothing = np.zeros(n, dtype=bool)
        return values, nothing, nothing.copy(), out_of_range, nothing.copy()
    # Per value: epoch number, else ISO-8601 with offset, else without (read as UTC);
    # microsecond precision first, nanosecond strings after.
    trimmed = pc.utf8_trim_whitespace(s)
    empty = _arrow.np_mask(pc.fill_null(pc.equal(trimmed, ""), False)) & ~nulls
    todo = ~(nulls | empty)
    out = np.zeros(n, dtype=np.int64)
    done = np.zeros(n, dtype=bool)
    numberish = todo & _arrow.np_mask(
        pc.fill_null(pc.match_substring_regex(trimmed, _arrow.NUMBER_LIKE), False))
    nonfinite = np.zeros(n, dtype=bool)
    out_of_range = np.zeros(n, dtype=bool)
    if numberish.any():
        fvals, ffail = _arrow.cast_subset(trimmed, numberish, pa.float64())
        x = np.asarray(fvals.to_numpy(zero_copy_only=False), dtype=np.float64)
        ok = numberish & ~ffail
        with np.errstate(invalid="ignore"):
            nonfinite = ok & ~np.isfinite(x)
        us, rng = _epoch_to_us(x)
        out_of_range = ok & ~nonfinite & rng
        good = ok & ~nonfinite & ~out_of_range
        out[good] = us[good]
        done |= ok
    offset = _arrow.np_mask(pc.fill_null(pc.match_substring_regex(trimmed, _HAS_OFFSET), False))
    datelike = _arrow.np_mask(pc.fill_null(pc.match_substring_regex(trimmed, _DATE_LIKE), False))
    # The offset test only saves failed casts: a value it misjudges ('2026-01-01' ends like
    # an offset) falls through to the next stage, so acceptance does not depend on it.
    everything = np.ones(n, dtype=bool)
    for typ, which in (
        (UTC_US, offset),
        (pa.timestamp("us"), everything),
        (pa.timestamp("ns", tz="UTC"), offset),
        (pa.timestamp("ns"), everything),
    ):
        take = todo & ~done & datelike & which
        if not take.any():
            continue
        vals, fail = _arrow.cast_subset(trimmed, take, typ)
        good = take & ~fail
        if good.any():
            as_us = pc.cast(pc.cast(vals, pa.timestamp(typ.unit, tz="UTC")), UTC_US, safe=False)
            # Nulls filled first: with them, to_numpy would go through float64 and round
            # microseconds beyond 2**53 (before 1685, after 2255).
            ints = pc.fill_null(pc.cast(as_us, pa.int64()), 0).to_numpy(zero_copy_only=False)
            out[good] = np.asarray(ints, dtype=np.int64)[good]
            done |= good
    parsed_text = done & ~numberish
    out_of_range |= parsed_text & ((out < US_MIN) | (out > US_MAX))
    invalid = todo & ~done
    if invalid.any():
        far = invalid & _arrow.np_mask(pc.fill_null(pc.match_substring_regex(trimmed, _FAR_YEAR),
                                              False))
        out_of_range |= far
        invalid &= ~far
    mask = ~done | nonfinite | out_of_range
    values = pc.cast(pa.array(out, type=pa.int64(), mask=mask), UTC_US)
    return values, empty, nonfinite, out_of_range, invalid


# ---------------------------------------------------------------------------------------------
# Time columns, as the label join and the log adapters read and write them
# ---------------------------------------------------------------------------------------------
def _time_series(s: Any) -> IntArray:
    """Times (datetimes, ISO-8601 text, epoch numbers or their text, or a mix) as int64 UTC
    microseconds, ``MISSING_US`` where missing or not a time; the rule of
    :func:`~amv_calib.claims._times.parse_timestamps`."""
    if isinstance(s, pd.Series):
        s = s.reset_index(drop=True)
    return parse_timestamps(s).us(MISSING_US)


def _time_reasons(field: str, raws: Sequence[Any]) -> list[str]:
    """Why each of ``raws`` (times that did not parse) is not a time, naming the value."""
    far = parse_timestamps(list(raws)).out_of_range if len(raws) else np.zeros(0, bool)
    return [f"{field}={raw!r} is out of range (years 1 to 9999)" if o
            else f"{field}={raw!r} is not ISO-8601 or epoch seconds"
            for raw, o in zip(raws, far, strict=True)]


def us_to_datetime(t_us: IntArray) -> pd.DatetimeIndex:
    """int64 UTC microseconds (``MISSING_US`` = missing) as a tz-aware index of unit ``us``."""
    arr = np.asarray(t_us, dtype=np.int64).view("datetime64[us]")
    return pd.DatetimeIndex(arr).tz_localize("UTC")

