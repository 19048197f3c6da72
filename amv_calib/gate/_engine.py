"""The runtime gate: screened stopping value, corrected VOI, sequential stopping, planning.

This module and :mod:`amv_calib.gate._planner` are the readable reference engine. The
compiled batch engine (:mod:`amv_calib.gate._compiled`, behind ``evaluate_batch``) repeats
their arithmetic operation for operation; tests/gate/test_compiled.py holds the two equal bit
for bit.

Arithmetic of ``mode="amv"``
----------------------------
For premises ``p_1..p_m`` (premise order) ``q = prod_i (1 - p_i)`` multiplied left to right
from 1.0, ``H = 1 - q``, ``R = theta * H``; *admissible* iff ``R <= min(delta, kappa)`` and
``H <= epsilon``; ``V_stop = R`` if admissible else ``kappa``.

A verifier with reliability ``r`` resolving the premises ``S`` (taken in premise order)
has ``2^|S|`` joint outcomes, enumerated in ``itertools.product`` order (first premise most
significant, confirm before refute). For premise ``i``: ``Pc_i = (1-p_i) r + p_i (1-r)``
and ``Pr_i = p_i r + (1-p_i)(1-r)`` (both computed directly, not as ``1 - Pc_i``). An
outcome has probability ``w_o`` = the product of its ``Pc_i`` or ``Pr_i`` (left to right
over ``S``, from 1.0) and leaves ``q_o`` = ``q`` times the product of its factors
``r / Pc_i`` or ``(1-r) / Pr_i`` (each factor divided first, left to right, from ``q``),
which equals ``prod (1 - posterior)`` without dividing by ``1 - p_i``. Outcomes with a
factor ``Pc_i`` or ``Pr_i`` equal to 0 are skipped. ``E = sum_o w_o V_stop(q_o)`` in
outcome order, and ``VOI = V_stop - E - lambda * c``.

The myopic rule VERIFIES with the first verifier of largest VOI when that VOI exceeds
``VOI_TOLERANCE * (theta + kappa)``; else it PROCEEDS if admissible and ABSTAINS
otherwise. The tolerance guards against rounding: a free verifier that cannot change the
decision has VOI exactly 0, but ``H = 1 - q`` loses digits when the premises are nearly
sure (an absolute error of a few ulps of 1, times ``theta``), and that noise must not turn
into VERIFY. The lookahead planner VERIFIES when ``V_stop - V*`` exceeds the same
tolerance, ``V*`` the planned expected loss, with the earliest of the first steps whose
values lie within it of the best.

Harm price
----------
With ``harm_price = mu`` (``mode="amv"``) every ``theta`` above is ``theta + mu``, computed
once per decision: the screen, ``V_stop``, the VOIs, the planner, its clairvoyant bound and
the tolerance all price proceeding on a violated premise at ``theta + mu``, the Lagrangian of
an average-harm constraint (DESIGN section 2). ``mu = 0`` leaves every bit as it was
(``theta + 0.0 == theta``). :attr:`Decision.r_expected` reports the priced ``(theta + mu) *
P_any``, the quantity the screen compares with ``min(delta, kappa)`` (so ``v_stop ==
r_expected`` whenever the action is admissible); the unpriced expected loss is ``theta *
h_harm``. ``mode="seed"`` ignores the harm price.

Work bound
----------
A verifier over ``k`` premises has ``2^k`` joint outcomes. One decision enumerates at most
``MAX_OUTCOMES`` (4096) of them, summed over the verifiers offered: the verifiers are taken
in order of ``(k, position)`` while their outcomes fit (:func:`~._planner.enumerable`), so a
verifier over more than 12 premises is never enumerated, and the planner is given only the
enumerated verifiers (:mod:`._planner` bounds its own states by ``MAX_WORK``). Within the
bound (``sum 2^k <= MAX_OUTCOMES``, which the hot path checks as it goes) the decision is the
one without a bound, bit for bit. Past it, a verifier left out gets no VOI (``nan`` in
:attr:`Decision.vois`) but an upper bound of it, ``V_stop - lambda c - P_any * min(theta,
kappa)`` (no policy loses less than the clairvoyant, and ``P_any`` is a martingale under
verification; for a plan that begins with that verifier the same bound holds). The screen and
``V_stop`` are always exact (O(m)). The decision is then made over the enumerated verifiers
as usual, except that an admissible action whose left-out verifier (one it could afford)
has an upper bound above the tolerance is not PROCEEDed on: the gate ABSTAINS, since the value
it would proceed on is one it could not compute. VERIFY and ABSTAIN stand as they are. The
reason names the verifiers left out and whether they could matter; :attr:`Decision.outcomes`,
:attr:`Decision.left_out` and :attr:`Decision.planner_states` report the work. The seed mode
enumerates nothing (it updates one premise per verifier), so it has no bound.

``mode="seed"`` follows the seed engine operation by operation instead: ``P_any``
accumulated as ``1 - (1 - acc)(1 - p)``, only the first resolved premise (in premise order)
updated, ``P(refute) = 1 - P(confirm)``, strict ``VOI > 0``, and its calibration formula.
"""

from __future__ import annotations

import math
import operator
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Generic, Literal, NamedTuple, TypeVar, cast, overload

import numpy as np

from amv_calib.contract import LoadedArtifact, PortableCalibrator, utc_now_iso
from amv_calib.exceptions import UncalibratedPremiseError
from amv_calib.gate._batch import BatchDecision, evaluate_batch
from amv_calib.gate._decision_log import DecisionLogWriter
from amv_calib.gate._model import (
    REGIME_CODES,
    VOI_TOLERANCE,
    CandidateAction,
    GateSettings,
    Mode,
    Planner,
    Premise,
    Verifier,
    gate_number,
)
from amv_calib.gate._planner import MAX_OUTCOMES, Spec, enumerable, plan

__all__ = [
    "REGIME_CODES",
    "VOI_TOLERANCE",
    "Decision",
    "Gate",
    "Mode",
    "Planner",
    "Regime",
    "RunStep",
    "RunTrace",
    "StoppingValue",
    "UncalibratedPremiseError",
    "posterior_confirm",
    "posterior_refute",
    "seed_calibrate",
    "update_posteriors",
]

Regime = Literal["PROCEED", "VERIFY", "ABSTAIN"]


