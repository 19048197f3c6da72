"""``replay``: gate policies over frozen episodes, on one answer stream, as a table.

The learned policies (static, myopic, lookahead) run the gate of an artifact (default: the
production version of the models folder), its thresholds overridden by ``thresholds`` and
``harm_price`` when given; the others need no artifact. A step writes ``replay.json`` and
``replay.md`` into its folder and logs them to the pipeline's run.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from amv_calib.exceptions import ConfigError
from amv_calib.settings import DEFAULT_ALIAS, DEFAULT_MODEL_NAME, ReplayOptions
from amv_calib.stages._inputs import read_json
from amv_calib.stages._stage import Call, Input, Stage
from amv_calib.stages._tune import EPISODES

__all__ = ["REPLAY", "Replayed"]

#: The policies that run the artifact's gate (the others need none).
_LEARNED = ("static", "myopic", "lookahead")


@dataclass
class Replayed:
    """The results by policy, the episodes replayed and where the table went (a step)."""

    results: dict[str, Any]
    episodes: Any
    source: str
    seed: int
    by_family: bool
    out: Path | None = None


def _gate(call: Call) -> tuple[Any, Any]:
    """The gate of the learned policies and its calibrator."""
    from amv_calib.contract import check_thresholds, load_artifact
    from amv_calib.gate import Gate
    from amv_calib.settings import champion_reference

    p, opts = call.inputs, call.options
    ref = p["artifact"] or (champion_reference() if call.models_dir is None
                            else f"{call.models_dir / DEFAULT_MODEL_NAME}@{DEFAULT_ALIAS}")
    art = load_artifact(str(ref))
    t = dict(art.thresholds)
    if p["thresholds"]:
        try:
            t = check_thresholds(read_json(str(p["thresholds"]), call.key("thresholds")))
        except ValueError as exc:
            raise ConfigError(f"{call.where()}{call.key('thresholds')} {p['thresholds']}: "
                              f"{exc}") from None
    gate = Gate(lambda_cost_scale=t["lambda_cost_scale"],
                delta_loss_threshold=t["delta_loss_threshold"],
                epsilon_harm_bound=t["epsilon_harm_bound"],
                harm_price=t.get("harm_price", 0.0) if opts.harm_price is None
                else opts.harm_price,
                planner=t["planner"], max_verifications=t["max_verifications"],
                calibrator=art.calibrator, artifact_name=art.name, artifact_version=art.version)
    return gate, art.calibrator


def _run(call: Call) -> Replayed:
    from amv_calib.tuning import POLICIES, format_table, read_episodes, replay

    p, opts = call.inputs, call.options
    names = list(POLICIES) if "all" in p["policies"] else list(dict.fromkeys(p["policies"]))
    episodes = read_episodes(p["episodes"])
    gate = calibrator = None
    if any(n in _LEARNED for n in names):
        gate, calibrator = _gate(call)
    results = {n: replay(episodes, n, seed=call.seed, gate=gate,  # type: ignore[arg-type]
                         calibrator=calibrator, **opts.arguments(replay))
               for n in names}
    done = Replayed(results, episodes, str(p["episodes"]), call.seed, opts.by_family, call.out)
    if call.out is not None:
        summary = {n: r.to_dict() for n, r in results.items()}
        (call.out / "replay.json").write_text(
            json.dumps(summary, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        table = format_table({n: r.to_dict()["overall"] for n, r in results.items()},
                             {n: r.n for n, r in results.items()})
        (call.out / "replay.md").write_text(
            f"{len(episodes)} instances, seed {call.seed}\n\n{table}\n", encoding="utf-8")
        call.tracker.log_replay(results)
    return done


def _summary(r: Replayed) -> list[str]:
    from amv_calib.tuning import format_table

    es, results = r.episodes, r.results
    lines = [f"{r.source}: {len(es)} instances, {es.n_premises} premises, seed {r.seed}",
             format_table({n: x.to_dict()["overall"] for n, x in results.items()},
                          {n: x.n for n, x in results.items()})]
    if r.by_family:
        for fam in es.families:
            lines += [f"\nfamily {fam}", format_table(
                {n: x.to_dict()["by_family"][fam] for n, x in results.items()},
                {n: x.family_n[fam] for n, x in results.items()})]
    return lines


def _outputs(r: Replayed) -> dict[str, Any]:
    return {"dir": str(r.out), "replay_table": str(Path(str(r.out)) / "replay.md")}


def _policies() -> tuple[str, ...]:
    from amv_calib.tuning import POLICIES

    return (*POLICIES, "all")


REPLAY = Stage(
    name="replay",
    help="replay policies over frozen episodes and print the paper-style table",
    description="Replay gate policies over an episodes JSONL file with common random "
    "numbers and report Gate Harmful, verification cost, queries, Proceed Coverage, "
    "abstention rate and total loss (bootstrap 95 % intervals).",
    inputs={
        "episodes": EPISODES,
        "policies": Input(help="policy to replay (repeatable, or 'all')", type=list,
                          flags=("--policy",), choices=_policies(), default=["all"],
                          cli_required=True),
        "artifact": Input(help="artifact for the learned policies (default: the shipped "
                          "champion)", path=True),
        "thresholds": Input(help="thresholds.json overriding the artifact's gate thresholds "
                            "(default: the artifact's)", path=True),
    },
    options=ReplayOptions,
    shared={"seed": "answer stream and bootstrap"},
    run=_run,
    summary=_summary,
    to_json=lambda r: {n: x.summary() for n, x in r.results.items()},
    outputs=_outputs,
    json_help="print {POLICY: {metric: value, ..., n}} instead of the table",
    json_sort_keys=False,  # the policies in the order replayed
)
