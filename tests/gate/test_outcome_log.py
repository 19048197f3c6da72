"""OutcomeLog: records in the format `label` reads, with the decision log's append rules."""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from amv_calib.claims import label_logs, load_outcomes
from amv_calib.contract import seed_prior_calibrator
from amv_calib.gate import CandidateAction, Gate, MemoryClaim, OutcomeLog, Premise, Verifier
from amv_calib.gate._decision_log import JsonLinesAppender


def _claim(cid: str, recency: float) -> MemoryClaim:
    return MemoryClaim(id=cid, source_trust_score=0.7, model_confidence=0.9,
                       recency_hours=recency, contradiction_flag=False)


def test_round_trip_gate_outcomes_label(tmp_path: Path) -> None:
    """Three actions decided and logged, outcomes recorded as they would arrive; the label
    join gives the claims and episodes worked out by hand."""
    decisions, outcomes = tmp_path / "decisions.jsonl", tmp_path / "outcomes.jsonl"
    gate = Gate(calibrator=seed_prior_calibrator(), decision_log=decisions)
    bank = Verifier(id="bank-api", resolves_premise_ids=("iban",), execution_cost=0.2,
                    symmetric_reliability=0.95)
    a1 = CandidateAction(action_id="tx-1", tool_name="transfer", impact_cost_theta=20.0,
                         abstention_cost_kappa=4.0,
                         premises=(Premise(id="iban", claim=_claim("c1", 2.0)),))
    a2 = CandidateAction(action_id="tx-2", tool_name="transfer", impact_cost_theta=20.0,
                         abstention_cost_kappa=4.0,
                         premises=(Premise(id="iban", claim=_claim("c2", 300.0)),
                                   Premise(id="limit", claim=_claim("c3", 5.0))))
    a3 = CandidateAction(action_id="tx-3", tool_name="transfer", impact_cost_theta=300.0,
                         abstention_cost_kappa=4.0,
                         premises=(Premise(id="iban", claim=_claim("c4", 200.0)),))
    gate.evaluate(a1)
    gate.evaluate(a2, [bank])
    trace = gate.run(a3, [bank], lambda v, a: True)
    assert trace.verifications == 1  # the verifier's call is in the log
    with OutcomeLog(outcomes) as out:
        out.record(action_id="tx-1", violated=False, source="bank-webhook")  # all held
        out.record(action_id="tx-2", claim_id="c2", premise_id="iban", violated=True)
        out.record(claim_id="c3", violated=False)  # the claim's truth as of now
        out.record(action_id="tx-3", violated=False)
        assert out.records_written == 4
    labels = label_logs([decisions], outcomes)
    labels.report.check()
    labels.episode_report.check()
    got = labels.claims.sort_values("claim_id")
    assert list(got["claim_id"]) == ["c1", "c2", "c3", "c4"]
    assert list(got["violated"]) == [False, True, False, False]
    assert list(got["label_source"]) == ["outcome"] * 4
    assert labels.report.outcomes["used"] == 4
    assert labels.episode_report.episodes == 3
    episodes = {a: json.loads(e) for a, e in zip(labels.episode_actions,
                                                  labels.episodes.to_pylist(), strict=True)}
    assert [p["violated"] for p in episodes["tx-2"]["premises"]] == [True, False]
    assert [v["id"] for v in episodes["tx-3"]["verifiers"]] == ["bank-api"]


