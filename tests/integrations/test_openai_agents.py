"""The gate as an OpenAI Agents SDK tool input guardrail, on the real SDK with a scripted model
(the SDK's own ``agents.testing.ScriptedModel``): offline, no API key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from agents import (
    Agent,
    RunConfig,
    Runner,
    ToolInputGuardrailTripwireTriggered,
    function_tool,
)
from agents.testing import ScriptedModel, assistant_message, function_call
from payments_scenario import BANK, CALLS, PROMPT, Payments, check_after_run, check_bob_message

from amv_calib.gate import LiveGate
from amv_calib.integrations import openai_agents_guardrail


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch) -> None:
    # no client is built for a scripted model; should one be, it has a key and no tracing
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-used")
    monkeypatch.setenv("OPENAI_AGENTS_DISABLE_TRACING", "1")


def _run(payments: Payments, guardrail: Any, calls: tuple[tuple[str, str, float], ...]
         ) -> tuple[Any, ScriptedModel]:
    @function_tool(tool_input_guardrails=[guardrail])
    def transfer(payee: str, amount: float) -> str:
        """Send ``amount`` EUR to ``payee`` (irreversible)."""
        return payments.transfer(payee, amount)

    model = ScriptedModel(
        [[function_call("transfer", {"payee": payee, "amount": amount}, call_id=cid)]
         for cid, payee, amount in calls] + [[assistant_message("Done.")]])
    agent = Agent(name="payments", instructions="Pay people.", model=model, tools=[transfer])
    result = Runner.run_sync(agent, PROMPT, run_config=RunConfig(tracing_disabled=True))
    model.assert_complete()
    return result, model


def _tool_outputs(model: ScriptedModel) -> dict[str, str]:
    """call id -> what the model read as the tool's output, from its last call's input."""
    last = model.calls[-1].input
    return {item["call_id"]: str(item["output"]) for item in last
            if isinstance(item, dict) and item.get("type") == "function_call_output"}


@pytest.mark.parametrize("carol_iban_ok", [True, False], ids=["bank-confirms", "bank-refutes"])
def test_scripted_agent_proceeds_abstains_and_verifies(live: LiveGate, tmp_path: Path,
                                                       carol_iban_ok: bool) -> None:
    payments = Payments(carol_iban_ok)
    guardrail = openai_agents_guardrail(live, payments.to_action, [(BANK, payments.bank)])
    result, model = _run(payments, guardrail, CALLS)
    assert result.final_output == "Done."
    assert payments.bank_calls == ["carol"]  # VERIFY ran the verifier, once
    assert payments.transfers == [("alice", 100.0)] + ([("carol", 80.0)] if carol_iban_ok else [])
    outputs = _tool_outputs(model)
    assert outputs["call-1"] == "sent 100.00 EUR to alice"
    check_bob_message(outputs["call-2"])
    if carol_iban_ok:
        assert outputs["call-3"] == "sent 80.00 EUR to carol"
    else:
        assert "bank-api reported it wrong" in outputs["call-3"]
        assert "violation probability 0.71" in outputs["call-3"]
    infos = [r.output.output_info for r in result.tool_input_guardrail_results]
    assert [(i["action_id"], i["regime"], i["allowed"]) for i in infos] == [
        ("call-1", "PROCEED", True), ("call-2", "ABSTAIN", False),
        ("call-3", "PROCEED" if carol_iban_ok else "ABSTAIN", carol_iban_ok)]
    check_after_run(tmp_path, payments)


def test_an_error_in_the_mapping_or_a_verifier_refuses_never_allows(live: LiveGate) -> None:
    payments = Payments(carol_iban_ok=True)

    def broken_bank(action: Any) -> bool:
        raise ConnectionError("bank API unreachable")

    guardrail = openai_agents_guardrail(live, payments.to_action, [(BANK, broken_bank)])
    result, model = _run(payments, guardrail, (("call-9", "mallory", 10.0),
                                               ("call-3", "carol", 80.0)))
    assert payments.transfers == []
    outputs = _tool_outputs(model)
    assert outputs["call-9"].startswith("transfer was not run: the gate could not check this "
                                        "call (KeyError: 'mallory')")
    assert "verifying its premises failed (ConnectionError: bank API unreachable)" in \
        outputs["call-3"]
    assert [r.output.behavior["type"] for r in result.tool_input_guardrail_results] == \
        ["reject_content", "reject_content"]


def test_on_error_raise_halts_the_run(live: LiveGate) -> None:
    payments = Payments(carol_iban_ok=True)
    guardrail = openai_agents_guardrail(live, payments.to_action, [(BANK, payments.bank)],
                                        on_error="raise")
    with pytest.raises(ToolInputGuardrailTripwireTriggered):
        _run(payments, guardrail, (("call-9", "mallory", 10.0),))
    assert payments.transfers == []


def test_attaches_to_the_tools_given(live: LiveGate) -> None:
    payments = Payments(carol_iban_ok=True)

    @function_tool
    def transfer(payee: str, amount: float) -> str:
        """Send money."""
        return payments.transfer(payee, amount)

    guardrail = openai_agents_guardrail(live, payments.to_action, tools=[transfer])
    assert transfer.tool_input_guardrails == [guardrail]
    with pytest.raises(ValueError, match="on_error='ignore' must be 'reject' or 'raise'"):
        openai_agents_guardrail(live, payments.to_action, on_error="ignore")  # type: ignore[arg-type]
