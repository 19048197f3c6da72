"""``compare --prior``: the artifact's calibrator as a candidate, and a fit shrunk towards
it."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy.integrate import quad
from scipy.special import expit
from sklearn.linear_model import LogisticRegression

from amv_calib.calibration import compare_calibrators
from amv_calib.calibration._compare import make_folds
from amv_calib.calibration._kinds import penalised_logistic
from amv_calib.calibration._prior import (
    PRIOR_PENALTIES,
    PriorPlattCalibrator,
    load_prior,
    log_evidence,
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
    # the pull is the refit's own choice by its marginal likelihood, not the folds'
    assert "platt_prior" not in result.config.get("chosen_by_folds", {})
    chosen = result.config["chosen_by_evidence"]["platt_prior"]
    refit = result.estimators["platt_prior"]
    assert [c["prior_penalty"] for c in chosen["candidates"]] == list(PRIOR_PENALTIES)
    assert [c["log_evidence"] for c in chosen["candidates"]] == list(
        refit.log_evidence_.values())
    assert chosen["chosen"] == {"prior_penalty": refit.prior_penalty_}
    assert "Prior('amv-guard v1 (calibrator sha256 " in result.config["calibrators"]["prior"]
    np.testing.assert_array_equal(
        result.oof["prior"],
        load_prior(shipped_v1).calibrator.predict(
            few_claims[list(CLAIM_FEATURES)].to_numpy(dtype=float)))


def test_without_a_prior_the_config_has_no_evidence(few_claims: pd.DataFrame) -> None:
    # the refits choose nothing by evidence: comparison.json stays as it was
    result = compare_calibrators(few_claims, n_boot=0)
    assert "chosen_by_evidence" not in result.config
    assert not any(hasattr(e, "log_evidence_") for e in result.estimators.values())


def test_the_folds_score_the_pulls_choice(shipped_v1: Path,
                                          few_claims: pd.DataFrame) -> None:
    # each fold's fit chooses its pull on its training rows alone: the out-of-fold
    # predictions are those of a calibrator fitted there, choice included
    result = compare_calibrators(few_claims, calibrators=["platt"], n_boot=0, refit=False,
                                 prior=str(shipped_v1), folds=3)
    prior = load_prior(shipped_v1)
    X = few_claims[list(CLAIM_FEATURES)]
    y = few_claims["violated"].to_numpy()
    fold = make_folds(few_claims, folds=3)
    for k in range(3):
        test = fold == k
        fitted = PriorPlattCalibrator(prior=prior).fit(X[~test], y[~test])
        np.testing.assert_array_equal(result.oof["platt_prior"][test],
                                      fitted.predict_proba(X[test])[:, 1])


def test_log_evidence_of_an_intercept_is_the_integral_it_approximates() -> None:
    # one parameter: the marginal likelihood is a 1-D integral quadrature computes; the
    # Laplace approximation agrees to O(1/n)
    rng = np.random.default_rng(3)
    y = (rng.random(400) < 0.3).astype(float)
    w = np.ones_like(y)
    F = np.empty((y.size, 0))
    k, n = float(y.sum()), float(y.size)
    for lam, centre in ((0.5, -0.2), (20.0, 0.4), (300.0, -0.85)):
        b, coef, _ = penalised_logistic(F, y, w, np.empty(0), intercept_centre=centre,
                                        intercept_penalty=lam, tol=1e-12)

        def loglik(t: float) -> float:
            return k * t - n * float(np.logaddexp(0.0, t))

        def integrand(t: float, b: float = b, lam: float = lam, centre: float = centre
                      ) -> float:
            return math.exp(loglik(t) - loglik(b)) * math.sqrt(lam / (2 * math.pi)) * \
                math.exp(-0.5 * lam * (t - centre) ** 2)

        exact = loglik(b) + math.log(quad(integrand, b - 2.0, b + 2.0, epsabs=0,
                                          epsrel=1e-12, points=[b])[0])
        got = log_evidence(F, y, w, b, coef, np.array([centre]), lam)
        assert got == pytest.approx(exact, abs=2e-3)


def test_log_evidence_of_two_parameters_is_the_sum_over_a_grid() -> None:
    # intercept and slope: the marginal likelihood summed over a fine grid
    rng = np.random.default_rng(4)
    x = rng.normal(size=600)
    y = (rng.random(600) < expit(-0.5 + 1.2 * x)).astype(float)
    w = np.ones_like(y)
    F = x[:, None]
    lam, centre = 4.0, np.array([0.0, 1.0])
    b, coef, _ = penalised_logistic(F, y, w, np.array([lam]), centre=centre[1:],
                                    intercept_centre=0.0, intercept_penalty=lam, tol=1e-12)
    step = 0.004
    g0 = b + step * np.arange(-150, 151)
    g1 = coef[0] + step * np.arange(-150, 151)
    T0, T1 = np.meshgrid(g0, g1, indexing="ij")
    z = T0[..., None] + T1[..., None] * x
    loglik = (y * z - np.logaddexp(0.0, z)).sum(axis=-1)
    logprior = (np.log(lam / (2 * math.pi))
                - 0.5 * lam * ((T0 - centre[0]) ** 2 + (T1 - centre[1]) ** 2))
    top = float((loglik + logprior).max())
    exact = top + math.log(float(np.exp(loglik + logprior - top).sum()) * step * step)
    got = log_evidence(F, y, w, b, coef, centre, lam)
    assert got == pytest.approx(exact, abs=5e-3)


def test_the_evidence_holds_a_true_prior_and_lets_a_wrong_one_go(
        shipped_v1: Path, few_claims: pd.DataFrame) -> None:
    prior = load_prior(shipped_v1)
    X = few_claims[list(CLAIM_FEATURES)]
    z = prior.calibrator.intercept + prior.calibrator.feature_map.transform(X) @ np.asarray(
        prior.calibrator.coef)
    u = np.random.default_rng(5).random(len(X))
    for sign, lowest, highest in ((1.0, 1e4, math.inf), (-1.0, 0.0, 3.0)):
        # labels drawn from the prior itself, then from its mirror image
        y = (u < expit(sign * z)).astype(int)
        fitted = PriorPlattCalibrator(prior=prior).fit(X, y)
        assert list(fitted.log_evidence_) == list(PRIOR_PENALTIES)
        best = max(fitted.log_evidence_.values())
        assert fitted.prior_penalty_ == next(
            lam for lam, ev in fitted.log_evidence_.items() if ev == best)
        assert lowest <= fitted.prior_penalty_ <= highest
        fixed = PriorPlattCalibrator(prior=prior, prior_penalty=fitted.prior_penalty_).fit(X, y)
        np.testing.assert_array_equal(fitted.coef_, fixed.coef_)
        assert fitted.intercept_ == fixed.intercept_ and fixed.log_evidence_ == {}


@pytest.mark.parametrize("bad", [0.0, -1.0, math.nan, math.inf, True, "10"])
def test_a_bad_penalty_is_an_error_naming_it(shipped_v1: Path, few_claims: pd.DataFrame,
                                            bad: object) -> None:
    cal = PriorPlattCalibrator(prior=load_prior(shipped_v1), prior_penalty=bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"prior_penalty=.* must be None or a finite number > 0"):
        cal.fit(few_claims[list(CLAIM_FEATURES)], few_claims["violated"].to_numpy())


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
