"""Declarative pipelines: validation, the retrain job end to end, skipping, recovery."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from amv_calib import ConfigError, PipelineError
from amv_calib.cli import main
from amv_calib.pipeline import pipeline_report
from amv_calib.pipeline._runner import load_pipeline, run_pipeline


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def small_data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from amv_calib.datasets._synth import synth_claims, synth_episodes, write_claims, write_episodes

    d = tmp_path_factory.mktemp("pipeline-data")
    claims = write_claims(synth_claims(4000, seed=11), d / "claims.csv")
    episodes = write_episodes(synth_episodes(400, seed=12), d / "episodes.jsonl")
    return {"claims": claims, "episodes": episodes, "dir": d}


def _retrain_toml(folder: Path, data: dict[str, Path], *, tracking: bool,
                  trials: int = 8) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    return _write(folder / "retrain.toml", f"""
[pipeline]
name = "retrain"
workdir = "work"
models_dir = "models"
seed = 7
tracking = {str(tracking).lower()}
tracking_uri = "sqlite:///{folder / 'mlflow.db'}"

[[steps]]
name = "ingest"
kind = "ingest"
input = "{data['claims']}"

[[steps]]
name = "compare"
kind = "compare"
claims = "@ingest.claims"
folds = 3
n_boot = 20
holdout_newest = 0.2

[[steps]]
name = "tune"
kind = "tune"
calibrator = "@compare.champion"
episodes = "{data['episodes']}"
trials = {trials}
target_harmful = 0.05

[[steps]]
name = "certify"
kind = "certify"
calibrator = "@tune.calibrator"
thresholds = "@tune.thresholds"
episodes = "{data['episodes']}"
tuning = "@tune.tuning"
test_fraction = 0.5
alpha = 0.05
delta = 0.1

[[steps]]
name = "export"
kind = "export"
calibrator = "@compare.dir"
thresholds = "@certify.thresholds"
certificate = "@certify.certificate"
claims = "@compare.training"
model = "amv-guard"

[[steps]]
name = "promote"
kind = "promote"
artifact = "@export.artifact"
holdout = "@compare.holdout"
alpha = 0.05
delta = 0.1

