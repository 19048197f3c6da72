"""``tune``: the gate's thresholds searched with Optuna on replayed episodes.

An interrupted study resumes from its storage and runs only the missing trials: a step
keeps its study beside its folder in the work folder, named after its inputs, so a killed
run resumes it. A step also replays the tuned gate on the held-out split into a table, and
fails when no trial meets the harm target (the command says so and exits 1).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any

from amv_calib.exceptions import InsufficientDataError
from amv_calib.settings import TuneOptions
from amv_calib.stages._stage import Call, Input, Stage
from amv_calib.stages._tables import gate_from, replay_table

__all__ = ["EPISODES", "TUNE", "Tuned", "quiet_optuna", "study_of"]

log = logging.getLogger(__name__)


def quiet_optuna(verbose: bool) -> None:
    """Optuna sets its own logger to INFO when first imported (its trial lines would
    interleave with ours): the stages that tune set it back, unless ``verbose``."""
    if not verbose:
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)


def study_of(call: Call, storage: Any, study: Any) -> tuple[Any, Any]:
    """The Optuna storage and study of a call: a step's live outside its partial folder,
    keyed by the step's inputs, so that an interrupted run resumes the same study instead
    of starting over; a command's are the ones given."""
    if call.step is None or call.workdir is None:
        return storage, study
    return (storage or str(call.workdir / f"{call.step}.optuna.log"),
            f"{call.pipeline}-{call.step}-{(call.step_key or '')[:12]}")


@dataclass
class Tuned:
    """A :class:`~amv_calib.tuning.TuningResult` and the files and storage of the step."""

    result: Any
    storage: str
    files: dict[str, Any]


def _run(call: Call) -> Tuned:
    from amv_calib.settings import champion_reference
    from amv_calib.tuning import (
        SEARCH_SPACE,
        read_episodes,
        resolve_calibrator,
        split_episodes,
        tune_thresholds,
    )

    quiet_optuna(call.verbose)
    p, opts = call.inputs, call.options
    calibrator, _ = resolve_calibrator(p["artifact"] or p["calibrator"] or champion_reference())
    episodes = read_episodes(p["episodes"])
    storage, study = study_of(call, p["storage"], p["study_name"])
    space = None
    if opts.harm_price is not None:
        space = {**SEARCH_SPACE, "harm_price": (opts.harm_price, opts.harm_price, False)}
    result = tune_thresholds(
        episodes, calibrator=calibrator, storage=storage, study_name=study, seed=call.seed,
        out_dir=call.out, space=space, progress=call.progress,
        **opts.arguments(tune_thresholds))
    tuned = Tuned(result, str(result.storage), dict(result.files))
    if call.step is None or call.out is None:
        return tuned
    if result.thresholds is None:
        raise InsufficientDataError(
            f"no trial met gate_harmful <= {opts.target_harmful} in {opts.trials} trials; "
            f"raise trials or target_harmful")
    _, holdout = split_episodes(episodes, opts.tune_fraction)
    replay = replay_table(episodes.subset(holdout), gate=gate_from(result.thresholds,
                                                                   calibrator),
                          calibrator=calibrator, seed=call.seed, out_dir=call.out)
    (call.out / "calibrator.json").write_text(
        json.dumps(calibrator.to_dict(), indent=2, sort_keys=True) + "\n", encoding="utf-8")
    tuned.files.update(calibrator=call.out / "calibrator.json",
                       replay=call.out / "replay.json", replay_table=call.out / "replay.md")
    call.tracker.log_tuning(result, files=tuned.files, replay=replay)
    return tuned


def _summary(t: Tuned) -> list[str]:
    from amv_calib.tuning import format_table

    res = t.result
    lines = [f"study {res.study_name!r} in {res.storage}: {res.n_trials} completed trials "
             f"({res.n_new} new), tuning split {res.n_tune}, held-out {res.n_holdout}"]
    if res.thresholds is None:
        return [*lines, f"no trial meets Gate Harmful <= {res.target_harmful}; nothing written"]
    lines.append("thresholds: " + json.dumps(res.thresholds))
    if res.holdout_metrics:
        rows = {"tuned": res.holdout_metrics["tuned"], **res.holdout_metrics["baselines"]}
        lines.append("held-out split:")
        lines.append(format_table(rows, {k: res.n_holdout for k in rows}))
    lines += [f"wrote {role}: {path}" for role, path in res.files.items()]
    return lines


def _outputs(t: Tuned) -> dict[str, Any]:
    out = t.files["calibrator"].parent
    return {"dir": str(out), "thresholds": str(out / "thresholds.json"),
            "calibrator": str(out / "calibrator.json"), "replay_table": str(out / "replay.md"),
            "tuning": t.result.files["tuning"], "trials": t.result.n_trials,
            "study": t.result.study_name, "storage": t.storage}


#: The episodes a stage replays (tune, certify, replay).
EPISODES = Input(help="episodes JSONL file", required=True, path=True, positional=True,
                 metavar="EPISODES")

TUNE = Stage(
    name="tune",
    help="tune the gate's VOI thresholds with Optuna on replayed episodes",
    description="Search lambda, delta, epsilon and the verification budget on a tuning "
    "split, report on the held-out split, write thresholds.json. An interrupted study "
    "resumes from its storage and runs only the missing trials.",
    inputs={
        "episodes": EPISODES,
        "calibrator": Input(help="artifact reference, compare DIR, .json or .joblib "
                            "calibrator, or 'seed' (default: the shipped champion)", path=True),
        "artifact": Input(help="an artifact whose calibrator is tuned", path=True, cli=False,
                          why="the command's --calibrator takes an artifact reference too"),
        "storage": Input(help="journal file path (default .optuna/journal.log) or RDB URL"),
        "study_name": Input(help="Optuna study name in the storage (default amv-calib-tune)",
                            default="amv-calib-tune", step=False,
                            why="a step names its study after its inputs, so a killed run "
                            "resumes it"),
    },
    options=TuneOptions,
    out=Input(help="output DIR (thresholds.json, trials.csv, tuning.json, ...; default: "
              "nothing written)"),
    shared={"seed": "seed of the sampler, split and answer stream"},
    run=_run,
    summary=_summary,
    to_json=lambda t: t.result.to_dict(),
    outputs=_outputs,
    exit_code=lambda t: 0 if t.result.thresholds is not None else 1,
    json_help="print the result as JSON",
)
