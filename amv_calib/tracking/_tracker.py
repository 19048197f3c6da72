"""MLflow tracking of the pipeline stages.

Every stage is logged from the result its library function returned (a comparison, a
tuning, a promotion decision, replay results, a certificate, a monitor report, an export
result): metrics, parameters and tags come from its fields, and only the files it names are
uploaded. To log a stage run elsewhere, afterwards, the same methods also take what it wrote
(``compare --out DIR``, a tuning folder, a replay ``--json`` file, ``models/NAME/vN``) and
log the same runs from it.

Layout in MLflow (experiment ``amv-calib`` unless told otherwise)::

    <pipeline run>                 parent: tags (git commit, package version, data fingerprint),
    |                              comparison table, overlay reliability diagram, replay table,
    |                              exported artifact files, the registered gate model
    +-- <calibrator name>          one nested run per calibrator: settings, metrics overall and
    |                              per fold, interval bounds, reliability diagram and bins
    +-- tuning                     the Optuna study: per-trial metrics (step = trial number),
                                   trials table, Pareto front table and plot, best thresholds

Tracking is optional: ``PipelineTracker(enabled=False)`` accepts every call and does
nothing, without importing anything. (This module imports MLflow at the top, so only code
that has decided to track imports it; the runtime gate never does.)

With no configuration the store is ``sqlite:///mlflow.db`` in the current folder
(:func:`amv_calib.settings.tracking_uri`, which ``MLFLOW_TRACKING_URI`` overrides), with
artifacts in ``mlruns/`` beside the database.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
import math
import os
import re
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Concatenate, Final, ParamSpec, TypeVar, cast
from urllib.parse import unquote

import mlflow
import numpy as np
from mlflow import MlflowClient
from mlflow.entities import Metric, Param, RunTag

from amv_calib import __version__
from amv_calib.calibration import comparison_figure, overlay_figure, reliability_figure
from amv_calib.contract import loads_strict
from amv_calib.exceptions import ArtifactError, ConfigError
from amv_calib.locks import exclusive
from amv_calib.settings import DEFAULT_REGISTERED_MODEL, project_root
from amv_calib.settings import tracking_uri as default_tracking_uri

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure

    from amv_calib.artifacts import ExportResult, PromotionDecision
    from amv_calib.calibration import ComparisonResult
    from amv_calib.monitoring import MonitorReport
    from amv_calib.tuning import Certificate, ReplayResult, TuneResult


DEFAULT_EXPERIMENT: Final = "amv-calib"
#: Name of the logged gate model inside its run (``runs:/<id>/gate_model``).
MODEL_NAME: Final = "gate_model"
#: Key of the portable artifact folder in the pyfunc model's ``artifacts``.
MODEL_ARTIFACT_KEY: Final = "amv_artifact"
DEFAULT_ALIAS: Final = "champion"

#: Run and model-version tag keys.
TAG_GIT_COMMIT: Final = "git_commit"
TAG_PACKAGE_VERSION: Final = "amv_calib_version"
TAG_DATA_FINGERPRINT: Final = "data_fingerprint"
TAG_STAGE: Final = "amv_calib.stage"

# MLflow's limits on one log_batch call and on a parameter value.
_MAX_METRICS_PER_BATCH: Final = 1000
_MAX_PARAMS_PER_BATCH: Final = 100
_MAX_PARAM_CHARS: Final = 6000

_log = logging.getLogger(__name__)


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
    """Point MLflow's fluent API at ``uri`` (quietly) and restore the caller's settings."""
    from mlflow.tracking._tracking_service import utils as tracking_utils

    old_global = getattr(tracking_utils, "_tracking_uri", None)
    names = ("MLFLOW_TRACKING_URI", *_QUIET_ENV)
    old_env = {k: os.environ.get(k) for k in names}
    os.environ.update(_QUIET_ENV)
    mlflow.set_tracking_uri(uri)
    try:
        yield
    finally:
        if old_global:
            mlflow.set_tracking_uri(old_global)
        else:
            # Unset, so that a later MLFLOW_TRACKING_URI is honoured again.
            tracking_utils._tracking_uri = None
        # set_tracking_uri mirrors the URI into the environment; put the caller's back.
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


# -- provenance -------------------------------------------------------------------------
def _git_commit() -> str | None:
    root = project_root()
    try:
        out = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], check=True,
                             capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    commit = out.stdout.strip()
    return commit or None


def _provenance_tags() -> dict[str, str]:
    tags = {TAG_PACKAGE_VERSION: __version__}
    commit = _git_commit()
    if commit:
        tags[TAG_GIT_COMMIT] = commit
        tags["mlflow.source.git.commit"] = commit
    return tags


def _data_fingerprint(claims: pd.DataFrame) -> str | None:
    """sha256 of the canonical claims, exactly as the artifact manifest records it."""
    from amv_calib.artifacts import claims_fingerprint
    from amv_calib.exceptions import DataContractError

    try:
        return str(claims_fingerprint(claims)["sha256"])
    except DataContractError as exc:
        _log.warning("claims have no fingerprint (%s); logging them without one", exc)
        return None


# -- small logging helpers --------------------------------------------------------------
def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) \
        and math.isfinite(float(value))


def _param_value(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
    if len(text) > _MAX_PARAM_CHARS:
        text = text[: _MAX_PARAM_CHARS - 3] + "..."
    return text


def _log_batch(client: MlflowClient, run_id: str, *, metrics: Sequence[Metric] = (),
               params: Mapping[str, Any] | None = None,
               tags: Mapping[str, Any] | None = None) -> None:
    """log_batch in chunks within MLflow's per-call limits."""
    param_list = [Param(k, _param_value(v)) for k, v in (params or {}).items() if v is not None]
    tag_list = [RunTag(k, str(v)) for k, v in (tags or {}).items() if v is not None]
    for i in range(0, len(param_list), _MAX_PARAMS_PER_BATCH):
        client.log_batch(run_id, params=param_list[i:i + _MAX_PARAMS_PER_BATCH])
    for i in range(0, len(tag_list), _MAX_PARAMS_PER_BATCH):
        client.log_batch(run_id, tags=tag_list[i:i + _MAX_PARAMS_PER_BATCH])
    metric_list = list(metrics)
    for i in range(0, len(metric_list), _MAX_METRICS_PER_BATCH):
        client.log_batch(run_id, metrics=metric_list[i:i + _MAX_METRICS_PER_BATCH])


def _metrics(values: Mapping[str, Any], *, step: int = 0, prefix: str = "") -> list[Metric]:
    now = int(time.time() * 1000)
    return [Metric(f"{prefix}{k}", float(v), now, step) for k, v in values.items()
            if _is_number(v)]


