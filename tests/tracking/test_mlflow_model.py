"""The servable gate model (models from code) and the registry, on a SQLite store.

The registered model is loaded back with ``mlflow.pyfunc.load_model("models:/NAME@champion")``
and its answers are checked against hand-worked formulas and against the gate itself.
``test_mlflow_server.py`` serves it over HTTP.
"""

from __future__ import annotations

import hashlib
import json
import math
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import mlflow
import pandas as pd
import pytest
from _mlflow_stages import fake_compare_dir, fake_tune_dir, make_claims
from mlflow import MlflowClient
from mlflow.exceptions import MlflowException

from amv_calib import tracking
from amv_calib.artifacts._export import export_artifact
from amv_calib.exceptions import ArtifactError
from amv_calib.gate import CandidateAction, Gate, Verifier
from amv_calib.tracking import _pyfunc
from amv_calib.tracking._pyfunc import decision_example, input_example

NAME = "amv-guard-calibrator"


@pytest.fixture(scope="module")
def registered(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    root = tmp_path_factory.mktemp("model")
    claims = make_claims()
    compare = fake_compare_dir(root, claims)
    tune = fake_tune_dir(root)
    art = export_artifact(calibrator=compare, thresholds=tune / "thresholds.json",
                          name="amv-guard", models_dir=root / "models", claims=claims)
    uri = f"sqlite:///{root / 'mlflow.db'}"
    version = tracking.register_champion(art.path, tracking_uri=uri)
    with pytest.MonkeyPatch.context() as mp:
        # models:/ URIs resolve through the registry of the current tracking URI.
        mp.setenv("MLFLOW_TRACKING_URI", uri)
        model = mlflow.pyfunc.load_model(f"models:/{NAME}@champion")
        yield {"root": root, "uri": uri, "artifact": art.path, "version": version,
               "model": model, "compare": compare, "tune": tune, "claims": claims}


def _seed_formula(row: dict[str, Any], intercept: float, clamp: tuple[float, float]) -> float:
    # The seed's logistic formula written out by hand (DESIGN section 4).
    conf = min(max(row["model_confidence"], 1e-5), 1 - 1e-5)
    z = (intercept - 1.42 * math.log(conf / (1 - conf))
         + 2.15 * min(1.0, row["recency_hours"] / 720.0)
         - 1.80 * row["source_trust_score"] + (2.5 if row["contradiction_flag"] else 0.0))
    return min(clamp[1], max(clamp[0], 1.0 / (1.0 + math.exp(-z))))


# -- the logged model ------------------------------------------------------------------------
def test_model_is_logged_from_code_not_pickled(registered: dict[str, Any],
                                               tmp_path: Path) -> None:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MLFLOW_TRACKING_URI", registered["uri"])
        local = Path(mlflow.artifacts.download_artifacts(f"models:/{NAME}@champion",
                                                         dst_path=str(tmp_path)))
    mlmodel = (local / "MLmodel").read_text()
    code = Path(_pyfunc.__file__).name
    assert "model_code_path" in mlmodel or code in mlmodel
    files = {p.name for p in local.rglob("*") if p.is_file()}
    assert code in files
    assert not any(f.endswith((".pkl", ".pickle", ".cloudpickle")) for f in files)
    # The portable artifact travels inside the model, byte for byte.
    shipped = next(p for p in local.rglob("manifest.json"))
    assert shipped.read_bytes() == (registered["artifact"] / "manifest.json").read_bytes()


def test_signature_and_input_example(registered: dict[str, Any]) -> None:
    meta = registered["model"].metadata
    names = [c.name for c in meta.get_input_schema().inputs]
    assert names[:5] == ["claim_id", "recency_hours", "source_trust_score",
                         "model_confidence", "contradiction_flag"]
    assert "action" in names
    assert all(not c.required for c in meta.get_input_schema().inputs)
    assert meta.saved_input_example_info is not None


def test_signature_names_every_column_the_model_reads_and_answers(
        registered: dict[str, Any]) -> None:
    sig = _pyfunc.model_signature()
    assert [(c.name, c.type.name) for c in sig.inputs.inputs] == [
        ("claim_id", "string"), ("recency_hours", "double"), ("source_trust_score", "double"),
        ("model_confidence", "double"), ("contradiction_flag", "boolean"),
        ("memory_kind", "string"), ("action", "string"), ("verifiers", "string")]
    outputs = [(c.name, getattr(c.type, "name", None) or repr(c.type))
               for c in sig.outputs.inputs]
    assert outputs == [
        ("claim_id", "string"), ("p_violation", "double"), ("action_id", "string"),
        ("decision", "string"), ("regime", "long"), ("verifier_id", "string"),
        ("reason", "string"), ("p_any", "double"), ("expected_loss", "double"),
        ("probabilities", "Array(double)"), ("artifact_version", "string")]
    assert all(not c.required for c in [*sig.inputs.inputs, *sig.outputs.inputs])
    # what the model answers is what the signature names
    named = [name for name, _ in outputs]
    answers = [registered["model"].predict(input_example()),
               registered["model"].predict(decision_example())]
    assert all(set(out.columns) <= set(named) for out in answers)


def test_version_tags_link_the_artifact(registered: dict[str, Any]) -> None:
    client = MlflowClient(tracking_uri=registered["uri"], registry_uri=registered["uri"])
    mv = client.get_model_version_by_alias(NAME, "champion")
    manifest = registered["artifact"] / "manifest.json"
    assert str(mv.version) == registered["version"].version
    assert mv.tags["artifact_version"] == registered["artifact"].name
    assert mv.tags["artifact_name"] == "amv-guard"
    assert mv.tags["artifact_sha256"] == hashlib.sha256(manifest.read_bytes()).hexdigest()
    assert mv.tags["calibrator_sha256"] == json.loads(manifest.read_text())["files"][
        "calibrator.json"]
    assert mv.tags["data_fingerprint"] == json.loads(manifest.read_text())[
        "training_data"]["sha256"]
    assert str(registered["version"]) == str(mv.version)
    assert not mv.current_stage or mv.current_stage == "None"  # no registry stages


# -- probabilities ---------------------------------------------------------------------------
def test_probabilities_match_the_seed_formula_and_the_gate(registered: dict[str, Any]) -> None:
    champion = json.loads((registered["compare"] / "champion.json").read_text())
    clamp = tuple(json.loads((registered["tune"] / "thresholds.json").read_text())["clamp"])
    frame = input_example()
    out = registered["model"].predict(frame)
    assert list(out.columns) == ["claim_id", "p_violation"]
    assert out["claim_id"].tolist() == frame["claim_id"].tolist()
    gate = Gate.from_artifact(registered["artifact"], strict=True)
    for i, row in enumerate(frame.to_dict("records")):
        want = _seed_formula(row, champion["intercept"], clamp)  # type: ignore[arg-type]
        assert out["p_violation"][i] == pytest.approx(want, rel=1e-12)
        assert out["p_violation"][i] == gate.calibrator.predict_one(row)  # type: ignore[union-attr]


def test_many_claims_at_once(registered: dict[str, Any]) -> None:
    claims = registered["claims"]
    out = registered["model"].predict(claims[["recency_hours", "source_trust_score",
                                              "model_confidence", "contradiction_flag"]])
    gate = Gate.from_artifact(registered["artifact"], strict=True)
    assert gate.calibrator is not None
    assert out["p_violation"].tolist() == pytest.approx(gate.calibrator.predict(claims).tolist(),
                                                        rel=1e-15)


def test_memory_kind_column_reaches_a_calibrator_without_kinds_unread(
        registered: dict[str, Any]) -> None:
    # the signature lets the column through; the shipped calibrator has no kinds and
    # ignores it (a kind-aware one reads it: tests/artifacts/test_kind_consumers.py)
    cols = ["recency_hours", "source_trust_score", "model_confidence", "contradiction_flag"]
    claims = registered["claims"][cols].head(20)
    plain = registered["model"].predict(claims)
    kinded = registered["model"].predict(claims.assign(memory_kind=["event", None] * 10))
    assert kinded["p_violation"].tolist() == plain["p_violation"].tolist()


@pytest.mark.parametrize(
    ("frame", "match"),
    [
        (pd.DataFrame({"recency_hours": [1.0], "source_trust_score": [0.5],
                       "model_confidence": [1.5], "contradiction_flag": [False]}),
         r"row 0: model_confidence=1\.5 must lie in \[0, 1\]"),
        (pd.DataFrame({"recency_hours": [1.0, -2.0], "source_trust_score": [0.5, 0.5],
                       "model_confidence": [0.5, 0.5], "contradiction_flag": [False, False]}),
         r"row 1: recency_hours=-2\.0 must be >= 0"),
        (pd.DataFrame({"recency_hours": [1.0, 2.0], "source_trust_score": [0.5, None],
                       "model_confidence": [0.5, 0.5], "contradiction_flag": [False, True]}),
         r"row 1: source_trust_score=(None|nan) is missing or not a number"),
        (pd.DataFrame({"recency_hours": ["soon"], "source_trust_score": [0.5],
                       "model_confidence": [0.5], "contradiction_flag": [False]}),
         # MLflow's schema enforcement answers first, naming the column.
         r"column recency_hours\. Can not safely convert"),
        (pd.DataFrame({"recency_hours": [1.0], "source_trust_score": [0.5]}),
         r"claims lack columns \['model_confidence', 'contradiction_flag'\]"),
        (pd.DataFrame({"recency_hours": [1.0], "source_trust_score": [0.5],
                       "model_confidence": [0.5], "contradiction_flag": [False],
                       "action": ["{}"]}), "not both"),
    ],
    ids=["confidence-above-1", "negative-recency", "missing-trust", "text-recency",
         "missing-columns", "mixed-request"],
)
def test_bad_probability_requests_are_refused(registered: dict[str, Any], frame: pd.DataFrame,
                                              match: str) -> None:
    with pytest.raises(MlflowException, match=match):
        registered["model"].predict(frame)


# -- decisions -------------------------------------------------------------------------------
def _request(p: float | None, *, theta: float = 100.0, kappa: float = 5.0,
             verifier_cost: float = 0.5, r: float = 0.95) -> dict[str, Any]:
    premise: dict[str, Any] = {"id": "p1"}
    if p is None:
        premise["claim"] = {"id": "c1", "recencyHours": 400.0, "sourceTrustScore": 0.7,
                            "modelConfidence": 0.8, "contradictionFlag": False}
    else:
        premise["calibratedViolationProbability"] = p
    return {"action": {"actionId": "a1", "toolName": "bank.transfer", "impactCostTheta": theta,
                       "abstentionCostKappa": kappa, "premises": [premise]},
            "verifiers": [{"id": "ask-user", "resolvesPremiseIds": ["p1"],
                           "executionCost": verifier_cost, "symmetricReliability": r}]}


def _gate_answer(artifact: Path, request: dict[str, Any]) -> Any:
    gate = Gate.from_artifact(artifact, strict=True)
    return gate.evaluate(CandidateAction.from_dict(request["action"]),
                         [Verifier.from_dict(v) for v in request["verifiers"]])


def test_decision_worked_by_hand(registered: dict[str, Any]) -> None:
    # One premise p = 0.02, theta = 100, kappa = 5, one verifier r = 0.95, c = 0.5.
    t = json.loads((registered["tune"] / "thresholds.json").read_text())
    lam, delta, eps = t["lambda_cost_scale"], t["delta_loss_threshold"], t["epsilon_harm_bound"]
    p, r, theta, kappa, c = 0.02, 0.95, 100.0, 5.0, 0.5
    lim = min(delta, kappa)

    def v_stop(q: float) -> float:
        return theta * q if (theta * q <= lim and q <= eps) else kappa

    pc = (1 - p) * r + p * (1 - r)
    p_plus, p_minus = p * (1 - r) / pc, p * r / (1 - pc)
    voi = v_stop(p) - (pc * v_stop(p_plus) + (1 - pc) * v_stop(p_minus)) - lam * c
    assert voi > 0  # so the hand-worked answer is VERIFY with ask-user
    out = registered["model"].predict(pd.DataFrame({"action": [json.dumps(_request(p))]}))
    assert out.loc[0, "decision"] == "VERIFY"
    assert out.loc[0, "regime"] == 1
    assert out.loc[0, "verifier_id"] == "ask-user"
    assert out.loc[0, "p_any"] == pytest.approx(p)
    assert out.loc[0, "expected_loss"] == pytest.approx(theta * p)
    assert out.loc[0, "artifact_version"] == registered["artifact"].name


@pytest.mark.parametrize("p", [None, 0.001, 0.02, 0.3, 0.9], ids=lambda p: f"p={p}")
@pytest.mark.parametrize("cost", [0.0, 0.5, 50.0], ids=lambda c: f"cost={c}")
def test_decisions_match_the_gate(registered: dict[str, Any], p: float | None,
                                  cost: float) -> None:
    request = _request(p, verifier_cost=cost)
    want = _gate_answer(registered["artifact"], request)
    out = registered["model"].predict(pd.DataFrame({"action": [json.dumps(request)]}))
    assert out.loc[0, "decision"] == want.regime
    assert out.loc[0, "regime"] == want.regime_code
    assert out.loc[0, "verifier_id"] == ("" if want.verifier is None else want.verifier.id)
    assert out.loc[0, "reason"] == want.reason
    assert list(out.loc[0, "probabilities"]) == list(want.probabilities)  # a list, not text


def test_bare_action_with_a_verifiers_column(registered: dict[str, Any]) -> None:
    request = _request(0.02)
    frame = pd.DataFrame({"action": [json.dumps(request["action"])] * 2,
                          "verifiers": [json.dumps(request["verifiers"]), None]})
    out = registered["model"].predict(frame)
    assert out["decision"].tolist()[0] == "VERIFY"
    # Without verifiers the same action can only PROCEED (admissible) or ABSTAIN.
    assert out["decision"].tolist()[1] == _gate_answer(
        registered["artifact"], {**request, "verifiers": []}).regime


def test_decision_example_runs(registered: dict[str, Any]) -> None:
    example = decision_example()
    out = registered["model"].predict(example)
    want = _gate_answer(registered["artifact"], json.loads(example.loc[0, "action"]))
    assert out.loc[0, "decision"] == want.regime
    assert out.loc[0, "verifier_id"] == ("" if want.verifier is None else want.verifier.id)
    assert out.loc[0, "reason"] == want.reason


@pytest.mark.parametrize(
    ("cell", "match"),
    [("{not json", r"row 0: 'action' is not valid JSON"),
     (json.dumps({"action": {"actionId": "a"}, "verifiers": []}), r"row 0: action lacks"),
     (json.dumps({"action": {}, "extra": 1}), r"row 0: request has unknown keys \['extra'\]")],
    ids=["bad-json", "incomplete-action", "unknown-key"],
)
def test_bad_decision_requests_are_refused(registered: dict[str, Any], cell: str,
                                           match: str) -> None:
    with pytest.raises(MlflowException, match=match):
        registered["model"].predict(pd.DataFrame({"action": [cell]}))


def test_tampered_artifact_fails_closed(registered: dict[str, Any], tmp_path: Path) -> None:
    from amv_calib.tracking import _pyfunc as mlflow_model
    bad = tmp_path / registered["artifact"].name
    shutil.copytree(registered["artifact"], bad)
    cal = bad / "calibrator.json"
    cal.write_text(cal.read_text().replace('"intercept": ', '"intercept": 1'))
    path = tmp_path / "model"
    mlflow.pyfunc.save_model(str(path), python_model=mlflow_model.__file__,
                             artifacts={"amv_artifact": str(bad)},
                             signature=mlflow_model.model_signature(),
                             input_example=decision_example(),
                             pip_requirements=mlflow_model.pip_requirements())
    model = mlflow.pyfunc.load_model(str(path))
    out = model.predict(pd.DataFrame({"action": [json.dumps(_request(0.0001))]}))
    assert out.loc[0, "decision"] == "ABSTAIN"
    assert "sha256 mismatch" in out.loc[0, "reason"]
    with pytest.raises(MlflowException, match="artifact refused"):
        model.predict(input_example())


# -- registry aliases --------------------------------------------------------------------------
def test_registry_promote_moves_the_alias(registered: dict[str, Any]) -> None:
    uri, name = registered["uri"], "amv-promote-test"
    v2 = export_artifact(calibrator=registered["compare"] / "calibrators" / "beta.json",
                         name="amv-guard", models_dir=registered["root"] / "models")
    first = tracking.register_champion(registered["artifact"], registered_name=name,
                                       tracking_uri=uri)
    second = tracking.register_champion(v2.path, registered_name=name, tracking_uri=uri)
    client = MlflowClient(tracking_uri=uri, registry_uri=uri)
    assert str(client.get_model_version_by_alias(name, "champion").version) == second.version
    back = tracking.registry_promote(registered["artifact"].name, registered_name=name,
                                     tracking_uri=uri)
    assert back.version == first.version
    assert str(client.get_model_version_by_alias(name, "champion").version) == first.version
    tracking.registry_promote(int(second.version), "canary", registered_name=name,
                              tracking_uri=uri)
    assert str(client.get_model_version_by_alias(name, "canary").version) == second.version
    by_folder = tracking.registry_promote(v2.path, registered_name=name, tracking_uri=uri)
    assert by_folder.version == second.version
    with pytest.raises(ArtifactError, match="has no artifact version v99"):
        tracking.registry_promote("v99", registered_name=name, tracking_uri=uri)
    with pytest.raises(ArtifactError, match="no versions"):
        tracking.registry_promote("1", registered_name="nobody", tracking_uri=uri)


def test_cli_register_and_registry_promote(registered: dict[str, Any],
                                           capsys: pytest.CaptureFixture[str]) -> None:
    from amv_calib.cli import main

    uri = registered["uri"]
    assert main(["register", str(registered["artifact"]), "--name", "amv-cli-test",
                 "--tracking-uri", uri, "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["alias"] == "champion" and got["version"] == "1"
    assert got["model_uri"] == "models:/amv-cli-test@champion"
    assert main(["registry-promote", "amv-cli-test", "1", "--alias", "production",
                 "--tracking-uri", uri]) == 0
    assert "promoted amv-cli-test version 1 @production" in capsys.readouterr().out
    assert main(["registry-promote", "amv-cli-test", "v77", "--tracking-uri", uri]) == 1
    assert "has no artifact version v77" in capsys.readouterr().err


@pytest.mark.slow
def test_bench_quick_runs(run_bench: Callable[..., dict[str, Any]]) -> None:
    data = run_bench("bench_mlflow")
    t, p = data["trial_logging"], data["pyfunc"]
    # both ways of logging leave the same values in the store; the pyfunc answers as the
    # calls it wraps
    assert t["same_values_logged"] and p["same_probabilities"] and p["same_decision"]
    # one commit per value against one per 1,000 (about 20x at the quick run's 40 values,
    # 45x at 2,000): loose for a loaded machine
    assert t["ratio_per_call_over_batch"] >= 3
