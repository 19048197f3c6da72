"""The step kinds a pipeline file can use: one per stage of :mod:`amv_calib.stages`.

Each is made from its stage's definition (:func:`_step_kind`): its keys are the stage's
inputs a step offers and its options, its run the stage's, called with the step's folder,
the pipeline's shared settings and its tracker.
"""

from __future__ import annotations

import logging
from typing import Any

from amv_calib.pipeline._spec import Param, StepContext, StepKind
from amv_calib.stages import STAGES, Call, Stage

log = logging.getLogger(__name__)


def _step_kind(stage: Stage) -> StepKind:
    """The step kind made from ``stage``: its inputs a step offers are keys, its options too."""
    params = {k: Param(kind=i.type, default=i.default, required=i.required, path=i.path,
                       choices=i.choices)
              for k, i in stage.inputs.items() if i.step}

    def run(ctx: StepContext) -> dict[str, Any]:
        spec = ctx.spec
        # an input the step does not offer is None, as one the command does not offer
        inputs = {**{k: None for k in stage.inputs}, **ctx.params}
        call = Call(inputs=inputs, options=ctx.options, out=ctx.out_dir, seed=spec.seed,
                    engine=spec.engine, spark_master=spec.spark_master,
                    spark_scratch=spec.spark_scratch, models_dir=spec.models_dir,
                    experiment=spec.experiment, step=ctx.step.name, workdir=spec.workdir,
                    pipeline=spec.name, step_key=ctx.key, tracker=ctx.tracker,
                    verbose=log.isEnabledFor(logging.DEBUG),
                    progress=log.isEnabledFor(logging.INFO))  # -q silences the trial lines
        result = stage.run(call)
        stage.check(result)
        return stage.outputs(result)

    return StepKind(params=params, run=run, options=stage.options)


#: ``{kind: StepKind}``: every stage's step kind.
STEP_KINDS: dict[str, StepKind] = {name: _step_kind(stage) for name, stage in STAGES.items()}
