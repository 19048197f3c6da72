"""The label join written once as SQL (amv_calib.claims._sql), run by DuckDB: a hand-worked
case, the plain-Python oracle (tests/claims/oracle.py) on the example logs and on generated
ones, and the label outputs of the example logs as the array join wrote them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import oracle
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from amv_calib.claims import _duckjoin as dj
from amv_calib.claims._join import read_with_outcomes
from amv_calib.claims._logread import _NAT
from amv_calib.claims._outcomes import OUTCOME_STATUSES
from amv_calib.claims._sql import (
    UNJOINED_REASONS,
    VALUES_OK,
    join_statements,
    values_ok_expression,
)
from amv_calib.contract import CLAIM_FEATURES

R = {r: i for i, r in enumerate(UNJOINED_REASONS)}
S = {s: i for i, s in enumerate(OUTCOME_STATUSES)}
_FEATURES = {"recency_hours": 1.0, "source_trust_score": 0.5, "model_confidence": 0.5,
             "contradiction_flag": 0.0}


def _entries(rows: list[tuple[int, str | None, str | None, str | None, int | None]]
             ) -> pd.DataFrame:
    """Entries from (rec, action_id, premise_id, claim_id, t_us), the features valid."""
    pidx: dict[int, int] = {}
    out = []
    for eid, (rec, action, pid, claim, t) in enumerate(rows):
        out.append({"eid": eid, "rec": rec, "pidx": pidx.setdefault(rec, 0),
                    "action_id": action, "premise_id": pid, "claim_id": claim,
                    "t_us": t, **_FEATURES})
        pidx[rec] += 1
    df = pd.DataFrame(out)
    df["t_us"] = df["t_us"].astype("Int64")
    return df


def _outcomes(rows: list[tuple[str | None, str | None, int, bool]]) -> pd.DataFrame:
    return pd.DataFrame([{"oid": i, "action_id": a, "claim_id": c, "o_t": t, "v": v}
                         for i, (a, c, t, v) in enumerate(rows)])


_NO_SIGNALS = pd.DataFrame({"sid": pd.array([], "int64"), "rec": pd.array([], "int64"),
                            "premise_id": pd.array([], "object"),
                            "verifier": pd.array([], "object"),
                            "confirmed": pd.array([], "bool"),
                            "reliability": pd.array([], "float64")})


def test_hand_worked_case() -> None:
    """Each rule once, the expected verdicts worked out by hand from the module docs."""
    entries = _entries([
        (0, "a1", "p0", "c1", 10),   # u0: claim outcome at 20 -> joined, violated
        (1, "a2", "p0", "c2", 30),   # u1: claim outcome only at 20 -> outcome_before_use
        (2, "a3", "p0", "c3", 10),   # u2: nothing -> no_outcome_yet
        (3, "a4", "p0", "c4", 10),   # u3, u4: action outcome, two premises -> ambiguous
        (3, "a4", "p1", "c5", 10),
        (4, "a5", "p0", "c6", 10),   # u5: action+claim outcomes disagree -> conflicting
        (5, "a6", "p0", "c7", 10),   # record repeating p0: one use (the later entry),
        (5, "a6", "p0", "c8", 10),   # invalid
        (6, None, "p0", "c9", 10),   # no action id: each record an action of its own
        (7, None, "p0", "c9", 40),
        (8, "a7", "p0", "c10", 10),  # a7 logged twice: one use, the later record's
        (9, "a7", "p0", "c10", 15),
        (10, "a8", "p0", "c11", None),  # no time -> invalid
        (11, "a9", "p0", "c12", 10),  # u11, u12: action outcome "held", two premises ->
        (11, "a9", "p1", "c13", 10),  # ambiguous all the same
    ])
    outcomes = _outcomes([
        (None, "c1", 20, True),      # used
        (None, "c2", 20, False),     # before_use
        ("a4", None, 15, True),      # ambiguous
        ("a5", "c6", 12, True),      # conflicting
        ("a5", "c6", 13, False),     # conflicting
        (None, "c9", 20, False),     # decides the first c9 use; superseded for the second
        ("a7", None, 12, False),     # before the kept use (t=15)
        ("zz", None, 12, False),     # no matching use
        ("a9", None, 12, False),     # ambiguous
    ])
    st = dj.run_join(dj.connect(threads=1), dj.encode(entries, _NO_SIGNALS, outcomes))
    assert st.eid.tolist() == [0, 1, 2, 3, 4, 5, 7, 8, 9, 11, 12, 13, 14]
    expected = [-1, R["outcome_before_use"], R["no_outcome_yet"],
                R["ambiguous_action_outcome"], R["ambiguous_action_outcome"],
                R["conflicting_outcomes"], R["invalid_use"],
                -1, R["outcome_before_use"], R["outcome_before_use"], R["invalid_use"],
                R["ambiguous_action_outcome"], R["ambiguous_action_outcome"]]
    assert st.reason.tolist() == expected
    assert st.label[[0, 7]].tolist() == [True, False]
    assert st.outcome_status.tolist() == [
        S["used"], S["before_use"], S["ambiguous"], S["conflicting"], S["conflicting"],
        S["used"], S["before_use"], S["no_matching_use"], S["ambiguous"]]


def test_a_memory_kind_the_rule_refuses_makes_the_use_invalid() -> None:
    """A premise whose memory kind breaks the contract's rule (``kind_error`` set) is an
    invalid use: no outcome labels it, and its claim's outcome finds no valid use."""
    entries = _entries([(0, "a1", "p0", "c1", 10), (1, "a2", "p0", "c2", 10)])
    entries["kind_error"] = pd.Categorical([None, "memory_kind='x' is not a kind"])
    outcomes = _outcomes([(None, "c1", 20, True), (None, "c2", 20, True)])
    st = dj.run_join(dj.connect(threads=1), dj.encode(entries, _NO_SIGNALS, outcomes))
    assert st.valid.tolist() == [True, False]
    assert st.reason.tolist() == [-1, R["invalid_use"]]
    assert st.outcome_status.tolist() == [S["used"], S["no_matching_use"]]


