"""Export versioned calibrator artifacts (promote and roll back: ``_aliases``; verify and
bundle: ``_bundle``).

This is the training side of ``models/<name>/<version>/``; the gate's side (loading) is
:mod:`amv_calib.contract._artifact`. A version folder is written completely into a hidden
``.tmp-<uuid>`` folder and then claimed with one atomic ``os.rename`` to ``vN``; a rename
that loses a race to another process moves on to ``vN+1``. So concurrent exports never
share a version and a reader never sees a half-written folder.

pandas and joblib are imported only where a claims table or a pickled estimator is used.
The layout is documented in ``models/README.md``.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import errno
import hashlib
import io
import logging
import math
import os
import re
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import numpy as np

from amv_calib.artifacts._profile import PROFILE_FILE, build_profile
from amv_calib.artifacts._signing import sign_artifact, signed_with
from amv_calib.contract import (
    ARTIFACT_FORMAT,
    ARTIFACT_FORMAT_VERSION,
    CALIBRATOR_FILE,
    CLAIM_FEATURES,
    MANIFEST_FILE,
    REQUIRED_COLUMNS,
    SEED_CLAMP,
    SIGNATURE_FILE,
    LoadedArtifact,
    PortableCalibrator,
    calibrator_sha256,
    canonical_json_bytes,
    canonical_name,
    check_certificate_binding,
    check_thresholds,
    load_artifact,
    loads_strict,
    read_json_object,
    with_gate_clamp,
)
from amv_calib.exceptions import (
    ArtifactError,
    CertificateMismatchError,
    ConfigError,
    DataContractError,
    PortableFormatError,
)
from amv_calib.locks import exclusive
from amv_calib.settings import models_dir as default_models_dir
from amv_calib.settings import project_root
from amv_calib.tuning import MEMBERS_FILE, RECORD_FILE, read_tuning_record

#: The seed engine's gate settings; what an export uses until tuning provides thresholds.
DEFAULT_THRESHOLDS: Final[Mapping[str, Any]] = {
    "lambda_cost_scale": 1.0,
    "delta_loss_threshold": 10.0,
    "epsilon_harm_bound": 0.05,
    "planner": "lookahead",
    "max_verifications": 8,
    "clamp": [SEED_CLAMP[0], SEED_CLAMP[1]],
}

#: Name of the byte layout hashed by :func:`claims_fingerprint` (see ``models/README.md``).
CLAIMS_FINGERPRINT_SCHEME: Final = "amv-calib/claims-sha256-v2"

JOBLIB_FILE: Final = "calibrator.joblib"
#: Files a compare DIR holds that an export copies into the artifact, when present.
COMPARE_REPORT_FILES: Final = (
    "comparison.csv",
    "comparison.json",
    "comparison.md",
    "reliability.png",
    "reliability_bins.csv",
)
_RESERVED: Final = frozenset({MANIFEST_FILE, CALIBRATOR_FILE, JOBLIB_FILE, PROFILE_FILE,
                              MEMBERS_FILE})
_NAME_RE: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_VERSION_RE: Final = re.compile(r"v([1-9][0-9]*)")
_LOCK_TIMEOUT_S: Final = 10.0
_STALE_TMP_S: Final = 24 * 3600.0

_log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class ExportResult:
    """Where an export landed: ``path`` is ``models_dir / name / version``; ``reused`` when
    an existing version already held the same content (``reuse_identical``).

    ``manifest_sha256`` is the sha256 of the version's ``manifest.json`` bytes: what names
    the version in the tracker and the registry, known here so that they need not read the
    folder again.
    """

    path: Path
    name: str
    version: str
    manifest: dict[str, Any]
    manifest_sha256: str
    reused: bool = False


# -- small helpers -------------------------------------------------------------------------
def _check_name(name: str, what: str = "name") -> str:
    if not isinstance(name, str) or not _NAME_RE.fullmatch(name):
        raise ConfigError(
            f"{what}={name!r} must be letters, digits, '.', '_' or '-' (no '/' or '@'), "
            f"starting with a letter or digit"
        )
    return name


def _check_version(version: str | int) -> str:
    text = f"v{version}" if isinstance(version, int) or str(version).isdigit() else str(version)
    if not _VERSION_RE.fullmatch(text):
        raise ConfigError(f"version={version!r} must look like 'v3' (or 3)")
    return text


def _utc_now() -> str:
    # SOURCE_DATE_EPOCH (reproducible-builds convention) pins the creation time.
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    if epoch and epoch.isdigit():
        try:
            when = dt.datetime.fromtimestamp(int(epoch), dt.UTC)
        except (OverflowError, OSError, ValueError):
            raise ConfigError(f"$SOURCE_DATE_EPOCH={epoch!r} is out of range: seconds "
                              f"since 1970 up to the year 9999") from None
    else:
        when = dt.datetime.now(dt.UTC)
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def _git_commit() -> str | None:
    root = project_root()
    if not (root / ".git").exists():
        return None
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True,
            timeout=5, check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return out if re.fullmatch(r"[0-9a-f]{40,64}", out) else None


def _json_safe(value: Any, where: str) -> Any:
    """Plain JSON data: numpy scalars to Python, non-finite floats to ``None``."""
    if isinstance(value, Mapping):
        return {str(k): _json_safe(v, f"{where}.{k}") for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        f = float(value)
        return f if math.isfinite(f) else None
    if value is None or isinstance(value, str):
        return value
    raise ConfigError(f"{where}={value!r} is not JSON data (number, string, list or object)")


def _read_json_file(path: Path, what: str) -> Any:
    try:
        return loads_strict(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{path}: {what} does not exist") from None
    except (OSError, ValueError, RecursionError) as exc:
        raise ConfigError(f"{path}: cannot read {what} ({exc})") from None


def _fsync_dir(path: Path) -> None:
    # Directory fsync makes the rename durable; not every platform allows opening a dir.
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _write_bytes(path: Path, data: bytes) -> None:
    with path.open("wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())


def _atomic_write(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{uuid.uuid4().hex}")
    try:
        _write_bytes(tmp, data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    _fsync_dir(path.parent)


@contextlib.contextmanager
def _locked(model_dir: Path) -> Iterator[None]:
    """Exclusive lock on a model folder's alias file (waits up to ``_LOCK_TIMEOUT_S``)."""
    with exclusive(model_dir / ".aliases.lock", what=f"aliases of {model_dir}",
                   wait=_LOCK_TIMEOUT_S, error=ArtifactError):
        yield


