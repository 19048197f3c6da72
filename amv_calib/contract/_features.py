"""Feature maps and the portable calibrator: the contract between training and the gate.

A *feature map* is a list of terms, each one closed-vocabulary transform of one raw claim
feature. A *portable calibrator* is a linear model over a feature map (Platt, Beta, the seed
prior) or an isotonic table over such a linear index. Both are plain data (``to_dict`` /
``from_dict``), so an artifact can carry them and any language can evaluate them.

This module imports numpy and the standard library only: the runtime gate depends on it.
The JSON layout is documented in ``models/README.md``.
"""

from __future__ import annotations

import importlib.resources
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal, cast, get_args

import numpy as np
from numpy.typing import ArrayLike, NDArray

from amv_calib.contract._portable_math import portable_exp, portable_log, portable_log1p
from amv_calib.contract._schema import CLAIM_FEATURES
from amv_calib.exceptions import PortableFormatError, check_choice

Transform = Literal["identity", "logit", "log", "log1m", "ramp", "log1p", "indicator"]
TRANSFORMS: Final[tuple[str, ...]] = get_args(Transform)

PORTABLE_FORMAT: Final = "amv-calib/portable-calibrator"
PORTABLE_FORMAT_VERSION: Final = 1
#: The version of a calibrator with memory kinds (``kinds``, ``kind_intercept``, a term's
#: ``kind``); one without them keeps version 1, byte for byte.
PORTABLE_FORMAT_VERSION_KINDS: Final = 2

def _kind_rules() -> dict[str, Any]:
    # the data rules both loaders read (artifact_rules.json, the TypeScript client's copy)
    raw = importlib.resources.files(__package__).joinpath("artifact_rules.json").read_bytes()
    rules: dict[str, Any] = json.loads(raw)["calibrator"]["kinds"]
    return rules


_KIND_RULES: Final = _kind_rules()
#: The kind every claim whose kind is absent or outside the vocabulary is evaluated as.
OTHER_KIND: Final[str] = _KIND_RULES["other"]
#: Longest memory kind of a vocabulary, in characters (code points).
MAX_KIND_LENGTH: Final[int] = _KIND_RULES["max_length"]

#: The spellings of a premise's memory kind, in the order :func:`premise_memory_kind` checks
#: them.
MEMORY_KIND_FIELDS: Final = ("memory_kind", "memoryKind")
#: The characters of Unicode's ``White_Space`` property (JavaScript's ``\p{White_Space}``;
#: Python's ``str.isspace`` adds U+001C..U+001F, so the set is spelt out for both gates).
KIND_WHITESPACE: Final = frozenset(
    "\t\n\v\f\r \x85\xa0\u1680" + "".join(map(chr, range(0x2000, 0x200B)))
    + "\u2028\u2029\u202f\u205f\u3000")


class MemoryKindError(ValueError):
    """A memory kind the contract's rule refuses; ``problem`` says why, in a word or two:
    one of :data:`MEMORY_KIND_PROBLEMS` (a claim table's reject counts are keyed by it)."""

    def __init__(self, message: str, problem: str) -> None:
        super().__init__(message)
        self.problem = problem


#: The problems :class:`MemoryKindError` names, in the order the rule checks them.
MEMORY_KIND_PROBLEMS: Final = ("not a string", "blank", "padded", "too long", "differ")


def check_memory_kind(value: Any, field: str = "memory_kind") -> str:
    """``value`` if it is a memory kind, else ``ValueError`` naming ``field`` and the value.

    A memory kind is a string of 1 to :data:`MAX_KIND_LENGTH` characters (code points)
    that neither begins nor ends with whitespace (:data:`KIND_WHITESPACE`): a padded kind
    would be another kind than the one it looks like (a calibrator evaluates it as
    ``"other"``), so it is refused rather than kept or trimmed. A claim table's empty cell
    and a premise's ``null`` are *absent*, which the caller decides before this. Raises
    :class:`MemoryKindError` (a ``ValueError``).
    """
    if not isinstance(value, str):
        raise MemoryKindError(f"{field}={value!r} is not a string (a memory kind is a name "
                              f"such as 'preference')", "not a string")
    if all(c in KIND_WHITESPACE for c in value):
        raise MemoryKindError(f"{field}={value!r} is blank (give null, or leave it out, when "
                              f"the kind is unknown)", "blank")
    if value[0] in KIND_WHITESPACE or value[-1] in KIND_WHITESPACE:
        raise MemoryKindError(f"{field}={value!r} begins or ends with whitespace", "padded")
    if len(value) > MAX_KIND_LENGTH:
        raise MemoryKindError(f"{field}={value[:40]!r}... has {len(value)} characters, more "
                              f"than {MAX_KIND_LENGTH}", "too long")
    return value