# The claim-only stage's two searches: every claim's uses joined to its outcome times (the
# default on small logs), or searched by a sort (few=0), portable or as an ASOF JOIN; and
# both in one join (few=2: the claims with more outcome times sorted).
_SEARCHES = [{}, {"few": 0}, {"few": 0, "asof": True}, {"few": 2}]
_SEARCH_IDS = ["join", "sorted", "asof", "mixed"]


@pytest.mark.parametrize("search", _SEARCHES, ids=_SEARCH_IDS)
def test_example_logs_match_the_oracle(examples_dir: Path, search: dict[str, Any]) -> None:
    """The example logs (as the reader gives them), decided by DuckDB and by the oracle."""
    logs = examples_dir / "logs"
    log, out_df, _ = read_with_outcomes([logs / "decisions.jsonl"], logs / "outcomes.csv",
                                        on_corrupt="raise")
    got = dj.run_join(dj.connect(threads=2), dj.relations(log, out_df), **search)
    e, sg = log.entries, log.signals
    rec = e["rec"].to_numpy()
    t = log.records["t_us"][rec]
    entries = pd.DataFrame({
        "eid": np.arange(len(e)), "rec": rec, "pidx": e["pidx"],
        "action_id": np.asarray(log.record_values("action_id", rec), dtype=object),
        "premise_id": e["premise_id"].astype(object), "claim_id": e["claim_id"].astype(object),
        "t_us": pd.arrays.IntegerArray(t, t == _NAT),
        **{c: e[c] for c in _FEATURES}})
    signals = pd.DataFrame({"sid": np.arange(len(sg)), "rec": sg["rec"],
                            "premise_id": sg["premise_id"].astype(object),
                            "verifier": sg["verifier"].astype(object),
                            "confirmed": sg["confirmed"], "reliability": sg["reliability"]})
    outcomes = pd.DataFrame({"oid": np.arange(len(out_df)),
                             "action_id": out_df["action_id"].astype(object),
                             "claim_id": out_df["claim_id"].astype(object),
                             "o_t": out_df["t_us"], "v": out_df["violated"]})

    def rows(df: pd.DataFrame) -> list[dict[str, object]]:
        # missing ids and times as None (pandas gives NaN or NA); features keep NaN
        df = df.astype(object)
        for c in ("action_id", "premise_id", "claim_id", "verifier", "t_us"):
            if c in df:
                df[c] = df[c].where(df[c].notna(), None)
        return df.to_dict("records")  # type: ignore[return-value]

    want = oracle.join(rows(entries), rows(signals), rows(outcomes))
    assert got.eid.tolist() == want.use_eid
    assert got.reason.tolist() == want.reason
    decided = got.reason == -1
    assert got.label[decided].tolist() == np.asarray(want.label)[decided].tolist()
    assert got.outcome_status.tolist() == want.status
    assert len(got.answers) == len(want.answers) > 0