def list_versions(name: str, *, models_dir: str | os.PathLike[str] | None = None) -> list[str]:
    """Existing version folders of a model, in numeric order (``["v1", "v2", ...]``)."""
    root = Path(models_dir) if models_dir is not None else default_models_dir()
    mdir = root / _check_name(name)
    if not mdir.is_dir():
        return []
    found = [(int(m.group(1)), p.name) for p in mdir.iterdir()
             if p.is_dir() and (m := _VERSION_RE.fullmatch(p.name))]
    return [v for _, v in sorted(found)]


# -- training-data fingerprint -------------------------------------------------------------
def _claims_table(claims: Any) -> Any:
    """The claims as the ingest stage's validator types them.

    A file: its accepted rows (rejects are logged and left out, as ``amv-calib ingest``
    would). A table: every row, or a :class:`DataContractError` naming the first that breaks
    the contract (a fingerprint of silently fewer rows would misdescribe the training data).
    """
    import pandas as pd

    from amv_calib.claims import load_claims

    if isinstance(claims, (str, os.PathLike)):
        path = Path(claims)
        if not path.exists():
            raise ConfigError(f"{path}: claims file does not exist")
        table, rejects = load_claims(path)
        if len(rejects):
            _log.info("%s: %d rejected rows left out of the fingerprint", path, len(rejects))
        return table
    if not isinstance(claims, pd.DataFrame):
        raise ConfigError(f"claims must be a DataFrame or a path, got {type(claims).__name__}")
    present = {canonical_name(str(c)) for c in claims.columns}
    missing = [c for c in REQUIRED_COLUMNS if c not in present]
    if missing:
        raise DataContractError(f"claims lack columns {missing}")
    table, _ = load_claims(claims, on_reject="raise")
    return table


