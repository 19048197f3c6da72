"""A claims table written from consecutive parts (the Spark engine streams its rows so) is
the same file, to the byte, as the table written whole: Parquet past one row group, CSV
and JSONL."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from amv_calib.claims import write_claims_table
from amv_calib.claims._outputs import PARQUET_ROW_GROUP


def _claims(n: int) -> pd.DataFrame:
    rng = np.random.default_rng(7)
    t = np.datetime64("2026-12-01T00:00:00", "us") + rng.integers(0, 10**12, n) \
        .astype("timedelta64[us]")
    # enough distinct ids that Parquet's dictionary of the column outgrows its page and
    # falls back to plain encoding (where a column written in chunks differs)
    ids = np.array([f"claim-{i:09d}" for i in range(200_000)], dtype=object)
    claim = ids[rng.integers(0, ids.size, n)]
    claim[rng.random(n) < 0.01] = None
    return pd.DataFrame({
        "claim_id": pd.array(claim, dtype="str"),
        "timestamp": pd.DatetimeIndex(t).tz_localize("UTC"),
        "recency_hours": rng.random(n) * 100,
        "contradiction_flag": rng.random(n) < 0.1,
        "label_weight": rng.random(n),
        "use_id": np.arange(n, dtype=np.int64),
        "label_source": pd.Categorical.from_codes(rng.integers(0, 2, n),
                                                  categories=["outcome", "verifier"]),
        "calibrator": pd.Categorical.from_codes(
            rng.integers(0, 3, n), categories=pd.Index(["a", "b", "c", "unused"], dtype="str")),
    })


def _parts(df: pd.DataFrame, sizes: list[int]) -> list[pd.DataFrame]:
    edges = np.cumsum([0, *sizes])
    parts = [df.iloc[a:b].reset_index(drop=True) for a, b in zip(edges, edges[1:], strict=False)
             if a < len(df)]
    return [*parts, df.iloc[:0]]


@pytest.mark.parametrize("suffix", [".parquet", ".csv", ".jsonl"])
def test_parts_write_the_same_bytes(tmp_path: Path, suffix: str) -> None:
    n = PARQUET_ROW_GROUP + 250_001 if suffix == ".parquet" else 30_011
    df = _claims(n)
    whole, parted = tmp_path / f"whole{suffix}", tmp_path / f"parts{suffix}"
    write_claims_table(df, whole)
    # uneven parts, one of them empty, so that row groups straddle them
    write_claims_table(iter(_parts(df, [65_536, 0, 1, 400_000, 7_777] + [300_000] * 5)), parted)
    assert parted.read_bytes() == whole.read_bytes()
    if suffix == ".parquet":
        import pyarrow.parquet as pq

        assert pq.ParquetFile(parted).metadata.num_row_groups == 2


@pytest.mark.parametrize("suffix", [".parquet", ".csv", ".jsonl"])
def test_an_empty_table_in_parts(tmp_path: Path, suffix: str) -> None:
    df = _claims(10).iloc[:0]
    write_claims_table(df, tmp_path / f"whole{suffix}")
    write_claims_table(iter([df]), tmp_path / f"parts{suffix}")
    assert (tmp_path / f"parts{suffix}").read_bytes() == \
        (tmp_path / f"whole{suffix}").read_bytes()


def _unjoined_report(n: int) -> Any:
    from amv_calib.claims import JoinReport
    from amv_calib.claims._sql import UNJOINED_REASONS

    rng = np.random.default_rng(3)
    actions = pd.Index([f"a{i}" for i in range(n)], dtype="str")  # one category per action
    uses = pd.DataFrame({
        "decision_file": pd.Categorical.from_codes(np.zeros(n, dtype=np.int64), ["d.jsonl"]),
        "decision_line": np.arange(1, n + 1, dtype=np.int64),
        "action_id": pd.Categorical.from_codes(rng.integers(-1, n, n), categories=actions),
        "premise_id": pd.Categorical.from_codes(rng.integers(0, 3, n), ["p1", "p2", "p3"]),
        "claim_id": pd.array([f"c{i}" if i % 7 else None for i in range(n)], dtype="str"),
        "time": pd.DatetimeIndex(np.datetime64("2026-12-01T00:00:00", "us")
                                 + np.arange(n).astype("timedelta64[s]")).tz_localize("UTC"),
        "reason": pd.Categorical.from_codes(rng.integers(0, len(UNJOINED_REASONS), n),
                                            UNJOINED_REASONS),
        "detail": pd.Categorical.from_codes(rng.integers(0, 2, n), ["", "why"]),
    })
    details = pd.DataFrame({"source": [0], "row": [1], "action_id": ["a1"], "claim_id": [None],
                            "time": pd.to_datetime(["2026-12-01T00:00:00Z"]).as_unit("us"),
                            "status": ["used"],
                            "detail": [""]})
    return JoinReport(decision_files=[], premise_entries=n, repeated_entries=0, uses_read=n,
                      joined=0, joined_by_source={}, unjoined={}, outcomes_read=1,
                      outcomes={"used": 1}, rows=0, soft_labels="posterior",
                      unjoined_uses=uses, outcome_details=details)


def test_unjoined_uses_csv_in_slices_is_the_whole_table(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The unjoined uses are written in slices, categoricals as their values (pandas formats a
    # categorical at a cost growing with its categories, per chunk): the same text as one
    # to_csv of the whole table, computed here independently.
    import amv_calib.claims._outputs as outputs
    from amv_calib.claims import write_join_report

    monkeypatch.setattr(outputs, "_CSV_ROWS", 7)
    report = _unjoined_report(50)
    write_join_report(report, tmp_path / "c.parquet", ["o.csv"])
    u = report.unjoined_uses
    expected = pd.DataFrame({
        "kind": "use", "file": u["decision_file"], "line": u["decision_line"],
        "action_id": u["action_id"], "premise_id": u["premise_id"], "claim_id": u["claim_id"],
        "time": u["time"], "reason": u["reason"], "detail": u["detail"],
    }).to_csv(index=False, date_format="%Y-%m-%dT%H:%M:%S.%fZ")
    text = (tmp_path / "c.unjoined.csv").read_text(encoding="utf-8")
    assert text.startswith(expected)
    assert text[len(expected):] == "outcome,o.csv,1,a1,,,2026-12-01T00:00:00.000000Z,used,\n"


@pytest.mark.parametrize("suffix", [".parquet", ".csv", ".jsonl"])
def test_label_table_written_in_parts_is_label_claims_written_whole(
        tmp_path: Path, examples_dir: Path, monkeypatch: pytest.MonkeyPatch, suffix: str) -> None:
    # ``label --out FILE`` builds and writes the claim rows and the unjoined uses part by
    # part (write_label_table); the files are those of label_claims' whole tables.
    import amv_calib.claims._join as join
    from amv_calib.claims import (
        join_logs,
        label_claims,
        write_join_report,
        write_label_table,
    )

    log, outcomes = (examples_dir / "logs" / "decisions.jsonl",
                     examples_dir / "logs" / "outcomes.csv")
    names = [str(outcomes)]
    claims, report = label_claims(log, outcomes)
    assert len(claims) > 100 and len(report.unjoined_uses) > 100  # more than two parts each
    (tmp_path / "whole").mkdir()
    (tmp_path / "parts").mkdir()
    monkeypatch.chdir(tmp_path / "whole")  # the same relative ``out`` in the report
    write_claims_table(claims, Path(f"claims{suffix}"))
    whole_line = write_join_report(report, Path(f"claims{suffix}"), names)

    monkeypatch.setattr(join, "PART_ROWS", 47)  # uneven: the last part is short
    joined = join_logs(log, outcomes)
    pd.testing.assert_frame_equal(pd.concat(list(joined.claim_parts()), ignore_index=True),
                                  claims)
    monkeypatch.chdir(tmp_path / "parts")
    parts_line = write_label_table(joined, Path(f"claims{suffix}"), names)
    assert parts_line == whole_line
    for name in (f"claims{suffix}", "claims.join_report.json", "claims.unjoined.csv"):
        assert (tmp_path / "parts" / name).read_bytes() == \
            (tmp_path / "whole" / name).read_bytes(), name
