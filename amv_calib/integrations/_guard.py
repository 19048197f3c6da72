"""The framework-neutral guard of a tool call: the user's mapping, the gate's run, a verdict.

A framework adapter (:mod:`._openai_agents`, :mod:`._langgraph`) hands :meth:`ToolGuard.check`
the tool's name, its arguments and the framework's context, and turns the verdict into the
framework's allow or refusal. The guard never allows what it could not check: an error in the
user's mapping or in a verifier is a refusal, like ABSTAIN. Standard library and the gate only.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from amv_calib.gate import CandidateAction, Premise, RunTrace, Verifier

__all__ = ["GuardVerdict", "ToolGuard"]

_log = logging.getLogger(__name__)

#: The user's answer of a verifier: True = the premise holds (a verifier over one premise),
#: or premise id -> True/False.
Signals = bool | Mapping[str, bool]
#: The user's mapping of a tool call (name, arguments, framework context) to an action.
ToAction = Callable[[str, Mapping[str, Any], Any], CandidateAction]
#: Verifiers with their checks: ``check(action) -> Signals``.
Verifiers = Sequence[tuple[Verifier, Callable[[CandidateAction], Signals]]]
#: Most premises a refusal describes.
_NAMED = 3


class _Runs(Protocol):
    def run(self, action: CandidateAction, verifiers: Sequence[Verifier],
            verify: Callable[[Verifier, CandidateAction], Signals], *,
            budget: float | None = None) -> RunTrace: ...


@dataclass(frozen=True, kw_only=True)
class GuardVerdict:
    """What the guard decided about one tool call.

    Attributes
    ----------
    allowed : bool
        True only when the gate PROCEEDED.
    tool_name : str
    action : CandidateAction or None
        The action the user's mapping built (None when it failed).
    trace : RunTrace or None
        The gate's run: every verification and the final decision (None when no decision
        was made: the mapping or a verifier failed).
    message : str
        For the model when the call is refused (empty when allowed): the gate's reason, the
        doubtful premises and what would verify them.
    error : str or None
        The failure of the mapping or of a verifier, when that refused the call.
    """

    allowed: bool
    tool_name: str
    action: CandidateAction | None
    trace: RunTrace | None
    message: str
    error: str | None = None

    @property
    def regime(self) -> str | None:
        """The gate's final regime (None when no decision was made)."""
        return None if self.trace is None else self.trace.final.regime

    def to_dict(self) -> dict[str, Any]:
        """Plain data for a framework's guardrail record."""
        t = self.trace
        return {
            "allowed": self.allowed,
            "tool_name": self.tool_name,
            "action_id": None if self.action is None else self.action.action_id,
            "regime": self.regime,
            "reason": None if t is None else t.final.reason,
            "verifier_calls": [] if t is None else [
                {"verifier": s.verifier.id, "signals": dict(s.signals)} for s in t.steps],
            "message": self.message,
            "error": self.error,
        }


class ToolGuard:
    """Guard tool calls with a gate: build the action, run the gate, say why it refuses.

    Parameters
    ----------
    gate : Gate or LiveGate
        What decides (anything with the ``run`` of :class:`~amv_calib.gate.Gate`); it writes
        the decision log.
    to_action : callable
        ``to_action(tool_name, arguments, context) -> CandidateAction``: the action the call
        would take and the premises it rests on (from the agent's memory). ``context`` is the
        framework's (the Agents SDK's ``ToolContext``, LangGraph's ``ToolRuntime``). Use an
        action id you can find again (the tool call's id) to record outcomes later.
    verifiers : sequence of (Verifier, callable)
        Each verifier with its check, ``check(action) -> bool or {premise id: bool}`` (True
        = the premise holds). A call is offered the verifiers whose premises the action has.
    budget : float, optional
        Largest total verifier cost per call (``Gate.run``'s ``budget``).
    """

    def __init__(self, gate: _Runs, to_action: ToAction, verifiers: Verifiers = (), *,
                 budget: float | None = None) -> None:
        if not callable(getattr(gate, "run", None)):
            raise ValueError(f"gate={gate!r} must be a Gate or a LiveGate")
        if not callable(to_action):
            raise ValueError(f"to_action={to_action!r} must be callable")
        if budget is not None and (isinstance(budget, bool) or not isinstance(
                budget, (int, float)) or not 0.0 <= budget < math.inf):
            raise ValueError(f"budget={budget!r} must be a finite number >= 0 or None")
        checks: dict[str, Callable[[CandidateAction], Signals]] = {}
        declared: list[Verifier] = []
        for item in verifiers:
            if not (isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], Verifier)
                    and callable(item[1])):
                raise ValueError(f"verifiers: {item!r} must be a (Verifier, callable) pair")
            if item[0].id in checks:
                raise ValueError(f"verifiers: id {item[0].id!r} appears twice")
            declared.append(item[0])
            checks[item[0].id] = item[1]
        self._gate = gate
        self._to_action = to_action
        self._verifiers = tuple(declared)
        self._checks = checks
        self._budget = budget

    @property
    def verifiers(self) -> tuple[Verifier, ...]:
        """The verifiers declared, in order."""
        return self._verifiers

    def _verify(self, verifier: Verifier, action: CandidateAction) -> Signals:
        return self._checks[verifier.id](action)

    def check(self, tool_name: str, arguments: Mapping[str, Any], context: Any = None
              ) -> GuardVerdict:
        """The verdict on one call of ``tool_name`` with ``arguments`` (never raises for an
        error in the user's mapping or verifiers: that is a refusal)."""
        try:
            action = self._to_action(tool_name, arguments, context)
            if not isinstance(action, CandidateAction):
                raise TypeError(f"to_action returned {type(action).__name__}, not a "
                                f"CandidateAction")
        except Exception as exc:
            return unchecked(tool_name, exc)
        have = {pm.id for pm in action.premises}
        offered = [v for v in self._verifiers if have.issuperset(v.resolves_premise_ids)]
        try:
            trace = self._gate.run(action, offered, self._verify, budget=self._budget)
        except Exception as exc:
            _log.exception("guard of %s (action %s): the gate's run failed", tool_name,
                           action.action_id)
            why = f"{type(exc).__name__}: {exc}"
            return GuardVerdict(
                allowed=False, tool_name=tool_name, action=action, trace=None, error=why,
                message=(f"{tool_name} was not run (action {action.action_id}): verifying its "
                         f"premises failed ({why}). Do not retry it unchanged."))
        if trace.final.regime == "PROCEED":
            return GuardVerdict(allowed=True, tool_name=tool_name, action=action, trace=trace,
                                message="")
        _log.info("guard of %s (action %s): %s, %s", tool_name, action.action_id,
                  trace.final.regime, trace.final.reason)
        return GuardVerdict(allowed=False, tool_name=tool_name, action=action, trace=trace,
                            message=refusal_message(action, trace, offered))


