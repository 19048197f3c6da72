"""Attacks on export and promote replayed: a certificate moved onto what it never certified,
and JSON inputs that give a key twice.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from threat_helpers import claim_action

from amv_calib.exceptions import DataContractError


# -- a certificate moved onto what it never certified ----------------------------------------------
def _certificate_parts(v1: Path, tmp_path: Path) -> tuple[Path, Path, Path]:
    """What a user (or an attacker) copies out of v1: its certificate and gate thresholds,
    and a doctored calibrator (intercept -40: p about 1e-18 for every claim)."""
    manifest = json.loads((v1 / "manifest.json").read_text())
    cert, thr, evil = (tmp_path / n for n in ("cert_v1.json", "thr_v1.json", "evil.json"))
    cert.write_text(json.dumps(manifest["certificate"]))
    thr.write_text(json.dumps(manifest["gate"]))
    cal = json.loads((v1 / "calibrator.json").read_text())
    cal["intercept"] = -40.0
    evil.write_text(json.dumps(cal))
    return cert, thr, evil


def test_export_refuses_a_certificate_made_for_another_calibrator_or_thresholds(
        v1: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from amv_calib.cli import main

    cert, thr, evil = _certificate_parts(v1, tmp_path)
    models = str(v1.parent.parent)
    assert main(["export", "--calibrator", str(evil), "--thresholds", str(thr),
                 "--certificate", str(cert), "--name", "amv-guard", "--models-dir",
                 models]) == 2
    err = capsys.readouterr().err
    want = json.loads((v1 / "manifest.json").read_text())["certificate"]["calibrator_sha256"]
    assert f"certificate was made for calibrator sha256 {want}" in err
    assert re.search(r"but this calibrator\.json has sha256 [0-9a-f]{64}", err)
    looser = tmp_path / "looser.json"
    looser.write_text(json.dumps({**json.loads(thr.read_text()), "epsilon_harm_bound": 0.5}))
    assert main(["export", "--calibrator", str(v1 / "calibrator.json"), "--thresholds",
                 str(looser), "--certificate", str(cert), "--name", "amv-guard",
                 "--models-dir", models]) == 2
    assert re.search(r"certificate certified thresholds sha256 [0-9a-f]{64}, but this gate "
                     r"has sha256 [0-9a-f]{64} \(they differ in \['epsilon_harm_bound'\]\)",
                     capsys.readouterr().err)
    assert sorted(p.name for p in v1.parent.iterdir() if p.is_dir()) == ["v1"]


def test_a_version_carrying_a_moved_certificate_is_refused_by_promote_and_the_gate(
        v1: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # The same doctored calibrator exported without a certificate, then v1's certificate
    # pasted into its manifest by hand: the files' hashes are right, the binding is not.
    from amv_calib.artifacts import export_artifact
    from amv_calib.cli import main
    from amv_calib.gate import Gate

    cert, thr, evil = _certificate_parts(v1, tmp_path)
    v2 = export_artifact(calibrator=evil, thresholds=thr, name="amv-guard",
                         models_dir=v1.parent.parent, include_joblib=False).path
    manifest = json.loads((v2 / "manifest.json").read_text())
    manifest["certificate"] = json.loads(cert.read_text())
    (v2 / "manifest.json").write_text(json.dumps(manifest))
    for force in ([], ["--force"]):  # a person's decision cannot bind it either
        assert main(["promote", "amv-guard", "v2", "--alias", "production", "--models-dir",
                     str(v1.parent.parent), *force]) == 2
        assert "certificate was made for calibrator sha256" in capsys.readouterr().err
    assert json.loads((v1.parent / "aliases.json").read_text())["aliases"]["production"][
        "version"] == "v1"
    d = Gate.from_artifact(v2).evaluate(claim_action())
    assert d.regime == "ABSTAIN" and "certificate was made for calibrator" in d.reason
    assert main(["verify-artifact", str(v2)]) == 2
    # the genuine v1 under the same gate decides as before: the claim is doubtful
    assert Gate.from_artifact(v1).evaluate(claim_action()).regime == "ABSTAIN"


# -- thresholds, certificates and episodes giving a key twice --------------------------------------
def test_episodes_thresholds_and_certificates_giving_a_key_twice_are_refused(
        tmp_path: Path, sample_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from amv_calib.artifacts import export_artifact
    from amv_calib.contract import seed_prior_calibrator
    from amv_calib.exceptions import ConfigError
    from amv_calib.tuning import load_episodes

    first = (sample_dir / "episodes.jsonl").read_text().splitlines()[0]
    episodes = tmp_path / "episodes.jsonl"
    episodes.write_text(first + "\n" + first[:-1] + ', "family": "x"}\n')
    with pytest.raises(DataContractError, match=r"row 2.*key 'family' appears twice"):
        load_episodes(episodes)
    thresholds = tmp_path / "thresholds.json"
    thresholds.write_text('{"lambda_cost_scale": 1.0, "delta_loss_threshold": 1.0, '
                          '"epsilon_harm_bound": 0.05, "epsilon_harm_bound": 1.0, '
                          '"planner": "lookahead", "max_verifications": 2, "clamp": null}')
    with pytest.raises(ConfigError, match="key 'epsilon_harm_bound' appears twice"):
        export_artifact(calibrator=seed_prior_calibrator(), thresholds=thresholds, name="m",
                        models_dir=tmp_path / "models")
    certificate = tmp_path / "certificate.json"
    certificate.write_text('{"alpha": 0.05, "delta": 0.1, "n": 500, "alpha": 0.9}')
    with pytest.raises(ConfigError, match="key 'alpha' appears twice"):
        export_artifact(calibrator=seed_prior_calibrator(), certificate=certificate,
                        name="m", models_dir=tmp_path / "models")
