"""What several threat files share: a plain claim row, an action the shipped gate must not
let through, and a CLI call that must answer rather than hang."""

from __future__ import annotations

import threading
from typing import Any

#: One valid claim row (every required column), for the attacks to vary.
CLAIM_ROW = {"claim_id": "c", "timestamp": "2026-01-01T00:00:00Z", "recency_hours": 5.0,
             "source_trust_score": 0.5, "model_confidence": 0.5, "contradiction_flag": False,
             "violated": False}


def claim_action(theta: float = 1e6) -> Any:
    """An action on one claim the shipped calibrator scores above 0.9 (old, untrusted,
    doubted and contradicted): the genuine gate ABSTAINs on it at any large ``theta``."""
    from amv_calib.gate import CandidateAction, MemoryClaim, Premise

    claim = MemoryClaim(id="iban", source_trust_score=0.05, model_confidence=0.1,
                        recency_hours=5000.0, contradiction_flag=True)
    return CandidateAction(action_id="tx", tool_name="bank_transfer", impact_cost_theta=theta,
                           abstention_cost_kappa=4.0, premises=(Premise(id="p", claim=claim),))


def answers_within(argv: list[str], seconds: float = 60.0) -> int:
    """``main(argv)`` run in a thread that must return within ``seconds`` (a hang fails)."""
    from amv_calib.cli import main

    result: dict[str, int] = {}
    thread = threading.Thread(target=lambda: result.update(code=main(argv)), daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"amv-calib {argv[0]} hung"
    return result["code"]
