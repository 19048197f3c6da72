"""``load_claims(..., on_reject="raise")``: a table used whole names its first bad row."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from amv_calib import DataContractError
from amv_calib.claims import load_claims

GOOD = {"claim_id": "c", "timestamp": "2026-01-01T00:00:00Z", "recency_hours": 1.0,
        "source_trust_score": 0.5, "model_confidence": 0.5, "contradiction_flag": True,
        "violated": False}


def _frame(*changes: dict[str, object]) -> pd.DataFrame:
    return pd.DataFrame([{**GOOD, "claim_id": f"c{i}", **c} for i, c in enumerate(changes)])


def test_a_clean_table_reads_as_with_return() -> None:
    frame = _frame({}, {"recency_hours": 3.0}, {"violated": True})
    claims, rejects = load_claims(frame, on_reject="raise")
    want, _ = load_claims(frame)
    assert rejects.empty
    pd.testing.assert_frame_equal(claims, want)


def test_the_first_bad_row_is_named_with_its_reasons() -> None:
    frame = _frame({}, {}, {"model_confidence": 1.2, "contradiction_flag": "sometimes"},
                   {"timestamp": "yesterday"}, {"recency_hours": -1})
    _, rejects = load_claims(frame)
    with pytest.raises(DataContractError) as err:
        load_claims(frame, on_reject="raise")
    assert str(err.value) == (
        "row 3 of the claims table (1-based) breaks the data contract: "
        "model_confidence=1.2 outside [0, 1]; contradiction_flag='sometimes' is not a boolean "
        "(true/false, yes/no, t/f, 1/0); 2 more rows break it")
    assert rejects["reason"].iloc[0] in str(err.value)  # as the first reject says


def test_a_file_is_named_and_one_more_row_is_counted(tmp_path: Path) -> None:
    path = tmp_path / "claims.csv"
    _frame({}, {"claim_id": "c0"}, {"source_trust_score": "high"}).to_csv(path, index=False)
    with pytest.raises(DataContractError, match=(
            rf"^row 2 of {path} \(1-based\) breaks the data contract: duplicate \(claim_id, "
            rf"timestamp\) of row 1; 1 more row breaks it$")):
        load_claims(path, on_reject="raise")


def test_on_reject_takes_two_values() -> None:
    with pytest.raises(ValueError, match="on_reject='drop' must be 'return' or 'raise'"):
        load_claims(_frame({}), on_reject="drop")  # type: ignore[arg-type]
