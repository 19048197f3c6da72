"""What the gate answers: a :class:`Decision`, a sequential run's :class:`RunTrace`, and
the screened :class:`StoppingValue`."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple, cast

from amv_calib.gate._model import REGIME_CODES, Verifier

__all__ = ["Decision", "Regime", "RunStep", "RunTrace", "StoppingValue"]

Regime = Literal["PROCEED", "VERIFY", "ABSTAIN"]


class StoppingValue(NamedTuple):
    """Screened stopping value of an action at its current probabilities."""

    v_stop: float
    r_expected: float
    h_harm: float
    admissible: bool


@dataclass(frozen=True, kw_only=True, slots=True)
class Decision:
    """What the gate decided for one action, and why.

    Attributes
    ----------
    regime : {"PROCEED", "VERIFY", "ABSTAIN"}
    verifier : Verifier or None
        The verifier to call now (VERIFY only).
    voi : float or None
        Myopic planner: the largest one-step VOI (the chosen verifier's when VERIFY).
        Lookahead: ``v_stop - planner_value``, the value of the best verification plan.
        None when no verifier may be called.
    v_stop, r_expected, h_harm : float
        ``V_stop``, ``R = theta * P_any`` and ``H = P_any`` at ``probabilities``.
    probabilities : tuple of float
        The premises' violation probabilities the decision used (empty when failing closed).
    reason : str
        Short human-readable explanation.
    planner_value : float or None
        Lookahead only: expected loss of the optimal plan (``<= v_stop``).
    vois : tuple of float
        One-step VOI of each verifier offered, in the order given (empty when none);
        ``nan`` for a verifier the work bound left out.
    outcomes : int
        Joint outcomes enumerated for the one-step VOIs (``sum 2^k`` over the verifiers
        enumerated; at most ``MAX_OUTCOMES``).
    left_out : tuple of str
        Ids of the verifiers the work bound left out, in the order given (empty within it).
    planner_states : int
        Beliefs the lookahead planner valued (at most ``MAX_WORK``; 0 without a plan).

    ``r_expected`` is priced: ``(theta + harm_price) * P_any`` in ``mode="amv"``.
    """

    regime: Regime
    verifier: Verifier | None
    voi: float | None
    v_stop: float
    r_expected: float
    h_harm: float
    probabilities: tuple[float, ...]
    reason: str
    planner_value: float | None = None
    vois: tuple[float, ...] = ()
    outcomes: int = 0
    left_out: tuple[str, ...] = ()
    planner_states: int = 0

    @property
    def regime_code(self) -> int:
        """0 = PROCEED, 1 = VERIFY, 2 = ABSTAIN (the batch arrays' codes)."""
        return REGIME_CODES[self.regime]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (the verifier by id)."""
        return {
            "regime": self.regime,
            "verifier": None if self.verifier is None else self.verifier.id,
            "voi": self.voi,
            "v_stop": self.v_stop,
            "r_expected": self.r_expected,
            "h_harm": self.h_harm,
            "probabilities": list(self.probabilities),
            "reason": self.reason,
            "planner_value": self.planner_value,
            # JSON has no nan: a VOI the work bound left uncomputed is null
            "vois": [None if math.isnan(x) else x for x in self.vois],
            "outcomes": self.outcomes,
            "left_out": list(self.left_out),
            "planner_states": self.planner_states,
        }


class _DecisionFields:
    """:class:`Decision`'s slots, writable: what :func:`_decision` fills."""

    __slots__ = Decision.__slots__


def _decision(regime: Regime, verifier: Verifier | None, voi: float | None, v_stop: float,
              r_expected: float, h_harm: float, probabilities: tuple[float, ...], reason: str,
              planner_value: float | None, vois: tuple[float, ...], outcomes: int = 0,
              left_out: tuple[str, ...] = (), planner_states: int = 0) -> Decision:
    # The frozen dataclass's __init__ stores each field through object.__setattr__: about
    # 2 us, more than the rest of a decision. A writable object of the same slots takes
    # plain attribute stores, then becomes a Decision (a __class__ change between two
    # types of one slot layout); what it makes equals Decision(...) (tests/gate).
    d: Any = _DecisionFields()
    d.regime = regime
    d.verifier = verifier
    d.voi = voi
    d.v_stop = v_stop
    d.r_expected = r_expected
    d.h_harm = h_harm
    d.probabilities = probabilities
    d.reason = reason
    d.planner_value = planner_value
    d.vois = vois
    d.outcomes = outcomes
    d.left_out = left_out
    d.planner_states = planner_states
    d.__class__ = Decision
    return cast(Decision, d)


@dataclass(frozen=True, kw_only=True)
class RunStep:
    """One verification of a sequential run."""

    decision: Decision
    verifier: Verifier
    signals: dict[str, bool]
    posteriors_before: tuple[float, ...]
    posteriors_after: tuple[float, ...]
    cost_spent: float


@dataclass(frozen=True, kw_only=True)
class RunTrace:
    """A sequential run: every verification, and the decision it stopped with.

    ``total_cost`` is the summed ``execution_cost`` (not scaled by lambda); ``prior`` the
    probabilities before any verification, ``posteriors`` after the last one.
    """

    steps: tuple[RunStep, ...]
    final: Decision
    total_cost: float
    prior: tuple[float, ...]
    posteriors: tuple[float, ...]

    @property
    def verifications(self) -> int:
        """Number of verifier calls made."""
        return len(self.steps)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "steps": [
                {
                    "decision": s.decision.to_dict(),
                    "verifier": s.verifier.id,
                    "signals": dict(s.signals),
                    "posteriors_before": list(s.posteriors_before),
                    "posteriors_after": list(s.posteriors_after),
                    "cost_spent": s.cost_spent,
                }
                for s in self.steps
            ],
            "final": self.final.to_dict(),
            "total_cost": self.total_cost,
            "prior": list(self.prior),
            "posteriors": list(self.posteriors),
        }
