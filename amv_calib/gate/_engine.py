"""The runtime gate: screened stopping value, corrected VOI, sequential stopping, planning.

This module and :mod:`amv_calib.gate._planner` are the readable reference engine. The
compiled batch engine (:mod:`amv_calib.gate._compiled`, behind ``evaluate_batch``) repeats
their arithmetic operation for operation; tests/gate/test_compiled.py holds the two equal bit
for bit.

:class:`Gate` is put together here from its parts, one module each: the premise
probabilities and posteriors (:mod:`._beliefs`), the decision routines within the work bound,
past it and in the seed mode (:mod:`._modes`), the sequential run (:mod:`._run`) and the
decision-log record (:mod:`._records`); what it answers is defined in :mod:`._results`. The
arithmetic below is theirs.

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

import operator
import os
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar, cast, overload

from amv_calib.contract import LoadedArtifact, PortableCalibrator
from amv_calib.exceptions import UncalibratedPremiseError
from amv_calib.gate._batch import BatchDecision, evaluate_batch
from amv_calib.gate._beliefs import (
    _Beliefs,
    posterior_confirm,
    posterior_refute,
    seed_calibrate,
    update_posteriors,
)
from amv_calib.gate._model import (
    REGIME_CODES,
    VOI_TOLERANCE,
    CandidateAction,
    GateSettings,
    Mode,
    Planner,
    Verifier,
)
from amv_calib.gate._modes import _DecisionModes
from amv_calib.gate._records import _Records, open_decision_log
from amv_calib.gate._results import Decision, Regime, RunStep, RunTrace, StoppingValue
from amv_calib.gate._run import _RunLoop

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

_T = TypeVar("_T")


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


class Gate(_RunLoop, _Beliefs, _DecisionModes, _Records):
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

    # -- batch -----------------------------------------------------------------------------------
    def evaluate_batch(self, p: Any, premise_mask: Any, theta: Any, kappa: Any, resolves: Any,
                       cost: Any, reliability: Any, available: Any = None,
                       **kwargs: Any) -> BatchDecision:
        """Decisions for many padded actions at once; see
        :func:`amv_calib.gate._batch.evaluate_batch` (returns a ``BatchDecision``)."""
        return evaluate_batch(self, p, premise_mask, theta, kappa, resolves, cost, reliability,
                              available, **kwargs)
