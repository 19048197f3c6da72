"""Fixtures of the integration tests: a LiveGate on a promoted version."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from amv_calib.artifacts import export_artifact, promote
from amv_calib.contract import seed_prior_calibrator
from amv_calib.gate import LiveGate


@pytest.fixture
def live(tmp_path: Path) -> Iterator[LiveGate]:
    """A LiveGate on models/amv-guard@production (the seed prior, default thresholds),
    logging to tmp_path/decisions.jsonl."""
    models = tmp_path / "models"
    export_artifact(calibrator=seed_prior_calibrator(), name="amv-guard", models_dir=models,
                    include_joblib=False)
    promote("amv-guard", "v1", alias="production", models_dir=models)
    gate = LiveGate(f"{models / 'amv-guard'}@production",
                    decision_log=tmp_path / "decisions.jsonl")
    yield gate
    gate.close()
