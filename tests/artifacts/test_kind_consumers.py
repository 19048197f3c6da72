"""What reads a calibrator over a claims table passes the claims' memory kinds: promotion's
paired log loss and the exported profile, against predict_one claim by claim."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import pandas as pd
import pytest
from kinded import KINDS, UNKNOWN_KINDS, kinded_calibrator

from amv_calib.artifacts._profile import build_profile
from amv_calib.artifacts._promotion import paired_log_loss
from amv_calib.contract import CLAIM_FEATURES, seed_prior_calibrator


@pytest.fixture(scope="module")
def claims() -> pd.DataFrame:
    rng = np.random.default_rng(53)
    n = 300
    pool = np.array([*KINDS, *UNKNOWN_KINDS, None], dtype=object)
    return pd.DataFrame({
        "recency_hours": rng.exponential(600.0, n), "source_trust_score": rng.uniform(0, 1, n),
        "model_confidence": rng.uniform(0, 1, n), "contradiction_flag": rng.uniform(0, 1, n) < 0.2,
        "violated": rng.uniform(0, 1, n) < 0.3, "memory_kind": rng.choice(pool, n)})


def _by_hand(claims: pd.DataFrame, cal: Any) -> np.ndarray:
    return np.array([cal.predict_one({c: float(row[c]) for c in CLAIM_FEATURES},
                                     row["memory_kind"]) for _, row in claims.iterrows()])


def _artifact(cal: Any, version: str) -> Any:
    return SimpleNamespace(calibrator=cal, version=version)


def test_promotion_scores_each_claim_as_its_kind(claims: pd.DataFrame) -> None:
    cal = kinded_calibrator()
    res = paired_log_loss(claims, _artifact(cal, "v2"), _artifact(seed_prior_calibrator(), "v1"),
                          n_boot=20)
    p, y = _by_hand(claims, cal), claims["violated"].to_numpy(float)
    want = float(np.mean(-(y * np.log(p) + (1 - y) * np.log1p(-p))))
    assert res["challenger_log_loss"] == pytest.approx(want, rel=1e-12)
    # without the column every claim is "other": another number
    bare = paired_log_loss(claims.drop(columns="memory_kind"), _artifact(cal, "v2"),
                           _artifact(seed_prior_calibrator(), "v1"), n_boot=20)
    assert bare["challenger_log_loss"] != pytest.approx(want, rel=1e-6)
    assert bare["production_log_loss"] == res["production_log_loss"]  # kinds ignored


def test_profile_mean_p_reads_the_kinds(claims: pd.DataFrame) -> None:
    cal = kinded_calibrator()
    prof = build_profile(claims, cal)
    assert prof["mean_p"] == pytest.approx(float(_by_hand(claims, cal).mean()), rel=1e-12)
