"""The step kinds a pipeline file can use, each a thin call into the library.

A step function reads its resolved parameters from the :class:`StepContext`, writes into
``ctx.out_dir`` and returns its outputs: plain values or paths inside ``ctx.out_dir`` (they
are rewritten to the final folder after the step succeeds).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from amv_calib.exceptions import ConfigError, InsufficientDataError
from amv_calib.pipeline._spec import Param, StepContext, StepKind
from amv_calib.settings import (
    CertifyOptions,
    CompareOptions,
    LabelOptions,
    MonitorOptions,
    TuneOptions,
)
from amv_calib.stages import STAGES, Call, Stage

log = logging.getLogger(__name__)


# -- label --------------------------------------------------------------------------------
def _label(ctx: StepContext) -> dict[str, Any]:
    from amv_calib.claims import (
        LABEL_FOLDER_FILES,
        claim_outputs,
        label_logs_parts,
        write_label_folder,
    )

    opts = ctx.options
    outcomes = [str(p) for p in ctx.params["outcomes"]]
    claim_outputs(ctx.out_dir, "label", LABEL_FOLDER_FILES, overwrite=opts.overwrite)
    decisions = [str(p) for p in ctx.params["decisions"]]
    options: dict[str, Any] = {
        "min_verifier_calls": opts.min_verifier_calls, "soft_labels": opts.soft_labels,
        "on_corrupt": "skip" if opts.skip_corrupt else "raise"}
    if ctx.spec.engine == "spark":  # the same files, to the byte (docs/scale.md)
        from amv_calib.spark import spark_session, write_label_spark

        log.info("[%s] joining on Spark (%s)", ctx.step.name, ctx.spec.spark_master)
        line, report, ep = write_label_spark(
            decisions, outcomes, spark=spark_session(ctx.spec.spark_master), out=ctx.out_dir,
            scratch=ctx.spec.spark_scratch, **options)
    else:
        # the rows written part by part, never held as whole tables
        joined, result = label_logs_parts(decisions, outcomes or None, **options)
        line = write_label_folder(result, ctx.out_dir, outcomes,
                                  claim_parts=joined.claim_parts(),
                                  use_parts=joined.unjoined_parts())
        report, ep = result.report, result.episode_report
    if report.joined == 0 or ep.episodes == 0:
        raise InsufficientDataError(
            f"step {ctx.step.name!r}: {report.joined} uses labelled and {ep.episodes} "
            f"episodes from {ep.actions_read} actions; unlabelled by reason: "
            f"{ {k: v for k, v in ep.unlabelled.items() if v} }")
    log.info("[%s] %d uses labelled of %d; %d episodes of %d actions; flagged verifiers: %s",
             ctx.step.name, report.joined, report.uses_read, ep.episodes,
             ep.actions_read, ", ".join(line["verifiers_flagged"]) or "none")
    return {
        "dir": str(ctx.out_dir),
        "claims": str(ctx.out_dir / "claims.parquet"),
        "episodes": str(ctx.out_dir / "episodes.jsonl"),
        "verifiers": str(ctx.out_dir / "verifiers.json"),
        "report": str(ctx.out_dir / "claims.join_report.json"),
        "joined": report.joined,
        "episodes_written": ep.episodes,
        "actions_read": ep.actions_read,
        "verifiers_flagged": line["verifiers_flagged"],
    }


# -- compare ------------------------------------------------------------------------------
def _compare(ctx: StepContext) -> dict[str, Any]:
    import pandas as pd

    from amv_calib.calibration import compare_calibrators, newest_split, write_comparison

    opts = ctx.options
    claims, holdout = newest_split(pd.read_parquet(ctx.params["claims"]), opts.holdout_newest)
    # The newest claims stay out of the fit: promotion compares calibrators on them.
    holdout.to_parquet(ctx.out_dir / "holdout.parquet")
    claims.to_parquet(ctx.out_dir / "training.parquet")  # what the calibrators were fitted on
    if len(holdout):
        log.info("[%s] %d newest claims held out for promotion, %d compared", ctx.step.name,
                 len(holdout), len(claims))
    options = {**opts.arguments(compare_calibrators), "seed": ctx.spec.seed}
    if ctx.spec.engine == "spark":
        from amv_calib.spark import compare_calibrators_spark, spark_session

        log.info("[%s] fitting on Spark (%s)", ctx.step.name, ctx.spec.spark_master)
        result = compare_calibrators_spark(ctx.out_dir / "training.parquet",
                                           spark=spark_session(ctx.spec.spark_master),
                                           **options)
    else:
        result = compare_calibrators(claims, **options)
    files = write_comparison(result, ctx.out_dir)
    ctx.tracker.log_comparison(result, files=files, claims=claims,
                               claims_path=ctx.params["claims"])
    return {
        "dir": str(ctx.out_dir),
        "champion": str(ctx.out_dir / "champion.json"),
        "champion_name": result.champion,
        "table": str(ctx.out_dir / "comparison.md"),
        "holdout": str(ctx.out_dir / "holdout.parquet"),
        "training": str(ctx.out_dir / "training.parquet"),
    }


# -- tune ---------------------------------------------------------------------------------
def _tune(ctx: StepContext) -> dict[str, Any]:
    from amv_calib.contract import PortableCalibrator, read_json_object
    from amv_calib.tuning import read_episodes, split_episodes, tune_thresholds

    if ctx.params["artifact"]:
        from amv_calib.gate import load_artifact

        calibrator = load_artifact(str(ctx.params["artifact"])).calibrator
    elif ctx.params["calibrator"]:
        calibrator = PortableCalibrator.from_dict(
            read_json_object(ctx.params["calibrator"], what="calibrator"))
    else:
        raise ConfigError(f"step {ctx.step.name!r}: give either calibrator or artifact")
    episodes = read_episodes(ctx.params["episodes"])
    # The study lives outside the step's partial folder, keyed by the step's inputs, so an
    # interrupted run resumes the same study instead of starting over.
    storage = ctx.params["storage"] or str(ctx.spec.workdir / f"{ctx.step.name}.optuna.log")
    opts = ctx.options
    space = None
    if opts.harm_price is not None:
        from amv_calib.tuning import SEARCH_SPACE

        space = {**SEARCH_SPACE, "harm_price": (opts.harm_price, opts.harm_price, False)}
    result = tune_thresholds(
        episodes,
        calibrator=calibrator,
        storage=storage,
        study_name=f"{ctx.spec.name}-{ctx.step.name}-{ctx.key[:12]}",
        seed=ctx.spec.seed,
        space=space,
        out_dir=ctx.out_dir,
        progress=log.isEnabledFor(logging.INFO),  # --quiet silences the per-trial lines
        **opts.arguments(tune_thresholds),
    )
    if result.thresholds is None:
        raise InsufficientDataError(
            f"no trial met gate_harmful <= {opts.target_harmful} in {opts.trials} trials; "
            f"raise trials or target_harmful")
    gate = _gate_from(result.thresholds, calibrator)
    _, holdout = split_episodes(episodes, opts.tune_fraction)
    replay = _replay_table(episodes.subset(holdout), gate=gate, calibrator=calibrator,
                           seed=ctx.spec.seed, out_dir=ctx.out_dir)
    (ctx.out_dir / "calibrator.json").write_text(
        json.dumps(calibrator.to_dict(), indent=2, sort_keys=True) + "\n", encoding="utf-8")
    files = {**result.files, "calibrator": ctx.out_dir / "calibrator.json",
             "replay": ctx.out_dir / "replay.json", "replay_table": ctx.out_dir / "replay.md"}
    ctx.tracker.log_tuning(result, files=files, replay=replay)
    return {
        "dir": str(ctx.out_dir),
        "thresholds": str(ctx.out_dir / "thresholds.json"),
        "calibrator": str(ctx.out_dir / "calibrator.json"),
        "replay_table": str(ctx.out_dir / "replay.md"),
        "tuning": result.files["tuning"],
        "trials": result.n_trials,
        "study": result.study_name,
        "storage": storage,
    }


# -- certify --------------------------------------------------------------------------------
def _certify(ctx: StepContext) -> dict[str, Any]:
    from amv_calib.contract import PortableCalibrator, read_json_object
    from amv_calib.tuning import (
        certify_episodes,
        read_episodes,
        read_tuning_record,
        require_certified,
        write_certification,
    )

    p, opts = ctx.params, ctx.options
    if p["tuning"] is None and not opts.assume_unseen:
        raise ConfigError(
            f"step {ctx.step.name!r}: give tuning (the tune step's record, '@tune.tuning') so "
            f"that certification excludes the episodes the thresholds were tuned on, or set "
            f"assume_unseen = true when no episode given touched them")
    calibrator = PortableCalibrator.from_dict(
        read_json_object(p["calibrator"], what="calibrator"))
    thresholds = read_json_object(p["thresholds"], what="thresholds")
    episodes = read_episodes(p["episodes"])
    seen = None if p["tuning"] is None else read_tuning_record(p["tuning"])
    test_fraction = opts.test_fraction
    if test_fraction > 0 and (seen is None or not seen.contains(episodes.instance_id).any()):
        # Episodes of the user's own, none of which tuned the thresholds, are a calibration
        # set: every one of them certifies. Setting some aside is for the shared pool that
        # tune and certify split (the demo's held-out table).
        log.info("[%s] test_fraction=%g not applied: no episode given tuned the thresholds, "
                 "so every one calibrates (no held-out table)", ctx.step.name, test_fraction)
        test_fraction = 0.0
    result = certify_episodes(episodes, calibrator, thresholds, seen=seen, alpha=opts.alpha,
                              delta=opts.delta, seed=ctx.spec.seed,
                              test_fraction=test_fraction)
    cert = result.certificate
    log.info("[%s] certified on %d calibration episodes of %d (%d excluded: they shaped the "
             "thresholds; %d set aside for the held-out table); alpha=%g, delta=%g",
             ctx.step.name, cert.n, len(episodes), int(result.excluded.sum()),
             int(result.test.sum()), opts.alpha, opts.delta)
    files = write_certification(result, ctx.out_dir)
    certified = require_certified(cert)  # fails the step, saying what the data support
    outputs = {"dir": str(ctx.out_dir), **files, "harm_price": certified.get("harm_price", 0.0),
               "observed_upper_bound": cert.upper_bound, "calibration_episodes": cert.n,
               "excluded_episodes": int(result.excluded.sum())}
    replay = None
    if result.test.any():
        replay = _replay_table(episodes.subset(result.test),
                               gate=_gate_from(certified, calibrator), calibrator=calibrator,
                               seed=ctx.spec.seed, out_dir=ctx.out_dir,
                               certificate=cert.to_dict())
        files["replay_table"] = outputs["replay_table"] = str(ctx.out_dir / "replay.md")
    ctx.tracker.log_certification(cert, files=files, replay=replay)
    return outputs


def _gate_from(t: dict[str, Any], calibrator: Any) -> Any:
    from amv_calib.gate import Gate

    return Gate(lambda_cost_scale=t["lambda_cost_scale"],
                delta_loss_threshold=t["delta_loss_threshold"],
                epsilon_harm_bound=t["epsilon_harm_bound"], planner=t["planner"],
                max_verifications=t["max_verifications"],
                harm_price=t.get("harm_price", 0.0), calibrator=calibrator)


def _replay_table(episodes: Any, *, gate: Any, calibrator: Any, seed: int,
                  out_dir: Path, policies: Sequence[str] = ("all",),
                  certificate: dict[str, Any] | None = None) -> dict[str, Any]:
    """Replay ``policies`` on the same answer stream; write replay.json and replay.md.

    Returns the results by policy (the tracker logs them).
    """
    from amv_calib.tuning import POLICIES, format_table, replay_many

    names = list(POLICIES) if "all" in policies else list(dict.fromkeys(policies))
    results = replay_many(episodes, names, seed=seed, gate=gate,  # type: ignore[arg-type]
                          calibrator=calibrator, n_boot=_n_boot(len(episodes)))
    summary = {n: r.to_dict() for n, r in results.items()}
    (out_dir / "replay.json").write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n",
                                         encoding="utf-8")
    bound = None if certificate is None else certificate.get("observed_upper_bound")
    table = format_table({n: r.to_dict()["overall"] for n, r in results.items()},
                         {n: r.n for n, r in results.items()},
                         None if bound is None else {gate.planner: bound})
    (out_dir / "replay.md").write_text(
        f"{len(episodes)} instances, seed {seed}\n\n{table}\n", encoding="utf-8")
    return results


def _n_boot(n: int) -> int:
    """Bootstrap resamples for a replay table: enough for stable 95% bounds, few on big sets."""
    return 1000 if n <= 20000 else 200


# -- export -------------------------------------------------------------------------------
def _export(ctx: StepContext) -> dict[str, Any]:
    import pandas as pd

    from amv_calib.artifacts import export_artifact, promote
    from amv_calib.contract import read_aliases

    if ctx.params["alias"] == "production":
        raise ConfigError(f"step {ctx.step.name!r}: alias='production' is the promote step's "
                          f"to set (a new version must earn it); export as 'challenger'")
    claims = pd.read_parquet(ctx.params["claims"]) if ctx.params["claims"] else None
    name, models_dir = ctx.params["model"], ctx.spec.models_dir
    certificate = ctx.params["certificate"]
    frontier = Path(certificate).parent / "frontier.png" if certificate else None
    # An existing version that holds the same content (a re-run after an interruption, or
    # `make demo` reproducing the shipped champion) is reused instead of minting v(N+1).
    res = export_artifact(calibrator=ctx.params["calibrator"],
                          thresholds=ctx.params["thresholds"], name=name,
                          models_dir=models_dir, claims=claims,
                          signing_key=ctx.params["signing_key"], certificate=certificate,
                          tuning=ctx.params["tuning"], reuse_identical=True,
                          figures=[frontier] if frontier and frontier.is_file() else [])
    alias = ctx.params["alias"]
    if alias:
        current = read_aliases(models_dir / name)["aliases"].get(alias, {}).get("version")
        if current != res.version:
            promote(name, res.version, alias=alias, models_dir=models_dir)
    ctx.tracker.log_artifact_export(res)
    return {"artifact": str(res.path), "name": name, "version": res.version, "alias": alias,
            "reused": res.reused}


# -- register -----------------------------------------------------------------------------
def _register(ctx: StepContext) -> dict[str, Any]:
    from amv_calib.tracking import describe_registry_aliases, sync_registry_aliases

    if not ctx.tracker.enabled:
        log.info("[%s] tracking is off: nothing registered", ctx.step.name)
        return {"registered": False}
    artifact = Path(ctx.params["artifact"])
    version = ctx.tracker.register_champion(
        artifact, registered_name=ctx.params["registered_name"], alias=None)
    # The file aliases are the source of truth: production -> @champion,
    # challenger -> @challenger.
    uri = ctx.tracker.get().tracking_uri
    synced = sync_registry_aliases(artifact.parent, registered_name=ctx.params["registered_name"],
                                   tracking_uri=uri)
    return {"registered": True, "registered_name": ctx.params["registered_name"],
            "model_version": None if version is None else version.version,
            "artifact_version": artifact.name,
            "registry_aliases": synced,
            "registry_line": describe_registry_aliases(
                synced, registered_name=ctx.params["registered_name"], tracking_uri=uri)}


# -- replay (evaluate a shipped artifact) -------------------------------------------------
def _replay(ctx: StepContext) -> dict[str, Any]:
    from amv_calib.gate import Gate
    from amv_calib.tuning import read_episodes

    gate = Gate.from_artifact(str(ctx.params["artifact"]), strict=True)
    results = _replay_table(read_episodes(ctx.params["episodes"]), gate=gate,
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
                    step=ctx.step.name, workdir=spec.workdir, tracker=ctx.tracker,
                    verbose=log.isEnabledFor(logging.DEBUG))
        return stage.outputs(stage.run(call))

    return StepKind(params=params, run=run, options=stage.options)


STEP_KINDS: dict[str, StepKind] = {
    **{name: _step_kind(stage) for name, stage in STAGES.items()},
    "label": StepKind(run=_label, options=LabelOptions, params={
        "decisions": Param(kind=list, required=True, path=True),  # paths or glob patterns
        "outcomes": Param(kind=list, default=[], path=True),
    }),
    "compare": StepKind(run=_compare, options=CompareOptions, params={
        "claims": Param(kind=str, required=True, path=True),
    }),
    "tune": StepKind(run=_tune, options=TuneOptions, params={
        "calibrator": Param(kind=str, default=None, path=True),
        "artifact": Param(kind=str, default=None, path=True),
        "episodes": Param(kind=str, required=True, path=True),
        # the step keeps its study in the work folder, so a killed run resumes it
        "storage": Param(kind=str, default=""),
    }),
    "export": StepKind(run=_export, params={
        "calibrator": Param(kind=str, required=True, path=True),
        "thresholds": Param(kind=str, required=True, path=True),
        "claims": Param(kind=str, default=None, path=True),
        "model": Param(kind=str, default="amv-guard"),
        # a new version is the challenger; the promote step decides about production
        "alias": Param(kind=str, default="challenger"),
        "signing_key": Param(kind=str, default=None, path=True),
        "certificate": Param(kind=str, default=None, path=True),
        # the tuning record (default: the one beside the certificate)
        "tuning": Param(kind=str, default=None, path=True),
    }),
    "certify": StepKind(run=_certify, options=CertifyOptions, params={
        "calibrator": Param(kind=str, required=True, path=True),
        "thresholds": Param(kind=str, required=True, path=True),
        "episodes": Param(kind=str, required=True, path=True),
        # the tune step's record: its episodes are excluded, every other one calibrates
        "tuning": Param(kind=str, default=None, path=True),
    }),
    "register": StepKind(run=_register, params={
        "artifact": Param(kind=str, required=True, path=True),
        "registered_name": Param(kind=str, default="amv-guard-calibrator"),
    }),
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
