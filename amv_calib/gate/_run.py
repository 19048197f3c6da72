"""The gate's sequential run: verify, update the beliefs and decide again until it stops."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from amv_calib.exceptions import UncalibratedPremiseError
from amv_calib.gate._beliefs import (
    _Beliefs,
    _seed_posterior,
    _signals,
    posterior_confirm,
    posterior_refute,
)
from amv_calib.gate._model import CandidateAction, Verifier, gate_number
from amv_calib.gate._modes import _DecisionModes
from amv_calib.gate._records import _Records
from amv_calib.gate._results import Decision, RunStep, RunTrace


class _RunLoop(_Beliefs, _DecisionModes, _Records):
    """:meth:`~amv_calib.gate.Gate.run` (a part of the gate: it holds no state of its own)."""

    __slots__ = ()
    _refusal: str | None
    _max: int

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
