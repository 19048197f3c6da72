"""``label --engine spark`` against the single-machine label join on generated logs with
every case (tests/spark/_messy.py): the same claim rows (columns, dtypes, order), the same
report counts and unjoined rows, the same outcome statuses, episodes and verifiers; corrupt
lines raise the same error; Parquet decision logs; a folder of logs; the files streamed from
the executors' part files (``write_label_spark``) are the single-machine files, to the byte,
and a failed label removes its part files. The CLI and the capped driver are in
tests/spark/test_label_cli.py."""

from __future__ import annotations

import re
import warnings
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pandas as pd
import pytest

from amv_calib.claims import label_logs, write_label_folder
from amv_calib.exceptions import DataContractError
from amv_calib.spark import label_claims_spark, label_logs_spark, write_label_spark

from ._messy import same_folders, write_messy

#: Every case of the join many times over (the rarest, conflicting signals, some 20 times):
#: the equalities need the cases and many byte ranges, not the size (a Spark label's time
#: here is mostly its fixed cost per stage)
LINES = 60_000


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[Path], Path]:
    return write_messy(tmp_path_factory.mktemp("messy"), LINES, seed=5)


@pytest.fixture(scope="module")
def both(data: tuple[list[Path], Path], spark: Any,
         tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Any]:
    """The single-machine labels and files, and the Spark engine's files as ``label
    --engine spark --out DIR`` writes them (streamed from the executors' part files), with
    its summary line, report and episode report: one Spark label of the 60k-line log for
    the module (each takes tens of seconds; the in-memory API is checked on small logs)."""
    logs, outcomes = data
    folder = tmp_path_factory.mktemp("label")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the skipped lines
        local = label_logs(logs, outcomes, on_corrupt="skip", min_verifier_calls=50)
    write_label_folder(local, folder / "local", [str(outcomes)])
    # small byte ranges: many tasks (38), lines cut at range ends, many part files
    line, report, episodes = write_label_spark(
        logs, [outcomes], spark=spark, out=folder / "spark", min_verifier_calls=50,
        on_corrupt="skip", split_bytes=900 << 10)
    return local, SimpleNamespace(folder=folder, line=line, report=report, episodes=episodes)


def test_the_data_has_every_case(both: tuple[Any, Any]) -> None:
    rep = both[0].report.to_dict()
    assert rep["decision_lines"] >= LINES
    assert all(rep["skipped_lines"][k] > 0 for k in ("blank", "torn_last_line", "corrupt"))
    assert rep["repeated_entries"] > 0 and rep["ignored_signals"] > 0
    assert all(v > 0 for v in rep["unjoined"].values()), rep["unjoined"]
    assert all(v > 0 for v in rep["outcomes"].values()), rep["outcomes"]
    assert all(v > 0 for v in rep["joined_by_source"].values())
    assert both[0].episode_report.episodes > 0


def test_same_claim_rows(both: tuple[Any, Any]) -> None:
    local, on_spark = both
    claims = pd.read_parquet(on_spark.folder / "spark" / "claims.parquet")
    pd.testing.assert_frame_equal(claims, local.claims)  # values, dtypes, order


def test_same_files_report_and_unjoined_rows(both: tuple[Any, Any]) -> None:
    local, on_spark = both
    same_folders(on_spark.folder, local.report, on_spark.report)
    assert on_spark.episodes == local.episode_report
    assert on_spark.line["joined"] == local.report.joined
    assert on_spark.line["rows"] == len(local.claims)
    # the unjoined uses went to the CSV, not into the report
    assert on_spark.report.unjoined_uses.empty
    assert on_spark.report.unjoined_uses_file == \
        str(on_spark.folder / "spark" / "claims.unjoined.csv")


def _small_log(tmp_path: Path) -> Path:
    logs, _ = write_messy(tmp_path, 600, seed=3, files=1)
    return logs[0]


def test_a_corrupt_line_raises_the_same_error(tmp_path: Path, spark: Any) -> None:
    log = _small_log(tmp_path)
    with pytest.raises(DataContractError) as local:
        label_logs(log)
    with pytest.raises(DataContractError) as on_spark:
        label_claims_spark(log, spark=spark, split_bytes=20_000)
    assert str(on_spark.value) == str(local.value)


def test_parquet_decision_logs(tmp_path: Path, spark: Any) -> None:
    # a clean log (no blank or corrupt lines), so that row numbers are line numbers
    raw = _small_log(tmp_path).read_text().splitlines()
    lines = [ln for ln in raw[:-1] if ln.strip() and not ln.endswith("[")]
    jsonl = tmp_path / "clean.jsonl"
    jsonl.write_text("\n".join(lines) + "\n")
    pq = tmp_path / "clean.parquet"
    pd.read_json(jsonl, lines=True, dtype=False).to_parquet(pq, index=False)
    a, ra = label_logs(jsonl).claims, label_logs(jsonl).report
    b, rb = label_claims_spark(pq, spark=spark)
    assert rb.to_dict()["uses_read"] == ra.to_dict()["uses_read"]
    cols = ["claim_id", "timestamp", "violated", "label_weight", "use_id", "decision_line"]
    pd.testing.assert_frame_equal(b[cols], a[cols])


