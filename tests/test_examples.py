"""examples/: each example runs as documented and does what its docstring says."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest
from repo_paths import REPO_ROOT, load_module

from amv_calib.gate import read_decision_log


def _example(name: str) -> ModuleType:
    return load_module(REPO_ROOT / "examples" / f"{name}.py", name)


def test_agent_loop_promotes_and_rolls_back_under_a_running_agent(tmp_path: Path) -> None:
    """The agent on v1 logs decisions and outcomes; label -> retrain -> certify -> promote
    makes v2, which the same LiveGate serves at its next check; a rollback brings v1 back."""
    summary = _example("agent_loop").run(tmp_path / "loop", n_actions=800)
    assert summary["versions_served"] == {"before": ["v1"], "after_promotion": ["v2"],
                                          "after_rollback": ["v1"]}
    live = summary["live_gate"]
    assert (live["version"], live["swaps"], live["refusals"]) == ("v1", 2, 0)
    regimes = summary["first_run"]["regimes"]
    assert set(regimes) == {"PROCEED", "ABSTAIN"} and sum(regimes.values()) == 800
    assert summary["first_run"]["bank_checks_before_deciding"] > 0
    assert summary["refusals_read_by_the_model"] > 0
    assert "Doubtful premise 'payee_iban'" in summary["a_refusal"]
    assert summary["label"] == {"joined": 800, "episodes_written": 800}
    assert summary["promote"]["promoted"] and summary["promote"]["version"] == "v2"
    assert summary["certify"]["calibration_episodes"] + \
        summary["certify"]["excluded_episodes"] == 800
    # the decision log: v1 for the first run, then v2, then v1 again, each record naming it
    versions = [r["calibrator"]["version"] for r in
                read_decision_log(tmp_path / "loop" / "logs" / "decisions.jsonl")]
    assert versions == ["v1"] * 800 + ["v2"] * 20 + ["v1"] * 20
    promotion = json.loads((tmp_path / "loop" / "models" / "amv-guard" / "aliases.json")
                           .read_text())["aliases"]["production"]
    assert [h["version"] for h in promotion["history"]] == ["v1"]
    assert [e["action"] for e in promotion["log"]] == ["promote", "promote", "rollback"]


def test_demo_check_says_whether_the_demo_reproduced_the_shipped_champion(
        tmp_path: Path, shipped_models: Callable[[Path], Path],
        capsys: pytest.CaptureFixture[str]) -> None:
    """The same bytes: said so. Coefficients moved by last-bit noise (as another CPU's BLAS
    kernels move them): said so, with the largest difference, and the decisions compared."""
    import dataclasses

    from amv_calib.artifacts import export_artifact
    from amv_calib.contract import load_artifact

    check = _example("demo_check")
    models = shipped_models(tmp_path / "models")
    v1 = models / "amv-guard" / "v1"
    assert check.main(["--mine", str(v1)]) == 0
    assert "reproduces the shipped models/amv-guard/v1" in capsys.readouterr().out

    shipped = load_artifact(v1)
    cal = shipped.calibrator
    noisy = dataclasses.replace(cal, intercept=cal.intercept + 2e-14)
    mine = export_artifact(calibrator=noisy, thresholds=dict(shipped.thresholds),
                           name="amv-guard", models_dir=tmp_path / "mine",
                           include_joblib=False)
    assert check.main(["--mine", str(mine.path)]) == 0
    out = capsys.readouterr().out
    assert "is not the shipped models/amv-guard/v1" in out
    assert "largest coefficient difference 2e-14" in out
    assert "its decisions equal v1's on every one" in out
    # A threshold one unit in the last place away (as numpy's SIMD paths move a tuned one):
    # named, with both values.
    lam = float(shipped.thresholds["lambda_cost_scale"])
    nudged = {**dict(shipped.thresholds), "lambda_cost_scale": math.nextafter(lam, 1.0)}
    other = export_artifact(calibrator=cal, thresholds=nudged, name="amv-guard",
                            models_dir=tmp_path / "other", include_joblib=False)
    assert check.main(["--mine", str(other.path)]) == 0
    out = capsys.readouterr().out
    assert (f"the gate thresholds differ (lambda_cost_scale {math.nextafter(lam, 1.0)!r} "
            f"against v1's {lam!r})") in out
    assert "calibrator.json differs" not in out
    assert "its decisions equal v1's on every one" in out
    assert check.main(["--mine", str(tmp_path / "none")]) == 2
