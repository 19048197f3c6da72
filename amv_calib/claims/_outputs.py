"""What ``label`` and ``ingest`` write, and which command wrote which file of a folder.

Both commands write ``claims.parquet``. Pointed at the same folder, one would silently
replace the other's table and leave the other's reports (``claims.join_report.json``,
``rejects.csv``) describing data that is gone. So each folder they write into holds
``written_by.json``: file name -> the command that wrote it (no timestamps, so the same
run writes the same bytes). Before writing, a command refuses (:class:`OutputConflictError`,
naming the file and its writer) to replace a file another command wrote, unless told to
``overwrite``; then every file of that other command in the folder is removed first, so
nothing stale is left. Files the record does not list (written before the record existed,
or by hand) are replaced as before.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import pandas as pd

from amv_calib.exceptions import ConfigError, DataContractError

#: The record of a folder's writers.
WRITTEN_BY: Final = "written_by.json"
#: Endings of a claims table ``label --out`` writes as a file (anything else is a folder).
TABLE_SUFFIXES: Final = (".parquet", ".pq", ".csv", ".jsonl", ".ndjson")
#: What ``label --out DIR`` writes into the folder.
LABEL_FOLDER_FILES: Final = ("claims.parquet", "claims.join_report.json", "claims.unjoined.csv",
                             "episodes.jsonl", "verifiers.json")


class OutputConflictError(ConfigError):
    """A command would overwrite a file another command wrote (exit code 2 on the CLI)."""


def _record(folder: Path) -> dict[str, str]:
    path = folder / WRITTEN_BY
    if not path.is_file():
        return {}
    try:
        files = json.loads(path.read_text(encoding="utf-8")).get("files", {})
    except (OSError, ValueError, AttributeError) as exc:
        raise DataContractError(f"{path}: not a written_by record ({exc}); remove it") from exc
    return {str(k): str(v) for k, v in files.items()} if isinstance(files, Mapping) else {}


def _save(folder: Path, files: Mapping[str, str]) -> None:
    text = json.dumps({"files": dict(sorted(files.items()))}, indent=2) + "\n"
    tmp = folder / f".{WRITTEN_BY}.{os.getpid()}.tmp"
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, folder / WRITTEN_BY)


def claim_outputs(folder: str | os.PathLike[str], command: str, files: Iterable[str], *,
                  overwrite: bool = False) -> None:
    """Make room for ``command`` to write ``files`` into ``folder`` (module docs).

    Raises
    ------
    OutputConflictError
        A file of ``files`` exists and another command wrote it, and ``overwrite`` is false.
    """
    where = Path(folder)
    record = _record(where)
    names = list(files)
    others = {record[n] for n in names if n in record and record[n] != command
              and (where / n).exists()}
    if not others:
        return
    if not overwrite:
        name = next(n for n in names if record.get(n) in others and (where / n).exists())
        theirs = sorted(n for n, c in record.items() if c == record[name] and n != name)
        stale = f" and its {', '.join(theirs)} would describe data that is gone" if theirs \
            else ""
        raise OutputConflictError(
            f"{where / name} was written by `amv-calib {record[name]}`; `amv-calib {command}` "
            f"would overwrite it{stale}: pass --overwrite to replace all of that command's "
            f"files there, or write to another folder")
    for name, who in list(record.items()):
        if who in others:
            (where / name).unlink(missing_ok=True)
            del record[name]
    _save(where, record)


def record_outputs(folder: str | os.PathLike[str], command: str, files: Iterable[str]) -> None:
    """Note in ``folder/written_by.json`` that ``command`` wrote ``files``."""
    where = Path(folder)
    record = _record(where)
    record.update(dict.fromkeys(files, command))
    _save(where, record)


# ---------------------------------------------------------------------------------------------
# label's files
# ---------------------------------------------------------------------------------------------
def write_claims_table(claims: pd.DataFrame, out: Path) -> None:
    """Write a claims DataFrame as Parquet, CSV or JSONL, chosen by the file ending."""
    suffix = out.suffix.lower()
    out.parent.mkdir(parents=True, exist_ok=True)
    if suffix in (".parquet", ".pq"):
        claims.to_parquet(out, index=False)
    elif suffix == ".csv":
        claims.to_csv(out, index=False, date_format="%Y-%m-%dT%H:%M:%S.%fZ")
    elif suffix in (".jsonl", ".ndjson"):
        claims.to_json(out, orient="records", lines=True, date_format="iso", date_unit="us")
    else:
        raise unknown_table_ending(out)


def unknown_table_ending(out: Path) -> DataContractError:
    """The error for a claims table ``out`` whose ending names no known format."""
    return DataContractError(
        f"--out {out}: unknown ending {out.suffix!r}; use one of {', '.join(TABLE_SUFFIXES)}, "
        f"or a folder name without an ending"
    )


def label_report_paths(out: Path) -> tuple[Path, Path]:
    """``(<stem>.join_report.json, <stem>.unjoined.csv)`` beside the claims file ``out``."""
    stem = out.name[: -len(out.suffix)] if out.suffix else out.name
    return out.with_name(f"{stem}.join_report.json"), out.with_name(f"{stem}.unjoined.csv")


def write_join_report(report: Any, out: Path, outcome_files: Sequence[str],
                      extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Write the join report and the unjoined-records CSV beside the claims file ``out``;
    return the summary line (without the per-file details)."""
    report_json, unjoined_csv = label_report_paths(out)
    summary = report.to_dict()
    full = {**summary, **(extra or {}), "outcome_files": list(outcome_files), "out": str(out)}
    report_json.write_text(json.dumps(full, indent=2) + "\n", encoding="utf-8")
    uses = report.unjoined_uses
    outs = report.outcome_details
    names = list(outcome_files)
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
        "file": [names[int(s)] for s in outs["source"]],
        "line": outs["row"], "action_id": outs["action_id"], "premise_id": None,
        "claim_id": outs["claim_id"], "time": outs["time"], "reason": outs["status"],
        "detail": outs["detail"],
    }).to_csv(unjoined_csv, index=False, date_format=stamp, mode="a", header=False)
    line = {k: v for k, v in summary.items() if k != "decision_files"}
    line.update(extra or {})
    line.update(out=str(out), report=str(report_json), unjoined_csv=str(unjoined_csv))
    return line