def premise_memory_kind(premise: Mapping[str, Any]) -> str | None:
    """The memory kind a premise (of an action, a decision record or an episode) gives.

    Read from ``memory_kind`` or its camelCase ``memoryKind``: a ``null`` is absent (so
    ``null`` beside a kind gives the kind); both may be given if they are equal. Each
    value given is checked by :func:`check_memory_kind`.

    Returns
    -------
    str or None
        The kind, or None when neither spelling gives one.

    Raises
    ------
    MemoryKindError
        (a ``ValueError``) A value given is not a memory kind, or the two spellings give
        different kinds; the message names the field and the value (the caller adds the
        premise or the row).
    """
    given = [(f, premise[f]) for f in MEMORY_KIND_FIELDS if premise.get(f) is not None]
    for f, v in given:
        check_memory_kind(v, f)
    if len(given) == 2 and given[0][1] != given[1][1]:
        raise MemoryKindError(f"memory_kind={given[0][1]!r} and memoryKind="
                              f"{given[1][1]!r} differ (give one)", "differ")
    return cast(str, given[0][1]) if given else None


#: Default floor of ``logit``, ``log`` and ``log1m`` (the seed clips confidence at 1e-5).
DEFAULT_EPS: Final = 1e-5

_NEEDS_SCALE: Final = frozenset({"ramp", "log1p"})
_NEEDS_EPS: Final = frozenset({"logit", "log", "log1m"})

FloatArray = NDArray[np.float64]


