"""``compare --engine spark`` against the single-machine comparison on the same claims: the
same folds, Platt coefficients within 1e-4, isotonic values equal at the knots, the same
out-of-fold metrics and champion, and a portable calibrator the gate loads."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from amv_calib.calibration import compare_calibrators, write_comparison
from amv_calib.contract import CLAIM_FEATURES, PortableCalibrator
from amv_calib.datasets import synth_claims
from amv_calib.spark import SparkCalibrator, compare_calibrators_spark

CALIBRATORS = ["platt", "isotonic", "seed_prior"]


@pytest.fixture(scope="module")
def claims(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """20,000 synthetic claims with soft-label weights, written as Parquet for Spark."""
    table = synth_claims(20_000, seed=11)
    rng = np.random.default_rng(3)
    table["label_weight"] = rng.uniform(0.25, 1.0, len(table))
    path = tmp_path_factory.mktemp("spark") / "claims.parquet"
    table.to_parquet(path, index=False)
    return table, path


@pytest.fixture(scope="module")
def both(claims: Any, spark: Any) -> tuple[Any, Any]:
    table, path = claims
    kw: dict[str, Any] = {"calibrators": CALIBRATORS, "folds": 2, "n_boot": 20,
                          "sample_weight": "label_weight"}
    local = compare_calibrators(table, **kw)
    on_spark = compare_calibrators_spark(path, spark=spark, **kw)
    return local, on_spark


def test_same_folds_and_champion(both: tuple[Any, Any]) -> None:
    local, on_spark = both
    assert on_spark.config["engine"] == "spark"
    assert local.folds.to_dict("records") == on_spark.folds.to_dict("records")
    assert on_spark.champion == local.champion
    np.testing.assert_array_equal(on_spark.y, local.y)


def test_platt_coefficients_agree_within_1e4(both: tuple[Any, Any]) -> None:
    local, on_spark = both
    a = local.estimators["platt"].to_portable()
    b = on_spark.estimators["platt"].to_portable()
    assert isinstance(on_spark.estimators["platt"], SparkCalibrator)
    assert a.feature_map == b.feature_map
    diff = np.abs(np.r_[a.intercept, a.coef] - np.r_[b.intercept, b.coef])
    assert diff.max() < 1e-4, diff.max()


def test_isotonic_values_agree_at_the_knots(both: tuple[Any, Any]) -> None:
    local, on_spark = both
    a = local.estimators["isotonic"].to_portable()
    b = on_spark.estimators["isotonic"].to_portable()
    assert len(a.x_knots) == len(b.x_knots)
    np.testing.assert_allclose(b.y_knots, a.y_knots, rtol=0, atol=1e-6)
    np.testing.assert_allclose(b.x_knots, a.x_knots, rtol=0, atol=1e-4)
    np.testing.assert_allclose(np.r_[b.intercept, b.coef], np.r_[a.intercept, a.coef],
                               rtol=0, atol=1e-4)


def test_out_of_fold_predictions_and_metrics_agree(both: tuple[Any, Any]) -> None:
    local, on_spark = both
    for name in CALIBRATORS:
        np.testing.assert_allclose(on_spark.oof[name], local.oof[name], rtol=0, atol=1e-5)
    # Proper scores and AUC are smooth in the predictions; the binned calibration errors
    # jump when a prediction that moved by 1e-6 crosses an equal-mass bin edge.
    smooth = ["log_loss", "brier", "auc"]
    np.testing.assert_allclose(on_spark.table[smooth].to_numpy(dtype=float),
                               local.table[smooth].to_numpy(dtype=float), rtol=0, atol=1e-6)
    binned = ["ece", "ece_mass", "mce"]
    np.testing.assert_allclose(on_spark.table[binned].to_numpy(dtype=float),
                               local.table[binned].to_numpy(dtype=float), rtol=0, atol=2e-4)


def test_the_champion_json_loads_and_predicts_as_the_local_one(
        both: tuple[Any, Any], claims: Any, tmp_path: Path) -> None:
    local, on_spark = both
    write_comparison(on_spark, tmp_path)
    loaded = PortableCalibrator.from_dict(json.loads((tmp_path / "champion.json").read_text()))
    X = claims[0][list(CLAIM_FEATURES)].to_numpy(dtype=float)[:2000]
    np.testing.assert_allclose(loaded.predict(X),
                               local.champion_estimator.to_portable().predict(X),
                               rtol=0, atol=1e-5)
