"""mem0 and Graphiti/Zep adapters: the example exports, each rule, each file form, ingest."""

from __future__ import annotations

import json
import sqlite3
from datetime import datetime
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from repo_paths import REPO_ROOT

from amv_calib import cli
from amv_calib.claims._adapters import (
    DEFAULT_FEATURES,
    _columns,
    graphiti_edges_to_claims,
    load_graphiti_edges,
    load_mem0_history,
    load_uses_table,
    mem0_history_to_claims,
)
from amv_calib.claims._ingest import load_claims
from amv_calib.contract import encode_record
from amv_calib.exceptions import DataContractError, MissingColumnsError
from amv_calib.settings import ADAPTERS

EXAMPLES = REPO_ROOT / "data" / "examples"
MEM0 = EXAMPLES / "mem0"
GRAPHITI = EXAMPLES / "graphiti"

#: mem0's SQLite history table (mem0/memory/storage.py, SQLiteManager).
MEM0_COLUMNS = ["id", "memory_id", "old_memory", "new_memory", "event", "created_at",
                "updated_at", "is_deleted", "actor_id", "role"]
#: graphiti_core.edges.EntityEdge fields (Edge base plus EntityEdge).
EDGE_FIELDS = ["uuid", "group_id", "source_node_uuid", "target_node_uuid", "name", "fact",
               "fact_embedding", "episodes", "created_at", "expired_at", "valid_at",
               "invalid_at", "reference_time", "attributes"]

ALICE = "3c9e7a52-1f4b-4d8e-a6b1-7e2f9d0c4b11"


def _hours(a: str, b: str) -> float:
    return (datetime.fromisoformat(a) - datetime.fromisoformat(b)).total_seconds() / 3600.0


# ---------------------------------------------------------------------------------------------
# The example files match the public schemas
# ---------------------------------------------------------------------------------------------
def test_examples_follow_the_public_schemas() -> None:
    history = json.loads((MEM0 / "history.json").read_text(encoding="utf-8"))
    assert all(list(r) == MEM0_COLUMNS for r in history)
    assert {r["event"] for r in history} == {"ADD", "UPDATE", "DELETE"}
    edges = json.loads((GRAPHITI / "edges.json").read_text(encoding="utf-8"))
    assert all(list(e) == EDGE_FIELDS for e in edges)
    lines = (EXAMPLES / "decisions.jsonl").read_bytes().split(b"\n")
    assert not (EXAMPLES / "decisions.jsonl").read_bytes().endswith(b"\n")  # the torn line
    parsed = [json.loads(line) for line in lines[:-1]]
    assert any("actionId" in r for r in parsed) and any("action_id" in r for r in parsed)
    with pytest.raises(ValueError):
        json.loads(lines[-1])
    assert pd.read_csv(EXAMPLES / "outcomes.csv").columns.tolist()[:4] == [
        "claim_id", "action_id", "time", "violated"]


# ---------------------------------------------------------------------------------------------
# mem0
# ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def mem0_example() -> tuple[pd.DataFrame, Any]:
    return mem0_history_to_claims(MEM0 / "history.json", uses=MEM0 / "uses.csv")


def test_mem0_example_labels(mem0_example: tuple[pd.DataFrame, Any]) -> None:
    claims, rep = mem0_example
    got = dict(zip(claims["action_id"], claims["violated"], strict=True))
    # tx-7001: before the IBAN update; tx-7002: read the September version (recency 1704 h)
    # after the update of 11-10; tx-7003: read the current version; po-7101: the address was
    # deleted before the use; crm-7201: the only UPDATE kept the same text; po-7102: changed
    # only after the use.
    assert got == {"tx-7001": False, "tx-7002": True, "tx-7003": False, "po-7101": True,
                   "crm-7201": False, "po-7102": False}
    assert rep.unjoined == {"invalid_use": 1, "unknown_claim": 1, "use_before_creation": 1,
                            "no_outcome_yet": 0}
    assert dict(zip(rep.details["action_id"], rep.details["reason"], strict=True)) == {
        "po-7103": "use_before_creation", "tx-7004": "unknown_claim", "tx-7005": "invalid_use"}
    assert rep.records_read == rep.records_valid == 8 and rep.uses_read == 9
    by = claims.set_index("action_id")
    add = "2026-09-01T08:12:44.101512-07:00"
    update = "2026-11-10T09:30:05.882104-08:00"
    assert by.at["tx-7001", "recency_hours"] == pytest.approx(_hours("2026-11-01T12:00:00+00:00",
                                                                     add))
    assert by.at["tx-7003", "recency_hours"] == pytest.approx(
        _hours("2026-11-12T09:05:00+00:00", update))
    assert by.at["tx-7002", "recency_hours"] == 1704.0
    assert by.at["tx-7002", "statement"].endswith("DE89 3704 0044 0532 0130 00")
    assert by.at["tx-7003", "statement"].endswith("DE02 1203 0000 0000 2020 51")
    assert (claims["defaulted_features"] ==
            "source_trust_score,model_confidence,contradiction_flag").all()
    assert (claims["source_trust_score"] == DEFAULT_FEATURES["source_trust_score"]).all()
    assert (claims["source"] == "mem0").all()