_NEG_INF: Final = float("-inf")
_NAN: Final = float("nan")
#: Most verifier ids a reason lists (the rest are counted).
_LISTED: Final = 5

_R_PROCEED: Final = (
    "admissible (R <= min(delta, kappa) and H <= epsilon) and no verification is worth its cost"
)
_R_PROCEED_NONE: Final = "admissible (R <= min(delta, kappa) and H <= epsilon); no verifier left"
_R_ABSTAIN_H: Final = "harm H = P_any exceeds epsilon and no verification is worth its cost"
_R_ABSTAIN_R: Final = (
    "expected loss R = theta * P_any exceeds min(delta, kappa) and no verification is worth "
    "its cost"
)
_R_ABSTAIN_R_PRICED: Final = (
    "expected loss R = (theta + harm_price) * P_any exceeds min(delta, kappa) and no "
    "verification is worth its cost"
)
_R_ABSTAIN_NONE: Final = "not admissible (R > min(delta, kappa) or H > epsilon); no verifier left"
_R_VERIFY: Final = "has the largest one-step VOI, and it is positive"
_R_VERIFY_PLAN: Final = "is the first call of the verification plan that beats stopping"
_R_ABSTAIN_BOUND: Final = (
    "admissible, but the work bound left out verifiers that could be worth calling; the gate "
    "does not proceed on a value it could not compute"
)


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


# -- posterior updates ---------------------------------------------------------------------


def posterior_confirm(p: float, r: float) -> float:
    """``P(violated | confirm) = p(1-r) / (p(1-r) + (1-p)r)``.

    A confirmation the model gives probability 0 (``p = 1``, ``r = 1``) believes the
    perfect verifier: 0.
    """
    num = p * (1.0 - r)
    den = num + (1.0 - p) * r
    return num / den if den > 0.0 else 0.0


def posterior_refute(p: float, r: float) -> float:
    """``P(violated | refute) = p r / (p r + (1-p)(1-r))``; 1 for a refutation of
    probability 0 (``p = 0``, ``r = 1``)."""
    num = p * r
    den = num + (1.0 - p) * (1.0 - r)
    return num / den if den > 0.0 else 1.0


def _seed_posterior(p: float, r: float, confirm: bool) -> float:
    # the seed's own arithmetic: P(refute) = 1 - P(confirm), clipped to [0, 1]
    pc = (1.0 - p) * r + p * (1.0 - r)
    if confirm:
        return min(1.0, max(0.0, p * (1.0 - r) / pc)) if pc > 0.0 else 0.0
    pr = 1.0 - pc
    return min(1.0, max(0.0, p * r / pr)) if pr > 0.0 else 1.0


def _as_signal(value: Any, what: str) -> bool:
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise ValueError(f"{what}={value!r} must be a boolean (True = confirms valid)")


def _signals(verifier: Verifier, raw: Any) -> dict[str, bool]:
    ids = verifier.resolves_premise_ids
    if isinstance(raw, (bool, np.bool_)):
        if len(ids) == 1:
            return {ids[0]: bool(raw)}
        raise ValueError(
            f"verifier {verifier.id!r} resolves {len(ids)} premises; its signals must be a "
            f"mapping premise id -> bool, got {raw!r}"
        )
    if not isinstance(raw, Mapping):
        raise ValueError(
            f"signals of verifier {verifier.id!r} must be a mapping premise id -> bool, "
            f"got {raw!r}"
        )
    out: dict[str, bool] = {}
    for pid, val in raw.items():
        if pid not in ids:
            raise ValueError(
                f"signals of verifier {verifier.id!r} name premise {pid!r}, which it does "
                f"not resolve ({list(ids)})"
            )
        out[str(pid)] = _as_signal(val, f"signal for premise {pid!r} of verifier "
                                        f"{verifier.id!r}")
    return out


def update_posteriors(
    probs: Mapping[str, float],
    verifier: Verifier,
    signals: Mapping[str, bool] | bool,
    *,
    mode: Mode = "amv",
) -> dict[str, float]:
    """Posteriors after one verifier call.

    Parameters
    ----------
    probs : mapping premise id -> float
        Current violation probabilities, in premise order.
    verifier : Verifier
    signals : mapping premise id -> bool, or bool
        ``True`` = the verifier says the premise is valid. A premise the mapping leaves
        out is not updated. A bare bool is accepted for a verifier resolving one premise,
        and always in the seed mode.
    mode : {"amv", "seed"}
        ``"amv"`` updates every signalled premise (conditionally independent signals);
        ``"seed"`` only the first premise, in ``probs`` order, that the verifier resolves.

    Returns
    -------
    dict premise id -> float
    """
    out = dict(probs)
    for pid in verifier.resolves_premise_ids:
        if pid not in out:
            raise ValueError(
                f"resolves_premise_ids of verifier {verifier.id!r} names premise {pid!r}, "
                f"which is not among {list(out)}"
            )
    r = verifier.symmetric_reliability
    if mode == "seed":
        target = next((pid for pid in out if pid in verifier.resolves_premise_ids), None)
        if target is None:
            return out
        if isinstance(signals, (bool, np.bool_)):
            sig: bool | None = bool(signals)
        else:
            given = _signals(verifier, signals)
            sig = given.get(target)
        if sig is not None:
            out[target] = _seed_posterior(out[target], r, sig)
        return out
    for pid, confirm in _signals(verifier, signals).items():
        p = out[pid]
        out[pid] = posterior_confirm(p, r) if confirm else posterior_refute(p, r)
    return out


# -- calibration -----------------------------------------------------------------------------


def seed_calibrate(recency_hours: float, source_trust_score: float, model_confidence: float,
                   contradiction_flag: bool) -> float:
    """The seed engine's ``calibratePremiseFailureProbability``, operation by operation.

    The same model as :func:`amv_calib.contract._features.seed_prior_calibrator` (which computes
    ``logit`` as a difference of logs and the sigmoid in a stable form, so the two agree
    to rounding only); the seed mode uses this one to reproduce the seed bit for bit.
    """
    recency_penalty = min(1.0, recency_hours / (24 * 30))
    logit_conf = math.log(max(1e-5, model_confidence) / max(1e-5, 1 - model_confidence))
    z = (-0.85 - (1.42 * logit_conf) + (2.15 * recency_penalty)
         - (1.80 * source_trust_score) + (2.5 if contradiction_flag else 0.0))
    return max(0.001, min(0.999, 1.0 / (1.0 + math.exp(-z))))


