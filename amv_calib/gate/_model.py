"""The gate's inputs: memory claims, premises, candidate actions and verifiers.

Snake-case versions of the seed engine's TypeScript interfaces, frozen and validated on
construction: a bad value raises ``ValueError`` naming the field, the object and the value.
``from_dict`` accepts the seed's camelCase keys or the snake_case ones.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal, cast, get_args

import numpy as np

from amv_calib.contract import MEMORY_KIND_FIELDS, check_memory_kind, premise_memory_kind
from amv_calib.exceptions import check_choice

__all__ = [
    "REGIME_CODES",
    "VOI_TOLERANCE",
    "CandidateAction",
    "DependencyType",
    "GateSettings",
    "MemoryClaim",
    "Premise",
    "Verifier",
]

DependencyType = Literal["direct", "transitive", "joint"]
Planner = Literal["lookahead", "myopic"]
Mode = Literal["amv", "seed"]
_DEPENDENCY_TYPES: Final = get_args(DependencyType)

#: Ground-truth fields of an episode premise (see the episodes format); a gate input may
#: carry them, and the gate never reads them.
_IGNORED_PREMISE_KEYS: Final = frozenset({"violated", "p_true", "pTrue"})

#: Regime codes of the batch arrays.
REGIME_CODES: Final[dict[str, int]] = {"PROCEED": 0, "VERIFY": 1, "ABSTAIN": 2}
#: VERIFY needs a VOI above ``VOI_TOLERANCE * (theta + kappa)`` (``mode="amv"``; the seed
#: mode uses 0, as the seed does).
VOI_TOLERANCE: Final = 1e-12


def _number(value: Any, name: str, where: str) -> float:
    # numpy scalars pass; booleans, strings and None do not
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.number)):
        raise ValueError(f"{name}={value!r} {where} is not a number")
    try:
        f = float(value)
    except OverflowError:  # an integer beyond the doubles, e.g. 400 digits of JSON
        text = str(value)
        raise ValueError(f"{name}={text[:20]}...({len(text)} digits) {where} is too large "
                         f"for a float") from None
    if not math.isfinite(f):
        raise ValueError(f"{name}={value!r} {where} is not finite")
    return f


def _flag(value: Any, name: str, where: str) -> bool:
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, float)) and value in (0, 1):
        return bool(value)
    raise ValueError(f"{name}={value!r} {where} is not a boolean")


def _keys(data: Any, cls: str, names: Mapping[str, str], ignored: frozenset[str] = frozenset()
          ) -> dict[str, Any]:
    """Rename camelCase keys to field names; refuse unknown and repeated keys."""
    if not isinstance(data, Mapping):
        raise ValueError(f"{cls} must be an object, got {data!r}")
    out: dict[str, Any] = {}
    for key, value in data.items():
        if key in ignored:
            continue
        name = names.get(key)
        if name is None:
            raise ValueError(f"{cls} has unknown key {key!r}; expected one of {sorted(names)}")
        if name in out:
            raise ValueError(f"{cls} gives {name!r} twice (as {key!r} and another spelling)")
        out[name] = value
    return out


def _aliases(*pairs: tuple[str, str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for snake, camel in pairs:
        out[snake] = snake
        out[camel] = snake
    return out


_CLAIM_KEYS: Final = _aliases(
    ("id", "id"), ("statement", "statement"), ("timestamp", "timestamp"),
    ("source_trust_score", "sourceTrustScore"), ("model_confidence", "modelConfidence"),
    ("recency_hours", "recencyHours"), ("contradiction_flag", "contradictionFlag"),
)
_CLAIM_FEATURE_KEYS: Final = frozenset(
    {"source_trust_score", "sourceTrustScore", "model_confidence", "modelConfidence",
     "recency_hours", "recencyHours", "contradiction_flag", "contradictionFlag"}
)
_PREMISE_KEYS: Final = _aliases(
    ("id", "id"), ("claim_id", "claimId"), ("dependency_type", "dependencyType"),
    ("parameter_target", "parameterTarget"),
    ("calibrated_violation_probability", "calibratedViolationProbability"),
    ("claim", "claim"),
)
#: The spellings of a premise's memory kind (read apart, by the contract's rule).
_KIND_KEYS: Final = frozenset(MEMORY_KIND_FIELDS)
_ACTION_KEYS: Final = _aliases(
    ("action_id", "actionId"), ("tool_name", "toolName"), ("arguments", "arguments"),
    ("impact_cost_theta", "impactCostTheta"), ("abstention_cost_kappa", "abstentionCostKappa"),
    ("premises", "premises"),
)
_VERIFIER_KEYS: Final = _aliases(
    ("id", "id"), ("resolves_premise_ids", "resolvesPremiseIds"),
    ("execution_cost", "executionCost"), ("symmetric_reliability", "symmetricReliability"),
)


@dataclass(frozen=True, kw_only=True)
class MemoryClaim:
    """A remembered fact the agent acts on, with the four features calibrators read.

    Parameters
    ----------
    id : str
    statement : str, optional
    timestamp : float, optional
        When the claim was written (epoch seconds); informational.
    source_trust_score : float in [0, 1]
    model_confidence : float in [0, 1]
    recency_hours : float >= 0
        Age of the claim when it is used.
    contradiction_flag : bool
        A newer memory contradicts it.
    """

    id: str
    statement: str = ""
    timestamp: float = 0.0
    source_trust_score: float
    model_confidence: float
    recency_hours: float
    contradiction_flag: bool

    def __post_init__(self) -> None:
        where = f"of claim {self.id!r}"
        for name in ("source_trust_score", "model_confidence"):
            v = _number(getattr(self, name), name, where)
            if not 0.0 <= v <= 1.0:
                raise ValueError(f"{name}={v!r} {where} must lie in [0, 1]")
            object.__setattr__(self, name, v)
        h = _number(self.recency_hours, "recency_hours", where)
        if h < 0.0:
            raise ValueError(f"recency_hours={h!r} {where} must be >= 0")
        object.__setattr__(self, "recency_hours", h)
        object.__setattr__(self, "timestamp", _number(self.timestamp, "timestamp", where))
        object.__setattr__(
            self, "contradiction_flag",
            _flag(self.contradiction_flag, "contradiction_flag", where),
        )

    def features(self) -> dict[str, float]:
        """The four calibrator inputs, keyed by canonical feature name."""
        return {
            "recency_hours": self.recency_hours,
            "source_trust_score": self.source_trust_score,
            "model_confidence": self.model_confidence,
            "contradiction_flag": 1.0 if self.contradiction_flag else 0.0,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> MemoryClaim:
        """Build from a seed-style (camelCase) or snake_case object."""
        kw = _keys(data, "claim", _CLAIM_KEYS)
        for name in ("id", "source_trust_score", "model_confidence", "recency_hours",
                     "contradiction_flag"):
            if name not in kw:
                raise ValueError(f"claim {dict(data)!r} lacks {name!r}")
        kw["id"] = str(kw["id"])
        if "statement" in kw:
            kw["statement"] = str(kw["statement"])
        return cls(**kw)


@dataclass(frozen=True, kw_only=True, slots=True)
class Premise:
    """A critical premise of an action: the claim it rests on and its violation probability.

    Parameters
    ----------
    id : str
    claim_id : str, optional
        Defaults to ``claim.id`` when a claim is given.
    dependency_type : {"direct", "transitive", "joint"}, default "direct"
    parameter_target : str, optional
        The tool argument the premise supports; informational.
    calibrated_violation_probability : float in [0, 1], optional
        ``p_i``. When absent the gate computes it from ``claim`` with its calibrator.
    claim : MemoryClaim, optional
    memory_kind : str, optional
        The kind of memory the claim is (``"preference"``, ``"event"``...). A calibrator
        with kinds evaluates the claim as that kind, or as ``"other"`` when the kind is
        absent or outside its vocabulary; one without kinds ignores it. Checked by
        :func:`amv_calib.contract.check_memory_kind` (1 to 64 characters, not blank, no
        whitespace at either end).
    """

    id: str
    claim_id: str = ""
    dependency_type: DependencyType = "direct"
    parameter_target: str = ""
    calibrated_violation_probability: float | None = None
    claim: MemoryClaim | None = None
    memory_kind: str | None = None

    def __post_init__(self) -> None:
        if type(self.id) is str:
            object.__setattr__(self, "id", sys.intern(self.id))
        where = f"of premise {self.id!r}"
        if self.dependency_type not in _DEPENDENCY_TYPES:
            raise ValueError(
                f"dependency_type={self.dependency_type!r} {where} must be one of "
                f"{list(_DEPENDENCY_TYPES)}"
            )
        p = self.calibrated_violation_probability
        if p is not None:
            p = _number(p, "calibrated_violation_probability", where)
            if not 0.0 <= p <= 1.0:
                raise ValueError(
                    f"calibrated_violation_probability={p!r} {where} must lie in [0, 1]"
                )
            object.__setattr__(self, "calibrated_violation_probability", p)
        if self.memory_kind is not None:
            try:
                check_memory_kind(self.memory_kind)
            except ValueError as exc:
                raise ValueError(f"premise {self.id!r}: {exc}") from None
        if self.claim is not None:
            if not isinstance(self.claim, MemoryClaim):
                raise ValueError(f"claim {where} must be a MemoryClaim, got {self.claim!r}")
            if not self.claim_id:
                object.__setattr__(self, "claim_id", self.claim.id)
            elif self.claim_id != self.claim.id:
                raise ValueError(
                    f"claim_id={self.claim_id!r} {where} differs from its claim's "
                    f"id={self.claim.id!r}"
                )

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Premise:
        """Build from a seed-style or snake_case object.

        The claim may be embedded under ``claim``, or its four features may sit in the
        premise itself (the episodes format); ``violated`` and ``p_true`` are ignored.
        A ``null`` probability means "compute it from the claim". The kind is read by
        :func:`amv_calib.contract.premise_memory_kind` (``memory_kind`` or ``memoryKind``;
        ``null`` is absent); a kind it refuses raises ``ValueError``, as any other
        malformed field does.
        """
        if not isinstance(data, Mapping):
            raise ValueError(f"premise must be an object, got {data!r}")
        flat = {k: v for k, v in data.items() if k in _CLAIM_FEATURE_KEYS}
        rest = {k: v for k, v in data.items()
                if k not in _CLAIM_FEATURE_KEYS and k not in _KIND_KEYS}
        kw = _keys(rest, "premise", _PREMISE_KEYS, _IGNORED_PREMISE_KEYS)
        if "id" not in kw:
            raise ValueError(f"premise {dict(data)!r} lacks 'id'")
        kw["id"] = str(kw["id"])
        try:
            kind = premise_memory_kind(data)
        except ValueError as exc:
            raise ValueError(f"premise {kw['id']!r}: {exc}") from None
        if kind is not None:
            kw["memory_kind"] = kind
        for name in ("claim_id", "parameter_target"):
            if name in kw:
                kw[name] = str(kw[name])
        claim = kw.get("claim")
        if claim is not None and flat:
            raise ValueError(
                f"premise {kw['id']!r} gives claim features both in 'claim' and beside it"
            )
        if isinstance(claim, Mapping):
            kw["claim"] = MemoryClaim.from_dict(claim)
        elif flat:
            cid = kw.get("claim_id") or kw["id"]
            kw["claim"] = MemoryClaim.from_dict({"id": cid, **flat})
        return cls(**kw)


@dataclass(frozen=True, kw_only=True, slots=True)
class CandidateAction:
    """An irreversible tool call the agent wants to make, and the premises it rests on.

    Parameters
    ----------
    action_id : str
    tool_name : str
    arguments : mapping, optional
    impact_cost_theta : float > 0
        ``theta``: loss of executing when any premise is violated.
    abstention_cost_kappa : float > 0
        ``kappa``: cost of abstaining.
    premises : sequence of Premise
        Ids must be unique.
    """

    action_id: str
    tool_name: str
    arguments: Mapping[str, Any] = field(default_factory=dict)
    impact_cost_theta: float
    abstention_cost_kappa: float
    premises: tuple[Premise, ...]
    # Derived once here, so that evaluate() does no per-call bookkeeping: premise id ->
    # position, and the probabilities when every premise carries one.
    _index: dict[str, int] = field(init=False, repr=False, compare=False)
    _explicit: tuple[float, ...] | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        where = f"of action {self.action_id!r}"
        for name in ("impact_cost_theta", "abstention_cost_kappa"):
            v = _number(getattr(self, name), name, where)
            if v <= 0.0:
                raise ValueError(f"{name}={v!r} {where} must be > 0")
            object.__setattr__(self, name, v)
        if isinstance(self.premises, (str, bytes)) or not isinstance(self.premises, Sequence):
            raise ValueError(f"premises {where} must be a sequence, got {self.premises!r}")
        premises = tuple(self.premises)
        index: dict[str, int] = {}
        for i, pm in enumerate(premises):
            if not isinstance(pm, Premise):
                raise ValueError(f"premises[{i}] {where} must be a Premise, got {pm!r}")
            if pm.id in index:
                raise ValueError(f"premise id {pm.id!r} {where} is repeated")
            index[pm.id] = i
        object.__setattr__(self, "premises", premises)
        object.__setattr__(self, "_index", index)
        ps = tuple(pm.calibrated_violation_probability for pm in premises)
        explicit = None if None in ps else cast("tuple[float, ...]", ps)
        object.__setattr__(self, "_explicit", explicit)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CandidateAction:
        """Build from a seed-style or snake_case object (premises as objects)."""
        kw = _keys(data, "action", _ACTION_KEYS)
        for name in ("action_id", "impact_cost_theta", "abstention_cost_kappa", "premises"):
            if name not in kw:
                raise ValueError(f"action lacks {name!r}")
        kw["action_id"] = str(kw["action_id"])
        kw["tool_name"] = str(kw.get("tool_name", ""))
        raw = kw["premises"]
        if isinstance(raw, (str, bytes)) or not isinstance(raw, Sequence):
            raise ValueError(f"premises of action {kw['action_id']!r} must be a list")
        kw["premises"] = tuple(Premise.from_dict(p) for p in raw)
        args = kw.get("arguments", {})
        if not isinstance(args, Mapping):
            raise ValueError(f"arguments of action {kw['action_id']!r} must be an object")
        kw["arguments"] = dict(args)
        return cls(**kw)


@dataclass(frozen=True, kw_only=True, slots=True)
class Verifier:
    """A check (an API read, a question to the user) that returns one signal per premise.

    Parameters
    ----------
    id : str
    resolves_premise_ids : sequence of str
        The premises it reports on (each at most once).
    execution_cost : float >= 0
        ``c_v``; the gate charges ``lambda_cost_scale * c_v``.
    symmetric_reliability : float in (0.5, 1]
        ``r_v = P(confirm | valid) = P(refute | violated)``.
    """

    id: str
    resolves_premise_ids: tuple[str, ...]
    execution_cost: float
    symmetric_reliability: float
    # Derived once here, for the gate's per-call loop: the premise id when there is one.
    _single: str | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        where = f"of verifier {self.id!r}"
        ids = self.resolves_premise_ids
        if isinstance(ids, (str, bytes)) or not isinstance(ids, Sequence):
            raise ValueError(f"resolves_premise_ids {where} must be a list of ids, got {ids!r}")
        # interned, as premise ids are: the gate's id lookups then compare pointers
        ids = tuple(sys.intern(str(i)) for i in ids)
        if len(set(ids)) != len(ids):
            raise ValueError(f"resolves_premise_ids={list(ids)!r} {where} repeats an id")
        object.__setattr__(self, "resolves_premise_ids", ids)
        object.__setattr__(self, "_single", ids[0] if len(ids) == 1 else None)
        c = _number(self.execution_cost, "execution_cost", where)
        if c < 0.0:
            raise ValueError(f"execution_cost={c!r} {where} must be >= 0")
        object.__setattr__(self, "execution_cost", c)
        r = _number(self.symmetric_reliability, "symmetric_reliability", where)
        if not 0.5 < r <= 1.0:
            raise ValueError(f"symmetric_reliability={r!r} {where} must lie in (0.5, 1]")
        object.__setattr__(self, "symmetric_reliability", r)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Verifier:
        """Build from a seed-style or snake_case object."""
        kw = _keys(data, "verifier", _VERIFIER_KEYS)
        for name in ("id", "resolves_premise_ids", "execution_cost", "symmetric_reliability"):
            if name not in kw:
                raise ValueError(f"verifier {dict(data)!r} lacks {name!r}")
        kw["id"] = str(kw["id"])
        return cls(**kw)


def gate_number(value: Any, what: str) -> float:
    """``value`` as a float; ``ValueError`` naming ``what`` for a bool, a non-number or NaN."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.number)):
        raise ValueError(f"{what}={value!r} is not a number")
    f = float(value)
    if math.isnan(f):
        raise ValueError(f"{what}={value!r} is not a number")
    return f