def test_mem0_output_is_a_valid_claims_table(mem0_example: tuple[pd.DataFrame, Any]) -> None:
    claims, _ = mem0_example
    accepted, rejects = load_claims(claims)
    assert rejects.empty and len(accepted) == len(claims)
    assert accepted["defaulted_features"].iloc[0].startswith("source_trust_score")


@pytest.mark.parametrize("form", ["jsonl", "csv", "results-object", "sqlite", "frame"],
                         ids=["jsonl", "csv", "results-object", "sqlite", "frame"])
def test_mem0_export_forms_agree(tmp_path: Path, form: str,
                                 mem0_example: tuple[pd.DataFrame, Any]) -> None:
    history = json.loads((MEM0 / "history.json").read_text(encoding="utf-8"))
    source: Any
    if form == "jsonl":
        source = tmp_path / "h.jsonl"
        source.write_text("".join(json.dumps(r) + "\n" for r in history), encoding="utf-8")
    elif form == "csv":
        source = tmp_path / "h.csv"
        pd.DataFrame(history).to_csv(source, index=False)
    elif form == "results-object":
        source = tmp_path / "h.json"
        source.write_text(json.dumps({"results": history}), encoding="utf-8")
    elif form == "sqlite":
        source = tmp_path / "history.db"
        with sqlite3.connect(source) as conn:
            conn.execute("CREATE TABLE history (id TEXT PRIMARY KEY, memory_id TEXT, "
                         "old_memory TEXT, new_memory TEXT, event TEXT, created_at DATETIME, "
                         "updated_at DATETIME, is_deleted INTEGER, actor_id TEXT, role TEXT)")
            conn.executemany("INSERT INTO history VALUES (?,?,?,?,?,?,?,?,?,?)",
                             [tuple(int(v) if isinstance(v, bool) else v
                                    for v in r.values()) for r in history])
        conn.close()
    else:
        source = pd.DataFrame(history)
    claims, rep = mem0_history_to_claims(source, uses=MEM0 / "uses.csv")
    pd.testing.assert_frame_equal(claims, mem0_example[0])
    assert rep.to_dict() == mem0_example[1].to_dict()


def _history(*rows: tuple[str, str, str | None, str | None, str | None]) -> pd.DataFrame:
    """(memory_id, event, old, new, time) -> mem0 rows (time is created_at for ADD,
    updated_at otherwise)."""
    out = []
    for mid, event, old, new, t in rows:
        out.append({"memory_id": mid, "event": event, "old_memory": old, "new_memory": new,
                    "created_at": t if event == "ADD" else "2026-01-01T00:00:00Z",
                    "updated_at": None if event == "ADD" else t})
    return pd.DataFrame(out)


def _uses(*rows: tuple[str, str]) -> pd.DataFrame:
    return pd.DataFrame([{"memory_id": m, "time": t} for m, t in rows])


def test_mem0_correction_window_and_effective_at() -> None:
    h = _history(("m", "ADD", None, "a", "2026-01-01T00:00:00Z"),
                 ("m", "UPDATE", "a", "b", "2026-01-02T02:00:00Z"))
    u = _uses(("m", "2026-01-02T00:00:00Z"))
    c, _ = mem0_history_to_claims(h, uses=u)
    assert c["violated"].tolist() == [False]
    c, _ = mem0_history_to_claims(h, uses=u, correction_window_hours=3)
    assert c["violated"].tolist() == [True]
    c, _ = mem0_history_to_claims(h, uses=u, correction_window_hours=1)
    assert c["violated"].tolist() == [False]
    h["effective_at"] = [None, "2026-01-01T12:00:00Z"]
    c, _ = mem0_history_to_claims(h, uses=u)
    assert c["violated"].tolist() == [True]


