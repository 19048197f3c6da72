"""``amv-calib gate --action ACTION.json [--artifact DIR]``."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from amv_calib.cli import main
from amv_calib.contract._features import seed_prior_calibrator

CLAIM = {"id": "iban-42", "statement": "IBAN is X", "timestamp": 1.7e9,
         "sourceTrustScore": 0.9, "modelConfidence": 0.97, "recencyHours": 30.0,
         "contradictionFlag": False}


def write(tmp_path: Path, premise_p: float | None, *, name: str = "action.json") -> Path:
    premise: dict[str, Any] = {"id": "p1", "claimId": "iban-42", "dependencyType": "direct",
                               "parameterTarget": "iban", "claim": CLAIM,
                               "calibratedViolationProbability": premise_p}
    doc = {
        "action": {"actionId": "tx-1", "toolName": "bank_transfer", "arguments": {"amount": 5},
                   "impactCostTheta": 50.0, "abstentionCostKappa": 4.0, "premises": [premise]},
        "verifiers": [{"id": "bank-api", "resolvesPremiseIds": ["p1"], "executionCost": 0.2,
                       "symmetricReliability": 0.95}],
    }
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return path


@pytest.fixture(autouse=True)
def _empty_models_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No shipped champion to default to, unless a test exports one."""
    models = tmp_path / "models"
    monkeypatch.setenv("AMV_CALIB_MODELS_DIR", str(models))
    return models


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict[str, Any], str]:
    code = main(["gate", *argv])
    out, err = capsys.readouterr()
    return code, (json.loads(out) if out.strip() else {}), err


def test_prints_the_decision(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "--action", str(write(tmp_path, 0.001)), "--no-artifact")
    assert code == 0
    assert out["action_id"] == "tx-1" and out["regime"] == "PROCEED"
    assert out["probabilities"] == [0.001] and out["gate"]["planner"] == "lookahead"
    code, out, _ = run_cli(capsys, "--action", str(write(tmp_path, 0.3)), "--planner", "myopic",
                           "--epsilon", "0.05", "--no-artifact")
    assert out["regime"] == "VERIFY" and out["verifier"] == "bank-api"
    assert out["gate"]["epsilon_harm_bound"] == 0.05


def test_without_a_calibrator_it_abstains_never_proceeds(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, None)
    code, out, _ = run_cli(capsys, "--action", str(path), "--no-artifact")
    assert code == 0 and out["regime"] == "ABSTAIN"
    assert "failing closed" in out["reason"] and "no calibrator" in out["reason"]
    # with the seed prior (seed mode) or a calibrator file the claim gets a probability
    code, out, _ = run_cli(capsys, "--action", str(path), "--mode", "seed")
    assert out["probabilities"] and out["regime"] in ("PROCEED", "VERIFY")
    cal = tmp_path / "calibrator.json"
    cal.write_text(json.dumps(seed_prior_calibrator().to_dict()))
    code, out, _ = run_cli(capsys, "--action", str(path), "--calibrator", str(cal))
    assert out["probabilities"] == [pytest.approx(
        seed_prior_calibrator().predict_one({"recency_hours": 30.0, "source_trust_score": 0.9,
                                             "model_confidence": 0.97,
                                             "contradiction_flag": 0.0}))]


def test_artifact(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, None)
    # a missing or refused artifact: fail closed with the reason, or an error with --strict
    code, out, _ = run_cli(capsys, "--action", str(path), "--artifact", str(tmp_path / "no"))
    assert code == 0 and out["regime"] == "ABSTAIN"
    assert out["reason"].startswith("artifact refused") and out["gate"]["refusal"]
    code, _, err = run_cli(capsys, "--action", str(path), "--artifact", str(tmp_path / "no"),
                           "--strict")
    assert code != 0 and "amv-calib gate: error:" in err
    from amv_calib.artifacts import export_artifact

    res = export_artifact(calibrator=seed_prior_calibrator(), name="amv-guard",
                                    models_dir=tmp_path / "models")
    code, out, _ = run_cli(capsys, "--action", str(path), "--artifact", str(res.path))
    assert code == 0 and out["probabilities"] and out["regime"] != "ABSTAIN"
    assert out["gate"]["artifact"]["name"] == "amv-guard"


@pytest.mark.parametrize(
    ("content", "pattern"),
    [("{not json", "not JSON"), ('{"verifiers": []}', "lacks an 'action' object"),
     ('{"action": {"actionId": "a", "impactCostTheta": -1, "abstentionCostKappa": 1, '
      '"premises": []}}', r"impact_cost_theta=-1\.0")],
    ids=["not-json", "no-action", "bad-theta"],
)
def test_bad_action_files(tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str,
                          pattern: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(content)
    code, _, err = run_cli(capsys, "--action", str(path))
    assert code == 2
    assert re.search(pattern, err), err


def test_harm_price_option(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, 0.001)
    code, out, _ = run_cli(capsys, "--action", str(path), "--no-artifact")
    assert out["regime"] == "PROCEED" and out["gate"]["harm_price"] == 0.0
    # priced at 5000, R = 5050 * 0.001 = 5.05 > min(delta, kappa) = 4: no longer admissible
    code, out, _ = run_cli(capsys, "--action", str(path), "--harm-price", "5000",
                           "--no-artifact")
    assert code == 0 and out["gate"]["harm_price"] == 5000.0
    assert out["regime"] != "PROCEED" and out["r_expected"] == pytest.approx(5.05, rel=1e-12)
    for bad in ("-1", "nan", "inf", "x"):
        with pytest.raises(SystemExit) as exc:
            main(["gate", "--action", str(path), "--harm-price", bad])
        assert exc.value.code == 2
        assert "--harm-price" in capsys.readouterr().err


def test_defaults_to_the_production_artifact(tmp_path: Path, _empty_models_dir: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    from amv_calib.artifacts import export_artifact, promote

    path = write(tmp_path, None)
    code, out, err = run_cli(capsys, "--action", str(path))
    assert code == 2 and not out
    assert f"no {_empty_models_dir / 'amv-guard'}@production" in err
    assert "--artifact" in err and "--no-artifact" in err
    res = export_artifact(calibrator=seed_prior_calibrator(), name="amv-guard",
                          models_dir=_empty_models_dir)
    promote("amv-guard", res.version, alias="production", models_dir=_empty_models_dir)
    code, out, _ = run_cli(capsys, "--action", str(path))
    assert code == 0 and out["probabilities"] and out["regime"] != "ABSTAIN"
    assert out["gate"]["artifact"]["version"] == res.version
    # the same decision as naming the artifact explicitly
    code, named, _ = run_cli(capsys, "--action", str(path), "--artifact", str(res.path))
    assert named == out


def test_the_readme_gate_examples_run_as_written(repo_root: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    import subprocess
    import sys

    readme = (repo_root / "README.md").read_text(encoding="utf-8")
    snippet = next(b for b in re.findall(r"```python\n(.*?)```", readme, re.S)
                   if "gate.run(" in b)
    done = subprocess.run([sys.executable, "-c", snippet], cwd=repo_root, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines() == ["VERIFY", "['bank-api'] PROCEED"]
    # the shell form, on the example action file, gives the same first decision
    code, out, _ = run_cli(capsys, "--action", str(repo_root / "data/examples/action.json"),
                           "--artifact", str(repo_root / "models/amv-guard@production"))
    assert code == 0 and (out["regime"], out["verifier"]) == ("VERIFY", "bank-api")
