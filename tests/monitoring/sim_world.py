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
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from amv_calib.datasets import synth_episodes
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
             seed: int = 0, drift_day: int | None = 30, labelled_share: float = 0.8,
             reliability_drop: float = 0.0, drop_day: int = 0, start_day: int = 0,
             append: bool = False) -> tuple[Path, Path]:
    """Write ``out/decisions.jsonl`` and ``out/outcomes.jsonl`` of ``days`` simulated days.

    ``reliability_drop``: the verifiers are right that much less often than they declare
    (a world the champion was not certified for: 0.3 makes its harm about 1.7%), from
    ``drop_day`` on.
    ``start_day`` / ``append``: continue a world (days counted from ``START``), appending
    to the files.
    """
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
    seconds = np.sort(rng.integers(0, days * DAY_S, size=n)) + start_day * DAY_S
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
        aid = f"a{seed}-{start_day}-{i}"
        action = CandidateAction(action_id=aid, tool_name=e["tool_name"],
                                 impact_cost_theta=e["impact_cost_theta"],
                                 abstention_cost_kappa=e["abstention_cost_kappa"],
                                 premises=premises)

        drop = reliability_drop if seconds[i] >= drop_day * DAY_S else 0.0

        def verify(v: Verifier, _a: CandidateAction, truth: dict[str, bool] = truth,
                   drop: float = drop) -> dict[str, bool]:
            # True = "confirmed valid"; right with probability r
            r = max(0.5, v.symmetric_reliability - drop)
            return {pid: (not truth[pid]) if rng.random() < r
                    else truth[pid] for pid in v.resolves_premise_ids}

        gate.run(action, verifiers, verify)
        if rng.random() < labelled_share:
            lag = int(rng.integers(3600, 3 * DAY_S))
            when = f"{t + np.timedelta64(lag, 's')}Z"
            outcomes.extend(json.dumps({"action_id": aid, "claim_id": pr.claim.id,
                                        "time": when, "violated": truth[pr.id]})
                            for pr in premises if pr.claim is not None)
    decisions = out / "decisions.jsonl"
    outcome_file = out / "outcomes.jsonl"
    with decisions.open("ab" if append else "wb") as fh:
        fh.write(b"".join(lines))
    with outcome_file.open("a" if append else "w", encoding="utf-8") as fh:
        fh.write("".join(x + "\n" for x in outcomes))
    return decisions, outcome_file


def replay_daily(decisions: Path, outcomes: Path, out: Path) -> Iterator[tuple[Path, Path]]:
    """The world as a daily monitor saw it: per day, the two files grown (appended in place,
    same inode) by the decisions made and the outcomes learnt that day; yields the two
    paths after each day's append."""
    out.mkdir(parents=True, exist_ok=True)
    d_lines = decisions.read_bytes().splitlines(keepends=True)
    o_lines = [line for line in outcomes.read_text(encoding="utf-8").splitlines() if line]

    def day_of(stamp: str) -> int:
        t = np.datetime64(stamp.rstrip("Z"), "s") - START
        return int(t.astype(np.int64) // DAY_S)

    d_day = [day_of(json.loads(line)["time"]) for line in d_lines]
    o_day = [day_of(json.loads(line)["time"]) for line in o_lines]
    grown_d, grown_o = out / "decisions.jsonl", out / "outcomes.jsonl"
    grown_d.write_bytes(b"")
    grown_o.write_text("", encoding="utf-8")
    for day in range(max(d_day) + 1):
        with grown_d.open("ab") as fh:
            fh.write(b"".join(x for x, k in zip(d_lines, d_day, strict=True) if k == day))
        with grown_o.open("a", encoding="utf-8") as fh:
            fh.write("".join(x + "\n" for x, k in zip(o_lines, o_day, strict=True)
                             if k == day))
        yield grown_d, grown_o