def _iso_us(us: int) -> str:
    """UTC microseconds as ISO-8601 with six fraction digits and ``Z`` (years 1 to 9999)."""
    return f"{np.datetime_as_string(np.datetime64(us, 'us'), unit='us')}Z"


def claims_fingerprint(claims: Any) -> dict[str, Any]:
    """Fingerprint of a claims table: sha256 of its canonical columns, size, label rate, span.

    Parameters
    ----------
    claims : pandas.DataFrame or path
        A claims table (canonical or seed camelCase column names), or a ``.csv``,
        ``.parquet`` or ``.jsonl`` file holding one. Both are read with
        :func:`amv_calib.claims.load_claims`: a file's accepted rows are fingerprinted, while
        a table must meet the data contract on every row.

    Returns
    -------
    dict
        ``{"scheme", "sha256", "rows", "label_rate", "time_min", "time_max"}``. The hash
        covers the columns :data:`~amv_calib.contract.REQUIRED_COLUMNS` in that order, rows in
        the order given, in the byte layout documented in ``models/README.md`` (timestamps
        as int64 microseconds, so any year from 1 to 9999); other columns do not enter it.
        ``time_min`` and ``time_max`` are ISO-8601 UTC with microseconds.

    Raises
    ------
    DataContractError
        A table lacks a required column, or a row of it breaks the data contract (the
        message names the row, the field, the value and the reason).
    """
    table = _claims_table(claims)
    n = len(table)
    h = hashlib.sha256()
    h.update(f"{CLAIMS_FINGERPRINT_SCHEME}\nrows={n}\n".encode())
    ids = [str(v).encode("utf-8") for v in table["claim_id"].tolist()]
    h.update(b"claim_id\n")
    h.update(np.fromiter((len(b) for b in ids), dtype="<u8", count=n).tobytes())
    h.update(b"".join(ids))
    ts = table["timestamp"].dt.tz_convert(None).to_numpy(dtype="datetime64[us]").view(np.int64)
    h.update(b"timestamp\n")
    h.update(ts.astype("<i8").tobytes())
    for col in CLAIM_FEATURES:
        h.update(f"{col}\n".encode())
        if col == "contradiction_flag":
            h.update(table[col].to_numpy(dtype=bool).astype("u1").tobytes())
        else:
            # +0.0 turns -0.0 into 0.0, so equal numbers hash equally.
            h.update((table[col].to_numpy(dtype=np.float64) + 0.0).astype("<f8").tobytes())
    violated = table["violated"].to_numpy(dtype=bool)
    h.update(b"violated\n")
    h.update(violated.astype("u1").tobytes())
    return {
        "scheme": CLAIMS_FINGERPRINT_SCHEME,
        "sha256": h.hexdigest(),
        "rows": n,
        "label_rate": float(violated.mean()) if n else None,
        "time_min": _iso_us(int(ts.min())) if n else None,
        "time_max": _iso_us(int(ts.max())) if n else None,
    }


_NO_TRAINING_DATA: Final[Mapping[str, Any]] = {
    "scheme": None, "sha256": None, "rows": None, "label_rate": None,
    "time_min": None, "time_max": None,
}


# -- what is being exported ----------------------------------------------------------------
@dataclass(kw_only=True)
class _Source:
    portable: PortableCalibrator
    estimator: Any = None
    joblib_path: Path | None = None
    metrics: dict[str, Any] | None = None
    report_files: dict[str, Path] | None = None
    engine: str | None = None  # the compare engine when not the single-machine one


def _portable_from_json(path: Path) -> PortableCalibrator:
    data = _read_json_file(path, "calibrator description")
    try:
        return PortableCalibrator.from_dict(data)
    except PortableFormatError as exc:
        raise ConfigError(f"{path}: {exc}") from None


