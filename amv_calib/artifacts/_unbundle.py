"""Install a bundle into a models folder that may already hold the model, without clobbering it.

``tar -xzf FILE -C models`` is enough on a machine without the model. Where the model is
already there, tar would replace its ``aliases.json`` (every alias and its history) with the
bundle's; :func:`unbundle` adds the bundle's version instead, and its alias only where that
changes nothing else.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import logging
import os
import shutil
import tarfile
import uuid
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

from amv_calib.artifacts._aliases import _write_aliases
from amv_calib.artifacts._export import _VERSION_RE, _check_name, _fsync_dir, _locked
from amv_calib.contract import ALIASES_FILE, load_artifact, open_regular, read_aliases
from amv_calib.exceptions import ArtifactError
from amv_calib.settings import models_dir as default_models_dir

__all__ = ["unbundle"]

_log = logging.getLogger(__name__)


#: At most this many bytes of tar stream (headers and contents, decompressed) are read, and
#: so at most this many written: a version is a few MB; a gzip bomb of a few MB unpacks to GBs.
MAX_BUNDLE_BYTES: Final = 1024 * 1024 * 1024  # the loader's cap on one file of a version
#: At most this many members (the version folder's own limit is 10,000 entries).
MAX_BUNDLE_MEMBERS: Final = 10_000


def _members(tar: tarfile.TarFile, path: Path) -> tuple[str, str, list[tarfile.TarInfo]]:
    """``(NAME, vN, members)`` of a bundle whose members are ``NAME/vN/...`` regular files
    and folders and, at most, ``NAME/aliases.json``; checked from the headers alone, before
    anything is extracted, reading at most :data:`MAX_BUNDLE_BYTES` of the stream."""
    names: set[str] = set()
    versions: set[str] = set()
    members: list[tarfile.TarInfo] = []
    while True:
        m = tar.next()
        if m is None:
            break
        where = f"{path}: member {m.name!r}"
        parts = m.name.split("/")
        if not (m.isfile() or m.isdir()) or m.issparse() or m.name.startswith("/") \
                or any(p in ("", ".", "..") for p in parts):
            raise ArtifactError(f"{where} is not a plain file or folder inside the bundle")
        if len(parts) == 2 and parts[1] == ALIASES_FILE:
            if not m.isfile():
                raise ArtifactError(f"{where} is not a file")
        elif len(parts) > 1 and not _VERSION_RE.fullmatch(parts[1]):
            raise ArtifactError(f"{where}: {parts[1]!r} is not a version folder (vN: v1, v2, "
                                f"...); nothing installed")
        elif len(parts) > 1:
            versions.add(parts[1])
        names.add(parts[0])
        members.append(m)
        # tar.offset: where the stream is once this member's contents are passed, as its
        # header declares them: checked before they are read, let alone written
        if tar.offset > MAX_BUNDLE_BYTES:
            raise ArtifactError(f"{where}: the bundle unpacks to more than "
                                f"{MAX_BUNDLE_BYTES} bytes; nothing installed")
        if len(members) > MAX_BUNDLE_MEMBERS:
            raise ArtifactError(f"{path}: more than {MAX_BUNDLE_MEMBERS} members; nothing "
                                f"installed")
    if len(names) != 1 or len(versions) != 1:
        raise ArtifactError(f"{path}: not a bundle of one version (models {sorted(names)}, "
                            f"versions {sorted(versions)})")
    name, version = names.pop(), versions.pop()
    _check_name(name)
    return name, version, members


def _digests(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def unbundle(
    path: str | os.PathLike[str],
    *,
    models_dir: str | os.PathLike[str] | None = None,
    trusted_keys: Sequence[str | os.PathLike[str]] | None = None,
) -> dict[str, Any]:
    """Install a bundle (:func:`bundle`) into a models folder, verifying it first.

    The version folder is added when it is missing; one already there must hold the same
    files. The bundle's alias (when it carries one) is added when the model has no such
    alias, and left as it is when it already points at this version; an alias that points
    elsewhere is **not** moved (that is a promotion, with its checks): the version is
    installed and the error says how to promote it. Other aliases and the alias history stay.

    Parameters
    ----------
    path : path
        The ``.tar.gz`` file.
    models_dir : path, optional
        Defaults to :func:`amv_calib.settings.models_dir`.
    trusted_keys : sequence of path-like, optional
        As for :func:`~amv_calib.contract.load_artifact` (or ``$AMV_CALIB_TRUSTED_KEYS``):
        an unsigned or wrongly signed version is refused before anything is installed.

    Returns
    -------
    dict
        ``{"name", "version", "path", "installed", "alias", "alias_set"}``: whether the
        version folder was added (False: an identical one was there) and whether the alias
        was added (False: it already pointed at this version, or the bundle has none).

    Raises
    ------
    ArtifactError
        A member outside ``NAME/vN`` and ``NAME/aliases.json`` (or a link), a version folder
        not named ``vN``, a bundle that unpacks to more than :data:`MAX_BUNDLE_BYTES`
        (checked from the headers before anything is written), a file that is not a
        readable ``.tar.gz``, a version that
        fails verification, a version folder of that number with other files, or an alias
        of the model that points at another version.
    """
    src = Path(path)
    root = Path(models_dir) if models_dir is not None else default_models_dir()
    root.mkdir(parents=True, exist_ok=True)
    tmp = root / f".tmp-unbundle-{uuid.uuid4().hex}"
    try:
        # a FIFO or a device is refused before a read could wait; a read error names src
        with open_regular(src, what="bundle", error=ArtifactError) as fh:
            try:
                with tarfile.open(fileobj=fh, mode="r:gz") as tar:
                    name, version, members = _members(tar, src)
                    # only the members checked, each of the size its header declared
                    tar.extractall(tmp, members=members, filter="data")
            except (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile) as exc:
                raise ArtifactError(f"{src}: not a readable .tar.gz ({exc}); nothing "
                                    f"installed") from None
        staged = tmp / name / version
        alias, entry = None, None
        if (tmp / name / ALIASES_FILE).exists():
            bundled = read_aliases(tmp / name)["aliases"]
            if len(bundled) != 1:
                raise ArtifactError(f"{src}: {ALIASES_FILE} must name one alias, not "
                                    f"{sorted(bundled)}")
            alias, entry = next(iter(bundled.items()))
            load_artifact(f"{tmp / name}@{alias}", trusted_keys=trusted_keys)
        else:
            load_artifact(staged, trusted_keys=trusted_keys)
        mdir = root / name
        mdir.mkdir(exist_ok=True)
        target = mdir / version
        try:
            os.rename(staged, target)  # atomic; fails when the number is taken
            installed = True
            _fsync_dir(mdir)
        except OSError:
            if not target.is_dir():
                raise
            installed = False
        if not installed and _digests(target) != _digests(staged):
            raise ArtifactError(f"{target}: already exists with other files than the bundle's "
                                f"{version} (exported elsewhere under the same number?); "
                                f"nothing installed")
        alias_set = False
        if alias is not None and entry is not None:
            with _locked(mdir):
                data = read_aliases(mdir)
                have = data["aliases"].get(alias)
                if have is None:
                    data["aliases"][alias] = entry
                    _write_aliases(mdir, data)
                    alias_set = True
                elif (have["version"], have.get("manifest_sha256")) != (
                        entry["version"], entry["manifest_sha256"]):
                    raise ArtifactError(
                        f"{mdir / ALIASES_FILE}: alias {alias!r} points at {have['version']} "
                        f"here; {version} was {'installed' if installed else 'already there'} "
                        f"but not made {alias}: amv-calib promote {name} {version} "
                        f"--alias {alias}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    with contextlib.suppress(OSError):
        _fsync_dir(root)
    _log.info("unbundled %s %s into %s%s", name, version, root,
              f" ({alias} set)" if alias_set else "")
    return {"name": name, "version": version, "path": str(target), "installed": installed,
            "alias": alias, "alias_set": alias_set}
