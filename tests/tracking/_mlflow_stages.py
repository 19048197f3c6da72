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

from amv_calib.contract._features import seed_prior_calibrator

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
    """Equal-width and equal-mass bins with a normal-approximation interval."""
    rows = []
    for strategy in ("uniform", "quantile"):
        if strategy == "uniform":
            edges = np.linspace(0, 1, n_bins + 1)
        else:
            edges = np.quantile(p, np.linspace(0, 1, n_bins + 1))
        idx = np.clip(np.searchsorted(edges[1:-1], p, side="right"), 0, n_bins - 1)
        for b in range(n_bins):
            m = idx == b
            n = int(m.sum())
            if n == 0:
                continue
            rate = float(y[m].mean())
            half = 1.96 * np.sqrt(rate * (1 - rate) / n)
            rows.append({"calibrator": name, "strategy": strategy, "bin": b,
                         "bin_lower": float(edges[b]), "bin_upper": float(edges[b + 1]),
                         "count": n, "weight": float(n), "mean_pred": float(p[m].mean()),
                         "observed_rate": rate, "ci_low": max(0.0, rate - half),
                         "ci_high": min(1.0, rate + half)})
    return rows


METRIC_NAMES = ("log_loss", "brier", "auc", "ece", "ece_mass", "mce", "smooth_ece")


def fake_compare_dir(root: Path, claims: pd.DataFrame, claims_path: Path | None = None
                     ) -> Path:
    """A compare DIR in ``write_comparison``'s layout, with numbers made up here.

    Every calibrator is the seed formula with its own intercept; its log loss is computed
    here, the other metrics are arbitrary but distinct, so logged values can be traced back.
    """
    from amv_calib.contract._features import PortableCalibrator

    out = root / "compare"
    (out / "calibrators").mkdir(parents=True)
    y = claims["violated"].to_numpy(dtype=float)
    entries, bins, per_fold, table = [], [], [], []
    base = seed_prior_calibrator().to_dict()
    for k, name in enumerate(CALIBRATORS):
        cal = dict(base, intercept=base["intercept"] + 0.1 * k, source=name)
        (out / "calibrators" / f"{name}.json").write_text(json.dumps(cal), encoding="utf-8")
        p = PortableCalibrator.from_dict(cal).predict(claims)
        ll = float(-np.mean(y * np.log(p) + (1 - y) * np.log(1 - p)))
        values = {"log_loss": ll, "brier": 0.1 + k / 100, "auc": 0.7 - k / 100,
                  "ece": 0.03 + k / 1000, "ece_mass": 0.031, "mce": 0.08, "smooth_ece": 0.02}
        entry: dict[str, Any] = {"name": name, **values,
                                 "ci": {m: [v * 0.9, v * 1.1] for m, v in values.items()},
                                 "excess_log_loss": 0.01 * (k + 1),
                                 "excess_log_loss_ci": [0.005, 0.02 * (k + 1)],
                                 "excess_log_loss_rel": 0.03}
        entries.append(entry)
        table.append({"name": name, **{c: v for m, v in values.items() for c, v in
                                       ((m, v), (f"{m}_low", v * 0.9), (f"{m}_high", v * 1.1))}})
        per_fold += [{"calibrator": name, "fold": f, "log_loss": ll + 0.01 * f,
                      "brier": 0.1 + 0.001 * f, "auc": 0.7 + 0.01 * f, "ece": 0.02 * (f + 1),
                      "ece_mass": 0.03, "mce": 0.05, "smooth_ece": 0.01} for f in range(3)]
        bins += _reliability_bins(p, y, name)
    champion = min(entries, key=lambda e: e["log_loss"])["name"]
    for row in table:
        row["champion"] = row["name"] == champion
    config: dict[str, Any] = {
        "n_rows": len(claims), "folds": 3, "split": "time", "scoring": "log_loss",
        "tie_break": "brier", "n_bins": 5, "n_boot": 50, "alpha": 0.05, "seed": 1,
        "sample_weight": None,
        "calibrators": {n: f"{n.title()}Calibrator(C=1.0)" for n in CALIBRATORS},
        "oracle": True}
    if claims_path is not None:
        config["claims"] = str(claims_path)
    folds = [{"fold": f, "n_train": 2 * len(claims) // 3, "n_test": len(claims) // 3,
              "n_test_claims": len(claims) // 6} for f in range(3)]
    oracle = {"name": "oracle", "log_loss": 0.25, "brier": 0.08,
              "ci": {"log_loss": [0.24, 0.26]}}
    (out / "comparison.json").write_text(json.dumps(
        {"champion": champion, "scoring": "log_loss", "calibrators": entries,
         "oracle": oracle, "config": config, "folds": folds, "per_fold": per_fold}),
        encoding="utf-8")
    pd.DataFrame(table).to_csv(out / "comparison.csv", index=False)
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