def _portable_from_estimator(est: Any, clamp: tuple[float, float] | None) -> PortableCalibrator:
    to_portable = getattr(est, "to_portable", None)
    if to_portable is None:
        raise ConfigError(
            f"calibrator {type(est).__name__} has no to_portable(); pass a PortableCalibrator, "
            f"a compare DIR, a champion.json or a fitted amv_calib calibrator"
        )
    portable = to_portable(clamp=clamp)
    if not isinstance(portable, PortableCalibrator):
        raise ConfigError(f"{type(est).__name__}.to_portable() did not return a "
                          f"PortableCalibrator")
    return portable


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _interval(v: Any) -> bool:
    return isinstance(v, list) and len(v) == 2 and all(x is None or _is_number(x) for x in v)


def _compare_metrics(path: Path) -> dict[str, Any] | None:
    """The champion's row of a compare DIR's ``comparison.json``, flattened.

    Gives ``champion``, ``scoring``, every numeric metric of the champion's row, its
    intervals as ``<metric>_ci`` ``[low, high]``, and ``oracle_log_loss`` when present.
    """
    if not path.is_file():
        return None
    data = _read_json_file(path, "comparison")
    if not isinstance(data, Mapping):
        return None
    champion = data.get("champion")
    out: dict[str, Any] = {"champion": champion} if isinstance(champion, str) else {}
    if isinstance(data.get("scoring"), str):
        out["scoring"] = data["scoring"]
    rows = data.get("calibrators")
    for row in rows if isinstance(rows, list) else []:
        if not (isinstance(row, Mapping) and row.get("name") == champion):
            continue
        for k, v in row.items():
            if k != "name" and (_is_number(v) or _interval(v)):
                out[str(k)] = v
        ci = row.get("ci")
        if isinstance(ci, Mapping):
            out.update({f"{m}_ci": v for m, v in ci.items() if _interval(v)})
    oracle = data.get("oracle")
    if isinstance(oracle, Mapping) and _is_number(oracle.get("log_loss")):
        out["oracle_log_loss"] = oracle["log_loss"]
    return out or None


def _compare_engine(path: Path) -> str | None:
    """The engine a compare DIR was fitted on (``config.engine``, e.g. ``"spark"``); None for
    the single-machine engine, which writes no such key."""
    if not path.is_file():
        return None
    data = _read_json_file(path, "comparison")
    config = data.get("config") if isinstance(data, Mapping) else None
    engine = config.get("engine") if isinstance(config, Mapping) else None
    return engine if isinstance(engine, str) else None


def _resolve_source(calibrator: Any, clamp: tuple[float, float] | None) -> _Source:
    if isinstance(calibrator, PortableCalibrator):
        return _Source(portable=calibrator)
    if isinstance(calibrator, (str, os.PathLike)):
        path = Path(calibrator)
        if path.is_dir():
            champ = path / "champion.json"
            if not champ.is_file():
                raise ConfigError(f"{path}: not a compare DIR (no champion.json)")
            joblib_path = path / "champion.joblib"
            return _Source(
                portable=_portable_from_json(champ),
                joblib_path=joblib_path if joblib_path.is_file() else None,
                metrics=_compare_metrics(path / "comparison.json"),
                report_files={f: path / f for f in COMPARE_REPORT_FILES if (path / f).is_file()},
                engine=_compare_engine(path / "comparison.json"),
            )
        if path.suffix == ".json":
            sibling = path.with_suffix(".joblib")
            return _Source(portable=_portable_from_json(path),
                           joblib_path=sibling if sibling.is_file() else None)
        if path.suffix == ".joblib":
            if not path.is_file():
                raise ConfigError(f"{path}: fitted calibrator file does not exist")
            import joblib

            # Export side only: the user's own fitted estimator. The gate never does this.
            est = joblib.load(path)
            return _Source(portable=_portable_from_estimator(est, clamp), joblib_path=path)
        if not path.exists():
            raise ConfigError(f"{path}: fitted calibrator does not exist")
        raise ConfigError(
            f"{path}: expected a compare DIR, a .json portable calibrator or a .joblib estimator"
        )
    return _Source(portable=_portable_from_estimator(calibrator, clamp), estimator=calibrator)


