"""Simulated production: the real gate writing its decision log, and outcomes learnt later.

:func:`simulate_production` makes decision logs and outcome records the way a deployment
would, so that ``amv-calib label`` and the retrain-from-logs pipeline can be run (and
tested) end to end: the project's own :class:`~amv_calib.gate.Gate`, loaded from an
artifact, runs :meth:`~amv_calib.gate.Gate.run` over synthetic actions
(:func:`~amv_calib.datasets.synth_episodes`: premises with a known truth, theta and kappa),
with a decision log. Two verifiers are offered to every action:

- ``cache-api`` resolves every premise, cheaply, and is *declared* ``declared_reliability``
  reliable, while its answers are right only with probability ``true_reliability`` (an API
  behind a stale cache);
- ``registry-api`` resolves the first premise, costs more and is as reliable as declared.

Time is simulated (an action every ``step_minutes``), so the same arguments give the same
bytes. Outcomes arrive after an exponential delay (mean ``outcome_delay_days``); those not
arrived by one day after the last action are missing (``no_outcome_yet``). Most actions
have one outcome per premise (``action_id`` + ``claim_id``); ``action_outcome_share`` of
them only say whether the action as a whole went wrong (``action_id``), which leaves the
premises of a multi-premise action unlabelled (``ambiguous_action_outcome``), whatever it
says.
"""

from __future__ import annotations

import csv
import os
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

from amv_calib.datasets._synth import synth_episodes

#: The first simulated decision unless ``start`` says otherwise (the example logs' start).
SIMULATION_START = datetime(2026, 9, 1, tzinfo=UTC)


@dataclass(kw_only=True)
class SimulatedLogs:
    """What :func:`simulate_production` wrote and how often the verifiers answered."""

    decisions: Path
    outcomes: Path
    actions: int
    answers: dict[str, int]
    outcome_records: int


def _stamp(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def simulate_production(
    artifact: str | os.PathLike[str],
    out_dir: str | os.PathLike[str],
    *,
    n_actions: int = 2500,
    seed: int = 20261203,
    true_reliability: float = 0.85,
    declared_reliability: float = 0.95,
    step_minutes: float = 15.0,
    outcome_delay_days: float = 3.0,
    action_outcome_share: float = 0.1,
    start: datetime = SIMULATION_START,
) -> SimulatedLogs:
    """Run the gate of ``artifact`` over ``n_actions`` synthetic actions; write
    ``OUT/decisions.jsonl`` and ``OUT/outcomes.csv`` (module docs: how).

    Parameters
    ----------
    artifact : path or reference
        The artifact whose gate decides (``models/amv-guard/v1``; any reference
        :meth:`~amv_calib.gate.Gate.from_artifact` accepts).
    out_dir : path
        Folder to write into (created).
    n_actions : int, default 2500
    seed : int, default 20261203
        Seeds the actions and every verifier answer.
    true_reliability, declared_reliability : float
        ``cache-api``'s real and declared symmetric reliability, in (0.5, 1].
    step_minutes, outcome_delay_days, action_outcome_share : float
        Time between actions, mean delay of an outcome, share of action-level outcomes.
    start : datetime, default :data:`SIMULATION_START`
        Time of the first decision (timezone-aware).
    """
    from amv_calib.gate import CandidateAction, DecisionLogWriter, Gate, Premise
    from amv_calib.gate import Verifier as GateVerifier

    for name, r in (("true_reliability", true_reliability),
                    ("declared_reliability", declared_reliability)):
        if not 0.5 < r <= 1.0:
            raise ValueError(f"{name}={r!r} must lie in (0.5, 1]")
    if n_actions < 1:
        raise ValueError(f"n_actions={n_actions!r} must be >= 1")
    if start.tzinfo is None:
        raise ValueError(f"start={start.isoformat()!r} must name its UTC offset")
    start = start.astimezone(UTC)
    try:  # the last decision and its outcomes' horizon must be times too
        start + timedelta(minutes=step_minutes * n_actions, days=1)
    except OverflowError:
        raise ValueError(f"start={start.isoformat()!r}: {n_actions} actions every "
                         f"{step_minutes:g} minutes run past the year 9999") from None
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    decisions, outcomes = out / "decisions.jsonl", out / "outcomes.csv"
    decisions.unlink(missing_ok=True)  # the writer appends
    rng = np.random.default_rng([seed, 2])
    clock = {"now": start}
    writer = DecisionLogWriter(decisions)

    def sink(record: dict[str, Any]) -> None:
        # the simulated clock, not the machine's: the same arguments give the same bytes
        writer.append({**record, "time": _stamp(clock["now"])})

    gate = Gate.from_artifact(os.fspath(artifact), strict=True, decision_log=sink)
    truth_r = {"cache-api": true_reliability, "registry-api": 0.99}
    answers = dict.fromkeys(truth_r, 0)
    rows: list[tuple[datetime, str, str, bool]] = []
    last = start
    try:
        for i, ep in enumerate(synth_episodes(n_actions, seed=seed)):
            now = start + timedelta(minutes=step_minutes * i)
            clock["now"] = last = now
            action_id = f"act-{i + 1:05d}"
            premises = tuple(Premise.from_dict(p) for p in ep["premises"])
            violated = {p["id"]: bool(p["violated"]) for p in ep["premises"]}
            action = CandidateAction(
                action_id=action_id, tool_name=ep["tool_name"],
                impact_cost_theta=ep["impact_cost_theta"],
                abstention_cost_kappa=ep["abstention_cost_kappa"], premises=premises)
            offered = [
                GateVerifier(id="cache-api", resolves_premise_ids=tuple(violated),
                             execution_cost=0.05, symmetric_reliability=declared_reliability),
                GateVerifier(id="registry-api", resolves_premise_ids=(premises[0].id,),
                             execution_cost=0.6, symmetric_reliability=0.99),
            ]

            def verify(v: Any, _action: Any, violated: dict[str, bool] = violated
                       ) -> dict[str, bool]:
                out: dict[str, bool] = {}
                for pid in v.resolves_premise_ids:
                    right = bool(rng.random() < truth_r[v.id])
                    # True = "valid": right answers say the truth, wrong ones the opposite
                    out[pid] = (not violated[pid]) if right else violated[pid]
                    answers[v.id] += 1
                return out

            gate.run(action, offered, verify)
            delay = timedelta(days=float(rng.exponential(outcome_delay_days)))
            if rng.random() < action_outcome_share:
                rows.append((now + delay, action_id, "", any(violated.values())))
            else:
                for p in ep["premises"]:
                    rows.append((now + delay, action_id, p["claim_id"], violated[p["id"]]))
    finally:
        writer.close()
    horizon = last + timedelta(days=1)
    rows = sorted((r for r in rows if r[0] <= horizon), key=lambda r: (r[0], r[1], r[2]))
    with open(outcomes, "w", encoding="utf-8", newline="") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(["action_id", "claim_id", "time", "violated"])
        for t, a, c, v in rows:
            w.writerow([a, c, _stamp(t), "true" if v else "false"])
    return SimulatedLogs(decisions=decisions, outcomes=outcomes, actions=n_actions,
                         answers=answers, outcome_records=len(rows))
