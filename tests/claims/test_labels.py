"""The label join: hand-worked cases, a brute-force reference, soft labels, the gate end to end."""

from __future__ import annotations

import json
import math
import warnings
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from repo_paths import REPO_ROOT
from sklearn.metrics import log_loss

from amv_calib import cli
from amv_calib.calibration._calibrators import PlattCalibrator
from amv_calib.claims._ingest import load_claims
from amv_calib.claims._join import join_logs, label_claims, read_with_outcomes
from amv_calib.claims._logread import read_uses
from amv_calib.claims._noisy import fit_noisy_labels
from amv_calib.claims._outcomes import OUTCOME_STATUSES, load_outcomes
from amv_calib.claims._sql import UNJOINED_REASONS
from amv_calib.contract import DecisionLogWarning, encode_record
from amv_calib.contract._features import SEED_FEATURE_MAP, PortableCalibrator, seed_prior_calibrator
from amv_calib.datasets._synth import synth_claims
from amv_calib.exceptions import DataContractError, MissingColumnsError
from amv_calib.gate import (
    CandidateAction,
    DecisionLogWriter,
    Gate,
    MemoryClaim,
    Premise,
    Verifier,
    posterior_confirm,
    posterior_refute,
)

EXAMPLES = REPO_ROOT / "data" / "examples"
FEATURES = ["recency_hours", "source_trust_score", "model_confidence", "contradiction_flag"]


def _iso(minute: int) -> str:
    return (datetime(2026, 12, 1, tzinfo=UTC) + timedelta(minutes=minute)).strftime(
        "%Y-%m-%dT%H:%M:%S.%fZ")


def _premise(pid: str, claim: str, *, trust: float = 0.8, p: float = 0.1) -> dict[str, Any]:
    return {"id": pid, "claim_id": claim, "recency_hours": 24.0, "source_trust_score": trust,
            "model_confidence": 0.9, "contradiction_flag": False, "p": p}


