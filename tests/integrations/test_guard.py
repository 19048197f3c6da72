"""The framework-neutral guard, and what the integrations package imports."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest
from payments_scenario import BANK, MEMORY, Payments

from amv_calib.contract import seed_prior_calibrator
from amv_calib.gate import CandidateAction, Gate, Premise, Verifier
from amv_calib.integrations import ToolGuard

SDKS = ("agents", "langchain", "langchain_core", "langgraph", "openai")


class _Ctx:
    tool_call_id = "call-7"


def test_the_package_imports_no_framework() -> None:
    probe = ("import json, sys; import amv_calib.integrations; "
             "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))")
    loaded = set(json.loads(subprocess.run([sys.executable, "-c", probe], capture_output=True,
                                           text=True, check=True).stdout))
    assert not loaded & set(SDKS), sorted(loaded & set(SDKS))
    assert not loaded & {"pandas", "sklearn", "pyarrow", "mlflow"}


@pytest.mark.parametrize("dist", ["openai-agents", "langchain", "langgraph", "langchain-core"])
def test_the_frameworks_are_the_pinned_versions(repo_root: Path, dist: str) -> None:
    pins = dict(line.split("==", 1) for line in
                (repo_root / "constraints.txt").read_text().splitlines() if "==" in line)
    assert version(dist) == pins[dist]


def test_verdicts() -> None:
    payments = Payments(carol_iban_ok=False)
    guard = ToolGuard(Gate(calibrator=seed_prior_calibrator()), payments.to_action,
                      [(BANK, payments.bank)])
    ok = guard.check("transfer", {"payee": "alice", "amount": 100.0}, _Ctx())
    assert ok.allowed and ok.regime == "PROCEED" and ok.message == "" and ok.error is None
    no = guard.check("transfer", {"payee": "carol", "amount": 80.0}, _Ctx())
    assert not no.allowed and no.regime == "ABSTAIN" and payments.bank_calls == ["carol"]
    assert no.to_dict() == {
        "allowed": False, "tool_name": "transfer", "action_id": "call-7", "regime": "ABSTAIN",
        "reason": no.trace.final.reason if no.trace else None,
        "verifier_calls": [{"verifier": "bank-api", "signals": {"payee_iban": False}}],
        "message": no.message, "error": None}


def test_a_gate_without_a_verified_version_refuses_with_its_reason() -> None:
    payments = Payments(carol_iban_ok=True)
    guard = ToolGuard(Gate(refusal="artifact refused: no alias 'production'"),
                      payments.to_action, [(BANK, payments.bank)])
    v = guard.check("transfer", {"payee": "alice", "amount": 1.0}, _Ctx())
    assert not v.allowed and payments.bank_calls == []
    assert v.message == ("transfer was not run (action call-7): the gate decided ABSTAIN "
                         "because artifact refused: no alias 'production'. Do not retry it "
                         "until the gate can assess the call.")


def test_only_verifiers_over_the_actions_premises_are_offered() -> None:
    other = Verifier(id="registry", resolves_premise_ids=("payee_name",), execution_cost=0.1,
                     symmetric_reliability=0.9)
    calls: list[str] = []

    def to_action(tool: str, args: Any, ctx: Any) -> CandidateAction:
        return CandidateAction(action_id="a", tool_name=tool, impact_cost_theta=80.0,
                               abstention_cost_kappa=5.0,
                               premises=(Premise(id="payee_iban", claim=MEMORY["carol"]),))

    guard = ToolGuard(Gate(calibrator=seed_prior_calibrator()), to_action,
                      [(other, lambda a: calls.append("registry") or True),
                       (BANK, lambda a: calls.append("bank") or True)])
    assert guard.check("transfer", {}).allowed and calls == ["bank"]


@pytest.mark.parametrize(("args", "match"), [
    ((object(), lambda *a: None), r"gate=.* must be a Gate or a LiveGate"),
    ((Gate(), "nope"), r"to_action='nope' must be callable"),
    ((Gate(), lambda *a: None, [BANK]), r"must be a \(Verifier, callable\) pair"),
    ((Gate(), lambda *a: None, [(BANK, bool), (BANK, bool)]), r"id 'bank-api' appears twice"),
], ids=["not-a-gate", "not-callable", "bare-verifier", "duplicate-verifier"])
def test_bad_arguments(args: tuple[Any, ...], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        ToolGuard(*args)


@pytest.mark.parametrize("budget", [-1.0, float("nan"), float("inf"), True, "5"],
                         ids=["negative", "nan", "inf", "bool", "text"])
def test_a_bad_budget_is_refused_at_once(budget: Any) -> None:
    with pytest.raises(ValueError, match=r"budget=.* must be a finite number >= 0"):
        ToolGuard(Gate(), lambda *a: None, budget=budget)
