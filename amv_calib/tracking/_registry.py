"""The MLflow model registry: the servable gate model's versions and their aliases,
mirrored from the artifact folder's file aliases (the source of truth)."""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from mlflow import MlflowClient

from amv_calib import __version__
from amv_calib.exceptions import ArtifactError
from amv_calib.settings import DEFAULT_REGISTERED_MODEL
from amv_calib.tracking._store import ensure_tracking_db
from amv_calib.tracking._values import TAG_DATA_FINGERPRINT, TAG_GIT_COMMIT, TAG_PACKAGE_VERSION

if TYPE_CHECKING:

    pass


#: Name of the logged gate model inside its run (``runs:/<id>/gate_model``).
MODEL_NAME: Final = "gate_model"
#: Key of the portable artifact folder in the pyfunc model's ``artifacts``.
MODEL_ARTIFACT_KEY: Final = "amv_artifact"
DEFAULT_ALIAS: Final = "champion"

_log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class RegisteredVersion:
    """A registered model version carrying the champion alias.

    ``str(v)`` is the registry version number, as ``models:/NAME/<version>`` takes it.
    """

    name: str
    version: str
    alias: str | None
    model_uri: str
    run_id: str | None
    artifact_name: str
    artifact_version: str
    artifact_sha256: str

    def __str__(self) -> str:
        return self.version


def registry_promote(version: str | int | os.PathLike[str], alias: str = DEFAULT_ALIAS, *,
            registered_name: str = DEFAULT_REGISTERED_MODEL,
            tracking_uri: str | None = None) -> RegisteredVersion:
    """Point ``alias`` of a registered model at another version.

    Parameters
    ----------
    version : str, int or path
        A registry version (``3``), an artifact version (``"v3"``, matched through the
        ``artifact_version`` tag), or an artifact folder / reference (matched through its
        manifest sha256).
    alias : str
        The alias to move (``champion``).

    Raises
    ------
    ArtifactError
        When no registered version matches, or several artifact versions match.
    """
    uri = ensure_tracking_db(tracking_uri)
    client = MlflowClient(tracking_uri=uri, registry_uri=uri)
    versions = client.search_model_versions(f"name = '{_quote(registered_name)}'")
    if not versions:
        raise ArtifactError(f"registered model {registered_name!r} has no versions in {uri}")
    text = os.fspath(version) if not isinstance(version, int) else str(version)
    matches: list[Any]
    if text.isdigit():
        matches = [v for v in versions if str(v.version) == text]
        what = f"version {text}"
    elif text.startswith("v") and text[1:].isdigit() and not Path(text).exists():
        matches = [v for v in versions if v.tags.get("artifact_version") == text]
        what = f"artifact version {text}"
    else:
        art = _load(text)
        sha = hashlib.sha256((art.path / "manifest.json").read_bytes()).hexdigest()
        matches = [v for v in versions if v.tags.get("artifact_sha256") == sha]
        what = f"artifact {art.path} (manifest sha256 {sha[:12]})"
    if not matches:
        known = sorted((int(v.version), v.tags.get("artifact_version", "?")) for v in versions)
        raise ArtifactError(f"registered model {registered_name!r} has no {what}; versions "
                            f"(registry, artifact): {known}")
    if len(matches) > 1:
        # The newest registration of the same artifact wins.
        matches.sort(key=lambda v: int(v.version))
    chosen = matches[-1]
    client.set_registered_model_alias(registered_name, alias, str(chosen.version))
    return RegisteredVersion(
        name=registered_name, version=str(chosen.version), alias=alias,
        model_uri=f"models:/{registered_name}@{alias}", run_id=chosen.run_id,
        artifact_name=chosen.tags.get("artifact_name", ""),
        artifact_version=chosen.tags.get("artifact_version", ""),
        artifact_sha256=chosen.tags.get("artifact_sha256", ""))


#: File alias (the source of truth) -> the MLflow registry alias it is mirrored to.
REGISTRY_ALIASES: Final = {"production": "champion", "challenger": "challenger"}


def sync_registry_aliases(model_dir: str | os.PathLike[str], *,
                          registered_name: str = DEFAULT_REGISTERED_MODEL,
                          tracking_uri: str | None = None,
                          warn_for: Collection[str] | None = None) -> dict[str, str | None]:
    """Make the registry's ``@champion`` / ``@challenger`` name the versions the file
    aliases ``production`` / ``challenger`` of ``model_dir`` name (matched by manifest
    sha256).

    A registry alias whose file alias is gone is removed (the mirror follows the files). A
    file alias whose version the registry does not hold leaves the registry alias as it is
    (never emptied) and logs a warning naming the command that registers it. Returns
    ``{registry alias: the registry version it names now, or None}``. ``warn_for`` limits
    those warnings to the named file aliases (a command that moved one alias warns about
    that one; default: every alias).
    """
    from amv_calib.contract import read_aliases

    uri = ensure_tracking_db(tracking_uri)
    client = MlflowClient(tracking_uri=uri, registry_uri=uri)
    by_sha = _registered_versions(client, registered_name)
    file_aliases = read_aliases(model_dir)["aliases"]
    out: dict[str, str | None] = {}
    for file_alias, reg_alias in REGISTRY_ALIASES.items():
        entry = file_aliases.get(file_alias)
        sha = None if entry is None else entry.get("manifest_sha256")
        target = by_sha.get(sha) if sha else None
        if target is not None:
            client.set_registered_model_alias(registered_name, reg_alias, target.version)
            out[reg_alias] = str(target.version)
        elif entry is None:
            with contextlib.suppress(Exception):  # absent already: nothing to remove
                client.delete_registered_model_alias(registered_name, reg_alias)
            out[reg_alias] = None
        else:
            out[reg_alias] = _registry_alias_version(client, registered_name, reg_alias)
            if warn_for is not None and file_alias not in warn_for:
                continue
            left = out[reg_alias]
            _log.warning(
                "the registry %r does not hold %s (alias %s): @%s left at %s; register it with "
                "`amv-calib register %s`", registered_name, entry["version"], file_alias,
                reg_alias, "nothing" if left is None else
                registry_version_label(client, registered_name, left),
                Path(model_dir) / str(entry["version"]))
    return out


