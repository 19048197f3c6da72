"""``monitor``: production's harm and calibration tracked anytime-validly; acts on ALERT.

A thin wrapper over :func:`~amv_calib.monitoring.monitor`. One body for the command and
the step: on ALERT, ``derisk`` moves production to a safer certified configuration when the
ALERT is on harm and still holds recomputed from the logs (a refused de-risk is reported,
the ALERT stands); a pipeline file named in ``on_alert`` runs through the caller's
``pipeline`` hook (a stage does not import the pipeline), so only the command offers it (a
pipeline's retrain is the steps after this one). A step keeps its state beside its folder
and stops the pipeline unless ALERT (``stop_unless_alert``); the command keeps it in its
``--out`` folder and exits 3 on ALERT.
"""

from __future__ import annotations

import logging
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal

from amv_calib.exceptions import ArtifactError, ConfigError
from amv_calib.settings import DEFAULT_ALIAS, DEFAULT_MODEL_NAME, MonitorOptions
from amv_calib.stages._inputs import default_artifact
from amv_calib.stages._label import require_inputs
from amv_calib.stages._stage import Call, Input, Stage

__all__ = ["MONITOR", "MONITOR_ALERT_EXIT", "Monitored"]

log = logging.getLogger(__name__)

#: Exit code of ``monitor`` when the latest window is ALERT (1 and 2 are errors).
MONITOR_ALERT_EXIT: Final = 3


@dataclass
class Monitored:
    """What a monitoring run found and did: its report, files and the ALERT's actions."""

    report: Any
    files: dict[str, Any]
    stop: bool = False
    derisked: str | None = None
    on_alert: dict[str, Any] = field(default_factory=dict)
    pipelines: list[str] = field(default_factory=list)


def _artifact(call: Call) -> str:
    p = call.inputs
    if p["artifact"] is not None:
        return str(p["artifact"])
    if call.step is None:
        return default_artifact()
    model = p["model"] or DEFAULT_MODEL_NAME
    return f"{Path(str(call.models_dir)) / model}@{p['alias'] or DEFAULT_ALIAS}"


def _config(call: Call) -> Any:
    from amv_calib.monitoring import MonitorConfig, load_monitor_config

    if call.step is not None:
        return MonitorConfig.from_mapping(call.inputs["config"], where=call.where() + "config")
    return load_monitor_config(call.inputs["config_file"])


def _derisk(call: Call, report: Any, ref: str, reading: dict[str, Any]) -> Any:
    """De-risk on a harm ALERT that still holds recomputed from the logs: the
    :class:`~amv_calib.monitoring.DeriskResult`, or None when not done."""
    from amv_calib.monitoring import derisk, harm_alert_recomputed

    if not report.harm_alert:
        report.actions.append("not de-risked (the ALERT is not on harm)")
        return None
    # only evidence read from the logs in this run moves production
    acting = harm_alert_recomputed(report, ref, **reading)
    if acting is None:
        report.actions.append("not de-risked (the harm ALERT did not hold when recomputed "
                              "from the logs)")
        return None
    try:
        done = derisk(ref, evidence=acting.line().split("; ")[0] + "; " + acting.reasons[0],
                      steps=call.options.derisk_steps, signing_key=call.inputs["signing_key"],
                      trusted_keys=reading["trusted_keys"])
    except ArtifactError as exc:  # the ALERT is still reported
        log.error("%sde-risk refused: %s", call.where(), exc)
        report.actions.append(f"de-risk refused: {exc}")
        return None
    report.actions.append(f"de-risked to {done.version}" if done.version
                          else "already at the safest certified configuration")
    return done


