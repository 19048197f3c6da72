"""Stage folders for the MLflow tests: small claims, a compare DIR, a tuning DIR, an artifact.

``fake_compare_dir`` and ``fake_tune_dir`` write the BRIEF's layouts by hand (numbers worked
out here, independently of the stages), so tracking is tested against known values; the
acceptance tests run the real stages instead.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from amv_calib.features import seed_prior_calibrator

CALIBRATORS = ("platt", "beta", "isotonic", "seed_prior")


def make_claims(n: int = 400, seed: int = 7) -> pd.DataFrame:
    """Claims drawn from the seed's own logistic model (so a fit has something to find)."""
    rng = np.random.default_rng(seed)
    df = pd.DataFrame({
        "claim_id": [f"c{i % (n // 2)}" for i in range(n)],
        "timestamp": 1_700_000_000 + np.arange(n) * 3600,
        "recency_hours": rng.uniform(0, 1500, n),
        "source_trust_score": rng.uniform(0, 1, n),
        "model_confidence": rng.uniform(0.02, 0.98, n),
        "contradiction_flag": rng.uniform(0, 1, n) < 0.15,
    })
    p = seed_prior_calibrator().predict(df)
    df["violated"] = rng.uniform(0, 1, n) < p
    df["p_true"] = p
    return df


def _reliability_bins(p: np.ndarray, y: np.ndarray, name: str, n_bins: int = 5
                      ) -> list[dict[str, Any]]:
    edges = np.linspace(0, 1, n_bins + 1)
    idx = np.clip(np.digitize(p, edges[1:-1]), 0, n_bins - 1)
    rows = []
    for b in range(n_bins):
        m = idx == b
        n = int(m.sum())
        if n == 0:
            continue
        rate = float(y[m].mean())
        half = 1.96 * np.sqrt(rate * (1 - rate) / n)
        rows.append({"calibrator": name, "bin": b, "mean_pred": float(p[m].mean()),
                     "observed": rate, "count": n, "observed_lo": max(0.0, rate - half),
                     "observed_hi": min(1.0, rate + half)})
    return rows


def fake_compare_dir(root: Path, claims: pd.DataFrame, claims_path: Path | None = None
                     ) -> Path:
    """A compare DIR: every calibrator is the seed formula with a different intercept."""
    out = root / "compare"
    (out / "calibrators").mkdir(parents=True)
    y = claims["violated"].to_numpy(dtype=float)
    entries, bins = [], []
    base = seed_prior_calibrator().to_dict()
    for k, name in enumerate(CALIBRATORS):
        cal = dict(base, intercept=base["intercept"] + 0.1 * k, source=name)
        (out / "calibrators" / f"{name}.json").write_text(json.dumps(cal), encoding="utf-8")
        from amv_calib.features import PortableCalibrator

        p = PortableCalibrator.from_dict(cal).predict(claims)
        ll = float(-np.mean(y * np.log(p) + (1 - y) * np.log(1 - p)))
        folds = [{"fold": f, "log_loss": ll + 0.01 * f, "brier": 0.1 + 0.001 * f,
                  "auc": 0.7 + 0.01 * f, "ece": 0.02 * (f + 1), "mce": 0.05, "smooth_ece": 0.01}
                 for f in range(3)]
        entries.append({
            "name": name, "log_loss": ll, "log_loss_lo": ll - 0.02, "log_loss_hi": ll + 0.02,
            "brier": 0.1 + k / 100, "brier_lo": 0.09, "brier_hi": 0.11, "auc": 0.7,
            "auc_lo": 0.65, "auc_hi": 0.75, "ece": 0.03, "ece_lo": 0.01, "ece_hi": 0.05,
            "ece_mass": 0.031, "mce": 0.08, "mce_lo": 0.04, "mce_hi": 0.12,
            "smooth_ece": 0.02, "smooth_ece_lo": 0.01, "smooth_ece_hi": 0.03,
            "params": {"C": 1.0} if name == "platt" else {},
            "folds": folds,
        })
        bins += _reliability_bins(p, y, name)
    champion = min(entries, key=lambda e: e["log_loss"])["name"]
    config = {"folds": 3, "split": "time", "scoring": "log_loss", "seed": 1, "n_boot": 50,
              "n_bins": 5}
    if claims_path is not None:
        config["claims"] = str(claims_path)
    (out / "comparison.json").write_text(json.dumps(
        {"champion": champion, "calibrators": entries, "config": config}), encoding="utf-8")
    pd.DataFrame([{k: v for k, v in e.items() if k not in ("params", "folds")}
                  for e in entries]).to_csv(out / "comparison.csv", index=False)
    (out / "comparison.md").write_text("| name |\n|---|\n", encoding="utf-8")
    pd.DataFrame(bins).to_csv(out / "reliability_bins.csv", index=False)
    (out / "champion.json").write_text(
        (out / "calibrators" / f"{champion}.json").read_text(encoding="utf-8"),
        encoding="utf-8")
    # A 1x1 PNG stands in for the compare stage's own overlay figure.
    (out / "reliability.png").write_bytes(_PNG_1X1)
    return out


