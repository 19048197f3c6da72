"""Kind-aware calibrators, the field's staleness rules, and what the comparison does with
them."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from sklearn.linear_model import LogisticRegression

from amv_calib.calibration import (
    RICH_BETA_EXTRA_MAP,
    RICH_PLATT_MAP,
    BetaCalibrator,
    KindBetaCalibrator,
    KindIsotonicCalibrator,
    KindPlattCalibrator,
    PlattCalibrator,
    compare_calibrators,
    field_rule_score,
    penalised_logistic,
    write_comparison,
)
from amv_calib.calibration._kindcurves import kind_age_curves
from amv_calib.contract import CLAIM_FEATURES, FeatureMap, PortableCalibrator, Term
from amv_calib.settings import DEFAULT_CALIBRATORS, FIELD_RULES, KIND_CALIBRATORS


def _xy(claims: pd.DataFrame) -> tuple[pd.DataFrame, np.ndarray]:
    return claims[[*CLAIM_FEATURES, "memory_kind"]], claims["violated"].to_numpy()


def _intercepts_only(claims: pd.DataFrame) -> tuple[KindPlattCalibrator, pd.DataFrame]:
    """A kind-aware Platt fit whose only terms are the kind intercepts (one pooled term that
    is 0 on every row), next to no shrinkage; and the frame it was fitted on."""
    X, y = _xy(claims)
    X = X.assign(contradiction_flag=0.0)
    only = FeatureMap((Term(column="contradiction_flag", transform="indicator"),))
    return KindPlattCalibrator(feature_map=only, kind_terms=(), kind_penalty=1e-9,
                               min_kind_uses=1).fit(X, y), X


@pytest.mark.parametrize("C", [1.0, 0.05], ids=["C=1", "C=0.05"])
def test_penalised_logistic_is_sklearns_l2_fit(kind_claims: pd.DataFrame, C: float) -> None:
    X, y = _xy(kind_claims)
    F = RICH_PLATT_MAP.transform(X[list(CLAIM_FEATURES)].to_numpy(dtype=float))
    b, coef, _ = penalised_logistic(F, y.astype(float), np.ones(y.size),
                                    np.full(F.shape[1], 1.0 / C), tol=1e-10)
    ref = LogisticRegression(C=C, solver="newton-cholesky", tol=1e-12, max_iter=500).fit(F, y)
    np.testing.assert_allclose(b, ref.intercept_[0], atol=2e-6)
    np.testing.assert_allclose(coef, ref.coef_[0], atol=2e-6)


def test_kind_intercepts_alone_give_each_kinds_rate(kind_claims: pd.DataFrame) -> None:
    # One pooled term that is 0 on every row and no kind term: logit p = b + delta_k; with
    # next to no shrinkage each kind's probability is its empirical rate (the closed form).
    cal, X = _intercepts_only(kind_claims)
    p = cal.predict_proba(X)[:, 1]
    for kind, group in kind_claims.groupby("memory_kind"):
        mask = (kind_claims["memory_kind"] == kind).to_numpy()
        assert p[mask] == pytest.approx(group["violated"].mean(), abs=1e-6), kind


@pytest.mark.parametrize(("kind_cls", "pooled"), [
    (KindPlattCalibrator, lambda: PlattCalibrator(feature_map=RICH_PLATT_MAP)),
    (KindBetaCalibrator, lambda: BetaCalibrator(extra_map=RICH_BETA_EXTRA_MAP)),
], ids=["platt", "beta"])
def test_infinite_shrinkage_is_the_pooled_fit(kind_claims: pd.DataFrame, kind_cls: type,
                                              pooled: type) -> None:
    X, y = _xy(kind_claims)
    kinded = kind_cls(kind_penalty=1e10).fit(X, y).predict_proba(X)[:, 1]
    plain = pooled().fit(X[list(CLAIM_FEATURES)], y).predict_proba(
        X[list(CLAIM_FEATURES)])[:, 1]
    np.testing.assert_allclose(kinded, plain, atol=1e-4)


def test_rare_and_unknown_kinds_are_other(kind_claims: pd.DataFrame) -> None:
    X, y = _xy(kind_claims)
    X = X.copy()
    X.loc[X.index[:40], "memory_kind"] = "rare"
    cal = KindPlattCalibrator(min_kind_uses=100).fit(X, y)
    assert "rare" not in cal.kinds_ and "other" in cal.kinds_
    assert cal.kind_uses_["other"] == 40
    probe = X.iloc[:3].copy()
    as_other = cal.predict_proba(probe.assign(memory_kind="other"))[:, 1]
    for unknown in ("never-seen", None, "rare"):
        got = cal.predict_proba(probe.assign(memory_kind=unknown))[:, 1]
        np.testing.assert_array_equal(got, as_other)


@pytest.mark.parametrize("cls", [KindPlattCalibrator, KindBetaCalibrator,
                                 KindIsotonicCalibrator], ids=["platt", "beta", "isotonic"])
def test_portable_form_predicts_the_same(kind_claims: pd.DataFrame, cls: type) -> None:
    X, y = _xy(kind_claims)
    cal = cls().fit(X, y)
    doc = json.loads(json.dumps(cal.to_portable().to_dict()))
    assert doc["format_version"] == 2 and doc["kinds"] == list(cal.kinds_)
    back = PortableCalibrator.from_dict(doc)
    got = back.predict(X[list(CLAIM_FEATURES)].to_numpy(dtype=float),
                       memory_kinds=X["memory_kind"].tolist())
    np.testing.assert_array_equal(got, cal.predict_proba(X)[:, 1])
    one = back.predict_one(X.iloc[0][list(CLAIM_FEATURES)].astype(float).to_dict(),
                           memory_kind=str(X["memory_kind"].iloc[0]))
    assert one == pytest.approx(got[0], rel=1e-12)


def test_curve_interval_is_the_binomial_standard_error(kind_claims: pd.DataFrame) -> None:
    # Kind intercepts alone: the logit of each kind's rate has the textbook standard error
    # 1 / sqrt(n p (1 - p)); the Laplace interval of the curves must give it.
    cal, _ = _intercepts_only(kind_claims)
    curves = kind_age_curves(cal, kind_claims, ages=np.array([1.0, 100.0]))
    for kind, group in kind_claims.groupby("memory_kind"):
        n, rate = len(group), group["violated"].mean()
        row = curves[curves["memory_kind"] == kind].iloc[0]
        half = (math.log(row["p_high"] / (1 - row["p_high"]))
                - math.log(row["p"] / (1 - row["p"])))
        assert half == pytest.approx(1.959964 / math.sqrt(n * rate * (1 - rate)), rel=1e-3)


def test_field_rule_scores_by_hand() -> None:
    X = pd.DataFrame({"recency_hours": [45 * 24.0, 15 * 24.0, 24.0],
                      "source_trust_score": [0.5] * 3, "model_confidence": [0.8] * 3,
                      "contradiction_flag": [0.0] * 3,
                      "memory_kind": ["fact", "event", "preference"]})
    assert field_rule_score("halflife-45d", X)[0] == pytest.approx(0.5)
    assert field_rule_score("halflife-90d-weighted", X)[1] == pytest.approx(
        0.8 * 2 ** (-15 / 90) * 0.6)
    np.testing.assert_allclose(field_rule_score("windows-per-kind", X), [0.0, -0.5, 0.0])
    assert field_rule_score("power-law", X)[2] == pytest.approx(2 ** -0.1)
    with pytest.raises(ValueError, match="rule='decay' must be one of"):
        field_rule_score("decay", X)


def test_without_kinds_the_comparison_is_unchanged(kind_claims: pd.DataFrame) -> None:
    plain = kind_claims.drop(columns="memory_kind")
    one_kind = kind_claims.assign(memory_kind="fact")
    a = compare_calibrators(plain, n_boot=0, refit=False)
    b = compare_calibrators(one_kind, n_boot=0, refit=False)
    assert list(a.oof) == list(DEFAULT_CALIBRATORS)
    assert "baseline" not in a.table.columns and "chosen_by_folds" not in a.config
    pd.testing.assert_frame_equal(a.table, b.table)


@pytest.mark.slow
def test_kinds_add_calibrators_and_baselines(kind_claims: pd.DataFrame,
                                             tmp_path: Path) -> None:
    result = compare_calibrators(kind_claims, n_boot=20)
    assert list(result.oof) == [*DEFAULT_CALIBRATORS, *KIND_CALIBRATORS, *FIELD_RULES]
    table = result.table.set_index("name")
    assert not table.loc[list(FIELD_RULES), "champion"].any()
    assert table.loc[list(FIELD_RULES), "baseline"].all()
    assert result.champion in KIND_CALIBRATORS
    # beyond the intervals: the champion's excess log loss over the oracle lies below the
    # pooled champion's and every rule's (paired intervals over the same resamples)
    high = table.loc[result.champion, "excess_log_loss_high"]
    pooled = min(("platt", "beta", "isotonic"), key=lambda n: table.loc[n, "log_loss"])
    for other in (pooled, *FIELD_RULES):
        assert high < table.loc[other, "excess_log_loss_low"], other
    chosen = result.config["chosen_by_folds"]["platt_kind"]
    best = min(chosen["candidates"], key=lambda c: c["log_loss"])
    assert chosen["chosen"]["kind_penalty"] == best["kind_penalty"]
    assert math.isclose(best["log_loss"], table.loc["platt_kind", "log_loss"], rel_tol=1e-12)
    write_comparison(result, tmp_path)
    written = {p.name for p in (tmp_path / "calibrators").glob("*.json")}
    assert written == {f"{n}.json" for n in (*DEFAULT_CALIBRATORS, *KIND_CALIBRATORS)}
    assert "(baseline)" in (tmp_path / "comparison.md").read_text()
    assert (tmp_path / "kinds_staleness.png").stat().st_size > 0
    ages = pd.read_csv(tmp_path / "kinds.csv")
    assert list(ages["memory_kind"]) == list(result.estimators["platt_kind"].kinds_)
    fast = ages.set_index("memory_kind")
    # the world's deployments go stale in days, its facts in years
    assert fast.loc["deployment", "verify_from_hours"] < fast.loc["fact", "verify_from_hours"]
