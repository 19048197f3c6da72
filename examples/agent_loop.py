"""A running agent and the production loop around it, end to end, in one process.

1. Production starts on ``v1`` (the seed prior, exported and promoted).
2. A payments agent runs. Its model is scripted: one ``transfer`` call per customer request,
   to a payee whose IBAN it remembers (a memory claim: age, source trust, confidence, whether
   a newer memory contradicts it). Every call goes through a :class:`ToolGuard` on a
   :class:`LiveGate` that follows ``amv-guard@production``: PROCEED runs the transfer; VERIFY
   asks the bank first; ABSTAIN refuses, and the model reads why. The gate logs each decision;
   what is learnt later (a transfer bounced, a customer confirmed an IBAN) is recorded with
   :class:`OutcomeLog`. The memory is staler than the seed prior believes.
3. The production loop: ``examples/agent_loop.toml`` labels the logs, fits a calibrator on
   them, tunes and certifies the gate on the logged episodes, exports a challenger and
   promotes it, because it earned it.
4. The agent, still running with the same LiveGate, picks up the new version at its next
   check of the alias, without a restart; a rollback takes it back just as quietly.

Run ``.venv/bin/python examples/agent_loop.py [--workdir out/agent-loop] [--actions 800]``
(about 15 s); it prints a JSON summary. ``tests/test_examples.py`` runs it.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import shutil
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from amv_calib.artifacts import export_artifact, promote, rollback
from amv_calib.contract import seed_prior_calibrator
from amv_calib.gate import (
    CandidateAction,
    LiveGate,
    MemoryClaim,
    OutcomeLog,
    Premise,
    Verifier,
    read_decision_log,
)
from amv_calib.integrations import ToolGuard
from amv_calib.pipeline import load_pipeline, run_pipeline

HERE = Path(__file__).resolve().parent
PIPELINE = HERE / "agent_loop.toml"
POLL_SECONDS = 0.5
BANK = Verifier(id="bank-api", resolves_premise_ids=("payee_iban",), execution_cost=0.2,
                symmetric_reliability=0.9)


def truly_wrong_probability(claim: MemoryClaim) -> float:
    """How often a remembered IBAN is really out of date: age matters more, and source trust
    and the model's confidence less, than the seed prior assumes."""
    conf = min(max(claim.model_confidence, 1e-5), 1 - 1e-5)
    z = (-2.6 - 0.6 * math.log(conf / (1 - conf)) + 4.0 * min(1.0, claim.recency_hours / 720)
         - 0.8 * claim.source_trust_score + 1.8 * claim.contradiction_flag)
    return 1.0 / (1.0 + math.exp(-z))


class PaymentsAgent:
    """The agent: memory, a scripted model (one transfer per request), the guarded tool."""

    def __init__(self, gate: LiveGate, rng: np.random.Generator) -> None:
        self.rng = rng
        self.memory: dict[str, tuple[MemoryClaim, bool]] = {}  # payee -> (claim, truly wrong)
        self.sent: list[tuple[str, float]] = []
        self.refusals: list[str] = []  # what the model read instead of a tool result
        self.calls = 0
        self.guard = ToolGuard(gate, self.to_action, [(BANK, self.ask_bank)])

    def remember(self, payee: str) -> None:
        r = self.rng
        claim = MemoryClaim(id=f"iban-{payee}", statement=f"{payee}'s IBAN on file",
                            recency_hours=float(min(r.exponential(250.0), 2000.0)),
                            source_trust_score=float(r.uniform(0.05, 1.0)),
                            model_confidence=float(r.uniform(0.5, 0.99)),
                            contradiction_flag=bool(r.random() < 0.1))
        self.memory[payee] = (claim, bool(r.random() < truly_wrong_probability(claim)))

    def to_action(self, tool_name: str, arguments: Any, call: Any) -> CandidateAction:
        claim, _ = self.memory[arguments["payee"]]
        return CandidateAction(action_id=call["id"], tool_name=tool_name,
                               arguments=dict(arguments),
                               impact_cost_theta=float(arguments["amount"]),
                               abstention_cost_kappa=5.0,
                               premises=(Premise(id="payee_iban", claim=claim),))

    def ask_bank(self, action: CandidateAction) -> bool:
        """The bank's account-name check: right 90% of the time."""
        _, wrong = self.memory[str(action.arguments["payee"])]
        right = self.rng.random() < BANK.symmetric_reliability
        return (not wrong) if right else wrong

    def handle(self, payee: str, amount: float) -> str:
        """One customer request: the model calls transfer; the guard decides."""
        self.calls += 1
        call: dict[str, Any] = {"id": f"call-{self.calls}", "name": "transfer",
                                "args": {"payee": payee, "amount": amount}}
        verdict = self.guard.check(call["name"], call["args"], call)
        if verdict.allowed:
            self.sent.append((payee, amount))
            return f"sent {amount:.2f} EUR to {payee}"
        self.refusals.append(verdict.message)
        return verdict.message


