"""What a stage is: its inputs, its options object, its run function and its summary.

A :class:`Stage` is the one definition from which both the ``amv-calib`` sub-command and the
pipeline step kind of the same name are made: the command line's flags and the step's keys
come from :attr:`Stage.inputs` and :attr:`Stage.options`, and both call :attr:`Stage.run`
with a :class:`Call` saying where the values came from. Nothing here imports a stage's
libraries; each stage module imports what it needs inside its run function.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Final

from amv_calib.exceptions import ConfigError
from amv_calib.settings import DEFAULT_SEED, Options

__all__ = ["CLI_ONLY", "NO_TRACKER", "SHARED", "Call", "Input", "Stage"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Input:
    """One input of a stage: a file it reads or a name it acts on (its knobs are options).

    Attributes
    ----------
    help : str
        What it is; the command line appends the default when it has one worth saying.
    type : type
        ``str``, ``int``, ``float``, ``bool``, ``list`` (of strings) or ``dict``.
    default : object
        The value when not given.
    required : bool
        It must be given.
    cli_required : bool
        The command line requires it; a step takes ``default`` when it is not given.
    path : bool
        A file or folder: relative to the pipeline file, its content part of the step's key.
    positional : bool
        The command line takes it as an argument, not a flag.
    flags : tuple of str
        The command line's spellings (default ``--name``).
    metavar, choices, nargs
        As :meth:`argparse.ArgumentParser.add_argument` takes them.
    cli, step : bool
        Whether the command and the step offer it; ``why`` says why one does not.
    """

    help: str
    type: type = str
    default: Any = None
    required: bool = False
    cli_required: bool = False
    path: bool = False
    positional: bool = False
    flags: tuple[str, ...] = ()
    metavar: str | None = None
    choices: tuple[Any, ...] | None = None
    nargs: str | None = None
    cli: bool = True
    step: bool = True
    why: str = ""


#: Settings a pipeline gives every step once (its ``[pipeline]`` table) and a command takes
#: as flags of its own: ``{name: Input}``. A stage names those it uses in
#: :attr:`Stage.shared`, with the help its command shows (None: this one).
SHARED: Final[Mapping[str, Input]] = {
    "seed": Input(help="random seed", type=int, default=DEFAULT_SEED,
                  why="the pipeline's [pipeline] seed, shared by every step"),
    "engine": Input(help="where the stage runs: local (this process) or spark",
                    choices=("local", "spark"), default="local",
                    why="the pipeline's [pipeline] engine, shared by every step"),
    "spark_master": Input(
        help="Spark master URL with --engine spark (default local[*]; any URL: "
        "spark://host:7077, yarn, k8s://...; under spark-submit its --master wins)",
        default="local[*]", metavar="URL", why="the pipeline's [pipeline] spark_master"),
    "spark_scratch": Input(
        help="with --engine spark: where the executors write the claim rows and unjoined "
        "uses as part files for this process to stream into the outputs (removed "
        "afterwards); a location both reach (default: a temporary folder of this machine, "
        "for local masters)", metavar="DIR|URI", why="the pipeline's [pipeline] spark_scratch"),
    "models_dir": Input(
        help="artifact root (default: $AMV_CALIB_MODELS_DIR, else models/ in the nearest "
        "folder upwards from here that holds one, else here)", metavar="DIR",
        why="the pipeline's [pipeline] models_dir"),
    "tracking_uri": Input(
        help="MLflow tracking URI (default: $MLFLOW_TRACKING_URI, else sqlite:///mlflow.db)",
        why="the pipeline's [pipeline] tracking_uri"),
    "experiment": Input(help="MLflow experiment of the run", default="amv-calib",
                        why="the pipeline's [pipeline] experiment"),
}

#: The flags of a command that no step has, and why: the only ones.
CLI_ONLY: Final[Mapping[str, str]] = {
    "out": "where the command writes; a step writes into its own folder under the work folder",
    "json": "the command's output format; a pipeline prints its own report (run --json)",
    "quiet": "the process's logging; a pipeline run has its own -q",
    "verbose": "the process's logging (-v); a pipeline run is verbose with the command's -v",
}


class _NoTracker:
    """A tracker that logs nothing: any method does nothing and returns None."""

    enabled = False

    def __getattr__(self, name: str) -> Callable[..., None]:
        if name.startswith("_"):
            raise AttributeError(name)
        return lambda *args, **kwargs: None


#: What a call from the command line logs to (a pipeline gives its run's tracker).
NO_TRACKER: Final = _NoTracker()


@dataclasses.dataclass(kw_only=True)
class Call:
    """One call of a stage: the values, checked, and where they came from.

    ``step`` is the step's name in a pipeline, None from the command line: messages name a
    value as the user gave it (:meth:`key`), and the few things only a pipeline does (its
    work folder, its tracker) hang on it.
    """

    inputs: dict[str, Any]
    options: Any = None
    out: Path | None = None
    seed: int = DEFAULT_SEED
    engine: str = "local"
    spark_master: str = "local[*]"
    spark_scratch: str | None = None
    models_dir: Path | None = None
    tracking_uri: str | None = None
    experiment: str = "amv-calib"
    step: str | None = None
    pipeline: str | None = None
    step_key: str | None = None
    workdir: Path | None = None
    tracker: Any = NO_TRACKER
    verbose: bool = False
    #: Progress lines on stderr (the command's, unless --json; a step's, unless -q).
    progress: bool = True
    #: What the caller lends the stage that the stage may not import (a stage does not
    #: import the pipeline): ``{"pipeline": run(file, overrides) -> (json, report)}``.
    hooks: Mapping[str, Callable[..., Any]] = dataclasses.field(default_factory=dict)

    def key(self, name: str) -> str:
        """``name`` as the user gave it: ``--name`` on the command line, ``name`` in a step."""
        return name if self.step is not None else f"--{name.replace('_', '-')}"

    def out_dir(self) -> Path:
        """The folder the stage writes into; a stage whose ``out`` is required calls this."""
        if self.out is None:
            raise ValueError("this stage writes files: give it an out folder")
        return self.out

    def spark(self) -> Any:
        """The Spark session of a call whose engine is ``spark``; exit 2 saying why not."""
        from amv_calib.spark import spark_session, spark_unavailable

        why = spark_unavailable()
        if why is not None:
            raise ConfigError(f"{self.where()}{self.key('engine')} spark: {why}")
        return spark_session(self.spark_master)

    def where(self) -> str:
        """The prefix of a step's messages (``step 'promote': ``), empty on the command line."""
        return "" if self.step is None else f"step {self.step!r}: "