# -- the gate ----------------------------------------------------------------------------------


def _unknown_premise(verifier: Verifier, pid: str, action: CandidateAction) -> ValueError:
    return ValueError(
        f"resolves_premise_ids of verifier {verifier.id!r} names premise {pid!r}, which "
        f"action {action.action_id!r} does not have (its premises: {list(action._index)})"
    )


def _expect(probs: Sequence[float], q: float, idx: Sequence[int], r: float, theta: float,
            kappa: float, lim: float, eps: float) -> float:
    # E[V_stop after the verifier] over its 2^k joint outcomes (module docstring)
    s = 1.0 - r
    if len(idx) == 2:  # unrolled; the same products in the same order as the loop below
        p1 = probs[idx[0]]
        p2 = probs[idx[1]]
        a1 = 1.0 - p1
        a2 = 1.0 - p2
        c1 = a1 * r + p1 * s
        e1 = p1 * r + a1 * s
        c2 = a2 * r + p2 * s
        e2 = p2 * r + a2 * s
        e = 0.0
        for w1, f1 in ((c1, r / c1 if c1 > 0.0 else 0.0), (e1, s / e1 if e1 > 0.0 else 0.0)):
            if w1 > 0.0:
                g = q * f1
                for w2, f2 in ((c2, r / c2 if c2 > 0.0 else 0.0),
                               (e2, s / e2 if e2 > 0.0 else 0.0)):
                    if w2 > 0.0:
                        h = 1.0 - g * f2
                        rx = theta * h
                        e += (1.0 * w1 * w2) * (rx if (rx <= lim and h <= eps) else kappa)
        return e
    ws = [1.0]
    fs = [q]
    for i in idx:
        p = probs[i]
        a = 1.0 - p
        pc = a * r + p * s
        pr = p * r + a * s
        nw: list[float] = []
        nf: list[float] = []
        fc = r / pc if pc > 0.0 else 0.0
        fr = s / pr if pr > 0.0 else 0.0
        for w, f in zip(ws, fs, strict=True):
            if pc > 0.0:
                nw.append(w * pc)
                nf.append(f * fc)
            if pr > 0.0:
                nw.append(w * pr)
                nf.append(f * fr)
        ws, fs = nw, nf
    e = 0.0
    for w, f in zip(ws, fs, strict=True):
        h = 1.0 - f
        rx = theta * h
        e += w * (rx if (rx <= lim and h <= eps) else kappa)
    return e


_T = TypeVar("_T")


class _Screen(NamedTuple):
    """What :meth:`Gate._decide` hands :meth:`Gate._decide_bounded`: the priced ``theta``,
    ``kappa``, ``min(delta, kappa)`` and the screen of the action's beliefs."""

    theta: float
    kappa: float
    lim: float
    q: float
    h: float
    rx: float
    adm: bool
    v_stop: float


class _ReadOnly(Generic[_T]):
    """A read-only attribute of :class:`Gate`: the value at ``path`` (a dotted attribute
    path from the gate, as :func:`operator.attrgetter` reads it), documented by ``doc``."""

    def __init__(self, path: str, doc: str) -> None:
        self.__doc__ = doc
        self._get = operator.attrgetter(path)
        self._name = path

    def __set_name__(self, owner: type, name: str) -> None:
        self._name = name

    @overload
    def __get__(self, obj: None, owner: type | None = None) -> _ReadOnly[_T]: ...

    @overload
    def __get__(self, obj: Gate, owner: type | None = None) -> _T: ...

    def __get__(self, obj: Gate | None, owner: type | None = None) -> _T | _ReadOnly[_T]:
        if obj is None:
            return self
        return cast(_T, self._get(obj))

    def __set__(self, obj: Gate, value: Any) -> None:
        raise AttributeError(f"Gate.{self._name} is read-only; make a new Gate")


