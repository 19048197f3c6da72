"""The gate as LangChain 1.x / LangGraph tool-call middleware (extra ``[langgraph]``).

``langchain`` (``create_agent``'s middleware) and ``langgraph`` are imported when the factory
is called, never when :mod:`amv_calib.integrations` is. The middleware wraps each tool call
(``wrap_tool_call``, and ``awrap_tool_call`` for async agents): PROCEED -> the tool runs;
ABSTAIN -> the tool does not run and the model gets a ``ToolMessage`` (``status="error"``)
saying why, which premise is doubtful and what would verify it; VERIFY is resolved inside, by
running the chosen verifiers as ``Gate.run`` does; an error in the user's mapping or in a
verifier -> the same refusal. Never the tool without a PROCEED, except on a person's word:

With ``on_abstain="interrupt"`` an ABSTAIN asks a person first (LangGraph's ``interrupt``;
the agent needs a checkpointer). Resume with ``Command(resume={"proceed": True})`` to run the
tool anyway, or ``{"proceed": False, "reason": "..."}`` to refuse it. The verdict is kept
across the interrupt by the middleware object, so resuming in the same process does not run
the gate and its verifiers again; a person's override is logged as a warning (the decision log
keeps the gate's ABSTAIN).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

from amv_calib.exceptions import check_choice
from amv_calib.integrations._guard import (
    GuardVerdict,
    ToAction,
    ToolGuard,
    Verifiers,
    _Runs,
    unchecked,
)

__all__ = ["langgraph_middleware"]

_log = logging.getLogger(__name__)

#: Verdicts kept for calls waiting on a person, at most (the oldest is dropped).
_PENDING = 1024


def langgraph_middleware(
    gate: _Runs,
    to_action: ToAction,
    verifiers: Verifiers = (),
    *,
    tools: Sequence[Any] | None = None,
    budget: float | None = None,
    on_abstain: Literal["reject", "interrupt"] = "reject",
) -> Any:
    """Middleware for ``langchain.agents.create_agent`` that asks the gate before a tool runs.

    Parameters
    ----------
    gate, to_action, verifiers, budget
        As for :class:`~amv_calib.integrations.ToolGuard`; ``to_action``'s ``context`` is the
        call's ``ToolRuntime`` (``state``, ``context``, ``store``, ``tool_call_id``: a good
        action id), its ``arguments`` the tool call's ``args``.
    tools : sequence of str or BaseTool, optional
        The tools to guard (by name); default every tool call.
    on_abstain : {"reject", "interrupt"}, default "reject"
        Refuse at once, or ask a person first (module docstring).

    Returns
    -------
    langchain.agents.middleware.AgentMiddleware
    """
    check_choice("on_abstain", on_abstain, ("reject", "interrupt"))
    names = None if tools is None else frozenset(
        t if isinstance(t, str) else str(t.name) for t in tools)
    return _middleware_class()(ToolGuard(gate, to_action, verifiers, budget=budget), names,
                               on_abstain)


@functools.cache
def _middleware_class() -> Any:
    """The middleware class, defined on first use (it subclasses langchain's)."""
    from langchain.agents.middleware import AgentMiddleware
    from langchain_core.messages import ToolMessage
    from langgraph.types import interrupt

    class AmvGateMiddleware(AgentMiddleware):
        """Asks the AMV gate before a tool call runs (:func:`langgraph_middleware`)."""

        def __init__(self, guard: ToolGuard, tools: frozenset[str] | None,
                     on_abstain: str) -> None:
            super().__init__()
            self.guard = guard
            self.guarded = tools
            self.on_abstain = on_abstain
            self._pending: OrderedDict[str, GuardVerdict] = OrderedDict()
            self._lock = threading.Lock()

        def _covers(self, request: Any) -> bool:
            return self.guarded is None or request.tool_call.get("name") in self.guarded

        def _verdict(self, request: Any) -> GuardVerdict:
            call = request.tool_call
            with self._lock:
                kept = self._pending.pop(str(call.get("id")), None)
            if kept is not None:  # resumed after a person was asked
                return kept
            name, args = str(call.get("name")), call.get("args")
            if not isinstance(args, Mapping):
                return unchecked(name, ValueError(f"the arguments are a "
                                                  f"{type(args).__name__}, not a mapping"))
            return self.guard.check(name, args, request.runtime)

        def _refusal(self, request: Any, verdict: GuardVerdict) -> Any:
            """None to run the tool, else the ToolMessage the model gets instead."""
            if verdict.allowed:
                return None
            call = request.tool_call
            cid = str(call.get("id"))
            message = verdict.message
            if self.on_abstain == "interrupt" and verdict.error is None:
                with self._lock:
                    self._pending[cid] = verdict
                    while len(self._pending) > _PENDING:
                        self._pending.popitem(last=False)
                answer = interrupt({
                    "kind": "amv_gate_abstain", "tool": verdict.tool_name,
                    "arguments": dict(call.get("args") or {}), **verdict.to_dict(),
                })  # raises the first time; returns the person's answer on resume
                with self._lock:
                    self._pending.pop(cid, None)
                answer = answer if isinstance(answer, Mapping) else {}
                if answer.get("proceed") is True:
                    _log.warning("a person let %s run although the gate abstained (action %s): "
                                 "%s", verdict.tool_name, verdict.to_dict()["action_id"],
                                 answer.get("reason") or "no reason given")
                    return None
                why = answer.get("reason")
                message += " A person was asked and declined" + (f": {why}." if why else ".")
            return ToolMessage(content=message, tool_call_id=cid, name=verdict.tool_name,
                               status="error", artifact=verdict.to_dict())

        def wrap_tool_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
            if not self._covers(request):
                return handler(request)
            refusal = self._refusal(request, self._verdict(request))
            return handler(request) if refusal is None else refusal

        async def awrap_tool_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
            if not self._covers(request):
                return await handler(request)
            # verifiers may block (network calls): off the event loop
            verdict = await asyncio.to_thread(self._verdict, request)
            refusal = self._refusal(request, verdict)
            return await handler(request) if refusal is None else refusal

    return AmvGateMiddleware