def _joblib_bytes(obj: Any) -> bytes:
    import joblib

    buf = io.BytesIO()
    joblib.dump(obj, buf)
    return buf.getvalue()


def _thresholds_from(thresholds: Any) -> dict[str, Any]:
    if thresholds is None:
        _log.info("no thresholds given: using the seed defaults %s", dict(DEFAULT_THRESHOLDS))
        thresholds = dict(DEFAULT_THRESHOLDS)
        where = "default thresholds"
    elif isinstance(thresholds, (str, os.PathLike)):
        where = str(thresholds)
        thresholds = _read_json_file(Path(thresholds), "thresholds")
    else:
        where = "thresholds"
    try:
        return check_thresholds(thresholds)
    except ValueError as exc:
        raise ConfigError(f"{where}: {exc}") from None


# -- export ----------------------------------------------------------------------------------
def export_artifact(
    *,
    calibrator: Any,
    name: str,
    thresholds: Mapping[str, Any] | str | os.PathLike[str] | None = None,
    models_dir: str | os.PathLike[str] | None = None,
    claims: Any = None,
    metrics: Mapping[str, Any] | None = None,
    figures: Sequence[str | os.PathLike[str]] = (),
    joblib_model: Any = None,
    include_joblib: bool = True,
    signing_key: str | os.PathLike[str] | None = None,
    certificate: Mapping[str, Any] | str | os.PathLike[str] | None = None,
    tuning: str | os.PathLike[str] | None = None,
    reuse_identical: bool = False,
    derived_from: str | os.PathLike[str] | None = None,
) -> ExportResult:
    """Write a new artifact version ``models_dir/name/vN`` and return where it landed.

    Parameters
    ----------
    calibrator : PortableCalibrator, path or fitted estimator
        A :class:`~amv_calib.contract._features.PortableCalibrator`; a compare DIR (its
        ``champion.json``, ``champion.joblib``, the champion's row of ``comparison.json``
        as metrics, and its tables and figures are taken); a ``.json`` portable calibrator
        (with a same-named ``.joblib`` beside it, if any); a ``.joblib`` fitted estimator;
        or a fitted estimator with ``to_portable(*, clamp=None)``.
    name : str
        Model name, the folder under ``models_dir``.
    thresholds : mapping or path, optional
        The ``thresholds.json`` object or file; ``None`` uses :data:`DEFAULT_THRESHOLDS`.
        Its ``clamp`` (when not null) becomes the calibrator's clamp.
    models_dir : path, optional
        Defaults to :func:`amv_calib.settings.models_dir`.
    claims : DataFrame or path, optional
        The training claims, for the manifest's ``training_data`` fingerprint.
    metrics : mapping, optional
        Merged over the metrics taken from a compare DIR; non-finite numbers become null.
    figures : sequence of paths
        Further files to copy into the artifact (by base name).
    joblib_model : path or estimator, optional
        A ``.joblib`` file to copy, or an estimator to dump, as ``calibrator.joblib``;
        by default the compare DIR's ``champion.joblib``, the ``.joblib`` given, or the
        estimator given.
    include_joblib : bool, default True
        False leaves ``calibrator.joblib`` out.
    signing_key : path, optional
        A private key from ``amv-calib keygen``: the version is signed (``model.sig``)
        before it appears under its final name, so it is never visible unsigned.
    certificate : mapping or path, optional
        A Learn-then-Test certificate (``certificate.json`` of ``amv-calib certify`` or the
        pipeline's certify step), recorded in the manifest. It must be bound to what is
        exported: the sha256 of this calibrator (with the thresholds' clamp) and these
        thresholds as its chosen configuration.
    tuning : path, optional
        ``tuning.json`` of the tune or certify step (with ``tuning-episodes.u64`` beside
        it): the episodes that shaped the thresholds, which a later certification must
        exclude. Default: the ``tuning.json`` beside a ``certificate`` file, if any. A
        certificate that names such a record needs it.
    reuse_identical : bool, default False
        When an existing, loadable version holds the same content (every manifest key of
        :data:`CONTENT_KEYS` and every file's sha256 but the joblib copy's, whose pickle
        bytes are not part of the contract), and with ``signing_key`` is signed by that
        key, return it (``reused=True``) instead of writing an identical ``v(N+1)``: a
        re-run after an interruption, or ``make demo`` reproducing the shipped version.
    derived_from : path, optional
        A version of the same calibrator (its ``calibrator.json`` must have the same
        sha256) whose reference profile, training-data fingerprint, metrics, report files
        and ``calibrator.joblib`` the new version keeps: a re-export with other thresholds
        (the monitor's de-risk).

    Returns
    -------
    ExportResult

    Raises
    ------
    ConfigError
        Bad name, missing or malformed input file, invalid thresholds, clashing file names.
    DataContractError
        Claims that lack canonical columns or hold unparseable values.
    """
    _check_name(name)
    gate = _thresholds_from(thresholds)
    clamp = None if gate["clamp"] is None else (gate["clamp"][0], gate["clamp"][1])
    src = _resolve_source(calibrator, clamp)
    # The manifest's gate clamp is always the clamp the gate applies.
    portable, gate = with_gate_clamp(src.portable, gate)

    payload: dict[str, bytes | Path] = {CALIBRATOR_FILE: canonical_json_bytes(portable.to_dict())}
    if include_joblib:
        if joblib_model is not None:
            if isinstance(joblib_model, (str, os.PathLike)):
                jp = Path(joblib_model)
                if not jp.is_file():
                    raise ConfigError(f"{jp}: joblib_model does not exist")
                payload[JOBLIB_FILE] = jp
            else:
                payload[JOBLIB_FILE] = _joblib_bytes(joblib_model)
        elif src.joblib_path is not None:
            payload[JOBLIB_FILE] = src.joblib_path
        elif src.estimator is not None:
            payload[JOBLIB_FILE] = _joblib_bytes(src.estimator)
    extra: dict[str, Path] = dict(src.report_files or {})
    for fig in figures:
        fp = Path(fig)
        if not fp.is_file():
            raise ConfigError(f"{fp}: figure file does not exist")
        if fp.name in _RESERVED or fp.name in extra:
            raise ConfigError(f"{fp}: file name {fp.name!r} clashes with another artifact file")
        extra[fp.name] = fp
    payload.update(extra)

    table = None if claims is None else _claims_table(claims)
    if table is not None:
        # what monitoring compares production with (artifacts/_profile.py)
        payload[PROFILE_FILE] = canonical_json_bytes(_profile_of(table, portable, src))
    merged_metrics = dict(src.metrics or {})
    base = None if derived_from is None else _derived(derived_from, portable, payload)
    if base is not None:
        merged_metrics = {**base.manifest.get("metrics", {}), **merged_metrics}
    merged_metrics.update(metrics or {})
    from amv_calib import __version__

    manifest_base: dict[str, Any] = {
        "format": ARTIFACT_FORMAT,
        "format_version": ARTIFACT_FORMAT_VERSION,
        "name": name,
        "created_utc": _utc_now(),
        "package_version": __version__,
        "git_commit": _git_commit(),
        "calibrator_kind": portable.kind,
        "calibrator_source": portable.source,
        "feature_map": portable.feature_map.to_list(),
        "gate": gate,
        "training_data": (claims_fingerprint(table) if table is not None
                          else dict(base.manifest["training_data"]) if base is not None
                          else dict(_NO_TRAINING_DATA)),
        "metrics": _json_safe(merged_metrics, "metrics"),
    }
    if src.engine is not None:
        manifest_base["engine"] = src.engine  # where the calibrator was fitted (spark)
    record = _tuning_record(tuning, certificate)
    if record is not None:
        manifest_base["tuning"], payload[record[0]] = record[1], record[2]
    if certificate is not None:
        manifest_base["certificate"] = _certificate_from(
            certificate, gate, calibrator_sha256(portable),
            None if record is None else record[1])
    root = (Path(models_dir) if models_dir is not None else default_models_dir()) / name
    if signing_key is not None and not Path(signing_key).is_file():
        raise ConfigError(f"{signing_key}: signing key file does not exist")
    key = None if signing_key is None else Path(signing_key)
    if reuse_identical:
        same = _identical_version(root, manifest_base, payload, key)
        if same is not None:
            _log.info("%s %s already holds this content: reused", name, same.version)
            return same
    path, version, manifest = _write_version(
        root, payload, manifest_base,
        sign=None if key is None else (lambda folder: sign_artifact(folder, key)))
    _log.info("exported %s %s to %s", name, version, path)
    return ExportResult(path=path, name=name, version=version, manifest=manifest,
                        # the bytes _write_version wrote
                        manifest_sha256=hashlib.sha256(
                            canonical_json_bytes(manifest)).hexdigest())