@dataclass(frozen=True, kw_only=True)
class Term:
    """One feature: ``transform`` applied to the raw claim feature ``column``.

    Parameters
    ----------
    column : str
        One of :data:`amv_calib.contract._schema.CLAIM_FEATURES`.
    transform : {"identity", "logit", "log", "log1m", "ramp", "log1p", "indicator"}
        ``logit(x) = ln(max(eps, x)) - ln(max(eps, 1 - x))``, ``log(x) = ln(max(eps, x))``,
        ``log1m(x) = -ln(max(eps, 1 - x))``, ``ramp(x) = min(1, x / scale)``,
        ``log1p(x) = ln(1 + x / scale)``, ``indicator(x) = 1 if x > 0.5 else 0``.
    scale : float, optional
        Required by ``ramp`` and ``log1p``; must be positive.
    eps : float, optional
        Floor used by ``logit``, ``log`` and ``log1m``; defaults to 1e-5.
    by : str, optional
        Another claim feature whose raw value multiplies the transformed one (an
        interaction, e.g. ``indicator(contradiction_flag) * source_trust_score``).
    kind : str, optional
        A memory kind of the calibrator's ``kinds``: the term counts only for claims
        evaluated as that kind (a kind-specific slope), and is skipped for the others.
    """

    column: str
    transform: Transform
    scale: float | None = None
    eps: float | None = None
    by: str | None = None
    kind: str | None = None

    def __post_init__(self) -> None:
        if self.column not in CLAIM_FEATURES:
            raise PortableFormatError(
                f"feature term column={self.column!r} is not a claim feature; "
                f"expected one of {list(CLAIM_FEATURES)}"
            )
        if self.transform not in TRANSFORMS:
            raise PortableFormatError(
                f"feature term transform={self.transform!r} is not in the vocabulary "
                f"{list(TRANSFORMS)}"
            )
        if self.transform in _NEEDS_SCALE:
            if self.scale is None or not math.isfinite(self.scale) or self.scale <= 0:
                raise PortableFormatError(
                    f"transform {self.transform!r} needs a finite scale > 0, "
                    f"got scale={self.scale!r}"
                )
        elif self.scale is not None:
            raise PortableFormatError(f"transform {self.transform!r} takes no scale")
        if self.transform in _NEEDS_EPS:
            if self.eps is not None and not (0.0 < self.eps < 0.5):
                raise PortableFormatError(f"eps={self.eps!r} must lie in (0, 0.5)")
        elif self.eps is not None:
            raise PortableFormatError(f"transform {self.transform!r} takes no eps")
        if self.by is not None and (self.by not in CLAIM_FEATURES or self.by == self.column):
            raise PortableFormatError(
                f"feature term by={self.by!r} must be a claim feature other than "
                f"{self.column!r}; expected one of {list(CLAIM_FEATURES)}"
            )
        if self.kind is not None:
            _check_kind(self.kind, "feature term kind")

    @property
    def name(self) -> str:
        """Readable name such as ``logit(model_confidence)``, ``ramp(recency_hours, 720)``
        or, for a kind's term, ``ramp(recency_hours, 720)[kind=event]``."""
        if self.scale is not None:
            base = f"{self.transform}({self.column}, {self.scale:g})"
        else:
            base = f"{self.transform}({self.column})"
        if self.by is not None:
            base = f"{base}*{self.by}"
        return base if self.kind is None else f"{base}[kind={self.kind}]"

    def evaluate(self, raw: Mapping[str, FloatArray]) -> FloatArray:
        """The term's column of the design matrix from raw features keyed by name."""
        out = self.apply(raw[self.column])
        if self.by is not None:
            out *= raw[self.by]
        return out

    def evaluate_one(self, features: Mapping[str, float]) -> float:
        """Scalar twin of :meth:`evaluate` for one claim ``{feature: value}``."""
        v = self.apply_scalar(float(features[self.column]))
        return v if self.by is None else v * float(features[self.by])

    def apply(self, x: FloatArray) -> FloatArray:
        """Apply the transform to a float array of raw values."""
        eps = DEFAULT_EPS if self.eps is None else self.eps
        t = self.transform
        if t == "identity":
            return x.astype(np.float64, copy=True)
        if t == "logit":
            return cast(FloatArray, np.log(np.maximum(eps, x)) - np.log(np.maximum(eps, 1.0 - x)))
        if t == "log":
            return cast(FloatArray, np.log(np.maximum(eps, x)))
        if t == "log1m":
            return cast(FloatArray, -np.log(np.maximum(eps, 1.0 - x)))
        if t == "ramp":
            return cast(FloatArray, np.minimum(1.0, x / cast(float, self.scale)))
        if t == "log1p":
            return cast(FloatArray, np.log1p(x / cast(float, self.scale)))
        return cast(FloatArray, (x > 0.5).astype(np.float64))

    def apply_scalar(self, x: float) -> float:
        """Scalar twin of :meth:`apply` (the gate's single-claim fast path), with the
        portable ``log`` and ``log1p`` (:mod:`amv_calib.contract._portable_math`): the same
        bits in every language, within an ulp of :meth:`apply`'s."""
        eps = DEFAULT_EPS if self.eps is None else self.eps
        t = self.transform
        if t == "identity":
            return x
        if t == "logit":
            return portable_log(max(eps, x)) - portable_log(max(eps, 1.0 - x))
        if t == "log":
            return portable_log(max(eps, x))
        if t == "log1m":
            return -portable_log(max(eps, 1.0 - x))
        if t == "ramp":
            return min(1.0, x / cast(float, self.scale))
        if t == "log1p":
            return portable_log1p(x / cast(float, self.scale))
        return 1.0 if x > 0.5 else 0.0

    def to_dict(self) -> dict[str, Any]:
        """Plain-data form, as stored in ``calibrator.json``."""
        out: dict[str, Any] = {"column": self.column, "transform": self.transform}
        if self.scale is not None:
            out["scale"] = float(self.scale)
        if self.eps is not None:
            out["eps"] = float(self.eps)
        if self.by is not None:
            out["by"] = self.by
        if self.kind is not None:
            out["kind"] = self.kind
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Term:
        """Build a term from its plain-data form, refusing unknown keys."""
        if not isinstance(data, Mapping):
            raise PortableFormatError(f"feature term must be an object, got {data!r}")
        unknown = set(data) - {"column", "transform", "scale", "eps", "by", "kind"}
        if unknown:
            raise PortableFormatError(f"feature term has unknown keys {sorted(unknown)}")
        for key in ("column", "transform"):
            if key not in data:
                raise PortableFormatError(f"feature term lacks {key!r}: {dict(data)!r}")
        scale, eps, by = data.get("scale"), data.get("eps"), data.get("by")
        kind = data.get("kind")
        if kind is not None and not isinstance(kind, str):
            raise PortableFormatError(f"feature term kind={kind!r} is not a string")
        return cls(
            column=str(data["column"]),
            transform=cast(Transform, str(data["transform"])),
            scale=None if scale is None else _finite_float(scale, "scale"),
            eps=None if eps is None else _finite_float(eps, "eps"),
            by=None if by is None else str(by),
            kind=kind,
        )


