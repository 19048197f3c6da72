"""Champion and challenger: what earns production, and the registry mirror of the aliases."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from sklearn.metrics import log_loss

from amv_calib.artifacts import decide_promotion, export_artifact, paired_log_loss
from amv_calib.claims import load_claims
from amv_calib.contract import (
    LoadedArtifact,
    PortableCalibrator,
    calibrator_sha256,
    check_thresholds,
    load_artifact,
    seed_prior_calibrator,
    with_gate_clamp,
)


@pytest.fixture(scope="module")
def holdout(sample_dir: Path) -> pd.DataFrame:
    claims, _ = load_claims(sample_dir / "claims.csv")
    return claims.tail(3000)


def _certificate(thresholds: dict[str, Any], alpha: float = 0.01,
                 delta: float = 0.05) -> dict[str, Any]:
    t = check_thresholds(thresholds)
    return {"alpha": alpha, "delta": delta, "n": 900, "chosen": 0, "thresholds": t,
            "path": [t], "harms": [1], "observed_upper_bound": 0.0052}


def _export(models: Path, calibrator: Any, thresholds: dict[str, Any],
            certificate: dict[str, Any] | None, claims: Any = None) -> LoadedArtifact:
    if certificate is not None:  # bound to the calibrator as export writes it
        cal = calibrator if isinstance(calibrator, PortableCalibrator) else \
            PortableCalibrator.from_dict(json.loads(Path(calibrator).read_text()))
        cal, gate = with_gate_clamp(cal, check_thresholds(thresholds))
        certificate = {**certificate, "calibrator_sha256": calibrator_sha256(cal),
                       "thresholds": gate, "path": [gate]}
    res = export_artifact(calibrator=calibrator, thresholds=thresholds, name="m",
                          models_dir=models, certificate=certificate, include_joblib=False,
                          claims=claims)
    return load_artifact(res.path)


@pytest.fixture
def thresholds(repo_root: Path) -> dict[str, Any]:
    gate: dict[str, Any] = json.loads(
        (repo_root / "models" / "amv-guard" / "v1" / "manifest.json").read_text())["gate"]
    return gate


@pytest.fixture
def fitted(repo_root: Path) -> Path:
    return repo_root / "models" / "amv-guard" / "v1" / "calibrator.json"


def test_a_challenger_without_a_certificate_stays_challenger(
        tmp_path: Path, fitted: Path, thresholds: dict[str, Any],
        holdout: pd.DataFrame) -> None:
    art = _export(tmp_path, fitted, thresholds, None)
    d = decide_promotion(art, None, holdout, alpha=0.01, delta=0.05)
    assert not d.promote and not d.certificate_ok
    assert "carries no certificate" in d.reasons[0]


def test_a_certificate_weaker_than_required_is_not_enough(
        tmp_path: Path, fitted: Path, thresholds: dict[str, Any],
        holdout: pd.DataFrame) -> None:
    art = _export(tmp_path, fitted, thresholds, _certificate(thresholds, alpha=0.05))
    d = decide_promotion(art, None, holdout, alpha=0.01, delta=0.05)
    assert not d.promote and "required alpha <= 0.01" in d.reasons[0]


def test_a_certified_first_version_is_promoted(tmp_path: Path, fitted: Path,
                                               thresholds: dict[str, Any],
                                               holdout: pd.DataFrame) -> None:
    art = _export(tmp_path, fitted, thresholds, _certificate(thresholds))
    d = decide_promotion(art, None, holdout, alpha=0.01, delta=0.05)
    assert d.promote and d.reasons[2] == ("not worse than production beyond noise: yes -- no "
                                          "production version yet")
    assert [r.split(":")[0] for r in d.reasons] == [
        "certified", "beats the constant prediction beyond noise",
        "not worse than production beyond noise"]


def test_a_worse_calibrator_is_refused_even_when_certified(
        tmp_path: Path, fitted: Path, thresholds: dict[str, Any],
        holdout: pd.DataFrame) -> None:
    production = _export(tmp_path, fitted, thresholds, _certificate(thresholds))
    seed_thresholds = {**thresholds, "clamp": None}
    challenger = _export(tmp_path, seed_prior_calibrator(), seed_thresholds,
                         _certificate(seed_thresholds))
    d = decide_promotion(challenger, production, holdout, alpha=0.01, delta=0.05,
                         n_boot=300)
    assert d.certificate_ok and not d.promote
    assert any("worse than production v1's" in r and "beyond noise" in r for r in d.reasons)
    # the reverse is welcome: the fitted calibrator beats the seed prior
    assert decide_promotion(production, challenger, holdout, alpha=0.01, delta=0.05,
                            n_boot=300).promote


def test_paired_log_loss_against_sklearn(tmp_path: Path, fitted: Path,
                                         thresholds: dict[str, Any],
                                         holdout: pd.DataFrame) -> None:
    a = _export(tmp_path, fitted, thresholds, None)
    b = _export(tmp_path, seed_prior_calibrator(), {**thresholds, "clamp": None}, None)
    got = paired_log_loss(holdout, a, b, n_boot=200, seed=1)
    X = holdout[["recency_hours", "source_trust_score", "model_confidence",
                 "contradiction_flag"]].to_numpy(dtype=float)
    y = holdout["violated"].to_numpy(dtype=float)
    la = log_loss(y, a.calibrator.predict(X), labels=[0, 1])
    lb = log_loss(y, b.calibrator.predict(X), labels=[0, 1])
    assert got["challenger_log_loss"] == pytest.approx(la, rel=1e-9)
    assert got["production_log_loss"] == pytest.approx(lb, rel=1e-9)
    assert got["difference"] == pytest.approx(la - lb, rel=1e-9)
    low, high = got["difference_ci95"]
    assert low <= got["difference"] <= high
    assert paired_log_loss(holdout, a, b, n_boot=200, seed=1) == got  # seeded
    # identical calibrators: no difference, and promotion is not refused for it
    same = paired_log_loss(holdout, a, a, n_boot=50)
    assert same["difference"] == 0.0 and same["difference_ci95"] == [0.0, 0.0]
    assert np.isfinite(got["difference"])


def test_a_calibrator_that_does_not_beat_its_base_rate_is_refused(
        tmp_path: Path, fitted: Path, thresholds: dict[str, Any], holdout: pd.DataFrame,
        sample_dir: Path) -> None:
    # The acceptance case "labels shuffled": judged on shuffled new labels, production looks
    # no better than the challenger, so only the skill over a constant prediction catches it.
    training, _ = load_claims(sample_dir / "claims.csv")
    art = _export(tmp_path, fitted, thresholds, _certificate(thresholds),
                  claims=training.head(8000))
    assert decide_promotion(art, None, holdout, alpha=0.01, delta=0.05, n_boot=300).promote
    shuffled = holdout.copy()
    shuffled["violated"] = np.random.default_rng(0).permutation(shuffled["violated"].to_numpy())
    d = decide_promotion(art, None, shuffled, alpha=0.01, delta=0.05, n_boot=300)
    assert d.certificate_ok and not d.promote
    assert "does not beat the constant prediction of its training violation rate" in \
        d.reasons[1] and d.reasons[1].startswith("beats the constant prediction beyond noise: NO")
    skill = d.holdout["skill"]
    rate = training.head(8000)["violated"].mean()
    by_hand = log_loss(shuffled["violated"].to_numpy(dtype=float),
                       np.full(len(shuffled), rate), labels=[0, 1])
    assert skill["production_log_loss"] == pytest.approx(by_hand, rel=1e-9)
