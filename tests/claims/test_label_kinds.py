"""``label`` carries a premise's memory kind from the decision log into the claim rows: its own,
else its claim's, by the contract's rule; a kind the rule refuses makes the use
``invalid_use``; a log without kinds gives the files it gave before kinds were read."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from amv_calib.claims import _join as join_module
from amv_calib.claims._ingest import load_claims
from amv_calib.claims._join import join_logs, label_claims
from amv_calib.claims._outputs import write_claims_table, write_label_table
from amv_calib.gate import CandidateAction, Gate, Premise

_FEATURES = {"recency_hours": 24.0, "source_trust_score": 0.8, "model_confidence": 0.9,
             "contradiction_flag": False, "p": 0.1}


def _iso(minute: int) -> str:
    return f"2026-12-01T00:{minute:02d}:00Z"


def _rec(action: str, minute: int, *premises: dict[str, Any]) -> dict[str, Any]:
    return {"time": _iso(minute), "action_id": action, "tool_name": "t",
            "premises": list(premises)}


def _prem(pid: str, claim: str, **kind: Any) -> dict[str, Any]:
    return {"id": pid, "claim_id": claim, **_FEATURES, **kind}


def _write(path: Path, records: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records),
                    encoding="utf-8")
    return path


def _outcomes(*claims: str) -> pd.DataFrame:
    return pd.DataFrame({"claim_id": list(claims), "action_id": [None] * len(claims),
                         "time": [_iso(59)] * len(claims),
                         "violated": [i % 2 == 0 for i in range(len(claims))]})


def _label_files(records: list[dict[str, Any]], out: pd.DataFrame, folder: Path, ending: str,
                 monkeypatch: pytest.MonkeyPatch, columnar: bool = True) -> dict[str, bytes]:
    """The files ``label --out claims.ENDING`` writes in ``folder`` from a log of
    ``records`` written there (relative paths: two folders' files compare byte for byte)."""
    folder.mkdir(parents=True, exist_ok=True)
    monkeypatch.chdir(folder)
    _write(Path("d.jsonl"), records)
    write_label_table(join_logs("d.jsonl", out, columnar=columnar), Path(f"claims.{ending}"),
                      ["outcomes"])
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.name != "d.jsonl"}


#: (premise, the kind its claim row carries, or the invalid_use detail)
_CASES: list[tuple[dict[str, Any], tuple[str, str | None]]] = [
    (_prem("p0", "c0", memory_kind="preference"), ("kind", "preference")),
    (_prem("p0", "c1", memoryKind="event"), ("kind", "event")),
    ({"id": "p0", "p": 0.2, "claim": {"id": "c2", **_FEATURES, "memoryKind": "fact"}},
     ("kind", "fact")),
    (_prem("p0", "c3"), ("kind", None)),
    (_prem("p0", "c4", memory_kind=None), ("kind", None)),
    (_prem("p0", "c5", memory_kind="\u4e8b\u4ef6"), ("kind", "\u4e8b\u4ef6")),
    (_prem("p0", "c6", memory_kind=" event"),
     ("invalid", "memory_kind=' event' begins or ends with whitespace")),
    (_prem("p0", "c7", memory_kind=3),
     ("invalid", "memory_kind=3 is not a string (a memory kind is a name such as "
                 "'preference')")),
    ({"id": "p0", "claim": {"id": "c8", **_FEATURES, "memory_kind": "a",
                            "memoryKind": "b"}},
     ("invalid", "claim.memory_kind='a' and memoryKind='b' differ (give one)")),
    (_prem("p0", "c9", memory_kind="k" * 65),
     ("invalid", f"memory_kind={'k' * 40!r}... has 65 characters, more than 64")),
]


