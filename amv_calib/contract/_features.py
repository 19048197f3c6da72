"""Feature maps and the portable calibrator: the contract between training and the gate.

A *feature map* is a list of terms, each one closed-vocabulary transform of one raw claim
feature. A *portable calibrator* is a linear model over a feature map (Platt, Beta, the seed
prior) or an isotonic table over such a linear index. Both are plain data (``to_dict`` /
``from_dict``), so an artifact can carry them and any language can evaluate them.

This module imports numpy and the standard library only: the runtime gate depends on it.
The JSON layout is documented in ``models/README.md``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal, cast, get_args

import numpy as np
from numpy.typing import ArrayLike, NDArray

from amv_calib.contract._schema import CLAIM_FEATURES
from amv_calib.exceptions import PortableFormatError, check_choice

Transform = Literal["identity", "logit", "log", "log1m", "ramp", "log1p", "indicator"]
TRANSFORMS: Final[tuple[str, ...]] = get_args(Transform)

PORTABLE_FORMAT: Final = "amv-calib/portable-calibrator"
PORTABLE_FORMAT_VERSION: Final = 1

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
    """

    column: str
    transform: Transform
    scale: float | None = None
    eps: float | None = None
    by: str | None = None

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

    @property
    def name(self) -> str:
        """Readable name such as ``logit(model_confidence)`` or ``ramp(recency_hours, 720)``."""
        if self.scale is not None:
            base = f"{self.transform}({self.column}, {self.scale:g})"
        else:
            base = f"{self.transform}({self.column})"
        return base if self.by is None else f"{base}*{self.by}"

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
        """Scalar twin of :meth:`apply` (the gate's single-claim fast path)."""
        eps = DEFAULT_EPS if self.eps is None else self.eps
        t = self.transform
        if t == "identity":
            return x
        if t == "logit":
            return math.log(max(eps, x)) - math.log(max(eps, 1.0 - x))
        if t == "log":
            return math.log(max(eps, x))
        if t == "log1m":
            return -math.log(max(eps, 1.0 - x))
        if t == "ramp":
            return min(1.0, x / cast(float, self.scale))
        if t == "log1p":
            return math.log1p(x / cast(float, self.scale))
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
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Term:
        """Build a term from its plain-data form, refusing unknown keys."""
        if not isinstance(data, Mapping):
            raise PortableFormatError(f"feature term must be an object, got {data!r}")
        unknown = set(data) - {"column", "transform", "scale", "eps", "by"}
        if unknown:
            raise PortableFormatError(f"feature term has unknown keys {sorted(unknown)}")
        for key in ("column", "transform"):
            if key not in data:
                raise PortableFormatError(f"feature term lacks {key!r}: {dict(data)!r}")
        scale, eps, by = data.get("scale"), data.get("eps"), data.get("by")
        return cls(
            column=str(data["column"]),
            transform=cast(Transform, str(data["transform"])),
            scale=None if scale is None else _finite_float(scale, "scale"),
            eps=None if eps is None else _finite_float(eps, "eps"),
            by=None if by is None else str(by),
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


def _check_format(data: Mapping[str, Any], name: str, version: int) -> None:
    """Check that a JSON object declares ``format`` ``name`` at ``format_version`` ``version``.

    Raises
    ------
    PortableFormatError
        Naming the value found, when either differs (a newer ``format_version`` is as
        unreadable as an unknown format).
    """
    if data.get("format") != name:
        raise PortableFormatError(f"format={data.get('format')!r}, expected {name!r}")
    found = data.get("format_version")
    # a JSON integer: true is not 1 (Python's True == 1 is no JSON equality), nor is 1.0
    if isinstance(found, bool) or not isinstance(found, int) or found != version:
        raise PortableFormatError(
            f"unknown format_version={data.get('format_version')!r}; this version of "
            f"amv-calib reads format_version {version}"
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
    _x: FloatArray = field(init=False, repr=False, compare=False)
    _y: FloatArray = field(init=False, repr=False, compare=False)
    _w: FloatArray = field(init=False, repr=False, compare=False)

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
        object.__setattr__(self, "_x", np.asarray(self.x_knots, dtype=np.float64))
        object.__setattr__(self, "_y", np.asarray(self.y_knots, dtype=np.float64))
        object.__setattr__(self, "_w", np.asarray(self.coef, dtype=np.float64))

    # -- evaluation -------------------------------------------------------------------
    def decision_function(self, X: Any) -> FloatArray:
        """The linear score ``intercept + features @ coef`` for each row."""
        return self.feature_map.transform(X) @ self._w + self.intercept

    def predict(self, X: Any) -> FloatArray:
        """Violation probability of each row, shape (n,)."""
        z = self.decision_function(X)
        p = np.interp(z, self._x, self._y) if self.kind == "isotonic" else sigmoid(z)
        if self.clamp is not None:
            p = np.clip(p, self.clamp[0], self.clamp[1])
        return p

    def predict_one(self, features: Mapping[str, float]) -> float:
        """Probability for one claim given as ``{feature: value}``, in plain Python."""
        z = self.intercept
        for term, w in zip(self.feature_map.terms, self.coef, strict=True):
            z += w * term.evaluate_one(features)
        if self.kind == "isotonic":
            p = float(np.interp(z, self._x, self._y))
        elif z >= 0:
            p = 1.0 / (1.0 + math.exp(-z))
        else:
            e = math.exp(z)
            p = e / (1.0 + e)
        if self.clamp is not None:
            p = min(self.clamp[1], max(self.clamp[0], p))
        return p

    # -- plain data -------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """The ``calibrator.json`` object (see ``models/README.md``)."""
        out: dict[str, Any] = {
            "format": PORTABLE_FORMAT,
            "format_version": PORTABLE_FORMAT_VERSION,
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
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PortableCalibrator:
        """Validate and build from the ``calibrator.json`` object; never executes code."""
        if not isinstance(data, Mapping):
            raise PortableFormatError("calibrator description must be a JSON object")
        _check_format(data, PORTABLE_FORMAT, PORTABLE_FORMAT_VERSION)
        allowed = {"format", "format_version", "kind", "source", "feature_map", "intercept",
                   "coef", "clamp", "x_knots", "y_knots"}
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
        return cls(
            kind=kind,
            feature_map=FeatureMap.from_list(data["feature_map"]),
            intercept=_finite_float(data["intercept"], "intercept"),
            coef=_float_list(data["coef"], "coef"),
            x_knots=_float_list(data.get("x_knots", []), "x_knots"),
            y_knots=_float_list(data.get("y_knots", []), "y_knots"),
            clamp=clamp,
            source=str(data.get("source", "")),
        )


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