def _run(call: Call) -> Monitored:  # noqa: C901 - the ALERT's actions, in order
    from amv_calib.monitoring import monitor

    p, opts = call.inputs, call.options
    decisions = [str(x) for x in p["decisions"]]
    outcomes = [str(x) for x in p["outcomes"] or []]
    require_inputs(x for x in (*decisions, *outcomes) if "://" not in x)
    for action in p["on_alert"]:
        if action != "derisk" and call.step is not None:
            raise ConfigError(f"{call.where()}on_alert={action!r}; only 'derisk' (a retrain "
                              f"is the steps after this one)")
        if action != "derisk" and not Path(action).is_file():
            raise ConfigError(f"--on-alert {action!r}: neither 'derisk' nor a pipeline file")
    ref, config = _artifact(call), _config(call)
    on_corrupt: Literal["raise", "skip"] = "skip" if opts.skip_corrupt else "raise"
    reading: dict[str, Any] = {
        "decisions": decisions, "outcomes": outcomes or None, "window": opts.window,
        "since": opts.since, "config": config, "on_corrupt": on_corrupt,
        "trusted_keys": p["trusted_keys"] or None, "other_artifacts": opts.other_artifacts}
    # a step's folder is replaced by each run: its state lives beside it
    state = (call.workdir / f"{call.step}.state" if call.step is not None and call.workdir
             else None if call.out is None else call.out / "monitor.state")
    report, claims = monitor(ref, state=state, rebuild=opts.rebuild, **reading)
    done = Monitored(report, {})
    if report.alert:
        for action in p["on_alert"]:
            if action == "derisk":
                derisked = _derisk(call, report, ref, reading)
                if derisked is not None:
                    done.derisked = derisked.version
                    done.on_alert["derisk"] = derisked.to_dict()
                continue
            log.info("ALERT: running %s", action)
            report.actions.append(f"retrain started ({Path(action).name})")
            result, text = call.hooks["pipeline"](action, decisions, outcomes,
                                                  p["on_alert_overrides"] or [],
                                                  tracking=not p["no_tracking"],
                                                  tracking_uri=call.tracking_uri)
            done.on_alert.setdefault("pipelines", []).append(result)
            done.pipelines.append(text)
    done.stop = bool(p["stop_unless_alert"]) and call.step is not None and not report.alert
    if call.step is not None and claims is None and not done.stop:
        # the retrain after this step needs every labelled claim: one full join
        from amv_calib.claims import label_claims

        claims, _ = label_claims(decisions, outcomes or None, soft_labels="off")
    _write(call, done, claims)
    return done


def _write(call: Call, done: Monitored, claims: Any) -> None:
    """Write the run's files and log them (a command without --out: a temporary folder)."""
    from amv_calib.monitoring import write_monitor_outputs

    with tempfile.TemporaryDirectory(prefix="amv-monitor-") as tmp:
        done.files = write_monitor_outputs(done.report, claims, call.out or Path(tmp))
        if call.step is not None:
            for line in (done.report.line(), *(f"  {r}" for r in done.report.reasons)):
                log.info("[%s] %s", call.step, line)
            call.tracker.log_monitoring(done.report, files=done.files)
        elif not call.inputs["no_tracking"]:
            from amv_calib.tracking import PipelineTracker

            with PipelineTracker(run_name="monitor", tracking_uri=call.tracking_uri,
                                 tags={"amv_calib.stage": "monitor"}) as tracker:
                tracker.log_monitoring(done.report, files=done.files)


def _summary(m: Monitored) -> list[str]:
    return [m.report.line(), *(f"  {r}" for r in m.report.reasons),
            *(f"\n{text.rstrip(chr(10))}" for text in m.pipelines)]


def _outputs(m: Monitored) -> dict[str, Any]:
    r, f = m.report, m.files
    return {"status": r.status, "alert": r.alert, "report": str(f["report"]),
            "timeline": str(f["timeline"]), "claims": str(f["claims"]) if "claims" in f else None,
            "labelled": r.labelled_read, "derisked_to": m.derisked, "line": r.line(),
            "stop_pipeline": m.stop, "stop_reason": f"{r.status}, not ALERT"}