def test_record_format(tmp_path: Path) -> None:
    path = tmp_path / "o" / "outcomes.jsonl"
    log = OutcomeLog(path)
    rec = log.record(action_id="tx-9", violated=np.bool_(True), claim_id="c9",
                     time=datetime(2026, 12, 2, 11, 20, 11, 5, tzinfo=timezone(timedelta(hours=2))))
    log.record(claim_id="c9", violated=False, time="2026-12-02T10:00:00Z")
    log.close()
    lines = path.read_text(encoding="utf-8").splitlines()
    assert json.loads(lines[0]) == rec == {
        "time": "2026-12-02T09:20:11.000005Z", "action_id": "tx-9", "claim_id": "c9",
        "premise_id": None, "violated": True, "source": None}
    assert json.loads(lines[1])["time"] == "2026-12-02T10:00:00.000000Z"
    before = datetime.now(UTC)
    with OutcomeLog(path) as again:  # appends
        now = datetime.fromisoformat(again.record(action_id="x", violated=False)["time"])
    assert before <= now <= datetime.now(UTC)
    valid, invalid = load_outcomes(path)
    assert len(valid) == 3 and len(invalid) == 0
    with pytest.raises(OSError, match="outcome log .* is closed"):
        log.record(action_id="x", violated=True)


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"violated": True}, r"needs action_id or claim_id"),
    ({"action_id": "a", "violated": 1}, r"violated=1 must be a bool"),
    ({"action_id": "a", "violated": "false"}, r"violated='false' must be a bool"),
    ({"action_id": "", "violated": True}, r"action_id='' must be a non-empty string"),
    ({"action_id": 7, "violated": True}, r"action_id=7 must be a non-empty string"),
    ({"action_id": "a", "premise_id": "p1", "violated": True}, r"premise_id='p1' needs claim_id"),
    ({"action_id": "a", "violated": True, "time": "yesterday"}, r"time='yesterday' is not ISO"),
    ({"action_id": "a", "violated": True, "time": "2026-12-02T10:00:00"}, r"has no UTC offset"),
    ({"action_id": "a", "violated": True, "time": datetime(2026, 12, 2)}, r"has no UTC offset"),
    ({"action_id": "a", "violated": True, "time": 1.5e9}, r"must be a datetime"),
    ({"action_id": "a", "violated": True, "source": 3}, r"source=3 must be a string"),
], ids=["no-key", "int-violated", "text-violated", "empty-id", "int-id", "premise-no-claim",
        "bad-time", "naive-text", "naive-datetime", "epoch", "bad-source"])
def test_bad_records_are_refused_and_nothing_written(tmp_path: Path, kwargs: dict[str, Any],
                                                     match: str) -> None:
    path = tmp_path / "outcomes.jsonl"
    with OutcomeLog(path) as log, pytest.raises(ValueError, match=match):
        log.record(**kwargs)
    assert path.read_bytes() == b""


def test_the_suffix_label_reads_is_required(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"must end in \.jsonl"):
        OutcomeLog(tmp_path / "outcomes.csv")
    assert not (tmp_path / "outcomes.csv").exists()


def test_threads_never_interleave_inside_a_line(tmp_path: Path) -> None:
    path = tmp_path / "outcomes.jsonl"
    log = OutcomeLog(path)

    def write(k: int) -> None:
        for i in range(300):
            log.record(action_id=f"a{k}-{i}", claim_id=f"c{i}", violated=bool(i % 2),
                       source="x" * (i % 50))

    threads = [threading.Thread(target=write, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    log.close()
    lines = path.read_bytes().splitlines()
    assert len(lines) == 2400 == len({json.loads(x)["action_id"] for x in lines})
    valid, invalid = load_outcomes(path)
    assert len(valid) == 2400 and len(invalid) == 0


def test_shares_the_decision_logs_append_primitive(tmp_path: Path) -> None:
    """A crash left a torn line: the next OutcomeLog ends it first, as a DecisionLogWriter
    does, and label counts the fragment as one invalid record."""
    path = tmp_path / "outcomes.jsonl"
    log = OutcomeLog(path)
    assert type(log._log) is JsonLinesAppender
    log.record(action_id="a1", violated=False)
    log.close()
    with open(path, "ab") as fh:
        fh.write(b'{"time": "2026-12-02T10:00:00Z", "action_id": "a2", "viol')
    with OutcomeLog(path) as log:
        log.record(action_id="a3", violated=True)
    valid, invalid = load_outcomes(path)
    assert list(valid["action_id"]) == ["a1", "a3"]
    assert len(invalid) == 1 and "not a JSON object" in invalid["reason"].iloc[0]
