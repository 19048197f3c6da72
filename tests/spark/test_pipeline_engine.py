"""``[pipeline] engine = "spark"``: the compare step fits on Spark, the exported artifact's
manifest records the engine and the gate loads it; ``compare --engine spark`` from the CLI."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from amv_calib.artifacts import DEFAULT_THRESHOLDS
from amv_calib.cli import main
from amv_calib.contract import load_artifact
from amv_calib.datasets import synth_claims
from amv_calib.exceptions import ConfigError
from amv_calib.pipeline import load_pipeline, run_pipeline

_PIPELINE = """
[pipeline]
name = "spark-retrain"
workdir = "work"
models_dir = "models"
tracking = false
engine = "spark"
spark_master = "local[2]"

[[steps]]
name = "ingest"
kind = "ingest"
input = "claims.csv"

[[steps]]
name = "compare"
kind = "compare"
claims = "@ingest.claims"
folds = 2
n_boot = 0

[[steps]]
name = "export"
kind = "export"
calibrator = "@compare.dir"
thresholds = "thresholds.json"
claims = "@compare.training"
"""


def test_pipeline_on_spark_records_the_engine(spark: Any, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    # Two calibrators keep the Spark fits few (the equalities are test_compare.py's).
    import amv_calib.calibration._compare as compare_module

    monkeypatch.setattr(compare_module, "DEFAULT_CALIBRATORS", ("platt", "seed_prior"))
    synth_claims(2_500, seed=2).to_csv(tmp_path / "claims.csv", index=False)
    (tmp_path / "thresholds.json").write_text(json.dumps(DEFAULT_THRESHOLDS))
    (tmp_path / "retrain.toml").write_text(_PIPELINE)
    spec = load_pipeline(tmp_path / "retrain.toml")
    assert (spec.engine, spec.spark_master) == ("spark", "local[2]")
    result = run_pipeline(spec)
    artifact = Path(result.steps[-1].outputs["artifact"])
    manifest = json.loads((artifact / "manifest.json").read_text())
    assert manifest["engine"] == "spark"
    comparison = json.loads((tmp_path / "work" / "compare" / "comparison.json").read_text())
    assert comparison["config"]["engine"] == "spark"
    loaded = load_artifact(artifact)
    assert 0.0 < loaded.calibrator.predict_one({
        "recency_hours": 10.0, "source_trust_score": 0.8, "model_confidence": 0.9,
        "contradiction_flag": 0.0}) < 1.0


@pytest.mark.parametrize(("given", "expected"), [
    (None, None), ("scratch", "{tmp}/scratch"), ("s3://bucket/amv", "s3://bucket/amv")],
    ids=["absent", "relative-folder", "uri"])
def test_spark_scratch_is_a_folder_beside_the_pipeline_file_or_a_uri(
        tmp_path: Path, given: str | None, expected: str | None) -> None:
    head = _PIPELINE if given is None else _PIPELINE.replace(
        'spark_master = "local[2]"', f'spark_master = "local[2]"\nspark_scratch = "{given}"')
    (tmp_path / "claims.csv").write_text("")  # the inputs must exist; not read here
    (tmp_path / "thresholds.json").write_text("{}")
    (tmp_path / "retrain.toml").write_text(head)
    spec = load_pipeline(tmp_path / "retrain.toml")
    want = None if expected is None else expected.format(tmp=tmp_path.resolve())
    assert spec.spark_scratch == want


def test_unknown_engine_is_refused(tmp_path: Path) -> None:
    synth_claims(100, seed=2).to_csv(tmp_path / "claims.csv", index=False)
    (tmp_path / "thresholds.json").write_text(json.dumps(DEFAULT_THRESHOLDS))
    (tmp_path / "retrain.toml").write_text(_PIPELINE.replace('"spark"', '"dask"', 1))
    with pytest.raises(ConfigError, match="engine"):
        load_pipeline(tmp_path / "retrain.toml")


def test_cli_compare_engine_spark(spark: Any, tmp_path: Path,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    synth_claims(3_000, seed=4).to_parquet(tmp_path / "claims.parquet", index=False)
    code = main(["compare", str(tmp_path / "claims.parquet"), "--out", str(tmp_path / "cmp"),
                 "--engine", "spark", "--spark-master", "local[2]", "--folds", "2",
                 "--n-boot", "0", "--calibrators", "platt,seed_prior", "--json"])
    assert code == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["champion"] == "platt"
    assert (tmp_path / "cmp" / "champion.json").is_file()


_LABEL_PIPELINE = """
[pipeline]
name = "label-on-{engine}"
workdir = "work-{engine}"
models_dir = "models"
tracking = false
engine = "{engine}"
spark_master = "local[2]"

[[steps]]
name = "label"
kind = "label"
decisions = ["{log}"]
outcomes = ["{outcomes}"]
min_verifier_calls = 5
"""


def test_pipeline_label_step_on_spark_writes_the_same_files(repo_root: Path, spark: Any,
                                                             tmp_path: Path) -> None:
    logs = sorted((repo_root / "data" / "examples" / "logs").glob("decisions*.jsonl"))
    outcomes = repo_root / "data" / "examples" / "logs" / "outcomes.csv"
    for engine in ("local", "spark"):
        path = tmp_path / f"{engine}.toml"
        path.write_text(_LABEL_PIPELINE.format(engine=engine, log=logs[0], outcomes=outcomes))
        spec = load_pipeline(path)
        assert spec.engine == engine
        run_pipeline(spec)
    for name in ("claims.parquet", "claims.unjoined.csv", "episodes.jsonl", "verifiers.json"):
        assert (tmp_path / "work-spark" / "label" / name).read_bytes() == \
            (tmp_path / "work-local" / "label" / name).read_bytes(), name
