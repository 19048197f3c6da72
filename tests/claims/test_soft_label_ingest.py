"""Soft labels from `amv-calib label` ingest as they are: the weighted pair is one use."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from amv_calib.claims._ingest import load_claims

_HEADER = ("claim_id,timestamp,recency_hours,source_trust_score,model_confidence,"
           "contradiction_flag,violated,label_weight\n")


def test_weighted_pair_is_accepted_and_a_repeated_label_is_not(tmp_path: Path) -> None:
    path = tmp_path / "soft.csv"
    path.write_text(
        _HEADER
        + "c1,2026-11-01T00:00:00Z,10,0.8,0.9,false,true,0.25\n"
        + "c1,2026-11-01T00:00:00Z,10,0.8,0.9,false,false,0.75\n"
        + "c1,2026-11-01T00:00:00Z,10,0.8,0.9,false,false,0.75\n"   # same label again
        + "c2,2026-11-01T00:00:00Z,10,0.8,0.9,false,true,\n"
        + "c2,2026-11-01T00:00:00Z,10,0.8,0.9,false,false,\n",      # unweighted: duplicate
        encoding="utf-8",
    )
    claims, rejects = load_claims(path)
    assert list(claims.index) == [1, 2, 4]
    assert claims["label_weight"].iloc[:2].tolist() == [0.25, 0.75]
    assert rejects["row"].tolist() == [3, 5]
    assert rejects["reason"].tolist() == ["duplicate (claim_id, timestamp) of row 2",
                                          "duplicate (claim_id, timestamp) of row 4"]


def test_label_output_round_trips_through_ingest(tmp_path: Path, examples_dir: Path) -> None:
    from amv_calib.claims._join import label_claims

    claims, _ = label_claims([examples_dir / "decisions.jsonl"], examples_dir / "outcomes.csv",
                             on_corrupt="skip")
    assert claims["label_weight"].notna().sum() >= 2  # the examples hold a soft-label pair
    out = tmp_path / "claims.parquet"
    claims.to_parquet(out)
    again, rejects = load_claims(out)
    assert len(rejects) == 0
    assert len(again) == len(claims)
    assert (again["label_weight"].notna()).sum() == pd.Series(claims["label_weight"]).notna().sum()
