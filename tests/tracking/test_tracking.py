"""amv_calib.tracking against a SQLite store in a temporary folder (no server).

The stage folders are written by hand (``_mlflow_stages``) so the logged values can be
checked against numbers computed here; ``test_mlflow_server.py`` runs the real stages.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from _mlflow_stages import (
    CALIBRATORS,
    fake_compare_dir,
    fake_replay_json,
    fake_tune_dir,
    make_claims,
)
from mlflow import MlflowClient

from amv_calib import tracking
from amv_calib.artifacts import PromotionDecision
from amv_calib.artifacts._export import claims_fingerprint, export_artifact
from amv_calib.exceptions import ConfigError
from amv_calib.tracking import _store, _values

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def stages(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("stages")
    claims = make_claims()
    claims_path = root / "claims.parquet"
    claims.to_parquet(claims_path)
    compare = fake_compare_dir(root, claims, claims_path)
    tune = fake_tune_dir(root)
    art = export_artifact(calibrator=compare, thresholds=tune / "thresholds.json",
                          name="amv-guard", models_dir=root / "models", claims=claims)
    return {"root": root, "claims": claims, "claims_path": claims_path, "compare": compare,
            "tune": tune, "artifact": art.path, "export": art}


@pytest.fixture(scope="module")
def logged(stages: dict[str, Any], tmp_path_factory: pytest.TempPathFactory
           ) -> dict[str, Any]:
    """One pipeline run: comparison, tuning and export logged into a fresh SQLite store."""
    db = tmp_path_factory.mktemp("mlflow") / "mlflow.db"
    uri = f"sqlite:///{db}"
    with tracking.pipeline_run("retrain", tracking_uri=uri, params={"seed": 1},
                               tags={"purpose": "test"}) as tracker:
        runs = tracker.log_comparison(stages["compare"], claims=stages["claims"],
                                      claims_path=stages["claims_path"])
        tune_run = tracker.log_tuning(stages["tune"])
        tracker.log_artifact_export(stages["export"])
    assert runs is not None and tune_run is not None
    return {"uri": uri, "db": db, "parent": tracker.run_id, "runs": runs, "tune_run": tune_run,
            "client": MlflowClient(tracking_uri=uri)}


def _artifact_paths(client: MlflowClient, run_id: str, path: str | None = None) -> set[str]:
    out: set[str] = set()
    for info in client.list_artifacts(run_id, path):
        if info.is_dir:
            out |= _artifact_paths(client, run_id, info.path)
        else:
            out.add(info.path)
    return out


def _download(client: MlflowClient, run_id: str, path: str, dst: Path) -> bytes:
    return Path(client.download_artifacts(run_id, path, str(dst))).read_bytes()


# -- the store ------------------------------------------------------------------------------
def test_artifacts_live_in_mlruns_beside_the_database(logged: dict[str, Any]) -> None:
    run = logged["client"].get_run(logged["parent"])
    expected = (logged["db"].parent / "mlruns").resolve().as_uri()
    assert run.info.artifact_uri.startswith(expected)
    assert (logged["db"].parent / "mlruns").is_dir()


def test_the_experiment_opens_on_its_runs_table(logged: dict[str, Any]) -> None:
    # MLflow 3 shows an experiment without a kind as a GenAI one (traces overview first)
    client = logged["client"]
    exp = client.get_experiment(client.get_run(logged["parent"]).info.experiment_id)
    assert exp.tags[_store.EXPERIMENT_KIND_TAG] == "custom_model_development"


def test_promotion_tags_are_short_verdicts_with_the_reasons_as_an_artifact(
        tmp_path: Path) -> None:
    decision = tmp_path / "promotion.json"
    reasons = ["certified: yes -- Gate Harmful <= 0.01 with probability >= 0.95 " + "x" * 500,
               "beats the constant prediction beyond noise: yes -- on 4000 newest claims ...",
               "not worse than production beyond noise: NO -- on 4000 newest claims ..."]
    result = PromotionDecision(promote=False, reasons=reasons, certificate_ok=True,
                               version="v2")
    decision.write_text(json.dumps({"version": "v2", **result.to_dict()}))
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    with tracking.pipeline_run("p", tracking_uri=uri) as tracker:
        tracker.log_promotion(result, file=decision)
    client = MlflowClient(tracking_uri=uri)
    tags = client.get_run(tracker.run_id).data.tags
    assert {k: v for k, v in tags.items() if k.startswith("promotion.")} == {
        "promotion.promoted": "false", "promotion.version": "v2", "promotion.certified": "yes",
        "promotion.beats_the_constant_prediction_beyond_noise": "yes",
        "promotion.not_worse_than_production_beyond_noise": "NO"}
    assert "promote/promotion.json" in _artifact_paths(client, str(tracker.run_id))


def test_file_store_uri_is_refused() -> None:
    with pytest.raises(ConfigError, match="deprecated file store"):
        tracking.resolve_tracking_uri("file:///somewhere/mlruns")
    with pytest.raises(ConfigError, match="deprecated file store"):
        tracking.resolve_tracking_uri("mlruns")


def test_environment_overrides_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    assert tracking.resolve_tracking_uri() == "sqlite:///mlflow.db"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:5999")
    assert tracking.resolve_tracking_uri() == "http://127.0.0.1:5999"
    assert tracking.resolve_tracking_uri("sqlite:///x.db") == "sqlite:///x.db"


def test_tracker_restores_the_callers_tracking_uri(logged: dict[str, Any],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    import mlflow

    monkeypatch.setenv("MLFLOW_TRACKING_URI", "sqlite:///elsewhere.db")
    with tracking.pipeline_run("x", tracking_uri=logged["uri"]):
        assert mlflow.get_tracking_uri() == logged["uri"]
    assert os.environ["MLFLOW_TRACKING_URI"] == "sqlite:///elsewhere.db"
    assert mlflow.get_tracking_uri() == "sqlite:///elsewhere.db"


@pytest.mark.slow
def test_concurrent_first_use_of_a_fresh_database(tmp_path: Path) -> None:
    # Three processes initialise the same fresh SQLite file at once; all must succeed (with
    # plain MlflowClient calls instead, MLflow's migrations collide: "table _alembic_tmp_...
    # already exists", "duplicate column name").
    uri = f"sqlite:///{tmp_path / 'fresh.db'}"
    code = textwrap.dedent(f"""
        import sys
        from amv_calib.tracking import ensure_tracking_db
        ensure_tracking_db({uri!r})
        from mlflow import MlflowClient
        MlflowClient({uri!r}).create_experiment("e-" + sys.argv[1])
    """)
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    procs = [subprocess.Popen([sys.executable, "-c", code, str(i)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE) for i in range(3)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], [o[1].decode()[-2000:] for o in outs]
    names = {e.name for e in MlflowClient(uri).search_experiments()}
    assert {"e-0", "e-1", "e-2"} <= names


# -- the comparison -------------------------------------------------------------------------
def test_one_nested_run_per_calibrator(logged: dict[str, Any]) -> None:
    client, parent = logged["client"], logged["parent"]
    exp_id = client.get_run(parent).info.experiment_id
    children = client.search_runs([exp_id], f"tags.mlflow.parentRunId = '{parent}'")
    names = sorted(r.info.run_name for r in children)
    assert names == sorted([*CALIBRATORS, "tuning"])
    assert logged["runs"].calibrator_runs.keys() == set(CALIBRATORS)
    assert all(r.info.status == "FINISHED" for r in children)
    assert client.get_run(parent).info.status == "FINISHED"


@pytest.mark.parametrize("name", CALIBRATORS, ids=CALIBRATORS)
def test_calibrator_metrics_match_comparison_json(logged: dict[str, Any],
                                                  stages: dict[str, Any], name: str) -> None:
    entry = next(e for e in json.loads((stages["compare"] / "comparison.json").read_text())
                 ["calibrators"] if e["name"] == name)
    run = logged["client"].get_run(logged["runs"].calibrator_runs[name])
    m = run.data.metrics
    for key in ("log_loss", "brier", "auc", "ece", "ece_mass", "mce", "smooth_ece"):
        assert m[key] == entry[key], key
        assert [m[f"{key}_low"], m[f"{key}_high"]] == entry["ci"][key], key
    assert m["excess_log_loss"] == entry["excess_log_loss"]
    assert [m["excess_log_loss_low"], m["excess_log_loss_high"]] == entry["excess_log_loss_ci"]
    assert run.data.params["split"] == "time"
    assert run.data.params["folds"] == "3"
    assert run.data.params["kind"] == "linear"
    assert run.data.params["estimator"] == f"{name.title()}Calibrator(C=1.0)"
    assert run.data.params["feature_map"].startswith("logit(model_confidence)")
    assert run.data.tags["is_champion"] == str(name == logged["runs"].champion)


def test_fold_metrics_are_steps(logged: dict[str, Any], stages: dict[str, Any]) -> None:
    data = json.loads((stages["compare"] / "comparison.json").read_text())
    for name, rid in logged["runs"].calibrator_runs.items():
        want = [(f["fold"], f["ece"]) for f in data["per_fold"] if f["calibrator"] == name]
        history = logged["client"].get_metric_history(rid, "fold/ece")
        assert sorted((h.step, h.value) for h in history) == want
    sizes = logged["client"].get_metric_history(logged["parent"], "fold/n_test")
    assert sorted((h.step, h.value) for h in sizes) == \
        [(f["fold"], f["n_test"]) for f in data["folds"]]


def test_champion_tagged_and_summarised_on_parent(logged: dict[str, Any],
                                                 stages: dict[str, Any]) -> None:
    data = json.loads((stages["compare"] / "comparison.json").read_text())
    parent = logged["client"].get_run(logged["parent"])
    assert parent.data.tags["champion"] == data["champion"]
    champ = next(e for e in data["calibrators"] if e["name"] == data["champion"])
    assert parent.data.metrics["champion_log_loss"] == champ["log_loss"]
    assert parent.data.metrics["champion_log_loss_high"] == champ["ci"]["log_loss"][1]
    assert parent.data.metrics["oracle_log_loss"] == data["oracle"]["log_loss"]
    assert parent.data.metrics["oracle_log_loss_low"] == data["oracle"]["ci"]["log_loss"][0]
    assert parent.data.params["compare.scoring"] == "log_loss"
    assert parent.data.params["compare.calibrators.beta"] == "BetaCalibrator(C=1.0)"


def test_provenance_tags(logged: dict[str, Any], stages: dict[str, Any]) -> None:
    import amv_calib

    fp = claims_fingerprint(stages["claims"])["sha256"]
    client = logged["client"]
    for rid in (logged["parent"], *logged["runs"].calibrator_runs.values()):
        tags = client.get_run(rid).data.tags
        assert tags["amv_calib_version"] == amv_calib.__version__
        assert tags["data_fingerprint"] == fp
        # Others commit while the suite runs: the logged commit must be HEAD or before it.
        where = Path(amv_calib.__file__).parent
        if subprocess.run(["git", "rev-parse", "HEAD"], cwd=where,
                          capture_output=True).returncode == 0:
            assert len(tags["git_commit"]) == 40
            assert subprocess.run(["git", "merge-base", "--is-ancestor", tags["git_commit"],
                                   "HEAD"], cwd=where).returncode == 0


def test_reliability_figures_are_pngs(logged: dict[str, Any], tmp_path: Path) -> None:
    client = logged["client"]
    parent_files = _artifact_paths(client, logged["parent"])
    assert {"reliability_overlay.png", "reliability_grid.png"} <= parent_files
    assert {f"reliability/{n}.png" for n in CALIBRATORS} <= parent_files
    assert "compare/reliability.png" in parent_files
    assert _download(client, logged["parent"], "reliability_overlay.png",
                     tmp_path).startswith(PNG_MAGIC)
    for name, rid in logged["runs"].calibrator_runs.items():
        files = _artifact_paths(client, rid)
        assert {"reliability.png", "reliability_bins.json", f"{name}.json"} <= files
        assert _download(client, rid, "reliability.png", tmp_path / name).startswith(PNG_MAGIC)


@pytest.mark.slow
def test_mlflow_grid_is_the_comparisons_figure(stages: dict[str, Any],
                                               tmp_path: Path) -> None:
    """One figure everywhere: the grid logged to MLflow for a real comparison shows the
    same pixels as the comparison's own reliability.png (panel titles with the table's
    metric names, the prediction histogram); the overlay puts every curve on one axes."""
    from matplotlib.image import imread

    from amv_calib.calibration import compare_calibrators, write_comparison

    cdir = tmp_path / "compare"
    write_comparison(compare_calibrators(stages["claims"], folds=3, n_boot=20, seed=1), cdir)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    with tracking.pipeline_run("overlay", tracking_uri=uri) as tracker:
        tracker.log_comparison(cdir, claims=stages["claims"])
    client = MlflowClient(tracking_uri=uri)
    _download(client, str(tracker.run_id), "reliability_grid.png", tmp_path / "dl")
    logged_png = imread(tmp_path / "dl" / "reliability_grid.png")
    own_png = imread(cdir / "reliability.png")
    assert logged_png.shape == own_png.shape
    np.testing.assert_array_equal(logged_png, own_png)
    _download(client, str(tracker.run_id), "reliability_overlay.png", tmp_path / "ov")
    overlay = imread(tmp_path / "ov" / "reliability_overlay.png")
    assert overlay.shape[:2] == (600, 750)  # one axes (7.5 x 6 in at 100 dpi), not the grid


def _run_record(client: MlflowClient, run_id: str) -> dict[str, Any]:
    """What a run holds, without what differs between any two runs (ids, times, names)."""
    run = client.get_run(run_id)
    skip = ("mlflow.", "amv_calib.stage")
    return {"params": run.data.params, "metrics": run.data.metrics,
            "tags": {k: v for k, v in run.data.tags.items() if not k.startswith(skip)},
            "artifacts": _artifact_paths(client, run_id),
            "inputs": len(run.inputs.dataset_inputs)}


@pytest.mark.slow
def test_a_comparison_logs_the_same_from_its_result_and_its_folder(
        stages: dict[str, Any], tmp_path: Path) -> None:
    """The pipeline logs the ComparisonResult with the files written for it; a folder
    written by ``compare --out`` elsewhere logs the same runs, values and files."""
    from amv_calib.calibration import compare_calibrators, write_comparison

    result = compare_calibrators(stages["claims"], folds=3, n_boot=20, seed=1)
    files = write_comparison(result, tmp_path / "compare")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    with tracking.pipeline_run("from-result", tracking_uri=uri) as by_result:
        runs_r = by_result.log_comparison(result, files=files, claims=stages["claims"])
    with tracking.pipeline_run("from-folder", tracking_uri=uri) as by_folder:
        runs_f = by_folder.log_comparison(tmp_path / "compare", claims=stages["claims"])
    assert runs_r is not None and runs_f is not None
    assert runs_r.champion == runs_f.champion == result.champion
    assert set(runs_r.calibrator_runs) == set(runs_f.calibrator_runs) == set(result.table[
        "name"]) - {"oracle"}
    client = MlflowClient(tracking_uri=uri)
    pairs = [(str(by_result.run_id), str(by_folder.run_id))] + [
        (runs_r.calibrator_runs[n], runs_f.calibrator_runs[n]) for n in runs_r.calibrator_runs]
    for rid_r, rid_f in pairs:
        got, want = _run_record(client, rid_r), _run_record(client, rid_f)
        assert got == want
    parent = _run_record(client, str(by_result.run_id))
    assert {"compare/comparison.json", "compare/reliability.png", "reliability_grid.png",
            "reliability_bins.json"} <= parent["artifacts"]
    assert not any(p.endswith(".joblib") for p in parent["artifacts"])
    assert parent["metrics"]["champion_log_loss"] == pytest.approx(float(
        result.table.set_index("name").loc[result.champion, "log_loss"]))
    # Without files only what is drawn from the result is logged.
    with tracking.pipeline_run("values-only", tracking_uri=uri) as bare:
        bare.log_comparison(result)
    only = _run_record(client, str(bare.run_id))
    assert only["metrics"] == parent["metrics"] and only["params"] == parent["params"]
    assert not any(p.startswith("compare/") for p in only["artifacts"])
    with tracking.pipeline_run("refused", tracking_uri=uri) as refused:
        with pytest.raises(TypeError, match="files= goes with a ComparisonResult"):
            refused.log_comparison(tmp_path / "compare", files=files)


@pytest.mark.parametrize("mode", ["constrained", "multi"])
def test_a_tuning_logs_the_same_from_its_result_and_its_folder(
        mode: str, tmp_path: Path) -> None:
    """The pipeline logs the TuneResult; a tuning folder written elsewhere logs the same
    run, values and files (the trial metrics exactly as the study holds them)."""
    from amv_calib.contract._features import seed_prior_calibrator
    from amv_calib.datasets._synth import synth_episodes
    from amv_calib.tuning import episode_set, tune_thresholds

    result = tune_thresholds(
        episode_set(synth_episodes(240, seed=7)), calibrator=seed_prior_calibrator(),
        trials=8, storage=str(tmp_path / "study.log"), study_name="s", seed=123,
        target_harmful=0.05, planner="myopic", n_boot=0, mode=mode, out_dir=tmp_path / "tune")
    assert result.thresholds is not None and result.trials is not None
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    with tracking.pipeline_run("from-result", tracking_uri=uri) as by_result:
        rid_r = by_result.log_tuning(result)
    with tracking.pipeline_run("from-folder", tracking_uri=uri) as by_folder:
        rid_f = by_folder.log_tuning(tmp_path / "tune")
    assert rid_r is not None and rid_f is not None
    client = MlflowClient(tracking_uri=uri)
    for a, b in [(str(by_result.run_id), str(by_folder.run_id)), (rid_r, rid_f)]:
        got, want = _run_record(client, a), _run_record(client, b)
        # trials.csv holds the study's floats as text: the folder's are equal to ~1 ulp
        assert got["metrics"] == pytest.approx(want["metrics"], rel=1e-15)
        assert {k: v for k, v in got.items() if k != "metrics"} == \
               {k: v for k, v in want.items() if k != "metrics"}
    assert {"files/trials.csv", "files/tune_report.json", "files/thresholds.json",
            "trials.json"} <= _run_record(client, rid_r)["artifacts"]
    # the result's trial metrics are the study's values, step = trial number
    history = client.get_metric_history(rid_r, "trial/gate_harmful")
    done = result.trials.dropna(subset=["gate_harmful"])
    assert sorted((m.step, m.value) for m in history) == sorted(
        zip(done["number"].tolist(), done["gate_harmful"].tolist(), strict=True))
    assert client.get_run(rid_r).data.params["best.planner"] == "myopic"


def test_reliability_bins_table_matches_csv(logged: dict[str, Any], stages: dict[str, Any],
                                            tmp_path: Path) -> None:
    bins = pd.read_csv(stages["compare"] / "reliability_bins.csv")
    rid = logged["runs"].calibrator_runs["beta"]
    raw = json.loads(_download(logged["client"], rid, "reliability_bins.json", tmp_path))
    table = pd.DataFrame(raw["data"], columns=raw["columns"])
    own = bins[bins["calibrator"] == "beta"].reset_index(drop=True)
    assert table["count"].tolist() == own["count"].tolist()
    assert table["strategy"].tolist() == own["strategy"].tolist()
    assert table["observed_rate"].tolist() == pytest.approx(own["observed_rate"].tolist())


def test_comparison_table(logged: dict[str, Any], stages: dict[str, Any],
                          tmp_path: Path) -> None:
    raw = json.loads(_download(logged["client"], logged["parent"], "comparison.json", tmp_path))
    table = pd.DataFrame(raw["data"], columns=raw["columns"])
    want = pd.read_csv(stages["compare"] / "comparison.csv")
    assert table["name"].tolist() == want["name"].tolist() == list(CALIBRATORS)
    # MLflow writes table floats with 10 significant digits.
    for col in ("log_loss", "log_loss_low", "ece_high"):
        assert table[col].tolist() == pytest.approx(want[col].tolist(), rel=1e-9)


def test_training_data_is_a_dataset_input(logged: dict[str, Any],
                                          stages: dict[str, Any]) -> None:
    client = logged["client"]
    for rid in (logged["parent"], logged["runs"].calibrator_runs["platt"]):
        inputs = client.get_run(rid).inputs.dataset_inputs
        assert len(inputs) == 1
        ds = inputs[0].dataset
        assert ds.name == "claims"
        assert json.loads(ds.source)["uri"] == str(stages["claims_path"].resolve())
        assert "violated" in ds.profile or "violated" in (ds.schema or "")
        assert {t.key: t.value for t in inputs[0].tags}["mlflow.data.context"] == "training"


# -- tuning ---------------------------------------------------------------------------------
@pytest.mark.parametrize("column", ["lambda_cost_scale", "max_verifications", "gate_harmful",
                                    "verification_cost", "proceed_coverage", "total_loss"])
def test_trials_logged_with_trial_number_as_step(logged: dict[str, Any],
                                                 stages: dict[str, Any], column: str) -> None:
    trials = pd.read_csv(stages["tune"] / "trials.csv")
    complete = trials[trials["state"] == "COMPLETE"]
    hist = logged["client"].get_metric_history(logged["tune_run"], f"trial/{column}")
    assert sorted((h.step, h.value) for h in hist) == \
        list(zip(complete["number"], complete[column].astype(float), strict=True))


def test_study_settings_and_chosen_trial(logged: dict[str, Any], stages: dict[str, Any]
                                         ) -> None:
    thresholds = json.loads((stages["tune"] / "thresholds.json").read_text())
    report = json.loads((stages["tune"] / "tune_report.json").read_text())
    run = logged["client"].get_run(logged["tune_run"])
    m, params = run.data.metrics, run.data.params
    assert m["best.lambda_cost_scale"] == thresholds["lambda_cost_scale"]
    assert params["best.planner"] == "lookahead"
    assert params["mode"] == "multi" and params["seed"] == "5" and params["best_trial"] == "7"
    assert params["n_trials"] == str(len(pd.read_csv(stages["tune"] / "trials.csv")))
    assert m["tune.total_loss"] == report["tune_metrics"]["total_loss"]
    tuned = report["holdout"]["tuned"]
    for key in ("gate_harmful", "verification_cost", "proceed_coverage", "total_loss"):
        assert m[f"holdout.{key}"] == tuned[key]["value"]
        assert m[f"holdout.{key}_low"] == tuned[key]["lo"]
        assert m[f"holdout.{key}_high"] == tuned[key]["hi"]
    parent = logged["client"].get_run(logged["parent"])
    assert parent.data.params["tune.epsilon_harm_bound"] == "0.04"


def test_pareto_plot_trials_and_replay_tables(logged: dict[str, Any], tmp_path: Path) -> None:
    client, rid = logged["client"], logged["tune_run"]
    files = _artifact_paths(client, rid)
    assert {"figures/pareto.png", "figures/trials_harm_vs_loss.png", "trials.json",
            "pareto.json", "replay_table.json", "files/tune_report.json"} <= files
    assert {"tuning/pareto.png", "tuning/trials_harm_vs_loss.png"} <= _artifact_paths(
        client, logged["parent"])
    assert _download(client, rid, "figures/trials_harm_vs_loss.png", tmp_path / "f"
                     ).startswith(PNG_MAGIC)
    raw = json.loads(_download(client, rid, "replay_table.json", tmp_path))
    table = pd.DataFrame(raw["data"], columns=raw["columns"]).set_index("policy")
    assert table.loc["tuned-lookahead", "total_loss"] == 3.0
    assert table.loc["always-proceed", "gate_harmful_high"] == pytest.approx(0.36)
    parent = client.get_run(logged["parent"])
    assert parent.data.metrics["replay.tuned-lookahead.gate_harmful"] == 0.01
    assert parent.data.metrics["replay.always-proceed.proceed_coverage"] == 1.0


def test_replay_json_of_the_replay_command(logged: dict[str, Any], tmp_path: Path) -> None:
    path = fake_replay_json(tmp_path)
    client = logged["client"]
    exp = client.get_run(logged["parent"]).info.experiment_id
    parent = client.create_run(exp, run_name="evaluate").info.run_id
    tracking.log_replay(path, parent_run_id=parent, tracking_uri=logged["uri"])
    m = client.get_run(parent).data.metrics
    assert m["replay.lookahead.total_loss"] == 3.0
    assert m["replay.always-proceed.n"] == 50


# -- export ---------------------------------------------------------------------------------
def test_export_tags_point_at_the_artifact(logged: dict[str, Any],
                                           stages: dict[str, Any]) -> None:
    import hashlib

    manifest = stages["artifact"] / "manifest.json"
    tags = logged["client"].get_run(logged["parent"]).data.tags
    assert tags["artifact_version"] == stages["artifact"].name
    assert tags["artifact_sha256"] == hashlib.sha256(manifest.read_bytes()).hexdigest()
    assert tags["calibrator_sha256"] == json.loads(manifest.read_text())["files"][
        "calibrator.json"]
    files = _artifact_paths(logged["client"], logged["parent"])
    assert f"artifact/{stages['artifact'].name}/manifest.json" in files


# -- optional tracking and failure ----------------------------------------------------------
def test_disabled_tracker_does_nothing(tmp_path: Path, stages: dict[str, Any],
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with tracking.PipelineTracker(enabled=False, tracking_uri="sqlite:///never.db") as t:
        assert t.log_comparison(stages["compare"]) is None
        assert t.log_tuning(stages["tune"]) is None
        t.log_replay(stages["tune"])
        t.log_artifact_export(stages["export"])
        assert t.register_champion(stages["artifact"]) is None
        assert t.set_tags({"a": "b"}) is None
        assert t.log_params({"a": 1}) is None
        # not even its arguments are looked at
        assert t.log_replay(tmp_path / "no-such-replay.json") is None
        assert t.run_id is None
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("log", [
    lambda t: t.set_tags({"a": "b"}), lambda t: t.log_params({"a": 1}),
    lambda t: t.log_tuning("no-such-dir"),
], ids=["set_tags", "log_params", "log_tuning"])
def test_enabled_tracker_logs_only_when_entered(log: Any) -> None:
    t = tracking.PipelineTracker(tracking_uri="sqlite:///never.db")
    with pytest.raises(RuntimeError, match="PipelineTracker is not entered"):
        log(t)


def test_failed_pipeline_marks_the_run_failed(logged: dict[str, Any]) -> None:
    uri = logged["uri"]
    with pytest.raises(RuntimeError, match="boom"):
        with tracking.pipeline_run("retrain", tracking_uri=uri) as t:
            raise RuntimeError("boom")
    assert MlflowClient(uri).get_run(str(t.run_id)).info.status == "FAILED"


def test_standalone_log_comparison_under_an_existing_parent(
        logged: dict[str, Any], stages: dict[str, Any]) -> None:
    client = logged["client"]
    exp = client.get_run(logged["parent"]).info.experiment_id
    parent = client.create_run(exp, run_name="outer").info.run_id
    runs = tracking.log_comparison(stages["compare"], parent_run_id=parent,
                                   tracking_uri=logged["uri"])
    assert runs.parent_run_id == parent
    children = client.search_runs([exp], f"tags.mlflow.parentRunId = '{parent}'")
    assert len(children) == len(CALIBRATORS)
    # Attaching leaves the parent's status as it was (still running for its owner).
    assert client.get_run(parent).info.status == "RUNNING"
    # claims_path comes from comparison.json's config: the dataset is still logged.
    assert client.get_run(runs.calibrator_runs["beta"]).inputs.dataset_inputs


def test_missing_comparison_json_names_the_file(tmp_path: Path, logged: dict[str, Any]
                                                ) -> None:
    with pytest.raises(ConfigError, match=r"comparison\.json: missing"):
        tracking.log_comparison(tmp_path, tracking_uri=logged["uri"])


def test_metrics_are_finite_numbers(logged: dict[str, Any]) -> None:
    for rid in logged["runs"].calibrator_runs.values():
        metrics = logged["client"].get_run(rid).data.metrics
        assert metrics and all(math.isfinite(v) for v in metrics.values())


# -- CLI ------------------------------------------------------------------------------------
def test_ui_command_prints_the_sqlite_line(capsys: pytest.CaptureFixture[str],
                                           monkeypatch: pytest.MonkeyPatch,
                                           tmp_path: Path) -> None:
    from amv_calib.cli import main

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.chdir(tmp_path)
    assert main(["ui-command"]) == 0
    store = (tmp_path / "mlflow.db").resolve().as_posix()
    program, rest = capsys.readouterr().out.strip().split(" ", 1)
    assert rest == f"ui --backend-store-uri sqlite:///{store} --host 127.0.0.1 --port 5000"
    assert program == "mlflow" or Path(program).is_file()


def test_ui_command_names_the_mlflow_beside_this_python(monkeypatch: pytest.MonkeyPatch,
                                                        tmp_path: Path) -> None:
    # `mlflow` is not on PATH when the venv is not active: the hint names the one that runs
    import sys

    from amv_calib.settings import ui_command

    beside = Path(sys.executable).parent / "mlflow"
    assert beside.is_file()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", "/nonexistent")
    assert ui_command("sqlite:////srv/m.db").split(" ", 1)[0] == str(beside.absolute())
    monkeypatch.setenv("PATH", str(beside.parent))
    assert ui_command("sqlite:////srv/m.db").split(" ", 1)[0] == "mlflow"


def test_ui_command_keeps_absolute_and_server_uris() -> None:
    from amv_calib.settings import ui_command

    assert ui_command("sqlite:////srv/mlflow.db", port=5001).split(" ", 1)[1] == \
        "ui --backend-store-uri sqlite:////srv/mlflow.db --host 127.0.0.1 --port 5001"
    assert ui_command("http://127.0.0.1:5000").startswith("open http://127.0.0.1:5000")


def test_gate_and_cli_do_not_import_mlflow() -> None:
    code = ("import sys, amv_calib.gate, amv_calib.cli\n"
            "amv_calib.cli.build_parser()\n"
            "assert 'mlflow' not in sys.modules, 'mlflow imported'\n"
            "from amv_calib import PipelineTracker, registry_promote\n"
            "assert 'mlflow' in sys.modules\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]


def test_replay_results_of_the_replay_module(logged: dict[str, Any], tmp_path: Path) -> None:
    from amv_calib.datasets._synth import synth_episodes
    from amv_calib.tuning._replay import replay_many

    results = replay_many(synth_episodes(60, seed=3), ["always-proceed", "oracle"], seed=4,
                          n_boot=20)
    path = tmp_path / "replay.json"
    path.write_text(json.dumps({k: r.to_dict() for k, r in results.items()}))
    client = logged["client"]
    exp = client.get_run(logged["parent"]).info.experiment_id
    parent = client.create_run(exp, run_name="evaluate").info.run_id
    tracking.log_replay(tmp_path, parent_run_id=parent, tracking_uri=logged["uri"])
    m = client.get_run(parent).data.metrics
    for policy, res in results.items():
        ci = res.overall["total_loss"]
        assert m[f"replay.{policy}.total_loss"] == ci.value
        assert m[f"replay.{policy}.total_loss_low"] == ci.lo
        assert m[f"replay.{policy}.total_loss_high"] == ci.hi
        assert m[f"replay.{policy}.n"] == res.n


def test_replay_results_log_the_table_their_replay_json_gives(tmp_path: Path) -> None:
    # The pipeline logs a replay from its results; `amv-calib replay --json` files are
    # logged from the file. Both must give one table, to the column order.
    from amv_calib.datasets._synth import synth_episodes
    from amv_calib.tuning._replay import replay_many

    results = replay_many(synth_episodes(60, seed=3), ["oracle", "always-proceed"], seed=4,
                          n_boot=20)
    path = tmp_path / "replay.json"
    path.write_text(json.dumps({k: r.to_dict() for k, r in results.items()}, indent=2,
                               sort_keys=True))
    from_file = _values._replay_table(path)
    from_results = _values._replay_rows(
        _values._sorted_keys({k: r.to_dict() for k, r in results.items()}))
    pd.testing.assert_frame_equal(from_results, from_file)
    assert list(from_file["policy"]) == ["always-proceed", "oracle"]


def test_the_same_replay_table_is_logged_once_per_run(logged: dict[str, Any],
                                                      tmp_path: Path) -> None:
    path = fake_replay_json(tmp_path)
    with tracking.pipeline_run("twice", tracking_uri=logged["uri"]) as t:
        t.log_replay(path)
        t.log_replay(path)
    raw = json.loads(_download(logged["client"], str(t.run_id), "replay_table.json", tmp_path))
    assert len(raw["data"]) == 2
    hist = logged["client"].get_metric_history(str(t.run_id), "replay.lookahead.total_loss")
    assert len(hist) == 1
