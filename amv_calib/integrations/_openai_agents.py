"""The gate as an OpenAI Agents SDK tool input guardrail (extra ``[openai-agents]``).

The SDK (``openai-agents``, imported as ``agents``) is imported when the factory is called,
never when :mod:`amv_calib.integrations` is. The guardrail runs before the tool: PROCEED ->
``allow``; ABSTAIN -> ``reject_content`` with a message the model can act on (the tool does not
run, the model reads the message as the tool's output); VERIFY is resolved inside, by running
the chosen verifiers as ``Gate.run`` does; an error in the user's mapping or in a verifier ->
``reject_content`` too (or, with ``on_error="raise"``, ``raise_exception``, which halts the
run). Never ``allow`` without a PROCEED.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, Literal

from amv_calib.contract import loads_strict
from amv_calib.exceptions import check_choice
from amv_calib.integrations._guard import ToAction, ToolGuard, Verifiers, _Runs, unchecked

__all__ = ["openai_agents_guardrail"]


def openai_agents_guardrail(
    gate: _Runs,
    to_action: ToAction,
    verifiers: Verifiers = (),
    *,
    tools: Sequence[Any] = (),
    budget: float | None = None,
    on_error: Literal["reject", "raise"] = "reject",
    name: str = "amv_gate",
) -> Any:
    """A ``ToolInputGuardrail`` that asks the gate before a function tool runs.

    Parameters
    ----------
    gate, to_action, verifiers, budget
        As for :class:`~amv_calib.integrations.ToolGuard`; ``to_action``'s ``context`` is the
        SDK's ``ToolContext`` (``context.context`` is the run's context, ``context.tool_call_id``
        a good action id), its ``arguments`` the call's parsed JSON arguments.
    tools : sequence of FunctionTool, optional
        Tools to attach the guardrail to (appended to their ``tool_input_guardrails``); or
        pass it yourself: ``@function_tool(tool_input_guardrails=[guardrail])``.
    on_error : {"reject", "raise"}, default "reject"
        An error in ``to_action`` or in a verifier: refuse the call with a message to the
        model, or halt the run (``ToolInputGuardrailTripwireTriggered``).
    name : str, default "amv_gate"
        The guardrail's name in the SDK's results and traces.

    Returns
    -------
    agents.ToolInputGuardrail
        Its ``output_info`` is :meth:`GuardVerdict.to_dict
        <amv_calib.integrations.GuardVerdict.to_dict>`.
    """
    from agents import ToolGuardrailFunctionOutput, ToolInputGuardrail

    check_choice("on_error", on_error, ("reject", "raise"))
    guard = ToolGuard(gate, to_action, verifiers, budget=budget)

    async def amv_gate(data: Any) -> Any:
        ctx = data.context
        tool = str(ctx.tool_name)
        try:
            # strict: arguments giving a key twice would mean one thing to the guard and
            # maybe another to the tool (refused, as any unreadable call)
            arguments = loads_strict(ctx.tool_arguments or "{}")
            if not isinstance(arguments, dict):
                raise ValueError(f"the arguments are a JSON {type(arguments).__name__}, not "
                                 f"an object")
        except ValueError as exc:
            verdict = unchecked(tool, exc)
        else:
            # verifiers may block (network calls): off the event loop
            verdict = await asyncio.to_thread(guard.check, tool, arguments, ctx)
        info = verdict.to_dict()
        if verdict.allowed:
            return ToolGuardrailFunctionOutput.allow(output_info=info)
        if verdict.error is not None and on_error == "raise":
            return ToolGuardrailFunctionOutput.raise_exception(output_info=info)
        return ToolGuardrailFunctionOutput.reject_content(verdict.message, output_info=info)

    guardrail: Any = ToolInputGuardrail(guardrail_function=amv_gate, name=name)
    for tool in tools:
        tool.tool_input_guardrails = [*(tool.tool_input_guardrails or ()), guardrail]
    return guardrail
