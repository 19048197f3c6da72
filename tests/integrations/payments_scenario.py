"""The scripted payments scenario both framework tests run: a guarded transfer tool called for
Alice (fresh memory: PROCEED), Bob (stale, contradicted: ABSTAIN) and Carol (doubtful: VERIFY
through the bank, then PROCEED or ABSTAIN by its answer)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from amv_calib.claims import LogLabels, label_logs
from amv_calib.gate import CandidateAction, MemoryClaim, OutcomeLog, Premise, Verifier

MEMORY = {
    "alice": MemoryClaim(id="iban-alice", statement="Alice's IBAN is DE02100100109307118603",
                         source_trust_score=0.9, model_confidence=0.95, recency_hours=2.0,
                         contradiction_flag=False),
    "bob": MemoryClaim(id="iban-bob", statement="Bob's IBAN is DE02300209000106531065",
                       source_trust_score=0.5, model_confidence=0.7, recency_hours=900.0,
                       contradiction_flag=True),
    "carol": MemoryClaim(id="iban-carol", statement="Carol's IBAN is DE02120300000000202051",
                         source_trust_score=0.5, model_confidence=0.7, recency_hours=300.0,
                         contradiction_flag=False),
}
BANK = Verifier(id="bank-api", resolves_premise_ids=("payee_iban",), execution_cost=0.2,
                symmetric_reliability=0.95)
#: What the scripted model asks for, in order: (call id, payee, amount).
CALLS = (("call-1", "alice", 100.0), ("call-2", "bob", 250.0), ("call-3", "carol", 80.0))
PROMPT = "Pay Alice 100, Bob 250 and Carol 80."


class Payments:
    """The agent's side: memory -> actions, the bank as verifier, the transfers made."""

    def __init__(self, carol_iban_ok: bool) -> None:
        self.carol_iban_ok = carol_iban_ok
        self.transfers: list[tuple[str, float]] = []
        self.bank_calls: list[str] = []

    def to_action(self, tool_name: str, arguments: Any, context: Any) -> CandidateAction:
        claim = MEMORY[arguments["payee"]]  # an unknown payee raises: the call is refused
        return CandidateAction(
            action_id=context.tool_call_id, tool_name=tool_name, arguments=dict(arguments),
            impact_cost_theta=float(arguments["amount"]), abstention_cost_kappa=5.0,
            premises=(Premise(id="payee_iban", claim=claim),))

    def bank(self, action: CandidateAction) -> bool:
        payee = str(action.arguments["payee"])
        self.bank_calls.append(payee)
        return {"alice": True, "bob": False, "carol": self.carol_iban_ok}[payee]

    def transfer(self, payee: str, amount: float) -> str:
        self.transfers.append((payee, amount))
        return f"sent {amount:.2f} EUR to {payee}"


def check_after_run(tmp_path: Path, payments: Payments) -> None:
    """The decision log of the three calls, then outcomes recorded and labelled: the claims
    and episodes expected."""
    check_decision_log(tmp_path, payments.carol_iban_ok)
    check_labels(label_the_run(tmp_path, payments), payments.carol_iban_ok)


def check_bob_message(message: str) -> None:
    """The refusal of Bob's transfer names the doubtful premise and what would verify it."""
    for part in ("transfer was not run (action call-2)", "ABSTAIN", "premise 'payee_iban'",
                 "claim 'iban-bob'", "violation probability 0.85", "a newer memory contradicts it",
                 "900 h old", "bank-api could check it", "confirm Bob's IBAN is"):
        assert part in message, (part, message)


def label_the_run(tmp_path: Path, payments: Payments) -> LogLabels:
    """Record what was learnt later, as the agent would, and label the decision log."""
    with OutcomeLog(tmp_path / "outcomes.jsonl") as out:
        out.record(action_id="call-1", violated=False, source="bank-statement")
        out.record(action_id="call-2", claim_id="iban-bob", premise_id="payee_iban",
                   violated=True, source="bob")  # Bob had changed banks
        if payments.carol_iban_ok:
            out.record(action_id="call-3", violated=False, source="bank-statement")
        else:
            out.record(action_id="call-3", claim_id="iban-carol", violated=True,
                       source="bank-api")
    labels = label_logs([tmp_path / "decisions.jsonl"], tmp_path / "outcomes.jsonl")
    labels.report.check()
    labels.episode_report.check()
    return labels


def check_labels(labels: LogLabels, carol_iban_ok: bool) -> None:
    got = labels.claims.sort_values("claim_id")
    assert list(got["claim_id"]) == ["iban-alice", "iban-bob", "iban-carol"]
    assert list(got["violated"]) == [False, True, not carol_iban_ok]
    assert list(got["label_source"]) == ["outcome"] * 3
    assert labels.episode_report.episodes == 3
    episodes = {a: json.loads(e) for a, e in zip(labels.episode_actions,
                                                  labels.episodes.to_pylist(), strict=True)}
    assert sorted(episodes) == ["call-1", "call-2", "call-3"]
    assert episodes["call-3"]["premises"][0]["violated"] is (not carol_iban_ok)
    assert [v["id"] for v in episodes["call-2"]["verifiers"]] == ["bank-api"]


def check_decision_log(tmp_path: Path, carol_iban_ok: bool) -> None:
    records = [json.loads(x) for x in (tmp_path / "decisions.jsonl").read_text().splitlines()]
    assert [(r["action_id"], r["regime"]) for r in records] == [
        ("call-1", "PROCEED"), ("call-2", "ABSTAIN"),
        ("call-3", "PROCEED" if carol_iban_ok else "ABSTAIN")]
    assert {r["calibrator"]["version"] for r in records} == {"v1"}
    assert records[2]["verifier_calls"] == [
        {"verifier": "bank-api", "signals": {"payee_iban": carol_iban_ok}, "cost": 0.2,
         "reliability": 0.95}]
