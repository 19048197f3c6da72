"""Verify an artifact version (its summary for a person), and bundle a version with its
aliases into one deterministic ``.tar.gz`` for a machine without the training side."""

from __future__ import annotations

import datetime as dt
import gzip
import io
import logging
import os
import tarfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from amv_calib.artifacts._aliases import _manifest_sha, _model_dir
from amv_calib.artifacts._export import (
    _VERSION_RE,
    _atomic_write,
    _check_name,
    _check_version,
)
from amv_calib.contract import (
    ALIASES_FILE,
    ALIASES_FORMAT,
    ALIASES_FORMAT_VERSION,
    MANIFEST_FILE,
    SIGNATURE_FILE,
    LoadedArtifact,
    canonical_json_bytes,
    load_artifact,
    read_aliases,
    thresholds_sha256,
)
from amv_calib.exceptions import (
    ArtifactError,
)

_log = logging.getLogger(__name__)


# -- verify and bundle ---------------------------------------------------------------------
def _summary(art: LoadedArtifact) -> dict[str, Any]:
    m = art.manifest
    return {
        "ok": True,
        "path": str(art.path),
        "name": art.name,
        "version": art.version,
        "alias": art.alias,
        "format": m["format"],
        "format_version": m["format_version"],
        "created_utc": m.get("created_utc"),
        "package_version": m.get("package_version"),
        "git_commit": m.get("git_commit"),
        "calibrator_kind": art.calibrator.kind,
        "calibrator_source": art.calibrator.source,
        "feature_map": art.calibrator.feature_map.names,
        "gate": art.thresholds,
        "training_data": m.get("training_data"),
        "metrics": m.get("metrics"),
        "files": art.files,
        "certificate": m.get("certificate"),
        # the loader refuses a certificate bound to anything else, so a loaded one matches
        "certificate_check": None if m.get("certificate") is None else {
            "matches": True,
            "calibrator_sha256": m["certificate"]["calibrator_sha256"],
            "thresholds_sha256": thresholds_sha256(art.thresholds),
            "tuning_record": (m.get("tuning") or {}).get("fingerprint"),
            "certified": m["certificate"].get("statement"),
            "observed_upper_bound": m["certificate"].get("observed_upper_bound"),
        },
        "tuning": m.get("tuning"),
        "aliases": _aliases_of(art),
        "signature": {
            "file": SIGNATURE_FILE if (art.path / SIGNATURE_FILE).is_file() else None,
            "verified_by": None if art.signed_by is None else str(art.signed_by),
        },
    }


def _aliases_of(art: LoadedArtifact) -> list[str]:
    """The file aliases of the model folder that point at this version."""
    try:
        data = read_aliases(art.path.parent)
    except ArtifactError:
        return []
    return sorted(a for a, e in data["aliases"].items() if e.get("version") == art.version)


def verify_artifact(path: str | os.PathLike[str], *,
                    trusted_keys: Sequence[str | os.PathLike[str]] | None = None
                    ) -> dict[str, Any]:
    """Check an artifact as the gate would and return its manifest summary.

    ``path`` is any reference :func:`amv_calib.gate.load_artifact` takes (a version folder
    or ``MODEL_DIR@ALIAS``); with ``trusted_keys`` (or ``$AMV_CALIB_TRUSTED_KEYS``) its
    signature must verify. Raises :class:`~amv_calib.ArtifactError` when it is refused.
    """
    return _summary(load_artifact(path, trusted_keys=trusted_keys))


def _epoch(created_utc: Any) -> int:
    try:
        when = dt.datetime.strptime(str(created_utc), "%Y-%m-%dT%H:%M:%SZ")
    except ValueError:
        return 0
    return int(when.replace(tzinfo=dt.UTC).timestamp())


