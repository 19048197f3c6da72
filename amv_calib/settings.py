"""One place for default paths and settings.

Nothing here touches the disk or the environment at import time: each default is a function
of the environment at the moment it is asked for, so tests and the CLI can override it.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, ClassVar, Final, Literal, TypeVar

from amv_calib.exceptions import ConfigError

__all__ = [
    "ADAPTERS",
    "CALIBRATOR_NAMES",
    "DEFAULT_CALIBRATORS",
    "DEFAULT_ALIAS",
    "DEFAULT_MODEL_NAME",
    "DEFAULT_REGISTERED_MODEL",
    "DEFAULT_SEED",
    "FIELD_RULES",
    "KIND_CALIBRATORS",
    "PLANNERS",
    "TRUSTED_KEYS_ENV",
    "CertifyOptions",
    "CompareOptions",
    "IngestOptions",
    "LabelOptions",
    "MonitorConfig",
    "MonitorOptions",
    "Option",
    "Options",
    "PromoteOptions",
    "ReplayOptions",
    "TransferOptions",
    "TuneOptions",
    "borrow",
    "option",
    "champion_reference",
    "models_dir",
    "optuna_storage",
    "project_root",
    "workspace",
    "resolve_adapter",
    "set_process_env",
    "tracking_uri",
    "trusted_keys",
    "ui_command",
]

#: Seed used wherever the user gives none; every random stream derives from a seed.
DEFAULT_SEED: Final = 20261202
#: Name of the artifact folder under ``models/`` that ships with the repository.
DEFAULT_MODEL_NAME: Final = "amv-guard"
#: Alias the gate loads by default.
DEFAULT_ALIAS: Final = "production"
#: MLflow registered-model name.
DEFAULT_REGISTERED_MODEL: Final = "amv-guard-calibrator"
#: Names ``compare`` knows (``--calibrators``), each a configured estimator:
#: ``platt`` = Platt on the rich feature map, ``platt_seed`` = Platt on the seed's map;
#: ``beta`` = Beta with the rich extras, ``beta_seed`` with the seed's; ``isotonic`` =
#: strict (centred) isotonic on a cross-fitted rich Platt index, ``isotonic_step`` its
#: step-function form; ``seed_prior`` = the seed formula. The rich maps and the strict
#: isotonic variant are the defaults because they win on out-of-fold log loss on the
#: synthetic data (see ``docs/calibration.md``).
#: With ``memory_kind`` in the claims: ``platt_kind``, ``beta_kind``, ``isotonic_kind`` =
#: the rich Platt, Beta and strict isotonic with a kind-specific intercept and recency curve
#: shrunk towards the pooled fit; and the field's hand-set staleness rules as baselines
#: (:data:`FIELD_RULES`).
KIND_CALIBRATORS: Final = ("platt_kind", "beta_kind", "isotonic_kind")
#: The hand-set staleness rules of agent-memory projects, compared as baselines.
FIELD_RULES: Final = ("halflife-45d", "halflife-90d-weighted", "windows-per-kind", "power-law")
CALIBRATOR_NAMES: Final = (
    "platt", "platt_seed", "beta", "beta_seed", "isotonic", "isotonic_step", "seed_prior",
    *KIND_CALIBRATORS, *FIELD_RULES,
)
#: The calibrators compared when none are given.
DEFAULT_CALIBRATORS: Final = ("platt", "beta", "isotonic", "seed_prior")
#: The gate's verification planners (``tune --planner``, ``gate --planner``).
PLANNERS: Final = ("lookahead", "myopic")
#: Input adapters for ``amv-calib ingest --adapter NAME``: name -> ``"module:function"``.
#: The function takes the input path and returns the claim-outcome table (a pandas
#: DataFrame or pyarrow Table, canonical or alias column names), or an iterable of such
#: tables; it is then validated like any other input (row numbers count its output rows).
#: Strings, not functions, so that the command line lists them without importing pandas.
ADAPTERS: dict[str, str] = {
    "mem0": "amv_calib.claims:mem0_adapter",
    "graphiti": "amv_calib.claims:graphiti_adapter",
}


def project_root() -> Path:
    """The checkout this package's source lives in (the folder holding ``pyproject.toml``),
    else cwd: where provenance (the git commit) is read. Default locations are the
    :func:`workspace`'s, never this."""
    here = Path(__file__).resolve().parent.parent
    if (here / "pyproject.toml").is_file():
        return here
    return Path.cwd()