def _read_json(path: Path) -> Any:
    try:
        return loads_strict(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{path}: missing (did the stage finish?)") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
    except (ValueError, RecursionError) as exc:  # a key given twice
        raise ConfigError(f"{path}: not valid JSON ({exc})") from None


def _read_table(path: Path) -> pd.DataFrame:
    import pandas as pd

    if path.suffix == ".parquet":
        return pd.read_parquet(path)
    if path.suffix == ".json":
        return pd.read_json(path)
    return pd.read_csv(path)


def _table_for_mlflow(df: pd.DataFrame) -> pd.DataFrame:
    """A copy MLflow's table artifact can serialise (no pandas extension scalars or NaT)."""
    out = df.copy()
    for col in out.columns:
        if str(out[col].dtype) in ("string", "str") or out[col].dtype == object:
            out[col] = out[col].astype(object).where(out[col].notna(), None)
        elif "datetime" in str(out[col].dtype):
            out[col] = out[col].astype(str)
    return out


# -- flattening a comparison entry ------------------------------------------------------
_INTERVAL_LO: Final = ("lo", "lower", "low", "ci_lo", "ci_low")
_INTERVAL_HI: Final = ("hi", "upper", "high", "ci_hi", "ci_high")
_VALUE_KEYS: Final = ("value", "estimate", "mean", "point")
#: Keys holding ``{metric: [low, high]}`` (compare's ``ci``).
_INTERVAL_MAPS: Final = ("ci", "intervals")


def _flatten_metrics(entry: Mapping[str, Any], *, skip: frozenset[str]) -> dict[str, float]:
    """Numeric fields of one comparison or replay entry as MLflow metrics.

    Interval bounds become their own metrics with the compare table's suffixes
    ``_low`` / ``_high``: ``{"log_loss": 0.3, "ci": {"log_loss": [a, b]}}``,
    ``{"log_loss_ci": [a, b]}`` and ``{"log_loss": {"value": v, "lo": a, "hi": b}}`` all give
    ``log_loss``, ``log_loss_low``, ``log_loss_high``. Other nested objects prefix their key.
    """
    out: dict[str, float] = {}

    def walk(prefix: str, obj: Any) -> None:
        if _is_number(obj):
            out[prefix] = float(obj)
        elif isinstance(obj, Mapping):
            for key, val in obj.items():
                if key in _VALUE_KEYS:
                    walk(prefix, val)
                elif key in _INTERVAL_LO:
                    walk(f"{prefix}_low", val)
                elif key in _INTERVAL_HI:
                    walk(f"{prefix}_high", val)
                elif not prefix and key in _INTERVAL_MAPS and isinstance(val, Mapping):
                    for metric, bounds in val.items():
                        walk(f"{metric}_ci", bounds)
                else:
                    walk(f"{prefix}_{key}" if prefix else str(key), val)
        elif isinstance(obj, (list, tuple)) and len(obj) == 2 and all(map(_is_number, obj)):
            base = prefix.removesuffix("_ci").removesuffix("_interval")
            out[f"{base}_low"], out[f"{base}_high"] = float(obj[0]), float(obj[1])

    for key, val in entry.items():
        if key in skip:
            continue
        if key in _INTERVAL_MAPS:
            walk("", {key: val})
        else:
            walk(str(key), val)
    return out


# -- figures ---------------------------------------------------------------------------
def trials_figure(trials: pd.DataFrame, *, chosen: int | None = None,
                  target: float | None = None) -> Figure:
    """Gate Harmful against total loss of every completed trial, the front joined.

    Parameters
    ----------
    trials : pandas.DataFrame
        ``trials.csv`` of the tuning stage (``number``, ``state``, ``gate_harmful``,
        ``verification_cost``, ``total_loss`` and optionally ``feasible``).
    chosen : int, optional
        Trial number of the chosen thresholds, ringed.
    target : float, optional
        The Gate Harmful bound of the constrained search, drawn as a line.

    Returns
    -------
    matplotlib.figure.Figure
        Trials coloured by verification cost (infeasible ones hollow); the line joins the
        trials no other trial beats on both total loss and Gate Harmful (the front of the
        two quantities the search trades), and the chosen trial is the one of lowest total
        loss among those within the target, which the title says.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    done = trials
    if "state" in done.columns:
        done = done[done["state"].astype(str).str.upper() == "COMPLETE"]
    done = done.dropna(subset=["gate_harmful", "total_loss"])
    x = done["total_loss"].to_numpy(dtype=float)
    y = done["gate_harmful"].to_numpy(dtype=float) * 100.0
    fig = Figure(figsize=(7.0, 5.0), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    colour = (done["verification_cost"].to_numpy(dtype=float)
              if "verification_cost" in done.columns else None)
    feasible = (done["feasible"].astype(str).str.lower() == "true").to_numpy() \
        if "feasible" in done.columns else np.ones(len(done), dtype=bool)
    order = np.lexsort((y, x))
    front, best = [], math.inf
    for i in order:
        if y[i] < best:
            front.append(i)
            best = y[i]
    if front:
        ax.step(x[front], y[front], where="post", color="C3", linewidth=1.2, zorder=1,
                label=f"front: no trial beats these on both ({len(front)} trials)")
    sc = ax.scatter(x[feasible], y[feasible], c=None if colour is None else colour[feasible],
                    s=20, cmap="viridis", zorder=2, label="trials within the target")
    if (~feasible).any():
        ax.scatter(x[~feasible], y[~feasible], facecolors="none", edgecolors="0.5", s=20,
                   zorder=2, label="trials above the target")
    if colour is not None and feasible.any():
        fig.colorbar(sc, ax=ax, label="verification cost per instance")
    if target is not None:
        ax.axhline(target * 100.0, color="0.3", linestyle="--", linewidth=1,
                   label=f"target Gate Harmful {target:.2%}")
    if chosen is not None and "number" in done.columns:
        hit = done["number"].to_numpy() == chosen
        if hit.any():
            ax.scatter(x[hit], y[hit], s=140, facecolors="none", edgecolors="C3",
                       linewidths=2, zorder=3, label=f"chosen (trial {chosen})")
    ax.set_xlabel("total loss per instance (tuning split)")
    ax.set_ylabel("Gate Harmful % (tuning split)")
    ax.set_title("Tuning trials. Chosen: the lowest total loss among trials within the "
                 "Gate Harmful target", fontsize=9)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, loc="upper right")
    return fig


# -- results ----------------------------------------------------------------------------
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


@dataclass(frozen=True, kw_only=True)
class ComparisonRuns:
    """Run ids logged by :meth:`PipelineTracker.log_comparison`."""

    parent_run_id: str
    calibrator_runs: dict[str, str]
    champion: str | None


@dataclass(frozen=True, kw_only=True)
class _Comparison:
    """What :meth:`PipelineTracker.log_comparison` logs, from a result or from its folder."""

    where: str  # named in errors and log lines
    summary: Mapping[str, Any]  # ComparisonResult.to_dict(): comparison.json
    table: pd.DataFrame
    bins: pd.DataFrame | None
    histogram: pd.DataFrame | None
    portable: dict[str, Mapping[str, Any]]  # calibrator name -> its portable form
    files: list[Path]  # uploaded to the parent run under compare/
    portable_files: dict[str, Path]  # calibrator name -> calibrators/<name>.json

    @property
    def champion(self) -> str | None:
        champion = self.summary.get("champion")
        return None if champion is None else str(champion)

    @property
    def config(self) -> Mapping[str, Any]:
        config = self.summary.get("config")
        return config if isinstance(config, Mapping) else {}

    @classmethod
    def from_result(cls, result: ComparisonResult,
                    files: Mapping[str, str | os.PathLike[str]] | None) -> _Comparison:
        from amv_calib.calibration import prediction_histogram

        written = {name: Path(path) for name, path in (files or {}).items()}
        return cls(
            where=f"the comparison of {', '.join(result.table['name'].astype(str))}",
            summary=result.to_dict(), table=result.table, bins=result.reliability,
            histogram=prediction_histogram(result.oof),
            portable={name: est.to_portable().to_dict()
                      for name, est in result.estimators.items()},
            files=[written[n] for n in sorted(written)
                   if "/" not in n and written[n].suffix in _COMPARE_UPLOADS],
            portable_files={n.removeprefix("calibrators/").removesuffix(".json"): p
                            for n, p in written.items()
                            if n.startswith("calibrators/") and n.endswith(".json")})

    @classmethod
    def from_folder(cls, cdir: Path) -> _Comparison:
        import pandas as pd

        where = str(cdir / "comparison.json")
        summary = _read_json(cdir / "comparison.json")
        if not isinstance(summary, Mapping) or not isinstance(summary.get("calibrators"), list):
            raise ConfigError(f"{where}: lacks a 'calibrators' list")
        table_path = cdir / "comparison.csv"
        table = (_read_table(table_path) if table_path.is_file() else pd.DataFrame(
            [_table_row(e) for e in summary["calibrators"] if isinstance(e, Mapping)]))
        bins_path, hist_path = cdir / "reliability_bins.csv", cdir / "prediction_histogram.csv"
        portable_files = {p.stem: p for p in sorted((cdir / "calibrators").glob("*.json"))}
        portable = {}
        for name, path in portable_files.items():
            data = _read_json(path)
            if isinstance(data, Mapping):
                portable[name] = data
        return cls(
            where=where, summary=summary, table=table,
            bins=_read_table(bins_path) if bins_path.is_file() else None,
            histogram=_read_table(hist_path) if hist_path.is_file() else None,
            portable=portable,
            files=[p for p in sorted(cdir.iterdir())
                   if p.is_file() and p.suffix in _COMPARE_UPLOADS],
            portable_files=portable_files)


@dataclass(frozen=True, kw_only=True)
class _Tuning:
    """What :meth:`PipelineTracker.log_tuning` logs, from a result or from its folder."""

    thresholds: Mapping[str, Any]
    report: Mapping[str, Any]  # tune_report.json: the study settings and the chosen trial
    trials: pd.DataFrame | None
    files: list[Path]  # uploaded, in name order
    tables: dict[str, pd.DataFrame]  # further tables by name (the Pareto front)
    replay: pd.DataFrame | None  # the held-out replay table, when one was run

    @classmethod
    def from_result(cls, result: TuneResult, files: Mapping[str, str | os.PathLike[str]] | None,
                    replay: Mapping[str, ReplayResult] | None) -> _Tuning:
        import pandas as pd

        if result.thresholds is None:
            raise ConfigError(f"study {result.study_name!r}: no trial met gate_harmful <= "
                              f"{result.target_harmful}, so there are no thresholds to log")
        paths = sorted((Path(p) for p in (result.files if files is None else files).values()),
                       key=lambda p: p.name)
        tables = {}
        if result.pareto:
            tables["pareto"] = pd.DataFrame(result.pareto)
        return cls(
            thresholds=result.thresholds, report=result.report, trials=result.trials,
            files=paths, tables=tables,
            replay=None if replay is None else _replay_rows(_sorted_keys(
                {n: r.to_dict() for n, r in replay.items()})))

    @classmethod
    def from_folder(cls, tdir: Path) -> _Tuning:
        thresholds = _read_json(tdir / "thresholds.json")
        if not isinstance(thresholds, Mapping):
            raise ConfigError(f"{tdir / 'thresholds.json'}: must hold a JSON object")
        trials_path = _first(tdir, _TRIALS_FILES)
        paths = sorted((p for p in tdir.iterdir() if p.is_file()), key=lambda p: p.name)
        replay = _first(tdir, _REPLAY_FILES)
        return cls(
            thresholds=thresholds, report=_tuning_summary(tdir),
            trials=None if trials_path is None else _read_table(trials_path), files=paths,
            tables={p.stem: _read_table(p) for p in paths
                    if p.suffix == ".csv" and p != trials_path},
            replay=None if replay is None else _replay_table(replay))


#: The compare folder's files uploaded to the parent run (not the pickles or the data).
_COMPARE_UPLOADS: Final = (".csv", ".md", ".json", ".png")


# -- the tracker ------------------------------------------------------------------------
_P = ParamSpec("_P")
_R = TypeVar("_R")


def _when_enabled(
    method: Callable[Concatenate[PipelineTracker, _P], _R],
) -> Callable[Concatenate[PipelineTracker, _P], _R | None]:
    """The tracker ``method``, which on a disabled tracker does nothing and returns None."""
    @functools.wraps(method)
    def run(self: PipelineTracker, /, *args: _P.args, **kwargs: _P.kwargs) -> _R | None:
        if not self.enabled:
            return None
        return method(self, *args, **kwargs)

    return run


class PipelineTracker:
    """The parent run of one pipeline run; the stages log into it.

    Use it as a context manager: entering starts (or, with ``run_id``, re-opens) the parent
    run, leaving ends it as FINISHED, FAILED (an exception) or KILLED (an interrupt). With
    ``enabled=False`` every method does nothing and returns None, so a caller passes a
    disabled tracker instead of branching on ``--no-tracking``.

    Parameters
    ----------
    run_name : str
        Name of the parent run.
    experiment : str
        MLflow experiment, created on first use (artifacts in ``mlruns/`` beside a SQLite
        database).
    tracking_uri : str, optional
        See :func:`resolve_tracking_uri`.
    params, tags : mapping, optional
        Logged on the parent run (tags after the provenance tags, so they may override them).
    enabled : bool
        False: a no-op tracker.
    run_id : str, optional
        Log into this existing run instead of starting one; its status is restored on exit.
    """

    def __init__(self, *, run_name: str = "amv-calib", experiment: str = DEFAULT_EXPERIMENT,
                 tracking_uri: str | None = None, params: Mapping[str, Any] | None = None,
                 tags: Mapping[str, Any] | None = None, enabled: bool = True,
                 run_id: str | None = None) -> None:
        self.run_name = run_name
        self.experiment = experiment
        self.enabled = enabled
        self.tracking_uri = resolve_tracking_uri(tracking_uri) if enabled else tracking_uri
        self.run_id: str | None = run_id
        self._params = dict(params or {})
        self._tags = dict(tags or {})
        self._attach = run_id is not None
        self._attached_status: str | None = None
        self._client: MlflowClient | None = None
        self._experiment_id: str | None = None
        self._stack: contextlib.ExitStack | None = None
        self._owns_run = True
        self._replays: set[tuple[str, str]] = set()

    # context management
    def __enter__(self) -> PipelineTracker:
        if not self.enabled:
            return self
        uri = ensure_tracking_db(self.tracking_uri)
        self._client = MlflowClient(tracking_uri=uri, registry_uri=uri)
        stack = contextlib.ExitStack()
        stack.enter_context(_use_uri(uri))
        try:
            active = mlflow.active_run()
            if self._attach and active is not None and active.info.run_id == self.run_id:
                # Already open in this process (an enclosing tracker): log into it, leave
                # ending it to its owner.
                self._owns_run = False
                self._experiment_id = active.info.experiment_id
            elif self._attach:
                run = self._client.get_run(str(self.run_id))
                self._attached_status = run.info.status
                self._experiment_id = run.info.experiment_id
                mlflow.start_run(run_id=self.run_id)
            else:
                self._experiment_id = _experiment_id(self._client, self.experiment, uri)
                active = mlflow.start_run(run_name=self.run_name,
                                          experiment_id=self._experiment_id)
                self.run_id = active.info.run_id
            tags = {TAG_STAGE: "pipeline", **_provenance_tags(), **self._tags}
            if self._attach:
                tags = self._tags
            _log_batch(self._client, str(self.run_id), params=self._params, tags=tags)
        except BaseException:
            stack.close()
            raise
        self._stack = stack
        _log.info("MLflow run %s started: %s", self.run_name, self.run_url)
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if not self.enabled or self._stack is None:
            return
        try:
            if exc_type is None:
                status = "FINISHED"
            elif issubclass(exc_type, KeyboardInterrupt):
                status = "KILLED"
            else:
                status = "FAILED"
            if self._owns_run:
                mlflow.end_run(status=status)
                _log.info("MLflow run %s %s: %s", self.run_name, status.lower(),
                          self.run_url)
            if (self._owns_run and self._attach and self._attached_status == "RUNNING"
                    and self._client is not None):
                self._client.update_run(str(self.run_id), status="RUNNING")
        finally:
            self._stack.close()
            self._stack = None

    @property
    def run_url(self) -> str:
        """Where to see the parent run: its UI address on a server, else its run id."""
        uri = str(self.tracking_uri)
        if uri.startswith(("http://", "https://")) and self._experiment_id is not None:
            return f"{uri.rstrip('/')}/#/experiments/{self._experiment_id}/runs/{self.run_id}"
        return f"run {self.run_id} in {uri}"

    @property
    def client(self) -> MlflowClient:
        """The MLflow client of the open run (raises when the tracker is not entered)."""
        if self._client is None or self._stack is None or self.run_id is None:
            raise RuntimeError("PipelineTracker is not entered; use it as a context manager")
        return self._client

    def _nested(self, name: str, *, stage: str, tags: Mapping[str, Any] | None = None
                ) -> contextlib.AbstractContextManager[Any]:
        all_tags = {TAG_STAGE: stage, **_provenance_tags(), **(tags or {})}
        return mlflow.start_run(run_name=name, nested=True, experiment_id=self._experiment_id,
                                tags={k: str(v) for k, v in all_tags.items()})

    @_when_enabled
    def set_tags(self, tags: Mapping[str, Any]) -> None:
        """Tag the parent run."""
        _log_batch(self.client, str(self.run_id), tags=tags)

    @_when_enabled
    def log_params(self, params: Mapping[str, Any]) -> None:
        """Log parameters on the parent run."""
        _log_batch(self.client, str(self.run_id), params=params)

    # -- compare ----------------------------------------------------------------------
    @_when_enabled
    def log_comparison(self, comparison: ComparisonResult | str | os.PathLike[str], *,
                       files: Mapping[str, str | os.PathLike[str]] | None = None,
                       claims: pd.DataFrame | None = None,
                       claims_path: str | os.PathLike[str] | None = None) -> ComparisonRuns:
        """Log a comparison: one nested run per calibrator.

        Parameters
        ----------
        comparison : ComparisonResult or path
            What :func:`amv_calib.calibration.compare_calibrators` returned; or, for a
            comparison run elsewhere, the folder ``amv-calib compare CLAIMS --out DIR``
            wrote.
        files : mapping, optional
            With a result: the files :func:`amv_calib.calibration.write_comparison` wrote
            for it (name to path), uploaded as artifacts. Without it only the values and
            the figures drawn from the result are logged.
        claims : pandas.DataFrame, optional
            The training claims, logged as the runs' dataset input. Read from
            ``claims_path`` (or the path in the comparison's config) when not given.
        claims_path : path, optional
            Where the claims live; the dataset's source.

        Returns
        -------
        ComparisonRuns or None
            None when the tracker is disabled.
        """
        client, parent = self.client, str(self.run_id)  # raises when not entered
        if isinstance(comparison, (str, os.PathLike)):
            if files is not None:
                raise TypeError("files= goes with a ComparisonResult; a folder is its files")
            got = _Comparison.from_folder(Path(comparison))
        else:
            got = _Comparison.from_result(comparison, files)
        summary, champion, config = got.summary, got.champion, got.config
        dataset, fingerprint = self._dataset(claims, claims_path, config, got.where)
        bins, histogram, table = got.bins, got.histogram, got.table
        name_col = "calibrator" if bins is not None and "calibrator" in bins.columns else None

        # parent: configuration, champion, table, per-fold sizes, overlay, oracle
        config_params = {f"compare.{k}": v for k, v in _flat_params(config).items()}
        _log_batch(client, parent, params=config_params,
                   tags={"champion": champion, TAG_DATA_FINGERPRINT: fingerprint})
        for path in got.files:
            client.log_artifact(parent, str(path), "compare")
        if len(table):
            client.log_table(parent, _table_for_mlflow(table), "comparison.json")
        parent_metrics: list[Metric] = []
        for i, info in enumerate(summary.get("folds") or []):
            if isinstance(info, Mapping) and "calibrator" not in info:
                step = int(info["fold"]) if _is_number(info.get("fold")) else i
                parent_metrics += _metrics({k: v for k, v in info.items()
                                            if k.startswith("n_")}, step=step, prefix="fold/")
        oracle = summary.get("oracle")
        if isinstance(oracle, Mapping):
            parent_metrics += _metrics(_flatten_metrics(oracle, skip=_ENTRY_SKIP),
                                       prefix="oracle_")
        champ = next((e for e in summary["calibrators"]
                      if isinstance(e, Mapping) and e.get("name") == champion), None)
        if champ is not None:
            parent_metrics += _metrics(_flatten_metrics(champ, skip=_ENTRY_SKIP),
                                       prefix="champion_")
        _log_batch(client, parent, metrics=parent_metrics)
        if bins is not None:
            client.log_table(parent, _table_for_mlflow(bins), "reliability_bins.json")
            fig = comparison_figure(bins, table, histogram=histogram, config=config,
                                    champion=champion)
            client.log_figure(parent, fig, "reliability_grid.png")  # one panel each
            client.log_figure(parent, overlay_figure(bins, champion=champion),
                              "reliability_overlay.png")  # all on one axes
        if dataset is not None:
            mlflow.log_input(dataset, context="training")

        # one nested run per calibrator
        runs: dict[str, str] = {}
        per_fold = summary.get("per_fold", summary.get("folds"))
        for entry in summary["calibrators"]:
            if not isinstance(entry, Mapping) or "name" not in entry:
                raise ConfigError(f"{got.where}: a calibrator entry lacks 'name'")
            name = str(entry["name"])
            is_champion = name == champion
            with self._nested(name, stage="calibrator",
                              tags={"calibrator": name, "is_champion": is_champion,
                                    TAG_DATA_FINGERPRINT: fingerprint}) as run:
                rid = run.info.run_id
                runs[name] = rid
                metrics = _metrics(_flatten_metrics(entry, skip=_ENTRY_SKIP))
                metrics += self._fold_metrics(entry, per_fold, name)
                params = _calibrator_params(entry, config, got.portable.get(name))
                _log_batch(client, rid, metrics=metrics, params=params)
                if name in got.portable_files:
                    client.log_artifact(rid, str(got.portable_files[name]))
                if bins is not None:
                    own = bins if name_col is None else bins[bins[name_col] == name]
                    if len(own):
                        client.log_table(rid, _table_for_mlflow(own), "reliability_bins.json")
                        fig = reliability_figure(
                            own, histogram=None if histogram is None else
                            histogram[histogram["calibrator"].astype(str) == name],
                            title=f"Reliability, out of fold: {name}, n = "
                                  f"{_bins_rows(own)} claims, equal-mass bins")
                        client.log_figure(rid, fig, "reliability.png")
                        client.log_figure(parent, fig, f"reliability/{name}.png")
                if dataset is not None:
                    mlflow.log_input(dataset, context="training")
        return ComparisonRuns(parent_run_id=parent, calibrator_runs=runs, champion=champion)

    def _dataset(self, claims: pd.DataFrame | None, claims_path: str | os.PathLike[str] | None,
                 config: Mapping[str, Any], what: str) -> tuple[Any, str | None]:
        path = claims_path if claims_path is not None else config.get("claims")
        if claims is None and path is not None and Path(path).exists():
            claims = _read_table(Path(path))
        if claims is None:
            _log.info("no claims given for %s: no dataset input logged", what)
            return None, None
        fingerprint = _data_fingerprint(claims)
        from mlflow.data.pandas_dataset import from_pandas

        name = Path(path).stem if path is not None else "claims"
        # No path: MLflow records the calling code as the source.
        where: dict[str, Any] = {} if path is None else {"source": _dataset_source(path)}
        dataset = from_pandas(_table_for_mlflow(claims), name=name,
                              targets="violated" if "violated" in claims else None, **where)
        return dataset, fingerprint

    @staticmethod
    def _fold_metrics(entry: Mapping[str, Any], folds_top: Any, name: str) -> list[Metric]:
        """Per-fold metrics as ``fold/<metric>`` with step = fold index."""
        folds = entry.get("folds")
        if folds is None and isinstance(folds_top, list):
            folds = [f for f in folds_top if isinstance(f, Mapping)
                     and f.get("calibrator", f.get("name")) == name]
        if isinstance(folds, Mapping):
            folds = [dict(v, fold=k) if isinstance(v, Mapping) else {"fold": k}
                     for k, v in folds.items()]
        out: list[Metric] = []
        for i, fold in enumerate(folds or []):
            if not isinstance(fold, Mapping):
                continue
            step_raw = fold.get("fold", i)
            step = int(step_raw) if _is_number(step_raw) else i
            values = _flatten_metrics(fold, skip=frozenset({"fold", "calibrator", "name"}))
            out += _metrics(values, step=step, prefix="fold/")
        return out

    # -- tuning -----------------------------------------------------------------------
    @_when_enabled
    def log_tuning(self, tuning: TuneResult | str | os.PathLike[str], *,
                   files: Mapping[str, str | os.PathLike[str]] | None = None,
                   replay: Mapping[str, ReplayResult] | None = None) -> str:
        """Log a tuning as one nested run for the Optuna study.

        Logged: the chosen thresholds (parameters ``best.<name>`` and metrics), every
        numeric column of the trials table as the metric ``trial/<column>`` with step =
        trial number (the table too), the study settings as parameters, the chosen trial's
        metrics on the tuning split as ``tune.<metric>`` and on the held-out split as
        ``holdout.<metric>`` with ``_lo`` / ``_hi`` bounds, the held-out replay table of the
        tuned gate beside the baselines, the Pareto front and its plot (multi-objective
        mode), and the files.

        Parameters
        ----------
        tuning : TuneResult or path
            What :func:`amv_calib.tuning.tune_thresholds` returned; or, for a tuning run
            elsewhere, its output folder (``thresholds.json``, ``trials.csv``,
            ``tune_report.json``, ...).
        files : mapping, optional
            With a result: the files to upload (role to path; default: the result's own
            ``files``).
        replay : mapping, optional
            With a result: replay results by policy on the held-out episodes (the table
            logged instead of the one built from the result's held-out metrics).

        Returns
        -------
        str or None
            The nested run's id; None when the tracker is disabled.
        """
        client, parent = self.client, str(self.run_id)  # raises when not entered
        if isinstance(tuning, (str, os.PathLike)):
            if files is not None or replay is not None:
                raise TypeError("files= and replay= go with a TuneResult; a folder holds them")
            got = _Tuning.from_folder(Path(tuning))
        else:
            got = _Tuning.from_result(tuning, files, replay)
        thresholds, report = got.thresholds, got.report
        _log_batch(client, parent, params={f"tune.{k}": v for k, v in thresholds.items()})
        with self._nested("tuning", stage="tuning") as run:
            rid = run.info.run_id
            params: dict[str, Any] = {f"best.{k}": v for k, v in thresholds.items()}
            params.update({k: v for k, v in report.items()
                           if k not in _REPORT_NESTED and not isinstance(v, (Mapping, list))})
            metrics = _metrics({k: v for k, v in thresholds.items() if _is_number(v)},
                               prefix="best.")
            tune_metrics = report.get("tune_metrics")
            if isinstance(tune_metrics, Mapping):
                metrics += _metrics(_flatten_metrics(tune_metrics, skip=frozenset()),
                                    prefix="tune.")
            holdout = report.get("holdout")
            tuned = holdout.get("tuned") if isinstance(holdout, Mapping) else None
            if isinstance(tuned, Mapping):
                metrics += _metrics(_flatten_metrics(tuned, skip=frozenset()),
                                    prefix="holdout.")
            trials = got.trials
            if trials is not None:
                metrics += _trial_metrics(trials)
                client.log_table(rid, _table_for_mlflow(trials), "trials.json")
                params["n_trials"] = len(trials)
                if {"gate_harmful", "total_loss"} <= set(trials.columns):
                    best = report.get("best_trial")
                    target = report.get("target_harmful")
                    fig = trials_figure(trials, chosen=best if _is_number(best) else None,
                                        target=target if _is_number(target) else None)
                    client.log_figure(rid, fig, "figures/trials_harm_vs_loss.png")
                    client.log_figure(parent, fig, "tuning/trials_harm_vs_loss.png")
            _log_batch(client, rid, metrics=metrics, params=params)
            for path in got.files:
                if path.suffix == ".png":
                    client.log_artifact(rid, str(path), "figures")
                    if "pareto" in path.name:
                        client.log_artifact(parent, str(path), "tuning")
                elif path.suffix in (".csv", ".json", ".md"):
                    client.log_artifact(rid, str(path), "files")
            for stem, extra in got.tables.items():
                client.log_table(rid, _table_for_mlflow(extra), f"{stem}.json")
        if got.replay is not None:
            self._log_replay_table(got.replay, [parent, rid])
        elif isinstance(holdout, Mapping) and isinstance(tuned, Mapping):
            planner = str(report.get("planner", "tuned"))
            table = {f"tuned-{planner}": tuned, **dict(holdout.get("baselines") or {})}
            self._log_replay_table(_replay_rows(table), [parent, rid])
        return str(rid)

    # -- replay -----------------------------------------------------------------------
    @_when_enabled
    def describe(self, *, run_name: str, description: str) -> None:
        """Rename the parent run and set its description (what the MLflow UI shows)."""
        parent = str(self.run_id)
        self.client.set_tag(parent, "mlflow.runName", run_name)
        self.client.set_tag(parent, "mlflow.note.content", description)

    @_when_enabled
    def log_certification(self, certificate: Certificate, *,
                          files: Mapping[str, str | os.PathLike[str]] | None = None,
                          replay: Mapping[str, ReplayResult] | None = None) -> None:
        """Log a certification on the parent run.

        ``certificate.*`` metrics (alpha, delta, n, chosen harm price, calibration harm rate,
        its observed Clopper-Pearson bound, loss given up, supported alpha), the certified
        statement as a tag, the files as artifacts under ``certify/`` and the held-out replay
        table.

        Parameters
        ----------
        certificate : Certificate
            What :func:`amv_calib.tuning.certify_episodes` found (its ``certificate``).
        files : mapping, optional
            ``{name: path}`` of what was written: ``certificate``, ``frontier`` (as
            :func:`amv_calib.tuning.write_certification` returns them) and ``replay_table``
            are logged; other names are not.
        replay : mapping, optional
            The held-out replay results by policy (see :meth:`log_replay`).
        """
        data = certificate.to_dict()
        parent = str(self.run_id)
        chosen = certificate.chosen
        values = {k: data.get(k) for k in ("alpha", "delta", "n", "harm_rate",
                                           "observed_upper_bound", "loss_given_up",
                                           "supported_alpha")}
        if chosen is not None:
            values["harm_price"] = certificate.path[chosen].get("harm_price", 0.0)
        tags = {"certified": str(chosen is not None).lower()}
        if chosen is not None:
            tags["certificate.statement"] = certificate.statement
        _log_batch(self.client, parent, metrics=_metrics(values, prefix="certificate."),
                   tags=tags)
        for name in ("certificate", "frontier", "replay_table"):
            if files and files.get(name) is not None:
                self.client.log_artifact(parent, str(files[name]), "certify")
        if replay is not None:
            self.log_replay(replay)

    @_when_enabled
    def log_monitoring(self, report: MonitorReport, *,
                       files: Mapping[str, str | os.PathLike[str]] | None = None) -> None:
        """Log a monitoring run on the parent run.

        Every window's numeric statistics become metrics stepped by window
        (``monitor.<name>``, step = window index, timestamp = window end); the latest status
        and the artifact monitored are tags; the files are artifacts under ``monitor/``.

        Parameters
        ----------
        report : MonitorReport
            What :func:`amv_calib.monitoring.monitor` returned.
        files : mapping, optional
            ``{name: path}`` as :func:`amv_calib.monitoring.write_monitor_outputs` returns
            it: ``report``, ``table`` and ``timeline`` are logged; the claims are not.
        """
        data = report.to_dict()
        codes = {"INSUFFICIENT DATA": -1, "OK": 0, "WARN": 1, "ALERT": 2}
        metrics: list[Metric] = []
        for step, w in enumerate(data.get("windows", [])):
            when = int(np.datetime64(str(w["end"]).rstrip("Z"), "ms").astype(np.int64))
            flat: dict[str, Any] = {"status": codes.get(w.get("status"), -1)}
            for key in ("uses", "labelled", "actions_labelled", "mean_p", "mean_p_shift"):
                flat[key] = w.get(key)
            for feature, stats in (w.get("drift") or {}).items():
                for name, v in stats.items():
                    flat[f"drift.{feature}.{name}"] = v
            for section in ("calibration", "harm"):
                for name, v in (w.get(section) or {}).items():
                    if isinstance(v, list) and len(v) == 2:
                        flat[f"{section}.{name}.low"], flat[f"{section}.{name}.high"] = v
                    else:
                        flat[f"{section}.{name}"] = v
            metrics += [Metric(f"monitor.{k}", float(v), when, step) for k, v in flat.items()
                        if _is_number(v)]
        parent = str(self.run_id)
        _log_batch(self.client, parent, metrics=metrics, tags={
            "monitor.latest_status": str(data.get("latest_status")),
            "monitor.artifact": str(data.get("artifact"))})
        for name in ("report", "table", "timeline"):
            path = (files or {}).get(name)
            if path is not None and Path(path).is_file():
                self.client.log_artifact(parent, str(path), "monitor")

    @_when_enabled
    def log_promotion(self, decision: PromotionDecision, *,
                      file: str | os.PathLike[str] | None = None) -> None:
        """Log a promotion decision on the parent run.

        Tags say whether the challenger went to production (``promotion.promoted``), which
        version was judged (``promotion.version``) and, per condition, its verdict
        (``promotion.certified`` and the like: short, to read in the runs table); the held-out
        log losses become ``promotion.*`` metrics.

        Parameters
        ----------
        decision : PromotionDecision
            What :func:`amv_calib.artifacts.decide_promotion` returned.
        file : path, optional
            The decision as written (the promote step's ``promotion.json``), logged as the
            artifact ``promote/promotion.json``: the full reasons, which the tags shorten.
        """
        parent = str(self.run_id)
        verdicts = {}
        for reason in decision.reasons:
            condition, _, rest = str(reason).partition(": ")
            key = "promotion." + re.sub(r"[^a-z0-9]+", "_", condition.lower()).strip("_")
            verdicts[key[:240]] = rest.partition(" -- ")[0][:240]
        _log_batch(self.client, parent, tags={
            "promotion.promoted": str(bool(decision.promote)).lower(),
            "promotion.version": str(decision.version), **verdicts})
        values = {k: decision.holdout.get(k) for k in ("challenger_log_loss",
                                                       "production_log_loss", "difference")}
        _log_batch(self.client, parent, metrics=_metrics(values, prefix="promotion."))
        if file is not None:
            self.client.log_artifact(parent, str(file), "promote")

    @_when_enabled
    def log_replay(self, replay: Mapping[str, ReplayResult] | str | os.PathLike[str], *,
                   run_id: str | None = None) -> None:
        """Log a replay: every policy's metrics as ``replay.<policy>.<metric>`` on the parent
        run (and on ``run_id`` when given), the table as ``replay_table.json``.

        Parameters
        ----------
        replay : mapping or path
            The results by policy, as :func:`amv_calib.tuning.replay_many` returns them; or,
            for a replay run elsewhere, a file holding one (the ``--json`` object, its CSV
            table) or a folder holding such a file.
        run_id : str, optional
            A further run to log the same metrics and table on.
        """
        if isinstance(replay, Mapping):
            table = _replay_rows(_sorted_keys({n: r.to_dict() for n, r in replay.items()}))
        else:
            path = Path(replay)
            if path.is_dir():
                found = _first(path, _REPLAY_FILES)
                if found is None:
                    raise ConfigError(
                        f"{path}: holds no replay table ({', '.join(_REPLAY_FILES)})")
                path = found
            table = _replay_table(path)
        self._log_replay_table(table, [str(self.run_id), *([run_id] if run_id else [])])

    def _log_replay_table(self, table: pd.DataFrame, run_ids: Sequence[str]) -> None:
        client = self.client
        pcol = "policy" if "policy" in table.columns else str(table.columns[0])
        metrics: list[Metric] = []
        for _, row in table.iterrows():
            values = {str(k): v for k, v in row.items() if k != pcol}
            metrics += _metrics(values, prefix=f"replay.{row[pcol]}.")
        digest = hashlib.sha256(table.to_json(orient="split").encode()).hexdigest()
        for rid in dict.fromkeys(run_ids):
            # MLflow appends to an existing table artifact: the same table logged twice
            # into one run (log_tuning, then log_replay of the same file) is logged once.
            if (rid, digest) in self._replays:
                continue
            self._replays.add((rid, digest))
            _log_batch(client, rid, metrics=metrics)
            client.log_table(rid, _table_for_mlflow(table), "replay_table.json")

    # -- export -----------------------------------------------------------------------
    @_when_enabled
    def log_artifact_export(self, export: ExportResult) -> None:
        """Log an exported artifact version on the parent run: its name, version, path and
        sha256 as tags, its name, version, calibrator kind and thresholds as ``export.*``
        parameters, its manifest and calibrator as artifacts under ``artifact/<version>``.

        Parameters
        ----------
        export : ExportResult
            What :func:`amv_calib.artifacts.export_artifact` returned.
        """
        from amv_calib.contract import CALIBRATOR_FILE, MANIFEST_FILE, check_thresholds

        client, parent = self.client, str(self.run_id)
        manifest = export.manifest
        training = manifest.get("training_data") or {}
        tags = {
            "artifact_name": export.name,
            "artifact_version": export.version,
            "artifact_path": str(export.path.resolve()),
            "artifact_sha256": export.manifest_sha256,
            "calibrator_sha256": manifest["files"][CALIBRATOR_FILE],
        }
        if isinstance(training, Mapping) and training.get("sha256"):
            tags[TAG_DATA_FINGERPRINT] = str(training["sha256"])
        # normalised as load_artifact does, so the parameters are what a loader sees
        thresholds = check_thresholds(manifest["gate"])
        _log_batch(client, parent, tags=tags,
                   params={"export.name": export.name, "export.version": export.version,
                           "export.calibrator_kind": manifest["calibrator_kind"],
                           **{f"export.{k}": v for k, v in thresholds.items()}})
        for fname in (MANIFEST_FILE, CALIBRATOR_FILE):
            client.log_artifact(parent, str(export.path / fname), f"artifact/{export.version}")

    # -- registry ---------------------------------------------------------------------
    @_when_enabled
    def register_champion(self, artifact_dir: str | os.PathLike[str], *,
                          registered_name: str = DEFAULT_REGISTERED_MODEL,
                          alias: str | None = DEFAULT_ALIAS) -> RegisteredVersion:
        """Log the artifact as the servable gate model, register it and set ``alias``.

        The model is the pyfunc of :mod:`amv_calib.tracking._pyfunc` ("models from code") with
        the artifact folder as its only artifact. The model version's tags name the
        artifact's name, version, manifest sha256 and calibrator sha256.

        Returns
        -------
        RegisteredVersion or None
            None when the tracker is disabled.
        """
        from amv_calib.tracking import _pyfunc as mlflow_model
        art = _load(artifact_dir)
        client, parent = self.client, str(self.run_id)
        manifest_sha = hashlib.sha256((art.path / "manifest.json").read_bytes()).hexdigest()
        existing = _registered_versions(client, registered_name).get(manifest_sha)
        if existing is not None:
            # The same artifact registered before (a re-run, make demo): reuse that version.
            if alias:
                client.set_registered_model_alias(registered_name, alias, existing.version)
            return RegisteredVersion(
                name=registered_name, version=str(existing.version), alias=alias,
                model_uri=f"models:/{registered_name}@{alias}" if alias
                else f"models:/{registered_name}/{existing.version}",
                run_id=existing.run_id, artifact_name=art.name, artifact_version=art.version,
                artifact_sha256=manifest_sha)
        version_tags = _artifact_tags(art, manifest_sha)
        info = mlflow.pyfunc.log_model(
            name=MODEL_NAME,
            python_model=str(Path(mlflow_model.__file__).resolve()),
            artifacts={MODEL_ARTIFACT_KEY: str(art.path.resolve())},
            signature=mlflow_model.model_signature(),
            input_example=mlflow_model.input_example(),
            pip_requirements=mlflow_model.pip_requirements(),
            registered_model_name=registered_name,
            metadata={"amv_calib_artifact": {k: str(v) for k, v in version_tags.items()}},
            tags={k: str(v) for k, v in version_tags.items()},
        )
        version = str(info.registered_model_version)
        for key, value in version_tags.items():
            client.set_model_version_tag(registered_name, version, key, str(value))
        client.update_model_version(registered_name, version,
                                    description=_version_description(art, manifest_sha))
        client.update_registered_model(
            registered_name,
            description="The AMV runtime gate (amv-calib): calibrated memory-staleness "
                        "probabilities and PROCEED / VERIFY / ABSTAIN decisions. @champion is "
                        "the artifact file alias production, @challenger the newest version "
                        "that has not earned it.")
        if alias:
            client.set_registered_model_alias(registered_name, alias, version)
        _log_batch(client, parent, tags={"registered_model": f"{registered_name}/{version}"})
        return RegisteredVersion(
            name=registered_name, version=version, alias=alias,
            model_uri=f"models:/{registered_name}@{alias}" if alias
            else f"models:/{registered_name}/{version}",
            run_id=parent, artifact_name=art.name, artifact_version=art.version,
            artifact_sha256=manifest_sha)


# -- module-level shortcuts -------------------------------------------------------------
@contextlib.contextmanager
def pipeline_run(name: str, *, tracking_uri: str | None = None,
                 experiment: str = DEFAULT_EXPERIMENT, tags: Mapping[str, Any] | None = None,
                 params: Mapping[str, Any] | None = None, enabled: bool = True
                 ) -> Iterator[PipelineTracker]:
    """``with pipeline_run("retrain") as tracker:`` -- the parent run of a pipeline run.

    See :class:`PipelineTracker`; ``enabled=False`` yields a no-op tracker.
    """
    with PipelineTracker(run_name=name, experiment=experiment, tracking_uri=tracking_uri,
                         params=params, tags=tags, enabled=enabled) as tracker:
        yield tracker


@contextlib.contextmanager
def _standalone(stage: str, parent_run_id: str | None, tracking_uri: str | None,
                experiment: str) -> Iterator[PipelineTracker]:
    # Inside an open tracker run, attach to it rather than start a second top-level run.
    active = mlflow.active_run()
    run_id = parent_run_id or (active.info.run_id if active is not None else None)
    with PipelineTracker(run_name=stage, experiment=experiment, tracking_uri=tracking_uri,
                         run_id=run_id) as tracker:
        yield tracker


def log_comparison(comparison: ComparisonResult | str | os.PathLike[str], *,
                   files: Mapping[str, str | os.PathLike[str]] | None = None,
                   claims: pd.DataFrame | None = None,
                   claims_path: str | os.PathLike[str] | None = None,
                   parent_run_id: str | None = None, tracking_uri: str | None = None,
                   experiment: str = DEFAULT_EXPERIMENT) -> ComparisonRuns:
    """Log a comparison (a result or a compare folder, as
    :meth:`PipelineTracker.log_comparison`); under ``parent_run_id`` if given, else in a
    new run "compare"."""
    with _standalone("compare", parent_run_id, tracking_uri, experiment) as t:
        out = t.log_comparison(comparison, files=files, claims=claims, claims_path=claims_path)
    assert out is not None
    return out


def log_tuning(tuning: TuneResult | str | os.PathLike[str], *,
               files: Mapping[str, str | os.PathLike[str]] | None = None,
               replay: Mapping[str, ReplayResult] | None = None,
               parent_run_id: str | None = None, tracking_uri: str | None = None,
               experiment: str = DEFAULT_EXPERIMENT) -> str:
    """Log a tuning (a result or its folder, as :meth:`PipelineTracker.log_tuning`); under
    ``parent_run_id`` if given, else in a new run "tune"."""
    with _standalone("tune", parent_run_id, tracking_uri, experiment) as t:
        out = t.log_tuning(tuning, files=files, replay=replay)
    assert out is not None
    return out


def log_replay(replay: str | os.PathLike[str], *, parent_run_id: str | None = None,
               tracking_uri: str | None = None, experiment: str = DEFAULT_EXPERIMENT) -> None:
    """Log a replay result; under ``parent_run_id`` if given, else in a new run "replay"."""
    with _standalone("replay", parent_run_id, tracking_uri, experiment) as t:
        t.log_replay(replay)


def log_artifact_export(artifact_dir: str | os.PathLike[str], *,
                        parent_run_id: str | None = None, tracking_uri: str | None = None,
                        experiment: str = DEFAULT_EXPERIMENT) -> None:
    """Log an exported artifact folder (``models/NAME/vN``, loaded and checked); under
    ``parent_run_id`` if given, else in a run "export"."""
    from amv_calib.artifacts import ExportResult
    from amv_calib.contract import MANIFEST_FILE

    art = _load(artifact_dir)
    export = ExportResult(path=art.path, name=art.name, version=art.version,
                          manifest=art.manifest, manifest_sha256=hashlib.sha256(
                              art.contents[MANIFEST_FILE]).hexdigest())
    with _standalone("export", parent_run_id, tracking_uri, experiment) as t:
        t.log_artifact_export(export)


def register_champion(artifact_dir: str | os.PathLike[str], *,
                      registered_name: str = DEFAULT_REGISTERED_MODEL,
                      alias: str | None = DEFAULT_ALIAS, parent_run_id: str | None = None,
                      tracking_uri: str | None = None,
                      experiment: str = DEFAULT_EXPERIMENT) -> RegisteredVersion:
    """Register an artifact as the servable gate model (see
    :meth:`PipelineTracker.register_champion`); in a new run "register" unless attached."""
    with _standalone("register", parent_run_id, tracking_uri, experiment) as t:
        out = t.register_champion(artifact_dir, registered_name=registered_name, alias=alias)
    assert out is not None
    return out


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
                          tracking_uri: str | None = None) -> dict[str, str | None]:
    """Make the registry's ``@champion`` / ``@challenger`` name the versions the file
    aliases ``production`` / ``challenger`` of ``model_dir`` name (matched by manifest
    sha256).

    A registry alias whose file alias is gone is removed (the mirror follows the files). A
    file alias whose version the registry does not hold leaves the registry alias as it is
    (never emptied) and logs a warning naming the command that registers it. Returns
    ``{registry alias: the registry version it names now, or None}``.
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
            _log.warning(
                "the registry %r does not hold %s (alias %s): @%s left at %s; register it with "
                "`amv-calib register %s`", registered_name, entry["version"], file_alias,
                reg_alias, out[reg_alias] or "nothing",
                Path(model_dir) / str(entry["version"]))
    return out


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
        lines.append(f"training data: {td['rows']} claims {td.get('time_min')} .. "
                     f"{td.get('time_max')}, violation rate {td.get('label_rate')}, sha256 "
                     f"{td.get('sha256')}")
    if cert.get("chosen") is not None:
        lines.append(f"certified: Gate Harmful <= {cert.get('alpha')} with probability >= "
                     f"{1 - float(cert.get('delta') or 0)} on episodes like the "
                     f"{cert.get('n')} calibration ones (observed calibration harm bound "
                     f"{cert.get('observed_upper_bound')}, not certified)")
    else:
        lines.append("certificate: none")
    return "\n".join(lines)


def _bins_rows(bins: pd.DataFrame) -> int:
    """Rows behind one calibrator's equal-mass reliability bins (the figure's n)."""
    b = bins
    if "strategy" in b.columns:
        b = b[b["strategy"].astype(str) == "quantile"]
    if "calibrator" in b.columns and len(b):
        b = b[b["calibrator"] == b["calibrator"].iloc[0]]
    return int(b["count"].sum()) if "count" in b.columns else len(b)


_ENTRY_SKIP: Final = frozenset({"name", "folds", "per_fold", "params", "settings", "config",
                                "calibrator", "is_champion", "champion", "kind",
                                "feature_map"})
_TRIALS_FILES: Final = ("trials.csv", "trials.parquet", "trials.json")
_REPLAY_FILES: Final = ("replay.json", "replay.csv", "replay_heldout.json", "replay_table.csv")
_SUMMARY_FILES: Final = ("tune_report.json", "tuning.json", "summary.json")
# tune_report.json keys that are not study settings (logged as metrics, tables or files)
_REPORT_NESTED: Final = frozenset({"thresholds", "tune_metrics", "holdout", "files"})


def _quote(text: str) -> str:
    return text.replace("'", "\\'")


def _first(folder: Path, names: Sequence[str]) -> Path | None:
    for name in names:
        if (folder / name).is_file():
            return folder / name
    return None


def _flat_params(obj: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, val in obj.items():
        name = f"{prefix}{key}"
        if isinstance(val, Mapping) and len(val) <= 20:
            out.update(_flat_params(val, prefix=f"{name}."))
        else:
            out[name] = val
    return out


def _table_row(entry: Mapping[str, Any]) -> dict[str, Any]:
    row: dict[str, Any] = {"name": entry.get("name")}
    row.update(_flatten_metrics(entry, skip=_ENTRY_SKIP))
    return row


def _calibrator_params(entry: Mapping[str, Any], config: Mapping[str, Any],
                       portable: Mapping[str, Any] | None) -> dict[str, Any]:
    params: dict[str, Any] = {}
    for key in ("folds", "n_folds", "split", "scoring", "tie_break", "seed", "n_boot",
                "n_bins", "alpha", "n_rows", "sample_weight"):
        if key in config:
            params[key] = config[key]
    settings = entry.get("params", entry.get("settings"))
    if isinstance(settings, Mapping):
        params.update(_flat_params(settings, prefix="calibrator."))
    calibrators_cfg = config.get("calibrators")
    own = calibrators_cfg.get(str(entry["name"])) if isinstance(calibrators_cfg, Mapping) \
        else None
    if isinstance(own, Mapping):
        params.update(_flat_params(own, prefix="calibrator."))
    elif isinstance(own, str):
        params["estimator"] = own
    for key in ("kind", "feature_map"):
        if key in entry:
            params[key] = entry[key]
    if portable is not None:
        params.setdefault("kind", portable.get("kind"))
        fmap = portable.get("feature_map")
        if isinstance(fmap, list):
            from amv_calib.contract import FeatureMap

            params["feature_map"] = ", ".join(FeatureMap.from_list(fmap).names)
            params["n_features"] = len(fmap)
    return params


def _tuning_summary(tdir: Path) -> dict[str, Any]:
    path = _first(tdir, _SUMMARY_FILES)
    if path is None:
        return {}
    data = _read_json(path)
    return dict(data) if isinstance(data, Mapping) else {}


def _trial_metrics(trials: pd.DataFrame) -> list[Metric]:
    """Each numeric column of a trials table as ``trial/<column>`` with step = trial number."""
    if "state" in trials.columns:
        trials = trials[trials["state"].astype(str).str.upper().isin(["COMPLETE",
                                                                      "TRIALSTATE.COMPLETE"])]
    num_col = "number" if "number" in trials.columns else None
    skip = {"number", "duration", "datetime_start", "datetime_complete", "state"}
    out: list[Metric] = []
    now = int(time.time() * 1000)
    cols = [c for c in trials.columns if c not in skip
            and str(trials[c].dtype) not in ("bool", "boolean")
            and trials[c].dtype.kind in "iuf"]
    for i, row in enumerate(trials.itertuples(index=False)):
        values = dict(zip(trials.columns, row, strict=True))
        step = int(values[num_col]) if num_col else i
        for col in cols:
            v = values[col]
            if _is_number(v):
                key = str(col).removeprefix("params_").removeprefix("user_attrs_") \
                    .removeprefix("values_")
                out.append(Metric(f"trial/{key}", float(v), now, step))
    return out


def _replay_rows(data: Mapping[str, Any]) -> pd.DataFrame:
    """``{policy: {metric: value or {value, lo, hi}}}`` as one row per policy."""
    import pandas as pd

    rows = []
    for policy, metrics in data.items():
        if isinstance(metrics, Mapping):
            # ReplayResult.to_dict() nests the metrics under "overall"; --json does not.
            overall = metrics.get("overall")
            flat = dict(overall, n=metrics.get("n")) if isinstance(overall, Mapping) \
                else metrics
            rows.append({"policy": policy, **_flatten_metrics(
                flat, skip=frozenset({"by_family", "family_n", "config", "policy"}))})
    return pd.DataFrame(rows)


def _sorted_keys(obj: Any) -> Any:
    """``obj`` with every mapping's keys sorted, as in the ``replay.json`` the steps write:
    a replay logged from its results gives the table (columns and rows in that order) that
    logging the file gave."""
    if isinstance(obj, Mapping):
        return {k: _sorted_keys(obj[k]) for k in sorted(obj)}
    return obj


def _replay_table(path: Path) -> pd.DataFrame:
    if path.suffix == ".json":
        data = _read_json(path)
        if not isinstance(data, Mapping):
            raise ConfigError(f"{path}: a replay result must be a JSON object by policy")
        return _replay_rows(data)
    return _read_table(path)


def _dataset_source(path: str | os.PathLike[str]) -> Any:
    """A local file's dataset source, built directly: MLflow 3.17 registers the local source
    class twice and warns on every string it resolves."""
    from mlflow.data.dataset_source_registry import get_registered_sources

    text = str(Path(path).resolve())
    for cls in get_registered_sources():
        if getattr(cls, "__name__", "") == "LocalArtifactDatasetSource":
            return cast(Any, cls)(text)
    return text


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
