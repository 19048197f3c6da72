"""The optional ``memory_kind`` claim column: kept when given, rejected with its reason when
it is not a kind's name, absent without trace."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from amv_calib.claims import load_claims

_BASE: dict[str, Any] = {"timestamp": "2026-01-01T00:00:00Z", "recency_hours": 1.0,
                         "source_trust_score": 0.5, "model_confidence": 0.5,
                         "contradiction_flag": False, "violated": True}


def _rows(kinds: list[Any], column: str = "memory_kind") -> list[dict[str, Any]]:
    return [{**_BASE, "claim_id": f"c{i}", column: k} for i, k in enumerate(kinds)]


@pytest.mark.parametrize("column", ["memory_kind", "memoryKind"], ids=["snake", "camel"])
def test_kinds_kept_in_jsonl(tmp_path: Path, column: str) -> None:
    path = tmp_path / "claims.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in _rows(["preference", None, "event"],
                                                           column)) + "\n")
    table, rejects = load_claims(path)
    assert len(rejects) == 0
    assert table["memory_kind"].tolist()[0::2] == ["preference", "event"]
    assert pd.isna(table["memory_kind"].iloc[1])


@pytest.mark.parametrize(("kind", "reason"), [
    ("   ", r"memory_kind='   ' is blank"),
    ("x" * 65, r"memory_kind has more than 64 characters"),
], ids=["blank", "too-long"])
def test_bad_text_rejected_with_reason(tmp_path: Path, kind: str, reason: str) -> None:
    path = tmp_path / "claims.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in _rows(["fact", kind])) + "\n")
    table, rejects = load_claims(path)
    assert table["claim_id"].tolist() == ["c0"]
    assert rejects["row"].tolist() == [2]
    assert rejects["reason"].str.contains(reason).all()


def test_number_rejected_in_a_typed_table() -> None:
    frame = pd.DataFrame(_rows([3, None]))
    table, rejects = load_claims(frame)
    assert table["claim_id"].tolist() == ["c1"]
    assert rejects["reason"].tolist() == [
        "memory_kind=3 is not a string (a memory kind is a name such as 'preference')"]


def test_empty_csv_cell_is_missing(tmp_path: Path) -> None:
    path = tmp_path / "claims.csv"
    pd.DataFrame(_rows(["fact", None])).to_csv(path, index=False)
    table, rejects = load_claims(path)
    assert len(rejects) == 0
    assert table["memory_kind"].iloc[0] == "fact" and pd.isna(table["memory_kind"].iloc[1])


def test_absent_column_leaves_the_table_as_before() -> None:
    frame = pd.DataFrame([{**_BASE, "claim_id": "c0"}])
    table, _ = load_claims(frame)
    assert "memory_kind" not in table.columns