_CLI: Final = "the command's; "
MONITOR = Stage(
    name="monitor",
    json_indent=None,
    help="track harm and calibration of production anytime-validly; de-risk on ALERT",
    description="Track the production version since it went live: its harm rate (Gate "
    "Harmful of the labelled actions) with a confidence sequence and an e-value "
    "against the certificate's alpha, and its calibration (in the large, and the log "
    "loss against what a calibrated p scores) with e-processes, all valid at every "
    "look however often it runs (false ALERT probability <= delta over unlimited "
    "monitoring). Per time window, drift (PSI, KS), ECE and the rest are descriptive "
    "context. With --out the run continues from the state it left there, reading only "
    "new decision lines. Prints one line: status, the harm confidence sequence against "
    "alpha, the labelled actions counted, what was done (docs/monitoring.md). "
    f"Exit {MONITOR_ALERT_EXIT} on ALERT, 0 otherwise.",
    inputs={
        "artifact": Input(help="the artifact the gate runs (default: "
                          f"models/{DEFAULT_MODEL_NAME}@{DEFAULT_ALIAS})", metavar="REF",
                          path=True),
        "model": Input(help="the model whose alias is monitored when no artifact is given",
                       default=DEFAULT_MODEL_NAME, cli=False,
                       why="a step's default artifact is model@alias of the pipeline's "
                       "models_dir; the command's is --artifact's default"),
        "alias": Input(help="the alias monitored when no artifact is given",
                       default=DEFAULT_ALIAS, cli=False,
                       why="a step's default artifact is model@alias of the pipeline's "
                       "models_dir; the command's is --artifact's default"),
        "decisions": Input(help="decision log files (JSON lines), in time order", type=list,
                           nargs="+", required=True, path=True, metavar="LOG"),
        "outcomes": Input(help="outcome records (.jsonl, .csv or .parquet); without them (the "
                          "default) only drift is monitored", type=list, nargs="+",
                          default=[], path=True, metavar="FILE"),
        "config_file": Input(help="a TOML file whose [monitor] table sets the thresholds "
                             "(default: the built-in ones, docs/monitoring.md)",
                             flags=("--config",), metavar="TOML", step=False,
                             why="a step's config table holds the thresholds itself"),
        "config": Input(help="the thresholds (MonitorConfig keys, docs/monitoring.md)",
                        type=dict, default={}, cli=False,
                        why="the command reads them from the [monitor] table of --config"),
        "on_alert": Input(
            help="on ALERT: 'derisk' moves production to a safer certified configuration (on "
            "a harm ALERT); a pipeline file runs with the monitored logs as the decisions and "
            "outcomes of its monitor and label steps (e.g. pipelines/retrain-from-logs.toml); "
            "repeatable, run in order (default: report only)", type=list, default=[],
            metavar="derisk|PIPELINE"),
        "on_alert_overrides": Input(
            help="override a parameter of the --on-alert pipeline (repeatable; default: the "
            "file's values)", type=list, flags=("--on-alert-set",), default=[],
            metavar="STEP.KEY=VALUE", step=False,
            why=_CLI + "a step runs no pipeline on ALERT: its retrain is the steps after it"),
        "signing_key": Input(help="sign the de-risked version with this private key "
                             "(default: unsigned)", metavar="KEY", path=True),
        "trusted_keys": Input(
            help="public key (from `amv-calib keygen`) that must have signed the artifact "
            "(repeatable: any one of them; also $AMV_CALIB_TRUSTED_KEYS, separated by ':'); "
            "an unsigned or wrongly signed artifact is refused (default: the variable's keys, "
            "else no signature check)", type=list, flags=("--trusted-key",),
            metavar="PUBLIC", step=False,
            why=_CLI + "a pipeline's steps trust $AMV_CALIB_TRUSTED_KEYS"),
        "no_tracking": Input(help="log nothing to MLflow (default: the windows as stepped "
                             "metrics)", type=bool, default=False, step=False,
                             why="a pipeline's tracking is its [pipeline] tracking"),
        "stop_unless_alert": Input(
            help="the steps after this one run only on ALERT (a scheduled "
            "monitor-then-retrain job)", type=bool, default=True, cli=False,
            why="the command runs no later steps"),
    },
    options=MonitorOptions,
    out=Input(help="write monitor.json, monitor.txt, timeline.png (and claims.parquet when "
              "everything was read) here, and keep the incremental state in DIR/monitor.state) "
              "(default: print only, no state: every run reads all)", metavar="DIR"),
    shared={"tracking_uri": None},
    run=_run,
    summary=_summary,
    to_json=lambda m: {**m.report.to_dict(), "on_alert": m.on_alert or None},
    outputs=_outputs,
    exit_code=lambda m: MONITOR_ALERT_EXIT if m.report.alert else 0,
    json_help="print the run as JSON instead of the line",
)
