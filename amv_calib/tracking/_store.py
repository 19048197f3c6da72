"""The MLflow tracking store: where runs live (a SQLite file by default), created once
under a lock, and the experiment the runs go to."""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, cast
from urllib.parse import unquote

import mlflow
from mlflow import MlflowClient

from amv_calib.exceptions import ConfigError
from amv_calib.locks import exclusive
from amv_calib.settings import tracking_uri as default_tracking_uri

if TYPE_CHECKING:

    pass


DEFAULT_EXPERIMENT: Final = "amv-calib"


# -- tracking store ---------------------------------------------------------------------
def resolve_tracking_uri(uri: str | None = None) -> str:
    """``uri`` if given, else ``$MLFLOW_TRACKING_URI``, else ``sqlite:///mlflow.db``.

    A bare path is refused: MLflow would read it as the deprecated file store.
    """
    resolved = uri or default_tracking_uri()
    scheme = resolved.split(":", 1)[0] if ":" in resolved else ""
    if scheme in ("", "file") or len(scheme) == 1:  # one letter: a Windows drive
        raise ConfigError(
            f"tracking URI {resolved!r} names MLflow's deprecated file store; use "
            f"sqlite:///PATH.db or an http(s):// tracking server"
        )
    return resolved


def _sqlite_path(uri: str) -> Path | None:
    if not uri.startswith("sqlite:///"):
        return None
    return Path(unquote(uri[len("sqlite:///"):].split("?", 1)[0]))


@contextlib.contextmanager
def _file_lock(key: str) -> Iterator[None]:
    """An exclusive inter-process lock named by ``key`` (a file in the temp folder)."""
    digest = hashlib.sha256(key.encode("utf-8")).hexdigest()[:16]
    with exclusive(Path(tempfile.gettempdir()) / f"amv-calib-{digest}.lock",
                   what=f"MLflow store {key}", wait=True):
        yield


def ensure_tracking_db(uri: str | None = None) -> str:
    """Create (or migrate) the tracking database once; call before parallel jobs start.

    MLflow creates its SQLite tables on first use, and several processes doing that on a
    fresh file at once race. This opens the store under an inter-process lock, so the first
    caller creates the tables and the others find them. For a server URI it only checks
    that the server answers.

    Parameters
    ----------
    uri : str, optional
        Tracking URI; see :func:`resolve_tracking_uri`.

    Returns
    -------
    str
        The resolved URI.
    """
    resolved = resolve_tracking_uri(uri)
    db = _sqlite_path(resolved)
    if db is None:
        MlflowClient(tracking_uri=resolved).search_experiments(max_results=1)
        return resolved
    db.parent.mkdir(parents=True, exist_ok=True)
    with _file_lock(str(db.resolve())):
        MlflowClient(tracking_uri=resolved).search_experiments(max_results=1)
    return resolved


def _artifact_root(uri: str) -> str | None:
    """``mlruns/`` beside a SQLite database; a server chooses its own root (None)."""
    db = _sqlite_path(uri)
    if db is None:
        return None
    return (db.resolve().parent / "mlruns").as_uri()


# MLflow writes run links to stdout (where the CLI prints results) and progress bars to
# stderr; inside a tracker both are off, and the run link goes to our log instead.
_QUIET_ENV: Final = {"MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT": "true",
                     "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false"}


@contextlib.contextmanager
def _use_uri(uri: str) -> Iterator[None]:
    """Point MLflow's fluent API at ``uri`` (quietly) and restore the caller's settings.

    ``mlflow.set_tracking_uri`` mirrors the URI it sets into ``$MLFLOW_TRACKING_URI`` (so that
    subprocesses inherit it), so that variable is the caller's setting, whichever way it was made.
    """
    names = ("MLFLOW_TRACKING_URI", *_QUIET_ENV)
    old_env = {k: os.environ.get(k) for k in names}
    os.environ.update(_QUIET_ENV)
    mlflow.set_tracking_uri(uri)
    try:
        yield
    finally:
        # None unsets MLflow's global, so that a later $MLFLOW_TRACKING_URI is honoured again.
        mlflow.set_tracking_uri(cast(Any, old_env["MLFLOW_TRACKING_URI"]))
        for key, value in old_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


#: MLflow 3 records an experiment's kind in this tag; "custom_model_development" opens it on
#: the runs table (a classic ML experiment) instead of the GenAI traces overview.
EXPERIMENT_KIND_TAG: Final = "mlflow.experimentKind"
EXPERIMENT_KIND: Final = "custom_model_development"


def _experiment_id(client: MlflowClient, name: str, uri: str) -> str:
    """The experiment ``name`` (created if absent), marked a classic ML experiment unless it
    already says what it is."""
    exp = client.get_experiment_by_name(name)
    if exp is None:
        try:
            exp_id = str(client.create_experiment(name, artifact_location=_artifact_root(uri),
                                                  tags={EXPERIMENT_KIND_TAG: EXPERIMENT_KIND}))
            return exp_id
        except mlflow.exceptions.MlflowException:
            # Another process created it between the lookup and the create.
            exp = client.get_experiment_by_name(name)
            if exp is None:
                raise
    if EXPERIMENT_KIND_TAG not in exp.tags:  # made before the kind was set: a runs table too
        client.set_experiment_tag(exp.experiment_id, EXPERIMENT_KIND_TAG, EXPERIMENT_KIND)
    return str(exp.experiment_id)