def fake_tune_dir(root: Path, n_trials: int = 12) -> Path:
    """A tuning DIR as ``tune_thresholds(out_dir=...)`` writes it (multi-objective mode)."""
    out = root / "tune"
    out.mkdir(parents=True)
    thresholds = {"lambda_cost_scale": 0.5, "delta_loss_threshold": 8.0,
                  "epsilon_harm_bound": 0.04, "planner": "lookahead", "max_verifications": 3,
                  "clamp": [0.001, 0.999]}
    (out / "thresholds.json").write_text(json.dumps(thresholds), encoding="utf-8")
    num = np.arange(n_trials)
    trials = pd.DataFrame({
        "number": num,
        "state": ["COMPLETE"] * (n_trials - 1) + ["FAIL"],
        "lambda_cost_scale": 0.1 + 0.05 * num,
        "delta_loss_threshold": 5.0 + num,
        "epsilon_harm_bound": 0.01 + 0.002 * num,
        "max_verifications": 1 + num % 4,
        "gate_harmful": 0.05 - 0.001 * num,
        "verification_cost": 1.0 + 0.1 * num,
        "queries": 1.0 + 0.05 * num,
        "proceed_coverage": 0.5 + 0.01 * num,
        "abstention_rate": 0.2 - 0.005 * num,
        "total_loss": 10.0 - 0.5 * num,
        "feasible": [True] * (n_trials - 1) + [""],
    })
    trials.loc[n_trials - 1, ["gate_harmful", "total_loss"]] = np.nan
    trials.to_csv(out / "trials.csv", index=False)
    pd.DataFrame({"number": [3, 7], "gate_harmful": [0.01, 0.02],
                  "verification_cost": [1.5, 1.0]}).to_csv(out / "pareto.csv", index=False)
    (out / "pareto.png").write_bytes(_PNG_1X1)

    def ci(v: float) -> dict[str, float]:
        return {"value": v, "lo": v * 0.8, "hi": v * 1.2}

    tuned = {"gate_harmful": ci(0.01), "verification_cost": ci(1.1), "queries": ci(1.2),
             "proceed_coverage": ci(0.6), "abstention_rate": ci(0.3), "total_loss": ci(3.0)}
    proceed = {"gate_harmful": ci(0.3), "verification_cost": ci(0.0), "queries": ci(0.0),
               "proceed_coverage": ci(1.0), "abstention_rate": ci(0.0), "total_loss": ci(9.0)}
    report = {"study_name": "s", "storage": "journal", "mode": "multi", "planner": "lookahead",
              "target_harmful": 0.02, "calibrator": "champion.json", "seed": 5,
              "lambda_eval": 1.0, "thresholds": thresholds, "best_trial": 7,
              "tune_metrics": {"gate_harmful": 0.012, "total_loss": 2.9},
              "holdout": {"tuned": tuned, "baselines": {"always-proceed": proceed}},
              "n_tune": 40, "n_holdout": 40, "files": {}}
    (out / "tune_report.json").write_text(json.dumps(report), encoding="utf-8")
    return out


def fake_replay_json(root: Path) -> Path:
    """The ``amv-calib replay --json`` object of two policies."""
    path = root / "replay.json"
    replay = {"always-proceed": {"gate_harmful": 0.3, "verification_cost": 0.0, "queries": 0.0,
                                 "proceed_coverage": 1.0, "abstention_rate": 0.0,
                                 "total_loss": 9.0, "n": 50},
              "lookahead": {"gate_harmful": 0.01, "verification_cost": 1.1, "queries": 1.2,
                            "proceed_coverage": 0.6, "abstention_rate": 0.3,
                            "total_loss": 3.0, "n": 50}}
    path.write_text(json.dumps(replay), encoding="utf-8")
    return path


_PNG_1X1 = bytes.fromhex(
    "89504e470d0a1a0a0000000d49484452000000010000000108060000001f15c489"
    "0000000b49444154789c6360000200000500017a5eab3f0000000049454e44ae426082")