#: The manifest keys that are the content of a version (besides its files' sha256).
CONTENT_KEYS: Final = ("calibrator_kind", "feature_map", "gate", "training_data", "metrics",
                       "engine", "certificate", "tuning")


def _content(manifest: Mapping[str, Any]) -> dict[str, Any]:
    files = {k: v for k, v in manifest.get("files", {}).items() if not k.endswith(".joblib")}
    return {"files": files, **{k: manifest.get(k) for k in CONTENT_KEYS}}


def _identical_version(root: Path, manifest_base: Mapping[str, Any],
                       payload: Mapping[str, bytes | Path], key: Path | None
                       ) -> ExportResult | None:
    """The newest loadable version of ``root`` with the content an export would write, and
    signed by ``key`` when one is given; None when there is none."""
    digests = {rel: hashlib.sha256(c if isinstance(c, bytes) else c.read_bytes()).hexdigest()
               for rel, c in payload.items()}
    want = _content({**manifest_base, "files": digests})
    versions = list_versions(root.name, models_dir=root.parent) if root.is_dir() else []
    for version in reversed(versions):
        try:
            art = load_artifact(root / version)  # never reuse a damaged version
        except ArtifactError:
            continue
        if _content(art.manifest) != want:
            continue
        if key is not None and not signed_with(art.path, key):
            _log.info("%s %s holds this content but not this key's signature: a new signed "
                      "version is exported", root.name, version)
            return None
        return ExportResult(path=art.path, name=root.name, version=version,
                            manifest=art.manifest, reused=True,
                            manifest_sha256=hashlib.sha256(
                                art.contents[MANIFEST_FILE]).hexdigest())
    return None