class Gate:
    """The AMV runtime gate: PROCEED, VERIFY or ABSTAIN for one candidate action.

    Parameters
    ----------
    lambda_cost_scale : float, default 1.0
        ``lambda``: weight of a verifier's execution cost in the loss.
    delta_loss_threshold : float, default 10.0
        ``delta``: largest expected loss ``R`` an admissible action may carry.
    epsilon_harm_bound : float, default 0.05
        ``epsilon``: largest harm probability ``H = P_any`` an admissible action may carry.
    harm_price : float, default 0.0
        ``mu >= 0`` (finite): the price of harm, the Lagrange multiplier of an average-harm
        constraint. When planning (``mode="amv"``), proceeding while a premise is violated
        costs ``theta + mu`` instead of ``theta``: in the screen, the stopping value, the
        VOIs and the planner (module docstring, "Harm price"). 0 leaves every decision as
        it was; ``mode="seed"`` ignores it.
    planner : {"lookahead", "myopic"}, default "lookahead"
        ``"lookahead"`` plans over all remaining verifiers (see :mod:`._planner`);
        ``"myopic"`` is the seed's one-step rule.
    mode : {"amv", "seed"}, default "amv"
        ``"seed"`` reproduces the seed engine exactly: myopic, only the first resolved
        premise updated, the seed's calibration formula and clamp ``[0.001, 0.999]``
        (unless a ``calibrator`` is given), and its floating-point operation order.
    max_verifications : int, default 8
        Verifier calls allowed per action (0 = never VERIFY).
    reuse_verifiers : bool, default False
        Whether :meth:`run` may call a verifier again.
    calibrator : PortableCalibrator, optional
        Computes ``p`` for premises that carry a claim but no probability. Without one,
        ``mode="amv"`` fails closed (ABSTAIN) on such premises.
    refusal : str, optional
        When set, every decision is ABSTAIN with this reason (a refused artifact).
    artifact_name, artifact_version : str, optional
        Recorded in the decision log.
    decision_log : path or callable, optional
        A path gets one JSON line per decision (``amv_calib.gate._decision_log``); a
        callable receives each record as a dict.

    Examples
    --------
    One premise at p = 0.04 behind a transfer (theta 120, kappa 4) and a cheap, reliable
    check: verifying first is worth its cost; a confirmation then lets it proceed.

    >>> from amv_calib.gate import CandidateAction, Gate, Premise, Verifier
    >>> action = CandidateAction(
    ...     action_id="tx-1", tool_name="bank_transfer", impact_cost_theta=120.0,
    ...     abstention_cost_kappa=4.0,
    ...     premises=(Premise(id="p1", calibrated_violation_probability=0.04),))
    >>> bank = Verifier(id="bank-api", resolves_premise_ids=("p1",), execution_cost=0.2,
    ...                 symmetric_reliability=0.95)
    >>> gate = Gate()
    >>> d = gate.evaluate(action, [bank])
    >>> d.regime, d.verifier.id
    ('VERIFY', 'bank-api')
    >>> trace = gate.run(action, [bank], lambda verifier, action: True)
    >>> [s.verifier.id for s in trace.steps], trace.final.regime
    (['bank-api'], 'PROCEED')
    """

    __slots__ = ("_settings", "_lam", "_delta", "_eps", "_mu", "_seed", "_price", "_lookahead",
                 "_max", "_reuse", "_calibrator", "_refusal", "_artifact_name",
                 "_artifact_version", "_decision_log", "_sink")

    def __init__(
        self,
        *,
        lambda_cost_scale: float = 1.0,
        delta_loss_threshold: float = 10.0,
        epsilon_harm_bound: float = 0.05,
        harm_price: float = 0.0,
        planner: Planner = "lookahead",
        mode: Mode = "amv",
        max_verifications: int = 8,
        reuse_verifiers: bool = False,
        calibrator: PortableCalibrator | None = None,
        refusal: str | None = None,
        artifact_name: str | None = None,
        artifact_version: str | None = None,
        decision_log: str | os.PathLike[str] | Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        st = GateSettings(
            lambda_cost_scale=lambda_cost_scale, delta_loss_threshold=delta_loss_threshold,
            epsilon_harm_bound=epsilon_harm_bound, harm_price=harm_price, planner=planner,
            mode=mode, max_verifications=max_verifications, reuse_verifiers=reuse_verifiers)
        if calibrator is not None and not isinstance(calibrator, PortableCalibrator):
            raise ValueError(f"calibrator={calibrator!r} must be a PortableCalibrator")
        if refusal is not None and not isinstance(refusal, str):
            raise ValueError(f"refusal={refusal!r} must be a string")
        self._settings = st
        # the hot path reads plain attributes (module docstring)
        self._lam = st.lambda_cost_scale
        self._delta = st.delta_loss_threshold
        self._eps = st.epsilon_harm_bound
        self._mu = st.harm_price
        self._seed = st.mode == "seed"
        # what the decisions add to theta: the seed engine knows no harm price
        self._price = 0.0 if self._seed else self._mu
        self._lookahead = st.planner == "lookahead"
        self._max = st.max_verifications
        self._reuse = st.reuse_verifiers
        self._calibrator = calibrator
        self._refusal = refusal
        self._artifact_name = artifact_name
        self._artifact_version = artifact_version
        self._decision_log = decision_log
        self._sink = open_decision_log(decision_log)[0]

    # -- configuration (read-only) --------------------------------------------------------
    settings = _ReadOnly[GateSettings](
        "_settings", "The thresholds and planner, checked (the constructor's parameters).")
    lambda_cost_scale = _ReadOnly[float]("_settings.lambda_cost_scale", "``lambda``.")
    delta_loss_threshold = _ReadOnly[float]("_settings.delta_loss_threshold", "``delta``.")
    epsilon_harm_bound = _ReadOnly[float]("_settings.epsilon_harm_bound", "``epsilon``.")
    harm_price = _ReadOnly[float](
        "_settings.harm_price", "``mu``, the price of harm (ignored in ``mode=\"seed\"``).")
    planner = _ReadOnly[Planner](
        "_settings.planner", "The planner in effect (``\"myopic\"`` whenever ``mode=\"seed\"``).")
    mode = _ReadOnly[Mode]("_settings.mode", "``\"amv\"`` or ``\"seed\"``.")
    max_verifications = _ReadOnly[int](
        "_settings.max_verifications", "Verifier calls allowed per action.")
    reuse_verifiers = _ReadOnly[bool](
        "_settings.reuse_verifiers", "Whether a run may call a verifier again.")
    calibrator = _ReadOnly[PortableCalibrator | None](
        "_calibrator", "The calibrator for claim-only premises, if any.")
    refusal = _ReadOnly[str | None]("_refusal", "Why this gate abstains on everything, or None.")
    artifact_name = _ReadOnly[str | None](
        "_artifact_name", "Name of the artifact the calibrator came from.")
    artifact_version = _ReadOnly[str | None](
        "_artifact_version", "Version of the artifact the calibrator came from.")

    def __repr__(self) -> str:
        return (
            f"Gate(lambda_cost_scale={self._lam!r}, delta_loss_threshold={self._delta!r}, "
            f"epsilon_harm_bound={self._eps!r}, harm_price={self._mu!r}, "
            f"planner={self.planner!r}, "
            f"mode={self.mode!r}, max_verifications={self._max!r}, "
            f"calibrator={'yes' if self._calibrator is not None else None}, "
            f"refusal={self._refusal!r})"
        )

    # -- construction from an artifact -------------------------------------------------------
    @classmethod
    def from_artifact(cls, ref: str | os.PathLike[str] | LoadedArtifact | None = None, *,
                      strict: bool = False, **overrides: Any) -> Gate:
        """A gate using an exported artifact's calibrator and thresholds.

        See :func:`amv_calib.contract._artifact.gate_from_artifact`: a refused artifact gives
        a gate that always abstains, unless ``strict`` re-raises the ArtifactError.
        """
        from amv_calib.contract import gate_from_artifact

        return gate_from_artifact(cls, ref, strict=strict, **overrides)

    # -- probabilities ---------------------------------------------------------------------
    def _calibrate(self, pm: Premise) -> float:
        claim = pm.claim
        if claim is None:
            raise UncalibratedPremiseError(
                f"premise {pm.id!r} has no calibrated_violation_probability and no claim"
            )
        cal = self._calibrator
        if cal is None:
            if not self._seed:
                raise UncalibratedPremiseError(
                    f"premise {pm.id!r} has no calibrated_violation_probability and the gate "
                    f"has no calibrator"
                )
            return seed_calibrate(claim.recency_hours, claim.source_trust_score,
                                  claim.model_confidence, claim.contradiction_flag)
        p = cal.predict_one(claim.features())
        if not 0.0 <= p <= 1.0:
            raise UncalibratedPremiseError(
                f"calibrator gave p={p!r} for premise {pm.id!r}, outside [0, 1]"
            )
        return p

    def probabilities(self, action: CandidateAction) -> tuple[float, ...]:
        """Violation probability of each premise, in premise order.

        A premise's own ``calibrated_violation_probability`` wins; otherwise its claim
        goes through the calibrator (the seed prior in ``mode="seed"``).

        Raises
        ------
        UncalibratedPremiseError
            A premise has neither (``evaluate`` turns this into ABSTAIN).
        """
        return tuple(self._probs(action))

    def _probs(self, action: CandidateAction) -> list[float]:
        out = []
        for pm in action.premises:
            p = pm.calibrated_violation_probability
            out.append(self._calibrate(pm) if p is None else p)
        return out

    # -- stopping value and one-step VOI ---------------------------------------------------------
    def stopping_value(self, action: CandidateAction) -> StoppingValue:
        """Screened stopping value ``(v_stop, r_expected, h_harm, admissible)``.

        A view of the decision with no verifier offered (which PROCEEDS exactly when the
        action is admissible), so there is one copy of the arithmetic.
        """
        d = self._decide(action, self._probs(action), (), 0, None)
        return StoppingValue(d.v_stop, d.r_expected, d.h_harm, d.regime == "PROCEED")

    def one_step_voi(self, action: CandidateAction, verifier: Verifier,
                     v_stop: float | None = None) -> float:
        """``V_stop - E_o[V_stop(b | o)] - lambda * c`` for one verifier.

        The expectation runs over the joint outcomes of every premise the verifier resolves
        (only the first of them in ``mode="seed"``). A view of the decision routine: the
        value is the entry of :attr:`Decision.vois` that :meth:`evaluate` reports for it,
        ``nan`` for a verifier over more premises than the work bound enumerates
        (``2^k > MAX_OUTCOMES``).

        Parameters
        ----------
        action : CandidateAction
        verifier : Verifier
        v_stop : float, optional
            The current stopping value, as :meth:`stopping_value` gives it. The VOI is
            only defined against the stopping value of the action's own probabilities, so
            this argument is a consistency check: a value that differs (bit for bit) from
            the one the gate computes raises ``ValueError``. Leave it out to skip the check.

        Raises
        ------
        ValueError
            ``v_stop`` is not the action's stopping value, or the verifier names a premise
            the action does not have.
        """
        d = self._decide(action, self._probs(action), (verifier,), 1, None)
        if v_stop is not None and not (v_stop == d.v_stop):
            raise ValueError(
                f"v_stop={v_stop!r} is not the stopping value {d.v_stop!r} of action "
                f"{action.action_id!r}; the one-step VOI is defined against that value"
            )
        return d.vois[0]

    def _indices(self, action: CandidateAction, verifier: Verifier) -> tuple[int, ...]:
        index = action._index
        out = []
        for pid in verifier.resolves_premise_ids:
            i = index.get(pid)
            if i is None:
                raise _unknown_premise(verifier, pid, action)
            out.append(i)
        return tuple(sorted(out))

    # -- decisions ----------------------------------------------------------------------------
    def evaluate(self, action: CandidateAction, verifiers: Sequence[Verifier] = ()) -> Decision:
        """Decide PROCEED, VERIFY (with which verifier) or ABSTAIN for ``action``.

        Raises
        ------
        ValueError
            A verifier names a premise the action does not have.
        """
        d: Decision
        if self._refusal is not None:
            for v in verifiers:
                self._indices(action, v)
            d = self._closed(action, self._refusal)
        else:
            probs = action._explicit
            if probs is None:
                try:
                    probs = tuple(self._probs(action))
                except UncalibratedPremiseError as exc:
                    for v in verifiers:
                        self._indices(action, v)
                    probs = None
                    d = self._closed(action, f"failing closed: {exc}")
            if probs is not None:
                if self._seed:  # _decide's dispatch, one call fewer on the per-call path
                    d = self._decide_seed(action, probs, verifiers, self._max,
                                          action.impact_cost_theta,
                                          action.abstention_cost_kappa)
                else:
                    d = self._decide(action, probs, verifiers, self._max, None)
        if self._sink is not None:
            self._emit(self._record(action, d, None, verifiers))
        return d

    def _closed(self, action: CandidateAction, reason: str) -> Decision:
        # fail closed as if every premise were violated: P_any = 1
        return _decision("ABSTAIN", None, None, action.abstention_cost_kappa,
                         action.impact_cost_theta + self._price, 1.0, (), reason, None, ())

    def _decide(self, action: CandidateAction, probs: Sequence[float],
                verifiers: Sequence[Verifier], left: int, budget: float | None,
                limit: int = MAX_OUTCOMES) -> Decision:
        """The decision; past ``limit`` joint outcomes, :meth:`_decide_bounded`'s (a
        ``limit`` below 2 sends every action with a verifier there: the tests' way in)."""
        # The hot path: plain floats and locals, no dataclass copies (module docstring).
        kappa = action.abstention_cost_kappa
        probs_t = probs if type(probs) is tuple else tuple(probs)
        if self._seed:
            if budget is not None:
                verifiers = [v for v in verifiers if v.execution_cost <= budget]
            return self._decide_seed(action, probs_t, verifiers, left,
                                     action.impact_cost_theta, kappa)
        theta = action.impact_cost_theta + self._price  # module docstring, "Harm price"
        delta = self._delta
        lim = delta if delta < kappa else kappa
        eps = self._eps
        lam = self._lam
        q = 1.0
        for p in probs_t:
            q *= 1.0 - p
        h = 1.0 - q
        rx = theta * h
        adm = rx <= lim and h <= eps
        v_stop = rx if adm else kappa
        index = action._index
        look = self._lookahead
        best = _NEG_INF
        best_v: Verifier | None = None
        best_j = -1
        vois: list[float] = []
        specs: list[Spec] = []
        offered: list[Verifier] = []
        spent = 0  # joint outcomes enumerated so far (module docstring, "Work bound")
        if left > 0:
            add = vois.append
            one = -1
            for v in verifiers:
                pid = v._single
                r = v.symmetric_reliability
                if pid is not None:
                    i = index.get(pid)
                    if i is None:
                        raise _unknown_premise(v, pid, action)
                    spent += 2
                    if spent > limit:
                        return self._decide_bounded(
                            action, probs_t, verifiers, left, budget,
                            _Screen(theta, kappa, lim, q, h, rx, adm, v_stop))
                    # one premise, unrolled (module docstring for the arithmetic)
                    p = probs_t[i]
                    s = 1.0 - r
                    a = 1.0 - p
                    pc = a * r + p * s
                    pr = p * r + a * s
                    e = 0.0
                    if pc > 0.0:
                        hc = 1.0 - q * (r / pc)
                        rc = theta * hc
                        e = pc * (rc if (rc <= lim and hc <= eps) else kappa)
                    if pr > 0.0:
                        hr = 1.0 - q * (s / pr)
                        rr = theta * hr
                        e += pr * (rr if (rr <= lim and hr <= eps) else kappa)
                    idx: tuple[int, ...] | None = None
                    one = i
                else:
                    idx = self._indices(action, v)
                    spent += 1 << len(idx)
                    if spent > limit:
                        return self._decide_bounded(
                            action, probs_t, verifiers, left, budget,
                            _Screen(theta, kappa, lim, q, h, rx, adm, v_stop))
                    e = _expect(probs_t, q, idx, r, theta, kappa, lim, eps)
                cost = v.execution_cost
                voi = v_stop - e - lam * cost
                add(voi)
                if budget is not None and cost > budget:
                    continue
                if voi > best:
                    best = voi
                    best_v = v
                    best_j = len(offered)
                if look:
                    specs.append(Spec((one,) if idx is None else idx, r, lam * cost, cost))
                    offered.append(v)
        else:
            for v in verifiers:
                self._indices(action, v)
        tol = VOI_TOLERANCE * (theta + kappa)
        if best_v is None:
            return _decision("PROCEED" if adm else "ABSTAIN", None, None, v_stop, rx, h, probs_t,
                             _R_PROCEED_NONE if adm else _R_ABSTAIN_NONE, None, tuple(vois),
                             spent)
        if look:
            pl = plan(probs_t, theta, kappa, lim, eps, specs, depth=left, budget=budget,
                      reuse=self._reuse, myopic_first=best_j if best > tol else None,
                      myopic_value=v_stop - best, tol=tol)
            gain = v_stop - pl.value
            if pl.first is not None and gain > tol:
                v = offered[pl.first]
                return _decision("VERIFY", v, gain, v_stop, rx, h, probs_t,
                                 "lookahead: verifier " + v.id + " " + _R_VERIFY_PLAN,
                                 pl.value, tuple(vois), spent, (), pl.states)
            return _decision("PROCEED" if adm else "ABSTAIN", None, gain, v_stop, rx, h,
                             probs_t, _R_PROCEED if adm else _abstain_reason(rx, lim, self._price),
                             pl.value, tuple(vois), spent, (), pl.states)
        if best > tol:
            regime: Regime = "VERIFY"
            reason = "verifier " + best_v.id + " " + _R_VERIFY
        else:
            regime = "PROCEED" if adm else "ABSTAIN"
            reason = _R_PROCEED if adm else _abstain_reason(rx, lim, self._price)
            best_v = None
        return _decision(regime, best_v, best, v_stop, rx, h, probs_t, reason, None,
                         tuple(vois), spent)

    def _decide_bounded(self, action: CandidateAction, probs: tuple[float, ...],
                        verifiers: Sequence[Verifier], left: int, budget: float | None,
                        screen: _Screen) -> Decision:
        """:meth:`_decide` past the work bound (module docstring, "Work bound").

        Only the verifiers :func:`~._planner.enumerable` keeps are enumerated and planned;
        the others get the upper bound of their one-step VOI, and an admissible action one
        of whose affordable left-out verifiers could be worth calling is ABSTAINED on
        instead of PROCEEDED. Every value it shares with :meth:`_decide` is computed with
        the same operations (one premise through :func:`_expect` gives the unrolled
        branch's bits), and the compiled engine repeats it.
        """
        theta, kappa, lim, q, h, rx, adm, v_stop = screen
        eps, lam, look = self._eps, self._lam, self._lookahead
        tol = VOI_TOLERANCE * (theta + kappa)
        # no policy loses less than the clairvoyant: P_any * min(theta, kappa)
        lb = h * (theta if theta < kappa else kappa)
        idxs = [self._indices(action, v) for v in verifiers]
        keep = enumerable([len(idx) for idx in idxs])
        best, best_v, best_j = _NEG_INF, None, -1
        vois: list[float] = []
        specs: list[Spec] = []
        offered: list[Verifier] = []
        out: list[str] = []
        could: list[tuple[str, float]] = []  # left out, affordable, upper bound above tol
        spent = 0
        for v, idx, kept in zip(verifiers, idxs, keep, strict=True):
            cost = v.execution_cost
            affordable = budget is None or cost <= budget
            if not kept:
                vois.append(_NAN)
                out.append(v.id)
                ub = v_stop - lam * cost - lb
                if affordable and ub > tol:
                    could.append((v.id, ub))
                continue
            spent += 1 << len(idx)
            r = v.symmetric_reliability
            voi = v_stop - _expect(probs, q, idx, r, theta, kappa, lim, eps) - lam * cost
            vois.append(voi)
            if not affordable:
                continue
            if voi > best:
                best, best_v, best_j = voi, v, len(offered)
            specs.append(Spec(idx, r, lam * cost, cost))
            offered.append(v)
        note = _bound_note(verifiers, idxs, keep, could)
        stop: Regime = "ABSTAIN" if could or not adm else "PROCEED"
        states = 0
        if best_v is None:
            voi_out: float | None = None
            value = None
            why = (_R_ABSTAIN_BOUND if adm and could
                   else _R_PROCEED_NONE if adm else _R_ABSTAIN_NONE)
        elif look:
            pl = plan(probs, theta, kappa, lim, eps, specs, depth=left, budget=budget,
                      reuse=self._reuse, myopic_first=best_j if best > tol else None,
                      myopic_value=v_stop - best, tol=tol)
            voi_out, value, states = v_stop - pl.value, pl.value, pl.states
            if pl.first is not None and voi_out > tol:
                v = offered[pl.first]
                return _decision("VERIFY", v, voi_out, v_stop, rx, h, probs,
                                 "lookahead: verifier " + v.id + " " + _R_VERIFY_PLAN + note,
                                 value, tuple(vois), spent, tuple(out), states)
            why = (_R_ABSTAIN_BOUND if adm and could
                   else _R_PROCEED if adm else _abstain_reason(rx, lim, self._price))
        else:
            voi_out, value = best, None
            if best > tol:
                return _decision("VERIFY", best_v, best, v_stop, rx, h, probs,
                                 "verifier " + best_v.id + " " + _R_VERIFY + note, None,
                                 tuple(vois), spent, tuple(out), 0)
            why = (_R_ABSTAIN_BOUND if adm and could
                   else _R_PROCEED if adm else _abstain_reason(rx, lim, self._price))
        return _decision(stop, None, voi_out, v_stop, rx, h, probs, why + note, value,
                         tuple(vois), spent, tuple(out), states)

    def _decide_seed(self, action: CandidateAction, probs: tuple[float, ...],
                     verifiers: Sequence[Verifier], left: int, theta: float,
                     kappa: float) -> Decision:
        # The seed engine's evaluate(), operation by operation (module docstring).
        delta = self._delta
        lim = kappa if kappa < delta else delta  # min(delta, kappa)
        eps = self._eps
        lam = self._lam
        # pre[j]: the seed's running P_any after the first j premises; an outcome that
        # changes premise t re-runs the same recurrence from pre[t], so the arithmetic is
        # the seed's, operation for operation
        pre = [0.0]
        keep = pre.append
        h = 0.0
        for p in probs:
            h = 1.0 - (1.0 - h) * (1.0 - p)
            keep(h)
        rx = h * theta
        adm = rx <= lim and h <= eps
        v_stop = rx if adm else kappa
        index = action._index
        best = _NEG_INF
        best_v: Verifier | None = None
        vois: list[float] = []
        add = vois.append
        m = len(probs)
        for v in verifiers:
            pid = v._single
            if pid is not None:
                t = index.get(pid)
                if t is None:
                    raise _unknown_premise(v, pid, action)
            else:
                found = self._indices(action, v)
                t = found[0] if found else None
            if t is None:
                voi = -lam * v.execution_cost
            else:
                p = probs[t]
                r = v.symmetric_reliability
                pc = (1.0 - p) * r + p * (1.0 - r)
                pr = 1.0 - pc
                # A zero-probability outcome: the seed's NaN posterior is inadmissible and
                # 0 * kappa adds exactly 0, which leaving the term out reproduces.
                e = 0.0
                base = 1.0 - pre[t]
                if pc != 0.0:
                    acc = 1.0 - base * (1.0 - (p * (1.0 - r)) / pc)
                    for j in range(t + 1, m):
                        acc = 1.0 - (1.0 - acc) * (1.0 - probs[j])
                    ra = acc * theta
                    e = pc * (ra if (ra <= lim and acc <= eps) else kappa)
                if pr != 0.0:
                    acc = 1.0 - base * (1.0 - (p * r) / pr)
                    for j in range(t + 1, m):
                        acc = 1.0 - (1.0 - acc) * (1.0 - probs[j])
                    ra = acc * theta
                    e = e + pr * (ra if (ra <= lim and acc <= eps) else kappa)
                voi = (v_stop - e) - (lam * v.execution_cost)
            add(voi)
            if voi > best:
                best = voi
                best_v = v
        if left <= 0 or best_v is None:
            return _decision("PROCEED" if adm else "ABSTAIN", None, None, v_stop, rx, h, probs,
                             _R_PROCEED_NONE if adm else _R_ABSTAIN_NONE, None, tuple(vois))
        if best > 0.0:
            return _decision("VERIFY", best_v, best, v_stop, rx, h, probs,
                             "verifier " + best_v.id + " " + _R_VERIFY, None, tuple(vois))
        return _decision("PROCEED" if adm else "ABSTAIN", None, best, v_stop, rx, h, probs,
                         _R_PROCEED if adm else _abstain_reason(rx, lim, 0.0), None, tuple(vois))

    # -- sequential stopping -----------------------------------------------------------------------
    def run(
        self,
        action: CandidateAction,
        verifiers: Sequence[Verifier],
        verify: Callable[[Verifier, CandidateAction], Mapping[str, bool] | bool],
        *,
        budget: float | None = None,
    ) -> RunTrace:
        """Verify, update and decide again until the gate stops.

        Parameters
        ----------
        action : CandidateAction
        verifiers : sequence of Verifier
            Each is called at most once unless the gate has ``reuse_verifiers=True``.
        verify : callable
            ``verify(verifier, action)`` performs the check and returns its signals:
            a mapping premise id -> bool (True = confirms valid); a bare bool for a
            verifier resolving one premise (and always in ``mode="seed"``).
        budget : float, optional
            Largest total ``execution_cost`` to spend; verifiers that would exceed what
            is left are not called. ``max_verifications`` bounds the number of calls.

        Returns
        -------
        RunTrace
        """
        if budget is not None:
            budget = gate_number(budget, "budget")
            if budget < 0.0:
                raise ValueError(f"budget={budget!r} must be >= 0")
        for v in verifiers:
            self._indices(action, v)
        steps: list[RunStep] = []
        calls: list[dict[str, Any]] = []
        spent = 0.0
        probs: list[float] = []
        final: Decision | None = None
        if self._refusal is not None:
            final = self._closed(action, self._refusal)
        else:
            try:
                probs = self._probs(action)
            except UncalibratedPremiseError as exc:
                final = self._closed(action, f"failing closed: {exc}")
        prior = tuple(probs)
        available = list(verifiers)
        while final is None:
            left = self._max - len(steps)
            d = self._decide(action, probs, available, left,
                             None if budget is None else budget - spent)
            if d.regime != "VERIFY" or d.verifier is None:
                final = d
                break
            v = d.verifier
            raw = verify(v, action)
            if self._seed and isinstance(raw, (bool, np.bool_)):
                # the seed's verifier answers about its first premise in premise order
                raw = {action.premises[self._indices(action, v)[0]].id: bool(raw)}
            signals = _signals(v, raw)
            before = tuple(probs)
            probs = self._update(action, probs, v, signals)
            spent += v.execution_cost
            steps.append(RunStep(decision=d, verifier=v, signals=signals,
                                 posteriors_before=before, posteriors_after=tuple(probs),
                                 cost_spent=spent))
            calls.append({"verifier": v.id, "signals": dict(signals),
                          "cost": v.execution_cost, "reliability": v.symmetric_reliability})
            if not self._reuse:
                available = [u for u in available if u is not v]
        trace = RunTrace(steps=tuple(steps), final=final, total_cost=spent, prior=prior,
                         posteriors=tuple(probs))
        if self._sink is not None:
            rec = self._record(action, final, prior, verifiers)
            rec["verifier_calls"] = calls
            rec["posteriors"] = list(probs)
            self._emit(rec)
        return trace

    def _update(self, action: CandidateAction, probs: list[float], v: Verifier,
                signals: dict[str, bool]) -> list[float]:
        out = list(probs)
        r = v.symmetric_reliability
        index = action._index
        if self._seed:
            idx = self._indices(action, v)
            if idx:
                t = idx[0]
                sig = signals.get(action.premises[t].id)
                if sig is not None:
                    out[t] = _seed_posterior(out[t], r, sig)
            return out
        for pid, confirm in signals.items():
            i = index[pid]
            out[i] = posterior_confirm(out[i], r) if confirm else posterior_refute(out[i], r)
        return out

    # -- batch -----------------------------------------------------------------------------------
    def evaluate_batch(self, p: Any, premise_mask: Any, theta: Any, kappa: Any, resolves: Any,
                       cost: Any, reliability: Any, available: Any = None,
                       **kwargs: Any) -> BatchDecision:
        """Decisions for many padded actions at once; see
        :func:`amv_calib.gate._batch.evaluate_batch` (returns a ``BatchDecision``)."""
        return evaluate_batch(self, p, premise_mask, theta, kappa, resolves, cost, reliability,
                              available, **kwargs)

    # -- decision log -----------------------------------------------------------------------------
    def _record(self, action: CandidateAction, d: Decision,
                prior: tuple[float, ...] | None,
                verifiers: Sequence[Verifier]) -> dict[str, Any]:
        probs = d.probabilities if prior is None else prior
        premises = []
        for i, pm in enumerate(action.premises):
            c = pm.claim
            premises.append({
                "id": pm.id,
                "claim_id": pm.claim_id,
                "recency_hours": None if c is None else c.recency_hours,
                "source_trust_score": None if c is None else c.source_trust_score,
                "model_confidence": None if c is None else c.model_confidence,
                "contradiction_flag": None if c is None else c.contradiction_flag,
                "p": probs[i] if i < len(probs) else None,
            })
        return {
            "time": utc_now_iso(),
            "action_id": action.action_id,
            "tool_name": action.tool_name,
            "theta": action.impact_cost_theta,
            "kappa": action.abstention_cost_kappa,
            "premises": premises,
            "calibrator": {"name": self._artifact_name, "version": self._artifact_version},
            "regime": d.regime,
            "verifier": None if d.verifier is None else d.verifier.id,
            "voi": d.voi,
            "reason": d.reason,
            "planner": self._settings.planner,
            "mode": self._settings.mode,
            # what was offered, with declared cost and reliability: with the calls' answers
            # and the outcomes learnt later, `amv-calib label` rebuilds the action as a
            # replayable episode and measures each verifier's reliability
            "verifiers": [{"id": v.id, "resolves_premise_ids": list(v.resolves_premise_ids),
                           "execution_cost": v.execution_cost,
                           "symmetric_reliability": v.symmetric_reliability}
                          for v in verifiers],
        }

    def _emit(self, record: dict[str, Any]) -> None:
        if self._sink is not None:
            self._sink(record)


def open_decision_log(
    decision_log: str | os.PathLike[str] | Callable[[dict[str, Any]], None] | None,
) -> tuple[Callable[[dict[str, Any]], None] | None, DecisionLogWriter | None]:
    """The ``decision_log`` of :class:`Gate` and :class:`~amv_calib.gate.LiveGate` as the
    callable that takes each record (None: no log), and the writer opened for a path (None
    otherwise; closing it is its owner's)."""
    if decision_log is None:
        return None, None
    if callable(decision_log):
        return decision_log, None
    if isinstance(decision_log, (str, os.PathLike)):
        writer = DecisionLogWriter(decision_log)
        return writer.append, writer
    raise ValueError(f"decision_log={decision_log!r} must be a path, a callable or None")


def _abstain_reason(rx: float, lim: float, price: float) -> str:
    if not rx > lim:
        return _R_ABSTAIN_H
    return _R_ABSTAIN_R if price == 0.0 else _R_ABSTAIN_R_PRICED


def _listed(ids: Sequence[str]) -> str:
    shown = ", ".join(ids[:_LISTED])
    return shown if len(ids) <= _LISTED else f"{shown} and {len(ids) - _LISTED} more"


def _bound_note(verifiers: Sequence[Verifier], idxs: Sequence[tuple[int, ...]],
                keep: Sequence[bool], could: Sequence[tuple[str, float]]) -> str:
    """The reason's account of the work bound: who was left out, why, and whether it
    could matter."""
    out = [v.id for v, kept in zip(verifiers, keep, strict=True) if not kept]
    if not out:
        return ""
    ks = [len(idx) for idx, kept in zip(idxs, keep, strict=True) if not kept]
    span = str(min(ks)) if min(ks) == max(ks) else f"{min(ks)} to {max(ks)}"
    note = (f"; work bound: verifier(s) {_listed(out)} (over {span} premises, 2^k joint "
            f"outcomes each) not enumerated, at most {MAX_OUTCOMES} outcomes per decision")
    if could:
        ub = max(u for _, u in could)
        return (note + f"; upper bound of the one-step VOI, V_stop - lambda c - P_any * "
                f"min(theta, kappa), positive for {_listed([i for i, _ in could])} "
                f"(up to {ub:.6g}): they could be worth calling")
    return note + ("; upper bound of their one-step VOI, V_stop - lambda c - P_any * "
                   "min(theta, kappa), not positive: they cannot change the decision")