@pytest.mark.parametrize("columnar", [True, False], ids=["columnar", "line-parser"])
def test_kinds_reach_the_claim_rows_and_refused_kinds_are_invalid_uses(
        tmp_path: Path, columnar: bool) -> None:
    log = _write(tmp_path / "d.jsonl",
                 [_rec(f"a{i}", i, prem) for i, (prem, _) in enumerate(_CASES)])
    claims, report = label_claims(log, _outcomes(*(f"c{i}" for i in range(len(_CASES)))),
                                  columnar=columnar)
    cols = claims.columns.tolist()
    assert cols[cols.index("contradiction_flag") + 1] == "memory_kind"
    got = dict(zip(claims["claim_id"], claims["memory_kind"].astype(object), strict=True))
    want_kinds = {f"c{i}": v for i, (_, (tag, v)) in enumerate(_CASES) if tag == "kind"}
    assert {c: None if pd.isna(k) else k for c, k in got.items()} == want_kinds
    unj = report.unjoined_uses
    assert (unj["reason"] == "invalid_use").all()
    want_invalid = {f"c{i}": v for i, (_, (tag, v)) in enumerate(_CASES) if tag == "invalid"}
    assert dict(zip(unj["claim_id"], unj["detail"].astype(str), strict=True)) == want_invalid
    assert report.unjoined["invalid_use"] == len(want_invalid)