def test_mem0_followup_censoring_and_deleted_memories() -> None:
    h = _history(("m", "ADD", None, "a", "2026-01-01T00:00:00Z"),
                 ("n", "ADD", None, "x", "2026-01-01T00:00:00Z"),
                 ("n", "DELETE", "x", None, "2026-01-03T00:00:00Z"))
    u = _uses(("m", "2026-01-09T00:00:00Z"), ("m", "2026-01-05T00:00:00Z"),
              ("n", "2026-01-09T12:00:00Z"))
    c, rep = mem0_history_to_claims(h, uses=u, as_of="2026-01-10T00:00:00Z", followup_hours=48)
    # the late m use is censored, the violated n use is not (a deletion before it)
    assert rep.unjoined["no_outcome_yet"] == 1
    assert list(zip(c["claim_id"], c["violated"], strict=True)) == [("m", False), ("n", True)]
    assert rep.as_of == "2026-01-10T00:00:00+00:00"


def test_mem0_invalid_history_rows_are_counted() -> None:
    h = pd.DataFrame([
        {"memory_id": "m", "event": "ADD", "created_at": "2026-01-01T00:00:00Z"},
        {"memory_id": None, "event": "ADD", "created_at": "2026-01-01T00:00:00Z"},
        {"memory_id": "m", "event": "MERGE", "created_at": "2026-01-01T00:00:00Z"},
        {"memory_id": "m", "event": "update", "created_at": None, "updated_at": "later"},
    ])
    events, invalid = load_mem0_history(h)
    assert events["event"].tolist() == ["ADD"]
    assert invalid["reason"].tolist() == ["memory_id missing",
                                          "event='MERGE' is not ADD, UPDATE or DELETE",
                                          "no parseable created_at / updated_at"]
    _, rep = mem0_history_to_claims(h, uses=_uses(("m", "2026-02-01T00:00:00Z")))
    assert rep.records_read == 4 and rep.records_valid == 1
    with pytest.raises(MissingColumnsError, match="event"):
        load_mem0_history(pd.DataFrame({"memory_id": ["m"], "created_at": ["2026-01-01"]}))


def test_mem0_legacy_history_schema() -> None:
    # mem0's first history table: prev_value, new_value, timestamp
    h = pd.DataFrame([
        {"id": "1", "memory_id": "m", "prev_value": None, "new_value": "a", "event": "ADD",
         "timestamp": "2026-01-01T00:00:00Z", "is_deleted": 0},
        {"id": "2", "memory_id": "m", "prev_value": "a", "new_value": None, "event": "DELETE",
         "timestamp": "2026-01-03T00:00:00Z", "is_deleted": 1},
    ])
    c, _ = mem0_history_to_claims(h, uses=_uses(("m", "2026-01-02T00:00:00Z"),
                                                 ("m", "2026-01-04T00:00:00Z")))
    assert c["violated"].tolist() == [False, True]


def test_mem0_with_decision_log_features(tmp_path: Path) -> None:
    log = tmp_path / "decisions.jsonl"
    rec = {"time": "2026-11-12T09:00:00Z", "action_id": "tx", "premises": [
        {"id": "p1", "claim_id": ALICE, "recency_hours": 1704.0, "source_trust_score": 0.9,
         "model_confidence": 0.8, "contradiction_flag": True, "p": 0.2}]}
    log.write_bytes(encode_record(rec))
    c, rep = mem0_history_to_claims(MEM0 / "history.json", decisions=log)
    assert c[["source_trust_score", "model_confidence", "contradiction_flag", "violated",
              "defaulted_features"]].values.tolist() == [[0.9, 0.8, True, True, ""]]
    assert rep.defaulted == {"source_trust_score": 0, "model_confidence": 0,
                             "contradiction_flag": 0}


def test_mem0_needs_uses() -> None:
    with pytest.raises(DataContractError, match="pass the uses"):
        mem0_history_to_claims(MEM0 / "history.json")