def workspace() -> Path:
    """The folder every default location is in, whatever the install mode: the nearest
    folder, from the current one upwards, that holds a ``models/`` folder (as git finds
    ``.git``), else the current folder. Relative to the current folder when it is one."""
    cwd = Path.cwd()
    for folder in (cwd, *cwd.parents):
        if (folder / "models").is_dir():
            return Path(".") if folder == cwd else folder
    return Path(".")


def models_dir() -> Path:
    """Where artifacts live: ``$AMV_CALIB_MODELS_DIR``, else ``models/`` in the
    :func:`workspace`."""
    env = os.environ.get("AMV_CALIB_MODELS_DIR")
    return Path(env) if env else workspace() / "models"


def champion_reference() -> str:
    """The artifact reference the gate loads when given none: ``models/amv-guard@production``."""
    return f"{models_dir() / DEFAULT_MODEL_NAME}@{DEFAULT_ALIAS}"


def tracking_uri() -> str:
    """MLflow tracking URI: ``$MLFLOW_TRACKING_URI``, else ``sqlite:///mlflow.db`` in the
    :func:`workspace`."""
    return os.environ.get("MLFLOW_TRACKING_URI") or \
        f"sqlite:///{(workspace() / 'mlflow.db').as_posix()}"


def optuna_storage() -> str:
    """Optuna storage: ``$AMV_CALIB_OPTUNA_STORAGE``, else a journal file under ``.optuna/``."""
    return os.environ.get("AMV_CALIB_OPTUNA_STORAGE") or \
        str(workspace() / ".optuna" / "journal.log")


def ui_command(uri: str | None = None, *, port: int = 5000) -> str:
    """The shell command that opens MLflow's UI on the tracking store ``uri`` (default:
    :func:`tracking_uri`); imports nothing."""
    uri = uri or tracking_uri()
    if uri.startswith(("http://", "https://")):
        return f"open {uri} in a browser (the tracking server serves the UI)"
    path = uri.removeprefix("sqlite:///")
    if uri.startswith("sqlite:///") and not path.startswith("/") and path != ":memory:":
        # A relative SQLite path names a file in the cwd; printed absolute, the command
        # opens the same store from any folder.
        uri = f"sqlite:///{(Path.cwd() / path).resolve().as_posix()}"
    return f"{_mlflow_program()} ui --backend-store-uri {uri} --host 127.0.0.1 --port {port}"


def _mlflow_program() -> str:
    """How to call the ``mlflow`` installed beside this interpreter: ``mlflow`` when that
    is the one on PATH, else its path (``.venv/bin/mlflow`` when the venv is not active),
    relative to the current folder when it lies inside it."""
    import shutil
    import sys

    beside = Path(sys.executable).parent / "mlflow"
    if not beside.is_file():
        return "mlflow"
    found = shutil.which("mlflow")
    if found is not None and Path(found).resolve() == beside.resolve():
        return "mlflow"
    try:
        return str(beside.absolute().relative_to(Path.cwd()))
    except ValueError:
        return str(beside.absolute())


#: Environment variable naming the public keys (PEM files, separated by ``os.pathsep``) a
#: deployed gate trusts; when set, every artifact must be signed by one of them.
TRUSTED_KEYS_ENV: Final = "AMV_CALIB_TRUSTED_KEYS"


def trusted_keys() -> list[Path]:
    """The public keys named by ``$AMV_CALIB_TRUSTED_KEYS`` (none when it is unset).

    Raises
    ------
    ConfigError
        The variable is set but names no key (empty, blank, or separators only): whoever
        set it meant signatures to be checked, so nothing may load unchecked.
    """
    raw = os.environ.get(TRUSTED_KEYS_ENV)
    if raw is None:
        return []
    keys = [Path(p.strip()) for p in raw.split(os.pathsep) if p.strip()]
    if not keys:
        raise ConfigError(f"${TRUSTED_KEYS_ENV}={raw!r} is set but names no key file; set it "
                          f"to the public key(s) the artifacts must be signed with "
                          f"(separated by {os.pathsep!r}), or unset it")
    return keys


