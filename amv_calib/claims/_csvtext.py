"""CSV text from Arrow columns, byte for byte as pandas writes it.

``DataFrame.to_csv`` formats every cell in Python (an object per value): 2 M unjoined uses of
a 1 M-line log took 16 s to write (``bench/bench_labels.py``). :func:`csv_rows` builds the
same text with Arrow's vectorised kernels: the minimal quoting of Python's :mod:`csv` module
(which ``to_csv`` writes through), ``\\n`` line ends, an empty field for a missing value,
integers in decimal, UTC times as ``%Y-%m-%dT%H:%M:%S.%fZ``. Other column types are refused:
floats (whose ``repr`` Arrow does not reproduce) stay with pandas. ``tests/claims/
test_csvtext.py`` holds the two writers equal.
"""

from __future__ import annotations

import csv
import functools
import io
from collections.abc import Callable, Sequence
from typing import Any, Final

#: The characters tried for :func:`_quote_triggers` (the ASCII controls, comma, quote).
_CANDIDATES: Final = "".join(chr(c) for c in range(32)) + ',"\x7f'


@functools.cache
def _quote_triggers() -> str:
    """The characters that make Python's csv writer quote a field, as pandas configures it
    (``QUOTE_MINIMAL``, ``\\n`` line ends): asked of the csv module itself, because the
    set has changed between Python versions (``\\r``)."""
    found = []
    for ch in _CANDIDATES:
        buf = io.StringIO()
        csv.writer(buf, lineterminator="\n").writerow([f"a{ch}b", "x"])
        if buf.getvalue().startswith('"'):
            found.append(ch)
    return "".join(found)


def is_text(typ: Any) -> bool:
    """Whether an Arrow type is text: a string, or a dictionary of strings."""
    import pyarrow as pa

    if pa.types.is_dictionary(typ):
        typ = typ.value_type
    return bool(pa.types.is_string(typ) or pa.types.is_large_string(typ))


def on_values(col: Any, fn: Callable[[Any], Any]) -> Any:
    """``fn`` of a string column; of a dictionary column, ``fn`` of its values under the
    same indices (each distinct value done once). Chunked columns chunk by chunk."""
    import pyarrow as pa

    if isinstance(col, pa.ChunkedArray):
        chunks = [on_values(c, fn) for c in col.chunks]
        return pa.chunked_array(chunks, type=chunks[0].type if chunks else None) \
            if chunks else col
    if pa.types.is_dictionary(col.type):
        return pa.DictionaryArray.from_arrays(col.indices, fn(col.dictionary))
    return fn(col)


def _text(col: Any, name: str) -> Any:
    """A column's cells as CSV fields (a string array, no nulls)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    typ = col.type
    if pa.types.is_dictionary(typ):
        # each distinct value formatted once, then taken for its rows (a missing index, or a
        # missing value, is an empty field)
        chunks = col.chunks if isinstance(col, pa.ChunkedArray) else [col]
        return pa.chunked_array(
            [pc.fill_null(pc.take(_text(c.dictionary, name), c.indices), "") for c in chunks],
            type=pa.large_string())
    if pa.types.is_string(typ) or pa.types.is_large_string(typ):
        pattern = "[" + "".join(f"\\x{ord(c):02x}" for c in _quote_triggers()) + "]"
        needs = pc.fill_null(pc.match_substring_regex(col, pattern), False)
        text = col
        if pc.any(needs).as_py():
            q = pa.scalar('"', typ)
            quoted = pc.binary_join_element_wise(q, pc.replace_substring(col, '"', '""'), q,
                                                 pa.scalar("", typ))
            text = pc.if_else(needs, quoted, col)
    elif pa.types.is_integer(typ):
        text = pc.cast(col, pa.string())
    elif pa.types.is_timestamp(typ) and typ.unit == "us" and typ.tz in ("UTC", "+00:00"):
        text = _stamps(col)
    elif pa.types.is_null(typ):
        text = pa.nulls(len(col), pa.string())
    else:
        raise TypeError(f"csv_rows: column {name!r} has type {typ}; only strings, integers "
                        "and UTC microsecond times are written here (pandas writes the rest)")
    # one string type for all (the joins take one), large: a part may pass 2 GiB of text
    return pc.fill_null(text.cast(pa.large_string()), "")


#: How times are written (``date_format`` of ``to_csv``).
STAMP: Final = "%Y-%m-%dT%H:%M:%S.%fZ"
#: Microseconds since 0001-01-01 and since 10000-01-01, from the Unix epoch.
_YEAR_1_US: Final = -62_135_596_800_000_000
_YEAR_10000_US: Final = 253_402_300_800_000_000


def _stamps(col: Any) -> Any:
    """UTC microsecond times as :data:`STAMP` (27 characters for years 1-9999, written
    digit by digit; pandas, 3x slower, formats a column with any other year)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    col = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    us = pc.fill_null(col.cast(pa.int64()), 0).to_numpy(zero_copy_only=False)
    if us.size and (us.min() < _YEAR_1_US or us.max() >= _YEAR_10000_US):
        # other widths (and pandas' own way with years before 1): pandas formats them
        return pa.array(col.to_pandas().dt.strftime(STAMP), pa.string())
    out = _stamp_bytes(np.ascontiguousarray(us, dtype=np.int64))
    offsets = np.arange(0, 27 * (us.size + 1), 27, dtype=np.int32)
    text = pa.StringArray.from_buffers(us.size, pa.py_buffer(offsets), pa.py_buffer(out))
    return pc.if_else(pc.is_valid(col), text, pa.scalar(None, pa.string())) \
        if col.null_count else text