def _derived(ref: str | os.PathLike[str], portable: PortableCalibrator,
             payload: dict[str, bytes | Path]) -> LoadedArtifact:
    """The version ``ref`` (checked), its kept files added to ``payload``."""
    base = load_artifact(ref)
    ours, theirs = calibrator_sha256(portable), base.calibrator_sha256
    if ours != theirs:
        raise ConfigError(f"derived_from={os.fspath(ref)!r}: its calibrator has sha256 "
                          f"{theirs}, this one {ours}; derive only from the same calibrator")
    skip = {MANIFEST_FILE, CALIBRATOR_FILE, SIGNATURE_FILE, MEMBERS_FILE}
    for rel in base.files:
        if rel not in skip and rel not in payload:
            payload[rel] = base.read(rel)  # the bytes the load vouched for
    return base


def _profile_of(table: Any, portable: PortableCalibrator, src: _Source) -> dict[str, Any]:
    """The reference profile, with the champion's out-of-fold bins from a compare DIR."""
    import pandas as pd

    bins = None
    champion = (src.metrics or {}).get("champion")
    rel_path = (src.report_files or {}).get("reliability_bins.csv")
    if champion and rel_path is not None:
        rel = pd.read_csv(rel_path)
        bins = rel[rel["calibrator"] == champion] if "calibrator" in rel.columns else rel
    oof = {k: v for k, v in (src.metrics or {}).items()
           if k in ("log_loss", "brier", "ece", "ece_mass", "smooth_ece")}
    profile: dict[str, Any] = _json_safe(
        build_profile(table, portable, reliability_bins=bins, oof_metrics=oof), "profile")
    return profile


