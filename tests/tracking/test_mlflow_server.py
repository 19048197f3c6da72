"""Acceptance: a real MLflow tracking server and a real model server on loopback.

``mlflow server`` (SQLite backend, proxied artifacts) is started on a free port, a small real
comparison and tuning are run and logged against it, and everything is read back through
``MlflowClient``: the runs, every metric the tracking issue names, the reliability diagram
PNGs, the registered model and its ``champion`` alias. Then ``mlflow models serve`` serves
``models:/amv-guard-calibrator@champion`` and answers one probability request and one
decision request, checked against the gate's own answers.

Both servers are started in their own process group and stopped (the whole group) when the
module's tests are done.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from mlflow import MlflowClient

from amv_calib import tracking
from amv_calib.artifacts._export import claims_fingerprint, export_artifact
from amv_calib.calibration._compare import compare_calibrators, write_comparison
from amv_calib.contract._schema import CLAIM_FEATURES
from amv_calib.datasets._synth import synth_claims, synth_episodes, write_claims, write_episodes
from amv_calib.gate import CandidateAction, Gate, Verifier
from amv_calib.tuning._search import tune_thresholds

pytestmark = [pytest.mark.slow, pytest.mark.mlflow_server]

BIN = Path(sys.executable).parent
NAME = "amv-guard-calibrator"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
#: The metrics of the comparison issue, each with its interval bounds.
COMPARISON_METRICS = ("log_loss", "brier", "auc", "ece", "ece_mass", "mce", "smooth_ece")
REPLAY_METRICS = ("gate_harmful", "verification_cost", "queries", "proceed_coverage",
                  "abstention_rate", "total_loss")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str, timeout: float = 2.0) -> int:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return int(resp.status)
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return 0


@contextlib.contextmanager
def _serving(cmd: list[str], *, url: str, env: Mapping[str, str], log: Path,
             timeout: float = 90.0) -> Iterator[subprocess.Popen[bytes]]:
    """Run ``cmd`` in its own process group until ``url`` answers 200; stop the group after."""
    with log.open("wb") as fh:
        proc = subprocess.Popen(cmd, env=dict(env), stdout=fh, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        deadline = time.monotonic() + timeout
        while _get(url) != 200:
            if proc.poll() is not None:
                raise AssertionError(f"{cmd[:3]} exited with {proc.returncode}:\n"
                                     f"{log.read_text(errors='replace')[-3000:]}")
            if time.monotonic() > deadline:
                raise AssertionError(f"{url} did not answer within {timeout} s:\n"
                                     f"{log.read_text(errors='replace')[-3000:]}")
            time.sleep(0.25)
        yield proc
    finally:
        # The group is this test's own (start_new_session): the server and its workers.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            pass
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=15)


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    # The scoring server runs `uvicorn` by name: the venv's bin must come first on PATH.
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env.update(extra)
    return env


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    root = tmp_path_factory.mktemp("mlflow-server")
    db_uri = f"sqlite:///{root / 'mlflow.db'}"
    # Create the tables before the server's workers open the database.
    tracking.ensure_tracking_db(db_uri)
    port = _free_port()
    cmd = [str(BIN / "mlflow"), "server", "--backend-store-uri", db_uri,
           "--artifacts-destination", str(root / "artifacts"), "--host", "127.0.0.1",
           "--port", str(port), "--workers", "1"]
    env = _env(MLFLOW_SERVER_ENABLE_JOB_EXECUTION="false")
    with _serving(cmd, url=f"http://127.0.0.1:{port}/health", env=env,
                  log=root / "server.log"):
        yield {"uri": f"http://127.0.0.1:{port}", "root": root}


@pytest.fixture(scope="module")
def pipeline(server: dict[str, Any], tmp_path_factory: pytest.TempPathFactory
             ) -> dict[str, Any]:
    """The real stages on small synthetic data, logged against the server."""
    root = tmp_path_factory.mktemp("stages")
    claims_path = write_claims(synth_claims(3000, seed=11), root / "claims.parquet")
    episodes_path = write_episodes(synth_episodes(240, seed=12), root / "episodes.jsonl")
    compare_dir, tune_dir = root / "compare", root / "tune"
    result = compare_calibrators(pd.read_parquet(claims_path), folds=3, n_boot=20, seed=14)
    write_comparison(result, compare_dir)
    tune_thresholds(episodes_path, calibrator=compare_dir / "champion.json", trials=16,
                    storage=str(root / "optuna.log"), seed=13, mode="multi",
                    out_dir=tune_dir, n_boot=20)
    claims = pd.read_parquet(claims_path)
    art = export_artifact(calibrator=compare_dir, thresholds=tune_dir / "thresholds.json",
                          name="amv-guard", models_dir=root / "models", claims=claims)
    with tracking.pipeline_run("retrain", tracking_uri=server["uri"]) as t:
        runs = t.log_comparison(compare_dir, claims=claims, claims_path=claims_path)
        tune_run = t.log_tuning(tune_dir)
        t.log_artifact_export(art)
        version = t.register_champion(art.path)
    assert runs is not None and tune_run is not None and version is not None
    return {"root": root, "claims": claims, "claims_path": claims_path, "compare": compare_dir,
            "tune": tune_dir, "artifact": art.path, "parent": t.run_id, "runs": runs,
            "tune_run": tune_run, "version": version,
            "client": MlflowClient(tracking_uri=server["uri"], registry_uri=server["uri"])}


def _download(client: MlflowClient, run_id: str, path: str, dst: Path) -> bytes:
    dst.mkdir(parents=True, exist_ok=True)
    return Path(client.download_artifacts(run_id, path, str(dst))).read_bytes()


def _is_png(data: bytes) -> bool:
    from matplotlib.image import imread

    return data.startswith(PNG_MAGIC) and imread(io.BytesIO(data), format="png").ndim == 3


# -- tracking server ---------------------------------------------------------------------------
def test_runs_are_on_the_server(pipeline: dict[str, Any], server: dict[str, Any]) -> None:
    client = pipeline["client"]
    parent = client.get_run(pipeline["parent"])
    assert parent.info.status == "FINISHED"
    # Artifacts go through the server's proxy, not to a local path of this process.
    assert parent.info.artifact_uri.startswith("mlflow-artifacts:")
    exp = parent.info.experiment_id
    children = client.search_runs([exp], f"tags.mlflow.parentRunId = '{parent.info.run_id}'")
    comparison = json.loads((pipeline["compare"] / "comparison.json").read_text())
    names = {e["name"] for e in comparison["calibrators"]}
    assert {r.info.run_name for r in children} == names | {"tuning"}
    assert parent.data.tags["champion"] == comparison["champion"]


def test_every_comparison_metric_with_bounds(pipeline: dict[str, Any]) -> None:
    client = pipeline["client"]
    comparison = json.loads((pipeline["compare"] / "comparison.json").read_text())
    by_name = {e["name"]: e for e in comparison["calibrators"]}
    for name, rid in pipeline["runs"].calibrator_runs.items():
        m = client.get_run(rid).data.metrics
        entry = by_name[name]
        for key in COMPARISON_METRICS:
            assert m[key] == entry[key], (name, key)
            assert [m[f"{key}_low"], m[f"{key}_high"]] == entry["ci"][key], (name, key)
        folds = [(f["fold"], f["log_loss"]) for f in comparison["per_fold"]
                 if f["calibrator"] == name]
        hist = client.get_metric_history(rid, "fold/log_loss")
        assert sorted((h.step, h.value) for h in hist) == folds, name
        assert len(folds) == 3
    parent = client.get_run(pipeline["parent"]).data.metrics
    assert parent["oracle_log_loss"] == comparison["oracle"]["log_loss"]
    assert parent["champion_log_loss"] == by_name[comparison["champion"]]["log_loss"]


def test_tuning_trials_and_replay_metrics(pipeline: dict[str, Any]) -> None:
    client = pipeline["client"]
    trials = pd.read_csv(pipeline["tune"] / "trials.csv")
    done = trials[trials["state"] == "COMPLETE"]
    for key in ("total_loss", "gate_harmful", "verification_cost", "lambda_cost_scale"):
        hist = client.get_metric_history(pipeline["tune_run"], f"trial/{key}")
        # trials.csv holds floats by repr: the values round-trip exactly.
        assert sorted((h.step, h.value) for h in hist) == \
            list(zip(done["number"], done[key].astype(float), strict=True)), key
    m = client.get_run(pipeline["tune_run"]).data.metrics
    for key in REPLAY_METRICS:
        assert {f"holdout.{key}", f"holdout.{key}_low", f"holdout.{key}_high"} <= set(m)
    parent = client.get_run(pipeline["parent"]).data.metrics
    assert {f"replay.tuned-lookahead.{k}" for k in REPLAY_METRICS} <= set(parent)


def test_reliability_diagrams_and_tables(pipeline: dict[str, Any], tmp_path: Path) -> None:
    client, parent = pipeline["client"], pipeline["parent"]
    assert _is_png(_download(client, parent, "reliability_overlay.png", tmp_path / "p"))
    assert _is_png(_download(client, parent, "compare/reliability.png", tmp_path / "c"))
    for name, rid in pipeline["runs"].calibrator_runs.items():
        assert _is_png(_download(client, rid, "reliability.png", tmp_path / name)), name
        table = json.loads(_download(client, rid, "reliability_bins.json", tmp_path / name))
        assert table["data"], name
    for path in ("comparison.json", "replay_table.json"):
        assert json.loads(_download(client, parent, path, tmp_path / "t"))["data"]
    files = {f.path for f in client.list_artifacts(pipeline["tune_run"], "figures")}
    assert "figures/pareto.png" in files
    assert _is_png(_download(client, pipeline["tune_run"], "figures/pareto.png", tmp_path))
    assert json.loads(_download(client, pipeline["tune_run"], "trials.json", tmp_path))["data"]


def test_dataset_and_provenance(pipeline: dict[str, Any]) -> None:
    client = pipeline["client"]
    run = client.get_run(pipeline["parent"])
    fp = claims_fingerprint(pipeline["claims"])["sha256"]
    assert run.data.tags["data_fingerprint"] == fp
    assert run.data.tags["amv_calib_version"]
    (inp,) = run.inputs.dataset_inputs
    assert json.loads(inp.dataset.source)["uri"] == str(Path(pipeline["claims_path"]).resolve())
    assert json.loads(inp.dataset.profile)["num_rows"] == len(pipeline["claims"])


def test_registered_model_and_champion_alias(pipeline: dict[str, Any]) -> None:
    client = pipeline["client"]
    mv = client.get_model_version_by_alias(NAME, "champion")
    assert str(mv.version) == pipeline["version"].version
    assert mv.tags["artifact_version"] == pipeline["artifact"].name
    assert mv.tags["artifact_sha256"] == pipeline["version"].artifact_sha256
    assert mv.run_id == pipeline["parent"]
    assert "champion" in client.get_registered_model(NAME).aliases


# -- model server --------------------------------------------------------------------------
def _post(url: str, payload: dict[str, Any]) -> Any:
    req = urllib.request.Request(url, data=json.dumps(payload).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.loads(resp.read())["predictions"]


def test_serve_champion_over_http(pipeline: dict[str, Any], server: dict[str, Any],
                                  tmp_path: Path) -> None:
    port = _free_port()
    cmd = [str(BIN / "mlflow"), "models", "serve", "-m", f"models:/{NAME}@champion",
           "--env-manager", "local", "--host", "127.0.0.1", "--port", str(port)]
    env = _env(MLFLOW_TRACKING_URI=server["uri"])
    claims = pipeline["claims"].head(5)
    records = [{"claim_id": str(r["claim_id"]), **{c: r[c] for c in CLAIM_FEATURES}}
               for r in claims.to_dict("records")]
    for rec in records:
        rec["contradiction_flag"] = bool(rec["contradiction_flag"])
        for c in ("recency_hours", "source_trust_score", "model_confidence"):
            rec[c] = float(rec[c])
    action = {"action": {"actionId": "transfer-1", "toolName": "bank.transfer",
                         "impactCostTheta": 100.0, "abstentionCostKappa": 5.0,
                         "premises": [{"id": f"p{i}", "claim": {
                             "id": rec["claim_id"], "recencyHours": rec["recency_hours"],
                             "sourceTrustScore": rec["source_trust_score"],
                             "modelConfidence": rec["model_confidence"],
                             "contradictionFlag": rec["contradiction_flag"]}}
                             for i, rec in enumerate(records[:2])]},
              "verifiers": [{"id": "ask-user", "resolvesPremiseIds": ["p0", "p1"],
                             "executionCost": 0.2, "symmetricReliability": 0.95}]}
    gate = Gate.from_artifact(pipeline["artifact"], strict=True)
    assert gate.calibrator is not None
    want_p = gate.calibrator.predict(claims)
    want = gate.evaluate(CandidateAction.from_dict(action["action"]),
                         [Verifier.from_dict(v) for v in action["verifiers"]])
    with _serving(cmd, url=f"http://127.0.0.1:{port}/ping", env=env,
                  log=tmp_path / "serve.log", timeout=100):
        url = f"http://127.0.0.1:{port}/invocations"
        probs = _post(url, {"dataframe_records": records})
        decision = _post(url, {"dataframe_records": [{"action": json.dumps(action)}]})
        with pytest.raises(urllib.error.HTTPError) as err:
            _post(url, {"dataframe_records": [dict(records[0], model_confidence=2.0)]})
        assert err.value.code == 400
    assert [p["claim_id"] for p in probs] == [r["claim_id"] for r in records]
    np.testing.assert_allclose([p["p_violation"] for p in probs], want_p, rtol=1e-12)
    (d,) = decision
    assert d["decision"] == want.regime
    assert d["regime"] == want.regime_code
    assert d["verifier_id"] == ("" if want.verifier is None else want.verifier.id)
    assert d["reason"] == want.reason
    assert isinstance(d["probabilities"], list)  # JSON list, not a string of one
    assert d["probabilities"] == pytest.approx(list(want.probabilities), rel=1e-15)
