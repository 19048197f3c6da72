"""What the gate writes to its decision log: one record a decision or run."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

from amv_calib.contract import PortableCalibrator, utc_now_iso
from amv_calib.gate._decision_log import DecisionLogWriter
from amv_calib.gate._model import CandidateAction, GateSettings, Verifier
from amv_calib.gate._results import Decision

__all__ = ["open_decision_log"]


class _Records:
    """:class:`~amv_calib.gate.Gate`'s decision-log records (a part of the gate: it holds no
    state of its own)."""

    __slots__ = ()
    _settings: GateSettings
    _artifact_name: str | None
    _artifact_version: str | None
    _calibrator: PortableCalibrator | None
    _sink: Callable[[dict[str, Any]], None] | None

    def _record(self, action: CandidateAction, d: Decision,
                prior: tuple[float, ...] | None,
                verifiers: Sequence[Verifier]) -> dict[str, Any]:
        probs = d.probabilities if prior is None else prior
        cal = self._calibrator
        kind_cal = cal if cal is not None and cal.has_kinds and probs else None
        premises = []
        for i, pm in enumerate(action.premises):
            c = pm.claim
            rec: dict[str, Any] = {
                "id": pm.id,
                "claim_id": pm.claim_id,
                "recency_hours": None if c is None else c.recency_hours,
                "source_trust_score": None if c is None else c.source_trust_score,
                "model_confidence": None if c is None else c.model_confidence,
                "contradiction_flag": None if c is None else c.contradiction_flag,
                "p": probs[i] if i < len(probs) else None,
            }
            # Written only when there is something to say, so that a gate and premises
            # without kinds write the records they always did.
            if pm.memory_kind is not None:
                rec["memory_kind"] = pm.memory_kind
            if (kind_cal is not None and c is not None
                    and pm.calibrated_violation_probability is None):
                # the kind the calibrator used: "other" for an absent or unknown kind
                rec["memory_kind_evaluated_as"] = kind_cal.kinds[
                    kind_cal.kind_code(pm.memory_kind)]
            premises.append(rec)
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
