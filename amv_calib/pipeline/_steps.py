"""The step kinds a pipeline file can use.

Every stage of :mod:`amv_calib.stages` is a step kind made from its definition
(:func:`_step_kind`): its keys are the stage's inputs and options, its run the stage's. The
two kinds that are not stages yet (monitor, replay) are written here: a step function reads
its resolved parameters from the :class:`StepContext`, writes into ``ctx.out_dir`` and
returns its outputs: plain values or paths inside ``ctx.out_dir`` (they are rewritten to
the final folder after the step succeeds).
"""

from __future__ import annotations

import logging
from typing import Any

from amv_calib.exceptions import ConfigError
from amv_calib.pipeline._spec import Param, StepContext, StepKind
from amv_calib.settings import (
    MonitorOptions,
)
from amv_calib.stages import STAGES, Call, Stage, replay_table

log = logging.getLogger(__name__)


# -- replay (evaluate a shipped artifact) -------------------------------------------------
def _replay(ctx: StepContext) -> dict[str, Any]:
    from amv_calib.gate import Gate
    from amv_calib.tuning import read_episodes

    gate = Gate.from_artifact(str(ctx.params["artifact"]), strict=True)
    results = replay_table(read_episodes(ctx.params["episodes"]), gate=gate,
                            calibrator=gate.calibrator, seed=ctx.spec.seed,
                            out_dir=ctx.out_dir, policies=ctx.params["policies"])
    ctx.tracker.log_replay(results)
    return {"dir": str(ctx.out_dir), "replay_table": str(ctx.out_dir / "replay.md")}


# -- monitor (production drift and harm; stops the pipeline unless ALERT) --------------------
def _monitor(ctx: StepContext) -> dict[str, Any]:
    from amv_calib.monitoring import (
        MonitorConfig,
        derisk,
        harm_alert_recomputed,
        monitor,
        write_monitor_outputs,
    )

    p, opts = ctx.params, ctx.options
    ref = p["artifact"] or f"{ctx.spec.models_dir / p['model']}@{p['alias']}"
    for action in p["on_alert"]:
        if action != "derisk":
            raise ConfigError(f"step {ctx.step.name!r}: on_alert={action!r}; only 'derisk' "
                              f"(a retrain is the steps after this one)")
    # the state lives beside the step's folder, which each run replaces
    state = ctx.spec.workdir / f"{ctx.step.name}.state"
    report, claims = monitor(str(ref), p["decisions"], p["outcomes"] or None,
                             window=opts.window, since=opts.since,
                             config=MonitorConfig.from_mapping(p["config"]), state=state,
                             rebuild=opts.rebuild, other_artifacts=opts.other_artifacts)
    derisked = None
    # only evidence read from the logs in this run moves production
    acting = harm_alert_recomputed(
        report, str(ref), p["decisions"], p["outcomes"] or None, window=opts.window,
        since=opts.since, config=MonitorConfig.from_mapping(p["config"]),
        other_artifacts=opts.other_artifacts) \
        if report.harm_alert and "derisk" in p["on_alert"] else None
    if report.harm_alert and "derisk" in p["on_alert"] and acting is None:
        report.actions.append("not de-risked (the harm ALERT did not hold when recomputed "
                              "from the logs)")
    if acting is not None:
        done = derisk(str(ref), evidence=acting.line().split("; ")[0] + "; "
                      + acting.reasons[0], steps=opts.derisk_steps,
                      signing_key=p["signing_key"])
        derisked = done.version
        report.actions.append(f"de-risked to {done.version}" if done.version
                              else "already at the safest certified configuration")
    stop = bool(p["stop_unless_alert"]) and not report.alert
    if claims is None and not stop:
        # the retrain after this step needs every labelled claim: one full join
        from amv_calib.claims import label_claims

        claims, _ = label_claims([str(x) for x in p["decisions"]], p["outcomes"] or None,
                                 soft_labels="off")
    files = write_monitor_outputs(report, claims, ctx.out_dir)
    log.info("[%s] %s", ctx.step.name, report.line())
    for line in report.reasons:
        log.info("[%s]   %s", ctx.step.name, line)
    ctx.tracker.log_monitoring(report, files=files)
    return {"status": report.status, "alert": report.alert, "report": str(files["report"]),
            "timeline": str(files["timeline"]),
            "claims": str(files["claims"]) if "claims" in files else None,
            "labelled": report.labelled_read, "derisked_to": derisked,
            "line": report.line(), "stop_pipeline": stop,
            "stop_reason": f"{report.status}, not ALERT"}


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
                    pipeline=spec.name, step_key=ctx.key,
                    tracker=ctx.tracker,
                    verbose=log.isEnabledFor(logging.DEBUG),
                    progress=log.isEnabledFor(logging.INFO))  # -q silences the trial lines
        result = stage.run(call)
        stage.check(result)
        return stage.outputs(result)

    return StepKind(params=params, run=run, options=stage.options)


STEP_KINDS: dict[str, StepKind] = {
    **{name: _step_kind(stage) for name, stage in STAGES.items()},
    "monitor": StepKind(run=_monitor, options=MonitorOptions, params={
        "decisions": Param(kind=list, required=True, path=True),
        "outcomes": Param(kind=list, default=[], path=True),
        "artifact": Param(kind=str, default=None, path=True),  # default: model@alias
        "model": Param(kind=str, default="amv-guard"),
        "alias": Param(kind=str, default="production"),
        "config": Param(kind=dict, default={}),  # MonitorConfig keys (docs/monitoring.md)
        "on_alert": Param(kind=list, default=[]),  # ["derisk"]: on a harm ALERT
        "signing_key": Param(kind=str, default=None, path=True),
        # a scheduled monitor-then-retrain job: the later steps run only on ALERT
        "stop_unless_alert": Param(kind=bool, default=True),
    }),
    "replay": StepKind(run=_replay, params={
        "artifact": Param(kind=str, required=True, path=True),
        "episodes": Param(kind=str, required=True, path=True),
        "policies": Param(kind=list, default=["all"]),
    }),
}
