"""What the gate believes about a premise: its violation probability (given, from the
calibrator, or the seed's formula) and the posterior after a verifier's signal."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from amv_calib.contract import PortableCalibrator
from amv_calib.exceptions import UncalibratedPremiseError
from amv_calib.gate._model import CandidateAction, Mode, Premise, Verifier

__all__ = ["posterior_confirm", "posterior_refute", "seed_calibrate", "update_posteriors"]


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


# -- premise probabilities ------------------------------------------------------------------


class _Beliefs:
    """:class:`~amv_calib.gate.Gate`'s premise probabilities (a part of the gate: it holds
    no state of its own)."""

    __slots__ = ()
    _calibrator: PortableCalibrator | None
    _seed: bool

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
        p = cal.predict_one(claim.features(), pm.memory_kind)
        if not 0.0 <= p <= 1.0:
            raise UncalibratedPremiseError(
                f"calibrator gave p={p!r} for premise {pm.id!r}, outside [0, 1]"
            )
        return p

    def _probs(self, action: CandidateAction) -> list[float]:
        out = []
        for pm in action.premises:
            p = pm.calibrated_violation_probability
            out.append(self._calibrate(pm) if p is None else p)
        return out
