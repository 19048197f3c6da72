"""Claims -> calibrators: Platt, Beta and isotonic fits (of the claim features, or of one plain
score), metrics, the leakage-safe comparison and the reliability figure.
"""

from __future__ import annotations

from amv_calib.calibration._calibrators import (
    BETA_EXTRA_MAP,
    BETA_SCORES,
    DEFAULT_PLATT_MAP,
    RICH_BETA_EXTRA_MAP,
    RICH_PLATT_MAP,
    SCORE_COLUMN,
    SCORE_EPS,
    BetaCalibrator,
    IsotonicCalibrator,
    PlattCalibrator,
    SeedPriorCalibrator,
    score_features,
    score_map,
)
from amv_calib.calibration._compare import (
    METRIC_NAMES,
    ComparisonResult,
    compare_calibrators,
    make_folds,
    newest_split,
    write_comparison,
)
from amv_calib.calibration._figures import (
    reliability_figure,
    write_figure_png,
)
from amv_calib.calibration._metrics import (
    METRICS,
    BootstrapInterval,
    Metric,
    bootstrap_ci,
    bootstrap_counts,
    bootstrap_metrics,
    brier_score,
    ece,
    log_loss,
    mce,
    reliability_curve,
    roc_auc,
    smooth_ece,
    smooth_ece_sigma,
)

__all__ = [
    "BETA_EXTRA_MAP",
    "BETA_SCORES",
    "DEFAULT_PLATT_MAP",
    "METRICS",
    "METRIC_NAMES",
    "RICH_BETA_EXTRA_MAP",
    "RICH_PLATT_MAP",
    "SCORE_COLUMN",
    "SCORE_EPS",
    "BetaCalibrator",
    "BootstrapInterval",
    "ComparisonResult",
    "IsotonicCalibrator",
    "Metric",
    "PlattCalibrator",
    "SeedPriorCalibrator",
    "bootstrap_ci",
    "bootstrap_counts",
    "bootstrap_metrics",
    "brier_score",
    "compare_calibrators",
    "ece",
    "log_loss",
    "make_folds",
    "newest_split",
    "mce",
    "reliability_curve",
    "reliability_figure",
    "score_features",
    "score_map",
    "roc_auc",
    "smooth_ece",
    "smooth_ece_sigma",
    "write_comparison",
    "write_figure_png",
]
