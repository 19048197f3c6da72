"""Optuna tuning of the gate's VOI thresholds on replayed episodes, and the transfer check.

:func:`tune_thresholds` searches ``lambda_cost_scale``, ``delta_loss_threshold``,
``epsilon_harm_bound``, the harm price ``harm_price`` and the planner's budget
``max_verifications`` on a *tuning split* of the episodes (a fixed hash of ``instance_id``)
and reports on the *held-out* split:

- ``mode="constrained"``: minimise total loss subject to Gate Harmful <= ``target_harmful``,
  the constraint set with ``trial.set_constraint`` (Optuna 5; ``TPESampler`` honours it, as do
  ``NSGAIISampler``, ``GPSampler`` and ``CmaEsSampler``);
- ``mode="multi"``: Gate Harmful (min) vs verification cost (min) vs Proceed Coverage (max);
  the Pareto front is written as a CSV table and a plot like the paper's Figures 3 and 4.

Reproducibility: each trial's ``TPESampler`` is seeded from ``(seed, completed trials so
far)``, so a sequential run, and an interrupted run resumed from its storage (a trial
abandoned by a killed process is marked FAIL first, :func:`fail_abandoned_trials`), give the
same completed trials as one uninterrupted run. Parallel workers (``n_workers > 1``) share
one storage and race for trial numbers, so their results depend on timing and are *not*
reproducible.

Storage: a journal file by default (``JournalStorage(JournalFileBackend(path))``, safe for
several processes on one host), or an RDB URL (``postgresql://...`` to share a study
between machines). SQLite is accepted for a single process only. ``load_if_exists=True``:
an interrupted study resumes and runs only the trials still missing.

Optuna, matplotlib and joblib are imported inside the functions that need them.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import socket
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal

import numpy as np
from numpy.typing import NDArray

from amv_calib.contract import (
    PortableCalibrator,
    loads_strict,
    read_regular,
    seed_prior_calibrator,
)
from amv_calib.exceptions import ArtifactError, ConfigError, PortableFormatError, check_choice
from amv_calib.settings import PLANNERS, TuneOptions
from amv_calib.tuning._episodes import EpisodeSet, _as_episode_set
from amv_calib.tuning._outputs import _completed, _write_json, _write_outputs
from amv_calib.tuning._record import episode_keys, hash_split
from amv_calib.tuning._replay import (
    LAMBDA_EVAL,
    METRICS,
    _gate_policy,
    _outcomes,
    replay_many,
)

if TYPE_CHECKING:
    import optuna
    import pandas as pd

    from amv_calib.gate import Gate
    from amv_calib.tuning._replay import ReplayResult


Mode = Literal["constrained", "multi"]
Planner = Literal["lookahead", "myopic"]

#: Search ranges: (low, high, log scale). ``max_verifications`` is an integer range.
#: ``harm_price`` is 0 or, when the trial prices harm (the switch :data:`HARM_PRICE_SWITCH`),
#: log-uniform over its range: it acts through ``theta + mu``, so only its size relative to
#: ``theta`` and ``kappa`` matters (the sample episodes have ``theta`` from 0.05 to 2000 and
#: ``kappa`` from 0.3 to 10), and 1e-3 to 1e3 runs from negligible to pricing every
#: ``P_any`` above 1% out of the screen. Exactly 0 is the unpriced gate, which a log range
#: cannot reach and a linear one would all but never draw; the switch gives it half the prior
#: mass and lets the sampler learn whether pricing pays. A range with ``low == high`` pins
#: the price (no switch).
SEARCH_SPACE: Final[dict[str, tuple[float, float, bool]]] = {
    "lambda_cost_scale": (0.01, 10.0, True),
    "delta_loss_threshold": (0.05, 100.0, True),
    "epsilon_harm_bound": (0.001, 0.5, True),
    "harm_price": (1e-3, 1e3, True),
    "max_verifications": (1, 6, False),
}
#: The categorical parameter that turns the harm price on in a trial (off: ``harm_price`` 0).
HARM_PRICE_SWITCH: Final = "harm_price_on"
_MULTI_NAMES: Final = ("gate_harmful", "verification_cost", "proceed_coverage")
_STUDY_CONFIG_ATTR: Final = "amv_calib_config"
_OWNER_ATTR: Final = "amv_calib_worker"

_log = logging.getLogger(__name__)
#: The defaults of :func:`tune_thresholds` (its command line's and step's too).
_TUNE: Final = TuneOptions()

BoolArray = NDArray[np.bool_]


# -- inputs ------------------------------------------------------------------------------------


def resolve_calibrator(ref: Any) -> tuple[PortableCalibrator, str]:
    """A portable calibrator from what the user names, and a description of it.

    Accepts a :class:`PortableCalibrator`; ``"seed"`` (the seed prior); an artifact
    reference (a version folder holding ``manifest.json``, or ``MODEL_DIR@ALIAS``); a compare
    DIR (its ``champion.json``); a ``.json`` portable calibrator; a ``.joblib`` fitted
    amv-calib calibrator; or a fitted calibrator object with ``to_portable()``.

    Raises
    ------
    ConfigError
        When the reference cannot be read as a calibrator.
    """
    if isinstance(ref, PortableCalibrator):
        return ref, ref.source or "portable calibrator"
    if isinstance(ref, str) and ref == "seed":
        return seed_prior_calibrator(), "seed prior"
    if isinstance(ref, (str, os.PathLike)):
        text = os.fspath(ref)
        path = Path(text)
        if path.is_dir() and (path / "champion.json").is_file():
            return _portable_json(path / "champion.json"), f"compare champion {path}"
        if path.suffix == ".json" and path.is_file():
            return _portable_json(path), str(path)
        if path.suffix == ".joblib":
            if not path.is_file():
                raise ConfigError(f"calibrator={text!r}: file does not exist")
            import joblib

            return _from_estimator(joblib.load(path), text), text
        from amv_calib.contract import load_artifact

        try:
            art = load_artifact(text)
        except ArtifactError as exc:
            raise ConfigError(
                f"calibrator={text!r} is not an artifact, a compare DIR, a .json or a .joblib "
                f"calibrator ({exc})"
            ) from None
        return art.calibrator, f"artifact {art.name}/{art.version}"
    return _from_estimator(ref, type(ref).__name__), type(ref).__name__


def _portable_json(path: Path) -> PortableCalibrator:
    try:
        data = loads_strict(read_regular(path, what="calibrator", error=ConfigError))
        return PortableCalibrator.from_dict(data)
    except (OSError, ValueError, RecursionError, PortableFormatError) as exc:
        raise ConfigError(f"calibrator {path}: {exc}") from None


def _from_estimator(est: Any, what: str) -> PortableCalibrator:
    to_portable = getattr(est, "to_portable", None)
    if to_portable is None:
        raise ConfigError(f"calibrator {what}: has no to_portable()")
    out = to_portable()
    if not isinstance(out, PortableCalibrator):
        raise ConfigError(f"calibrator {what}: to_portable() did not return a PortableCalibrator")
    return out


def split_episodes(es: EpisodeSet, tune_fraction: float) -> tuple[BoolArray, BoolArray]:
    """Deterministic split by a hash of ``instance_id``: masks ``(tune, holdout)``.

    ``u = blake2b("amv-calib/tune-split" \\x1f instance_id)`` as a fraction of ``2**64``
    (:func:`~amv_calib.tuning.episode_keys`); an instance is in the tuning split iff
    ``u < tune_fraction``. Independent of any seed and of the file order, so an instance
    stays on its side when episodes are added.
    """
    hash_split(tune_fraction)  # checks the fraction
    tune = episode_keys(es.instance_id) / 2.0**64 < tune_fraction
    return tune, ~tune


def make_storage(url: str | os.PathLike[str] | None = None, *, n_workers: int = 1) -> Any:
    """An Optuna storage from a URL or a journal file path.

    ``None``: :func:`amv_calib.settings.optuna_storage` (a journal file). A value with
    ``://`` is an RDB URL (``postgresql://``, ``mysql://``, ``sqlite:///``; SQLite is refused
    when ``n_workers > 1`` because its file lock serialises writers badly and can raise
    "database is locked"). ``journal:PATH`` or any other string is a journal file path.
    """
    import optuna
    import optuna.storages.journal

    from amv_calib.settings import optuna_storage

    text = optuna_storage() if url is None else os.fspath(url)
    if "://" in text:
        if text.startswith("sqlite") and n_workers > 1:
            raise ConfigError(
                f"storage={text!r}: SQLite is for a single process; use the journal file "
                f"storage (default) or PostgreSQL for {n_workers} parallel workers"
            )
        return optuna.storages.RDBStorage(_rdb_url(text))
    path = Path(text[len("journal:"):] if text.startswith("journal:") else text)
    path.parent.mkdir(parents=True, exist_ok=True)
    return optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(path)))


def _rdb_url(url: str) -> str:
    # SQLAlchemy's plain postgresql:// means psycopg2; psycopg 3 (the dev extra) needs its own
    # dialect name, so a plain URL works with whichever driver is installed.
    import importlib.util

    for plain in ("postgresql://", "postgres://"):
        if url.startswith(plain) and importlib.util.find_spec("psycopg2") is None \
                and importlib.util.find_spec("psycopg") is not None:
            return "postgresql+psycopg://" + url[len(plain):]
    return url


def _storage_label(url: str | os.PathLike[str] | None) -> str:
    from amv_calib.settings import optuna_storage

    text = optuna_storage() if url is None else os.fspath(url)
    if "://" in text:
        # Never echo a password.
        head, _, tail = text.partition("://")
        userinfo, at, rest = tail.partition("@")
        if at and ":" in userinfo:
            tail = f"{userinfo.split(':', 1)[0]}:***@{rest}"
        return f"{head}://{tail}"
    return text


# -- results ---------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class TuneResult:
    """Outcome of :func:`tune_thresholds`.

    Attributes
    ----------
    thresholds : dict
        The chosen thresholds in ``thresholds.json`` form; ``None`` when no trial is feasible.
    best_trial : int or None
        Optuna number of the chosen trial.
    tune_metrics, holdout_metrics : dict
        Metric values of the chosen thresholds on each split (holdout: with intervals).
    n_trials : int
        Completed trials in the study (over all runs that share it).
    n_new : int
        Trials this call ran.
    pareto : list of dict
        Multi-objective mode: the Pareto-optimal trials (params and metrics).
    files : dict
        Written files by role (``thresholds``, ``trials``, ``pareto``, ``plot``, ``report``).
    report : dict
        The study's settings and the chosen trial (``tune_report.json`` without ``files``).
    trials : pandas.DataFrame
        Every trial of the study (``trials.csv``): ``number``, ``state``, the gate's
        parameters, the metrics and ``feasible``; missing values are NaN or None.
    """

    study_name: str
    storage: str
    mode: str
    planner: str
    target_harmful: float
    # the chosen trial and its metrics
    thresholds: dict[str, Any] | None
    best_trial: int | None
    tune_metrics: dict[str, float]
    holdout_metrics: dict[str, Any]
    # trials and episodes
    n_trials: int
    n_new: int
    n_tune: int
    n_holdout: int
    pareto: list[dict[str, Any]] = field(default_factory=list)
    files: dict[str, str] = field(default_factory=dict)
    report: dict[str, Any] = field(default_factory=dict)
    trials: pd.DataFrame | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "study_name": self.study_name,
            "storage": self.storage,
            "mode": self.mode,
            "planner": self.planner,
            "target_harmful": self.target_harmful,
            "thresholds": self.thresholds,
            "best_trial": self.best_trial,
            "tune_metrics": self.tune_metrics,
            "holdout_metrics": self.holdout_metrics,
            "n_trials": self.n_trials,
            "n_new": self.n_new,
            "n_tune": self.n_tune,
            "n_holdout": self.n_holdout,
            "pareto": self.pareto,
            "files": self.files,
        }


# -- the objective -------------------------------------------------------------------------------


def _gate_params(params: Mapping[str, Any]) -> dict[str, Any]:
    """A trial's parameters as the gate takes them: ``harm_price`` 0.0 where the trial did
    not price harm (its switch off, or a search space without it), no switch."""
    out = {k: v for k, v in params.items() if k != HARM_PRICE_SWITCH}
    out.setdefault("harm_price", 0.0)
    return out


def _gate_for(params: Mapping[str, Any], planner: str, calibrator: PortableCalibrator) -> Gate:
    from amv_calib.gate import Gate

    return Gate(
        lambda_cost_scale=float(params["lambda_cost_scale"]),
        delta_loss_threshold=float(params["delta_loss_threshold"]),
        epsilon_harm_bound=float(params["epsilon_harm_bound"]),
        harm_price=float(params.get("harm_price", 0.0)),
        planner=planner,  # type: ignore[arg-type]
        mode="amv",
        max_verifications=int(params["max_verifications"]),
        calibrator=calibrator,
    )


def _evaluate(
    es: EpisodeSet, p: NDArray[np.float64], gate: Gate, *, seed: int, lambda_eval: float
) -> dict[str, float]:
    proceed, calls, _ = _gate_policy(es, gate, p, seed)
    out = _outcomes(es, proceed, calls, lambda_eval).per_instance().mean(axis=0)
    return {k: float(v) for k, v in zip(METRICS, out, strict=True)}


def _suggest(trial: optuna.Trial, space: Mapping[str, tuple[float, float, bool]]) -> dict[str, Any]:
    params: dict[str, Any] = {}
    for name, (lo, hi, log) in space.items():
        if name == "max_verifications":
            params[name] = trial.suggest_int(name, int(lo), int(hi))
        elif name == "harm_price":
            params[name] = _suggest_harm_price(trial, float(lo), float(hi), log)
        else:
            params[name] = trial.suggest_float(name, float(lo), float(hi), log=log)
    return params


def _suggest_harm_price(trial: optuna.Trial, lo: float, hi: float, log: bool) -> float:
    # exactly 0 through the switch (SEARCH_SPACE); a pinned range needs no switch
    if lo == hi:
        return trial.suggest_float("harm_price", lo, hi)
    if not trial.suggest_categorical(HARM_PRICE_SWITCH, (False, True)):
        return 0.0
    return trial.suggest_float("harm_price", lo, hi, log=log)


def _trial_seed(seed: int, number: int) -> int:
    digest = hashlib.blake2b(f"{seed}\x1ftrial\x1f{number}".encode(), digest_size=4).digest()
    return int.from_bytes(digest, "little")


def _thresholds(params: Mapping[str, Any], planner: str, cal: PortableCalibrator) -> dict[str, Any]:
    from amv_calib.contract import check_thresholds

    return check_thresholds(
        {
            "lambda_cost_scale": float(params["lambda_cost_scale"]),
            "delta_loss_threshold": float(params["delta_loss_threshold"]),
            "epsilon_harm_bound": float(params["epsilon_harm_bound"]),
            "harm_price": float(params.get("harm_price", 0.0)),
            "planner": planner,
            "max_verifications": int(params["max_verifications"]),
            "clamp": None if cal.clamp is None else [cal.clamp[0], cal.clamp[1]],
        }
    )


def _fingerprint(es: EpisodeSet) -> str:
    h = hashlib.sha256()
    for iid in es.instance_id:
        h.update(iid.encode())
        h.update(b"\x1f")
    for arr in (es.theta, es.kappa, es.features, es.violated, es.cost, es.reliability,
                es.resolves):
        h.update(np.ascontiguousarray(arr).tobytes())
    return h.hexdigest()


def _study(
    *,
    storage: Any,
    study_name: str,
    mode: Mode,
    config: Mapping[str, Any],
) -> optuna.Study:
    import optuna

    directions: list[Literal["minimize", "maximize"]] = (
        ["minimize"] if mode == "constrained" else ["minimize", "minimize", "maximize"]
    )
    study = optuna.create_study(
        study_name=study_name,
        storage=storage,
        directions=directions,
        load_if_exists=True,
        sampler=optuna.samplers.TPESampler(seed=0),
    )
    if [d.name.lower() for d in study.directions] != list(directions):
        raise ConfigError(
            f"study {study_name!r} exists with directions "
            f"{[d.name.lower() for d in study.directions]}, not {directions} (mode={mode!r}); "
            f"choose another --study-name"
        )
    stored = study.user_attrs.get(_STUDY_CONFIG_ATTR)
    if stored is None:
        study.set_user_attr(_STUDY_CONFIG_ATTR, dict(config))
    elif stored != dict(config):
        diff = sorted(k for k in set(stored) | set(config) if stored.get(k) != config.get(k))
        raise ConfigError(
            f"study {study_name!r} was created with a different set-up (differs in {diff}); "
            f"resume it with the same episodes, calibrator and options, or choose another "
            f"--study-name"
        )
    return study


def _run_trials(
    *,
    study: optuna.Study,
    trials: int,
    seed: int,
    mode: Mode,
    objective: Callable[[Mapping[str, Any]], dict[str, float]],
    target_harmful: float,
    space: Mapping[str, tuple[float, float, bool]],
    callbacks: Sequence[Callable[[Any, Any], None]],
    progress: bool,
    parallel: bool,
) -> int:
    """Ask/tell loop until the study holds ``trials`` completed trials; returns trials run."""
    import optuna
    from optuna.trial import TrialState

    ran = 0
    while True:
        all_trials = study.get_trials(deepcopy=False)
        done = sum(t.state == TrialState.COMPLETE for t in all_trials)
        running = sum(t.state == TrialState.RUNNING for t in all_trials) if parallel else 0
        if done + running >= trials:
            return ran
        # A fresh sampler per trial, seeded by how many trials are complete (sequential) so
        # that a resumed run draws what an uninterrupted one would have drawn, failed and
        # abandoned trials notwithstanding; parallel workers seed by trial count instead, so
        # that two of them never draw with the same seed.
        ordinal = len(all_trials) if parallel else done
        study.sampler = optuna.samplers.TPESampler(seed=_trial_seed(seed, ordinal))
        trial = study.ask()
        trial.set_user_attr(_OWNER_ATTR, _owner())
        try:
            params = _suggest(trial, space)
            m = objective(params)
            for k, v in m.items():
                trial.set_user_attr(k, v)
            if mode == "constrained":
                trial.set_constraint("gate_harmful", m["gate_harmful"] - target_harmful)
                frozen = study.tell(trial, m["total_loss"])
            else:
                frozen = study.tell(trial, [m[k] for k in _MULTI_NAMES])
        except BaseException:
            study.tell(trial, state=TrialState.FAIL)
            raise
        ran += 1
        if progress:
            _progress(study, frozen, done + 1, trials, mode, target_harmful)
        for cb in callbacks:
            cb(study, frozen)


def _owner() -> dict[str, Any]:
    return {"host": socket.gethostname(), "pid": os.getpid()}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's live process
        return True
    return True


def fail_abandoned_trials(study: Any) -> list[int]:
    """Mark FAIL the RUNNING trials whose process on this host has died; their numbers.

    A process killed in the middle of a trial leaves it RUNNING in the storage forever. Each
    trial records the host and pid that run it (user attribute ``amv_calib_worker``); a
    RUNNING trial of this host whose pid is gone is abandoned. Trials of other hosts are
    left alone (their processes cannot be checked from here), so several machines can share
    one study safely. A pid reused by an unrelated process keeps its trial RUNNING: harmless,
    the trial just never completes.
    """
    from optuna.trial import TrialState

    host = socket.gethostname()
    failed: list[int] = []
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        owner = t.user_attrs.get(_OWNER_ATTR)
        if not isinstance(owner, dict) or owner.get("host") != host:
            continue
        pid = owner.get("pid")
        if isinstance(pid, int) and pid != os.getpid() and not _alive(pid):
            study.tell(t.number, state=TrialState.FAIL)
            failed.append(t.number)
    if failed:
        _log.warning("marked abandoned trials %s FAIL (their process died)", failed)
    return failed


def _progress(study: Any, frozen: Any, done: int, trials: int, mode: Mode,
              target: float) -> None:
    """One line per completed trial: its figures, whether it meets the harm target
    (constrained mode: only a feasible trial can be chosen), and the best feasible one so
    far."""
    ua = frozen.user_attrs
    harm = ua["gate_harmful"]
    mark = "feasible  " if harm <= target else "INFEASIBLE"
    line = (f"trial {frozen.number:>3} ({done}/{trials}) {mark} Gate Harmful {harm:.4f} "
            f"(target {target:g})  loss {ua['total_loss']:.4f}  cost "
            f"{ua['verification_cost']:.3f}  coverage {ua['proceed_coverage']:.3f}")
    if mode == "constrained":
        try:
            best = study.best_trial
            line += f"  | best feasible: trial {best.number}, loss {best.value:.4f}"
        except ValueError:
            line += "  | no feasible trial yet"
    else:
        line += f"  | Pareto front: {len(study.best_trials)} trials"
    print(line, file=sys.stderr, flush=True)


def _worker(kwargs: dict[str, Any]) -> int:
    """Entry point of a parallel worker process (own storage connection and seed)."""
    from amv_calib.tuning._episodes import EpisodeSet as _ES

    es: _ES = kwargs.pop("episodes")
    p = es.probabilities(kwargs["calibrator"])
    storage = make_storage(kwargs["storage_url"], n_workers=2)
    import optuna

    study = optuna.load_study(study_name=kwargs["study_name"], storage=storage)
    cal = kwargs["calibrator"]

    def objective(params: Mapping[str, Any]) -> dict[str, float]:
        return _evaluate(es, p, _gate_for(params, kwargs["planner"], cal), seed=kwargs["seed"],
                         lambda_eval=kwargs["lambda_eval"])

    return _run_trials(
        study=study, trials=kwargs["trials"], seed=kwargs["worker_seed"], mode=kwargs["mode"],
        objective=objective, target_harmful=kwargs["target_harmful"], space=kwargs["space"],
        callbacks=(), progress=kwargs["progress"], parallel=True,
    )


def tune_thresholds(
    episodes: Any,
    *,
    calibrator: Any,
    trials: int = _TUNE.trials,
    storage: str | os.PathLike[str] | None = None,
    study_name: str = "amv-calib-tune",
    seed: int = 0,
    target_harmful: float = _TUNE.target_harmful,
    mode: Mode = _TUNE.mode,
    tune_fraction: float = _TUNE.tune_fraction,
    planner: Planner = _TUNE.planner,
    lambda_eval: float = LAMBDA_EVAL,
    space: Mapping[str, tuple[float, float, bool]] | None = None,
    out_dir: str | os.PathLike[str] | None = None,
    n_workers: int = _TUNE.workers,
    n_boot: int = _TUNE.n_boot,
    callbacks: Sequence[Callable[[Any, Any], None]] = (),
    progress: bool = False,
    tune_mask: BoolArray | None = None,
    holdout_mask: BoolArray | None = None,
    split: Mapping[str, Any] | None = None,
) -> TuneResult:
    """Tune the gate thresholds with Optuna on replayed episodes.

    The defaults are :class:`~amv_calib.tuning.TuneOptions`' (``n_workers`` is its
    ``workers``; ``space`` pins its ``harm_price``).

    Parameters
    ----------
    episodes : EpisodeSet, path or iterable of episode objects
    calibrator : PortableCalibrator, reference or fitted calibrator
        See :func:`resolve_calibrator`; fixed during tuning.
    trials : int
        Target number of *completed* trials in the study; a resumed study runs only the
        missing ones (0 new trials when it already holds ``trials``).
    storage : str or path, optional
        Journal file path (default :func:`amv_calib.settings.optuna_storage`) or RDB URL.
    study_name : str
        Name of the study inside the storage.
    seed : int
        Seeds the sampler (per trial, see the module docstring) and the answer stream.
    target_harmful : float
        Gate Harmful bound: the constraint (constrained) or the selection rule (multi).
    mode : {"constrained", "multi"}
    tune_fraction : float
        Share of instances in the tuning split (:func:`split_episodes`).
    planner : {"lookahead", "myopic"}
        Planner of the tuned gate (not searched).
    lambda_eval : float
        Price of verifier cost in the total loss (1.0 to compare with other policies).
    space : mapping, optional
        Overrides :data:`SEARCH_SPACE` (a space without ``harm_price`` tunes the unpriced
        gate; ``(mu, mu, False)`` pins it at ``mu``).
    out_dir : path, optional
        Writes ``thresholds.json``, ``trials.csv``, ``tune_report.json``, the tuning record
        (``tuning.json`` and ``tuning-episodes.u64``: which episodes the thresholds were
        tuned on, for certification to exclude) and, in multi mode, ``pareto.csv`` and
        ``pareto.png``.
    n_workers : int
        Worker processes sharing the storage (not reproducible when > 1; no in-memory or
        SQLite storage then).
    n_boot : int
        Bootstrap resamples of the held-out report.
    callbacks : sequence of callables
        ``cb(study, frozen_trial)`` after each completed trial (sequential runs); an
        exception raised there interrupts the run, which a later call resumes.
    progress : bool
        One line per trial on stderr (trials done and the best so far).
    tune_mask, holdout_mask : ndarray of bool, optional
        Explicit split (used by :func:`transfer_check`); default :func:`split_episodes`.
    split : mapping, optional
        How an explicit ``tune_mask`` was chosen, for the tuning record.

    Returns
    -------
    TuneResult
        The chosen thresholds: constrained, the best feasible trial; multi, the Pareto
        trial with the lowest total loss among those with Gate Harmful <= ``target_harmful``
        (else the lowest Gate Harmful).

    Raises
    ------
    ConfigError
        Bad options, or a stored study with other directions or another set-up.
    """
    check_choice("mode", mode, ("constrained", "multi"), ConfigError)
    check_choice("planner", planner, PLANNERS, ConfigError)
    if isinstance(trials, bool) or not isinstance(trials, int) or trials < 1:
        raise ConfigError(f"trials={trials!r} must be an integer >= 1")
    if not (isinstance(n_workers, int) and n_workers >= 1):
        raise ConfigError(f"n_workers={n_workers!r} must be an integer >= 1")
    if not (math.isfinite(target_harmful) and 0.0 <= target_harmful <= 1.0):
        raise ConfigError(f"target_harmful={target_harmful!r} must lie in [0, 1]")
    es = _as_episode_set(episodes)
    cal, cal_desc = resolve_calibrator(calibrator)
    if tune_mask is None or holdout_mask is None:
        tune_mask, holdout_mask = split_episodes(es, tune_fraction)
        split = hash_split(tune_fraction)
    if not np.any(tune_mask):
        raise ConfigError("the tuning split is empty (raise tune_fraction or add episodes)")
    es_tune = es.subset(tune_mask)
    es_hold = es.subset(holdout_mask) if np.any(holdout_mask) else None
    sp = dict(SEARCH_SPACE if space is None else space)
    config = {
        "mode": mode,
        "planner": planner,
        "target_harmful": float(target_harmful),
        "seed": int(seed),
        "lambda_eval": float(lambda_eval),
        "episodes_sha256": _fingerprint(es_tune),
        "calibrator_sha256": hashlib.sha256(
            json.dumps(cal.to_dict(), sort_keys=True).encode()
        ).hexdigest(),
        "space": {k: list(v) for k, v in sp.items()},
    }
    store = make_storage(storage, n_workers=n_workers)
    study = _study(storage=store, study_name=study_name, mode=mode, config=config)
    fail_abandoned_trials(study)
    p_tune = es_tune.probabilities(cal)

    def objective(params: Mapping[str, Any]) -> dict[str, float]:
        return _evaluate(es_tune, p_tune, _gate_for(params, planner, cal), seed=seed,
                         lambda_eval=lambda_eval)

    if n_workers == 1:
        n_new = _run_trials(
            study=study, trials=trials, seed=seed, mode=mode, objective=objective,
            target_harmful=target_harmful, space=sp, callbacks=callbacks, progress=progress,
            parallel=False,
        )
    else:
        import multiprocessing as mp

        ctx = mp.get_context("spawn")
        jobs = [
            {
                "episodes": es_tune, "calibrator": cal, "storage_url": storage,
                "study_name": study_name, "planner": planner, "seed": seed,
                "worker_seed": _trial_seed(seed, 10_000 + w), "lambda_eval": lambda_eval,
                "trials": trials, "mode": mode, "target_harmful": target_harmful,
                "space": sp, "progress": progress,
            }
            for w in range(n_workers)
        ]
        with ctx.Pool(n_workers) as pool:
            n_new = sum(pool.map(_worker, jobs))
    return _finish(
        study=study, es=es, es_tune=es_tune, es_hold=es_hold, cal=cal, cal_desc=cal_desc,
        mode=mode, planner=planner, target_harmful=target_harmful, seed=seed,
        lambda_eval=lambda_eval, n_new=n_new, n_boot=n_boot, out_dir=out_dir,
        study_name=study_name, storage_label=_storage_label(storage),
        split=dict(split) if split is not None else {"rule": "given"},
    )


def _choose(study: Any, mode: Mode, target: float) -> tuple[Any | None, list[Any]]:
    done = _completed(study)
    if not done:
        return None, []
    if mode == "constrained":
        feasible = [t for t in done if all(v <= 0.0 for v in t.constraints.values())]
        if not feasible:
            return None, []
        return min(feasible, key=lambda t: (t.value, t.number)), []
    front = sorted(study.best_trials, key=lambda t: t.number)
    ok = [t for t in front if t.user_attrs["gate_harmful"] <= target]
    if ok:
        return min(ok, key=lambda t: (t.user_attrs["total_loss"], t.number)), front
    return min(front, key=lambda t: (t.user_attrs["gate_harmful"], t.number)), front


def _finish(
    *,
    study: Any,
    es: EpisodeSet,
    es_tune: EpisodeSet,
    es_hold: EpisodeSet | None,
    cal: PortableCalibrator,
    cal_desc: str,
    mode: Mode,
    planner: str,
    target_harmful: float,
    seed: int,
    lambda_eval: float,
    n_new: int,
    n_boot: int,
    out_dir: str | os.PathLike[str] | None,
    study_name: str,
    storage_label: str,
    split: dict[str, Any],
) -> TuneResult:
    best, front = _choose(study, mode, target_harmful)
    thresholds = None if best is None else _thresholds(best.params, planner, cal)
    tune_metrics = {} if best is None else {k: float(best.user_attrs[k]) for k in METRICS}
    holdout: dict[str, Any] = {}
    hold_results: dict[str, ReplayResult] = {}
    if best is not None and es_hold is not None:
        gate = _gate_for(best.params, planner, cal)
        hold_results = replay_many(
            es_hold, ["always-proceed", "always-verify", "seed", planner],  # type: ignore[list-item]
            seed=seed, gate=gate, calibrator=cal, lambda_eval=lambda_eval, n_boot=n_boot,
        )
        holdout = {
            "tuned": hold_results[planner].to_dict()["overall"],
            "baselines": {
                k: v.to_dict()["overall"] for k, v in hold_results.items() if k != planner
            },
        }
    pareto = [
        {"number": t.number, **_gate_params(t.params), **{k: t.user_attrs[k] for k in METRICS}}
        for t in front
    ]
    report = {
        "study_name": study_name, "storage": storage_label, "mode": mode,
        "planner": planner, "target_harmful": target_harmful, "calibrator": cal_desc,
        "seed": seed, "lambda_eval": lambda_eval, "thresholds": thresholds,
        "best_trial": None if best is None else best.number,
        "tune_metrics": tune_metrics, "holdout": holdout,
        "n_tune": len(es_tune), "n_holdout": 0 if es_hold is None else len(es_hold),
    }
    header, rows = _trial_rows(study)
    files: dict[str, str] = {}
    if out_dir is not None:
        files = _write_outputs(
            Path(out_dir), study=study, thresholds=thresholds, mode=mode, pareto=pareto,
            es_tune=es_tune, cal=cal, seed=seed, lambda_eval=lambda_eval, split=split,
            report=report, trials=(header, rows), space_names=list(SEARCH_SPACE))
    import pandas as pd

    return TuneResult(
        study_name=study_name, storage=storage_label, mode=mode, planner=planner,
        target_harmful=target_harmful, thresholds=thresholds,
        best_trial=None if best is None else best.number, tune_metrics=tune_metrics,
        holdout_metrics=holdout, n_trials=len(_completed(study)), n_new=n_new,
        n_tune=len(es_tune), n_holdout=0 if es_hold is None else len(es_hold),
        pareto=pareto, files=files, report=report,
        trials=pd.DataFrame(rows, columns=header),
    )


def _trial_rows(study: Any) -> tuple[list[str], list[list[Any]]]:
    """The trials table: its header and one row per trial (None where a trial has no
    value: the gate's parameters of a failed trial, the metrics of a pruned one)."""
    names = list(SEARCH_SPACE)
    rows = []
    for t in study.get_trials(deepcopy=False):
        ua = t.user_attrs
        feasible = all(v <= 0.0 for v in t.constraints.values()) if ua else None
        params = _gate_params(t.params) if t.params else {}
        rows.append([t.number, t.state.name, *[params.get(k) for k in names],
                     *[ua.get(k) for k in METRICS], feasible])
    return ["number", "state", *names, *METRICS, "feasible"], rows


# -- transfer -------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class TransferResult:
    """Outcome of :func:`transfer_check`.

    ``unseen`` maps each policy (``"tuned"`` plus the baselines) to its replay on the
    families never seen in tuning; ``seen`` is the tuned gate on the tuning families.
    """

    tune_families: list[str]
    test_families: list[str]
    tune: TuneResult
    seen: ReplayResult | None
    unseen: dict[str, ReplayResult]

    def to_dict(self) -> dict[str, Any]:
        return {
            "tune_families": self.tune_families,
            "test_families": self.test_families,
            "tune": self.tune.to_dict(),
            "seen": None if self.seen is None else self.seen.to_dict(),
            "unseen": {k: v.to_dict() for k, v in self.unseen.items()},
        }


def transfer_check(
    episodes: Any,
    *,
    tune_families: Sequence[str],
    calibrator: Any,
    trials: int = 60,
    seed: int = 0,
    target_harmful: float = 0.02,
    planner: Planner = "lookahead",
    storage: str | os.PathLike[str] | None = None,
    study_name: str | None = None,
    lambda_eval: float = LAMBDA_EVAL,
    n_boot: int = 500,
    out_dir: str | os.PathLike[str] | None = None,
    progress: bool = False,
) -> TransferResult:
    """Tune on ``tune_families`` (all their instances), report on every other family.

    The zero-shot transfer check of the paper (ToolSandbox -> AppWorld): the thresholds are
    chosen without ever seeing the test families, then the tuned gate and the baselines
    (always-proceed, always-verify, seed engine, the untuned gate with default thresholds,
    oracle) are replayed on them with the same answer stream.

    Raises
    ------
    ConfigError
        An unknown family, or no family left to test on.
    """
    es = _as_episode_set(episodes)
    fams = set(es.families)
    chosen = sorted(set(tune_families))
    unknown = [f for f in chosen if f not in fams]
    if unknown:
        raise ConfigError(f"tune_families names unknown families {unknown}; known: {sorted(fams)}")
    test = sorted(fams - set(chosen))
    if not chosen or not test:
        raise ConfigError(
            f"tune_families={chosen} must be a non-empty proper subset of {sorted(fams)}"
        )
    fam = np.asarray(es.family, dtype=object)
    tune_mask = np.isin(fam, chosen)
    name = study_name or "amv-calib-transfer-" + hashlib.sha256(
        ",".join(chosen).encode()
    ).hexdigest()[:10]
    res = tune_thresholds(
        es, calibrator=calibrator, trials=trials, storage=storage, study_name=name, seed=seed,
        target_harmful=target_harmful, mode="constrained", planner=planner,
        lambda_eval=lambda_eval, n_boot=n_boot, progress=progress,
        tune_mask=tune_mask, holdout_mask=np.zeros(len(es), dtype=bool),
        split={"rule": "families", "tune_families": chosen}, out_dir=out_dir,
    )
    cal, _ = resolve_calibrator(calibrator)
    es_test = es.subset(~tune_mask)
    unseen: dict[str, ReplayResult] = {}
    seen = None
    if res.thresholds is not None:
        gate = _gate_for(res.thresholds, planner, cal)
        unseen["tuned"] = replay_many(es_test, [planner], seed=seed, gate=gate, calibrator=cal,
                                      lambda_eval=lambda_eval, n_boot=n_boot)[planner]
        seen = replay_many(es.subset(tune_mask), [planner], seed=seed, gate=gate,
                           calibrator=cal, lambda_eval=lambda_eval, n_boot=n_boot)[planner]
    from amv_calib.gate import Gate

    untuned = replay_many(es_test, [planner], seed=seed,
                          gate=Gate(planner=planner, calibrator=cal),
                          calibrator=cal, lambda_eval=lambda_eval, n_boot=n_boot)[planner]
    unseen["untuned"] = untuned
    unseen.update(
        replay_many(es_test, ["always-proceed", "always-verify", "seed", "oracle"], seed=seed,
                    calibrator=cal, lambda_eval=lambda_eval, n_boot=n_boot)
    )
    out = TransferResult(tune_families=chosen, test_families=test, tune=res, seen=seen,
                         unseen=unseen)
    if out_dir is not None:
        _write_json(Path(out_dir) / "transfer.json", out.to_dict())
    return out

