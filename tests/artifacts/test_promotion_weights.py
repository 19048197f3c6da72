"""Promotion judges soft labels by their weights, as the compare step does: the two rows of a
verifier label (violated with weight q, valid with 1 - q) are not one violated and one valid
claim."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import pandas as pd
import pytest

from amv_calib.artifacts._promotion import paired_log_loss

FEATURES = ["recency_hours", "source_trust_score", "model_confidence", "contradiction_flag"]


def _constant(p: float, version: str) -> Any:
    cal = SimpleNamespace(predict=lambda X, memory_kinds=None: np.full(len(X), p))
    return SimpleNamespace(calibrator=cal, version=version)


@pytest.fixture
def soft_pairs() -> pd.DataFrame:
    rng = np.random.default_rng(3)
    n = 200
    q = rng.uniform(0.01, 0.2, n)
    base = pd.DataFrame({"recency_hours": 5.0, "source_trust_score": 0.8,
                         "model_confidence": 0.9, "contradiction_flag": False}, index=range(n))
    pos = base.assign(violated=True, label_weight=q)
    neg = base.assign(violated=False, label_weight=1 - q)
    return pd.concat([pos, neg], ignore_index=True)


def test_weighted_log_loss_matches_an_independent_computation(soft_pairs: pd.DataFrame) -> None:
    res = paired_log_loss(soft_pairs, _constant(0.1, "v2"), _constant(0.5, "v1"), n_boot=50)
    y = soft_pairs["violated"].to_numpy(float)
    w = soft_pairs["label_weight"].to_numpy()

    def loss(p: float) -> float:
        return float(np.sum(-w * (y * np.log(p) + (1 - y) * np.log(1 - p))) / w.sum())

    assert res["challenger_log_loss"] == pytest.approx(loss(0.1))
    assert res["production_log_loss"] == pytest.approx(loss(0.5))
    # weighted, the 10% prediction is clearly better; unweighted the pairs look 50/50
    assert res["difference_ci95"][1] < 0
    flat = paired_log_loss(soft_pairs.drop(columns="label_weight"), _constant(0.1, "v2"),
                           _constant(0.5, "v1"), n_boot=50)
    assert flat["difference"] > 0


def test_unit_weights_change_nothing(soft_pairs: pd.DataFrame) -> None:
    hard = soft_pairs.assign(label_weight=1.0)
    a = paired_log_loss(hard, _constant(0.1, "v2"), _constant(0.5, "v1"), n_boot=50)
    b = paired_log_loss(hard.drop(columns="label_weight"), _constant(0.1, "v2"),
                        _constant(0.5, "v1"), n_boot=50)
    assert a == b