@dataclass(frozen=True, kw_only=True)
class GateSettings:
    """A gate's thresholds and planner, checked: the parameters of
    :class:`~amv_calib.gate.Gate` of the same names (see there for their meaning).

    ``planner`` is the planner in effect: ``"myopic"`` whenever ``mode="seed"``. A
    ``harm_price`` of ``-0.0`` is kept as ``0.0``.

    Raises
    ------
    ValueError
        A value out of its range, naming the parameter and the value.
    """

    lambda_cost_scale: float = 1.0
    delta_loss_threshold: float = 10.0
    epsilon_harm_bound: float = 0.05
    harm_price: float = 0.0
    planner: Planner = "lookahead"
    mode: Mode = "amv"
    max_verifications: int = 8
    reuse_verifiers: bool = False

    def __post_init__(self) -> None:
        lam = gate_number(self.lambda_cost_scale, "lambda_cost_scale")
        if not (lam >= 0.0 and math.isfinite(lam)):
            raise ValueError(f"lambda_cost_scale={self.lambda_cost_scale!r} must be finite "
                             "and >= 0")
        delta = gate_number(self.delta_loss_threshold, "delta_loss_threshold")
        if not delta >= 0.0:
            raise ValueError(f"delta_loss_threshold={self.delta_loss_threshold!r} must be >= 0")
        eps = gate_number(self.epsilon_harm_bound, "epsilon_harm_bound")
        if not 0.0 <= eps <= 1.0:
            raise ValueError(f"epsilon_harm_bound={self.epsilon_harm_bound!r} must lie in "
                             "[0, 1]")
        mu = gate_number(self.harm_price, "harm_price")
        if not (mu >= 0.0 and math.isfinite(mu)):
            raise ValueError(f"harm_price={self.harm_price!r} must be finite and >= 0")
        check_choice("planner", self.planner, ("lookahead", "myopic"))
        check_choice("mode", self.mode, ("amv", "seed"))
        m = self.max_verifications
        if isinstance(m, bool) or not isinstance(m, int) or m < 0:
            raise ValueError(f"max_verifications={m!r} must be an int >= 0")
        for name, value in (("lambda_cost_scale", lam), ("delta_loss_threshold", delta),
                            ("epsilon_harm_bound", eps), ("harm_price", mu + 0.0),
                            ("reuse_verifiers", bool(self.reuse_verifiers))):
            object.__setattr__(self, name, value)
        if self.mode == "seed":
            object.__setattr__(self, "planner", "myopic")