#: What the command line sets in its own environment, unless the environment already does,
#: before Arrow is loaded: Arrow's allocator (mimalloc) returns freed pages to the system at
#: once instead of after a delay, so memory freed by one stage of a job (the log's parse)
#: is not still held when the next one (the join) allocates: ``label``'s peak at 1 M lines
#: 1,126 -> 1,036 MiB, its time unchanged (docs/scale.md).
PROCESS_ENV: Final[Mapping[str, str]] = {"MIMALLOC_PURGE_DELAY": "0"}


def set_process_env() -> None:
    """Give this process the settings of :data:`PROCESS_ENV` it does not set itself.

    Only before pyarrow is imported (the allocator reads them when it starts); after, this
    does nothing. The command line calls it first; a program that embeds amv-calib may too.
    """
    import sys

    if "pyarrow" in sys.modules:
        return
    for name, value in PROCESS_ENV.items():
        os.environ.setdefault(name, value)


def resolve_adapter(name: str) -> Any:
    """The adapter function registered as ``name`` in :data:`ADAPTERS`.

    Raises
    ------
    ConfigError
        If no adapter has that name, or its ``"module:function"`` cannot be imported.
    """
    import importlib

    target = ADAPTERS.get(name)
    if target is None:
        known = ", ".join(sorted(ADAPTERS)) or "none"
        raise ConfigError(f"adapter={name!r} is not registered (available: {known})")
    module, _, func = target.partition(":")
    try:
        return getattr(importlib.import_module(module), func)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"adapter {name!r} -> {target!r} cannot be loaded: {exc}") from exc


# -- options: one source for each option's default, type, check and help --------------------
OptionsT = TypeVar("OptionsT", bound="Options")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Option:
    """What one option of a stage is: the single source from which the library's keyword
    default, the command line's flag and the pipeline step's key are made.

    Attributes
    ----------
    help : str
        What it means, with its unit; the command line appends the default.
    type : type
        ``int``, ``float``, ``str``, ``bool`` or ``list`` (of strings).
    choices : tuple, optional
        The values allowed.
    low, high : float, optional
        Inclusive bounds (``low_open`` / ``high_open`` make them exclusive).
    nullable : bool
        None is allowed (it means the documented fallback).
    metavar : str, optional
        The command line's placeholder.
    flags : tuple of str
        Further spellings of the command line's flag (``--weight-column``).
    cli, step : bool
        Whether the command line and the pipeline step offer it; ``why`` says why one
        does not.
    """

    help: str
    type: type
    choices: tuple[Any, ...] | None = None
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    nullable: bool = False
    metavar: str | None = None
    flags: tuple[str, ...] = ()
    cli: bool = True
    step: bool = True
    why: str = ""

    def check(self, name: str, value: Any) -> Any:
        """``value`` checked (an integral float taken as an int for an int option);
        :class:`~amv_calib.ConfigError` naming the option and the value otherwise."""
        if value is None:
            if self.nullable:
                return None
            raise ConfigError(f"{name}=None is not allowed; give a {self.type.__name__}")
        if self.type is bool:
            if not isinstance(value, bool):
                raise ConfigError(f"{name}={value!r} must be true or false")
            return value
        if self.type is list:
            if isinstance(value, str) or not isinstance(value, (list, tuple)) or not all(
                    isinstance(v, str) for v in value):
                raise ConfigError(f"{name}={value!r} must be a list of strings")
            bad = [v for v in value if self.choices is not None and v not in self.choices]
            if bad:
                raise ConfigError(f"{name}: {bad} not among {list(self.choices or ())}")
            return list(value)
        if self.type in (int, float):
            if isinstance(value, float) and self.type is int and value.is_integer():
                value = int(value)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or (
                    self.type is int and not isinstance(value, int)):
                kind = "an integer" if self.type is int else "a number"
                raise ConfigError(f"{name}={value!r} must be {kind}")
            if not math.isfinite(value):
                raise ConfigError(f"{name}={value!r} must be finite")
            lo_bad = self.low is not None and (value <= self.low if self.low_open
                                               else value < self.low)
            hi_bad = self.high is not None and (value >= self.high if self.high_open
                                                else value > self.high)
            if lo_bad or hi_bad:
                raise ConfigError(f"{name}={value!r} must lie in {self.range()}")
            return self.type(value)
        if not isinstance(value, self.type):
            raise ConfigError(f"{name}={value!r} must be a {self.type.__name__}")
        if self.choices is not None and value not in self.choices:
            allowed = ", ".join(map(repr, self.choices))
            raise ConfigError(f"{name}={value!r} must be one of {allowed}")
        return value

    def range(self) -> str:
        """The allowed interval in words, ``[0, 1)``."""
        lo = "-inf" if self.low is None else f"{self.low:g}"
        hi = "inf" if self.high is None else f"{self.high:g}"
        return (f"{'(' if self.low_open or self.low is None else '['}{lo}, "
                f"{hi}{')' if self.high_open or self.high is None else ']'}")