@dataclasses.dataclass(frozen=True, kw_only=True)
class Stage:
    """One workflow, written once: the command and the step kind are both made from it.

    Attributes
    ----------
    name : str
        The command's and the step kind's name.
    help, description : str
        The command's one-line help and its ``--help`` text.
    inputs : mapping of str to Input
        What it reads; in command-line order.
    options : type of Options, optional
        Its options object: every knob's default, type, range, choices and help.
    shared : mapping of str to str or None
        The :data:`SHARED` settings it uses, with the help its command shows (None: the
        shared one).
    out : Input, optional
        The command's ``--out`` (a step writes into its own folder).
    run : callable
        ``run(call) -> result``; prints nothing.
    summary : callable
        ``summary(result) -> lines`` for a person.
    to_json : callable
        ``to_json(result) -> object``: what ``--json`` prints.
    outputs : callable
        ``outputs(result) -> dict``: the step's outputs (paths and values later steps use).
    check : callable
        ``check(result)`` raises when the result is a failure (nothing certified): the
        command prints its summary first, then exits with the error's code; a step fails.
    exit_code : callable
        ``exit_code(result) -> int``: the command's exit code for a result that is not an
        error (0 unless the stage says otherwise).
    json_indent : int or None
        The layout of ``--json``: indented, or one line (None) where scripts read the last
        line of the output (compare, register).
    json_sort_keys : bool
        ``--json`` sorts the keys (False: in the result's order).
    """

    name: str
    help: str
    description: str
    inputs: Mapping[str, Input]
    run: Callable[[Call], Any]
    summary: Callable[[Any], list[str]]
    to_json: Callable[[Any], Any]
    outputs: Callable[[Any], dict[str, Any]]
    options: type[Options] | None = None
    shared: Mapping[str, str | None] = dataclasses.field(default_factory=dict)
    out: Input | None = None
    check: Callable[[Any], None] = lambda result: None
    exit_code: Callable[[Any], int] = lambda result: 0
    json_help: str = "print the full result as JSON instead of the summary"
    json_indent: int | None = 2
    json_sort_keys: bool = True

    def step_keys(self) -> dict[str, Any]:
        """``{key: Input or Option}``: every key the step kind takes."""
        keys: dict[str, Any] = {k: i for k, i in self.inputs.items() if i.step}
        if self.options is not None:
            keys.update((k, o) for k, o in self.options.spec().items() if o.step)
        return keys

    def cli_keys(self) -> dict[str, Any]:
        """``{dest: Input or Option}``: every flag or argument the command takes, besides
        :data:`CLI_ONLY` ones."""
        keys: dict[str, Any] = {k: i for k, i in self.inputs.items() if i.cli}
        if self.options is not None:
            keys.update((k, o) for k, o in self.options.spec().items() if o.cli)
        keys.update((k, SHARED[k] if help is None else dataclasses.replace(SHARED[k], help=help))
                    for k, help in self.shared.items())
        return keys
