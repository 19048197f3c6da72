"""``compare --engine spark`` beyond the default settings: Beta's constrained fit, folds by
claim group (``split="group"``) and the L-BFGS solver, each against the single-machine
comparison on the same small claims table."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import amv_calib.spark._compare as spark_compare
from amv_calib.calibration import compare_calibrators
from amv_calib.datasets import synth_claims
from amv_calib.spark import compare_calibrators_spark


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Path]:
    """5,000 synthetic claims, also written as Parquet for Spark."""
    table = synth_claims(5_000, seed=23)
    path = tmp_path_factory.mktemp("spark-options") / "claims.parquet"
    table.to_parquet(path, index=False)
    return table, path


def _both(small: tuple[Any, Path], spark: Any, **kw: Any) -> tuple[Any, Any]:
    table, path = small
    kw = {"folds": 2, "n_boot": 0, **kw}
    return compare_calibrators(table, **kw), compare_calibrators_spark(path, spark=spark, **kw)


def _coefficients(result: Any, name: str) -> Any:
    p = result.estimators[name].to_portable()
    return np.r_[p.intercept, p.coef]


def test_beta_on_spark_equals_local(small: tuple[Any, Path], spark: Any) -> None:
    local, on_spark = _both(small, spark, calibrators=["beta", "seed_prior"])
    diff = np.abs(_coefficients(local, "beta") - _coefficients(on_spark, "beta"))
    assert diff.max() < 1e-4, diff.max()
    np.testing.assert_allclose(on_spark.oof["beta"], local.oof["beta"], rtol=0, atol=1e-5)
    assert on_spark.champion == local.champion


def test_group_split_gives_the_same_folds_and_fits(small: tuple[Any, Path], spark: Any) -> None:
    local, on_spark = _both(small, spark, calibrators=["platt", "seed_prior"], split="group")
    assert local.folds.to_dict("records") == on_spark.folds.to_dict("records")
    diff = np.abs(_coefficients(local, "platt") - _coefficients(on_spark, "platt"))
    assert diff.max() < 1e-4, diff.max()
    np.testing.assert_allclose(on_spark.oof["platt"], local.oof["platt"], rtol=0, atol=1e-5)


def test_lbfgs_solver_agrees_within_1e4(small: tuple[Any, Path], spark: Any,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    # The documented tolerance of the L-BFGS path (MLlib LogisticRegression): the same
    # optimum, coefficients within 1e-4.
    monkeypatch.setattr(spark_compare, "SOLVER", "lbfgs")
    local, on_spark = _both(small, spark, calibrators=["platt"])
    diff = np.abs(_coefficients(local, "platt") - _coefficients(on_spark, "platt"))
    assert diff.max() < 1e-4, diff.max()