def _record(action: str | None, minute: int, *premises: dict[str, Any],
            calls: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    rec: dict[str, Any] = {"time": _iso(minute), "action_id": action, "tool_name": "tool",
                           "premises": list(premises), "regime": "PROCEED"}
    if calls is not None:
        rec["verifier_calls"] = calls
    return rec


def _write(path: Path, records: list[dict[str, Any]], tail: bytes = b"") -> Path:
    path.write_bytes(b"".join(encode_record(r) for r in records) + tail)
    return path


def _outcomes(rows: list[tuple[str | None, str | None, int | str, Any]]) -> pd.DataFrame:
    return pd.DataFrame([{"claim_id": c, "action_id": a,
                          "time": _iso(t) if isinstance(t, int) else t, "violated": v}
                         for c, a, t, v in rows])


# ---------------------------------------------------------------------------------------------
# Hand-worked join: every kind of outcome and every reason
# ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def worked(tmp_path_factory: pytest.TempPathFactory) -> tuple[pd.DataFrame, Any]:
    d = tmp_path_factory.mktemp("worked")
    log = _write(d / "d.jsonl", [
        _record("a1", 0, _premise("p1", "c1"), _premise("p2", "c2")),        # uses 0, 1
        _record("a2", 10, _premise("p1", "c1")),                              # use 2
        _record("a3", 20, _premise("p1", "c3")),                              # use 3
        _record("a4", 30, _premise("p1", "c4"), _premise("p2", "c5")),        # uses 4, 5
        _record("a5", 40, _premise("p1", "c6")),                              # use 6
        _record("a6", 50, _premise("p1", "c7", trust=1.5)),                   # use 7
        _record("a7", 60, _premise("p1", "c8")),                              # use 8
        _record("a8", 70, _premise("p1", "c9")),                              # use 9
    ], tail=b'{"time": "2026-12-01T02')
    out = _outcomes([
        ("c1", None, 5, False),     # claim outcome: labels a1/c1 (t=0) only
        ("c1", None, 15, True),     # labels a2/c1 (t=10)
        ("c2", "a1", 100, True),    # action + claim
        ("c2", None, 100, False),   # superseded by the more specific one above
        (None, "a3", 25, False),    # action outcome, one premise
        (None, "a4", 35, True),     # action outcome, two premises: ambiguous ...
        ("c5", None, 36, False),    # ... but a claim outcome decides c5
        ("c6", None, 45, True),     # conflicting pair
        ("c6", None, 45, False),
        ("c8", None, 55, True),     # before the use at 60
        ("c7", None, 60, True),     # matches only an invalid use
        ("zz", None, 1, True),      # no such claim
        ("c9", None, "soon", True),  # invalid time
    ])
    with pytest.warns(DecisionLogWarning, match="torn last line 9"):
        return label_claims(log, out, soft_labels="off")


def test_worked_labels(worked: tuple[pd.DataFrame, Any]) -> None:
    claims, _ = worked
    got = {(r.action_id, r.claim_id): bool(r.violated) for r in claims.itertuples()}
    assert got == {("a1", "c1"): False, ("a2", "c1"): True, ("a1", "c2"): True,
                   ("a3", "c3"): False, ("a4", "c5"): False}
    assert (claims["label_weight"] == 1.0).all()
    assert (claims["label_source"] == "outcome").all()
    assert str(claims["timestamp"].dtype) == "datetime64[us, UTC]"
    assert claims["timestamp"].iloc[0] == pd.Timestamp(_iso(0))


def test_worked_reasons_and_statuses(worked: tuple[pd.DataFrame, Any]) -> None:
    _, rep = worked
    assert rep.uses_read == 10 and rep.joined == 5
    assert rep.unjoined == {"invalid_use": 1, "no_outcome_yet": 1, "outcome_before_use": 1,
                            "conflicting_outcomes": 1, "ambiguous_action_outcome": 1,
                            "conflicting_signals": 0}
    reasons = dict(zip(rep.unjoined_uses["claim_id"], rep.unjoined_uses["reason"], strict=True))
    assert reasons == {"c4": "ambiguous_action_outcome", "c6": "conflicting_outcomes",
                       "c7": "invalid_use", "c8": "outcome_before_use",
                       "c9": "no_outcome_yet"}
    detail = rep.unjoined_uses.set_index("claim_id").loc["c7", "detail"]
    assert detail == "source_trust_score=1.5 outside [0, 1]"
    assert rep.outcomes == {"used": 5, "conflicting": 2, "ambiguous": 1, "superseded": 1,
                            "before_use": 1, "no_matching_use": 2, "invalid": 1}
    status = dict(zip(rep.outcome_details["row"], rep.outcome_details["status"], strict=True))
    assert status == {4: "superseded", 6: "ambiguous", 8: "conflicting", 9: "conflicting",
                      10: "before_use", 11: "no_matching_use", 12: "no_matching_use",
                      13: "invalid"}
    d = rep.to_dict()
    assert d["decision_lines"] == 9 and d["skipped_lines"]["torn_last_line"] == 1
    rep.check()


def test_action_outcome_with_violated_false_labels_no_premise_of_two(
        tmp_path: Path) -> None:
    # "not violated" on a two-premise action labels neither premise, as "violated" does
    # (tests/claims/test_action_outcome_bias.py: otherwise the labels select on themselves)
    log = _write(tmp_path / "d.jsonl", [_record("a", 0, _premise("p1", "x"),
                                                _premise("p2", "y"))])
    claims, rep = label_claims(log, _outcomes([(None, "a", 1, False)]))
    assert claims.empty and rep.unjoined["ambiguous_action_outcome"] == 2
    assert rep.outcomes["ambiguous"] == 1 and rep.outcomes["used"] == 0


def test_repeated_records_of_one_action_are_one_use(tmp_path: Path) -> None:
    log = _write(tmp_path / "d.jsonl", [
        _record("a", 0, _premise("p1", "x", p=0.3)),
        _record("a", 1, _premise("p1", "x", p=0.2)),
        _record(None, 2, _premise("p1", "x")),
        _record(None, 3, _premise("p1", "x")),
    ])
    claims, rep = label_claims(log, _outcomes([("x", None, 9, True)]))
    assert rep.premise_entries == 4 and rep.uses_read == 3 and rep.repeated_entries == 1
    # the action's last record gives the use time and the logged p
    first = claims.iloc[0]
    assert first["timestamp"] == pd.Timestamp(_iso(1)) and first["p_logged"] == 0.2
    assert claims["violated"].all() and len(claims) == 3


# ---------------------------------------------------------------------------------------------
# Brute-force reference of the join rules, against random instances
# ---------------------------------------------------------------------------------------------
def _reference(uses: list[dict[str, Any]], outs: list[dict[str, Any]]
               ) -> tuple[list[tuple[str, bool | None]], list[str]]:
    """Per use (reason or "", label) and per outcome its status, by the documented rules."""
    decided_by: dict[int, str] = {}
    results: list[tuple[str, bool | None]] = []
    n_in = {}
    for u in uses:
        n_in[u["a"]] = n_in.get(u["a"], 0) + 1
    touched_conflict: set[int] = set()
    touched_amb: set[int] = set()
    for u in uses:
        if not u["valid"]:
            results.append(("invalid_use", None))
            continue
        amb = False
        res: tuple[str, bool | None] | None = None
        kinds = (
            [i for i, o in enumerate(outs) if o["a"] == u["a"] and o["c"] == u["c"]],
            [i for i, o in enumerate(outs) if o["a"] == u["a"] and o["c"] is None],
        )
        for stage, cand in enumerate(kinds):
            after = [i for i in cand if outs[i]["t"] >= u["t"]]
            if not after:
                continue
            vals = {outs[i]["v"] for i in after}
            if len(vals) > 1:
                res = ("conflicting_outcomes", None)
                touched_conflict.update(after)
                break
            v = vals.pop()
            if stage == 1 and n_in[u["a"]] > 1:  # either value: no premise labelled
                amb = True
                touched_amb.update(after)
                continue
            res = ("", v)
            for i in after:
                decided_by[i] = "used"
            break
        if res is None:
            cand = [i for i, o in enumerate(outs) if o["a"] is None and o["c"] == u["c"]]
            after = [i for i in cand if outs[i]["t"] >= u["t"]]
            if after:
                tmin = min(outs[i]["t"] for i in after)
                grp = [i for i in after if outs[i]["t"] == tmin]
                vals = {outs[i]["v"] for i in grp}
                if len(vals) > 1:
                    res = ("conflicting_outcomes", None)
                    touched_conflict.update(grp)
                else:
                    res = ("", vals.pop())
                    for i in grp:
                        decided_by[i] = "used"
        if res is None:
            keyed = [o for o in outs if (o["a"] == u["a"] and o["c"] in (u["c"], None))
                     or (o["a"] is None and o["c"] == u["c"])]
            if amb:
                res = ("ambiguous_action_outcome", None)
            elif any(o["t"] < u["t"] for o in keyed):
                res = ("outcome_before_use", None)
            else:
                res = ("no_outcome_yet", None)
        results.append(res)
    status = []
    valid_uses = [u for u in uses if u["valid"]]
    for i, o in enumerate(outs):
        if decided_by.get(i) == "used":
            status.append("used")
        elif i in touched_conflict:
            status.append("conflicting")
        elif i in touched_amb:
            status.append("ambiguous")
        else:
            match = [u for u in valid_uses if (o["a"] is None or o["a"] == u["a"])
                     and (o["c"] is None or o["c"] == u["c"])]
            if not match:
                status.append("no_matching_use")
            elif any(u["t"] <= o["t"] for u in match):
                status.append("superseded")
            else:
                status.append("before_use")
    return results, status


_instance = st.fixed_dictionaries({
    "actions": st.lists(
        st.tuples(st.integers(0, 6),
                  st.lists(st.tuples(st.sampled_from("cdef"), st.booleans()),
                           min_size=1, max_size=3)),
        min_size=1, max_size=6),
    "outcomes": st.lists(
        st.tuples(st.sampled_from(["c", "d", "e", "f", None]),
                  st.one_of(st.none(), st.integers(0, 7)),
                  st.integers(0, 6), st.booleans()),
        max_size=10),
})


@pytest.mark.parametrize("stage_rows", [1 << 20, 2], ids=["one-slice", "slices-of-2"])
@settings(max_examples=50, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=_instance)
def test_join_matches_brute_force_reference(tmp_path: Path, data: dict[str, Any],
                                            stage_rows: int,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    import amv_calib.claims._join as join

    # the claim-only stage searches the uses a slice at a time: slices of 2 cut through
    # actions and claims
    monkeypatch.setattr(join, "_STAGE_ROWS", stage_rows)
    records, uses = [], []
    for k, (minute, prems) in enumerate(data["actions"]):
        ps = []
        for j, (claim, ok) in enumerate(prems):
            ps.append(_premise(f"p{j}", claim, trust=0.5 if ok else 2.0))
            uses.append({"a": f"a{k}", "c": claim, "t": minute, "valid": ok})
        records.append(_record(f"a{k}", minute, *ps))
    outs = [{"c": c, "a": None if a is None else f"a{a}", "t": t, "v": v}
            for c, a, t, v in data["outcomes"] if not (c is None and a is None)]
    log = _write(tmp_path / "d.jsonl", records)
    frame = _outcomes([(o["c"], o["a"], o["t"], o["v"]) for o in outs]) if outs else None
    claims, rep = label_claims(log, frame)
    ref, ref_status = _reference(uses, outs)
    # map joined rows and unjoined uses back to the use order
    got: list[tuple[str, bool | None]] = [("?", None)] * len(uses)
    for r in claims.itertuples():
        got[int(r.use_id)] = ("", bool(r.violated))
    unj = rep.unjoined_uses
    order = {(f"a{k}", f"p{j}"): i for i, (k, j) in enumerate(
        (k, j) for k, (_, prems) in enumerate(data["actions"]) for j in range(len(prems)))}
    for a, p, reason in zip(unj["action_id"], unj["premise_id"], unj["reason"], strict=True):
        got[order[(a, p)]] = (reason, None)
    assert got == ref
    status = rep.outcome_details.set_index("row")["status"].to_dict()
    assert [status.get(i + 1, "used") for i in range(len(outs))] == ref_status
    assert rep.joined + sum(rep.unjoined.values()) == rep.uses_read == len(uses)
    assert sum(rep.outcomes.values()) == rep.outcomes_read == len(outs)
    assert set(rep.unjoined) == set(UNJOINED_REASONS)
    assert set(rep.outcomes) == set(OUTCOME_STATUSES)


# ---------------------------------------------------------------------------------------------
# Reading: the columnar fast path equals the line parser; aliases; corrupt lines
# ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def mixed_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    rng = np.random.default_rng(7)
    recs: list[dict[str, Any]] = []
    for i in range(3000):
        prems = [_premise(f"p{j}", f"c{rng.integers(0, 400)}", p=float(rng.random()))
                 for j in range(int(rng.integers(0, 4)))]
        calls = None
        if prems and rng.random() < 0.2:
            calls = [{"verifier": "v", "signals": {prems[0]["id"]: bool(rng.random() < 0.5)},
                      "cost": 0.1, "reliability": 0.9}]
        recs.append(_record(f"a{i}" if rng.random() < 0.95 else None, i, *prems, calls=calls))
    lines = [encode_record(r) for r in recs]
    camel = {"timestamp": _iso(5000), "actionId": "seed-1", "toolName": "t",
             "premises": [{"id": "p1", "claimId": "c1", "calibratedViolationProbability": 0.3,
                           "recencyHours": 5.0, "sourceTrustScore": 0.5,
                           "modelConfidence": 0.5, "contradictionFlag": True}]}
    lines.insert(1500, encode_record(camel))
    numeric = {"time": 1796119200, "action_id": "num", "premises": [_premise("p1", "c2")]}
    lines.insert(2500, encode_record(numeric))
    lines.insert(10, b"\n")
    path = tmp_path_factory.mktemp("mixed") / "d.jsonl"
    path.write_bytes(b"".join(lines))
    return path


def test_columnar_path_equals_line_parser(mixed_log: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    import amv_calib.claims._logread as logread

    slow = read_uses(mixed_log, columnar=False)
    # small blocks so that some are parsed columnar and others (camelCase, numbers, blank
    # lines) fall back to the line parser
    monkeypatch.setattr(logread, "_BLOCK_BYTES", 64 << 10)
    fast = read_uses(mixed_log, columnar=True)
    pd.testing.assert_frame_equal(fast.wide(), slow.wide())
    pd.testing.assert_frame_equal(fast.signals.sort_values(["rec"], ignore_index=True),
                                  slow.signals.sort_values(["rec"], ignore_index=True))
    assert fast.stats[0].to_dict() == slow.stats[0].to_dict()
    assert slow.stats[0].blank == 1 and slow.stats[0].records == 3002
    e = slow.wide()
    camel = e.loc[e["action_id"] == "seed-1"].iloc[0]
    assert (camel["claim_id"], camel["p"], camel["contradiction_flag"]) == ("c1", 0.3, 1.0)
    a, _ = label_claims(mixed_log, columnar=False)
    b, _ = label_claims(mixed_log, columnar=True)
    pd.testing.assert_frame_equal(a, b)


def _spelled_log(path: Path, n: int, seed: int) -> Path:
    """A log whose first half spells every field canonically and whose second half picks,
    per field and record, any spelling the contract accepts (a premise's claim nested or
    not; two spellings of the offered verifiers in one record)."""
    from amv_calib.contract import DECISION_ALIASES as D
    from amv_calib.contract import OFFERED_VERIFIER_ALIASES as O

    rng = np.random.default_rng(seed)

    def pick(names: tuple[str, ...], plain: bool) -> str:
        return names[0] if plain else str(rng.choice(list(names)))

    lines = []
    for i in range(n):
        plain = i < n // 2
        rec: dict[str, Any] = {pick(D["time"], plain): _iso(i),
                               pick(D["action_id"], plain): f"a{i % (n // 2)}",
                               pick(D["tool_name"], plain): "t"}
        for key in ("theta", "kappa"):
            if rng.random() < 0.8:
                rec[pick(D[key], plain)] = float(rng.integers(1, 100))
        if rng.random() < 0.7:
            rec["calibrator"] = {"name": "g", **({"version": "1"} if rng.random() < 0.8
                                                 else {})}
        prems = []
        for k in range(int(rng.integers(0, 4))):
            feats = {pick(("recency_hours", "recencyHours"), plain): float(rng.random() * 9),
                     pick(("source_trust_score", "sourceTrustScore"), plain): float(rng.random()),
                     pick(("model_confidence", "modelConfidence"), plain): float(rng.random()),
                     pick(("contradiction_flag", "contradictionFlag"), plain):
                         bool(rng.random() < 0.5)}
            cid = f"c{rng.integers(0, 300)}"
            prem: dict[str, Any] = {pick(("id", "premise_id", "premiseId"), plain): f"p{k}"}
            if not plain and rng.random() < 0.3:
                prem["claim"] = {pick(("claim_id", "claimId", "id"), plain): cid, **feats}
            else:
                prem.update({pick(("claim_id", "claimId"), plain): cid, **feats})
            if rng.random() < 0.9:
                prem[pick(("p", "calibratedViolationProbability",
                           "calibrated_violation_probability"), plain)] = float(rng.random())
            prems.append(prem)
        rec["premises"] = prems
        if rng.random() < 0.3:
            rec[pick(D["verifiers"], plain)] = [{
                pick(O["id"], plain): "v", pick(O["resolves_premise_ids"], plain): ["p0"],
                pick(O["execution_cost"], plain): 0.2,
                pick(O["symmetric_reliability"], plain): 0.9}]
            if not plain and rng.random() < 0.3:
                rec["offeredVerifiers"] = [{"verifierId": "w", "cost": 0.1}]
        if prems and rng.random() < 0.15:
            rec[pick(D["verifier_calls"], plain)] = [
                {"verifier": "v", "reliability": 0.9, "signals": {"p0": True}}]
        lines.append(encode_record(rec))
    path.write_bytes(b"".join(lines))
    return path


def test_columnar_blocks_read_every_spelling_as_the_line_parser(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Blocks of canonical names only, and blocks mixing every spelling: the compiled
    extraction takes each of them, offered verifiers included, and reads them as the line
    parser does."""
    import amv_calib.claims._logread as logread

    log = _spelled_log(tmp_path / "d.jsonl", 2000, seed=3)
    slow = read_uses(log, columnar=False, offers=True)
    taken: list[bool] = []
    parse = logread._parse_block

    def spy(block: bytes, offers: bool) -> Any:
        parsed = parse(block, offers)
        taken.append(parsed.extracted is not None)
        return parsed

    monkeypatch.setattr(logread, "_parse_block", spy)
    monkeypatch.setattr(logread, "_BLOCK_BYTES", 32 << 10)
    fast = read_uses(log, columnar=True, offers=True)
    pd.testing.assert_frame_equal(fast.wide(), slow.wide())
    pd.testing.assert_frame_equal(fast.signals, slow.signals)
    pd.testing.assert_frame_equal(fast.offers.to_pandas(), slow.offers.to_pandas())
    for k, v in slow.records.items():
        assert pd.Series(np.asarray(fast.records[k])).equals(pd.Series(np.asarray(v))), k
    assert len(taken) > 10 and all(taken)
    assert set(fast.offers.column("id").to_pylist()) == {"v", "w"}


def test_a_block_without_premises_or_calibrator_reads_as_the_line_parser(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Blocks whose records lack whole fields (no premises, no calibrator, no regime) are
    parsed with a schema without them; the absent columns read as nulls."""
    import amv_calib.claims._logread as logread

    bare = [encode_record({"time": _iso(i), "action_id": f"b{i}"}) for i in range(300)]
    full = _spelled_log(tmp_path / "s.jsonl", 300, seed=4).read_bytes()
    log = tmp_path / "d.jsonl"
    log.write_bytes(b"".join(bare) + full + b"".join(bare))
    slow = read_uses(log, columnar=False, offers=True)
    monkeypatch.setattr(logread, "_BLOCK_BYTES", 8 << 10)
    fast = read_uses(log, columnar=True, offers=True)
    pd.testing.assert_frame_equal(fast.wide(), slow.wide())
    pd.testing.assert_frame_equal(fast.offers.to_pandas(), slow.offers.to_pandas())
    for k, v in slow.records.items():
        assert pd.Series(np.asarray(fast.records[k])).equals(pd.Series(np.asarray(v))), k
    assert fast.stats[0].records == 900


@pytest.mark.parametrize("peek", [64, 1 << 20], ids=["lines-longer-than-the-peek", "whole"])
def test_blocks_read_to_line_ends_read_as_the_line_parser(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, peek: int) -> None:
    """Blocks are read to the end of their last line (no copy to cut them); where a line is
    longer than the look-ahead, the block's tail is carried into the next one as before.
    Either way the read equals the line parser's, the file's last line unterminated too."""
    import amv_calib.claims._logread as logread

    log = _spelled_log(tmp_path / "d.jsonl", 600, seed=5)
    log.write_bytes(log.read_bytes()[:-1])  # the last line without its newline
    slow = read_uses(log, columnar=False, offers=True)
    blocks: list[bytes] = []
    parse = logread._parse_block

    def spy(block: bytes, offers: bool) -> Any:
        blocks.append(block)
        return parse(block, offers)

    monkeypatch.setattr(logread, "_parse_block", spy)
    monkeypatch.setattr(logread, "_BLOCK_BYTES", 4 << 10)
    monkeypatch.setattr(logread, "_PEEK_BYTES", peek)
    fast = read_uses(log, columnar=True, offers=True)
    pd.testing.assert_frame_equal(fast.wide(), slow.wide())
    pd.testing.assert_frame_equal(fast.signals, slow.signals)
    assert fast.stats[0].lines == slow.stats[0].lines == 600
    assert len(blocks) > 10 and all(b.endswith(b"\n") for b in blocks)


def test_blocks_pass_chunks_that_end_lines_without_a_copy() -> None:
    import amv_calib.claims._logread as logread

    chunks = [b"a\nb\n", b"c\nd", b"d\n", b"e", b"e\nf"]
    tail: list[bytes] = []
    blocks = list(logread._blocks(chunks, tail))
    assert blocks == [b"a\nb\n", b"c\n", b"dd\n", b"ee\n"] and tail == [b"f"]
    assert blocks[0] is chunks[0]


def test_to_line_end_hand_cases(tmp_path: Path) -> None:
    import amv_calib.claims._logread as logread

    (tmp_path / "f").write_bytes(b"aaaa\nbb\ncccccc\n")
    with open(tmp_path / "f", "rb") as fh:
        fh.seek(1)
        assert logread._to_line_end(fh, 2, -1) == 4  # to the first newline, included
        assert fh.tell() == 1  # the file position is left as it was
        assert logread._to_line_end(fh, 2, 3) == 2  # not past the bytes left
        assert logread._to_line_end(fh, 4, -1) == 7
        assert logread._to_line_end(fh, 20, -1) == 20  # no newline after: as asked


def test_corrupt_middle_line_raises_or_is_counted(tmp_path: Path) -> None:
    log = tmp_path / "d.jsonl"
    log.write_bytes(encode_record(_record("a", 0, _premise("p1", "x"))) + b"{oops\n"
                    + encode_record(_record("b", 1, _premise("p1", "y"))))
    with pytest.raises(DataContractError, match="line 2 is not a JSON object"):
        label_claims(log)
    with pytest.warns(DecisionLogWarning, match="corrupt line 2"):
        _, rep = label_claims(log, on_corrupt="skip")
    assert rep.decision_files[0]["corrupt"] == 1 and rep.uses_read == 2


def test_read_with_outcomes_equals_reading_each_and_reports_the_log_first(
        mixed_log: Path, tmp_path: Path) -> None:
    outcomes = tmp_path / "o.csv"
    outcomes.write_text("claim_id,time,violated\nc1,2026-12-01T00:00:00Z,true\n"
                        "c2,not a time,false\n")
    log, out_df, invalid = read_with_outcomes([mixed_log], outcomes, on_corrupt="raise")
    alone = read_uses([mixed_log])
    pd.testing.assert_frame_equal(log.wide(), alone.wide())
    want_df, want_invalid = load_outcomes(outcomes)
    pd.testing.assert_frame_equal(out_df, want_df)
    pd.testing.assert_frame_equal(invalid, want_invalid)
    assert len(out_df) == 1 and len(invalid) == 1
    # both inputs broken: the log's error is the one raised, as when read one after the other
    bad_log = tmp_path / "d.jsonl"
    bad_log.write_bytes(b"{oops\n")
    bad_outcomes = tmp_path / "bad.csv"
    bad_outcomes.write_text("claim_id\nc1\n")
    with pytest.raises(DataContractError, match="line 1 is not a JSON object"):
        read_with_outcomes([bad_log], bad_outcomes, on_corrupt="raise")
    with pytest.raises(MissingColumnsError, match="time"):
        read_with_outcomes([mixed_log], bad_outcomes, on_corrupt="raise")


def test_writer_after_a_crash_keeps_new_lines(tmp_path: Path) -> None:
    log = tmp_path / "d.jsonl"
    log.write_bytes(encode_record(_record("a", 0, _premise("p1", "x")))[:-30])  # torn
    with DecisionLogWriter(log) as w:
        w.append(_record("b", 1, _premise("p1", "y")))
    with pytest.warns(DecisionLogWarning):
        _, rep = label_claims(log, on_corrupt="skip")
    assert rep.uses_read == 1 and rep.decision_files[0]["corrupt"] == 1


@pytest.mark.parametrize("fmt", ["csv", "jsonl", "parquet"], ids=["csv", "jsonl", "parquet"])
def test_outcome_formats_agree(tmp_path: Path, fmt: str) -> None:
    frame = pd.DataFrame({
        "claimId": ["x", "y", None], "actionId": [None, "a", "b"],
        "timestamp": ["2026-12-01T10:00:00+01:00", "2026-12-01T09:00:00Z", "1796119200"],
        "isViolated": ["yes", "0", "TRUE"],
    })
    path = tmp_path / f"o.{fmt}"
    if fmt == "csv":
        frame.to_csv(path, index=False)
    elif fmt == "jsonl":
        frame.to_json(path, orient="records", lines=True)
    else:
        frame.to_parquet(path)
    out, bad = load_outcomes(path)
    assert bad.empty
    assert out["claim_id"].tolist()[:2] == ["x", "y"] and pd.isna(out["claim_id"].iloc[2])
    assert out["violated"].tolist() == [True, False, True]
    # 10:00+01:00 == 09:00Z; epoch seconds 1796119200 == 2026-12-01T10:00:00Z
    assert out["t_us"].tolist() == [1796115600_000000, 1796115600_000000, 1796119200_000000]
    # the same file by URI (what object storage gives: s3://, gs://), read through pyarrow
    by_uri, bad_uri = load_outcomes(path.resolve().as_uri())
    pd.testing.assert_frame_equal(by_uri, out)
    pd.testing.assert_frame_equal(bad_uri, bad)
    with pytest.raises(DataContractError, match="missing.csv: cannot read the outcome file"):
        load_outcomes((tmp_path / "missing.csv").resolve().as_uri())


def test_outcome_rows_that_break_the_contract(tmp_path: Path) -> None:
    out, bad = load_outcomes(pd.DataFrame({
        "claim_id": ["x", None, "z", "w"], "time": ["2026-12-01T00:00:00Z"] * 2 + ["", "x"],
        "violated": [2, True, True, True]}))
    assert out.empty
    assert bad["reason"].tolist() == ["violated=2 is not a boolean",
                                      "claim_id and action_id both missing",
                                      "time='' is not ISO-8601 or epoch seconds",
                                      "time='x' is not ISO-8601 or epoch seconds"]
    with pytest.raises(MissingColumnsError, match=r"\['violated'\]"):
        load_outcomes(pd.DataFrame({"claim_id": ["x"], "time": ["2026-12-01"]}))


# ---------------------------------------------------------------------------------------------
# Verifier signals: posterior soft labels
# ---------------------------------------------------------------------------------------------
def test_posterior_soft_labels_follow_bayes(tmp_path: Path) -> None:
    calls = [{"verifier": "v1", "signals": {"p1": False}, "cost": 0.1, "reliability": 0.9},
             {"verifier": "v2", "signals": {"p1": True, "p2": False}, "cost": 0.1,
              "reliability": 0.7}]
    log = _write(tmp_path / "d.jsonl", [
        _record("a", 0, _premise("p1", "x", p=0.2), _premise("p2", "y", p=0.05), calls=calls),
    ])
    claims, rep = label_claims(log)
    assert rep.joined_by_source == {"outcome": 0, "verifier": 2}
    # x: refuted at r=0.9, then confirmed at r=0.7; y: refuted at r=0.7
    qx = posterior_confirm(posterior_refute(0.2, 0.9), 0.7)
    qy = posterior_refute(0.05, 0.7)
    w = claims.set_index(["claim_id", "violated"])["label_weight"]
    assert w[("x", True)] == pytest.approx(qx, rel=1e-12)
    assert w[("x", False)] == pytest.approx(1 - qx, rel=1e-12)
    assert w[("y", True)] == pytest.approx(qy, rel=1e-12)
    llr = claims.set_index("claim_id")["signal_llr"]
    assert llr["x"].iloc[0] == pytest.approx(math.log(9) - math.log(7 / 3))
    _, off = label_claims(log, soft_labels="off")
    assert off.joined == 0 and off.unjoined["no_outcome_yet"] == 2


def test_perfect_verifier_gives_one_hard_row_and_contradicting_ones_are_reported(
        tmp_path: Path) -> None:
    log = _write(tmp_path / "d.jsonl", [
        _record("a", 0, _premise("p1", "x"), calls=[
            {"verifier": "v", "signals": {"p1": False}, "cost": 0, "reliability": 1.0}]),
        _record("b", 1, _premise("p1", "y"), calls=[
            {"verifier": "v", "signals": {"p1": False}, "cost": 0, "reliability": 1.0},
            {"verifier": "w", "signals": {"p1": True}, "cost": 0, "reliability": 1.0}]),
        _record("c", 2, _premise("p1", "z"), calls=[
            {"verifier": "v", "signals": {"p1": False}, "cost": 0, "reliability": 0.4}]),
    ])
    claims, rep = label_claims(log)
    assert claims[["claim_id", "violated", "label_weight"]].values.tolist() == [["x", True, 1.0]]
    assert rep.unjoined["conflicting_signals"] == 1
    assert rep.unjoined["no_outcome_yet"] == 1 and rep.ignored_signals == 1


def test_signals_repeated_in_later_records_are_not_double_counted(tmp_path: Path) -> None:
    c1 = {"verifier": "v", "signals": {"p1": False}, "cost": 0.1, "reliability": 0.8}
    c2 = {"verifier": "w", "signals": {"p1": False}, "cost": 0.1, "reliability": 0.9}
    cumulative = _write(tmp_path / "c.jsonl", [
        _record("a", 0, _premise("p1", "x"), calls=[c1]),
        _record("a", 1, _premise("p1", "x"), calls=[c1, c2]),
    ])
    incremental = _write(tmp_path / "i.jsonl", [
        _record("a", 0, _premise("p1", "x"), calls=[c1]),
        _record("a", 1, _premise("p1", "x"), calls=[c2]),
    ])
    a, _ = label_claims(cumulative)
    b, _ = label_claims(incremental)
    expected = math.log(4) + math.log(9)
    assert a["signal_llr"].iloc[0] == pytest.approx(expected)
    assert b["signal_llr"].iloc[0] == pytest.approx(expected)


def _noisy_log(path: Path, X: pd.DataFrame, y: np.ndarray, prior: np.ndarray, seed: int) -> None:
    rng = np.random.default_rng(seed)
    recs = []
    for i in range(len(X)):
        r = float(rng.choice([0.75, 0.85, 0.95]))
        calls = []
        for j in range(int(rng.integers(1, 3))):
            correct = rng.random() < r
            calls.append({"verifier": f"v{j}", "signals": {"p1": bool(y[i] != correct)},
                          "cost": 0.1, "reliability": r})
        row = X.iloc[i]
        prem = {"id": "p1", "claim_id": f"c{i}", "recency_hours": float(row.iloc[0]),
                "source_trust_score": float(row.iloc[1]), "model_confidence": float(row.iloc[2]),
                "contradiction_flag": bool(row.iloc[3]), "p": float(prior[i])}
        recs.append(_record(f"a{i}", 0, prem, calls=calls))
    _write(path, recs)


def _features(rng: np.random.Generator, n: int) -> pd.DataFrame:
    return pd.DataFrame({"recency_hours": rng.gamma(1.5, 200.0, n),
                         "source_trust_score": rng.beta(4, 2, n),
                         "model_confidence": rng.beta(5, 2, n),
                         "contradiction_flag": rng.random(n) < 0.15})


@pytest.fixture(scope="module")
def noisy(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Claims with a known logistic truth, labelled only by noisy verifiers (r in 0.75-0.95),
    logged by a gate whose prior (the seed formula) is miscalibrated for this truth."""
    rng = np.random.default_rng(11)
    truth = PortableCalibrator(kind="linear", feature_map=SEED_FEATURE_MAP, intercept=-1.2,
                               coef=(-0.9, 2.6, -1.1, 1.7))
    n = 8_000
    X = _features(rng, n)
    y = rng.random(n) < truth.predict(X)
    d = tmp_path_factory.mktemp("noisy")
    _noisy_log(d / "seed.jsonl", X, y, seed_prior_calibrator().predict(X), seed=1)
    _noisy_log(d / "calibrated.jsonl", X, y, truth.predict(X), seed=1)
    Xf = _features(rng, 60_000)
    yf = rng.random(len(Xf)) < truth.predict(Xf)
    ref = PlattCalibrator(C=None).fit(X, y)
    return {"dir": d, "Xf": Xf, "yf": yf,
            "ll_true": log_loss(yf, ref.predict_proba(Xf)[:, 1])}


def _ll(model: Any, data: dict[str, Any]) -> float:
    return float(log_loss(data["yf"], model.predict_proba(data["Xf"])[:, 1]))


def test_em_on_verifier_labels_recovers_the_calibrator(noisy: dict[str, Any]) -> None:
    # Stated tolerance: log loss on fresh data within 1% of Platt fitted on the true labels.
    claims, rep = label_claims(noisy["dir"] / "seed.jsonl")
    assert rep.joined_by_source["verifier"] == 8_000
    fit = fit_noisy_labels(PlattCalibrator(C=None), claims)
    assert fit.converged
    assert _ll(fit.estimator, noisy) <= 1.01 * noisy["ll_true"]


def test_one_pass_posteriors_need_a_calibrated_prior(noisy: dict[str, Any]) -> None:
    cols = FEATURES
    good, _ = label_claims(noisy["dir"] / "calibrated.jsonl")
    m = PlattCalibrator(C=None).fit(good[cols], good["violated"],
                                    sample_weight=good["label_weight"])
    assert _ll(m, noisy) <= 1.01 * noisy["ll_true"]
    # with the miscalibrated seed prior a single pass is biased towards that prior
    bad, _ = label_claims(noisy["dir"] / "seed.jsonl")
    m = PlattCalibrator(C=None).fit(bad[cols], bad["violated"], sample_weight=bad["label_weight"])
    assert _ll(m, noisy) > 1.01 * noisy["ll_true"]


# ---------------------------------------------------------------------------------------------
# End to end: the real gate writes the log, outcomes come from the known truth
# ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def e2e(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    truth = synth_claims(6000, seed=5).reset_index(drop=True)
    rng = np.random.default_rng(3)
    d = tmp_path_factory.mktemp("e2e")
    log = d / "decisions.jsonl"
    gate = Gate(calibrator=seed_prior_calibrator(), decision_log=log,
                artifact_name="seed-prior", artifact_version="0")
    by_id = truth.set_index("claim_id")
    actions: list[list[str]] = []
    i = 0
    while i < len(truth):
        k = min(int(rng.integers(1, 4)), len(truth) - i)
        actions.append(truth["claim_id"].iloc[i:i + k].tolist())
        i += k
    for a, ids in enumerate(actions):
        premises = tuple(
            Premise(id=f"p{j}", claim=MemoryClaim(
                id=cid, source_trust_score=float(by_id.at[cid, "source_trust_score"]),
                model_confidence=float(by_id.at[cid, "model_confidence"]),
                recency_hours=float(by_id.at[cid, "recency_hours"]),
                contradiction_flag=bool(by_id.at[cid, "contradiction_flag"])))
            for j, cid in enumerate(ids))
        action = CandidateAction(action_id=f"act-{a}", tool_name="transfer",
                                 impact_cost_theta=float(rng.choice([5.0, 40.0, 300.0])),
                                 abstention_cost_kappa=3.0, premises=premises)
        verifiers = [Verifier(id=f"v{j}", resolves_premise_ids=(p.id,), execution_cost=0.2,
                              symmetric_reliability=0.9) for j, p in enumerate(premises)]

        def answer(v: Verifier, act: CandidateAction) -> dict[str, bool]:
            out = {}
            for pid in v.resolves_premise_ids:
                cid = next(p.claim_id for p in act.premises if p.id == pid)
                valid = not bool(by_id.at[cid, "violated"])
                out[pid] = valid if rng.random() < 0.9 else not valid
            return out

        gate.run(action, verifiers, answer)
    later = datetime.now(UTC) + timedelta(days=1)
    action_of = {cid: f"act-{a}" for a, ids in enumerate(actions) for cid in ids}
    size = {f"act-{a}": len(ids) for a, ids in enumerate(actions)}
    rows, plan = [], {}
    for cid, v in zip(truth["claim_id"], truth["violated"], strict=True):
        u = rng.random()
        a = action_of[cid]
        if u < 0.05:
            plan[cid] = "no_outcome_yet"
            continue
        if u < 0.08:
            plan[cid] = "outcome_before_use"
            rows.append({"claim_id": cid, "time": "2000-01-01T00:00:00Z", "violated": v})
            continue
        if u < 0.10:
            plan[cid] = "conflicting_outcomes"
            rows += [{"claim_id": cid, "time": later.isoformat(), "violated": True},
                     {"claim_id": cid, "time": later.isoformat(), "violated": False}]
            continue
        plan[cid] = ""
        if u < 0.4:
            rows.append({"claim_id": cid, "action_id": a, "time": later.isoformat(),
                         "violated": v})
        elif u < 0.5 and size[a] == 1:
            rows.append({"action_id": a, "time": later.isoformat(), "violated": v})
        else:
            rows.append({"claim_id": cid, "time": later.isoformat(), "violated": v})
    outcomes = d / "outcomes.csv"
    pd.DataFrame(rows).to_csv(outcomes, index=False)
    fresh = synth_claims(40_000, seed=6)
    return {"truth": truth, "log": log, "outcomes": outcomes, "plan": plan, "fresh": fresh,
            "n_actions": len(actions)}


def test_e2e_report_accounts_for_every_record(e2e: dict[str, Any]) -> None:
    claims, rep = label_claims(e2e["log"], e2e["outcomes"], soft_labels="off")
    plan = pd.Series(e2e["plan"])
    assert rep.decision_files[0]["records"] == e2e["n_actions"]
    assert rep.uses_read == len(e2e["truth"])
    assert rep.joined == int((plan == "").sum())
    for reason in ("no_outcome_yet", "outcome_before_use", "conflicting_outcomes"):
        assert rep.unjoined[reason] == int((plan == reason).sum()), reason
    assert rep.joined + sum(rep.unjoined.values()) == rep.uses_read
    assert rep.outcomes_read == len(pd.read_csv(e2e["outcomes"]))
    assert sum(rep.outcomes.values()) == rep.outcomes_read
    # every joined label is the truth, every feature as the gate logged it
    truth = e2e["truth"].set_index("claim_id")
    joined = claims.set_index("claim_id")
    assert (joined["violated"] == truth.loc[joined.index, "violated"]).all()
    for col in FEATURES:
        assert (joined[col] == truth.loc[joined.index, col]).all(), col
    assert set(joined["calibrator"]) == {"seed-prior@0"}
    # the logged p is what the gate's calibrator says
    p = seed_prior_calibrator().predict(truth.loc[joined.index, FEATURES])
    np.testing.assert_allclose(joined["p_logged"].to_numpy(), p, rtol=0, atol=1e-15)


def test_e2e_retrained_calibrator_matches_the_true_table(e2e: dict[str, Any]) -> None:
    claims, _ = label_claims(e2e["log"], e2e["outcomes"], soft_labels="off")
    truth, fresh = e2e["truth"], e2e["fresh"]
    on_true = PlattCalibrator().fit(truth[FEATURES], truth["violated"])
    on_logs = PlattCalibrator().fit(claims[FEATURES], claims["violated"])
    ll_true = log_loss(fresh["violated"], on_true.predict_proba(fresh[FEATURES])[:, 1])
    ll_logs = log_loss(fresh["violated"], on_logs.predict_proba(fresh[FEATURES])[:, 1])
    assert ll_logs <= 1.01 * ll_true
    # and the joined table is a valid claim-outcome table for the rest of the pipeline
    accepted, rejects = load_claims(claims)
    assert rejects.empty and len(accepted) == len(claims)


def test_e2e_soft_labels_from_the_gate_verifiers(e2e: dict[str, Any]) -> None:
    # The uses without an outcome that the gate verified are labelled by their posterior,
    # which is what the gate itself computed after its verifier calls.
    claims, rep = label_claims(e2e["log"], e2e["outcomes"])
    soft = claims.loc[claims["label_source"] == "verifier"]
    assert rep.joined_by_source["verifier"] == soft["use_id"].nunique() > 0
    logged = {}
    for line in Path(e2e["log"]).read_text(encoding="utf-8").splitlines():
        rec = json.loads(line)
        for prem, post in zip(rec["premises"], rec.get("posteriors", []), strict=True):
            logged[(rec["action_id"], prem["id"])] = post
    q = soft.loc[soft["violated"]]
    for r in q.itertuples():
        assert r.label_weight == pytest.approx(logged[(r.action_id, r.premise_id)], rel=1e-9)
    fit = fit_noisy_labels(PlattCalibrator(), claims)
    truth, fresh = e2e["truth"], e2e["fresh"]
    on_true = PlattCalibrator().fit(truth[FEATURES], truth["violated"])
    ll_true = log_loss(fresh["violated"], on_true.predict_proba(fresh[FEATURES])[:, 1])
    ll = log_loss(fresh["violated"], fit.estimator.predict_proba(fresh[FEATURES])[:, 1])
    assert ll <= 1.01 * ll_true


# ---------------------------------------------------------------------------------------------
# CLI, example files, benchmark smoke test
# ---------------------------------------------------------------------------------------------
def test_cli_label_on_the_examples(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "claims.parquet"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DecisionLogWarning)
        code = cli.main(["label", "--decisions", str(EXAMPLES / "decisions.jsonl"),
                         "--outcomes", str(EXAMPLES / "outcomes.csv"), "--out", str(out),
                         "--json"])
    assert code == 0
    line = json.loads(capsys.readouterr().out.strip())
    assert line["decision_lines"] == 11 and line["skipped_lines"]["torn_last_line"] == 1
    # po-2001's "goods received" names the action, not which of its two premises held: it
    # labels neither (its ship-to address takes a verifier's soft label instead)
    assert line["uses_read"] == 12 and line["joined"] == 6
    assert line["unjoined"] == {"invalid_use": 1, "no_outcome_yet": 0, "outcome_before_use": 1,
                                "conflicting_outcomes": 1, "ambiguous_action_outcome": 3,
                                "conflicting_signals": 0}
    assert line["outcomes"] == {"used": 3, "conflicting": 2, "ambiguous": 2, "superseded": 0,
                                "before_use": 1, "no_matching_use": 1, "invalid": 1}
    claims = pd.read_parquet(out)
    assert len(claims) == line["rows"] == 8
    report = json.loads((tmp_path / "claims.join_report.json").read_text(encoding="utf-8"))
    assert report["uses_read"] == 12
    details = pd.read_csv(tmp_path / "claims.unjoined.csv")
    assert len(details) == 6 + 7
    assert (details["kind"] == "use").sum() == 6
    # the posterior the gate logged for crm-4001 equals the soft label
    carol = claims.loc[(claims["claim_id"] == "mem-email-carol") & claims["violated"]]
    assert carol["label_weight"].iloc[0] == pytest.approx(0.0462, abs=5e-5)


def test_cli_label_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = cli.main(["label", "--decisions", str(tmp_path / "missing.jsonl"),
                     "--out", str(tmp_path / "c.parquet")])
    assert code == 2
    assert "missing.jsonl does not exist" in capsys.readouterr().err
    code = cli.main(["label", "--decisions", str(EXAMPLES / "decisions.jsonl"),
                     "--out", str(tmp_path / "c.xlsx")])
    assert code == 2


@pytest.mark.slow
def test_bench_quick_runs(run_bench: Callable[..., dict[str, Any]]) -> None:
    res = run_bench("bench_labels", timeout=240)
    assert res["join"]["uses_read"] == res["join"]["joined"] + sum(
        res["join"]["unjoined"].values())
    # both sides read every premise entry the generator wrote
    assert res["join"]["uses_read"] == res["baseline"]["uses"] == res["data"]["premise_entries"]
    # label with episodes on the same data, in the same run
    eps = res["episodes"]["episodes"]
    assert eps["episodes"] + sum(eps["unlabelled"].values()) == eps["actions_read"]
    # the time ratio means little at 10,000 lines: --check bounds it at 10 M


@pytest.mark.parametrize("ending", [".csv", ".jsonl"], ids=["csv", "jsonl"])
def test_cli_label_options_and_formats(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                       ending: str) -> None:
    log = tmp_path / "d.jsonl"
    log.write_bytes(encode_record(_record("a", 0, _premise("p1", "x"), calls=[
        {"verifier": "v", "signals": {"p1": False}, "cost": 0.1, "reliability": 0.9}]))
        + b"{oops\n" + encode_record(_record("b", 1, _premise("p1", "y"))))
    out = tmp_path / f"claims{ending}"
    assert cli.main(["label", "--decisions", str(log), "--out", str(out)]) == 2
    assert "line 2 is not a JSON object" in capsys.readouterr().err
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DecisionLogWarning)
        code = cli.main(["label", "--decisions", str(log), "--out", str(out),
                         "--skip-corrupt", "--soft-labels", "off", "--json"])
    assert code == 0
    line = json.loads(capsys.readouterr().out.strip())
    assert line["skipped_lines"]["corrupt"] == 1 and line["joined"] == 0
    assert line["unjoined"]["no_outcome_yet"] == 2
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DecisionLogWarning)
        assert cli.main(["label", "--decisions", str(log), "--out", str(out),
                         "--skip-corrupt", "--json"]) == 0
    line = json.loads(capsys.readouterr().out.strip())
    assert line["joined_by_source"] == {"outcome": 0, "verifier": 1} and line["rows"] == 2
    table = pd.read_csv(out) if ending == ".csv" else pd.read_json(out, lines=True)
    assert table["label_weight"].sum() == pytest.approx(1.0)
    assert table["timestamp"].astype(str).str.startswith("2026-12-01").all()


def _repeated_reference(rows: list[tuple[int, str | None, str | None]]
                        ) -> tuple[list[bool], list[str]]:
    """Plain Python: per record, the first key (premise id, else claim id) given twice."""
    first: dict[int, str] = {}
    for rec in sorted({r for r, _, _ in rows}):
        keys = [f"premise id\0{p}" if p is not None else f"claim id\0{c}"
                for r, p, c in rows if r == rec and (p is not None or c is not None)]
        twice = [k for k in keys if keys.count(k) > 1]
        if twice:
            first[rec] = twice[0]
    return [r in first for r, _, _ in rows], [first[r] for r, _, _ in rows if r in first]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 4), st.sampled_from([None, "p0", "p1", "c0"]),
                          st.sampled_from([None, "c0", "c1"])), max_size=14))
def test_repeated_premises_match_a_plain_reference(
        rows: list[tuple[int, str | None, str | None]]) -> None:
    from amv_calib.claims._join import _repeated_premises

    rows = sorted(rows, key=lambda r: r[0])  # entries come in record order
    u = pd.DataFrame({
        "rec": np.array([r for r, _, _ in rows], dtype=np.int64),
        "premise_id": pd.Categorical([p for _, p, _ in rows]),
        "claim_id": pd.array([c for _, _, c in rows], dtype="str"),
    })
    bad, keys = _repeated_premises(u)
    assert (bad.tolist(), keys) == _repeated_reference(rows)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(-1, 40)), max_size=300))
def test_repeated_in_records_matches_a_plain_reference(rows: list[tuple[int, int]]) -> None:
    from amv_calib.claims._kernels import repeated_in_records

    # records of up to ~300 rows: both the pairwise check and the sort of a long record
    rows = sorted(rows, key=lambda r: r[0])
    rec = np.array([r for r, _ in rows], dtype=np.int64)
    key = np.array([k for _, k in rows], dtype=np.int64)
    expect = [k >= 0 and sum(1 for r2, k2 in rows if (r2, k2) == (r, k)) > 1 for r, k in rows]
    assert repeated_in_records(rec, key).tolist() == expect


@pytest.mark.parametrize("length", [2, 64, 65, 500], ids=["pair", "64", "65-sorted", "500"])
def test_repeated_in_records_long_records(length: int) -> None:
    from amv_calib.claims._kernels import repeated_in_records

    # records longer than 64 rows are checked by a sort of their keys
    rng = np.random.default_rng(length)
    rec = np.repeat(np.arange(3), length)
    key = rng.integers(-1, length, size=rec.size)
    key[length + 1] = key[length] = 0  # one repeat at least
    expect = [k >= 0 and int(((rec == r) & (key == k)).sum()) > 1
              for r, k in zip(rec, key, strict=True)]
    assert repeated_in_records(rec, key).tolist() == expect


def test_repeated_in_records_refuses_rows_out_of_record_order() -> None:
    from amv_calib.claims._kernels import repeated_in_records

    with pytest.raises(ValueError, match="record order"):
        repeated_in_records(np.array([0, 1, 0]), np.array([5, 5, 5]))


@pytest.mark.parametrize("fastpath", [True, False], ids=["unchecked", "pandas-without-it"])
def test_distinct_categories_is_the_checked_dtype(
        monkeypatch: pytest.MonkeyPatch, fastpath: bool) -> None:
    # The log's categoricals skip pandas' check that Arrow's dictionary is distinct (~2.4 s
    # and ~100 MiB at a million action ids); the dtype is the one the check would build.
    from amv_calib.claims._logread import distinct_categories

    if not fastpath:
        monkeypatch.delattr(pd.CategoricalDtype, "_from_fastpath")
    cats = pd.Index(["a2", "a10", "a1", "b"], dtype="str")
    dtype = distinct_categories(cats)
    assert dtype == pd.CategoricalDtype(cats)
    assert dtype.categories.equals(cats) and not dtype.ordered
    col = pd.Categorical.from_codes(np.array([1, -1, 3, 0]), dtype=dtype)
    assert col.tolist() == ["a10", np.nan, "b", "a2"]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(["a0", "a1", "a2", "", "é"]), unique=True),
       st.lists(st.sampled_from([None, "a0", "a1", "a3", "", "é", "x"]), max_size=12))
def test_codes_in_numbers_like_a_plain_reference(cats: list[str],
                                                 other: list[str | None]) -> None:
    # An outcome's action id takes the code of the log's action id it names; ids the log
    # does not have are numbered after the log's, in order of first appearance.
    from amv_calib.claims._codes import _codes_in

    want: dict[str, int] = {c: i for i, c in enumerate(cats)}
    ref = []
    for v in other:
        if v is not None and v not in want:
            want[v] = len(want)
        ref.append(-1 if v is None else want[v])
    got = _codes_in(pd.Index(cats, dtype="str"), pd.Series(pd.array(other, dtype="str")))
    assert got.tolist() == ref


def test_read_uses_pauses_the_collector_and_restores_it(
        mixed_log: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The reader keeps no reference cycle: the collector's passes over every live object
    # (~0.4 s of a 1 M-line read) are paused while it reads, and resumed after, also on an
    # error; a caller that paused it keeps it paused.
    import gc

    from amv_calib.claims import _logread

    seen: list[bool] = []
    finish = _logread.EntryAccumulator.finish

    def spy(self: Any) -> Any:
        seen.append(gc.isenabled())
        return finish(self)

    monkeypatch.setattr(_logread.EntryAccumulator, "finish", spy)
    assert gc.isenabled()
    read_uses([mixed_log])
    assert seen == [False] and gc.isenabled()
    bad = tmp_path / "d.jsonl"
    bad.write_bytes(b"{oops\n")
    with pytest.raises(DataContractError, match="line 1 is not a JSON object"):
        read_uses([bad])
    assert gc.isenabled()
    gc.disable()
    try:
        read_uses([mixed_log])
        assert not gc.isenabled()
    finally:
        gc.enable()


@settings(max_examples=200, deadline=None)
@given(known=st.lists(st.one_of(st.none(), st.sampled_from(["c1", "c2", " c3", "é", ""])),
                      max_size=12),
       other=st.lists(st.one_of(st.none(), st.sampled_from(["c1", "c2", " c3", "é", "", "x"])),
                      max_size=20))
def test_codes_against_tells_known_values_apart_only(known: list[str | None],
                                                     other: list[str | None]) -> None:
    # The log's claim ids coded against the outcomes': an outcome's claim keeps its code
    # (first appearance among the outcomes), every other claim one shared code after them.
    from amv_calib.claims._codes import _codes_against

    first: dict[str, int] = {}
    for v in known:
        if v is not None:
            first.setdefault(v, len(first))
    k_codes, o_codes = _codes_against(pd.Series(pd.array(known, dtype="str")),
                                      pd.Series(pd.array(other, dtype="str")))
    assert k_codes.tolist() == [-1 if v is None else first[v] for v in known]
    assert o_codes.tolist() == [-1 if v is None else first.get(v, len(first)) for v in other]


def test_join_with_spilled_features_equals_join_in_memory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # ``join_logs`` reads a big log's features and p into a temporary file and takes them
    # back as it checks them, computes posteriors and writes rows; a log read into memory
    # first gives the same tables: repeated actions (a use is not its entry), invalid
    # features (their messages quote the values), verifier signals (the posterior reads p).
    import amv_calib.claims._join as join_module

    rng = np.random.default_rng(3)
    recs: list[dict[str, Any]] = []
    outs: list[tuple[str | None, str | None, int, bool]] = []
    for i in range(400):
        prem = _premise("p0", f"c{i % 37}", trust=float(rng.random()), p=float(rng.random()))
        if i % 11 == 0:
            prem["recency_hours"] = -1.5
        if i % 13 == 0:
            prem["source_trust_score"] = 1.25
        calls = [{"verifier": "v", "signals": {"p0": bool(rng.random() < 0.5)},
                  "cost": 0.1, "reliability": 0.8}] if i % 3 == 0 else None
        action = f"a{i // 2}"  # each action logged twice: the later record is the use
        recs.append(_record(action, i, prem, _premise("p1", f"c{i % 5}"), calls=calls))
        if i % 4 == 0:
            outs.append((f"c{i % 37}", None, i + 3, bool(rng.random() < 0.3)))
    log = _write(tmp_path / "d.jsonl", recs)
    out_df = _outcomes(outs)
    assert join_logs(log, out_df).spilled is None  # a small log stays in memory
    monkeypatch.setattr(join_module, "SPILL_BYTES", 1)  # ... this one is big
    joined = join_logs(log, out_df)
    assert joined.spilled is not None
    spilled_claims, spilled_report = joined.tables()
    mem_claims, mem_report = label_claims(log, out_df, log=read_uses(log))
    pd.testing.assert_frame_equal(spilled_claims, mem_claims)
    pd.testing.assert_frame_equal(spilled_report.unjoined_uses, mem_report.unjoined_uses)
    assert spilled_report.to_dict() == mem_report.to_dict()
    assert (spilled_claims["label_source"] == "verifier").any()
    assert spilled_report.unjoined.get("invalid_use", 0) > 0
    assert spilled_report.repeated_entries > 0


@pytest.mark.parametrize("limit", ["16MB", "64MB"])
def test_join_under_the_engines_memory_limit_equals_the_default(
        limit: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # DuckDB's share of the join's memory is capped (past it, its tables spill): the
    # tables do not depend on the cap, and the session runs under the one set
    import amv_calib.claims._duckjoin as duckjoin

    log, outcomes = EXAMPLES / "logs" / "decisions.jsonl", EXAMPLES / "logs" / "outcomes.csv"
    claims, report = label_claims(log, outcomes)
    monkeypatch.setattr(duckjoin, "JOIN_MEMORY_LIMIT", limit)
    with duckjoin.session() as con:
        row = con.execute("SELECT current_setting('memory_limit')").fetchone()
    assert row is not None and row[0] == {"16MB": "15.2 MiB", "64MB": "61.0 MiB"}[limit]
    capped, capped_report = label_claims(log, outcomes)
    pd.testing.assert_frame_equal(capped, claims)
    assert capped_report.to_dict() == report.to_dict()
