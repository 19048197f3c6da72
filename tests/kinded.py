"""A hand-made calibrator with memory kinds, and an artifact of it, for the gate tests.

The kinds age differently: an "event" grows stale with a steep recency slope, a
"preference" with a gentle one, a "fact" by a log1p of its age; "other" keeps the shared
terms only. The numbers are made up (a fit is calibration's business, not the gate's).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from amv_calib.contract import (
    SEED_CLAMP,
    FeatureMap,
    PortableCalibrator,
    Term,
    calibrator_sha256,
    check_thresholds,
    with_gate_clamp,
)

#: The vocabulary, and kinds a gate input may carry that it does not hold.
KINDS = ("event", "fact", "other", "preference")
UNKNOWN_KINDS = ("opinion", "", "Event", "\U0001f600")

_SHARED = (
    Term(column="model_confidence", transform="logit"),
    Term(column="recency_hours", transform="ramp", scale=720.0),
    Term(column="source_trust_score", transform="identity"),
    Term(column="contradiction_flag", transform="indicator"),
)
_BY_KIND = (
    Term(column="recency_hours", transform="ramp", scale=720.0, kind="event"),
    Term(column="recency_hours", transform="log1p", scale=2160.0, kind="fact"),
    Term(column="recency_hours", transform="ramp", scale=720.0, kind="preference"),
)


def kinded_calibrator(kind: str = "linear") -> PortableCalibrator:
    """Platt-like (``kind="linear"``) or an isotonic table over the same index."""
    iso = kind == "isotonic"
    return PortableCalibrator(
        kind="isotonic" if iso else "linear",
        feature_map=FeatureMap(_SHARED + _BY_KIND),
        intercept=-0.85,
        coef=(-1.42, 2.15, -1.80, 2.5, 1.7, 0.6, -0.9),
        kinds=KINDS,
        kind_intercept=(0.3, -0.4, 0.0, -0.2),
        x_knots=(-6.0, -3.0, -1.0, 0.5, 2.0, 4.0) if iso else (),
        y_knots=(0.002, 0.02, 0.15, 0.45, 0.8, 0.97) if iso else (),
        clamp=SEED_CLAMP,
        source=f"hand-made kinds ({kind})",
    )


def certificate_for(calibrator: PortableCalibrator, thresholds: dict[str, Any]
                    ) -> dict[str, Any]:
    """A certificate bound to ``calibrator`` and ``thresholds`` (its numbers made up)."""
    cal, gate = with_gate_clamp(calibrator, check_thresholds(thresholds))
    return {"alpha": 0.01, "delta": 0.05, "n": 900, "chosen": 0, "thresholds": gate,
            "path": [gate], "harms": [1], "observed_upper_bound": 0.0052,
            "calibrator_sha256": calibrator_sha256(cal)}


def export_kinded(models: Path, name: str = "amv-kinds", kind: str = "linear",
                  **kwargs: Any) -> Path:
    """Export :func:`kinded_calibrator` under ``models/name`` with the default thresholds
    and a certificate; the version folder."""
    from amv_calib.artifacts import DEFAULT_THRESHOLDS, export_artifact

    cal = kinded_calibrator(kind)
    thresholds = dict(DEFAULT_THRESHOLDS)
    res = export_artifact(calibrator=cal, thresholds=thresholds, name=name, models_dir=models,
                          include_joblib=False, certificate=certificate_for(cal, thresholds),
                          **kwargs)
    return Path(res.path)
