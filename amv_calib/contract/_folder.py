"""One read of an artifact version folder, through one directory handle that pins it.

The loader and the signature check must judge the *same* bytes. Reading the folder by path
twice (once to hash, once to verify) lets anyone who can write ``models/`` but holds no
private key swap a doctored copy and the genuine signed folder in and out between the two
reads (``renameat2(RENAME_EXCHANGE)``), so that the signature is checked on the genuine
files and the gate is built from the doctored ones. Here the version folder is opened once
(``O_DIRECTORY | O_NOFOLLOW``) and every file is opened relative to that handle without
following links (``O_NOFOLLOW | O_NONBLOCK``), checked with ``fstat`` (regular files only,
within a size cap) and read once: its sha256 is taken over the bytes read, and the JSON
files and the signature are kept in memory, to be parsed and verified as read. Whatever is
renamed meanwhile, every byte comes from the one folder the handle holds.

Standard library only: the runtime gate imports this.
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from amv_calib.contract._files import file_kind
from amv_calib.exceptions import ArtifactError

#: Larger JSON files (and signatures) are refused before parsing (an isotonic table of 10^5
#: knots is ~5 MB).
MAX_JSON_BYTES: Final = 64 * 1024 * 1024
#: Larger other files (figures, the joblib copy) are refused before hashing.
MAX_FILE_BYTES: Final = 1024 * 1024 * 1024
#: A version folder holds at most this many entries, folders nested at most this deep.
_MAX_ENTRIES: Final = 10_000
_MAX_DEPTH: Final = 8

_DIR_FLAGS: Final = os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0)
_FILE_FLAGS: Final = (os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK
                      | getattr(os, "O_CLOEXEC", 0))


class _Problem(Exception):
    """Why one entry of a folder cannot be read (the text follows its name)."""


@dataclass(frozen=True, kw_only=True)
class VersionFolder:
    """What one read of a version folder found.

    Attributes
    ----------
    path : pathlib.Path
        The folder as named.
    digests : dict
        Every regular file read (relative POSIX path) -> sha256 of the bytes read.
    data : dict
        The bytes of the files kept in memory: those ending ``.json`` and those named in
        ``keep`` (at most :data:`MAX_JSON_BYTES` each).
    problems : dict
        Entries that could not be read -> why (``"is a FIFO, not a regular file"``, ``"is a
        link that leaves ..."``, ``"is larger than N bytes"``); such entries have no digest.
    dirs : set
        The sub-folders (whose files were read too).
    """

    path: Path
    digests: dict[str, str] = field(default_factory=dict)
    data: dict[str, bytes] = field(default_factory=dict)
    problems: dict[str, str] = field(default_factory=dict)
    dirs: set[str] = field(default_factory=set)

    def names(self) -> set[str]:
        """Every entry found, read or not, sub-folders aside."""
        return set(self.digests) | set(self.problems)

    def problem(self, rel: str) -> str | None:
        """Why ``rel`` was not read, if it exists and was not (a folder in its place too)."""
        if rel in self.dirs:
            return "is a directory, not a regular file"
        return self.problems.get(rel)


def _kept(rel: str, keep: frozenset[str]) -> bool:
    return rel.endswith(".json") or rel in keep


def _link_problem(dfd: int, name: str, where: Path, inside: Path) -> str:
    try:
        target = os.readlink(name, dir_fd=dfd)
    except OSError:
        target = "?"
    real = os.path.realpath(where.parent / target)
    base = os.path.realpath(inside)
    if os.path.commonpath([real, base]) != base:
        return f"is a link that leaves {inside} (to {real})"
    return (f"is a symbolic link (to {target}); an artifact holds regular files only, "
            f"never links")


def _read_fd(fd: int, size: int, limit: int, keep: bool) -> tuple[str, bytes | None]:
    if size > limit:
        raise _Problem(f"is larger than {limit} bytes")
    h = hashlib.sha256()
    parts: list[bytes] = []
    left = limit + 1
    while left > 0:
        block = os.read(fd, min(1 << 20, left))
        if not block:
            break
        h.update(block)
        if keep:
            parts.append(block)
        left -= len(block)
    if left <= 0:  # grew after fstat
        raise _Problem(f"is larger than {limit} bytes")
    return h.hexdigest(), b"".join(parts) if keep else None


def read_entry(dfd: int, name: str, *, where: Path, inside: Path, limit: int,
               keep: bool) -> tuple[str, bytes | None] | None:
    """sha256 (and the bytes, if ``keep``) of the regular file ``name`` in the folder ``dfd``.

    ``where`` names the entry and ``inside`` its folder in messages. None when the entry
    does not exist. Raises ``_Problem`` for a link, anything but a regular file, a file
    over ``limit`` bytes or a read error.
    """
    try:
        fd = os.open(name, _FILE_FLAGS, dir_fd=dfd)
    except FileNotFoundError:
        return None
    except OSError as exc:
        try:
            mode = os.stat(name, dir_fd=dfd, follow_symlinks=False).st_mode
        except FileNotFoundError:
            return None
        except OSError:
            mode = stat.S_IFREG
        if stat.S_ISLNK(mode) or exc.errno == errno.ELOOP:
            raise _Problem(_link_problem(dfd, name, where, inside)) from None
        if not stat.S_ISREG(mode):
            raise _Problem(f"is {file_kind(mode)}, not a regular file") from None
        raise _Problem(f"cannot be read ({exc.strerror})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise _Problem(f"is {file_kind(st.st_mode)}, not a regular file")
        try:
            return _read_fd(fd, st.st_size, limit, keep)
        except OSError as exc:
            raise _Problem(f"cannot be read ({exc.strerror})") from None
    finally:
        os.close(fd)


def open_folder(path: Path, *, what: str) -> int:
    """A handle on the folder ``path`` itself, refused if its last component is a link."""
    absolute = Path(os.path.abspath(path))
    if not absolute.name:  # the root folder
        return os.open(absolute, _DIR_FLAGS)
    try:
        parent = os.open(absolute.parent, _DIR_FLAGS)
    except OSError as exc:
        raise ArtifactError(f"{path}: {what} cannot be opened ({exc.strerror})") from None
    try:
        try:
            return os.open(absolute.name, _DIR_FLAGS | os.O_NOFOLLOW, dir_fd=parent)
        except FileNotFoundError:
            raise ArtifactError(f"{path}: {what} does not exist") from None
        except OSError as exc:
            try:
                mode = os.stat(absolute.name, dir_fd=parent, follow_symlinks=False).st_mode
            except OSError:
                mode = stat.S_IFDIR
            if stat.S_ISLNK(mode):
                why = _link_problem(parent, absolute.name, absolute, absolute.parent)
                raise ArtifactError(f"{path}: {what} {why}") from None
            if not stat.S_ISDIR(mode):
                raise ArtifactError(f"{path}: {what} is {file_kind(mode)}, not a folder") \
                    from None
            raise ArtifactError(f"{path}: {what} cannot be opened ({exc.strerror})") from None
    finally:
        os.close(parent)


def read_version_folder(path: str | os.PathLike[str], *,
                        keep: frozenset[str] = frozenset()) -> VersionFolder:
    """Read every file of the version folder ``path`` once (module docstring).

    Raises
    ------
    ArtifactError
        The folder does not exist, is a link or not a folder, or holds more than 10,000
        entries or folders nested deeper than 8. Problems with single entries are returned
        in ``problems``, for the caller to name in the order of its checks.
    """
    root = Path(path)
    folder = VersionFolder(path=root)
    dfd = open_folder(root, what="version folder")
    try:
        _walk(dfd, "", 0, folder, keep)
    finally:
        os.close(dfd)
    return folder


def _walk(dfd: int, prefix: str, depth: int, folder: VersionFolder,
          keep: frozenset[str]) -> None:
    root = folder.path
    for name in sorted(os.listdir(dfd)):
        rel = prefix + name
        if len(folder.digests) + len(folder.problems) >= _MAX_ENTRIES:
            raise ArtifactError(f"{root}: holds more than {_MAX_ENTRIES} files")
        try:
            mode = os.stat(name, dir_fd=dfd, follow_symlinks=False).st_mode
        except FileNotFoundError:
            continue  # removed since the listing: not part of the folder read
        if stat.S_ISDIR(mode):
            folder.dirs.add(rel)
            if depth + 1 >= _MAX_DEPTH:
                raise ArtifactError(f"{root / rel}: folders nested deeper than {_MAX_DEPTH}")
            try:
                sub = os.open(name, _DIR_FLAGS | os.O_NOFOLLOW, dir_fd=dfd)
            except OSError as exc:
                folder.problems[rel] = f"cannot be read ({exc.strerror})"
                continue
            try:
                _walk(sub, rel + "/", depth + 1, folder, keep)
            finally:
                os.close(sub)
            continue
        kept = _kept(rel, keep)
        try:
            got = read_entry(dfd, name, where=root / rel, inside=root,
                             limit=MAX_JSON_BYTES if kept else MAX_FILE_BYTES, keep=kept)
        except _Problem as exc:
            folder.problems[rel] = str(exc)
            continue
        if got is None:
            continue
        folder.digests[rel] = got[0]
        if got[1] is not None:
            folder.data[rel] = got[1]


def read_file_in(folder: Path, name: str, *, what: str,
                 limit: int = MAX_JSON_BYTES) -> bytes | None:
    """The bytes of the regular file ``folder/name`` (no link, at most ``limit`` bytes);
    None when it does not exist."""
    dfd = os.open(folder, _DIR_FLAGS)
    try:
        got = read_entry(dfd, name, where=folder / name, inside=folder, limit=limit,
                         keep=True)
    except _Problem as exc:
        raise ArtifactError(f"{folder / name}: {what} {exc}") from None
    finally:
        os.close(dfd)
    return None if got is None else got[1]
