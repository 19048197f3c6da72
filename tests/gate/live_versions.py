"""Versions of one model for the LiveGate tests: valid ones told apart by their harm price,
and tampered ones no gate may serve."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from amv_calib.artifacts import DEFAULT_THRESHOLDS, export_artifact
from amv_calib.contract import (
    calibrator_sha256,
    check_thresholds,
    seed_prior_calibrator,
    with_gate_clamp,
)

#: The harm price of each valid version: a decision's ``r_expected`` names the version that
#: made it, ``(theta + mu) * P_any``.
HARM_PRICES = {"v1": 0.0, "v2": 10.0, "v3": 20.0, "v4": 30.0}
#: Versions no gate may serve: v5's calibrator.json changed after export (a sha256
#: mismatch), v6 carries v1's certificate (bound to other thresholds).
TAMPERED = ("v5", "v6")


def _thresholds(mu: float) -> dict[str, Any]:
    return {**DEFAULT_THRESHOLDS, "harm_price": mu}


def _certificate_for(thresholds: dict[str, Any]) -> dict[str, Any]:
    cal, gate = with_gate_clamp(seed_prior_calibrator(), check_thresholds(thresholds))
    return {"alpha": 0.01, "delta": 0.05, "n": 900, "chosen": 0, "thresholds": gate,
            "path": [gate], "harms": [1], "observed_upper_bound": 0.0052,
            "calibrator_sha256": calibrator_sha256(cal)}


def manifest_sha(version_dir: Path) -> str:
    return hashlib.sha256((version_dir / "manifest.json").read_bytes()).hexdigest()


def point_alias_by_hand(model_dir: Path, version: str, alias: str = "production") -> None:
    """Point ``alias`` at ``version`` as someone with write access to models/ could, without
    ``promote``'s verification: the entry names the version's manifest sha256 as it is now."""
    path = model_dir / "aliases.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    sha = manifest_sha(model_dir / version)
    entry = data["aliases"][alias]
    entry.update(version=version, manifest_sha256=sha)
    entry["history"].append({"version": version, "manifest_sha256": sha,
                             "promoted_utc": "2026-12-02T00:00:00Z"})
    tmp = path.with_name(".aliases.json.by-hand")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def make_versions(models: Path) -> None:
    """``models/m/v1..v6``: v1-v4 valid (harm prices :data:`HARM_PRICES`, each certified),
    v5 and v6 tampered (:data:`TAMPERED`); no alias."""
    for mu in HARM_PRICES.values():
        export_artifact(calibrator=seed_prior_calibrator(), thresholds=_thresholds(mu),
                        name="m", models_dir=models, include_joblib=False,
                        certificate=_certificate_for(_thresholds(mu)))
    for _ in TAMPERED:
        export_artifact(calibrator=seed_prior_calibrator(), thresholds=_thresholds(40.0),
                        name="m", models_dir=models, include_joblib=False)
    mdir = models / "m"
    (mdir / "v5" / "calibrator.json").write_bytes(
        (mdir / "v5" / "calibrator.json").read_bytes().replace(b"0.999", b"0.998"))
    manifest = json.loads((mdir / "v6" / "manifest.json").read_text(encoding="utf-8"))
    manifest["certificate"] = json.loads(
        (mdir / "v1" / "manifest.json").read_text(encoding="utf-8"))["certificate"]
    (mdir / "v6" / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True)
                                               + "\n", encoding="utf-8")