# ---------------------------------------------------------------------------------------------
# Graphiti / Zep
# ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def graphiti_example() -> tuple[pd.DataFrame, Any]:
    return graphiti_edges_to_claims(GRAPHITI / "edges.json",
                                    decisions=GRAPHITI / "decisions.jsonl")


def test_graphiti_example_labels(graphiti_example: tuple[pd.DataFrame, Any]) -> None:
    claims, rep = graphiti_example
    got = dict(zip(claims["action_id"], claims["violated"], strict=True))
    # po-8001 before Alice left Acme (invalid_at 10-31); po-8002 after; infra-8101 after the
    # cluster was upgraded (invalid_at 11-15); inv-8201: still valid
    assert got == {"po-8001": False, "po-8002": True, "infra-8101": True, "inv-8201": False}
    assert rep.unjoined["use_before_creation"] == 1  # po-8003, before the Globex edge existed
    assert (claims["defaulted_features"] == "").all()
    assert claims.set_index("action_id").at["infra-8101", "statement"] == (
        "Cluster prod-eu runs Kubernetes 1.29")
    accepted, rejects = load_claims(claims)
    assert rejects.empty and len(accepted) == 4


def test_graphiti_rules_with_a_uses_table() -> None:
    acme = "5b1c9e0a-7d3f-4e2b-9a61-0c8d2f4e6a10"
    globex = "8d2e0f1a-3b4c-4d5e-8f60-7a8b9c0d1e20"
    uses = pd.DataFrame({"uuid": [acme, acme, acme, globex],
                         "time": ["2026-10-20T00:00:00Z", "2026-11-01T00:00:00Z",
                                  "2026-11-03T00:00:00Z", "2026-11-02T09:00:00Z"]})
    c, rep = graphiti_edges_to_claims(GRAPHITI / "edges.json", uses=uses)
    assert c["violated"].tolist() == [False, True, True, False]
    # expired (superseded by the Globex edge) at 11-02 08:00: only the 11-03 use saw it
    assert c["contradiction_flag"].tolist() == [False, False, True, False]
    assert (c["defaulted_features"] == "source_trust_score,model_confidence").all()
    assert c["recency_hours"].iloc[0] == pytest.approx(
        _hours("2026-10-20T00:00:00+00:00", "2026-06-01T09:15:22.418+00:00"))
    assert rep.defaulted == {"source_trust_score": 4, "model_confidence": 4,
                             "contradiction_flag": 0}


def test_graphiti_fact_not_yet_valid_is_violated() -> None:
    edges = [{"uuid": "e", "created_at": "2026-01-01T00:00:00Z",
              "valid_at": "2026-02-01T00:00:00Z", "invalid_at": None, "fact": "f"}]
    c, _ = graphiti_edges_to_claims(edges, uses=pd.DataFrame({
        "uuid": ["e", "e"], "time": ["2026-01-15T00:00:00Z", "2026-02-15T00:00:00Z"]}))
    assert c["violated"].tolist() == [True, False]


def test_graphiti_invalid_edges(tmp_path: Path) -> None:
    edges = [
        {"uuid": "a", "created_at": "2026-01-01T00:00:00Z"},
        {"uuid": "a", "created_at": "2026-01-02T00:00:00Z"},
        {"uuid": None, "created_at": "2026-01-01T00:00:00Z"},
        {"uuid": "b", "created_at": "2026-01-01T00:00:00Z", "invalid_at": "soon"},
        {"uuid": "c", "created_at": None},
    ]
    table, invalid = load_graphiti_edges(edges)
    assert table["uuid"].tolist() == ["a"]
    assert invalid["reason"].tolist() == ["uuid 'a' repeats an earlier edge", "uuid missing",
                                          "invalid_at='soon' is not a time",
                                          "created_at=None is not a time"]
    path = tmp_path / "edges.json"
    path.write_text(json.dumps({"edges": edges}), encoding="utf-8")
    _, rep = graphiti_edges_to_claims(path, uses=pd.DataFrame({"uuid": ["a"],
                                                               "time": ["2026-03-01"]}))
    assert rep.records_read == 5 and rep.records_valid == 1
    assert sum(rep.records_invalid.values()) == 4