def write_label_folder(result: Any, folder: str | os.PathLike[str],
                       outcome_files: Sequence[str]) -> dict[str, Any]:
    """Write what ``label --out DIR`` writes (:data:`LABEL_FOLDER_FILES`) from a
    :class:`~amv_calib.claims.LogLabels`; return the summary line. The caller claims the
    folder first (:func:`claim_outputs`)."""
    from amv_calib.claims._episodes import write_episodes_jsonl

    where = Path(folder)
    where.mkdir(parents=True, exist_ok=True)
    claims = where / "claims.parquet"
    write_claims_table(result.claims, claims)
    write_episodes_jsonl(result.episodes, where / "episodes.jsonl")
    ep = result.episode_report.to_dict()
    flagged = sorted(v for v, r in result.verifiers.items() if r["declared_outside_interval"])
    (where / "verifiers.json").write_text(json.dumps({
        "min_verifier_calls": result.episode_report.min_verifier_calls,
        "prior": "Beta(1, 1)", "interval": "equal-tailed 95%",
        "verifiers": result.verifiers}, indent=2) + "\n", encoding="utf-8")
    line = write_join_report(result.report, claims, outcome_files, extra={
        "episodes": ep, "verifiers_flagged": flagged})
    line.update(episodes_file=str(where / "episodes.jsonl"),
                verifiers_file=str(where / "verifiers.json"))
    record_outputs(where, "label", LABEL_FOLDER_FILES)
    return line