def _certificate_from(certificate: Mapping[str, Any] | str | os.PathLike[str],
                      gate: Mapping[str, Any], cal_sha256: str,
                      tuning: Mapping[str, Any] | None) -> dict[str, Any]:
    """The certificate as manifest data, refused unless it is bound to what is exported."""
    cert = (read_json_object(Path(certificate), what="certificate")
            if isinstance(certificate, (str, os.PathLike)) else dict(certificate))
    try:
        check_certificate_binding(cert, calibrator_sha256=cal_sha256, gate=gate,
                                  tuning=tuning)
    except ValueError as exc:
        where = certificate if isinstance(certificate, (str, os.PathLike)) else "certificate"
        raise CertificateMismatchError(
            f"{where}: {exc}; export what it certified (its thresholds.json, this "
            f"calibrator) or certify again") from None
    out: dict[str, Any] = _json_safe(cert, "certificate")
    return out


def _tuning_record(tuning: str | os.PathLike[str] | None,
                   certificate: Mapping[str, Any] | str | os.PathLike[str] | None
                   ) -> tuple[str, dict[str, Any], bytes] | None:
    """``(members file name, tuning.json object, members bytes)`` of the record to carry:
    ``tuning``, else the ``tuning.json`` beside a certificate file, else None."""
    if tuning is None and isinstance(certificate, (str, os.PathLike)):
        beside = Path(certificate).parent / RECORD_FILE
        tuning = beside if beside.is_file() else None
    if tuning is None:
        return None
    record = read_tuning_record(tuning)
    data = record.to_dict()
    return data["members"], data, record.members_bytes()


def _next_number(root: Path) -> int:
    nums = [int(m.group(1)) for p in root.iterdir() if (m := _VERSION_RE.fullmatch(p.name))]
    return max(nums, default=0) + 1


def _sweep_stale_tmp(root: Path) -> None:
    """Remove ``.tmp-*`` folders of exports killed over a day ago (never a live one)."""
    cutoff = time.time() - _STALE_TMP_S
    for p in root.glob(".tmp-*"):
        with contextlib.suppress(OSError):
            if p.is_dir() and p.stat().st_mtime < cutoff:
                shutil.rmtree(p)
                _log.info("removed %s, left by an interrupted export", p)


def _write_version(
    root: Path, payload: Mapping[str, bytes | Path], manifest_base: Mapping[str, Any],
    *, sign: Callable[[Path], object] | None = None,
) -> tuple[Path, str, dict[str, Any]]:
    root.mkdir(parents=True, exist_ok=True)
    _sweep_stale_tmp(root)
    tmp = root / f".tmp-{uuid.uuid4().hex}"
    tmp.mkdir()
    try:
        digests: dict[str, str] = {}
        for rel in sorted(payload):
            content = payload[rel]
            data = content if isinstance(content, bytes) else content.read_bytes()
            _write_bytes(tmp / rel, data)
            digests[rel] = hashlib.sha256(data).hexdigest()
        for _ in range(10_000):
            version = f"v{_next_number(root)}"
            manifest = {**manifest_base, "version": version, "files": digests}
            _write_bytes(tmp / MANIFEST_FILE, canonical_json_bytes(manifest))
            if sign is not None:
                sign(tmp)  # covers the manifest with this version's number
            _fsync_dir(tmp)
            target = root / version
            try:
                # Atomic claim: fails when another process renamed its folder to vN first.
                os.rename(tmp, target)
            except OSError as exc:
                if exc.errno in (errno.EEXIST, errno.ENOTEMPTY) or target.exists():
                    _log.debug("%s was claimed by another export; trying the next", target)
                    continue
                raise
            _fsync_dir(root)
            return target, version, manifest
        raise ArtifactError(f"{root}: could not claim a free version folder")  # pragma: no cover
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


