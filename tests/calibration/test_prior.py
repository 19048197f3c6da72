"""``compare --prior``: the artifact's calibrator as a candidate, and a fit shrunk towards
it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from sklearn.linear_model import LogisticRegression

from amv_calib.calibration import compare_calibrators
from amv_calib.calibration._prior import (
    PRIOR_PENALTIES,
    PriorPlattCalibrator,
    load_prior,
)
from amv_calib.cli import main
from amv_calib.contract import CLAIM_FEATURES
from amv_calib.datasets import synth_claims, write_claims
from amv_calib.exceptions import ConfigError


@pytest.fixture(scope="module")
def few_claims() -> pd.DataFrame:
    """2,000 claims of the synthetic generator (a first month's labels)."""
    return synth_claims(2000, seed=9)


@pytest.fixture
def shipped_v1(tmp_path: Path, shipped_models: Callable[[Path], Path]) -> Path:
    return shipped_models(tmp_path / "models") / "amv-guard" / "v1"


def test_a_refused_artifact_is_an_error_naming_why(shipped_v1: Path) -> None:
    cal = shipped_v1 / "calibrator.json"
    cal.write_bytes(cal.read_bytes().replace(b"0.068249465", b"0.068249466"))
    with pytest.raises(ConfigError, match=r"compare.prior: artifact .* refused: \[hash"):
        load_prior(shipped_v1)


def test_refused_prior_exits_2(shipped_v1: Path, few_claims: pd.DataFrame,
                               tmp_path: Path) -> None:
    (shipped_v1 / "manifest.json").write_text("{", encoding="utf-8")
    claims = write_claims(few_claims, tmp_path / "claims.csv")
    code = main(["compare", str(claims), "--out", str(tmp_path / "out"), "--prior",
                 str(shipped_v1), "--n-boot", "0"])
    assert code == 2


def test_strong_pull_gives_the_prior_and_none_gives_sklearns_fit(
        shipped_v1: Path, few_claims: pd.DataFrame) -> None:
    prior = load_prior(shipped_v1)
    X, y = few_claims[list(CLAIM_FEATURES)], few_claims["violated"].to_numpy()
    pulled = PriorPlattCalibrator(prior=prior, prior_penalty=1e9).fit(X, y)
    np.testing.assert_allclose(pulled.coef_, prior.calibrator.coef, atol=1e-5)
    assert pulled.intercept_ == pytest.approx(prior.calibrator.intercept, abs=1e-5)
    free = PriorPlattCalibrator(prior=prior, prior_penalty=1e-8, tol=1e-10).fit(X, y)
    F = prior.calibrator.feature_map.transform(X.to_numpy(dtype=float))
    ref = LogisticRegression(C=np.inf, solver="newton-cholesky", tol=1e-12,
                             max_iter=500).fit(F, y)
    np.testing.assert_allclose(free.predict_proba(X)[:, 1], ref.predict_proba(F)[:, 1],
                               atol=1e-6)


def test_compare_adds_the_prior_and_chooses_the_pull(shipped_v1: Path,
                                                     few_claims: pd.DataFrame) -> None:
    result = compare_calibrators(few_claims, n_boot=0, prior=str(shipped_v1))
    assert list(result.oof)[-2:] == ["prior", "platt_prior"]
    chosen = result.config["chosen_by_folds"]["platt_prior"]
    assert [c["prior_penalty"] for c in chosen["candidates"]] == list(PRIOR_PENALTIES)
    assert "Prior('amv-guard v1 (calibrator sha256 " in result.config["calibrators"]["prior"]
    np.testing.assert_array_equal(
        result.oof["prior"],
        load_prior(shipped_v1).calibrator.predict(
            few_claims[list(CLAIM_FEATURES)].to_numpy(dtype=float)))


@pytest.mark.slow
def test_few_labels_gain_from_the_prior(shipped_v1: Path) -> None:
    # 2,000 labels of a world like the one the prior learnt from: the pull towards it beats
    # the fit from zero, and the champion is never worse than without the prior
    claims = synth_claims(2000, seed=12).drop(columns=["p_true"])
    without = compare_calibrators(claims, n_boot=0, refit=False)
    with_prior = compare_calibrators(claims, n_boot=0, refit=False, prior=str(shipped_v1))
    table = with_prior.table.set_index("name")
    assert table.loc["platt_prior", "log_loss"] < table.loc["platt", "log_loss"] - 0.002
    best = without.table.set_index("name").loc[without.champion, "log_loss"]
    assert table.loc[with_prior.champion, "log_loss"] <= best


def test_a_pipelines_prior_is_read_from_its_folder_and_keyed_by_its_content(
        shipped_v1: Path, few_claims: pd.DataFrame, tmp_path: Path) -> None:
    # compare.prior is a path like a step's other inputs: relative to the pipeline file, and
    # the artifact an alias names is part of the step's key, so a moved alias reruns compare
    from amv_calib.pipeline._runner import _step_key, load_pipeline

    write_claims(few_claims, tmp_path / "claims.csv")
    folder = tmp_path / "pipes"
    folder.mkdir()
    toml = folder / "p.toml"
    toml.write_text('[pipeline]\nname = "p"\nworkdir = "../work"\ntracking = false\n\n'
                    '[[steps]]\nname = "compare"\nkind = "compare"\nclaims = "../claims.csv"\n'
                    'prior = "../models/amv-guard@production"\n', encoding="utf-8")
    spec = load_pipeline(toml)
    step = spec.steps[0]
    assert step.params["prior"] == f"{shipped_v1.parent.resolve()}@production"
    before = _step_key(spec, step, {})
    aliases = shipped_v1.parent / "aliases.json"
    aliases.write_bytes(aliases.read_bytes() + b"\n")
    assert _step_key(spec, step, {}) != before
    toml.write_text(toml.read_text(encoding="utf-8").replace("../models", "models"),
                    encoding="utf-8")
    with pytest.raises(ConfigError, match="prior='models/amv-guard@production' not found"):
        load_pipeline(toml)