[[steps]]
name = "register"
kind = "register"
artifact = "@export.artifact"
""")


# -- validation ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("[pipline]\nname='x'\n", r"unknown top-level keys \['pipline'\]"),
        ("[pipeline]\ncolour='red'\n[[steps]]\nkind='ingest'\ninput='in.csv'\n",
         r"\[pipeline\] has unknown keys \['colour'\]"),
        ("[[steps]]\nkind='train'\n", r"kind='train' is not one of"),
        ("[[steps]]\nkind='ingest'\ninput='in.csv'\nfolds=3\n", r"unknown keys \['folds'\]"),
        ("[[steps]]\nkind='ingest'\n", r"missing required key 'input'"),
        ("[[steps]]\nkind='ingest'\ninput='nowhere.csv'\n", r"input='nowhere.csv' not found"),
        ("[[steps]]\nkind='ingest'\ninput='in.csv'\n[[steps]]\nkind='compare'\n"
         "claims='@train.claims'\n", r"must refer to an earlier step"),
        ("[[steps]]\nkind='ingest'\ninput='in.csv'\n[[steps]]\nkind='ingest'\ninput='in.csv'\n",
         r"duplicate step name 'ingest'"),
        ("[[steps]]\nkind='ingest'\ninput='in.csv'\n[[steps]]\nkind='compare'\n"
         "claims='@ingest.claims'\nfolds='five'\n", r"\(compare\): compare.folds='five' must be an "
         "integer"),
        ("[[steps]]\nkind='ingest'\ninput='in.csv'\n[[steps]]\nkind='compare'\n"
         "claims='@ingest.claims'\nfolds=true\n", r"compare.folds=True must be an integer"),
        ("[pipeline\n", r"not valid TOML"),
    ],
    ids=["top-key", "pipeline-key", "kind", "param", "required", "missing-file", "bad-ref",
         "duplicate", "type", "bool-is-not-int", "toml-syntax"],
)
def test_invalid_pipeline_files_are_refused(tmp_path: Path, body: str, message: str) -> None:
    _write(tmp_path / "in.csv", "claim_id\n")
    with pytest.raises(ConfigError, match=message):
        load_pipeline(_write(tmp_path / "p.toml", body))


def test_overrides_and_relative_paths(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    _write(tmp_path / "sub" / "in.csv", "claim_id\n")
    toml = _write(tmp_path / "p.toml", "[pipeline]\nworkdir='w'\n[[steps]]\nkind='ingest'\n"
                  "input='sub/in.csv'\n[[steps]]\nkind='compare'\nclaims='@ingest.claims'\n")
    spec = load_pipeline(toml, ["compare.folds=3", "pipeline.seed=5", "compare.split=group"])
    assert spec.workdir == tmp_path / "w"
    assert spec.seed == 5
    assert spec.steps[0].params["input"] == tmp_path / "sub" / "in.csv"
    assert spec.steps[1].params["folds"] == 3
    assert spec.steps[1].params["split"] == "group"
    with pytest.raises(ConfigError, match="no step named 'tune'"):
        load_pipeline(toml, ["tune.trials=3"])
    with pytest.raises(ConfigError, match="expected KEY=VALUE"):
        load_pipeline(toml, ["compare.folds"])


def test_shipped_pipeline_files_validate(repo_root: Path) -> None:
    for name in ("retrain", "tune", "evaluate"):
        spec = load_pipeline(repo_root / "pipelines" / f"{name}.toml")
        assert spec.name == name
        assert spec.steps


# -- running ------------------------------------------------------------------------------
def test_failed_step_names_itself_and_leaves_nothing(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    bad = _write(tmp_path / "bad.csv",
                 "claim_id,timestamp,recency_hours,source_trust_score,model_confidence,"
                 "contradiction_flag,violated\nc1,2026-01-01T00:00:00Z,-1,2,0.5,maybe,no\n")
    toml = _write(tmp_path / "p.toml", f"[pipeline]\nworkdir='w'\ntracking=false\n"
                  f"[[steps]]\nkind='ingest'\ninput='{bad}'\n")
    with pytest.raises(PipelineError, match="step 'ingest' failed: no row of bad.csv"):
        run_pipeline(load_pipeline(toml))
    assert not (tmp_path / "w" / "ingest").exists()
    assert not [p for p in (tmp_path / "w").iterdir() if ".partial-" in p.name]
    assert main(["run", str(toml)]) == 1
    assert "step 'ingest' failed" in capsys.readouterr().err


@pytest.mark.slow
def test_retrain_end_to_end_then_skip(tmp_path: Path, small_data: dict[str, Path],
                                      monkeypatch: pytest.MonkeyPatch,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    from mlflow import MlflowClient

    from amv_calib.artifacts._bundle import verify_artifact

    toml = _retrain_toml(tmp_path / "job", small_data, tracking=True)
    monkeypatch.chdir(tmp_path / "job")  # MLflow puts mlruns/ beside the working directory
    assert main(["run", str(toml)]) == 0
    report = capsys.readouterr().out
    for heading in ("## calibrator comparison (champion:", "## tuning: 8 trials",
                    "## replay of the certified gate on held-out episodes",
                    "## artifact: amv-guard v1", "gate thresholds (the manifest's):",
                    "## MLflow model: v1 registered as amv-guard-calibrator (MLflow version 1) "
                    "@champion",
                    "mlflow ui --backend-store-uri"):  # .venv/bin/mlflow off the venv
        assert heading in report
    for policy in ("Always Proceed", "Always Verify", "Seed engine", "AMV-Guard (lookahead)",
                   "Oracle"):
        assert policy in report

    art = tmp_path / "job" / "models" / "amv-guard" / "v1"
    summary = verify_artifact(art)
    assert summary["version"] == "v1"
    th = json.loads((tmp_path / "job" / "work" / "tune" / "thresholds.json").read_text())
    assert set(th) >= {"lambda_cost_scale", "delta_loss_threshold", "epsilon_harm_bound",
                       "planner", "max_verifications"}
    manifest = json.loads((art / "manifest.json").read_text())
    assert manifest["gate"]["epsilon_harm_bound"] == th["epsilon_harm_bound"]
    aliases = json.loads((tmp_path / "job" / "models" / "amv-guard" / "aliases.json").read_text())
    assert "production" in json.dumps(aliases)

    client = MlflowClient(f"sqlite:///{tmp_path / 'job' / 'mlflow.db'}")
    mv = client.get_model_version_by_alias("amv-guard-calibrator", "champion")
    assert str(mv.version) == "1"

    # Second run: every step unchanged -> skipped, no new artifact version.
    assert main(["run", str(toml), "--json"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert [s["status"] for s in again["steps"]] == ["skipped"] * 7
    assert again["mlflow_run_id"] is None
    assert not (art.parent / "v2").exists()

    # Forced: every step runs again, and the export finds v1 already holds that content.
    assert main(["run", str(toml), "--json", "--no-tracking", "--force"]) == 0
    forced = json.loads(capsys.readouterr().out)
    assert [s["status"] for s in forced["steps"]] == ["ran"] * 7
    assert forced["steps"][4]["outputs"]["reused"] is True
    assert not (art.parent / "v2").exists()

    # A changed parameter re-runs that step and everything downstream of it only.
    assert main(["run", str(toml), "--json", "--no-tracking", "--set", "compare.folds=4"]) == 0
    third = json.loads(capsys.readouterr().out)
    assert [s["status"] for s in third["steps"]] == ["skipped"] + ["ran"] * 6
    assert third["steps"][4]["outputs"]["version"] == "v2"
    # v2 is certified and no worse than v1 on the newest claims: it earns production
    assert third["steps"][5]["outputs"]["promoted"] is True, third["steps"][5]["outputs"]
    assert verify_artifact(f"{art.parent}@production")["version"] == "v2"

    # A person rolls production back; a re-run skips every step, and its report says which
    # parts are the past (cached) and what the aliases are now.
    assert main(["rollback", "amv-guard", "--alias", "production", "--models-dir",
                 str(art.parent.parent)]) == 0
    capsys.readouterr()
    assert main(["run", str(toml), "--no-tracking", "--set", "compare.folds=4"]) == 0
    report = capsys.readouterr().out
    assert "## artifact (cached from an earlier run): amv-guard v2" in report
    assert "## promotion (cached from an earlier run): v2 promoted to production" in report
    assert "aliases of amv-guard now: challenger = v2, production = v1" in report


def _journal_trials(path: Path) -> int:
    """Completed trials recorded in an Optuna journal file (one JSON op per line)."""
    if not path.exists():
        return 0
    done = 0
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            op: dict[str, Any] = json.loads(line)
        except ValueError:
            continue
        if op.get("op_code") == 6 and op.get("state") == 1:  # SET_TRIAL_STATE_VALUES, COMPLETE
            done += 1
    return done


@pytest.mark.slow
def test_killed_during_tuning_resumes_to_the_same_artifact(tmp_path: Path,
                                                           small_data: dict[str, Path]) -> None:
    trials = 24
    uninterrupted = _retrain_toml(tmp_path / "a", small_data, tracking=False, trials=trials)
    run_pipeline(load_pipeline(uninterrupted))

    toml = _retrain_toml(tmp_path / "b", small_data, tracking=False, trials=trials)
    cmd = [sys.executable, "-m", "amv_calib", "-q", "run", str(toml)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    journal = tmp_path / "b" / "work" / "tune.optuna.log"
    deadline = time.monotonic() + 120
    try:
        while _journal_trials(journal) < 3:
            assert proc.poll() is None, "the pipeline finished before it could be interrupted"
            assert time.monotonic() < deadline, "tuning never started"
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
    assert 3 <= _journal_trials(journal) < trials
    assert not (tmp_path / "b" / "work" / "tune").exists()
    assert not (tmp_path / "b" / "models" / "amv-guard").exists()

    result = run_pipeline(load_pipeline(toml))
    assert [s.status for s in result.steps][:2] == ["skipped", "skipped"]
    a = tmp_path / "a" / "models" / "amv-guard" / "v1"
    b = tmp_path / "b" / "models" / "amv-guard" / "v1"
    assert (b / "calibrator.json").read_bytes() == (a / "calibrator.json").read_bytes()
    gate_a = json.loads((a / "manifest.json").read_text())["gate"]
    gate_b = json.loads((b / "manifest.json").read_text())["gate"]
    assert gate_a == gate_b  # seeded per-trial sampling: a resumed study ends where one run does


def test_export_step_signs_and_reuses_only_a_version_signed_by_its_key(
        tmp_path: Path, repo_root: Path) -> None:
    from amv_calib.artifacts import keygen
    from amv_calib.contract import load_artifact

    v1 = repo_root / "models" / "amv-guard" / "v1"
    thresholds = _write(tmp_path / "thresholds.json",
                        json.dumps(json.loads((v1 / "manifest.json").read_text())["gate"]))
    first, _ = keygen(tmp_path / "k1")
    second, second_pub = keygen(tmp_path / "k2")

    def run(key: Path) -> dict[str, Any]:
        toml = _write(tmp_path / "export.toml", f"""
