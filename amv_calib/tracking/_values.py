"""What the tracker logs, and how: results and folders turned into MLflow parameters,
metrics, tables and figures (the views of a comparison and of a tuning, the flattening of
metric entries, provenance tags, batched logging within MLflow's limits)."""

from __future__ import annotations

import json
import logging
import math
import os
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, cast

import numpy as np
from mlflow import MlflowClient
from mlflow.entities import Metric, Param, RunTag

from amv_calib import __version__
from amv_calib.contract import loads_strict
from amv_calib.exceptions import ConfigError
from amv_calib.settings import project_root

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure

    from amv_calib.calibration import ComparisonResult
    from amv_calib.tuning import ReplayResult, TuneResult


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




# -- a comparison and a tuning, from their results or their folders ----------------------
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
                      for name, est in result.estimators.items()
                      if not getattr(est, "is_baseline", False)},
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
        # only the compared calibrators' files, as the comparison names them
        names = [str(e["name"]) for e in summary["calibrators"]
                 if isinstance(e, Mapping) and "name" in e]
        portable_files = {n: cdir / "calibrators" / f"{n}.json" for n in names
                          if (cdir / "calibrators" / f"{n}.json").is_file()}
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


# -- helpers of the two views ------------------------------------------------------------
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
    class twice and warns on every string it resolves. ``mlflow.data.sources`` is where MLflow
    publishes its registered source classes; without that class the plain path is given."""
    from mlflow.data import sources

    text = str(Path(path).resolve())
    cls = getattr(sources, "LocalArtifactDatasetSource", None)
    return text if cls is None else cast(Any, cls)(text)