def unchecked(tool_name: str, exc: BaseException) -> GuardVerdict:
    """The refusal of a call that could not be checked (its arguments unreadable, the user's
    mapping failed): logged with the exception."""
    _log.error("guard of %s: the call could not be checked", tool_name, exc_info=exc)
    why = f"{type(exc).__name__}: {exc}"
    return GuardVerdict(allowed=False, tool_name=tool_name, action=None, trace=None, error=why,
                        message=(f"{tool_name} was not run: the gate could not check this call "
                                 f"({why}). Do not retry it unchanged."))


def _premise_text(pm: Premise, p: float) -> str:
    c = pm.claim
    what = f"premise {pm.id!r}"
    if pm.claim_id:
        what += f" (claim {pm.claim_id!r}" + (f": {c.statement!r}" if c and c.statement else "")
        what += ")"
    facts = [f"violation probability {p:.2f}"]
    if c is not None:
        if c.contradiction_flag:
            facts.append("a newer memory contradicts it")
        facts.append(f"{c.recency_hours:.0f} h old")
    return f"{what}: {', '.join(facts)}"


def _checks_text(pm: Premise, trace: RunTrace, offered: Sequence[Verifier]) -> str:
    said: list[str] = []
    for step in trace.steps:
        signal = step.signals.get(pm.id)
        if signal is not None:
            said.append(f"{step.verifier.id} {'confirmed it' if signal else 'reported it wrong'}")
    called = {s.verifier.id for s in trace.steps}
    idle = [v.id for v in offered if pm.id in v.resolves_premise_ids and v.id not in called]
    if idle:
        said.append(f"{', '.join(idle)} could check it, but one check could not make the call "
                    f"safe enough, so it was not worth its cost")
    if not said:
        said.append("no configured verifier checks it")
    return "; ".join(said)


def refusal_message(action: CandidateAction, trace: RunTrace,
                    offered: Sequence[Verifier]) -> str:
    """What the model reads when the gate does not PROCEED: the reason, the most doubtful
    premises with their probability after any verification, what checked them or could, and
    what to do next."""
    d = trace.final
    head = f"{action.tool_name} was not run (action {action.action_id}): the gate decided " \
           f"{d.regime} because {d.reason}."
    if not trace.posteriors:  # failed closed before any probability
        return head + " Do not retry it until the gate can assess the call."
    ranked = sorted(zip(action.premises, trace.posteriors, strict=True), key=lambda x: -x[1])
    parts = [head]
    for pm, p in ranked[:_NAMED]:
        parts.append(f"Doubtful {_premise_text(pm, p)}. Checks: "
                     f"{_checks_text(pm, trace, offered)}.")
    top = ranked[0][0]
    subject = top.claim.statement if top.claim is not None and top.claim.statement else (
        f"claim {top.claim_id!r}" if top.claim_id else f"premise {top.id!r}")
    parts.append(f"To go ahead, confirm {subject} with the user or refresh it from its source, "
                 f"then call {action.tool_name} again.")
    return " ".join(parts)
