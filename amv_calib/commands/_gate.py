"""``gate``: one decision for one action file, as JSON."""

from __future__ import annotations

import argparse
import json
from typing import Any

from amv_calib.commands._parts import command, harm_price_option, trusted_key_option
from amv_calib.exceptions import ArtifactError, ConfigError
from amv_calib.settings import (
    DEFAULT_ALIAS,
    DEFAULT_MODEL_NAME,
    PLANNERS,
    TRUSTED_KEYS_ENV,
    trusted_keys,
)
from amv_calib.stages import default_artifact, read_json

__all__ = ["add_gate"]


_GATE_DOC = """Decide PROCEED / VERIFY / ABSTAIN for one action file and print the decision as JSON.

The action file holds {"action": {...}, "verifiers": [...]} in the seed's field names
(camelCase) or snake_case; a premise may embed its claim under "claim" (an example:
data/examples/action.json; its shape: the README, "3. Ship an artifact to the production
gate, and roll it back").

Without --artifact the gate loads models/amv-guard@production (under $AMV_CALIB_MODELS_DIR
when set); when that does not exist it exits 2. --mode seed runs the seed's rule with its
prior instead. With --no-artifact, premises that carry no probability make the gate fail
closed (ABSTAIN with the reason), never PROCEED.
"""


def add_gate(subparsers: Any) -> None:
    """Add the ``gate`` sub-command; a threshold's fallback is the gate's own default."""
    from amv_calib.gate import GateSettings

    def fallback(name: str) -> str:
        return f"(default: the artifact's, else {getattr(GateSettings, name)!r})"

    p = command(
        subparsers, "gate", _run_gate,
        help="decide PROCEED / VERIFY / ABSTAIN for one candidate action (JSON out)",
        description=_GATE_DOC,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--action", required=True, metavar="ACTION.json",
                   help='{"action": {...}, "verifiers": [...]}; "-" reads stdin')
    src = p.add_mutually_exclusive_group()
    src.add_argument("--artifact", metavar="DIR",
                     help="artifact version folder or MODEL_DIR@ALIAS (calibrator + "
                     f"thresholds); default models/{DEFAULT_MODEL_NAME}@{DEFAULT_ALIAS} when "
                     "it exists")
    src.add_argument("--calibrator", metavar="FILE",
                     help="a portable calibrator.json to compute p from claims, with the built-in "
                   "thresholds (default: the artifact's calibrator)")
    src.add_argument("--no-artifact", action="store_true",
                     help="load no artifact: the built-in thresholds, and only the "
                     "probabilities the action file carries (other premises ABSTAIN)")
    p.add_argument("--strict", action="store_true",
                   help="error out on a refused artifact instead of failing closed (ABSTAIN)")
    p.add_argument("--mode", choices=("amv", "seed"), default=None,
                   help="amv: the calibrated gate; seed: the seed's uncalibrated rule "
                   "(default: the artifact's)")
    p.add_argument("--planner", choices=PLANNERS, default=None,
                   help="verification planner (default: the artifact's)")
    p.add_argument("--lambda", dest="lambda_cost_scale", type=float, default=None,
                   metavar="X", help="lambda_cost_scale: weight of a verifier's execution cost "
                   f"in the loss, unitless {fallback('lambda_cost_scale')}")
    p.add_argument("--delta", dest="delta_loss_threshold", type=float, default=None,
                   metavar="X", help="delta_loss_threshold: largest expected loss an action "
                   f"may carry and PROCEED, in theta's units {fallback('delta_loss_threshold')}")
    p.add_argument("--epsilon", dest="epsilon_harm_bound", type=float, default=None,
                   metavar="X", help="epsilon_harm_bound: largest probability that any premise "
                   f"is violated for PROCEED, in [0, 1] {fallback('epsilon_harm_bound')}")
    harm_price_option(p, "harm_price: the price of harm, added to theta when planning "
                      f"{fallback('harm_price')}")
    p.add_argument("--max-verifications", dest="max_verifications", type=int, default=None,
                   metavar="N", help="verification budget (default: the artifact's)")
    p.add_argument("--decision-log", dest="decision_log", metavar="PATH", default=None,
                   help="append the decision record to this JSON-lines file (default: no log)")
    trusted_key_option(p)


def _check_alias(ref: str) -> None:
    """Exit 2 on a reference through an alias the model does not have (a typo, usually):
    a usage error, not a refused artifact. Any other refusal is the gate's to report: it
    ABSTAINs, saying why (fail closed)."""
    from amv_calib.contract import resolve_reference
    from amv_calib.exceptions import UnknownAliasError

    try:
        resolve_reference(ref)
    except UnknownAliasError:
        raise
    except ArtifactError:
        pass  # the gate refuses it below and ABSTAINs with the reason


def _run_gate(args: argparse.Namespace) -> int:
    """Evaluate the action and print the decision as one JSON object."""
    from amv_calib.contract import PortableCalibrator
    from amv_calib.gate import CandidateAction, Gate, Verifier

    data = read_json(args.action)
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
                  "epsilon_harm_bound", "harm_price", "max_verifications", "decision_log")
        if getattr(args, k) is not None
    }
    try:
        if (args.artifact is None and args.calibrator is None and not args.no_artifact
                and args.mode != "seed"):
            args.artifact = default_artifact()
        if args.artifact is not None:
            _check_alias(args.artifact)
            gate = Gate.from_artifact(args.artifact, strict=args.strict,
                                      trusted_keys=args.trusted_keys or None, **overrides)
        else:
            if args.calibrator is not None:
                if args.trusted_keys or trusted_keys():
                    raise ConfigError(
                        "trusted keys are configured (--trusted-key or "
                        f"${TRUSTED_KEYS_ENV}): a bare --calibrator file carries no "
                        "signature; pass a signed --artifact instead")
                cal_data = read_json(args.calibrator, "--calibrator")
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
            "harm_price": gate.harm_price,
            "max_verifications": gate.max_verifications,
            "artifact": None if gate.artifact_name is None
            else {"name": gate.artifact_name, "version": gate.artifact_version},
            "refusal": gate.refusal,
        },
    }
    print(json.dumps(out, indent=2, allow_nan=False))
    return 0