@dataclass(frozen=True)
class FeatureMap:
    """An ordered tuple of :class:`Term`; ``transform`` gives the design matrix."""

    terms: tuple[Term, ...]

    def __post_init__(self) -> None:
        if not self.terms:
            raise PortableFormatError("a feature map needs at least one term")
        names = [t.name for t in self.terms]
        if len(set(names)) != len(names):
            raise PortableFormatError(f"feature map repeats a term: {names}")

    @property
    def names(self) -> list[str]:
        """Readable names of the terms, in order."""
        return [t.name for t in self.terms]

    def transform(self, X: Any) -> FloatArray:
        """Design matrix of shape (n, len(terms)).

        ``X`` is a 2-D array whose columns follow :data:`CLAIM_FEATURES`, or anything
        indexable by column name (a pandas DataFrame, a dict of arrays).
        """
        raw = as_feature_frame(X)
        n = next(iter(raw.values())).shape[0]
        out = np.empty((n, len(self.terms)), dtype=np.float64)
        for j, term in enumerate(self.terms):
            out[:, j] = term.evaluate(raw)
        return out

    def to_list(self) -> list[dict[str, Any]]:
        """Plain-data form: a list of term objects."""
        return [t.to_dict() for t in self.terms]

    @classmethod
    def from_list(cls, data: Sequence[Mapping[str, Any]]) -> FeatureMap:
        """Build a feature map from its plain-data form."""
        if isinstance(data, (str, bytes)) or not isinstance(data, Sequence):
            raise PortableFormatError(f"feature_map must be a list of terms, got {data!r}")
        return cls(tuple(Term.from_dict(t) for t in data))


def as_feature_frame(X: Any) -> dict[str, FloatArray]:
    """Raw claim features as float arrays keyed by canonical name.

    Accepts a 2-D array (columns in :data:`CLAIM_FEATURES` order) or a mapping / DataFrame.
    """
    if isinstance(X, np.ndarray) or isinstance(X, (list, tuple)):
        arr = np.asarray(X, dtype=np.float64)
        if arr.ndim == 1:
            arr = arr.reshape(1, -1)
        if arr.ndim != 2 or arr.shape[1] != len(CLAIM_FEATURES):
            raise ValueError(
                f"expected an array of shape (n, {len(CLAIM_FEATURES)}) with columns "
                f"{list(CLAIM_FEATURES)}, got shape {arr.shape}"
            )
        return {c: arr[:, j] for j, c in enumerate(CLAIM_FEATURES)}
    out: dict[str, FloatArray] = {}
    for c in CLAIM_FEATURES:
        try:
            col = X[c]
        except (KeyError, IndexError, TypeError) as exc:
            raise ValueError(f"claim features lack column {c!r}") from exc
        out[c] = np.asarray(col, dtype=np.float64).reshape(-1)
    return out


