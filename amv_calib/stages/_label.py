"""``label``: decision logs joined with outcome records into claims, episodes and verifiers.

One body for the command and the step: the inputs must be regular files (a FIFO would hang
the reader), the output folder's files are claimed from other commands unless
``overwrite``, and the join runs here or on Spark (``engine``), writing the same files. A
step fails when nothing was labelled (the steps after it would fail further from the cause).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Final, Literal

from amv_calib.exceptions import DataContractError, InsufficientDataError
from amv_calib.settings import LabelOptions
from amv_calib.stages._stage import Call, Input, Stage
from amv_calib.stages._text import compare_command, where

__all__ = ["DECISIONS", "LABEL", "require_inputs"]


def require_inputs(paths: Iterable[str]) -> None:
    """Exit 2 at once unless each path is a regular file (a FIFO would hang the reader)."""
    from amv_calib.contract import require_regular

    for path in paths:
        if not os.path.lexists(path):
            raise DataContractError(f"input file {path} does not exist")
        require_regular(path, what="input file")


def _run(call: Call) -> dict[str, Any]:
    from amv_calib import claims as cl

    opts, out = call.options, call.out_dir()
    decisions = [str(p) for p in call.inputs["decisions"]]
    outcomes = [str(p) for p in call.inputs["outcomes"] or []]
    as_table = out.suffix.lower() in cl.TABLE_SUFFIXES
    if not as_table and out.suffix and not out.is_dir():
        raise cl.unknown_table_ending(out)
    # an outcome file may be a URI (read whole through pyarrow), and on Spark a decision log
    # too (the executors open it; docs/scale.md)
    require_inputs(p for p in (*decisions, *outcomes)
                   if not ("://" in p and (call.engine == "spark" or p in outcomes)))
    on_corrupt: Literal["raise", "skip"] = "skip" if opts.skip_corrupt else "raise"
    names = [out.name, *(p.name for p in cl.label_report_paths(out))]
    if as_table:
        cl.claim_outputs(out.parent, "label", names, overwrite=opts.overwrite)
    else:
        cl.claim_outputs(out, "label", cl.LABEL_FOLDER_FILES, overwrite=opts.overwrite)
    line: dict[str, Any]
    if call.engine == "spark":  # the rows stream from the executors' part files to the files
        from amv_calib.spark import write_label_spark

        line = write_label_spark(decisions, outcomes, spark=call.spark(), out=out,
                                 min_verifier_calls=opts.min_verifier_calls,
                                 soft_labels=opts.soft_labels, on_corrupt=on_corrupt,
                                 scratch=call.spark_scratch)[0]
    elif not as_table:  # the rows written part by part, as for a table
        joined, result = cl.label_logs_parts(decisions, outcomes or None,
                                             min_verifier_calls=opts.min_verifier_calls,
                                             soft_labels=opts.soft_labels,
                                             on_corrupt=on_corrupt)
        line = cl.write_label_folder(result, out, outcomes, claim_parts=joined.claim_parts(),
                                     use_parts=joined.unjoined_parts())
    else:
        # the rows are written part by part, never held as whole tables
        joined = cl.join_logs(decisions, outcomes or None, soft_labels=opts.soft_labels,
                              on_corrupt=on_corrupt)
        line = cl.write_label_table(joined, out, outcomes)
    if as_table:
        cl.record_outputs(out.parent, "label", names)
    ep = line.get("episodes") or {}
    if call.step is not None and (not line.get("joined") or not ep.get("episodes")):
        raise InsufficientDataError(
            f"{call.where()}{line.get('joined', 0)} uses labelled and "
            f"{ep.get('episodes', 0)} episodes from {ep.get('actions_read', 0)} actions; "
            f"unlabelled by reason: "
            f"{ {k: v for k, v in (ep.get('unlabelled') or {}).items() if v} }")
    line["dir"] = str(out)
    return line


def _summary(line: Mapping[str, Any]) -> list[str]:
    """What ``label`` read, joined and wrote, for a person."""
    unjoined = {k: v for k, v in (line.get("unjoined") or {}).items() if v}
    by_source = ", ".join(f"{v:,} by {k}" for k, v in (line.get("joined_by_source") or {}).items())
    skipped = {k: v for k, v in (line.get("skipped_lines") or {}).items() if v}
    out = [f"read {line.get('decision_lines', 0):,} decision lines "
           f"({line.get('uses_read', 0):,} premise uses) and "
           f"{line.get('outcomes_read', 0):,} outcome records",
           f"  labelled {line.get('joined', 0):,} uses ({by_source or 'none'}); "
           f"{line.get('rows', 0):,} rows written"
           + (" (a soft label is two weighted rows)" if line.get("rows", 0) > line.get("joined", 0)
              else "")]
    if unjoined:
        out.append("  not labelled: " + ", ".join(f"{v:,} {k.replace('_', ' ')}"
                                                  for k, v in unjoined.items()))
    if skipped:
        out.append("  skipped lines: " + ", ".join(f"{v:,} {k.replace('_', ' ')}"
                                                   for k, v in skipped.items()))
    episodes = line.get("episodes")
    for key, what in (("out", "claims"), ("episodes_file", "episodes"),
                      ("verifiers_file", "verifiers"), ("report", "report"),
                      ("unjoined_csv", "unjoined")):
        if line.get(key):
            extra = (f" ({episodes['episodes']:,} replayable episodes of "
                     f"{episodes['actions_read']:,} actions)"
                     if key == "episodes_file" and isinstance(episodes, Mapping) else "")
            out.append(f"  {what + ':':<10} {where(line[key])}{extra}")
    out += _flagged_lines(line)
    if line.get("out"):
        out.append(f"next: {compare_command(Path(line['out']))}, or the retrain-from-logs "
                   f"pipeline")
    return out


def _flagged_lines(line: Mapping[str, Any]) -> list[str]:
    """A verifier whose declared reliability lies outside the interval its labelled answers
    give: what was declared, what was measured, and which one the episodes use."""
    flagged = line.get("verifiers_flagged") or []
    if not flagged or not line.get("verifiers_file"):
        return []
    try:
        verifiers = json.loads(Path(line["verifiers_file"]).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return [f"  flagged verifiers: {', '.join(flagged)} (declared reliability outside "
                f"the measured interval)"]
    out = []
    for name in flagged:
        v = (verifiers.get("verifiers") or {}).get(name) or {}
        r = v.get("reliability") or {}
        if not r:
            out.append(f"  flagged: verifier {name} (declared reliability outside the measured "
                       f"interval)")
            continue
        out.append(f"  flagged: verifier {name} declares reliability {v.get('declared'):g}, "
                   f"its labelled answers give {r['estimate']:.3f} [{r['lower']:.3f}, "
                   f"{r['upper']:.3f}]; the episodes use the "
                   + ("measured one" if v.get("used_in_episodes") == "estimate"
                      else "declared one"))
    return out


def _outputs(line: Mapping[str, Any]) -> dict[str, Any]:
    out = Path(line["dir"])
    ep = line["episodes"]
    return {"dir": str(out), "claims": str(out / "claims.parquet"),
            "episodes": str(out / "episodes.jsonl"), "verifiers": str(out / "verifiers.json"),
            "report": str(out / "claims.join_report.json"), "joined": line["joined"],
            "episodes_written": ep["episodes"], "actions_read": ep["actions_read"],
            "verifiers_flagged": line["verifiers_flagged"]}


#: The decision logs a stage reads (label and monitor).
DECISIONS: Final = Input(help="decision log files (JSON lines), in time order", type=list,
                         required=True, path=True, nargs="+", metavar="LOG")

LABEL = Stage(
    name="label",
    help="join gate decision logs with outcome records into claims, episodes and "
    "verifier reliabilities",
    description="Join decision logs (one JSON line per gate decision) with outcome "
    "records that arrived later (claim_id and/or action_id, time, violated) into the "
    "claim-outcome table, one row per (claim, use). Verifier signals label uses without "
    "an outcome as posterior soft labels (label_weight). With --out DIR it also writes "
    "DIR/episodes.jsonl (every action whose premises all have an outcome, replayable by "
    "tune and certify) and DIR/verifiers.json (each verifier's answers against the "
    "outcomes and its estimated reliability). Every decision line, use, action and "
    "outcome record is accounted for in the printed report.",
    inputs={
        "decisions": DECISIONS,
        "outcomes": Input(help="outcome records (.jsonl, .csv or .parquet) (default: none: "
                          "verifier signals only)", type=list, default=[], path=True,
                          nargs="+", metavar="FILE"),
    },
    options=LabelOptions,
    out=Input(help="a folder (claims.parquet, episodes.jsonl, verifiers.json and the "
              "reports), or a claims table to write (.parquet, .csv or .jsonl; no episodes)",
              required=True, metavar="DIR|CLAIMS"),
    shared={"engine": "where the join runs: local (this process, default) or spark (the "
                      "same rows, report and episodes, on --spark-master; docs/scale.md)",
            "spark_master": None, "spark_scratch": None},
    run=_run,
    summary=_summary,
    to_json=lambda line: {k: v for k, v in line.items() if k != "dir"},
    outputs=_outputs,
)
