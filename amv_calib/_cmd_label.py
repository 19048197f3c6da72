"""``amv-calib label``: claim outcomes from gate decision logs and later outcome records.

    amv-calib label --decisions LOG [LOG ...] [--outcomes FILE [FILE ...]] --out CLAIMS
                    [--soft-labels posterior|off] [--skip-corrupt]

Writes ``CLAIMS`` (``.parquet``, ``.csv`` or ``.jsonl``), and beside it
``<stem>.join_report.json`` (the full report) and ``<stem>.unjoined.csv`` (every use that did
not become a row and every outcome record that labelled nothing, with the reason). Prints
the report summary as one JSON line.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

__all__ = ["register", "report_paths", "write_claims"]

_SUFFIXES = (".parquet", ".pq", ".csv", ".jsonl", ".ndjson")


def register(subparsers: Any) -> None:
    """Add the ``label`` sub-command."""
    p = subparsers.add_parser(
        "label",
        help="join gate decision logs with outcome records into claim outcomes",
        description="Join decision logs (one JSON line per gate decision) with outcome "
        "records that arrived later (claim_id and/or action_id, time, violated) into the "
        "claim-outcome table, one row per (claim, use). Verifier signals label uses without "
        "an outcome as posterior soft labels (label_weight). Every decision line, use and "
        "outcome record is accounted for in the printed report.",
    )
    p.add_argument("--decisions", nargs="+", required=True, metavar="LOG",
                   help="decision log files (JSON lines), in time order")
    p.add_argument("--outcomes", nargs="+", default=[], metavar="FILE",
                   help="outcome records (.jsonl, .csv or .parquet)")
    p.add_argument("--out", required=True, metavar="CLAIMS",
                   help="claims table to write (.parquet, .csv or .jsonl)")
    p.add_argument("--soft-labels", choices=("posterior", "off"), default="posterior",
                   help="label uses without an outcome by their verifier signals "
                   "(default: posterior)")
    p.add_argument("--skip-corrupt", action="store_true",
                   help="skip (and count) corrupt decision-log lines instead of failing")
    p.set_defaults(func=_run)


def report_paths(out: Path) -> tuple[Path, Path]:
    """``(<stem>.join_report.json, <stem>.unjoined.csv)`` beside the claims file ``out``."""
    stem = out.name[: -len(out.suffix)] if out.suffix else out.name
    return out.with_name(f"{stem}.join_report.json"), out.with_name(f"{stem}.unjoined.csv")


def write_claims(claims: Any, out: Path) -> None:
    """Write a claims DataFrame as Parquet, CSV or JSONL, chosen by the file ending."""
    from amv_calib._exceptions import DataContractError

    suffix = out.suffix.lower()
    out.parent.mkdir(parents=True, exist_ok=True)
    if suffix in (".parquet", ".pq"):
        claims.to_parquet(out, index=False)
    elif suffix == ".csv":
        claims.to_csv(out, index=False, date_format="%Y-%m-%dT%H:%M:%S.%fZ")
    elif suffix in (".jsonl", ".ndjson"):
        claims.to_json(out, orient="records", lines=True, date_format="iso", date_unit="us")
    else:
        raise DataContractError(
            f"--out {out}: unknown ending {out.suffix!r}; use one of {', '.join(_SUFFIXES)}"
        )


def _run(args: argparse.Namespace) -> int:
    import pandas as pd

    from amv_calib._exceptions import DataContractError
    from amv_calib.labels import label_claims

    out = Path(args.out)
    if out.suffix.lower() not in _SUFFIXES:
        raise DataContractError(
            f"--out {out}: unknown ending {out.suffix!r}; use one of {', '.join(_SUFFIXES)}"
        )
    for path in (*args.decisions, *args.outcomes):
        if not Path(path).is_file():
            raise DataContractError(f"input file {path} does not exist")
    claims, report = label_claims(
        args.decisions,
        args.outcomes or None,
        soft_labels=args.soft_labels,
        on_corrupt="skip" if args.skip_corrupt else "raise",
    )
    write_claims(claims, out)
    report_json, unjoined_csv = report_paths(out)
    summary = report.to_dict()
    full = {**summary, "outcome_files": list(args.outcomes), "out": str(out)}
    report_json.write_text(json.dumps(full, indent=2) + "\n", encoding="utf-8")
    uses = report.unjoined_uses
    outs = report.outcome_details
    outcome_names = list(args.outcomes)
    stamp = "%Y-%m-%dT%H:%M:%S.%fZ"
    # Written in two parts (uses, then outcome records) so that a log with millions of
    # unjoined uses is never materialised as one object table.
    pd.DataFrame({
        "kind": "use", "file": uses["decision_file"], "line": uses["decision_line"],
        "action_id": uses["action_id"], "premise_id": uses["premise_id"],
        "claim_id": uses["claim_id"], "time": uses["time"], "reason": uses["reason"],
        "detail": uses["detail"],
    }).to_csv(unjoined_csv, index=False, date_format=stamp)
    pd.DataFrame({
        "kind": "outcome",
        "file": [outcome_names[int(s)] for s in outs["source"]],
        "line": outs["row"], "action_id": outs["action_id"], "premise_id": None,
        "claim_id": outs["claim_id"], "time": outs["time"], "reason": outs["status"],
        "detail": outs["detail"],
    }).to_csv(unjoined_csv, index=False, date_format=stamp, mode="a", header=False)
    line = {k: v for k, v in summary.items() if k != "decision_files"}
    line.update(out=str(out), report=str(report_json), unjoined_csv=str(unjoined_csv))
    print(json.dumps(line))
    return 0
