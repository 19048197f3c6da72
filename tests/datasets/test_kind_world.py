"""The synthetic world whose memory kinds age differently."""

from __future__ import annotations

import hashlib

import numpy as np
import pandas as pd
import pytest

from amv_calib.claims import load_claims
from amv_calib.datasets import DEFAULT_KIND_WORLD, synth_claims, synth_kind_claims


def test_same_seed_same_bytes_and_a_valid_claims_table() -> None:
    a, b = synth_kind_claims(500, seed=4), synth_claims(500, seed=4, kinds=True)
    pd.testing.assert_frame_equal(a, b)
    table, rejects = load_claims(a)
    assert len(rejects) == 0 and set(table["memory_kind"]) <= {k.name for k in
                                                               DEFAULT_KIND_WORLD.kinds}


def test_default_synth_output_unchanged() -> None:
    # the digest of the default generator's output before the kinds option existed
    frame = synth_claims(200, seed=1, kinds=False)
    assert "memory_kind" not in frame.columns
    assert hashlib.sha256(frame.to_csv(index=False).encode()).hexdigest() == (
        "7709fd16f12edccb6451ca22d44b13aa9bc904319d5aa80e7e704ead8992c565")


def test_p_true_is_the_kinds_law_and_the_labels_follow_it() -> None:
    claims = synth_kind_claims(40_000, seed=6)
    # a kind that goes stale in days is violated far more often than facts
    rate = claims.groupby("memory_kind")["violated"].mean()
    assert rate["deployment"] > 3 * rate["fact"]
    # labels agree with p_true: mean of violated - p_true within 4 standard errors
    d = claims["violated"].to_numpy(dtype=float) - claims["p_true"].to_numpy()
    assert abs(d.mean()) < 4 * d.std() / np.sqrt(d.size)
    # hand-worked law: a fresh claim of a trusted, confident source, no contradiction
    k = np.array([0])
    p = DEFAULT_KIND_WORLD.probability(k, np.array([0.0]), np.array([0.9]), np.array([0.9]),
                                       np.array([0.0]))
    wrong = 0.05 * 0.1 ** 1.3
    z = np.log(wrong / (1 - wrong)) + 1.0 * -np.log(0.9) - 0.3 * -np.log(0.1)
    assert p[0] == pytest.approx(1 / (1 + np.exp(-z)), rel=1e-9)