@pytest.mark.parametrize("form", ["jsonl", "csv"], ids=["jsonl", "csv"])
def test_graphiti_export_forms_agree(tmp_path: Path, form: str,
                                     graphiti_example: tuple[pd.DataFrame, Any]) -> None:
    edges = json.loads((GRAPHITI / "edges.json").read_text(encoding="utf-8"))
    path = tmp_path / f"edges.{form}"
    if form == "jsonl":
        path.write_text("".join(json.dumps(e) + "\n" for e in edges), encoding="utf-8")
    else:
        pd.DataFrame(edges).to_csv(path, index=False)
    claims, _ = graphiti_edges_to_claims(path, decisions=GRAPHITI / "decisions.jsonl")
    pd.testing.assert_frame_equal(claims, graphiti_example[0])


# ---------------------------------------------------------------------------------------------
# amv-calib ingest --adapter
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("adapter", "path", "accepted"),
                         [("mem0", MEM0 / "history.json", 6), ("graphiti", GRAPHITI, 4)],
                         ids=["mem0-file", "graphiti-folder"])
def test_ingest_adapter(tmp_path: Path, capsys: pytest.CaptureFixture[str], adapter: str,
                        path: Path, accepted: int) -> None:
    assert adapter in ADAPTERS
    code = cli.main(["-q", "ingest", "--adapter", adapter, str(path), "--out", str(tmp_path),
                      "--json"])
    assert code == 0
    summary = json.loads(capsys.readouterr().out)
    assert (summary["read"], summary["accepted"], summary["rejected"]) == (accepted, accepted, 0)
    assert len(pd.read_parquet(tmp_path / "claims.parquet")) == accepted