@pytest.mark.parametrize("ending", ["parquet", "csv", "jsonl"])
def test_the_line_parser_and_the_columnar_read_write_the_same_bytes(
        tmp_path: Path, ending: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The cases whose kinds are strings or null: the compiled extraction reads the log
    (the line parser is not called), the line parser reads it alike."""
    import amv_calib.claims._logread as logread

    def textual(prem: dict[str, Any]) -> bool:
        kinds = [v for d in (prem, prem.get("claim", {})) for k, v in d.items()
                 if k in ("memory_kind", "memoryKind")]
        return all(v is None or isinstance(v, str) for v in kinds)

    records = [_rec(f"a{i}", i, prem) for i, (prem, _) in enumerate(_CASES) if textual(prem)]
    assert len(records) == len(_CASES) - 1
    out = _outcomes(*(f"c{i}" for i in range(len(_CASES))))
    slow = _label_files(records, out, tmp_path / "slow", ending, monkeypatch, columnar=False)

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the line parser was called")

    monkeypatch.setattr(logread, "_parse_lines", refuse)
    fast = _label_files(records, out, tmp_path / "fast", ending, monkeypatch)
    assert len(fast) == 3 and fast == slow
    assert b"preference" in fast[f"claims.{ending}"]


def test_a_spilled_read_carries_the_kinds(tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    log = _write(tmp_path / "d.jsonl",
                 [_rec(f"a{i}", i, prem) for i, (prem, _) in enumerate(_CASES)])
    out = _outcomes(*(f"c{i}" for i in range(len(_CASES))))
    whole, _ = label_claims(log, out)
    monkeypatch.setattr(join_module, "SPILL_BYTES", 1)
    joined = join_logs(log, out)
    assert joined.spilled is not None
    pd.testing.assert_frame_equal(joined.tables()[0], whole)


def test_the_claims_table_ingests_with_its_kinds(tmp_path: Path) -> None:
    log = _write(tmp_path / "d.jsonl",
                 [_rec(f"a{i}", i, prem) for i, (prem, _) in enumerate(_CASES)])
    claims, _ = label_claims(log, _outcomes(*(f"c{i}" for i in range(len(_CASES)))))
    want = claims["memory_kind"].astype(object).where(claims["memory_kind"].notna(), None)
    for ending in ("parquet", "csv", "jsonl"):
        path = tmp_path / f"claims.{ending}"
        write_claims_table(claims, path)
        table, rejects = load_claims(path)
        assert len(rejects) == 0
        back = table["memory_kind"].astype(object)
        assert back.where(back.notna(), None).tolist() == want.tolist(), ending


@pytest.mark.parametrize("ending", ["parquet", "csv", "jsonl"])
def test_a_log_without_kinds_gives_the_files_it_gave(
        tmp_path: Path, ending: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """No kind given (no field, or null in the premise and in its claim): no ``memory_kind``
    column, and the same bytes as the log without the fields."""
    def records(kinds: bool) -> list[dict[str, Any]]:
        extra = {"memory_kind": None, "memoryKind": None} if kinds else {}
        return [_rec("a0", 0, _prem("p0", "c0", **extra), _prem("p1", "c1", **extra)),
                _rec("a1", 1, {"id": "p0", "claim": {"id": "c2", **_FEATURES, **extra}})]

    out = _outcomes("c0", "c1", "c2")
    claims, _ = label_claims(_write(tmp_path / "nulls.jsonl", records(True)), out)
    assert "memory_kind" not in claims.columns
    plain = _label_files(records(False), out, tmp_path / "plain", ending, monkeypatch)
    nulls = _label_files(records(True), out, tmp_path / "nulls", ending, monkeypatch)
    assert len(plain) == 3 and plain == nulls
    assert b"memory_kind" not in plain[f"claims.{ending}"]


def test_the_gate_s_kinds_come_back_from_its_log(tmp_path: Path) -> None:
    """The gate logs the kind it was given; label reads it back for each premise."""
    from amv_calib.contract import seed_prior_calibrator

    log = tmp_path / "decisions.jsonl"
    gate = Gate(calibrator=seed_prior_calibrator(), decision_log=log,
                artifact_name="seed-prior", artifact_version="0")
    kinds = ["preference", None, "event", "\u4e8b\u4ef6"]
    rng = np.random.default_rng(1)
    for a, kind in enumerate(kinds):
        data: dict[str, Any] = {"id": "p1", "claimId": f"c{a}", "recencyHours": 10.0,
                                "sourceTrustScore": 0.9, "modelConfidence": 0.9,
                                "contradictionFlag": False}
        if kind is not None:
            data["memoryKind"] = kind
        action = CandidateAction(action_id=f"a{a}", tool_name="t",
                                 impact_cost_theta=float(rng.choice([1.0, 2.0])),
                                 abstention_cost_kappa=3.0,
                                 premises=(Premise.from_dict(data),))
        gate.run(action, [], lambda v, act: {})
    claims, report = label_claims(log, pd.DataFrame({
        "claim_id": [f"c{a}" for a in range(len(kinds))], "action_id": [None] * len(kinds),
        "time": ["2100-01-01T00:00:00Z"] * len(kinds), "violated": [False] * len(kinds)}))
    assert report.unjoined["invalid_use"] == 0
    got = claims.set_index("claim_id")["memory_kind"].astype(object)
    assert [None if pd.isna(got[f"c{a}"]) else got[f"c{a}"]
            for a in range(len(kinds))] == kinds


def test_episodes_carry_the_kinds_their_premises_give(tmp_path: Path) -> None:
    """An episode's premise has ``memory_kind`` when its premise gives one, and nothing
    else changes: the tuning reader reads the kinds back; the same log without the kinds
    writes the same episodes but for those fields."""
    from amv_calib.claims import label_logs
    from amv_calib.tuning._episodes import read_episodes

    kinds = ["preference", None, "\u4e8b\u4ef6", None]
    offer = {"id": "v", "resolves_premise_ids": ["p0"], "execution_cost": 0.1,
             "symmetric_reliability": 0.9}

    def records(with_kinds: bool) -> list[dict[str, Any]]:
        out = []
        for i, k in enumerate(kinds):
            extra = {"memoryKind": k} if with_kinds and k is not None else {}
            rec = _rec(f"a{i}", i, _prem("p0", f"c{i}", **extra))
            out.append({**rec, "theta": 10.0, "kappa": 1.0, "verifiers": [offer]})
        return out

    lines = {}
    for name, with_kinds in (("kinds", True), ("plain", False)):
        log = _write(tmp_path / f"{name}.jsonl", records(with_kinds))
        done = label_logs(log, _outcomes(*(f"c{i}" for i in range(len(kinds)))))
        assert done.episode_report.episodes == len(kinds)
        path = tmp_path / f"{name}.episodes.jsonl"
        path.write_text("".join(line + "\n" for line in done.episodes.to_pylist()),
                        encoding="utf-8")
        lines[name] = path
    eps = read_episodes(lines["kinds"])
    assert eps.memory_kind is not None
    assert eps.memory_kind[:, 0].tolist() == kinds
    assert read_episodes(lines["plain"]).memory_kind is None
    stripped = []
    for line in lines["kinds"].read_text(encoding="utf-8").splitlines():
        obj = json.loads(line)
        for pr in obj["premises"]:
            pr.pop("memory_kind", None)
        stripped.append(obj)
    plain = [json.loads(x) for x in lines["plain"].read_text(encoding="utf-8").splitlines()]
    for a, b in zip(stripped, plain, strict=True):
        a["instance_id"] = b["instance_id"]
        a["decision_file"] = b["decision_file"]
    assert stripped == plain
