"""The replay tables the tune, certify and replay stages write beside their results."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["gate_from", "replay_n_boot", "replay_table"]


def gate_from(t: dict[str, Any], calibrator: Any) -> Any:
    """The gate of thresholds ``t`` over ``calibrator``."""
    from amv_calib.gate import Gate

    return Gate(lambda_cost_scale=t["lambda_cost_scale"],
                delta_loss_threshold=t["delta_loss_threshold"],
                epsilon_harm_bound=t["epsilon_harm_bound"], planner=t["planner"],
                max_verifications=t["max_verifications"],
                harm_price=t.get("harm_price", 0.0), calibrator=calibrator)


def replay_table(episodes: Any, *, gate: Any, calibrator: Any, seed: int,
                 out_dir: Path, policies: Sequence[str] = ("all",),
                 certificate: dict[str, Any] | None = None) -> dict[str, Any]:
    """Replay ``policies`` on the same answer stream; write replay.json and replay.md.

    Returns the results by policy (the tracker logs them).
    """
    from amv_calib.tuning import POLICIES, format_table, replay_many

    names = list(POLICIES) if "all" in policies else list(dict.fromkeys(policies))
    results = replay_many(episodes, names, seed=seed, gate=gate,  # type: ignore[arg-type]
                          calibrator=calibrator, n_boot=replay_n_boot(len(episodes)))
    summary = {n: r.to_dict() for n, r in results.items()}
    (out_dir / "replay.json").write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n",
                                         encoding="utf-8")
    bound = None if certificate is None else certificate.get("observed_upper_bound")
    table = format_table({n: r.to_dict()["overall"] for n, r in results.items()},
                         {n: r.n for n, r in results.items()},
                         None if bound is None else {gate.planner: bound})
    (out_dir / "replay.md").write_text(
        f"{len(episodes)} instances, seed {seed}\n\n{table}\n", encoding="utf-8")
    return results


def replay_n_boot(n: int) -> int:
    """Bootstrap resamples for a replay table: enough for stable 95% bounds, few on big sets."""
    return 1000 if n <= 20000 else 200
