"""``transfer``: thresholds tuned on some families, judged on the families tuning never saw.

The zero-shot transfer check of :func:`~amv_calib.tuning.transfer_check`; its knobs are
tune's (:class:`~amv_calib.settings.TransferOptions` borrows them), and a step keeps its
study beside its folder as the tune step does.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from amv_calib.settings import TransferOptions
from amv_calib.stages._stage import Call, Input, Stage
from amv_calib.stages._tune import EPISODES, TUNE, quiet_optuna, study_of

__all__ = ["TRANSFER", "Transferred"]


def _run(call: Call) -> Transferred:
    from amv_calib.settings import champion_reference
    from amv_calib.tuning import transfer_check

    quiet_optuna(call.verbose)
    p, opts = call.inputs, call.options
    families = [f.strip() for f in str(p["tune_families"]).split(",") if f.strip()]
    storage, study = study_of(call, p["storage"], p["study_name"])
    res = transfer_check(
        p["episodes"], tune_families=families,
        calibrator=str(p["calibrator"]) if p["calibrator"] else champion_reference(),
        seed=call.seed, storage=storage, study_name=study, out_dir=call.out,
        progress=call.progress, **opts.arguments(transfer_check))
    return Transferred(res, call.out)


@dataclass
class Transferred:
    """A :class:`~amv_calib.tuning.TransferResult` and the folder it was written to."""

    result: Any
    out: Path | None


def _summary(t: Transferred) -> list[str]:
    from amv_calib.tuning import format_table

    res = t.result
    lines = [f"tuned on {res.tune_families}; reporting on unseen {res.test_families}"]
    if res.tune.thresholds is not None:
        lines.append("thresholds: " + json.dumps(res.tune.thresholds))
    lines.append(format_table({k: v.to_dict()["overall"] for k, v in res.unseen.items()},
                              {k: v.n for k, v in res.unseen.items()}))
    if res.seen is not None:
        lines += ["\ntuned gate on the tuning families (in-domain):",
                  format_table({"tuned": res.seen.to_dict()["overall"]}, {"tuned": res.seen.n})]
    return lines


def _outputs(t: Transferred) -> dict[str, Any]:
    res = t.result
    return {"dir": str(t.out), "transfer": str(Path(str(t.out)) / "transfer.json"),
            "tuned": res.tune.thresholds is not None, "tune_families": res.tune_families,
            "test_families": res.test_families}


TRANSFER = Stage(
    name="transfer",
    help="tune on some families, report on families never seen in tuning",
    description="Tune the gate on the episodes of --tune-families only, then replay the "
                "tuned gate on the other families: how the thresholds transfer to "
                "perturbations never seen in tuning.",
    inputs={
        "episodes": EPISODES,
        "tune_families": Input(help="comma-separated families to tune on", required=True),
        "calibrator": TUNE.inputs["calibrator"],
        "storage": TUNE.inputs["storage"],
        "study_name": Input(help="Optuna study name (default: one named after the tune "
                            "families)", step=False,
                            why="a step names its study after its inputs, so a killed run "
                            "resumes it"),
    },
    options=TransferOptions,
    out=TUNE.out,
    shared={"seed": "seed of the sampler, split and answer stream"},
    run=_run,
    summary=_summary,
    to_json=lambda t: t.result.to_dict(),
    outputs=_outputs,
    exit_code=lambda t: 0 if t.result.tune.thresholds is not None else 1,
    json_help="print the result as JSON",
    json_sort_keys=False,
)