def test_spark_dialect_is_transpiled() -> None:
    steps = join_statements("spark")
    assert [n for n, _ in steps] == [n for n, _ in join_statements("duckdb")]
    spark = dict(steps)
    # DuckDB's constructs in Spark's spelling
    assert "CAST('Infinity' AS DOUBLE)" in values_ok_expression("spark")
    assert "ISNAN(contradiction_flag)" in values_ok_expression("spark")
    assert values_ok_expression("duckdb") == VALUES_OK
    assert "ASOF" not in spark["next3"] and "ROWS BETWEEN" in spark["next3"]


@pytest.mark.parametrize(("dialect", "asof", "match"), [
    ("postgres", False, "dialect='postgres'"),
    ("spark", True, "ASOF JOIN is DuckDB's only"),
], ids=["unknown-dialect", "asof-on-spark"])
def test_join_statements_refuses(dialect: str, asof: bool, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        join_statements(dialect, asof=asof)


# -- the oracle -------------------------------------------------------------------------------


@st.composite
def _logs(draw: st.DrawFn) -> tuple[list[dict[str, object]], list[dict[str, object]],
                                    list[dict[str, object]]]:
    """Entries, signals and outcomes over small pools of ids, so that keys collide: actions
    logged twice, records without action id, premises without id, repeated premise ids,
    invalid fields, outcomes of every kind before, at and after the uses."""
    entries: list[dict[str, object]] = []
    n_rec = draw(st.integers(1, 7))
    for rec in range(n_rec):
        action = draw(st.sampled_from([None, "a0", "a1", "a2"]))
        t = draw(st.sampled_from([None, 0, 1, 2, 3, 4]))
        for pidx in range(draw(st.integers(1, 3))):
            bad = draw(st.booleans()) and draw(st.booleans())
            entries.append({
                "eid": len(entries), "rec": rec, "pidx": pidx, "action_id": action,
                "premise_id": draw(st.sampled_from([None, "p0", "p1", "p2"])),
                "claim_id": draw(st.sampled_from([None, "c0", "c1", "c2"])), "t_us": t,
                "recency_hours": draw(st.sampled_from(oracle.ODD_FEATURES)) if bad else 2.0,
                "source_trust_score": draw(st.sampled_from(oracle.ODD_FEATURES)) if bad else 0.5,
                "model_confidence": 0.5,
                "contradiction_flag": draw(st.sampled_from([0.0, 1.0, float("nan"), None]))
                if bad else 0.0})
    signals = [{"sid": i, "rec": draw(st.integers(0, n_rec - 1)),
                "premise_id": draw(st.sampled_from([None, "p0", "p1"])),
                "verifier": draw(st.sampled_from(["v", "w"])), "confirmed": draw(st.booleans()),
                "reliability": draw(st.sampled_from([0.9, 0.8, 1.0, 0.5, 0.3, float("nan")]))}
               for i in range(draw(st.integers(0, 5)))]
    outcomes = []
    for oid in range(draw(st.integers(0, 8))):
        action = draw(st.sampled_from([None, "a0", "a1", "a2", "zz"]))
        claim = draw(st.sampled_from(["c0", "c1", "c2"] if action is None
                                     else [None, "c0", "c1", "c2"]))
        outcomes.append({"oid": oid, "action_id": action, "claim_id": claim,
                         "o_t": draw(st.integers(0, 5)), "v": draw(st.booleans())})
    return entries, signals, outcomes


def _frame(rows: list[dict[str, object]], columns: dict[str, str]) -> pd.DataFrame:
    df = pd.DataFrame(rows, columns=list(columns))
    return df.astype(columns) if len(df) else pd.DataFrame(
        {c: pd.Series([], dtype=t) for c, t in columns.items()})


_ENTRY_TYPES = {"eid": "int64", "rec": "int64", "pidx": "int32", "action_id": "object",
                "premise_id": "object", "claim_id": "object", "t_us": "Int64",
                "recency_hours": "float64", "source_trust_score": "float64",
                "model_confidence": "float64", "contradiction_flag": "float64"}
_SIGNAL_TYPES = {"sid": "int64", "rec": "int64", "premise_id": "object", "verifier": "object",
                 "confirmed": "bool", "reliability": "float64"}
_OUTCOME_TYPES = {"oid": "int64", "action_id": "object", "claim_id": "object",
                  "o_t": "int64", "v": "bool"}


@pytest.fixture(scope="module")
def con() -> duckdb.DuckDBPyConnection:
    """One DuckDB connection for the generated cases (each replaces the last one's tables)."""
    return dj.connect(threads=2)


@pytest.mark.slow
@pytest.mark.parametrize("search", _SEARCHES, ids=_SEARCH_IDS)
@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=_logs())
def test_sql_join_equals_the_oracle(con: duckdb.DuckDBPyConnection, search: dict[str, Any],
                                    case: tuple[list[dict[str, object]], ...]) -> None:
    entries, signals, outcomes = case
    want = oracle.join(entries, signals, outcomes)
    got = dj.run_join(con, dj.encode(_frame(entries, _ENTRY_TYPES),
                                     _frame(signals, _SIGNAL_TYPES),
                                     _frame(outcomes, _OUTCOME_TYPES)), **search)
    assert got.eid.tolist() == want.use_eid
    assert got.reason.tolist() == want.reason
    decided = got.reason == -1
    assert got.label[decided].tolist() == np.asarray(want.label)[decided].tolist()
    assert got.outcome_status.tolist() == want.status
    a = got.answers
    eids = got.eid[a["uid"].to_numpy()]
    assert {(int(e), v, bool(c), float(r)): int(n) for e, v, c, r, n in zip(
        eids, a["verifier"], a["confirmed"], a["reliability"], a["n"], strict=True)
    } == want.answers



