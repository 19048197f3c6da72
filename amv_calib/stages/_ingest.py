"""``ingest``: claim outcomes validated into ``claims.parquet`` and ``rejects.csv``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from amv_calib.exceptions import ConfigError, InsufficientDataError
from amv_calib.settings import ADAPTERS, IngestOptions, resolve_adapter
from amv_calib.stages._stage import Call, Input, Stage
from amv_calib.stages._text import compare_command, where

__all__ = ["INGEST"]


def _run(call: Call) -> dict[str, Any]:
    """Validate the input into ``call.out``; the ingest summary as a dict."""
    from amv_calib.claims import DEFAULT_CHUNKSIZE, ingest_file

    p, opts = call.inputs, call.options
    source: Any = p["input"]
    if p["adapter"] is not None:
        if p["format"] is not None:
            raise ConfigError(f"{call.where()}{call.key('format')} does not apply with "
                              f"{call.key('adapter')} (the adapter reads "
                              f"{'input' if call.step else 'INPUT'})")
        source = resolve_adapter(p["adapter"])(Path(p["input"]))
    summary = ingest_file(source, call.out_dir(), format=p["format"],
                          chunksize=opts.chunksize or DEFAULT_CHUNKSIZE,
                          overwrite=opts.overwrite)
    if call.step is not None and summary.accepted == 0:
        # the steps after this one would fail on an empty table, further from the cause
        raise InsufficientDataError(f"no row of {Path(p['input']).name} was accepted; "
                                    f"see rejects.csv")
    out: dict[str, Any] = summary.to_dict()
    return out


def _summary(d: dict[str, Any]) -> list[str]:
    from amv_calib.claims import LABEL_COLUMNS

    lines = [f"ingested {d['read']:,} rows of {d['input']} ({d['format']}): "
             f"{d['accepted']:,} accepted, {d['rejected']:,} rejected"]
    if d["out"] is not None:
        lines.append(f"  claims:  {where(Path(d['out']) / 'claims.parquet')}")
        lines.append(f"  rejects: {where(Path(d['out']) / 'rejects.csv')} (each row with its "
                     "number and reason)")
    for reason, n in d["rejected_by_reason"].items():
        lines.append(f"  rejected {n:,}: {reason}")
    # label's provenance columns are known: left out of the claims table, not "ignored"
    unknown = [c for c in d["ignored_columns"] if c not in LABEL_COLUMNS]
    if unknown:
        lines.append(f"  ignored columns: {', '.join(unknown)}")
    if d["out"] is not None:
        lines.append(f"next: {compare_command(Path(d['out']) / 'claims.parquet')} (fit and "
                     f"compare the calibrators)")
    return lines


def _outputs(d: dict[str, Any]) -> dict[str, Any]:
    out = Path(d["out"])
    return {"claims": str(out / "claims.parquet"), "rejects": str(out / "rejects.csv"),
            "read": d["read"], "accepted": d["accepted"], "rejected": d["rejected"]}


INGEST = Stage(
    name="ingest",
    help="validate claim outcomes into DIR/claims.parquet and DIR/rejects.csv",
    description=(
        "Read claim outcomes (CSV, Parquet, a directory of Parquet files, or JSONL), "
        "validate every row, write the accepted rows to DIR/claims.parquet and the "
        "rejected ones, each with its row number and reason, to DIR/rejects.csv. "
        "Prints the counts and where the files went (--json: one object with read, "
        "accepted, rejected, rejected_by_reason, out). "
        "Exit code 2 if required columns are missing."
    ),
    inputs={
        "input": Input(help="input file or Parquet directory", required=True, path=True,
                       positional=True, metavar="INPUT"),
        "format": Input(help="input format (default: from the file ending)",
                        choices=("csv", "parquet", "jsonl")),
        "adapter": Input(
            help="read INPUT through an adapter that turns a memory-store export into claim "
            f"outcomes (available: {', '.join(sorted(ADAPTERS)) or 'none'}; default: "
            # not choices: the registry may grow after import; resolve_adapter names the known
            "INPUT is a claim table)", metavar="NAME"),
    },
    options=IngestOptions,
    out=Input(help="output directory", required=True, metavar="DIR"),
    run=_run,
    summary=_summary,
    to_json=lambda d: d,
    outputs=_outputs,
)
