"""``amv-calib gate``: decide PROCEED / VERIFY / ABSTAIN for one action file, print JSON.

The action file holds ``{"action": {...}, "verifiers": [...]}`` in the seed's field names
(camelCase) or snake_case; a premise may embed its claim under ``claim``. Without
``--artifact`` or ``--calibrator``, premises that carry no probability make the gate fail
closed (ABSTAIN with the reason), never PROCEED.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from amv_calib._exceptions import ConfigError

__all__ = ["register", "run"]


def register(subparsers: Any) -> None:
    """Add the ``gate`` sub-command."""
    p = subparsers.add_parser(
        "gate",
        help="decide PROCEED / VERIFY / ABSTAIN for one candidate action (JSON out)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--action", required=True, metavar="ACTION.json",
                   help='{"action": {...}, "verifiers": [...]}; "-" reads stdin')
    src = p.add_mutually_exclusive_group()
    src.add_argument("--artifact", metavar="DIR",
                     help="artifact version folder or MODEL_DIR@ALIAS (calibrator + thresholds)")
    src.add_argument("--calibrator", metavar="FILE",
                     help="a portable calibrator.json to compute p from claims")
    p.add_argument("--strict", action="store_true",
                   help="error out on a refused artifact instead of failing closed (ABSTAIN)")
    p.add_argument("--mode", choices=("amv", "seed"), default=None)
    p.add_argument("--planner", choices=("lookahead", "myopic"), default=None)
    p.add_argument("--lambda", dest="lambda_cost_scale", type=float, default=None,
                   metavar="X", help="lambda_cost_scale")
    p.add_argument("--delta", dest="delta_loss_threshold", type=float, default=None,
                   metavar="X", help="delta_loss_threshold")
    p.add_argument("--epsilon", dest="epsilon_harm_bound", type=float, default=None,
                   metavar="X", help="epsilon_harm_bound")
    p.add_argument("--max-verifications", dest="max_verifications", type=int, default=None,
                   metavar="N")
    p.add_argument("--decision-log", dest="decision_log", metavar="PATH", default=None,
                   help="append the decision record to this JSON-lines file")
    p.set_defaults(func=run)


def _read_json(where: str) -> Any:
    try:
        text = sys.stdin.read() if where == "-" else Path(where).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"--action {where}: cannot read ({exc.strerror})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"--action {where}: not JSON ({exc})") from None


def run(args: argparse.Namespace) -> int:
    """Evaluate the action and print the decision as one JSON object."""
    from amv_calib.features import PortableCalibrator
    from amv_calib.gate import CandidateAction, Gate, Verifier

    data = _read_json(args.action)
    if not isinstance(data, dict):
        raise ConfigError(f"--action {args.action}: expected a JSON object")
    raw_action = data.get("action", data if "premises" in data else None)
    if not isinstance(raw_action, dict):
        raise ConfigError(f"--action {args.action}: lacks an 'action' object")
    raw_action = {k: v for k, v in raw_action.items() if k != "verifiers"}
    raw_verifiers = data.get("verifiers", data.get("action", {}).get("verifiers", []))
    if not isinstance(raw_verifiers, list):
        raise ConfigError(f"--action {args.action}: 'verifiers' must be a list")
    try:
        action = CandidateAction.from_dict(raw_action)
        verifiers = [Verifier.from_dict(v) for v in raw_verifiers]
    except ValueError as exc:
        raise ConfigError(f"--action {args.action}: {exc}") from None

    overrides: dict[str, Any] = {
        k: getattr(args, k)
        for k in ("mode", "planner", "lambda_cost_scale", "delta_loss_threshold",
                  "epsilon_harm_bound", "max_verifications", "decision_log")
        if getattr(args, k) is not None
    }
    try:
        if args.artifact is not None:
            gate = Gate.from_artifact(args.artifact, strict=args.strict, **overrides)
        else:
            if args.calibrator is not None:
                cal_data = _read_json(args.calibrator)
                overrides["calibrator"] = PortableCalibrator.from_dict(cal_data)
            gate = Gate(**overrides)
        decision = gate.evaluate(action, verifiers)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    out = {
        "action_id": action.action_id,
        **decision.to_dict(),
        "gate": {
            "mode": gate.mode,
            "planner": gate.planner,
            "lambda_cost_scale": gate.lambda_cost_scale,
            "delta_loss_threshold": gate.delta_loss_threshold,
            "epsilon_harm_bound": gate.epsilon_harm_bound,
            "max_verifications": gate.max_verifications,
            "artifact": None if gate.artifact_name is None
            else {"name": gate.artifact_name, "version": gate.artifact_version},
            "refusal": gate.refusal,
        },
    }
    print(json.dumps(out, indent=2, allow_nan=False))
    return 0
