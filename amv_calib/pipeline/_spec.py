"""What a pipeline is made of: its parameters, steps, spec, context and results.

Plain data classes with no behaviour beyond JSON summaries, shared by the step kinds
(:mod:`._steps`) and the runner (:mod:`._runner`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from amv_calib.settings import Options


@dataclass(frozen=True, kw_only=True)
class Param:
    """One parameter a step kind accepts."""

    kind: type
    default: Any = None
    required: bool = False
    path: bool = False  # relative to the pipeline file; its content enters the step key
    choices: tuple[Any, ...] | None = None


@dataclass(frozen=True, kw_only=True)
class StepSpec:
    """One configured step of a pipeline."""

    name: str
    kind: str
    params: dict[str, Any]


@dataclass(frozen=True, kw_only=True)
class PipelineSpec:
    """A validated pipeline file."""

    path: Path
    name: str
    workdir: Path
    seed: int
    tracking: bool
    tracking_uri: str | None
    models_dir: Path
    experiment: str
    steps: tuple[StepSpec, ...]
    #: Where the data stages run: "local" (this process) or "spark" (docs/scale.md).
    engine: str = "local"
    #: The Spark master URL when ``engine = "spark"``.
    spark_master: str = "local[*]"
    #: Where the Spark label's executors write their part files for the driver to stream
    #: (a URI, or a folder both reach); None: a temporary folder (local masters only).
    spark_scratch: str | None = None


@dataclass(kw_only=True)
class StepResult:
    """What one step did: ``status`` is ``"ran"`` or ``"skipped"``."""

    name: str
    kind: str
    status: str
    seconds: float
    outputs: dict[str, Any]
    key: str


@dataclass(kw_only=True)
class PipelineResult:
    """The outcome of :func:`run_pipeline`."""

    spec: PipelineSpec
    steps: list[StepResult] = field(default_factory=list)
    run_id: str | None = None
    tracking: bool = False
    tracking_uri: str | None = None

    def to_json(self) -> dict[str, Any]:
        """JSON-ready summary for ``--json``."""
        return {
            "pipeline": self.spec.name,
            "file": str(self.spec.path),
            "tracking": self.tracking,
            "mlflow_run_id": self.run_id,
            "steps": [
                {"name": s.name, "kind": s.kind, "status": s.status,
                 "seconds": round(s.seconds, 3), "outputs": s.outputs}
                for s in self.steps
            ],
        }


@dataclass(kw_only=True)
class StepContext:
    """What a step function receives."""

    spec: PipelineSpec
    step: StepSpec
    params: dict[str, Any]  # resolved: paths absolute, references replaced by values
    out_dir: Path  # the step's partial folder; becomes WORKDIR/<name> on success
    key: str
    tracker: Any
    #: The step kind's options object (its option keys, checked), or None.
    options: Any = None


StepFunc = Callable[[StepContext], dict[str, Any]]


@dataclass(frozen=True, kw_only=True)
class StepKind:
    """A kind of step: its inputs, its options and the function that runs it.

    ``options`` is a stage's :class:`~amv_calib.settings.Options` class: its options that
    a step offers are keys of the step too, with the same default and check (the command
    line is made from the same class).
    """

    params: Mapping[str, Param]
    run: StepFunc
    options: type[Options] | None = None

    def all_params(self) -> dict[str, Param]:
        """The inputs and the option keys, each as a :class:`Param`."""
        out = dict(self.params)
        if self.options is not None:
            for name, opt in self.options.spec().items():
                if opt.step:
                    out[name] = Param(kind=opt.type,
                                      default=getattr(self.options.defaults(), name))
        return out
