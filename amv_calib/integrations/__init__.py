"""The gate inside agent frameworks: guard a tool call before it runs.

- :class:`ToolGuard`: framework-neutral; the user's mapping of a tool call to a
  :class:`~amv_calib.gate.CandidateAction`, the gate's run with the user's verifiers, and a
  :class:`GuardVerdict` (allowed only on PROCEED; otherwise a message the model can act on).
- :func:`openai_agents_guardrail`: an OpenAI Agents SDK tool input guardrail (extra
  ``[openai-agents]``).
- :func:`langgraph_middleware`: LangChain 1.x / LangGraph tool-call middleware, with an
  optional interrupt for a person on ABSTAIN (extra ``[langgraph]``).

Each framework is imported only when its factory is called: this package imports the gate
(numpy and the standard library) only.
"""

from __future__ import annotations

from amv_calib.integrations._guard import GuardVerdict, ToolGuard, refusal_message
from amv_calib.integrations._langgraph import langgraph_middleware
from amv_calib.integrations._openai_agents import openai_agents_guardrail

__all__ = [
    "GuardVerdict",
    "ToolGuard",
    "langgraph_middleware",
    "openai_agents_guardrail",
    "refusal_message",
]
