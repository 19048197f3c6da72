"""A synthetic production world for monitoring tests: the real gate decides, logs, and the
truth arrives later as outcome records.

Actions are drawn from a pool of synthetic episodes (the world the shipped champion was
trained on: ``synth_episodes``); each premise's violation is drawn afresh from its known
probability ``p_true`` -- or, from ``drift_day`` on, from a changed law: the violation rate
doubles and recency matters more (``p = min(0.95, 2 p_true w(h))`` with ``w`` growing with
the claim's age and averaging 1 over the pool). The gate (``Gate.from_artifact`` with a
``decision_log`` sink that stamps the simulated time) runs each action with verifiers that
answer from the truth with their reliability. For a share of the actions every premise's
outcome (action + claim) is recorded one hour to three days later.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from amv_calib.claims import synth_episodes
from amv_calib.gate import CandidateAction, Gate, Premise, Verifier, encode_record

DAY_S = 86400
START = np.datetime64("2027-01-04T00:00:00", "s")  # a Monday


@dataclass(frozen=True)
class Pool:
    """Actions and verifiers built once from synthetic episodes, reused by every world."""

    actions: list[tuple[dict[str, Any], tuple[Premise, ...], list[Verifier]]]
    p_true: list[np.ndarray]
    weight: list[np.ndarray]  # the drift's recency weight of each premise


def make_pool(n: int = 4000, seed: int = 7) -> Pool:
    """Build the pool (a second or so)."""
    episodes = synth_episodes(n, seed=seed)
    hours = np.concatenate([[p["recency_hours"] for p in e["premises"]] for e in episodes])
    norm = float(np.mean(1.0 + np.sqrt(hours / 720.0)))
    actions, p_true, weight = [], [], []
    for e in episodes:
        prem = tuple(Premise.from_dict(p) for p in e["premises"])
        vs = [Verifier.from_dict(v) for v in e["verifiers"]]
        actions.append((e, prem, vs))
        p_true.append(np.array([p["p_true"] for p in e["premises"]]))
        h = np.array([p["recency_hours"] for p in e["premises"]])
        weight.append((1.0 + np.sqrt(h / 720.0)) / norm)
    return Pool(actions=actions, p_true=p_true, weight=weight)


def simulate(pool: Pool, gate: Gate | str, out: Path, *, days: int = 60, per_day: int = 300,
             seed: int = 0, drift_day: int | None = 30, labelled_share: float = 0.8
             ) -> tuple[Path, Path]:
    """Write ``out/decisions.jsonl`` and ``out/outcomes.jsonl`` of ``days`` simulated days."""
    rng = np.random.default_rng(seed)
    out.mkdir(parents=True, exist_ok=True)
    lines: list[bytes] = []
    now = [""]

    def sink(record: dict[str, Any]) -> None:
        record["time"] = now[0]
        lines.append(encode_record(record))

    if isinstance(gate, str):
        gate = Gate.from_artifact(gate, decision_log=sink)
    else:
        raise TypeError("pass the artifact reference: the world attaches its own log sink")
    n = days * per_day
    seconds = np.sort(rng.integers(0, days * DAY_S, size=n))
    picks = rng.integers(0, len(pool.actions), size=n)
    outcomes: list[str] = []
    for i in range(n):
        t = START + np.timedelta64(int(seconds[i]), "s")
        now[0] = f"{t}Z"
        e, premises, verifiers = pool.actions[int(picks[i])]
        p = pool.p_true[int(picks[i])]
        if drift_day is not None and seconds[i] >= drift_day * DAY_S:
            p = np.minimum(0.95, 2.0 * p * pool.weight[int(picks[i])])
        violated = rng.random(len(p)) < p
        truth = {pr.id: bool(v) for pr, v in zip(premises, violated, strict=True)}
        aid = f"a{seed}-{i}"
        action = CandidateAction(action_id=aid, tool_name=e["tool_name"],
                                 impact_cost_theta=e["impact_cost_theta"],
                                 abstention_cost_kappa=e["abstention_cost_kappa"],
                                 premises=premises)

        def verify(v: Verifier, _a: CandidateAction, truth: dict[str, bool] = truth
                   ) -> dict[str, bool]:
            # True = "confirmed valid"; right with probability r
            return {pid: (not truth[pid]) if rng.random() < v.symmetric_reliability
                    else truth[pid] for pid in v.resolves_premise_ids}

        gate.run(action, verifiers, verify)
        if rng.random() < labelled_share:
            lag = int(rng.integers(3600, 3 * DAY_S))
            when = f"{t + np.timedelta64(lag, 's')}Z"
            outcomes.extend(json.dumps({"action_id": aid, "claim_id": pr.claim.id,
                                        "time": when, "violated": truth[pr.id]})
                            for pr in premises if pr.claim is not None)
    decisions = out / "decisions.jsonl"
    decisions.write_bytes(b"".join(lines))
    outcome_file = out / "outcomes.jsonl"
    outcome_file.write_text("\n".join(outcomes) + "\n", encoding="utf-8")
    return decisions, outcome_file
