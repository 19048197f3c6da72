"""examples/: each example runs as documented and does what its docstring says."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType

from amv_calib.gate import read_decision_log

REPO = Path(__file__).resolve().parents[1]


def _example(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, REPO / "examples" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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