def _requests(agent: PaymentsAgent, n: int, first: int) -> list[tuple[str, float]]:
    out = []
    for i in range(first, first + n):
        payee = f"customer-{i}"
        agent.remember(payee)
        out.append((payee, float(agent.rng.uniform(20.0, 400.0))))
    return out


def _record_outcomes(agent: PaymentsAgent, outcomes: OutcomeLog, first: int, last: int) -> None:
    """What the bank and the customers said later about calls first..last: every IBAN's
    truth (a transfer that bounced, a customer who confirmed or corrected it)."""
    for k in range(first, last + 1):
        payee = f"customer-{k - 1}"
        claim, wrong = agent.memory[payee]
        outcomes.record(action_id=f"call-{k}", claim_id=claim.id, premise_id="payee_iban",
                        violated=wrong, source="bank" if wrong else "customer")


def _records(workdir: Path) -> list[dict[str, Any]]:
    return list(read_decision_log(workdir / "logs" / "decisions.jsonl"))


def run(workdir: Path, n_actions: int = 800, seed: int = 29) -> dict[str, Any]:
    """The whole story (module docstring); returns the summary."""
    if workdir.exists():
        shutil.rmtree(workdir)
    models, logs = workdir / "models", workdir / "logs"
    export_artifact(calibrator=seed_prior_calibrator(), name="amv-guard", models_dir=models,
                    include_joblib=False)
    promote("amv-guard", "v1", alias="production", models_dir=models)

    # 2. the agent runs on v1, logging decisions; outcomes arrive later
    live = LiveGate(f"{models / 'amv-guard'}@production", poll_seconds=POLL_SECONDS,
                    decision_log=logs / "decisions.jsonl")
    agent = PaymentsAgent(live, np.random.default_rng(seed))
    for payee, amount in _requests(agent, n_actions, 0):
        agent.handle(payee, amount)
    with OutcomeLog(logs / "outcomes.jsonl") as outcomes:
        _record_outcomes(agent, outcomes, 1, agent.calls)
    first = _records(workdir)
    first_run = Counter(r["regime"] for r in first)
    verified = sum(bool(r.get("verifier_calls")) for r in first)

    # 3. the production loop, while the agent keeps its LiveGate
    spec = load_pipeline(PIPELINE, [
        f"pipeline.workdir={workdir / 'work'}", f"pipeline.models_dir={models}",
        f'label.decisions=["{logs / "decisions.jsonl"}"]',
        f'label.outcomes=["{logs / "outcomes.jsonl"}"]'])
    result = run_pipeline(spec, tracking=False)
    steps = {s.name: s.outputs for s in result.steps}

    # 4. the running agent picks the new version up; a rollback takes it back
    served: dict[str, list[str | None]] = {}
    for phase in ("after_promotion", "after_rollback"):
        if phase == "after_rollback":
            rollback("amv-guard", alias="production", models_dir=models)
        time.sleep(POLL_SECONDS * 1.2)  # one check of the alias is due
        start = agent.calls
        for payee, amount in _requests(agent, 20, agent.calls):
            agent.handle(payee, amount)
        served[phase] = sorted({r["calibrator"]["version"]
                                for r in _records(workdir)[start:]}, key=str)
    live.close()
    return {
        "actions": n_actions,
        "first_run": {"regimes": dict(sorted(first_run.items())),
                      "bank_checks_before_deciding": verified},
        "transfers_sent": len(agent.sent),
        "refusals_read_by_the_model": len(agent.refusals),
        "a_refusal": agent.refusals[0] if agent.refusals else None,
        "label": {k: steps["label"][k] for k in ("joined", "episodes_written")},
        "champion": steps["compare"]["champion_name"],
        "certify": {k: steps["certify"][k] for k in ("calibration_episodes",
                                                     "excluded_episodes",
                                                     "observed_upper_bound")},
        "promote": {k: steps["promote"][k] for k in ("promoted", "version", "reasons")},
        "versions_served": {"before": sorted({r["calibrator"]["version"] for r in first}),
                            **served},
        "live_gate": {k: live.status()[k] for k in ("version", "checks", "swaps",
                                                    "refusals")},
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--workdir", type=Path, default=HERE.parent / "out" / "agent-loop",
                    help="where models/, logs/ and the pipeline's work/ go (replaced)")
    ap.add_argument("--actions", type=int, default=800, help="customer requests on v1")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    print(json.dumps(run(args.workdir.resolve(), args.actions), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
