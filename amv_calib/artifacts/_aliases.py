"""The file aliases of a model folder (``aliases.json``): promote a version to an alias, and
roll an alias back to the version it named before, each under the model folder's lock."""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from amv_calib.artifacts._export import (
    _atomic_write,
    _check_name,
    _check_version,
    _locked,
    _utc_now,
)
from amv_calib.contract import (
    ALIASES_FILE,
    MANIFEST_FILE,
    canonical_json_bytes,
    load_artifact,
    read_aliases,
    unknown_alias_message,
)
from amv_calib.exceptions import ArtifactError, UnknownAliasError
from amv_calib.settings import models_dir as default_models_dir

_log = logging.getLogger(__name__)


# -- aliases -------------------------------------------------------------------------------
def _model_dir(name: str, models_dir: str | os.PathLike[str] | None) -> Path:
    root = Path(models_dir) if models_dir is not None else default_models_dir()
    mdir = root / _check_name(name)
    if not mdir.is_dir():
        raise ArtifactError(f"{mdir}: no such model folder")
    return mdir


def _manifest_sha(version_dir: Path) -> str:
    try:
        return hashlib.sha256((version_dir / MANIFEST_FILE).read_bytes()).hexdigest()
    except OSError as exc:
        raise ArtifactError(f"{version_dir / MANIFEST_FILE}: cannot read ({exc.strerror})") \
            from None


def _write_aliases(mdir: Path, data: Mapping[str, Any]) -> None:
    _atomic_write(mdir / ALIASES_FILE, canonical_json_bytes(data))


def promote(
    name: str,
    version: str | int,
    *,
    alias: str,
    models_dir: str | os.PathLike[str] | None = None,
    reason: str | None = None,
) -> dict[str, Any]:
    """Point ``alias`` of model ``name`` at ``version`` after verifying that version.

    The alias file ``models_dir/name/aliases.json`` is rewritten atomically under a lock;
    the alias keeps its history (a stack: :func:`rollback` pops it) and the sha256 of the
    promoted ``manifest.json``, which loading through the alias checks. ``reason``, when
    given, is recorded in the history and the log (the monitor's de-risk records its ALERT).

    Returns
    -------
    dict
        The alias entry: ``{"version", "manifest_sha256", "updated_utc", "history", "log"}``.

    Raises
    ------
    ArtifactError
        The version is missing or fails :func:`amv_calib.gate.load_artifact`.
    """
    mdir = _model_dir(name, models_dir)
    _check_name(alias, "alias")
    version = _check_version(version)
    load_artifact(mdir / version)
    sha = _manifest_sha(mdir / version)
    with _locked(mdir):
        data = read_aliases(mdir)
        data["name"] = name
        now = _utc_now()
        entry = data["aliases"].get(alias)
        if entry is not None and entry["version"] == version \
                and entry.get("manifest_sha256") == sha:
            return dict(entry)
        if entry is None:
            entry = {"history": [], "log": []}
        history = list(entry.get("history", []))
        why = {} if reason is None else {"reason": str(reason)}
        history.append({"version": version, "manifest_sha256": sha, "promoted_utc": now,
                        **why})
        log = list(entry.get("log", []))
        log.append({"action": "promote", "version": version, "utc": now, **why})
        entry = {"version": version, "manifest_sha256": sha, "updated_utc": now,
                 "history": history, "log": log}
        data["aliases"][alias] = entry
        _write_aliases(mdir, data)
    # debug: the caller announces the change (the command on stdout, a step in its report)
    _log.debug("alias %s of %s now points at %s", alias, name, version)
    return dict(entry)


def rollback(
    name: str, *, alias: str, models_dir: str | os.PathLike[str] | None = None
) -> dict[str, Any]:
    """Move ``alias`` back to the version it pointed at before the current one.

    The previous version is verified first (and its manifest must be the one that was
    promoted); the current version is popped from the alias history.

    Returns
    -------
    dict
        The alias entry after the rollback.

    Raises
    ------
    ArtifactError
        No such alias, no earlier version in its history, or the earlier version is missing,
        changed since it was promoted, or fails verification.
    """
    mdir = _model_dir(name, models_dir)
    _check_name(alias, "alias")
    with _locked(mdir):
        data = read_aliases(mdir)
        entry = data["aliases"].get(alias)
        if entry is None:
            raise UnknownAliasError(unknown_alias_message(mdir, alias, data["aliases"]))
        history = list(entry.get("history", []))
        if len(history) < 2:
            raise ArtifactError(
                f"{mdir / ALIASES_FILE}: alias {alias!r} has no earlier version to roll back "
                f"to (history: {', '.join(h['version'] for h in history) or 'empty'})"
            )
        previous = history[-2]
        prev_dir = mdir / previous["version"]
        load_artifact(prev_dir)
        sha = _manifest_sha(prev_dir)
        recorded = previous.get("manifest_sha256")
        if recorded is not None and recorded != sha:
            raise ArtifactError(
                f"{prev_dir / MANIFEST_FILE}: changed since it was promoted (sha256 {sha}, "
                f"recorded {recorded}); promote a version explicitly instead"
            )
        now = _utc_now()
        log = list(entry.get("log", []))
        log.append({"action": "rollback", "version": previous["version"],
                    "from_version": entry["version"], "utc": now})
        entry = {"version": previous["version"], "manifest_sha256": sha, "updated_utc": now,
                 "history": history[:-1], "log": log}
        data["aliases"][alias] = entry
        _write_aliases(mdir, data)
    _log.debug("alias %s of %s rolled back to %s", alias, name, entry["version"])
    return dict(entry)


