"""Opening the user's files: regular files only, refused at once otherwise.

``open()`` of a FIFO waits for a writer, and a read of ``/dev/zero`` never ends: a reader
that trusts a path hangs. Every reader of a file the user names (ingest, label, replay,
episodes, certify, monitor, the pipeline's input hashing) opens it through
:func:`open_regular` (or checks it with :func:`require_regular` before a library opens it),
which refuses a FIFO, a device, a socket or a folder before reading a byte. Standard library
only.
"""

from __future__ import annotations

import io
import os
import stat
from pathlib import Path
from typing import Any

from amv_calib.exceptions import AmvCalibError, ConfigError, DataContractError

__all__ = ["file_kind", "open_regular", "read_regular", "read_toml", "require_regular"]


def file_kind(mode: int) -> str:
    """What a file of ``st_mode`` ``mode`` is, for a message (``"a FIFO"``, ``"a folder"``)."""
    if stat.S_ISREG(mode):
        return "a regular file"
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    return "a special file"


def _refusal(path: str | os.PathLike[str], what: str, mode: int) -> str:
    return f"{os.fspath(path)}: {what} is {file_kind(mode)}, not a regular file"


def require_regular(path: str | os.PathLike[str], *, what: str = "input file",
                    error: type[AmvCalibError] = DataContractError) -> int:
    """The size of the regular file ``path`` (links followed); ``error`` for anything else.

    For a path a library opens itself (pyarrow, pandas): checked by ``stat``, which never
    blocks, so a FIFO or a device is refused before the library could wait on it.
    """
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise error(f"{os.fspath(path)}: {what} does not exist") from None
    except OSError as exc:
        raise error(f"{os.fspath(path)}: cannot read the {what} ({exc.strerror})") from None
    if not stat.S_ISREG(st.st_mode):
        raise error(_refusal(path, what, st.st_mode))
    return st.st_size


def open_regular(path: str | os.PathLike[str], *, what: str = "input file",
                 error: type[AmvCalibError] = DataContractError) -> io.BufferedReader:
    """``path`` opened for binary reading if it is a regular file (links followed).

    Opened without blocking and checked with ``fstat`` on the open descriptor, so the file
    checked is the file read.

    Raises
    ------
    AmvCalibError
        Of type ``error``, naming the path: missing, unreadable, or not a regular file.
    """
    name = os.fspath(path)
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise error(f"{name}: {what} does not exist") from None
    except OSError as exc:
        # a socket cannot be opened at all (ENXIO): say what it is
        try:
            mode = os.stat(name).st_mode
        except OSError:
            mode = stat.S_IFREG
        if not stat.S_ISREG(mode):
            raise error(_refusal(name, what, mode)) from None
        raise error(f"{name}: cannot read the {what} ({exc.strerror})") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise error(_refusal(name, what, mode))
        os.set_blocking(fd, True)
        raw = _NamedFile(fd, f"{name}: cannot read the {what}", error)
    except BaseException:
        os.close(fd)
        raise
    return io.BufferedReader(raw)


class _NamedFile(io.FileIO):
    """A file read through ``FileIO`` whose read errors name it.

    A regular file can still fail to read (``/proc/self/mem`` gives EIO, a disk gives EIO,
    a network file system ESTALE): the error says which file, as the caller's ``error``,
    instead of a bare ``OSError`` from deep inside a reader. ``BufferedReader`` reads only
    through ``readinto`` and ``readall``.
    """

    def __init__(self, fd: int, problem: str, error: type[AmvCalibError]) -> None:
        super().__init__(fd, "rb", closefd=True)
        self._problem = problem
        self._error = error

    def _failed(self, exc: OSError) -> AmvCalibError:
        return self._error(f"{self._problem} ({exc.strerror or exc})")

    def readinto(self, buffer: Any) -> int | None:
        try:
            return super().readinto(buffer)
        except OSError as exc:
            raise self._failed(exc) from None

    def readall(self) -> bytes:
        try:
            return super().readall()
        except OSError as exc:
            raise self._failed(exc) from None


def read_regular(path: str | os.PathLike[str], *, what: str = "input file",
                 error: type[AmvCalibError] = DataContractError,
                 limit: int | None = None) -> bytes:
    """The bytes of the regular file ``path`` (:func:`open_regular`), at most ``limit``."""
    with open_regular(Path(path), what=what, error=error) as fh:
        data = fh.read() if limit is None else fh.read(limit + 1)
    if limit is not None and len(data) > limit:
        raise error(f"{os.fspath(path)}: {what} is larger than {limit} bytes")
    return data


def read_toml(path: str | os.PathLike[str], what: str) -> dict[str, Any]:
    """The TOML document at ``path``; ``what`` names the file in errors (``"pipeline file"``).

    TOML itself refuses a key given twice.

    Raises
    ------
    ConfigError
        The file is missing, is not a regular file (a FIFO, a device), or is not valid TOML.
    """
    import tomllib

    p = Path(path)
    if not os.path.lexists(p):
        raise ConfigError(f"{what} {str(p)!r} not found")
    raw = read_regular(p, what=what, error=ConfigError)
    try:
        return tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{p.name}: not UTF-8 text ({exc.reason} at byte {exc.start})") \
            from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{p.name}: not valid TOML: {exc}") from exc
