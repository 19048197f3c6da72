"""Inter-process locks on files: one implementation for every folder amv-calib guards.

A lock is ``flock`` on a lock file. The kernel releases it when its holder exits, killed or
not, so a lock left by a dead process is taken over by the next one without any guess about
staleness. The holder writes who it is (pid, host, start time) into the file, so that a
refused process can name the holder, and removes the file when it is done (a lock taken on
a file that was removed meanwhile is dropped and taken again on the new file). Local file
systems only: ``flock`` is not reliable over NFS. Standard library only.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

from amv_calib.exceptions import AmvCalibError, LockedError

__all__ = ["exclusive", "holder"]


def holder(path: str | os.PathLike[str]) -> str:
    """Who holds (or last held) the lock file ``path``, as text for an error message."""
    try:
        info = json.loads(Path(path).read_text(encoding="utf-8") or "{}")
    except (OSError, ValueError):
        info = {}
    if not isinstance(info, dict) or "pid" not in info:
        return "an unknown process"
    return (f"pid {info.get('pid')} on {info.get('host', '?')} since "
            f"{info.get('started_utc', '?')}")


def _try_flock(fd: int, *, block: bool) -> bool:
    import fcntl

    try:
        fcntl.flock(fd, fcntl.LOCK_EX | (0 if block else fcntl.LOCK_NB))
    except BlockingIOError:
        return False
    return True


@contextlib.contextmanager
def exclusive(
    path: str | os.PathLike[str],
    *,
    what: str,
    wait: bool | float = False,
    error: type[AmvCalibError] = LockedError,
) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` (created if missing) for the ``with`` block.

    Parameters
    ----------
    path : path-like
        The lock file. Its folder must exist.
    what : str
        What the lock guards, for the error message ("pipeline 'retrain'").
    wait : bool or float, default False
        False: fail at once when another process holds the lock. True: wait for it. A
        number: wait at most that many seconds.
    error : type of AmvCalibError, default LockedError
        Raised when the lock cannot be had; its message names the holder.

    Raises
    ------
    LockedError (or ``error``)
        Another live process holds the lock, and ``wait`` is False or ran out.
    """
    lock = Path(path)
    deadline = None if wait is True or wait is False else time.monotonic() + float(wait)
    while True:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
        got = _try_flock(fd, block=wait is True)
        while not got and deadline is not None and time.monotonic() < deadline:
            time.sleep(0.05)
            got = _try_flock(fd, block=False)
        if got and _same_file(fd, lock):
            break
        os.close(fd)
        if not got:
            how = "" if wait is False else f" (waited {float(wait):g} s)"
            hint = "" if wait is not False else "; pass --wait to wait for it"
            raise error(f"{what} is locked by {holder(lock)}{how}: {lock}{hint}")
        # The holder removed the file while we waited for it: lock the new one instead.
    try:
        os.ftruncate(fd, 0)
        os.write(fd, json.dumps({
            "pid": os.getpid(), "host": socket.gethostname(),
            "started_utc": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        }).encode("utf-8"))
        yield
    finally:
        # Removed while still held, so that no one can lock this file once we let go; a
        # holder killed before this point leaves the file, whose lock the kernel released.
        with contextlib.suppress(OSError):
            lock.unlink()
        os.close(fd)


def _same_file(fd: int, path: Path) -> bool:
    try:
        st = path.stat()
    except FileNotFoundError:
        return False
    own = os.fstat(fd)
    return (own.st_dev, own.st_ino) == (st.st_dev, st.st_ino)