def registry_version_label(client: MlflowClient, registered_name: str, version: str) -> str:
    """``"v2 (MLflow version 1)"``: a registry version named by its file version too (from
    its ``artifact_version`` tag), so that neither numbering is mistaken for the other."""
    try:
        file_version = client.get_model_version(registered_name, version).tags.get(
            "artifact_version")
    except Exception:  # noqa: BLE001 - deleted meanwhile: the registry number alone
        file_version = None
    return (f"{file_version} (MLflow version {version})" if file_version
            else f"MLflow version {version}")


def describe_registry_aliases(synced: Mapping[str, str | None], *,
                              registered_name: str = DEFAULT_REGISTERED_MODEL,
                              tracking_uri: str | None = None) -> str:
    """One line for a person about what :func:`sync_registry_aliases` left: each registry
    alias with the file version and MLflow version it names."""
    client = MlflowClient(tracking_uri=tracking_uri, registry_uri=tracking_uri)
    parts = [f"@{alias} = " + ("nothing" if v is None else
                               registry_version_label(client, registered_name, v))
             for alias, v in synced.items()]
    return f"MLflow registry {registered_name}: {', '.join(parts) or 'no alias'}"


def _registry_alias_version(client: MlflowClient, registered_name: str, alias: str
                            ) -> str | None:
    """The version the registry alias names now, or None."""
    try:
        return str(client.get_model_version_by_alias(registered_name, alias).version)
    except Exception:  # noqa: BLE001 - no such alias or model
        return None


def _registered_versions(client: MlflowClient, registered_name: str) -> dict[str, Any]:
    """Registered versions of ``registered_name`` by manifest sha256 (the newest of each)."""
    try:
        versions = client.search_model_versions(f"name = '{_quote(registered_name)}'")
    except Exception:  # noqa: BLE001 - no such registered model yet
        return {}
    out: dict[str, Any] = {}
    for v in sorted(versions, key=lambda v: int(v.version)):
        sha = v.tags.get("artifact_sha256")
        if sha:
            out[sha] = v
    return out



# -- private helpers --------------------------------------------------------------------
def _version_description(art: Any, manifest_sha: str) -> str:
    """What a registered version is: artifact, data, champion calibrator, certificate."""
    m = art.manifest
    td = m.get("training_data") or {}
    cert = m.get("certificate") or {}
    lines = [f"amv-calib artifact {art.name} {art.version} (manifest sha256 {manifest_sha})",
             f"calibrator: {m.get('calibrator_source')} ({art.calibrator.kind})"]
    if td.get("rows"):
        from amv_calib.artifacts import describe_training_rate, training_violation_rate

        # the promotion's figure (the profile's weighted rate), worded as promote words it
        rate = training_violation_rate(art)
        lines.append(f"training data: {td['rows']} claim rows {td.get('time_min')} .. "
                     f"{td.get('time_max')}, sha256 {td.get('sha256')}"
                     + ("" if rate is None else f"; {describe_training_rate(rate)}"))
    if cert.get("chosen") is not None:
        lines.append(f"certified: Gate Harmful <= {cert.get('alpha'):g} with probability >= "
                     f"{1 - float(cert.get('delta') or 0):g} on episodes like the "
                     f"{cert.get('n')} calibration ones (observed calibration harm bound "
                     f"{100 * float(cert.get('observed_upper_bound') or 0):.2f}%, not "
                     f"certified)")
    else:
        lines.append("certificate: none")
    return "\n".join(lines)



def _quote(text: str) -> str:
    return text.replace("'", "\\'")



def _load(artifact_dir: str | os.PathLike[str]) -> Any:
    from amv_calib.contract import load_artifact

    return load_artifact(artifact_dir)


def _artifact_tags(art: Any, manifest_sha: str) -> dict[str, Any]:
    training = art.manifest.get("training_data") or {}
    tags: dict[str, Any] = {
        "artifact_name": art.name,
        "artifact_version": art.version,
        "artifact_sha256": manifest_sha,
        "calibrator_sha256": art.calibrator_sha256,
        "calibrator_kind": art.calibrator.kind,
        TAG_PACKAGE_VERSION: art.manifest.get("package_version", __version__),
    }
    if art.manifest.get("git_commit"):
        tags[TAG_GIT_COMMIT] = art.manifest["git_commit"]
    if isinstance(training, Mapping) and training.get("sha256"):
        tags[TAG_DATA_FINGERPRINT] = training["sha256"]
    return tags

