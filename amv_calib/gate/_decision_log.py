"""The gate's decision-log writer: one ``os.write`` per JSON line, appended.

Standard library only (and the contract, which defines the format and the reader,
:mod:`amv_calib.contract._decision_log`): the runtime gate imports this module lazily when it
is given ``decision_log=PATH``, and logging must not add imports to the decision path.

Durability and latency
----------------------
:meth:`DecisionLogWriter.append` encodes the whole line first and hands it to the kernel in
**one** ``os.write`` on a descriptor opened with ``O_APPEND``. Earlier lines are therefore
never rewritten, and concurrent writers (threads here, or other processes with their own
writer) never interleave inside a line on a local file system. The cost on the decision path
is the JSON encoding plus one small ``write`` into the page cache, and an ``fstat`` to see
where the file ends (below): for a 3-premise record about 9 us at the median and 20 us at
the 99th percentile on the 2-core development machine before the ``fstat`` was added, the
same as a plain buffered ``write`` + ``flush`` (``bench/bench_labels.py`` measures it); the
``fstat`` added 2-3 us at the median in an interleaved A/B on a loaded host. Like any write
it can stall for milliseconds while the kernel writes dirty pages back. There is no
background thread and no buffering, so a crash loses at most the line being written. With
``fsync=True`` every line is also forced to disk (``os.fsync``), which costs a disk flush
(often milliseconds) per decision: use it only where losing the last lines in a power cut
matters more than latency. The same primitive, :class:`JsonLinesAppender`, writes the outcome
log (:mod:`amv_calib.gate._outcomes`).

A crash in the middle of a write, or a write that fails part-way (a full disk, a file-size
limit), can leave a *fragment*: part of a record, without its ``\\n``. Every record
therefore starts on a fresh line, whoever left the fragment: under the writer's lock,
``append`` looks at the file's end (an ``fstat``, and a one-byte ``pread`` unless the file
still ends where this writer's last record did) and writes the record with a leading
``\\n`` when the last byte is not one. So a failed write loses only its own record; the
fragment is a line of its own (the reader names it, and ``on_corrupt="skip"`` counts and
skips it). The file is never truncated: another process may have appended after the
fragment. Every record starts with its ``time`` field (``{"time":``), which lets the reader
find a record again inside a line that holds a fragment first: what an older writer left,
or what two processes leave in the microseconds between one's look at the file's end and
its write, if the other's write fails part-way just then (a lock across processes would
close that window for two more system calls per record; the reader closes it instead). No
record that a writer reported written is lost either way.
"""

from __future__ import annotations

import os
import stat
import threading
import weakref
from collections.abc import Mapping
from typing import Any, Self

from amv_calib.contract import encode_record, file_kind, utc_now_iso
from amv_calib.exceptions import ConfigError

__all__ = ["DecisionLogWriter", "JsonLinesAppender"]


class _PartialWrite(OSError):
    """A write failed after ``written`` of its bytes had reached the file."""

    def __init__(self, cause: OSError, written: int) -> None:
        super().__init__(cause.errno, cause.strerror)
        self.written = written


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    done = 0
    while done < len(data):
        try:
            n = os.write(fd, view[done:])
        except OSError as exc:
            raise _PartialWrite(exc, done) from exc
        done += n


def _not_regular(path: str, what: str, mode: int) -> str:
    return (f"{path}: {what} is {file_kind(mode)}, not a regular file; refused, because "
            f"writes to it would block or be lost")


def _open_regular_for_append(path: str, what: str) -> int:
    """A descriptor appending to the regular file ``path`` (created if missing).

    A FIFO accepts about 64 KiB and then blocks every write until somebody reads it, and a
    device or a socket is no log either: anything but a regular file (links followed) is
    refused here, once, rather than found out by a decision that never returns. Opened
    without blocking (opening a FIFO may wait for a reader) and checked with ``fstat`` on the
    open descriptor, so the file checked is the file written.
    """
    # read and write: the last byte is read back (pread) to see whether a line is open
    flags = (os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK
             | getattr(os, "O_CLOEXEC", 0))
    try:
        fd = os.open(path, flags, 0o644)
    except OSError as exc:
        # a socket cannot be opened at all (ENXIO): say what it is
        try:
            mode = os.stat(path).st_mode
        except OSError:
            raise exc from None
        if stat.S_ISREG(mode):
            raise
        raise ConfigError(_not_regular(path, what, mode)) from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise ConfigError(_not_regular(path, what, mode))
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


