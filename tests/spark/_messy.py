"""Generated decision logs and outcomes with every case of the label join: actions logged
several times, records without ``action_id``, premises without an id or a claim id, entries
that break the data contract, unparseable times, blank, corrupt and torn lines, verifier
signals (repeated in later records, perfect, contradicting, with bad reliabilities) and all
three kinds of outcome record, including conflicts and invalid ones."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any, Final

import numpy as np
import pandas as pd

from amv_calib.claims import label_logs, write_label_folder
from amv_calib.spark import write_label_spark

_T0 = np.datetime64("2026-12-01T00:00:00", "s")


def _iso(second: int) -> str:
    return str(_T0 + np.timedelta64(int(second), "s")) + "Z"


#: Memory kinds a premise of :func:`write_messy` gives with ``kinds``: kinds, null, and values
#: the contract's rule refuses (another type, blank, padded, too long, both spellings
#: differing are drawn below).
_KINDS: Final = ("preference", "event", "fact", "\u4e8b\u4ef6", "\U0001F4C5" * 64, None, 3,
                 True, "", "   ", " event", "event\u00a0", "k" * 65, {"a": 1}, ["event"])


def write_messy(folder: Path, n_lines: int, *, seed: int = 5, files: int = 2,
                kinds: bool = False) -> tuple[list[Path], Path]:
    """``files`` decision logs of about ``n_lines`` lines in all, and one outcome CSV;
    ``kinds``: premises also give memory kinds (their own or their claim's, either
    spelling, some the rule refuses). Without it the logs are those written before kinds
    were read, byte for byte."""
    rng = np.random.default_rng(seed)
    n_claims = max(20, n_lines // 6)
    n_actions = max(10, int(n_lines * 0.8))
    paths: list[Path] = []
    per_file = n_lines // files
    outcome_rows: list[dict[str, Any]] = []
    line_no = 0
    for f in range(files):
        lines: list[str] = []
        for _ in range(per_file):
            line_no += 1
            u = rng.random()
            if u < 0.002:
                lines.append("")
                continue
            if u < 0.004:
                lines.append('{"time": "2026-12-01T00:00:00Z", "premises": [')
                continue
            t = line_no * 10 + int(rng.integers(0, 5))
            action = f"a{int(rng.integers(0, n_actions))}" if rng.random() < 0.97 else None
            prems = []
            for j in range(int(rng.integers(0, 4))):
                pm: dict[str, Any] = {
                    "id": f"p{j}", "claim_id": f"c{int(rng.integers(0, n_claims))}",
                    "recency_hours": round(float(rng.gamma(1.5, 100.0)), 3),
                    "source_trust_score": round(float(rng.random()), 4),
                    "model_confidence": round(float(rng.random()), 4),
                    "contradiction_flag": bool(rng.random() < 0.1),
                    "p": round(float(rng.random() * 0.4), 5)}
                w = rng.random()
                if w < 0.01:
                    del pm["id"]
                elif w < 0.015:
                    del pm["id"]
                    del pm["claim_id"]
                elif w < 0.03:
                    pm["source_trust_score"] = 1.5
                elif w < 0.035:
                    pm["recency_hours"] = -1.0
                elif w < 0.04:
                    pm["p"] = None
                if kinds and (f == 0 or len(lines) > per_file // 4):
                    # the last file: no kind in its first quarter (the compiled extraction
                    # reads it), then kinds of JSON strings alone (it, or pyarrow, reads them)
                    _add_kind(pm, rng, strings_only=f > 0)
                prems.append(pm)
            rec: dict[str, Any] = {"time": _iso(t), "action_id": action, "tool_name": "tool",
                                   "premises": prems, "regime": "PROCEED" if rng.random() < 0.9
                                   else "ABSTAIN",
                                   "calibrator": {"name": "g", "version": str(int(
                                       rng.integers(1, 3)))},
                                   "theta": 100.0, "kappa": 3.0,
                                   "verifiers": [{"id": "v", "resolves_premise_ids": ["p0"],
                                                  "execution_cost": 0.2,
                                                  "symmetric_reliability": 0.9}]}
            if rng.random() < 0.003:
                rec["time"] = "not a time"
            if prems and rng.random() < 0.3:
                calls = []
                for _ in range(int(rng.integers(1, 3))):
                    r = float(rng.choice([0.9, 0.8, 0.95, 1.0, 0.4]))
                    calls.append({"verifier": str(rng.choice(["v", "w"])),
                                  "signals": {f"p{int(rng.integers(0, 4))}": bool(
                                      rng.random() < 0.6)},
                                  "cost": 0.1, "reliability": r})
                rec["verifier_calls"] = calls
            lines.append(json.dumps(rec))
            # outcomes
            for pm in prems:
                if "claim_id" not in pm or rng.random() > 0.25:
                    continue
                k = rng.random()
                ot = _iso(t + int(rng.integers(-30, 600)))
                v = bool(rng.random() < 0.2)
                if k < 0.4:
                    outcome_rows.append({"claim_id": pm["claim_id"], "action_id": "",
                                         "time": ot, "violated": v})
                elif k < 0.7 and action:
                    outcome_rows.append({"claim_id": pm["claim_id"], "action_id": action,
                                         "time": ot, "violated": v})
                elif action:
                    outcome_rows.append({"claim_id": "", "action_id": action, "time": ot,
                                         "violated": v})
        text = "\n".join(lines) + "\n"
        if f == files - 1:
            text += '{"time": "2026-12-01T00:00:00Z", "premi'  # torn last line
        path = folder / f"decisions-{f}.jsonl"
        path.write_text(text, encoding="utf-8")
        paths.append(path)
    # duplicates with other values (conflicts), and a few invalid rows
    extra = [dict(r, violated=not r["violated"]) for r in outcome_rows[: len(outcome_rows)
                                                                        // 50]]
    extra += [{"claim_id": "c1", "action_id": "", "time": "soon", "violated": True},
              {"claim_id": "", "action_id": "", "time": _iso(5), "violated": False},
              {"claim_id": "c2", "action_id": "", "time": _iso(5), "violated": "maybe"}]
    frame = pd.DataFrame(outcome_rows + extra)
    frame = frame.sample(frac=1.0, random_state=seed).reset_index(drop=True)
    out = folder / "outcomes.csv"
    frame.to_csv(out, index=False)
    return paths, out


def _add_kind(pm: dict[str, Any], rng: np.random.Generator, strings_only: bool) -> None:
    """A memory kind for premise ``pm``: none (a third), its own, its claim's, or both
    spellings (sometimes differing); of :data:`_KINDS`, or those that are strings or null."""
    u = rng.random()
    pool = [k for k in _KINDS if k is None or isinstance(k, str)] if strings_only \
        else list(_KINDS)
    k = pool[int(rng.integers(0, len(pool)))]
    if u < 0.33:
        return
    if u < 0.6:
        pm["memory_kind"] = k
    elif u < 0.75:
        pm["memoryKind"] = k
    elif u < 0.9:
        claim: dict[str, Any] = {"id": pm.get("claim_id")}
        claim["memoryKind" if rng.random() < 0.5 else "memory_kind"] = k
        pm["claim"] = claim
    else:
        pm["memory_kind"] = k
        pm["memoryKind"] = k if rng.random() < 0.7 else "other"


def same_report_file(a: Path, b: Path) -> None:
    """The join reports ``a`` and ``b`` say the same, but for the output path they name."""
    ra, rb = json.loads(a.read_text()), json.loads(b.read_text())
    assert {k: v for k, v in rb.items() if k != "out"} == \
        {k: v for k, v in ra.items() if k != "out"}


#: The files of a label folder that one machine and Spark write byte for byte the same.
FOLDER_FILES: Final = ("claims.parquet", "claims.unjoined.csv", "episodes.jsonl",
                       "verifiers.json")


def label_both(spark: Any, logs: Any, outcomes: Path, folder: Path, *,
               min_verifier_calls: int, split_bytes: int) -> tuple[Any, Any]:
    """Label ``logs`` with ``outcomes`` (corrupt lines skipped) on one machine into
    ``folder / "local"`` and on Spark, in byte ranges of ``split_bytes``, into
    ``folder / "spark"``; the one machine's labels and Spark's report."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the skipped lines
        local = label_logs(logs, outcomes, on_corrupt="skip",
                           min_verifier_calls=min_verifier_calls)
    write_label_folder(local, folder / "local", [str(outcomes)])
    _, report, _ = write_label_spark(logs, [outcomes], spark=spark, out=folder / "spark",
                                     min_verifier_calls=min_verifier_calls,
                                     on_corrupt="skip", split_bytes=split_bytes)
    return local, report


def same_folders(folder: Path, local_report: Any, spark_report: Any) -> None:
    """``folder / "spark"`` holds :data:`FOLDER_FILES` byte for byte as ``folder /
    "local"``, and the two join reports say the same."""
    for name in FOLDER_FILES:  # the unjoined rows, outcome statuses, episodes, verifiers
        assert (folder / "spark" / name).read_bytes() == \
            (folder / "local" / name).read_bytes(), name
    same_report_file(folder / "local" / "claims.join_report.json",
                     folder / "spark" / "claims.join_report.json")
    assert spark_report.to_dict() == local_report.to_dict()