[pipeline]
name = "export-only"
workdir = "work"
models_dir = "models"
tracking = false

[[steps]]
name = "export"
kind = "export"
calibrator = "{v1 / 'calibrator.json'}"
thresholds = "{thresholds}"
signing_key = "{key}"
""")
        return run_pipeline(load_pipeline(toml), force=True).steps[0].outputs

    a = run(first)
    assert (a["version"], a["reused"]) == ("v1", False)
    assert run(first)["reused"] is True  # same content, signed by the same key
    b = run(second)  # same content, but not this key's signature: a new signed version
    assert (b["version"], b["reused"]) == ("v2", False)
    assert load_artifact(b["artifact"], trusted_keys=[second_pub]).signed_by == second_pub


@pytest.mark.slow
def test_retrain_on_shuffled_labels_leaves_production_where_it_was(
        tmp_path: Path, repo_root: Path, sample_dir: Path,
        shipped_models: Callable[[Path], Path]) -> None:
    # A useless calibrator (labels shuffled) is still certifiable (the safest gates abstain),
    # and judged on the same shuffled new labels production looks no better: the promotion
    # must refuse it for learning nothing, and say so.
    import numpy as np
    import pandas as pd

    from amv_calib.contract import read_aliases

    claims = pd.read_csv(sample_dir / "claims.csv").drop(columns=["p_true"])
    claims["violated"] = np.random.default_rng(0).permutation(claims["violated"].to_numpy())
    claims.to_csv(tmp_path / "shuffled.csv", index=False)
    shipped_models(tmp_path / "models")
    before = read_aliases(tmp_path / "models" / "amv-guard")["aliases"]["production"]
    spec = load_pipeline(repo_root / "pipelines" / "retrain.toml", [
        f'ingest.input="{tmp_path / "shuffled.csv"}"',
        f'pipeline.models_dir="{tmp_path / "models"}"',
        f'pipeline.workdir="{tmp_path / "work"}"', "tune.trials=20"])
    result = run_pipeline(spec, tracking=False)
    promote = next(s for s in result.steps if s.kind == "promote")
    assert promote.outputs["promoted"] is False
    assert "does not beat the constant prediction" in promote.outputs["reasons"][1]
    after = read_aliases(tmp_path / "models" / "amv-guard")["aliases"]
    assert after["production"]["version"] == before["version"]
    assert after["challenger"]["version"] == promote.outputs["version"] != before["version"]
    assert "stays challenger" in pipeline_report(result)


@pytest.mark.parametrize("verbose", [False, True], ids=["plain", "-v"])
def test_a_failed_steps_original_traceback_shows_with_v(
        tmp_path: Path, verbose: bool, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    # A bug inside a step (not one of our errors) is wrapped as the step's failure; -v shows
    # where it happened, and the DEBUG log carries it before it is wrapped.
    from dataclasses import replace

    from amv_calib.cli import main
    from amv_calib.pipeline._steps import STEP_KINDS

    def broken(ctx: object) -> dict[str, object]:
        return {"x": [][1]}  # IndexError in the step's own code

    monkeypatch.setitem(STEP_KINDS, "ingest", replace(STEP_KINDS["ingest"], run=broken))
    _write(tmp_path / "in.csv", "claim_id\n")
    toml = _write(tmp_path / "p.toml", "[pipeline]\nname='bug'\ntracking=false\n"
                  "[[steps]]\nkind='ingest'\ninput='in.csv'\n")
    code = main([*(["-v"] if verbose else []), "run", str(toml)])
    err = capsys.readouterr().err
    assert code == 1 and "step 'ingest' failed: IndexError: list index out of range" in err
    if verbose:
        assert "Traceback (most recent call last)" in err and "in broken" in err
        assert 'return {"x": [][1]}' in err
    else:
        assert "Traceback" not in err
