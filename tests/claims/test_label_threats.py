"""Attacks on label replayed: formula cells escaped in every CSV it writes, malformed outcomes
and empty or undecodable inputs answered clearly, ambiguous premises refused, claim ids
read alike from logs and outcomes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

# -- CSV injection in label's outputs --------------------------------------------------------------
_FORMULAS = ('=HYPERLINK("http://evil","click")', "@SUM(1+1)", "+cmd|' /C calc'!A0",
             "-2+3")


def _formula_log(tmp_path: Path) -> tuple[Path, Path]:
    """A decision log and outcomes whose ids are spreadsheet formulas."""
    from amv_calib.gate import encode_record

    lines = []
    for i, text in enumerate(_FORMULAS):
        lines.append(encode_record({
            "time": f"2026-01-0{i + 1}T00:00:00Z", "action_id": f"{text}-a", "theta": 5.0,
            "kappa": 1.0, "regime": "PROCEED",
            "premises": [{"id": "p", "claim_id": text, "recency_hours": 1.0,
                          "source_trust_score": 0.5, "model_confidence": 0.5,
                          "contradiction_flag": False, "p": 0.1},
                         {"id": "q", "claim_id": f"{text}-unjoined", "recency_hours": 1.0,
                          "source_trust_score": 0.5, "model_confidence": 0.5,
                          "contradiction_flag": False, "p": 0.1}]}))
    log = tmp_path / "decisions.jsonl"
    log.write_bytes(b"".join(lines))
    outcomes = tmp_path / "outcomes.csv"
    pd.DataFrame({"claim_id": [*_FORMULAS, "=never-used"], "action_id": None,
                  "time": "2026-02-01T00:00:00Z", "violated": "true"}
                 ).to_csv(outcomes, index=False)
    return log, outcomes


def _csv_cells(path: Path) -> list[dict[str, str]]:
    import csv as csv_module

    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv_module.DictReader(fh))


@pytest.mark.parametrize("out", ["claims.csv", "folder"], ids=["label-out-csv", "label-folder"])
def test_label_csv_files_are_spreadsheet_safe(tmp_path: Path, out: str) -> None:
    # Attack: a claim_id of =HYPERLINK(...) or @SUM(1+1) appeared raw in claims.unjoined.csv
    # and in `label --out x.csv`, to run as a formula when opened. Now every CSV the product
    # writes for people escapes such a cell as rejects.csv does (a leading ').
    from amv_calib.cli import main

    log, outcomes = _formula_log(tmp_path)
    target = tmp_path / "out" / out
    assert main(["label", "--decisions", str(log), "--outcomes", str(outcomes), "--out",
                 str(target)]) == 0
    unjoined = target.with_name("claims.unjoined.csv") if out.endswith(".csv") \
        else target / "claims.unjoined.csv"
    files = [unjoined, target] if out.endswith(".csv") else [unjoined]
    for path in files:
        cells = _csv_cells(path)
        assert cells
        numbers = {"line", "recency_hours", "source_trust_score", "model_confidence", "p_true",
                   "label_weight", "p_logged", "theta", "kappa"}
        for row in cells:
            for key, value in row.items():
                if key not in numbers:
                    assert not value.startswith(("=", "+", "-", "@", "\t", "\r")), (path, value)
    ids = {row["claim_id"] for row in _csv_cells(unjoined)}
    assert "'=never-used" in ids and "'@SUM(1+1)-unjoined" in ids
    if out.endswith(".csv"):
        assert {row["claim_id"] for row in _csv_cells(target)} == {"'" + t for t in _FORMULAS}
        # the lossless table keeps the ids as they are
        lossless = tmp_path / "out" / "claims.parquet"
        assert main(["label", "--decisions", str(log), "--outcomes", str(outcomes), "--out",
                     str(lossless), "--overwrite"]) == 0
        assert set(pd.read_parquet(lossless)["claim_id"]) == set(_FORMULAS)


# -- tracebacks instead of clear errors ------------------------------------------------------------
_OUTCOMES_HEAD = b"claim_id,action_id,time,violated\n"


def _label(tmp_path: Path, log: Path, *outcomes: Path,
           extra: tuple[str, ...] = ()) -> tuple[int, Path]:
    from amv_calib.cli import main

    out = tmp_path / "out" / "claims.parquet"
    argv = ["label", "--decisions", str(log), "--out", str(out), *extra]
    if outcomes:
        argv += ["--outcomes", *map(str, outcomes)]
    return main(argv), out


def _join_report(out: Path) -> dict[str, Any]:
    report: dict[str, Any] = json.loads(out.with_name("claims.join_report.json").read_text())
    return report


@pytest.mark.parametrize("outcome", ["extra-field", "missing-field", "bad-utf8-csv",
                                     "bad-utf8-jsonl"])
def test_malformed_outcome_rows_are_rejected_with_their_line(
        tmp_path: Path, examples_dir: Path, outcome: str) -> None:
    # Attack: an outcomes CSV row with an extra field, or bad UTF-8 in the outcomes, gave a
    # traceback (exit 1); pandas also shifted the columns of a lone row with one field too
    # many without a word. Now the row is an invalid outcome with its line and reason.
    good = b"mem-iban-alice,,2026-11-04T00:00:00Z,false\n"
    bad, reason = {
        "extra-field": (b"c2,,2026-11-04T00:00:00Z,true,EXTRA\n",
                        "line 3: the row has 5 fields, the header 4"),
        "missing-field": (b"c2,,2026-11-04T00:00:00Z\n",
                          "line 3: the row has 3 fields, the header 4"),
        "bad-utf8-csv": (b"c\xff2,,2026-11-04T00:00:00Z,true\n", "line 3: not UTF-8 text"),
        "bad-utf8-jsonl": (b'{"claim_id": "c\xff2", "time": "2026-11-04T00:00:00Z", '
                           b'"violated": true}\n', "utf-8"),
    }[outcome]
    if outcome.endswith("jsonl"):
        outcomes = tmp_path / "outcomes.jsonl"
        outcomes.write_bytes(b'{"claim_id": "mem-iban-alice", "time": "2026-11-04T00:00:00Z",'
                             b' "violated": false}\n' + bad)
    else:
        outcomes = tmp_path / "outcomes.csv"
        outcomes.write_bytes(_OUTCOMES_HEAD + good + bad)
    code, out = _label(tmp_path, examples_dir / "decisions.jsonl", outcomes)
    assert code == 0
    report = _join_report(out)
    assert report["outcomes_read"] == 2 and report["outcomes"]["invalid"] == 1
    assert report["outcomes"]["used"] == 1  # the good row was read as it is
    details = pd.read_csv(out.with_name("claims.unjoined.csv"))
    invalid = details[(details["kind"] == "outcome") & (details["reason"] == "invalid")]
    assert invalid["line"].tolist() == [2] and reason in invalid["detail"].iloc[0]


def test_empty_inputs_and_bad_utf8_logs_answer_clearly(
        tmp_path: Path, examples_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Attack: label with an empty decision log, an empty outcomes file, or bad UTF-8 in the
    # log (even with --skip-corrupt) gave tracebacks. Now: exit 2 naming the file (and the
    # line) with nothing written, or the input read for what it holds.
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    code, out = _label(tmp_path, empty)
    assert code == 2 and not out.parent.exists()
    assert f"no decision record to label in {empty} (0 lines" in capsys.readouterr().err
    log = examples_dir / "decisions.jsonl"
    for name in ("none.csv", "none.jsonl"):
        (tmp_path / name).write_bytes(b"")
        code, out = _label(tmp_path, log, tmp_path / name, extra=("--overwrite",))
        assert code == 0 and _join_report(out)["outcomes_read"] == 0
    capsys.readouterr()
    lines = log.read_bytes().split(b"\n")
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b"\n".join([lines[0], b'{"action_id": "x\xff"}', *lines[1:]]))
    code, out = _label(tmp_path / "b", bad)
    assert code == 2 and not out.parent.exists()
    assert f"{bad}: line 2 is not a JSON object ('utf-8' codec" in capsys.readouterr().err
    code, out = _label(tmp_path / "c", bad, extra=("--skip-corrupt",))
    assert code == 0 and _join_report(out)["skipped_lines"]["corrupt"] == 1


# -- premises merged or ids read apart -------------------------------------------------------------
def test_logged_action_repeating_a_premise_id_is_refused_not_merged(tmp_path: Path) -> None:
    # Attack: a logged action with two premises of id "p" kept only the second premise's
    # use, silently. Now the record's uses are invalid, with the reason.
    from amv_calib.claims import label_claims
    from amv_calib.gate import encode_record

    prem = {"recency_hours": 1.0, "source_trust_score": 0.5, "model_confidence": 0.5,
            "contradiction_flag": False, "p": 0.1}
    log = tmp_path / "decisions.jsonl"
    log.write_bytes(b"".join(encode_record({
        "time": "2026-01-01T00:00:00Z", "action_id": a, "theta": 5.0, "kappa": 1.0,
        "regime": "PROCEED",
        "premises": [{"id": "p", "claim_id": "c1", **prem}, {"id": second, "claim_id": "c2",
                                                              **prem},
                     {"id": "r", "claim_id": "c3", **prem}]})
        for a, second in (("twice", "p"), ("fine", "q"))))
    outcomes = pd.DataFrame({"claim_id": ["c1", "c2", "c3"], "action_id": None,
                             "time": "2026-02-01T00:00:00Z", "violated": [True, False, False]})
    for columnar in (True, False):
        claims, report = label_claims(log, outcomes, columnar=columnar)
        assert sorted(claims["action_id"].astype(str)) == ["fine"] * 3
        assert report.unjoined["invalid_use"] == 2  # p (once, the other merged) and r
        bad = report.unjoined_uses
        assert set(bad["action_id"].astype(str)) == {"twice"}
        assert set(bad["detail"].astype(str)) == {
            "the record gives premise id 'p' to two premises (which one a label would be for "
            "is ambiguous)"}


def test_label_strips_claim_ids_of_logs_and_outcomes_alike(tmp_path: Path) -> None:
    from amv_calib.claims import label_claims
    from amv_calib.gate import encode_record

    log = tmp_path / "decisions.jsonl"
    log.write_bytes(encode_record({
        "time": "2026-01-01T00:00:00Z", "action_id": "a", "theta": 5.0, "kappa": 1.0,
        "regime": "PROCEED", "premises": [{"id": "p", "claim_id": " c1 ", "recency_hours": 1.0,
                                           "source_trust_score": 0.5, "model_confidence": 0.5,
                                           "contradiction_flag": False, "p": 0.1}]}))
    outcomes = pd.DataFrame({"claim_id": ["c1\t"], "action_id": None,
                             "time": "2026-02-01T00:00:00Z", "violated": [True]})
    for columnar in (True, False):
        claims, report = label_claims(log, outcomes, columnar=columnar)
        assert claims["claim_id"].tolist() == ["c1"] and report.joined == 1