def _check_kind(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise PortableFormatError(f"{what}={value!r} is not a string")
    if not 1 <= len(value) <= MAX_KIND_LENGTH:
        raise PortableFormatError(
            f"{what}={value!r} must have 1 to {MAX_KIND_LENGTH} characters, not {len(value)}"
        )
    return value


def _is_absent(value: Any) -> bool:
    """``None``, a float NaN or pandas' ``NA``: a claim table's empty ``memory_kind`` cell."""
    if value is None:
        return True
    if isinstance(value, (float, np.floating)):
        return math.isnan(value)
    # pandas.NA, recognised without importing pandas (the gate does not depend on it)
    return type(value).__name__ == "NAType"


def _finite_float(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise PortableFormatError(f"{what}={value!r} is not a number")
    f = float(value)
    if not math.isfinite(f):
        raise PortableFormatError(f"{what}={value!r} is not finite")
    return f


def _float_list(value: Any, what: str) -> tuple[float, ...]:
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise PortableFormatError(f"{what} must be a list of numbers, got {value!r}")
    return tuple(_finite_float(v, f"{what}[{i}]") for i, v in enumerate(value))


def sigmoid(z: ArrayLike) -> FloatArray:
    """The logistic function ``1 / (1 + exp(-z))``, elementwise, as float64.

    Computed as ``exp(-logaddexp(0, -z))``: no overflow for any ``z`` (``-inf`` gives 0,
    ``inf`` 1) and a relative error within ``max(1, |z|) * 2.3e-16`` down to the smallest
    normal float, where ``0.5 * (1 + tanh(z / 2))`` keeps only an absolute error of about
    1e-17 (2e-4 relative at ``z = -30``, no correct digit below 1e-17).
    """
    return cast(FloatArray, np.exp(-np.logaddexp(0.0, -np.asarray(z, dtype=np.float64))))


def _check_format(data: Mapping[str, Any], name: str, version: int | tuple[int, ...]) -> None:
    """Check that a JSON object declares ``format`` ``name`` at ``format_version`` ``version``
    (or one of the versions of a tuple).

    Raises
    ------
    PortableFormatError
        Naming the value found, when either differs (a newer ``format_version`` is as
        unreadable as an unknown format).
    """
    if data.get("format") != name:
        raise PortableFormatError(f"format={data.get('format')!r}, expected {name!r}")
    found = data.get("format_version")
    versions = version if isinstance(version, tuple) else (version,)
    # a JSON integer: true is not 1 (Python's True == 1 is no JSON equality), nor is 1.0
    if isinstance(found, bool) or not isinstance(found, int) or found not in versions:
        readable = " or ".join(str(v) for v in versions)
        raise PortableFormatError(
            f"unknown format_version={data.get('format_version')!r}; this version of "
            f"amv-calib reads format_version {readable}"
        )


@dataclass(frozen=True, kw_only=True)
class PortableCalibrator:
    """A fitted calibrator as plain data, evaluable with numpy alone.

    ``kind="linear"``: ``p = sigmoid(intercept + features @ coef)``.
    ``kind="isotonic"``: ``z = intercept + features @ coef`` is a one-dimensional index and
    ``p = interp(z, x_knots, y_knots)``, constant beyond the first and last knot.
    In both cases ``p`` is finally clipped to ``clamp`` when one is given.
    """

    kind: Literal["linear", "isotonic"]
    feature_map: FeatureMap
    intercept: float
    coef: tuple[float, ...]
    x_knots: tuple[float, ...] = ()
    y_knots: tuple[float, ...] = ()
    clamp: tuple[float, float] | None = None
    source: str = ""
    kinds: tuple[str, ...] = ()
    kind_intercept: tuple[float, ...] = ()
    _x: FloatArray = field(init=False, repr=False, compare=False)
    _y: FloatArray = field(init=False, repr=False, compare=False)
    _w: FloatArray = field(init=False, repr=False, compare=False)
    _codes: dict[str, int] = field(init=False, repr=False, compare=False)
    _term_codes: tuple[int, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        check_choice("kind", self.kind, ("linear", "isotonic"), PortableFormatError)
        if len(self.coef) != len(self.feature_map.terms):
            raise PortableFormatError(
                f"coef has {len(self.coef)} entries for {len(self.feature_map.terms)} terms"
            )
        for i, c in enumerate((self.intercept, *self.coef)):
            if not math.isfinite(c):
                raise PortableFormatError(f"coefficient {i} = {c!r} is not finite")
        if self.clamp is not None:
            lo, hi = self.clamp
            if not (0.0 <= lo < hi <= 1.0):
                raise PortableFormatError(
                    f"clamp={list(self.clamp)} must satisfy 0 <= lo < hi <= 1"
                )
        if self.kind == "isotonic":
            x = np.asarray(self.x_knots, dtype=np.float64)
            y = np.asarray(self.y_knots, dtype=np.float64)
            if x.size == 0 or x.size != y.size:
                raise PortableFormatError(
                    f"isotonic table needs as many x_knots as y_knots, at least one "
                    f"(got {x.size} and {y.size})"
                )
            if not (np.all(np.isfinite(x)) and np.all(np.isfinite(y))):
                raise PortableFormatError("isotonic table has non-finite knots")
            if np.any(np.diff(x) <= 0):
                i = int(np.argmax(np.diff(x) <= 0))
                raise PortableFormatError(
                    f"isotonic x_knots are not strictly increasing at index {i + 1}: "
                    f"{float(x[i])!r} then {float(x[i + 1])!r}"
                )
            if np.any(np.diff(y) < 0):
                i = int(np.argmax(np.diff(y) < 0))
                raise PortableFormatError(
                    f"isotonic table is not monotone: y_knots[{i}]={float(y[i])!r} > "
                    f"y_knots[{i + 1}]={float(y[i + 1])!r}"
                )
            if np.any((y < 0) | (y > 1)):
                raise PortableFormatError("isotonic y_knots must lie in [0, 1]")
        elif self.x_knots or self.y_knots:
            raise PortableFormatError("a linear calibrator takes no knots")
        self._check_kinds()
        object.__setattr__(self, "_x", np.asarray(self.x_knots, dtype=np.float64))
        object.__setattr__(self, "_y", np.asarray(self.y_knots, dtype=np.float64))
        object.__setattr__(self, "_w", np.asarray(self.coef, dtype=np.float64))

    def _check_kinds(self) -> None:
        kinds, ki = self.kinds, self.kind_intercept
        if isinstance(kinds, (str, bytes)) or not isinstance(kinds, Sequence):
            raise PortableFormatError(f"kinds={kinds!r} must be a list of strings")
        if isinstance(ki, (str, bytes)) or not isinstance(ki, Sequence):
            raise PortableFormatError(f"kind_intercept={ki!r} must be a list of numbers")
        kinds, ki = tuple(kinds), tuple(ki)
        for i, k in enumerate(kinds):
            _check_kind(k, f"kinds[{i}]")
        for i in range(1, len(kinds)):
            if kinds[i] == kinds[i - 1]:
                raise PortableFormatError(f"kinds repeats {kinds[i]!r} (kinds[{i}])")
            if kinds[i] < kinds[i - 1]:
                raise PortableFormatError(
                    f"kinds are not sorted: kinds[{i - 1}]={kinds[i - 1]!r} comes before "
                    f"kinds[{i}]={kinds[i]!r}"
                )
        if kinds and OTHER_KIND not in kinds:
            raise PortableFormatError(f"kinds={list(kinds)!r} lacks {OTHER_KIND!r}")
        if len(ki) != len(kinds):
            raise PortableFormatError(
                f"kind_intercept has {len(ki)} entries for {len(kinds)} kinds"
            )
        for i, c in enumerate(ki):
            if isinstance(c, bool) or not isinstance(c, (int, float)) or not math.isfinite(c):
                raise PortableFormatError(f"kind_intercept[{i}]={c!r} is not a finite number")
        codes = {k: i for i, k in enumerate(kinds)}
        term_codes = []
        for j, term in enumerate(self.feature_map.terms):
            if term.kind is None:
                term_codes.append(-1)
            elif term.kind in codes:
                term_codes.append(codes[term.kind])
            else:
                raise PortableFormatError(
                    f"feature term {j} ({term.name}) has kind={term.kind!r}, which is not in "
                    f"kinds={list(kinds)!r}"
                )
        object.__setattr__(self, "kinds", kinds)
        object.__setattr__(self, "kind_intercept", tuple(float(c) for c in ki))
        object.__setattr__(self, "_codes", codes)
        object.__setattr__(self, "_term_codes", tuple(term_codes))

    # -- memory kinds -----------------------------------------------------------------
    @property
    def has_kinds(self) -> bool:
        """Whether the calibrator reads the claims' memory kind (``format_version`` 2)."""
        return bool(self.kinds)

    @property
    def term_kind_codes(self) -> tuple[int, ...]:
        """Per term, the index of its kind in :attr:`kinds`, or -1 for a term of every kind."""
        return self._term_codes

    def kind_code(self, memory_kind: str | None) -> int:
        """The index in :attr:`kinds` a claim of ``memory_kind`` is evaluated as.

        Absent (``None``) or outside the vocabulary: the index of ``"other"``. A calibrator
        without kinds gives -1 for every claim.
        """
        if not self.kinds:
            return -1
        code = self._codes.get(memory_kind) if isinstance(memory_kind, str) else None
        return self._codes[OTHER_KIND] if code is None else code

    def kind_codes(self, memory_kinds: Any) -> NDArray[np.intp]:
        """:meth:`kind_code` of each row of a column of memory kinds.

        ``None``, NaN and pandas' ``NA`` are absent kinds.

        Raises
        ------
        ValueError
            A value that is neither a string nor absent, naming it and its row.
        """
        values = list(np.asarray(memory_kinds, dtype=object).reshape(-1))
        out = np.empty(len(values), dtype=np.intp)
        for i, v in enumerate(values):
            if not isinstance(v, str) and not _is_absent(v):
                raise ValueError(f"memory_kind={v!r} at row {i} is not a string")
            out[i] = self.kind_code(v if isinstance(v, str) else None)
        return out

    def _row_codes(self, X: Any, memory_kinds: Any, n: int) -> NDArray[np.intp]:
        if memory_kinds is None:
            try:
                memory_kinds = X["memory_kind"]
            except (KeyError, IndexError, TypeError, ValueError):
                memory_kinds = [None] * n
        codes = self.kind_codes(memory_kinds)
        if codes.shape[0] != n:
            raise ValueError(f"memory_kinds has {codes.shape[0]} rows for {n} claims")
        return codes

    # -- evaluation -------------------------------------------------------------------
    def decision_function(self, X: Any, memory_kinds: Any = None) -> FloatArray:
        """The linear index of each row.

        Without kinds, ``intercept + features @ coef``. With kinds, ``intercept``, then
        ``kind_intercept`` of the row's kind, then each term in feature-map order, the
        terms of other kinds skipped (as :meth:`predict_one` sums them).

        Parameters
        ----------
        X : array or DataFrame
            As for :meth:`FeatureMap.transform`.
        memory_kinds : sequence of str or None, optional
            The kind of each row; by default ``X["memory_kind"]`` when ``X`` has that
            column, else absent (``"other"``). Ignored by a calibrator without kinds.
        """
        design = self.feature_map.transform(X)
        if not self.kinds:
            return design @ self._w + self.intercept
        codes = self._row_codes(X, memory_kinds, design.shape[0])
        z = self.intercept + np.asarray(self.kind_intercept, dtype=np.float64)[codes]
        for j, tc in enumerate(self._term_codes):
            term = self._w[j] * design[:, j]
            z += term if tc < 0 else np.where(codes == tc, term, 0.0)
        return z

    def predict(self, X: Any, memory_kinds: Any = None) -> FloatArray:
        """Violation probability of each row, shape (n,); ``memory_kinds`` as for
        :meth:`decision_function`."""
        z = self.decision_function(X, memory_kinds)
        p = np.interp(z, self._x, self._y) if self.kind == "isotonic" else sigmoid(z)
        if self.clamp is not None:
            p = np.clip(p, self.clamp[0], self.clamp[1])
        return p

    def predict_one(self, features: Mapping[str, float], memory_kind: str | None = None
                    ) -> float:
        """Probability for one claim given as ``{feature: value}``, in plain Python.

        ``memory_kind`` is the claim's kind (absent or unknown: ``"other"``); a calibrator
        without kinds ignores it. The terms and the sigmoid use the portable ``log``,
        ``log1p`` and ``exp`` (:mod:`amv_calib.contract._portable_math`), so the compiled
        batch gate and the TypeScript client compute these very bits; :meth:`predict`
        (numpy's functions) agrees within a few ulps.
        """
        z = self.intercept
        if self.kinds:
            k = self.kind_code(memory_kind)
            z += self.kind_intercept[k]
            for term, w, tc in zip(self.feature_map.terms, self.coef, self._term_codes,
                                   strict=True):
                if tc < 0 or tc == k:
                    z += w * term.evaluate_one(features)
        else:
            for term, w in zip(self.feature_map.terms, self.coef, strict=True):
                z += w * term.evaluate_one(features)
        if self.kind == "isotonic":
            p = float(np.interp(z, self._x, self._y))
        elif z >= 0:
            p = 1.0 / (1.0 + portable_exp(-z))
        else:
            e = portable_exp(z)
            p = e / (1.0 + e)
        if self.clamp is not None:
            p = min(self.clamp[1], max(self.clamp[0], p))
        return p

    # -- plain data -------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """The ``calibrator.json`` object (see ``models/README.md``)."""
        out: dict[str, Any] = {
            "format": PORTABLE_FORMAT,
            "format_version": (PORTABLE_FORMAT_VERSION_KINDS if self.kinds
                               else PORTABLE_FORMAT_VERSION),
            "kind": self.kind,
            "source": self.source,
            "feature_map": self.feature_map.to_list(),
            "intercept": float(self.intercept),
            "coef": [float(c) for c in self.coef],
            "clamp": None if self.clamp is None else [float(self.clamp[0]), float(self.clamp[1])],
        }
        if self.kind == "isotonic":
            out["x_knots"] = [float(v) for v in self.x_knots]
            out["y_knots"] = [float(v) for v in self.y_knots]
        if self.kinds:
            out["kinds"] = list(self.kinds)
            out["kind_intercept"] = [float(v) for v in self.kind_intercept]
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PortableCalibrator:
        """Validate and build from the ``calibrator.json`` object; never executes code."""
        if not isinstance(data, Mapping):
            raise PortableFormatError("calibrator description must be a JSON object")
        _check_format(data, PORTABLE_FORMAT,
                      (PORTABLE_FORMAT_VERSION, PORTABLE_FORMAT_VERSION_KINDS))
        allowed = {"format", "format_version", "kind", "source", "feature_map", "intercept",
                   "coef", "clamp", "x_knots", "y_knots", "kinds", "kind_intercept"}
        unknown = set(data) - allowed
        if unknown:
            raise PortableFormatError(f"calibrator description has unknown keys {sorted(unknown)}")
        for key in ("kind", "feature_map", "intercept", "coef"):
            if key not in data:
                raise PortableFormatError(f"calibrator description lacks {key!r}")
        clamp_raw = data.get("clamp")
        clamp: tuple[float, float] | None = None
        if clamp_raw is not None:
            c = _float_list(clamp_raw, "clamp")
            if len(c) != 2:
                raise PortableFormatError(f"clamp must be [lo, hi], got {clamp_raw!r}")
            clamp = (c[0], c[1])
        kind = data["kind"]
        check_choice("kind", kind, ("linear", "isotonic"), PortableFormatError)
        fmap = FeatureMap.from_list(data["feature_map"])
        kinds, ki = _kind_fields(data, fmap, data["format_version"])
        return cls(
            kind=kind,
            feature_map=fmap,
            intercept=_finite_float(data["intercept"], "intercept"),
            coef=_float_list(data["coef"], "coef"),
            x_knots=_float_list(data.get("x_knots", []), "x_knots"),
            y_knots=_float_list(data.get("y_knots", []), "y_knots"),
            clamp=clamp,
            source=str(data.get("source", "")),
            kinds=kinds,
            kind_intercept=ki,
        )


def _kind_fields(data: Mapping[str, Any], fmap: FeatureMap, version: Any
                 ) -> tuple[tuple[str, ...], tuple[float, ...]]:
    """``kinds`` and ``kind_intercept`` of a ``calibrator.json`` object, checked against its
    ``format_version``: 2 exactly when the memory-kind fields are there."""
    kinds_raw, ki_raw = data.get("kinds"), data.get("kind_intercept")
    if version == PORTABLE_FORMAT_VERSION:
        given = [k for k in ("kinds", "kind_intercept") if k in data]
        given += [f"feature_map[{j}].kind" for j, t in enumerate(fmap.terms)
                  if t.kind is not None]
        if given:
            raise PortableFormatError(
                f"format_version=1 takes no memory kinds, got {', '.join(given)}; a "
                f"calibrator with kinds has format_version {PORTABLE_FORMAT_VERSION_KINDS}"
            )
        return (), ()
    for key, value in (("kinds", kinds_raw), ("kind_intercept", ki_raw)):
        if value is None:
            raise PortableFormatError(
                f"format_version={PORTABLE_FORMAT_VERSION_KINDS} needs {key!r}"
            )
    if isinstance(kinds_raw, (str, bytes)) or not isinstance(kinds_raw, Sequence):
        raise PortableFormatError(f"kinds={kinds_raw!r} must be a list of strings")
    if not kinds_raw:
        raise PortableFormatError(f"kinds=[] lacks {OTHER_KIND!r}")
    kinds = tuple(_check_kind(k, f"kinds[{i}]") for i, k in enumerate(kinds_raw))
    return kinds, _float_list(ki_raw, "kind_intercept")


#: The seed's features: ``logit(conf)``, ``ramp(recency, 720 h)``, trust, contradiction.
SEED_FEATURE_MAP: Final = FeatureMap(
    (
        Term(column="model_confidence", transform="logit", eps=DEFAULT_EPS),
        Term(column="recency_hours", transform="ramp", scale=720.0),
        Term(column="source_trust_score", transform="identity"),
        Term(column="contradiction_flag", transform="indicator"),
    )
)
SEED_INTERCEPT: Final = -0.85
SEED_COEF: Final = (-1.42, 2.15, -1.80, 2.5)
SEED_CLAMP: Final = (0.001, 0.999)


def seed_prior_calibrator() -> PortableCalibrator:
    """The seed engine's fixed logistic formula and clamp, as a portable calibrator."""
    return PortableCalibrator(
        kind="linear",
        feature_map=SEED_FEATURE_MAP,
        intercept=SEED_INTERCEPT,
        coef=SEED_COEF,
        clamp=SEED_CLAMP,
        source="seed-prior",
    )
