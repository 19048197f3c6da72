"""The gate as LangChain 1.x / LangGraph tool-call middleware, on the real packages with a
scripted chat model: offline, no API key."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command
from payments_scenario import BANK, CALLS, PROMPT, Payments, check_after_run, check_bob_message
from pydantic import Field

from amv_calib.gate import LiveGate
from amv_calib.integrations import langgraph_middleware


class ScriptedChat(BaseChatModel):
    """Answers with the scripted messages in order; remembers what it was shown."""

    script: list[AIMessage]
    seen: list[list[BaseMessage]] = Field(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                  run_manager: Any = None, **kwargs: Any) -> ChatResult:
        self.seen.append(list(messages))
        return ChatResult(generations=[ChatGeneration(message=self.script[len(self.seen) - 1])])

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Any:
        return self


def _script(calls: Sequence[tuple[str, str, float]]) -> ScriptedChat:
    return ScriptedChat(script=[
        AIMessage(content="", tool_calls=[{"name": "transfer", "id": cid, "type": "tool_call",
                                           "args": {"payee": payee, "amount": amount}}])
        for cid, payee, amount in calls] + [AIMessage(content="Done.")])


def _agent(payments: Payments, middleware: Any, model: ScriptedChat, **kwargs: Any) -> Any:
    @tool
    def transfer(payee: str, amount: float) -> str:
        """Send ``amount`` EUR to ``payee`` (irreversible)."""
        return payments.transfer(payee, amount)

    @tool
    def balance() -> str:
        """The account balance (read-only: not guarded)."""
        return "1000 EUR"

    return create_agent(model, [transfer, balance], middleware=[middleware], **kwargs)


def _tool_messages(model: ScriptedChat) -> dict[str, ToolMessage]:
    return {m.tool_call_id: m for m in model.seen[-1] if isinstance(m, ToolMessage)}


@pytest.mark.parametrize(("carol_iban_ok", "run"), [
    (True, "invoke"), (False, "invoke"), (True, "ainvoke")],
    ids=["bank-confirms", "bank-refutes", "async"])
def test_scripted_agent_proceeds_abstains_and_verifies(live: LiveGate, tmp_path: Path,
                                                       carol_iban_ok: bool, run: str) -> None:
    payments = Payments(carol_iban_ok)
    middleware = langgraph_middleware(live, payments.to_action, [(BANK, payments.bank)],
                                      tools=["transfer"])
    model = _script(CALLS)
    agent = _agent(payments, middleware, model)
    state = {"messages": [HumanMessage(PROMPT)]}
    out = asyncio.run(agent.ainvoke(state)) if run == "ainvoke" else agent.invoke(state)
    assert out["messages"][-1].content == "Done."
    assert payments.bank_calls == ["carol"]
    assert payments.transfers == [("alice", 100.0)] + ([("carol", 80.0)] if carol_iban_ok else [])
    seen = _tool_messages(model)
    assert (seen["call-1"].content, seen["call-1"].status) == ("sent 100.00 EUR to alice",
                                                               "success")
    assert seen["call-2"].status == "error"
    check_bob_message(str(seen["call-2"].content))
    assert seen["call-2"].artifact["regime"] == "ABSTAIN"
    if carol_iban_ok:
        assert seen["call-3"].content == "sent 80.00 EUR to carol"
    else:
        assert "bank-api reported it wrong" in str(seen["call-3"].content)
    check_after_run(tmp_path, payments)


def test_unguarded_tools_pass_and_errors_refuse(live: LiveGate) -> None:
    payments = Payments(carol_iban_ok=True)
    middleware = langgraph_middleware(live, payments.to_action, tools=["transfer"])
    model = ScriptedChat(script=[
        AIMessage(content="", tool_calls=[
            {"name": "balance", "id": "call-0", "type": "tool_call", "args": {}},
            {"name": "transfer", "id": "call-9", "type": "tool_call",
             "args": {"payee": "mallory", "amount": 10.0}}]),
        AIMessage(content="Done.")])
    _agent(payments, middleware, model).invoke({"messages": [HumanMessage(PROMPT)]})
    seen = _tool_messages(model)
    assert seen["call-0"].content == "1000 EUR"
    assert seen["call-9"].status == "error" and payments.transfers == []
    assert str(seen["call-9"].content).startswith(
        "transfer was not run: the gate could not check this call (KeyError: 'mallory')")


@pytest.mark.parametrize("proceed", [False, True], ids=["person-declines", "person-overrides"])
def test_abstain_can_ask_a_person(live: LiveGate, tmp_path: Path, proceed: bool,
                                  caplog: pytest.LogCaptureFixture) -> None:
    payments = Payments(carol_iban_ok=True)
    middleware = langgraph_middleware(live, payments.to_action, [(BANK, payments.bank)],
                                      on_abstain="interrupt")
    model = _script([CALLS[1]])
    agent = _agent(payments, middleware, model, checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "t-1"}}
    first = agent.invoke({"messages": [HumanMessage(PROMPT)]}, config)
    (asked,) = first["__interrupt__"]
    assert asked.value["kind"] == "amv_gate_abstain" and asked.value["action_id"] == "call-2"
    check_bob_message(asked.value["message"])
    assert payments.transfers == []
    with caplog.at_level(logging.WARNING, logger="amv_calib.integrations._langgraph"):
        out = agent.invoke(Command(resume={"proceed": proceed, "reason": "Bob confirmed by phone"
                                           if proceed else "not confirmed"}), config)
    assert out["messages"][-1].content == "Done."
    # resuming did not ask the gate again: one decision for the call
    records = (tmp_path / "decisions.jsonl").read_text().splitlines()
    assert [json.loads(r)["action_id"] for r in records] == ["call-2"]
    seen = _tool_messages(model)
    if proceed:
        assert payments.transfers == [("bob", 250.0)]
        assert "a person let transfer run although the gate abstained (action call-2): Bob " \
               "confirmed by phone" in caplog.text
    else:
        assert payments.transfers == []
        assert str(seen["call-2"].content).endswith(
            "A person was asked and declined: not confirmed.")