def test_values_ok_is_the_oracles_rule_across_windows(monkeypatch: pytest.MonkeyPatch) -> None:
    # windows of 7 rows: the verdicts are set out in order across 686 window edges
    monkeypatch.setattr(dj, "CHECK_ROWS", 7)
    rows = oracle.odd_values()
    df = pd.DataFrame(rows).astype({c: "float64" for c in CLAIM_FEATURES})
    got = dj.values_ok(len(df), lambda c, lo, hi: df[c].to_numpy()[lo:hi],
                       df["kind_bad"].to_numpy())
    want = [oracle._fields_ok({**r, "claim_id": "c", "t_us": 0}) and not r["kind_bad"]
            for r in rows]
    assert got.tolist() == want
    assert 0 < sum(want) < len(want)


@pytest.mark.parametrize(("results", "want"), [
    (("r",), {"t3": ["src", "t1"], "r": ["t2", "t3"], "t5": ["t1_used"]}),
    (("r", "w"), {"t3": ["t1"], "r": ["t2"], "t5": ["t1_used"]}),
], ids=["tables-results", "a-view-among-the-results"])
def test_a_stored_step_is_released_after_its_last_reader(
        monkeypatch: pytest.MonkeyPatch, results: tuple[str, ...],
        want: dict[str, list[str]]) -> None:
    # hand-worked: v (a view) reads t2 and is read by r, so t2 lives until r; w (a view)
    # kept as a result keeps t3 and the input src it reads; t1_used is not t1
    monkeypatch.setattr(dj, "VIEWS", frozenset({"v", "w"}))
    monkeypatch.setattr(dj, "RESULTS", results)
    steps = [("t1", "SELECT x FROM src"), ("t1_used", "SELECT 2 AS x"),
             ("t2", "SELECT * FROM t1"), ("v", "SELECT * FROM t2"),
             ("t3", "SELECT * FROM t1 JOIN src USING (x)"),
             ("r", "SELECT * FROM t3 JOIN v USING (x)"), ("w", "SELECT * FROM t3, src"),
             ("t5", "SELECT * FROM t1_used")]
    got = {n: sorted(r) for n, r in dj.released_after(steps, inputs=["src"]).items() if r}
    assert got == want