class JsonLinesAppender:
    """Append JSON records to a file, one ``os.write`` per line: the append primitive that
    :class:`DecisionLogWriter` and :class:`~amv_calib.gate.OutcomeLog` share.

    The rules are the module's (Durability and latency): a descriptor opened with
    ``O_APPEND``, one lock per writer, every record starting with its ``time`` and on a
    fresh line, whoever left a fragment at the file's end.

    Parameters
    ----------
    path : str or os.PathLike
        The file; created (with its parent folders) if missing, appended to otherwise.
    fsync : bool, default False
        Force every line to disk with ``os.fsync`` after writing it.
    what : str, default "log"
        What the file is, for error messages ("decision log", "outcome log").

    Raises
    ------
    ConfigError
        ``path`` is a FIFO, a device, a socket or a folder (links followed): refused when
        opened, before a write could block.
    OSError
        The file cannot be created or opened (permissions).
    """

    def __init__(self, path: str | os.PathLike[str], *, fsync: bool = False,
                 what: str = "log") -> None:
        self.path = os.fspath(path)
        self.fsync = fsync
        self.lines_written = 0
        self._what = what
        self._lock = threading.Lock()
        parent = os.path.dirname(self.path)
        if parent:
            os.makedirs(parent, exist_ok=True)
        fd = _open_regular_for_append(self.path, what)
        self._fd: int | None = fd
        # Where this writer's last complete record ended: while the file still ends there,
        # it ends in a newline and its last byte need not be read back.
        self._clean_end = -1
        self._finalizer = weakref.finalize(self, os.close, fd)

    def append(self, record: Mapping[str, Any]) -> None:
        """Write one record as one line.

        A record without ``time`` gets the current UTC time. Raises ``OSError`` if the
        write fails (disk full, closed writer) and ``TypeError`` for unserialisable fields.
        After a failed write only that record is lost: the next line starts on a fresh line.
        """
        if next(iter(record), None) != "time":
            # time first, always: the reader finds a record again by its start
            record = {"time": record["time"] if "time" in record else utc_now_iso(), **record}
        data = encode_record(record)
        with self._lock:
            fd = self._fd
            if fd is None:
                raise OSError(f"{self._what} {self.path!r} is closed")
            size = os.fstat(fd).st_size
            if size and size != self._clean_end and os.pread(fd, 1, size - 1) != b"\n":
                data = b"\n" + data  # the file ends in a fragment, whoever left it
            try:
                _write_all(fd, data)
            except _PartialWrite as exc:
                self._clean_end = -1
                raise OSError(exc.errno, f"{self._what} {self.path!r}: record not written "
                                         f"({exc.strerror})") from exc
            # Where the file ends if nobody else wrote meanwhile; if somebody did, the file
            # only grows past it, and the next append reads the last byte back.
            self._clean_end = size + len(data)
            if self.fsync:
                os.fsync(fd)
            self.lines_written += 1

    __call__ = append

    def close(self) -> None:
        """Close the file; further appends raise ``OSError``. Idempotent."""
        with self._lock:
            if self._fd is not None:
                self._fd = None
                self._finalizer()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.path!r}, fsync={self.fsync})"


class DecisionLogWriter(JsonLinesAppender):
    """Append decision records to a JSON-lines file, one ``os.write`` per line.

    Parameters
    ----------
    path : str or os.PathLike
        The log file; created (with its parent folders) if missing, appended to otherwise.
    fsync : bool, default False
        Force every line to disk with ``os.fsync`` after writing it (slow; see module docs).

    Notes
    -----
    Thread-safe: one lock serialises ``append`` calls of this writer. Several processes may
    append to the same file, each with its own writer: every line is a single ``O_APPEND``
    write, started on a fresh line (module docs). Use as a context manager or call
    :meth:`close`; the descriptor is also closed when the writer is garbage-collected.
    """

    def __init__(self, path: str | os.PathLike[str], *, fsync: bool = False) -> None:
        super().__init__(path, fsync=fsync, what="decision log")

