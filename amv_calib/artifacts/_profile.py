"""The reference profile of an artifact: what production is compared with by monitoring.

Written at export as ``profile.json`` beside the manifest (listed and hashed like every file):
per claim feature its percentiles, decile bin edges with the training share in each bin (for
the population stability index), and a seeded sample of the training values (for the
two-sample Kolmogorov-Smirnov statistic); the training violation rate and mean predicted
probability; and, when the calibrator came from a comparison, its out-of-fold reliability
bins (equal mass) and log loss. Plain JSON, read by ``amv-calib monitor`` (numpy only).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import numpy as np

from amv_calib.contract import CLAIM_FEATURES, PortableCalibrator

PROFILE_FILE: Final = "profile.json"
PROFILE_FORMAT: Final = "amv-calib/profile"
PROFILE_FORMAT_VERSION: Final = 1
#: Training values kept per feature for the two-sample KS statistic.
SAMPLE_SIZE: Final = 5000
#: Percentiles recorded per feature.
PERCENTILES: Final = tuple(range(0, 101))
#: Bins of the population stability index: edges at the training deciles.
PSI_BINS: Final = 10


def _bins(values: np.ndarray) -> tuple[list[float], list[float]]:
    """Inner edges at the deciles (ties merged) and the training share per bin."""
    edges = np.unique(np.quantile(values, np.linspace(0, 1, PSI_BINS + 1)[1:-1]))
    counts = np.bincount(np.searchsorted(edges, values, side="right"),
                         minlength=len(edges) + 1)
    return edges.tolist(), (counts / max(1, len(values))).tolist()


def _weighted_rate(claims: Any, y: np.ndarray) -> float:
    if "label_weight" not in claims.columns:
        return float(y.mean())
    w = claims["label_weight"].to_numpy(dtype=np.float64)
    w = np.where(np.isfinite(w), w, 1.0)
    if np.all(w == 1.0) or not np.sum(w) > 0:
        return float(y.mean())  # unweighted: the same bits as before weights existed
    return float(np.sum(w * y) / np.sum(w))


def build_profile(claims: Any, calibrator: PortableCalibrator, *,
                  reliability_bins: Any = None, oof_metrics: Mapping[str, Any] | None = None,
                  seed: int = 0) -> dict[str, Any]:
    """The reference profile of the training ``claims`` (a validated claims table)."""
    X = claims[list(CLAIM_FEATURES)].to_numpy(dtype=np.float64)
    y = claims["violated"].to_numpy(dtype=np.float64)
    rng = np.random.default_rng(seed)
    n = len(X)
    take = np.sort(rng.choice(n, size=min(n, SAMPLE_SIZE), replace=False)) if n else \
        np.zeros(0, dtype=np.intp)
    features: dict[str, Any] = {}
    for j, name in enumerate(CLAIM_FEATURES):
        col = X[:, j]
        edges, shares = _bins(col) if n else ([], [1.0])
        features[name] = {
            "percentiles": np.percentile(col, PERCENTILES).tolist() if n else [],
            "psi_edges": edges, "psi_shares": shares, "sample": col[take].tolist(),
        }
    kinds = claims["memory_kind"].to_numpy(dtype=object) \
        if "memory_kind" in claims.columns else None
    p = calibrator.predict(X, kinds) if n else np.zeros(0)
    out: dict[str, Any] = {
        "format": PROFILE_FORMAT, "format_version": PROFILE_FORMAT_VERSION, "n": n,
        # soft labels (two rows weighted q and 1 - q) count with their weights
        "violation_rate": _weighted_rate(claims, y) if n else None,
        "mean_p": float(p.mean()) if n else None,
        "features": features, "oof_reliability": None, "oof_metrics": dict(oof_metrics or {}),
    }
    if reliability_bins is not None:
        rel = reliability_bins
        if "strategy" in rel.columns:
            rel = rel[rel["strategy"] == "quantile"]
        cols = [c for c in ("calibrator", "bin", "count", "mean_pred", "observed_rate",
                            "ci_low", "ci_high") if c in rel.columns]
        out["oof_reliability"] = rel[cols].to_dict(orient="records")
    return out