def test_ingest_adapter_without_uses(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    export = tmp_path / "history.json"
    export.write_text((MEM0 / "history.json").read_text(encoding="utf-8"), encoding="utf-8")
    code = cli.main(["ingest", "--adapter", "mem0", str(tmp_path), "--out", str(tmp_path / "o")])
    assert code == 2
    assert "uses.csv" in capsys.readouterr().err


def test_premises_without_features_take_store_values_and_defaults(tmp_path: Path) -> None:
    # a premise logged with a probability only (no claim features), and one with a bad score
    log = tmp_path / "decisions.jsonl"
    log.write_bytes(
        encode_record({"time": "2026-11-12T09:05:00Z", "action_id": "tx", "premises": [
            {"id": "p1", "claim_id": ALICE, "recency_hours": None, "source_trust_score": None,
             "model_confidence": None, "contradiction_flag": None, "p": 0.2}]})
        + encode_record({"time": "2026-11-12T09:06:00Z", "action_id": "ty", "premises": [
            {"id": "p1", "claim_id": ALICE, "recency_hours": 3.0, "source_trust_score": 1.5,
             "model_confidence": 0.5, "contradiction_flag": False, "p": 0.2}]}))
    c, rep = mem0_history_to_claims(MEM0 / "history.json", decisions=log)
    assert c["defaulted_features"].tolist() == [
        "source_trust_score,model_confidence,contradiction_flag"]
    assert c["recency_hours"].iloc[0] == pytest.approx(
        _hours("2026-11-12T09:05:00+00:00", "2026-11-10T09:30:05.882104-08:00"))
    assert rep.unjoined["invalid_use"] == 1
    assert rep.details["detail"].tolist() == ["source_trust_score=1.5 outside [0, 1]"]


# ---------------------------------------------------------------------------------------------
# Shared by both stores
# ---------------------------------------------------------------------------------------------
def test_columns_finds_aliases_and_names_missing_alternatives() -> None:
    table = pd.DataFrame({"memoryId": ["m"], "timestamp": ["2026-01-01"]})
    col, missing = _columns(table, {"memory_id": ("memory_id", "memoryId"),
                                    "timestamp": ("timestamp",), "event": ("event",)},
                            {"memory_id": ("memory_id",), "event": ("event",),
                             "created_at or updated_at": ("created_at", "timestamp")})
    assert missing == ["event"]
    assert col("memory_id").tolist() == ["m"]
    assert col("event").tolist() == [None]


@pytest.mark.parametrize(("load", "table", "message"), [
    (load_mem0_history, {"memory_id": ["m"], "event": ["ADD"]},
     r"mem0 history lacks column\(s\) \['created_at or updated_at'\]; found "
     r"\['memory_id', 'event'\]"),
    (load_graphiti_edges, {"fact": ["f"]},
     r"Graphiti edges lack column\(s\) \['uuid', 'created_at'\]; found \['fact'\]"),
    (load_uses_table, {"uuid": ["e"]},
     r"uses table lacks column\(s\) \['time'\] \(accepted names: time: \['time', "),
])
def test_loaders_name_missing_columns(load: Any, table: dict[str, list[str]],
                                      message: str) -> None:
    with pytest.raises(MissingColumnsError, match=message):
        load(pd.DataFrame(table))
    load(pd.DataFrame({c: [] for c in table}))  # an empty table needs no columns


def test_as_of_defaults_to_the_latest_time_of_records_and_uses() -> None:
    h = _history(("m", "ADD", None, "a", "2026-01-01T00:00:00Z"),
                 ("m", "UPDATE", "a", "b", "2026-01-05T00:00:00Z"))
    _, rep = mem0_history_to_claims(h, uses=_uses(("m", "2026-01-03T00:00:00Z"), ("m", "x")))
    assert rep.as_of == "2026-01-05T00:00:00+00:00"
    _, rep = mem0_history_to_claims(h, uses=_uses(("m", "2026-01-07T00:00:00Z")))
    assert rep.as_of == "2026-01-07T00:00:00+00:00"
    edges = [{"uuid": "e", "created_at": "2026-01-01T00:00:00Z",
              "expired_at": "2026-01-09T00:00:00Z"}]
    uses = pd.DataFrame({"uuid": ["e"], "time": ["2026-01-02T00:00:00Z"]})
    _, rep = graphiti_edges_to_claims(edges, uses=uses)
    assert rep.as_of == "2026-01-09T00:00:00+00:00"
    _, rep = graphiti_edges_to_claims([], uses=pd.DataFrame({"uuid": ["e"], "time": ["x"]}))
    assert rep.as_of is None and rep.unjoined["invalid_use"] == 1


def test_graphiti_derives_contradiction_whatever_the_defaults_say() -> None:
    edges = [{"uuid": "e", "created_at": "2026-01-01T00:00:00Z"}]
    uses = pd.DataFrame({"uuid": ["e"], "time": ["2026-01-02T00:00:00Z"]})
    c, rep = graphiti_edges_to_claims(edges, uses=uses,
                                      defaults={"contradiction_flag": True})
    assert c["contradiction_flag"].tolist() == [False]
    assert c["defaulted_features"].tolist() == [""]
    assert rep.defaulted == {"contradiction_flag": 0}
    c, _ = mem0_history_to_claims(_history(("e", "ADD", None, "a", "2026-01-01T00:00:00Z")),
                                  uses=_uses(("e", "2026-01-02T00:00:00Z")),
                                  defaults={"contradiction_flag": True})
    assert c["contradiction_flag"].tolist() == [True]
    assert c["defaulted_features"].tolist() == ["contradiction_flag"]


def test_mem0_kinds_from_metadata_category_or_categories() -> None:
    h = _history(("m", "ADD", None, "a", "2026-01-01T00:00:00Z"),
                 ("n", "ADD", None, "x", "2026-01-01T00:00:00Z"),
                 ("q", "ADD", None, "y", "2026-01-01T00:00:00Z"),
                 ("r", "ADD", None, "z", "2026-01-01T00:00:00Z"))
    h["metadata"] = [{"memory_kind": "preference"}, '{"kind": "deployment"}', None, None]
    h["category"] = ["ignored", None, None, None]
    h["categories"] = [None, None, ["event", "work"], None]
    u = _uses(("m", "2026-01-02T00:00:00Z"), ("n", "2026-01-02T00:00:00Z"),
              ("q", "2026-01-02T00:00:00Z"), ("r", "2026-01-02T00:00:00Z"))
    c, _ = mem0_history_to_claims(h, uses=u)
    assert c["memory_kind"].tolist()[:3] == ["preference", "deployment", "event"]
    assert pd.isna(c["memory_kind"].iloc[3])


def test_mem0_without_kinds_has_no_kind_column() -> None:
    h = _history(("m", "ADD", None, "a", "2026-01-01T00:00:00Z"))
    c, _ = mem0_history_to_claims(h, uses=_uses(("m", "2026-01-02T00:00:00Z")))
    assert "memory_kind" not in c.columns