def bundle(
    name: str,
    version: str | int,
    out: str | os.PathLike[str] | None = None,
    *,
    models_dir: str | os.PathLike[str] | None = None,
) -> Path:
    """Write one verified version as a deterministic ``.tar.gz`` and return its path.

    Entries are ``NAME/vN/...`` in sorted order with mode 0644/0755, owner 0, and every
    mtime set to the manifest's ``created_utc``; the gzip header carries no name or time.
    So the same artifact always gives the same bytes. Extract it into a ``models`` folder
    (``tar -xzf FILE -C models``) and it is ready to verify and promote.

    Given an alias (``production``) instead of a version, the bundle holds the version the
    alias points at and ``NAME/aliases.json`` with that one alias (its version, the sha256
    of the manifest, when it was promoted): extracted into a models folder, ``NAME@ALIAS``
    resolves and verifies (signature included) with no promote. The alias file is the
    only file outside the version folder, and it *replaces* an ``aliases.json`` already in
    that folder (tar's default), other aliases and history with it: on a machine that
    already has the model, install the bundle with :func:`unbundle` instead.

    Parameters
    ----------
    version : str or int
        ``vN`` (or N), or an alias of the model.
    out : path, optional
        Defaults to ``NAME-vN.tar.gz`` (``NAME-ALIAS-vN.tar.gz`` for an alias) in the
        current directory.
    """
    mdir = _model_dir(name, models_dir)
    alias = None
    if isinstance(version, int) or _VERSION_RE.fullmatch(str(version)) or version.isdigit():
        version = _check_version(version)
        art = load_artifact(mdir / version)
    else:
        alias = _check_name(version, "alias")
        art = load_artifact(f"{mdir}@{alias}")
        version = art.version
    target = Path(out) if out is not None else Path(
        f"{name}-{version}.tar.gz" if alias is None else f"{name}-{alias}-{version}.tar.gz")
    mtime = _epoch(art.manifest.get("created_utc"))
    signed = [SIGNATURE_FILE] if (art.path / SIGNATURE_FILE).is_file() else []
    rels = sorted([MANIFEST_FILE, *art.files, *signed])
    dirs = sorted({str(Path(r).parent.as_posix()) for r in rels} - {"."})
    prefix = f"{name}/{version}"
    entries: list[tuple[str, bytes | None]] = [
        (f"{prefix}/{d}".rstrip("/"), None) for d in ("", *dirs)]
    entries += [(f"{prefix}/{r}", (art.path / r).read_bytes()) for r in rels]
    if alias is not None:
        entries.append((f"{name}/{ALIASES_FILE}", _bundled_aliases(mdir, art, alias)))
    buf = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buf, mtime=0, compresslevel=9) as gz, \
            tarfile.open(fileobj=gz, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for arcname, data in sorted(entries, key=lambda e: e[0]):
            info = tarfile.TarInfo(arcname)
            info.mtime = mtime
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            if data is None:
                info.type = tarfile.DIRTYPE
                info.mode = 0o755
                tar.addfile(info)
            else:
                info.size = len(data)
                info.mode = 0o644
                tar.addfile(info, io.BytesIO(data))
    target.parent.mkdir(parents=True, exist_ok=True)
    _atomic_write(target, buf.getvalue())
    _log.info("bundled %s %s%s into %s", name, version,
              "" if alias is None else f" as {alias}", target)
    return target


def _bundled_aliases(mdir: Path, art: LoadedArtifact, alias: str) -> bytes:
    """``aliases.json`` holding ``alias`` -> ``art``'s version only, from the entry that
    resolved it (so the same alias entry always gives the same bytes)."""
    sha = _manifest_sha(art.path)
    entry = read_aliases(mdir)["aliases"].get(alias)
    if entry is None or entry["version"] != art.version \
            or entry.get("manifest_sha256") not in (None, sha):
        raise ArtifactError(f"{mdir / ALIASES_FILE}: alias {alias!r} moved while bundling "
                            f"{art.version}; bundle again")
    history = entry.get("history") or [{}]
    promoted = history[-1].get("promoted_utc", entry.get("updated_utc"))
    return canonical_json_bytes({
        "format": ALIASES_FORMAT, "format_version": ALIASES_FORMAT_VERSION,
        "name": mdir.name,
        "aliases": {alias: {
            "version": art.version, "manifest_sha256": sha,
            "updated_utc": entry.get("updated_utc"),
            "history": [{"version": art.version, "manifest_sha256": sha,
                         "promoted_utc": promoted}],
            "log": [],
        }},
    })

