"""The optional ``memory_kind`` claim column: kept when given, rejected with its reason when
it is not a kind's name, absent without trace."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from kind_corpus import CASES, after

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
    ("x" * 65, r"memory_kind='x{40}'\.\.\. has 65 characters, more than 64"),
    (" fact", r"memory_kind=' fact' begins or ends with whitespace"),
], ids=["blank", "too-long", "padded"])
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


#: The corpus's cases of one string value (a claim table has one column): its verdict is the
#: table's, but for the empty string, which is a missing value in a table (an empty cell).
_ONE_STRING = [(name, next(v for v in fields.values() if v is not None), verdict)
               for name, fields, verdict in CASES
               if len([v for v in fields.values() if v is not None]) == 1
               and all(isinstance(v, str) for v in fields.values() if v is not None)
               and name != "empty"]


@pytest.mark.parametrize(("kind", "verdict"), [c[1:] for c in _ONE_STRING],
                         ids=[c[0] for c in _ONE_STRING])
@pytest.mark.parametrize("fmt", ["jsonl", "csv", "parquet"])
def test_each_odd_kind_ingests_as_the_contract_rule_says(tmp_path: Path, kind: str,
                                                         verdict: tuple[str, Any],
                                                         fmt: str) -> None:
    frame = pd.DataFrame(_rows(["fact", kind]))
    path = tmp_path / f"claims.{fmt}"
    if fmt == "jsonl":
        path.write_text("\n".join(json.dumps(r) for r in _rows(["fact", kind])) + "\n",
                        encoding="utf-8")
    elif fmt == "csv":
        frame.to_csv(path, index=False, encoding="utf-8")
    else:
        frame.to_parquet(path, index=False)
    table, rejects = load_claims(path)
    what, expected = verdict
    if what == "kind":
        assert len(rejects) == 0
        assert table["memory_kind"].tolist() == ["fact", expected]
    else:
        assert table["memory_kind"].tolist() == ["fact"]
        (reason,) = rejects["reason"].tolist()
        # the column's canonical name, whichever spelling the corpus's premise used
        assert re.search(after("", expected.replace("memoryKind=", "memory_kind=")), reason), \
            reason