def option(default: Any, help: str, type: type, **spec: Any) -> Any:
    """A dataclass field of an :class:`Options` class carrying its :class:`Option`."""
    meta = {"option": Option(help=help, type=type, **spec)}
    if isinstance(default, list):
        items = tuple(default)
        return dataclasses.field(default_factory=lambda: list(items), metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def borrow(cls: type[Options], name: str, **changes: Any) -> Any:
    """The field ``name`` of ``cls`` as a field of another options class: the same default
    and check (``changes``, e.g. its own ``help``, replace parts of its :class:`Option`), so
    that two stages taking one knob do not each define it."""
    f = next(f for f in dataclasses.fields(cls) if f.name == name)  # type: ignore[arg-type]
    meta = {"option": dataclasses.replace(f.metadata["option"], **changes)}
    if f.default_factory is not dataclasses.MISSING:
        return dataclasses.field(default_factory=f.default_factory, metadata=meta)
    return dataclasses.field(default=f.default, metadata=meta)


class Options:
    """Base of a stage's options (a frozen, keyword-only dataclass of :func:`option`
    fields): every value is checked when the object is made.

    ``STAGE`` names the stage in messages (``"compare"``). :meth:`from_mapping` builds one
    from a pipeline step's or a TOML table's keys and refuses unknown ones; :meth:`arguments`
    passes them to the stage's library function. ``PARAMETERS`` names the options that
    function spells otherwise (``{"weights": "sample_weight"}``).
    """

    STAGE: ClassVar[str] = "options"
    PARAMETERS: ClassVar[Mapping[str, str]] = {}

    def __post_init__(self) -> None:
        for name, opt in self.spec().items():
            value = opt.check(f"{self.STAGE}.{name}", getattr(self, name))
            object.__setattr__(self, name, value)

    @classmethod
    def spec(cls) -> dict[str, Option]:
        """``{name: Option}`` in declaration order."""
        fields = dataclasses.fields(cls)  # type: ignore[arg-type]
        return {f.name: f.metadata["option"] for f in fields if "option" in f.metadata}

    @classmethod
    def defaults(cls: type[OptionsT]) -> OptionsT:
        """The options with every default."""
        return cls()

    @classmethod
    def from_mapping(cls: type[OptionsT], data: Mapping[str, Any], *, where: str | None = None
                     ) -> OptionsT:
        """Options from ``data``; a key that is not an option is refused, naming it."""
        spec = cls.spec()
        unknown = sorted(set(data) - set(spec))
        if unknown:
            raise ConfigError(f"{where or cls.STAGE}: unknown keys {unknown}; known: "
                              f"{sorted(spec)}")
        return cls(**dict(data))

    def to_dict(self) -> dict[str, Any]:
        """Plain values, for reports and JSON."""
        return {k: getattr(self, k) for k in self.spec()}

    def arguments(self, function: Callable[..., Any]) -> dict[str, Any]:
        """The options ``function`` has a parameter for, as its keyword arguments (named as
        ``PARAMETERS`` says), so that the command line and the pipeline step pass them alike;
        the others are the caller's to act on.

        Raises
        ------
        TypeError
            ``function`` takes ``**kwargs``: its signature cannot say which options it takes
            (an option it takes that way would be left out without a word).
        """
        params = inspect.signature(function).parameters
        if any(p.kind is p.VAR_KEYWORD for p in params.values()):
            raise TypeError(f"{function.__qualname__} takes **kwargs: which options it takes "
                            f"is not in its signature")
        named = ((name, self.PARAMETERS.get(name, name)) for name in self.spec())
        return {param: getattr(self, name) for name, param in named if param in params}


# -- the options of each stage (re-exported by the stage's package) ------------------------
#: Help texts of options two stages share.
_OVERWRITE: Final = ("replace files that another command (label or ingest) wrote into the "
                     "output folder, removing that command's other files there")
_SKIP_CORRUPT: Final = "skip (and count) corrupt decision-log lines instead of failing"


@dataclasses.dataclass(frozen=True, kw_only=True)
class IngestOptions(Options):
    """How claim outcomes are read (``amv-calib ingest``, the ``ingest`` step,
    :func:`~amv_calib.claims.ingest_file`)."""

    STAGE = "ingest"

    chunksize: int | None = option(
        None, "rows validated at a time (default: the reader's, 250000)", int, low=1,
        nullable=True, metavar="ROWS")
    overwrite: bool = option(False, _OVERWRITE, bool)


@dataclasses.dataclass(frozen=True, kw_only=True)
class CompareOptions(Options):
    """How calibrators are compared (``amv-calib compare``, the ``compare`` step,
    :func:`~amv_calib.calibration.compare_calibrators`)."""

    STAGE = "compare"
    PARAMETERS = {"weights": "sample_weight"}

    folds: int = option(5, "leakage-safe folds", int, low=2)
    split: Literal["time", "group"] = option(
        "time", "time-ordered blocked folds, or GroupKFold by claim_id", str,
        choices=("time", "group"))
    scoring: Literal["log_loss", "brier"] = option(
        "log_loss", "proper scoring rule that picks the champion (the other one breaks ties; "
        "ECE never chooses)", str, choices=("log_loss", "brier"))
    calibrators: list[str] | None = option(
        None, "calibrators to compare (default: platt, beta, isotonic, seed_prior)", list,
        choices=CALIBRATOR_NAMES, nullable=True, metavar="NAMES")
    n_boot: int = option(200, "bootstrap resamples of the metric intervals (0: none)", int,
                         low=0, metavar="N")
    n_bins: int = option(15, "bins of the reliability curves", int, low=2, metavar="B")
    weights: str = option(
        "auto", "row weights: 'auto' uses label_weight when the claims have it (the soft "
        "labels of `amv-calib label`, missing values counting 1), 'none' weighs every row "
        "1, any other value names a column of non-negative weights", str, metavar="COL",
        flags=("--weight-column",))
    allow_constant_features: bool = option(
        False, "compare even if a claim feature is constant over all rows (its terms get "
        "weight 0)", bool)
    holdout_newest: float = option(
        0.0, "share of the newest claims kept out of the fit for the promote step", float,
        low=0.0, high=1.0, high_open=True, cli=False,
        why="the command compares on every claim; a pipeline's promote step judges on the "
        "newest")


@dataclasses.dataclass(frozen=True, kw_only=True)
class TuneOptions(Options):
    """How the gate's thresholds are tuned (``amv-calib tune``, the ``tune`` step,
    :func:`~amv_calib.tuning.tune_thresholds`)."""

    STAGE = "tune"
    PARAMETERS = {"workers": "n_workers"}

    trials: int = option(60, "completed Optuna trials the study reaches (a resumed study "
                             "runs only the missing ones)", int, low=1, metavar="N")
    mode: Literal["constrained", "multi"] = option(
        "constrained", "constrained: least total loss with Gate Harmful <= target_harmful; "
        "multi: the harm / cost / coverage Pareto front", str, choices=("constrained", "multi"))
    target_harmful: float = option(0.02, "Gate Harmful (a share of episodes) the tuned gate "
                                   "may not exceed on the tuning split", float, low=0.0,
                                   high=1.0, metavar="RATE")
    tune_fraction: float = option(
        0.5, "share of the episodes tuned on (a hash of the instance id; the tuning record "
        "lists them and certify excludes them)", float, low=0.0, low_open=True, high=1.0,
        metavar="F")
    planner: Literal["lookahead", "myopic"] = option(
        "lookahead", "verification planner of the tuned gate", str, choices=PLANNERS)
    n_boot: int = option(500, "bootstrap resamples of the held-out intervals (0: none)", int,
                         low=0, metavar="N")
    workers: int = option(1, "worker processes sharing the study's storage (more than 1 is "
                          "not reproducible)", int, low=1, metavar="N")
    harm_price: float | None = option(
        None, "pin the harm price at X, in units of loss like theta (default: search it; 0: "
        "the unpriced gate)", float, low=0.0, nullable=True, metavar="X")


@dataclasses.dataclass(frozen=True, kw_only=True)
class TransferOptions(Options):
    """How thresholds tuned on some families are judged on the others (``amv-calib
    transfer``, the ``transfer`` step, :func:`~amv_calib.tuning.transfer_check`): tune's
    options of the same names."""

    STAGE = "transfer"

    trials: int = borrow(TuneOptions, "trials")
    target_harmful: float = borrow(TuneOptions, "target_harmful")
    planner: Literal["lookahead", "myopic"] = borrow(TuneOptions, "planner")
    n_boot: int = borrow(TuneOptions, "n_boot")


@dataclasses.dataclass(frozen=True, kw_only=True)
class ReplayOptions(Options):
    """How policies are replayed (``amv-calib replay``, the ``replay`` step,
    :func:`~amv_calib.tuning.replay`): every policy on the same episodes and the same
    verifier answers."""

    STAGE = "replay"
    PARAMETERS = {"jobs": "n_jobs"}

    tau: float = option(0.05, "probability threshold of the static policy: PROCEED when "
                        "every premise's p is below it", float, low=0.0, high=1.0)
    lambda_eval: float = option(1.0, "price of verifier cost in the total loss", float,
                                low=0.0)
    harm_price: float | None = borrow(
        TuneOptions, "harm_price", help="harm price of the learned policies, overriding the "
        "thresholds' (default: theirs, else 0)")
    n_boot: int = option(1000, "bootstrap resamples (0: none)", int, low=0)
    by_family: bool = option(False, "also print one table per family", bool, step=False,
                             why="a table on stdout; a step's replay.json holds every "
                             "family's metrics")
    jobs: int = option(1, "threads for the compiled batch engine (same results)", int,
                       low=1)


@dataclasses.dataclass(frozen=True, kw_only=True)
class CertifyOptions(Options):
    """How a gate is certified (``amv-calib certify``, the ``certify`` step,
    :func:`~amv_calib.tuning.certify_episodes`)."""

    STAGE = "certify"

    alpha: float = option(0.01, "harm level: the certificate says Gate Harmful <= alpha "
                          "with probability >= 1 - delta", float, low=0.0, high=1.0,
                          low_open=True, high_open=True)
    delta: float = option(0.05, "probability that the certified statement fails", float,
                          low=0.0, high=1.0, low_open=True, high_open=True)
    test_fraction: float = option(
        0.0, "share of the unseen episodes kept out of calibration for a held-out table (0: "
        "all of them calibrate)", float, low=0.0, high=1.0, high_open=True, metavar="F")
    assume_unseen: bool = option(
        False, "certify without a tuning record, the user vouching that no episode given "
        "touched the thresholds", bool)


@dataclasses.dataclass(frozen=True, kw_only=True)
class LabelOptions(Options):
    """How decision logs are joined with outcomes (``amv-calib label``, the ``label`` step,
    :func:`~amv_calib.claims.label_logs`)."""

    STAGE = "label"

    min_verifier_calls: int = option(
        200, "labelled answers a verifier needs before the episodes use its estimated "
        "reliability instead of the declared one", int, low=0, metavar="N")
    soft_labels: Literal["posterior", "off"] = option(
        "posterior", "label uses without an outcome by their verifier signals (posterior) or "
        "not (off)", str, choices=("posterior", "off"))
    skip_corrupt: bool = option(False, _SKIP_CORRUPT, bool)
    overwrite: bool = option(False, _OVERWRITE, bool)


@dataclasses.dataclass(frozen=True, kw_only=True)
class PromoteOptions(Options):
    """What production demands of a version (``amv-calib promote --alias production``, the
    ``promote`` step, ``export --promote production``,
    :func:`~amv_calib.artifacts.decide_promotion`)."""

    STAGE = "promote"

    alpha: float = option(0.01, "harm level the version's certificate must reach (or be "
                          "stricter than)", float, low=0.0, high=1.0, low_open=True,
                          high_open=True)
    delta: float = option(0.05, "error probability the version's certificate must reach (or "
                          "be stricter than)", float, low=0.0, high=1.0, low_open=True,
                          high_open=True)
    n_boot: int = option(1000, "bootstrap resamples of the paired held-out log-loss "
                         "comparison", int, low=1, metavar="N")


@dataclasses.dataclass(frozen=True, kw_only=True)
class MonitorConfig(Options):
    """Thresholds of the monitor's status (a ``[monitor]`` table of ``monitor --config``,
    the ``config`` table of the ``monitor`` step, ``monitor(config=...)``); their meaning
    and defaults are documented in ``docs/monitoring.md``."""

    STAGE = "monitor config"

    delta: float = option(
        0.05, "probability of any false ALERT over unlimited monitoring, split by a union "
        "bound (harm above alpha delta/2, p too low beyond calibration_margin delta/2); p too "
        "high and the log-loss excess WARN at delta/4 each",
        float, low=0.0, high=1.0, low_open=True, high_open=True)
    label_horizon_days: int = option(
        90, "days of decision time a use waits for its outcome before it expires (counted)",
        int, low=0)
    psi_warn: float = option(0.1, "population stability index drawn on the timeline", float,
                             low=0.0)
    psi_alert: float = option(0.25, "a feature's PSI above this: WARN (drift never ALERTs)",
                              float, low=0.0)
    ks_alert: float = option(0.1, "a feature's two-sample KS statistic above this, and "
                             "significant at alert_confidence: WARN", float, low=0.0, high=1.0)
    min_uses: int = option(200, "uses a window needs for its drift to be judged", int, low=0)
    min_labels: int = option(200, "labelled uses a window needs for its descriptive "
                             "calibration statistics", int, low=0)
    min_actions: int = option(200, "labelled actions (every premise labelled) a window needs "
                              "for its descriptive harm", int, low=0)
    warn_confidence: float = option(0.95, "two-sided confidence of the windows' inner "
                                    "descriptive intervals", float, low=0.5, high=1.0,
                                    low_open=True, high_open=True)
    alert_confidence: float = option(0.999, "two-sided confidence of the windows' outer "
                                     "descriptive intervals and of the KS test", float,
                                     low=0.5, high=1.0, low_open=True, high_open=True)
    loss_margin: float = option(0.0, "log loss (nats) above what a calibrated p scores that "
                                "is tolerated: the log-loss detector bets on loss - H(p) - "
                                "loss_margin", float, low=0.0, high=1.0)
    calibration_margin: float = option(
        0.005, "mean p of the labelled uses off from their observed rate by at most this is "
        "tolerated: p lower by more ALERTs (harm ahead), higher by more WARNs (cost)", float,
        low=0.0, high=0.2)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.psi_warn > self.psi_alert:
            raise ConfigError(f"{self.STAGE}: psi_warn={self.psi_warn!r} is above "
                              f"psi_alert={self.psi_alert!r}")


@dataclasses.dataclass(frozen=True, kw_only=True)
class MonitorOptions(Options):
    """How a monitoring run reads and acts (``amv-calib monitor``, the ``monitor`` step,
    :func:`~amv_calib.monitoring.monitor`); its thresholds are a :class:`MonitorConfig`."""

    STAGE = "monitor"

    window: str = option("7d", "width of the descriptive windows: a number and m, h, d or w",
                         str, metavar="WIDTH")
    since: str | None = option(
        None, "start monitoring here (ISO-8601, UTC) when later than the version's go-live "
        "(default: the go-live)", str, nullable=True, metavar="TIME")
    rebuild: bool = option(False, "recompute from all the logs instead of continuing the "
                           "state", bool)
    other_artifacts: Literal["warn", "refuse"] = option(
        "warn", "uses the logs say another artifact (name or version) decided: left out of "
        "every statistic with a warning, or refused (exit 2)", str, choices=("warn", "refuse"))
    derisk_steps: int | None = option(
        None, "on a harm ALERT with derisk: K positions safer on the certified path (default: "
        "the safest certified configuration)", int, low=1, nullable=True, metavar="K")
    skip_corrupt: bool = option(False, _SKIP_CORRUPT, bool)