@functools.cache
def _stamp_kernel() -> Any:
    """The compiled kernel of :func:`_stamp_bytes` (numba is imported on first use)."""
    import numpy as np
    from numba import njit

    @njit(cache=True, nogil=True)
    def kernel(us: Any, out: Any) -> None:  # pragma: no cover - compiled
        for i in range(us.shape[0]):
            t = us[i]
            days = t // 86_400_000_000
            tod = t - days * 86_400_000_000
            # the civil date of a day count (H. Hinnant's days_from_civil, inverted)
            z = days + 719_468
            era = (z if z >= 0 else z - 146_096) // 146_097
            doe = z - era * 146_097
            yoe = (doe - doe // 1_460 + doe // 36_524 - doe // 146_096) // 365
            doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
            mp = (5 * doy + 2) // 153
            d = doy - (153 * mp + 2) // 5 + 1
            m = mp + 3 if mp < 10 else mp - 9
            y = yoe + era * 400 + (1 if m <= 2 else 0)
            row = out[i]
            # unsigned 32-bit digits: a division by 10 the compiler makes a multiplication
            for at, width, value in ((0, 4, np.uint32(y)), (5, 2, np.uint32(m)),
                                     (8, 2, np.uint32(d)),
                                     (11, 2, np.uint32(tod // 3_600_000_000)),
                                     (14, 2, np.uint32(tod // 60_000_000 % 60)),
                                     (17, 2, np.uint32(tod // 1_000_000 % 60)),
                                     (20, 6, np.uint32(tod % 1_000_000))):
                for k in range(width - 1, -1, -1):
                    row[at + k] = np.uint8(48 + value % np.uint32(10))
                    value //= np.uint32(10)
            row[4] = 45
            row[7] = 45
            row[10] = 84
            row[13] = 58
            row[16] = 58
            row[19] = 46
            row[26] = 90

    return kernel


def _stamp_bytes(us: Any) -> Any:
    """The :data:`STAMP` text of UTC microseconds in years 1-9999: ``(n, 27)`` bytes."""
    import numpy as np

    out = np.empty((us.size, 27), dtype=np.uint8)
    _stamp_kernel()(us, out)
    return out


def csv_rows(table: Any, *, header: bool = False) -> bytes:
    """The rows of ``table`` (a pyarrow Table of two or more columns) as UTF-8 CSV text:
    the bytes ``table.to_pandas().to_csv(index=False, header=header,
    date_format="%Y-%m-%dT%H:%M:%S.%fZ")`` writes.

    Parameters
    ----------
    table : pyarrow.Table
        Columns of strings (or dictionaries of strings), integers, UTC microsecond times or
        nulls; at least two (a lone empty field is quoted by the csv module, not here).
    header : bool, default False
        Start with a line of the column names.
    """
    import pyarrow as pa

    if table.num_columns < 2:
        raise ValueError(f"csv_rows: {table.num_columns} column(s); it writes two or more")
    parts = []
    if header:
        names = [pa.array([n], pa.string()) for n in table.column_names]
        parts.append(_lines([_text(c, n) for n, c in zip(table.column_names, names,
                                                            strict=True)]))
    if table.num_rows:
        parts.append(_lines([_text(c, n) for n, c in zip(table.column_names, table.columns,
                                                            strict=True)]))
    return b"".join(parts)


def _lines(fields: Sequence[Any]) -> bytes:
    """The fields of each row joined by commas, each row ended by a newline."""
    import pyarrow as pa
    import pyarrow.compute as pc

    sep, end, nothing = (pa.scalar(v, pa.large_string()) for v in (",", "\n", ""))
    rows = pc.binary_join_element_wise(pc.binary_join_element_wise(*fields, sep), nothing, end)
    chunks = rows.chunks if isinstance(rows, pa.ChunkedArray) else [rows]
    return b"".join(_values(chunk) for chunk in chunks)


def _values(arr: Any) -> bytes:
    """The concatenated values of a string array without nulls."""
    import numpy as np
    import pyarrow as pa

    if not len(arr):
        return b""
    width = np.int64 if pa.types.is_large_string(arr.type) else np.int32
    offsets = np.frombuffer(arr.buffers()[1], dtype=width, count=len(arr) + 1,
                            offset=arr.offset * np.dtype(width).itemsize)
    return bytes(memoryview(arr.buffers()[2])[int(offsets[0]):int(offsets[-1])])