def test_a_folder_stands_for_its_logs(tmp_path: Path, spark: Any) -> None:
    folder = tmp_path / "logs"
    folder.mkdir()
    logs, _ = write_messy(folder, 800, seed=9, files=2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        local = label_logs(sorted(logs), on_corrupt="skip", min_verifier_calls=5)
    # the in-memory API (label_logs_spark reads the executors' part files back)
    held = label_logs_spark(folder, spark=spark, on_corrupt="skip", min_verifier_calls=5)
    a, b, rb = local.claims, held.claims, held.report
    assert [f["path"].rsplit("/", 1)[-1] for f in rb.decision_files] == \
        sorted(p.name for p in logs)
    assert len(b) == len(a)
    pd.testing.assert_frame_equal(b.drop(columns="decision_file"),
                                  a.drop(columns="decision_file"))
    ra, rb_ = local.report.to_dict(), rb.to_dict()
    assert {k: v for k, v in rb_.items() if k != "decision_files"} == \
        {k: v for k, v in ra.items() if k != "decision_files"}
    # the Spark engine's categoricals list only the values present (module docs)
    ua, ub = local.report.unjoined_uses.copy(), rb.unjoined_uses.copy()
    for c in ("decision_file", "action_id", "premise_id", "detail"):
        ua[c], ub[c] = ua[c].astype("str").str.rsplit("/", n=1).str[-1], \
            ub[c].astype("str").str.rsplit("/", n=1).str[-1]
    pd.testing.assert_frame_equal(ub, ua)
    pd.testing.assert_frame_equal(rb.outcome_details, local.report.outcome_details)
    assert held.episode_report == local.episode_report
    assert held.episodes.equals(local.episodes)
    assert held.episode_actions == local.episode_actions
    assert held.verifiers == local.verifiers


@pytest.mark.parametrize(("scratch", "master", "refused"), [
    (None, "local[2]", False), (None, "spark://head:7077", True), (None, "yarn", True),
    ("s3://bucket/scratch", "yarn", False)], ids=["local", "standalone", "yarn", "given"])
def test_a_cluster_label_needs_a_scratch_location(scratch: str | None, master: str,
                                                   refused: bool) -> None:
    # Without one the executors would write part files the driver cannot read: refused
    # before any Spark work, naming the option to give.
    from amv_calib.exceptions import ConfigError
    from amv_calib.spark._label import _check_scratch

    if refused:
        with pytest.raises(ConfigError, match=f"master '{master}'.*--spark-scratch"):
            _check_scratch(scratch, master)
    else:
        _check_scratch(scratch, master)


def test_a_failed_label_leaves_no_part_files(tmp_path: Path, spark: Any,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    # A failure after the executors wrote their part files (here: in the outcome report)
    # removes them, as the end of a successful label does.
    import amv_calib.spark._label as spark_label

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("outcome report failed")

    monkeypatch.setattr(spark_label, "outcome_report", broken)
    scratch = tmp_path / "scratch"
    with pytest.raises(RuntimeError, match="outcome report failed"):
        label_claims_spark(_small_log(tmp_path), spark=spark, on_corrupt="skip",
                           scratch=scratch)
    assert list(scratch.iterdir()) == []


def test_action_outcomes_label_only_one_premise_actions(tmp_path: Path, spark: Any) -> None:
    # the hand-worked case of tests/claims/test_action_outcome_bias.py, on Spark: an action
    # outcome labels the premise of a one-premise action, and neither premise of a
    # two-premise action whatever it says
    from amv_calib.contract import encode_record

    def rec(action: str, minute: int, *claims: str) -> bytes:
        return encode_record({
            "time": f"2026-12-01T00:{minute:02d}:00.000000Z", "action_id": action,
            "tool_name": "tool", "regime": "PROCEED",
            "premises": [{"id": f"p{i}", "claim_id": c, "recency_hours": 24.0,
                          "source_trust_score": 0.8, "model_confidence": 0.9,
                          "contradiction_flag": False, "p": 0.1}
                         for i, c in enumerate(claims)]})

    log = tmp_path / "d.jsonl"
    log.write_bytes(rec("two-bad", 0, "a", "b") + rec("two-ok", 1, "c", "d")
                    + rec("one-bad", 2, "e") + rec("one-ok", 3, "f"))
    outcomes = pd.DataFrame({"claim_id": [None] * 4,
                             "action_id": ["two-bad", "two-ok", "one-bad", "one-ok"],
                             "time": ["2026-12-01T00:10:00Z"] * 4,
                             "violated": [True, False, True, False]})
    claims, rep = label_claims_spark(log, outcomes, spark=spark, soft_labels="off")
    got = {(a, c): bool(v) for a, c, v in zip(claims["action_id"], claims["claim_id"],
                                              claims["violated"], strict=True)}
    assert got == {("one-bad", "e"): True, ("one-ok", "f"): False}
    assert rep.joined == 2 and rep.unjoined["ambiguous_action_outcome"] == 4
    assert rep.outcomes["used"] == 2 and rep.outcomes["ambiguous"] == 2
    rep.check()


def test_a_refusal_the_checks_do_not_share_is_an_error(tmp_path: Path, spark: Any,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    # The SQL join decides which uses break the data contract; the message of each comes
    # from the contract's checks. Were the two ever to disagree (here: a join that refuses
    # every use), both engines stop with the same error rather than write a refusal without
    # a reason.
    import amv_calib.claims._duckjoin as duckjoin
    import amv_calib.spark._sqlrun as sqlrun
    from amv_calib.claims._sql import join_statements
    from amv_calib.claims.engine import UNCHECKED_REFUSAL

    def refusing(*args: Any, **kwargs: Any) -> list[tuple[str, str]]:
        return [(name, "SELECT eid FROM entries" if name == "invalid_uses" else sql)
                for name, sql in join_statements(*args, **kwargs)]

    monkeypatch.setattr(duckjoin, "join_statements", refusing)
    monkeypatch.setattr(sqlrun, "join_statements", refusing)
    log = _small_log(tmp_path)
    with pytest.raises(RuntimeError, match=re.escape(UNCHECKED_REFUSAL)):
        label_logs(log, on_corrupt="skip")
    with pytest.raises(Exception, match=re.escape(UNCHECKED_REFUSAL)):
        label_claims_spark(log, spark=spark, on_corrupt="skip")
