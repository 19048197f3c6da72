"""A comparison with memory kinds in MLflow: the kinds figure and table among the compare
files, a run per calibrator and baseline, no portable form for a baseline."""

from __future__ import annotations

from pathlib import Path

from mlflow import MlflowClient

from amv_calib import tracking
from amv_calib.calibration import compare_calibrators, write_comparison
from amv_calib.datasets import synth_kind_claims
from amv_calib.settings import FIELD_RULES


def test_kinds_comparison_is_logged(tmp_path: Path) -> None:
    claims = synth_kind_claims(2500, seed=3)
    result = compare_calibrators(claims, n_boot=10)
    files = write_comparison(result, tmp_path / "compare")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    with tracking.pipeline_run("retrain", tracking_uri=uri, params={"seed": 1}) as t:
        runs = t.log_comparison(result, files=files, claims=claims)
    assert runs is not None
    client = MlflowClient(tracking_uri=uri)
    logged = {a.path for a in client.list_artifacts(t.run_id, "compare")}
    assert {"compare/kinds_staleness.png", "compare/kinds.md"} <= logged
    assert set(FIELD_RULES) <= set(runs.calibrator_runs)
    rule_files = {a.path for a in client.list_artifacts(runs.calibrator_runs["power-law"])}
    assert not any(p.endswith(".json") and "calibrator" in p for p in rule_files)
