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
import logging
import os
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar

import mlflow
import numpy as np
from mlflow import MlflowClient
from mlflow.entities import Metric

from amv_calib.calibration import comparison_figure, overlay_figure, reliability_figure
from amv_calib.exceptions import ConfigError
from amv_calib.settings import DEFAULT_REGISTERED_MODEL
from amv_calib.tracking._registry import (
    DEFAULT_ALIAS,
    MODEL_ARTIFACT_KEY,
    MODEL_NAME,
    RegisteredVersion,
    _artifact_tags,
    _load,
    _registered_versions,
    _version_description,
)
from amv_calib.tracking._store import (
    DEFAULT_EXPERIMENT,
    _experiment_id,
    _use_uri,
    ensure_tracking_db,
    resolve_tracking_uri,
)
from amv_calib.tracking._values import (
    _ENTRY_SKIP,
    _REPLAY_FILES,
    _REPORT_NESTED,
    TAG_DATA_FINGERPRINT,
    TAG_STAGE,
    _bins_rows,
    _calibrator_params,
    _Comparison,
    _data_fingerprint,
    _dataset_source,
    _first,
    _flat_params,
    _flatten_metrics,
    _is_number,
    _log_batch,
    _metrics,
    _provenance_tags,
    _read_table,
    _replay_rows,
    _replay_table,
    _sorted_keys,
    _table_for_mlflow,
    _trial_metrics,
    _Tuning,
    trials_figure,
)

if TYPE_CHECKING:
    import pandas as pd

    from amv_calib.artifacts import ExportResult, PromotionDecision
    from amv_calib.calibration import ComparisonResult
    from amv_calib.monitoring import MonitorReport
    from amv_calib.tuning import Certificate, ReplayResult, TuneResult


_log = logging.getLogger(__name__)


# -- results ----------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class ComparisonRuns:
    """Run ids logged by :meth:`PipelineTracker.log_comparison`."""

    parent_run_id: str
    calibrator_runs: dict[str, str]
    champion: str | None



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

