"""The label join's rules in plain Python, slow and obvious: the tests' oracle.

Written from the module docs of :mod:`amv_calib.claims._join`, one loop per rule, over the
input relations of :mod:`amv_calib.claims._sql` given as lists of dicts. Used only by the
tests; never imported by the package.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

REASONS = ("invalid_use", "no_outcome_yet", "outcome_before_use", "conflicting_outcomes",
           "ambiguous_action_outcome", "conflicting_signals")
STATUSES = ("used", "conflicting", "ambiguous", "superseded", "before_use",
            "no_matching_use")


@dataclass
class Verdicts:
    """Per use (in entry order): its entry, reason (-1: an outcome labels it) and label; per
    outcome record its status; the answers as a multiset keyed by (use entry, verifier,
    confirmed, reliability)."""

    use_eid: list[int] = field(default_factory=list)
    reason: list[int] = field(default_factory=list)
    label: list[bool] = field(default_factory=list)
    status: list[int] = field(default_factory=list)
    answers: dict[tuple[Any, ...], int] = field(default_factory=dict)


def _action_key(e: dict[str, Any]) -> tuple[Any, ...]:
    return ("named", e["action_id"]) if e["action_id"] is not None else ("record", e["rec"])


def _premise_key(e: dict[str, Any]) -> tuple[Any, ...]:
    if e["premise_id"] is not None:
        return ("premise", e["premise_id"])
    if e["claim_id"] is not None:
        return ("claim", e["claim_id"])
    return ("position", e["pidx"])


def _fields_ok(e: dict[str, Any]) -> bool:
    def num(x: Any) -> float:
        return math.nan if x is None else float(x)

    rh, ts, mc, cf = (num(e[c]) for c in ("recency_hours", "source_trust_score",
                                          "model_confidence", "contradiction_flag"))
    return (e["claim_id"] is not None and e["t_us"] is not None
            and math.isfinite(rh) and rh >= 0
            and math.isfinite(ts) and 0 <= ts <= 1
            and math.isfinite(mc) and 0 <= mc <= 1
            and not math.isnan(cf))


#: Odd values of a claim feature: out of range, NaN, infinite, missing.
ODD_FEATURES = [1.0, 0.0, -1.0, 1.5, math.nan, math.inf, None]


def odd_values() -> list[dict[str, Any]]:
    """Every combination of :data:`ODD_FEATURES` over the four features, with and without
    a memory kind that breaks the contract (``kind_bad``)."""
    import itertools

    names = ("recency_hours", "source_trust_score", "model_confidence", "contradiction_flag")
    return [{**dict(zip(names, v, strict=True)), "kind_bad": k}
            for *v, k in itertools.product(*[ODD_FEATURES] * 4, [False, True])]


def join(entries: list[dict[str, Any]], signals: list[dict[str, Any]],
         outcomes: list[dict[str, Any]]) -> Verdicts:
    """The verdicts of the label join (module docs of :mod:`amv_calib.claims._join`)."""
    # a record giving one premise key (id, else claim id) to two premises is refused whole
    keys_seen: Counter[tuple[Any, ...]] = Counter(
        (e["rec"], _premise_key(e)) for e in entries if _premise_key(e)[0] != "position")
    bad_records = {rec for (rec, _), n in keys_seen.items() if n > 1}
    # one use per (action, premise): the last entry wins
    last: dict[tuple[Any, ...], dict[str, Any]] = {}
    for e in entries:
        last[(_action_key(e), _premise_key(e))] = e
    uses = sorted(last.values(), key=lambda e: e["eid"])
    valid = {u["eid"]: _fields_ok(u) and u["rec"] not in bad_records for u in uses}
    uses_in_action = Counter(_action_key(u) for u in uses)

    final: dict[int, bool] = defaultdict(bool)
    label: dict[int, bool] = defaultdict(bool)
    conflict: dict[int, bool] = defaultdict(bool)
    ambiguous: dict[int, bool] = defaultdict(bool)
    had_before: dict[int, bool] = defaultdict(bool)
    o_used: dict[int, bool] = defaultdict(bool)
    o_conflict: dict[int, bool] = defaultdict(bool)
    o_ambiguous: dict[int, bool] = defaultdict(bool)
    o_keymatch: dict[int, bool] = defaultdict(bool)
    o_earlier: dict[int, bool] = defaultdict(bool)

    def decide(u: dict[str, Any], pairs: list[dict[str, Any]], single_premise_only: bool
               ) -> None:
        i = u["eid"]
        for o in pairs:
            o_keymatch[o["oid"]] = True
            if o["o_t"] >= u["t_us"]:
                o_earlier[o["oid"]] = True
        if final[i]:
            return
        after = [o for o in pairs if o["o_t"] >= u["t_us"]]
        if len(after) < len(pairs):
            had_before[i] = True
        if not after:
            return
        values = {o["v"] for o in after}
        if len(values) > 1:
            final[i] = conflict[i] = True
            for o in after:
                o_conflict[o["oid"]] = True
        elif single_premise_only and uses_in_action[_action_key(u)] > 1:
            # an action outcome on a multi-premise action labels none of them, whatever
            # it says
            ambiguous[i] = True
            for o in after:
                o_ambiguous[o["oid"]] = True
        else:
            final[i], label[i] = True, values == {True}
            for o in after:
                o_used[o["oid"]] = True

    live = [u for u in uses if valid[u["eid"]]]
    # the outcome records of each kind, by the key they name (in record order)
    of_claim_in_action: dict[tuple[Any, Any], list[dict[str, Any]]] = defaultdict(list)
    of_action: dict[Any, list[dict[str, Any]]] = defaultdict(list)
    of_claim: dict[Any, list[dict[str, Any]]] = defaultdict(list)
    for o in outcomes:
        if o["action_id"] is not None and o["claim_id"] is not None:
            of_claim_in_action[(o["action_id"], o["claim_id"])].append(o)
        elif o["action_id"] is not None:
            of_action[o["action_id"]].append(o)
        else:
            of_claim[o["claim_id"]].append(o)
    # 1. action + claim (a use without action id is never named by one)
    for u in live:
        if u["action_id"] is not None:
            decide(u, of_claim_in_action[(u["action_id"], u["claim_id"])], False)
    # 2. action only
    for u in live:
        if u["action_id"] is not None:
            decide(u, of_action[u["action_id"]], True)
    # 3. claim only: the earliest outcome at or after the use decides
    claim_only = [o for o in outcomes if o["action_id"] is None]
    for u in live:
        i = u["eid"]
        if final[i]:
            continue
        mine = of_claim[u["claim_id"]]
        if any(o["o_t"] < u["t_us"] for o in mine):
            had_before[i] = True
        after = [o for o in mine if o["o_t"] >= u["t_us"]]
        if not after:
            continue
        first = min(o["o_t"] for o in after)
        group = [o for o in after if o["o_t"] == first]
        values = {o["v"] for o in group}
        final[i] = True
        if len(values) > 1:
            conflict[i] = True
            for o in group:
                o_conflict[o["oid"]] = True
        else:
            label[i] = values == {True}
            for o in group:
                o_used[o["oid"]] = True
    use_times: dict[Any, list[int]] = defaultdict(list)
    for u in live:
        use_times[u["claim_id"]].append(u["t_us"])
    for o in claim_only:
        times = use_times[o["claim_id"]]
        o_keymatch[o["oid"]] = bool(times)
        o_earlier[o["oid"]] = any(t <= o["o_t"] for t in times)

    out = Verdicts()
    for u in uses:
        i = u["eid"]
        out.use_eid.append(i)
        out.label.append(label[i])
        if not valid[i]:
            out.reason.append(0)
        elif conflict[i]:
            out.reason.append(3)
        elif final[i]:
            out.reason.append(-1)
        elif ambiguous[i]:
            out.reason.append(4)
        elif had_before[i]:
            out.reason.append(2)
        else:
            out.reason.append(1)
    for o in outcomes:
        k = o["oid"]
        out.status.append(0 if o_used[k] else 1 if o_conflict[k] else 2 if o_ambiguous[k]
                          else 3 if o_keymatch[k] and o_earlier[k] else 4 if o_keymatch[k]
                          else 5)
    # verifier answers: a usable reliability, a premise id of its record; each distinct
    # answer counted as often as in any single record
    per_record: Counter[tuple[Any, ...]] = Counter()
    by_record: dict[Any, list[dict[str, Any]]] = defaultdict(list)
    for e in entries:
        by_record[e["rec"]].append(e)
    for s in signals:
        r = s["reliability"]
        if r is None or not (math.isfinite(r) and 0.5 < r <= 1.0):
            continue
        mine = [e for e in by_record[s["rec"]] if e["premise_id"] is not None
                and e["premise_id"] == s["premise_id"]]
        if not mine:
            continue
        use = last[(_action_key(mine[0]), _premise_key(mine[0]))]
        per_record[(use["eid"], s["verifier"], s["confirmed"], r, s["rec"])] += 1
    for (eid, verifier, confirmed, r, _), n in per_record.items():
        key = (eid, verifier, confirmed, r)
        out.answers[key] = max(out.answers.get(key, 0), n)
    return out
