"""Claims -> calibrators: Platt, Beta and isotonic fits (of the claim features, or of one plain
score), metrics, the leakage-safe comparison and the reliability figure.
"""

from __future__ import annotations

import importlib
import typing as _typing

from amv_calib.calibration._figures import (
    comparison_figure,
    overlay_figure,
    prediction_histogram,
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
    clopper_pearson,
    clopper_pearson_upper,
    ece,
    log_loss,
    mce,
    reliability_curve,
    roc_auc,
    smooth_ece,
    smooth_ece_sigma,
)
from amv_calib.settings import CompareOptions

if _typing.TYPE_CHECKING:
    from amv_calib.calibration._baselines import (
        KIND_CATEGORIES,
        FieldRuleBaseline,
        field_rule_score,
    )
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
        check_enough_data,
        check_fold_labels,
        compare_arguments,
        compare_calibrators,
        compare_signature,
        comparison_result,
        describe_calibrator,
        make_folds,
        newest_split,
        resolve_calibrators,
        row_weights,
        tie_break_of,
        time_folds_of_claims,
        weight_column,
        write_comparison,
    )

# the calibrators and the comparison need scikit-learn (and scipy.stats, ~1.3 s to
# import): they load on first use (PEP 562), so that the metrics and figures (what the
# monitor uses) do not pull them in
_LAZY: dict[str, str] = {
    **dict.fromkeys((
        "BETA_EXTRA_MAP", "BETA_SCORES", "DEFAULT_PLATT_MAP", "RICH_BETA_EXTRA_MAP",
        "RICH_PLATT_MAP", "SCORE_COLUMN", "SCORE_EPS", "BetaCalibrator", "IsotonicCalibrator",
        "PlattCalibrator", "SeedPriorCalibrator", "score_features", "score_map",
    ), "amv_calib.calibration._calibrators"),
    **dict.fromkeys((
        "METRIC_NAMES", "ComparisonResult", "check_enough_data", "check_fold_labels",
        "compare_arguments", "compare_calibrators", "compare_signature", "comparison_result",
        "describe_calibrator", "make_folds", "newest_split", "resolve_calibrators",
        "row_weights", "tie_break_of", "time_folds_of_claims", "weight_column",
        "write_comparison",
    ), "amv_calib.calibration._compare"),
    **dict.fromkeys(("KIND_CATEGORIES", "FieldRuleBaseline", "field_rule_score"),
                    "amv_calib.calibration._baselines"),
    **dict.fromkeys((
        "KIND_COLUMN", "KIND_PENALTIES", "OTHER_KIND", "KindBetaCalibrator",
        "KindIsotonicCalibrator", "KindPlattCalibrator", "penalised_logistic",
    ), "amv_calib.calibration._kinds"),
}

__all__ = [
    "penalised_logistic",
    "field_rule_score",
    "KindPlattCalibrator",
    "KindIsotonicCalibrator",
    "KindBetaCalibrator",
    "FieldRuleBaseline",
    "OTHER_KIND",
    "KIND_PENALTIES",
    "KIND_COLUMN",
    "KIND_CATEGORIES",
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
    "CompareOptions",
    "IsotonicCalibrator",
    "Metric",
    "PlattCalibrator",
    "SeedPriorCalibrator",
    "bootstrap_ci",
    "bootstrap_counts",
    "bootstrap_metrics",
    "brier_score",
    "clopper_pearson",
    "clopper_pearson_upper",
    "check_enough_data",
    "check_fold_labels",
    "compare_arguments",
    "compare_calibrators",
    "compare_signature",
    "comparison_result",
    "describe_calibrator",
    "ece",
    "log_loss",
    "make_folds",
    "newest_split",
    "mce",
    "reliability_curve",
    "comparison_figure",
    "overlay_figure",
    "prediction_histogram",
    "reliability_figure",
    "resolve_calibrators",
    "row_weights",
    "tie_break_of",
    "weight_column",
    "score_features",
    "time_folds_of_claims",
    "score_map",
    "roc_auc",
    "smooth_ece",
    "smooth_ece_sigma",
    "write_comparison",
    "write_figure_png",
]


def __getattr__(name: str) -> _typing.Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'amv_calib.calibration' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
