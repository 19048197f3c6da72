"""Action-level outcomes on multi-premise actions: no selection on the label.

An outcome that names only the action says whether some premise was wrong, not which. The
join once labelled every premise of a multi-premise action "held" when such an outcome said
``violated = false`` but none when it said ``true``: a premise of a multi-premise action was
kept only when it held, and the stale rate among labelled premises read low. Now such an
outcome labels none of them either way (``ambiguous_action_outcome``); a one-premise action
is labelled by it. Checked on a hand-worked log and on a simulation whose premises' true
stale probabilities are known.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from amv_calib.claims._join import label_claims
from amv_calib.contract import encode_record
from amv_calib.datasets import synth_episodes

T0 = datetime(2026, 12, 1, tzinfo=UTC)


def _iso(minute: int) -> str:
    return (T0 + timedelta(minutes=minute)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _premise(pid: str, claim: str, p: float = 0.1) -> dict[str, Any]:
    return {"id": pid, "claim_id": claim, "recency_hours": 24.0, "source_trust_score": 0.8,
            "model_confidence": 0.9, "contradiction_flag": False, "p": p}


def _record(action: str, minute: int, *premises: dict[str, Any]) -> dict[str, Any]:
    return {"time": _iso(minute), "action_id": action, "tool_name": "tool",
            "premises": list(premises), "regime": "PROCEED"}


def _write(path: Path, records: list[dict[str, Any]]) -> Path:
    path.write_bytes(b"".join(encode_record(r) for r in records))
    return path


# ---------------------------------------------------------------------------------------------
# Hand-worked
# ---------------------------------------------------------------------------------------------
def test_action_outcomes_label_only_one_premise_actions(tmp_path: Path) -> None:
    log = _write(tmp_path / "d.jsonl", [
        _record("two-bad", 0, _premise("p1", "a"), _premise("p2", "b")),  # uses 0, 1
        _record("two-ok", 1, _premise("p1", "c"), _premise("p2", "d")),   # uses 2, 3
        _record("one-bad", 2, _premise("p1", "e")),                       # use 4
        _record("one-ok", 3, _premise("p1", "f")),                        # use 5
    ])
    outcomes = pd.DataFrame([
        {"claim_id": None, "action_id": "two-bad", "time": _iso(10), "violated": True},
        {"claim_id": None, "action_id": "two-ok", "time": _iso(10), "violated": False},
        {"claim_id": None, "action_id": "one-bad", "time": _iso(10), "violated": True},
        {"claim_id": None, "action_id": "one-ok", "time": _iso(10), "violated": False},
    ])
    claims, rep = label_claims(log, outcomes, soft_labels="off")
    # the one-premise actions alone are labelled, each by what its outcome says
    got = {(r.action_id, r.claim_id): bool(r.violated) for r in claims.itertuples()}
    assert got == {("one-bad", "e"): True, ("one-ok", "f"): False}
    # both premises of both two-premise actions are unjoined, whatever the outcome said
    unj = rep.unjoined_uses
    reasons = dict(zip(zip(unj["action_id"], unj["claim_id"], strict=True), unj["reason"],
                       strict=True))
    assert reasons == {("two-bad", "a"): "ambiguous_action_outcome",
                       ("two-bad", "b"): "ambiguous_action_outcome",
                       ("two-ok", "c"): "ambiguous_action_outcome",
                       ("two-ok", "d"): "ambiguous_action_outcome"}
    assert rep.uses_read == 6 and rep.joined == 2
    assert rep.unjoined == {"invalid_use": 0, "no_outcome_yet": 0, "outcome_before_use": 0,
                            "conflicting_outcomes": 0, "ambiguous_action_outcome": 4,
                            "conflicting_signals": 0}
    assert rep.outcomes == {"used": 2, "conflicting": 0, "ambiguous": 2, "superseded": 0,
                            "before_use": 0, "no_matching_use": 0, "invalid": 0}
    status = dict(zip(rep.outcome_details["row"], rep.outcome_details["status"], strict=True))
    assert status == {1: "ambiguous", 2: "ambiguous"}  # rows count from 1
    rep.check()


def test_a_premise_outcome_still_decides_a_multi_premise_action(tmp_path: Path) -> None:
    # the action's outcome labels neither premise; the claim outcome labels its own
    log = _write(tmp_path / "d.jsonl", [
        _record("two-ok", 0, _premise("p1", "c"), _premise("p2", "d"))])
    outcomes = pd.DataFrame([
        {"claim_id": None, "action_id": "two-ok", "time": _iso(10), "violated": False},
        {"claim_id": "d", "action_id": "two-ok", "time": _iso(10), "violated": False},
    ])
    claims, rep = label_claims(log, outcomes, soft_labels="off")
    assert claims["claim_id"].tolist() == ["d"] and claims["violated"].tolist() == [False]
    assert rep.unjoined_uses["claim_id"].tolist() == ["c"]
    assert rep.unjoined_uses["reason"].tolist() == ["ambiguous_action_outcome"]


# ---------------------------------------------------------------------------------------------
# Simulation with known truth
# ---------------------------------------------------------------------------------------------
def simulate(tmp: Path, n_actions: int, seed: int, action_share: float = 0.5
             ) -> tuple[Path, pd.DataFrame, dict[str, float], dict[str, bool], dict[str, int]]:
    """A decision log of ``synth_episodes`` actions (each premise's logged ``p`` its true
    stale probability ``p_true``), staleness drawn afresh from ``p_true`` (seeded), and for
    each action either an action-level outcome (``violated`` = some premise stale; share
    ``action_share``) or one action + claim outcome per premise.

    Returns the log, the outcomes, and per claim id its ``p_true``, its truth and the
    number of premises of its action.
    """
    rng = np.random.default_rng([seed, 52])
    episodes = synth_episodes(n_actions, seed=seed)
    records, outcomes = [], []
    p_true: dict[str, float] = {}
    truth: dict[str, bool] = {}
    n_prem: dict[str, int] = {}
    for k, ep in enumerate(episodes):
        aid = f"a{k}"
        prem = ep["premises"]
        stale = rng.random(len(prem)) < np.array([q["p_true"] for q in prem])
        records.append(_record(aid, k, *(
            {**{c: q[c] for c in ("id", "claim_id", "recency_hours", "source_trust_score",
                                  "model_confidence", "contradiction_flag")},
             "p": q["p_true"]} for q in prem)))
        for q, s in zip(prem, stale.tolist(), strict=True):
            p_true[q["claim_id"]] = float(q["p_true"])
            truth[q["claim_id"]] = bool(s)
            n_prem[q["claim_id"]] = len(prem)
        when = _iso(k + 60)
        if rng.random() < action_share:
            outcomes.append({"claim_id": None, "action_id": aid, "time": when,
                             "violated": bool(stale.any())})
        else:
            outcomes.extend({"claim_id": q["claim_id"], "action_id": aid, "time": when,
                             "violated": bool(s)} for q, s in zip(prem, stale.tolist(),
                                                                  strict=True))
    log = _write(tmp / f"d{seed}.jsonl", records)
    return log, pd.DataFrame(outcomes), p_true, truth, n_prem


def bias(labels: np.ndarray, p: np.ndarray) -> tuple[float, float]:
    """Mean label minus mean true p over the labelled premises, and its standard error
    (labels are independent Bernoulli(p) given p: variance sum p (1 - p) / n**2)."""
    return float(labels.mean() - p.mean()), float(np.sqrt(np.sum(p * (1 - p))) / p.size)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_labelled_stale_rate_is_unbiased(tmp_path: Path, seed: int) -> None:
    log, outcomes, p_true, truth, n_prem = simulate(tmp_path, 3000, seed)
    claims, rep = label_claims(log, outcomes, soft_labels="off")
    rep.check()
    # every label the join gives is the truth (the outcomes are exact) ...
    assert all(truth[c] == bool(v) for c, v in zip(claims["claim_id"], claims["violated"],
                                                   strict=True))
    p = claims["claim_id"].map(p_true).to_numpy(dtype=np.float64)
    after, se = bias(claims["violated"].to_numpy(dtype=np.float64), p)
    # ... and which premises get one does not depend on it: mean label = mean true p
    assert abs(after) < 4 * se, (after, se)

    # The old rule, on the same truth: a multi-premise action's premises kept by its action
    # outcome only when it said "not violated" -- the selection this fix removes.
    unj = rep.unjoined_uses
    assert set(unj["reason"]) == {"ambiguous_action_outcome"}
    assert all(n_prem[c] > 1 for c in unj["claim_id"])
    amb = pd.DataFrame({"action": np.asarray(unj["action_id"], dtype=object),
                        "claim": np.asarray(unj["claim_id"], dtype=object)})
    amb["stale"] = amb["claim"].map(truth)
    held = ~amb.groupby("action")["stale"].transform("any")
    old_kept = list(claims["claim_id"]) + list(amb.loc[held, "claim"])
    old_labels = np.array([truth[c] for c in old_kept], dtype=np.float64)
    before, se_b = bias(old_labels, np.array([p_true[c] for c in old_kept]))
    assert before < -4 * se_b, (before, se_b)  # the old selection reads the rate low
