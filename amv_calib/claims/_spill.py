"""Columns of a big decision log kept in a temporary file while the label join runs.

The label join needs a premise entry's claim features and probability only to check them
and to write its claim rows; holding them for a 10 M-line log's 25 M entries costs 1 GB
beside the join's own arrays. :class:`SpilledColumns` takes them block by block as the log
is read and gives them back by position: window by window for the checks, for the positions
of one part of rows as the rows are written (the rows come in log order, so all the parts
together read the file once).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import weakref
from collections.abc import Iterator, Mapping, Sequence
from typing import IO, Final

import numpy as np

from amv_calib.claims._arrow import FloatArray, IntArray

#: Rows read at once when a column is read back whole or at scattered positions.
WINDOW_ROWS: Final = 1 << 20


def _remove(handles: Sequence[IO[bytes]], folder: str) -> None:
    for fh in handles:
        fh.close()
    shutil.rmtree(folder, ignore_errors=True)


class SpilledColumns:
    """float64 columns appended block by block to files in a temporary folder (under
    ``TMPDIR``), read back by position; the folder goes when the object does."""

    def __init__(self, names: Sequence[str]) -> None:
        self.names = tuple(names)
        self.n_rows = 0
        self._folder = tempfile.mkdtemp(prefix="amv-calib-spill-")
        self._paths = {n: os.path.join(self._folder, f"{i}.f8") for i, n in enumerate(names)}
        self._files = {n: open(p, "wb") for n, p in self._paths.items()}  # noqa: SIM115
        self._finalizer = weakref.finalize(self, _remove, list(self._files.values()),
                                           self._folder)

    def append(self, columns: Mapping[str, FloatArray]) -> None:
        """Append one block: every column, of one length."""
        sizes = {int(np.asarray(columns[n]).size) for n in self.names}
        if len(sizes) != 1:
            raise ValueError(f"spilled columns of different lengths: {sorted(sizes)}")
        try:
            for n in self.names:
                np.ascontiguousarray(columns[n], dtype=np.float64).tofile(self._files[n])
        except OSError as exc:  # a full disk, most likely: say which, and what to do
            raise OSError(exc.errno, f"the label join's temporary columns could not be "
                          f"written to {self._folder} ({exc.strerror}); point TMPDIR at a "
                          f"disk with room (about 40 bytes a premise entry)") from exc
        self.n_rows += sizes.pop()

    def finish_writing(self) -> None:
        """Flush the files: they are read from here on."""
        for fh in self._files.values():
            fh.flush()

    def read(self, name: str, lo: int, hi: int) -> FloatArray:
        """Rows ``lo:hi`` of column ``name``."""
        lo, hi = max(lo, 0), min(hi, self.n_rows)
        if hi <= lo:
            return np.zeros(0, dtype=np.float64)
        return np.fromfile(self._paths[name], dtype=np.float64, count=hi - lo, offset=8 * lo)

    def windows(self, name: str) -> Iterator[tuple[int, FloatArray]]:
        """Column ``name`` in consecutive windows: (first row, values)."""
        for lo in range(0, self.n_rows, WINDOW_ROWS):
            yield lo, self.read(name, lo, lo + WINDOW_ROWS)

    def take(self, name: str, positions: IntArray) -> FloatArray:
        """Column ``name`` at ascending ``positions``, read window by window over their
        span (never more than a window's rows at once beside the answer)."""
        pos = np.asarray(positions, dtype=np.int64)
        out = np.empty(pos.size, dtype=np.float64)
        if not pos.size:
            return out
        if pos[0] < 0 or pos[-1] >= self.n_rows or (pos.size > 1 and (np.diff(pos) < 0).any()):
            raise ValueError(f"positions must ascend within 0..{self.n_rows - 1}")
        start = 0
        while start < pos.size:
            lo = int(pos[start])
            hi = min(lo + WINDOW_ROWS, self.n_rows)
            stop = int(np.searchsorted(pos, hi, side="left"))
            out[start:stop] = self.read(name, lo, hi)[pos[start:stop] - lo]
            start = stop
        return out
