"""Four calibrators of the claim-violation probability, as scikit-learn estimators.

Every calibrator reads the four raw claim features (a DataFrame with the canonical columns,
or an array whose columns follow :data:`amv_calib.contract._schema.CLAIM_FEATURES`) and predicts
``P(violated)``. Each fitted calibrator holds its portable description (``portable_``) and
predicts *through it*, so :meth:`to_portable` reproduces ``predict_proba(X)[:, 1]`` exactly.

- :class:`PlattCalibrator`: logistic regression over a feature map (multi-feature Platt).
- :class:`BetaCalibrator`: beta calibration (Kull et al. 2017, ``abm``) generalised to several
  scores, plus unconstrained extra features.
- :class:`IsotonicCalibrator`: isotonic regression on a cross-fitted one-dimensional index.
- :class:`SeedPriorCalibrator`: the seed engine's fixed formula and clamp; fitting only
  checks the input.

The positive class is ``classes_[1]``: with ``violated`` given as bool or 0/1, ``classes_``
is ``[0, 1]`` and the probability is that of ``violated``.

Plain scores: with ``plain_score="increasing"`` (or ``"decreasing"``) Platt, Beta and isotonic
calibrate one score instead (a model's probability, an LLM judge's confidence, a classifier's
output): ``X`` is a 1-D array, one column, or a frame with a ``score`` column, and the
positive class grows more (less) likely as the score rises. The score occupies the claim
feature :data:`SCORE_COLUMN` (``model_confidence``) of the portable form, whose closed
vocabulary has no other place for it: the exported calibrator is a claim calibrator that reads
``model_confidence`` alone (:func:`score_features` builds its input from a plain score).
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from collections.abc import Sequence
from typing import Any, Final, Literal, cast

import numpy as np
from numpy.typing import NDArray
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.isotonic import isotonic_regression
from sklearn.linear_model import LogisticRegression
from sklearn.utils import Tags
from sklearn.utils.multiclass import check_classification_targets, type_of_target
from sklearn.utils.validation import _check_sample_weight, check_is_fitted, validate_data

from amv_calib.contract import (
    CLAIM_FEATURES,
    DEFAULT_EPS,
    SEED_FEATURE_MAP,
    FeatureMap,
    PortableCalibrator,
    Term,
    seed_prior_calibrator,
)
from amv_calib.exceptions import InsufficientDataError, check_choice

FloatArray = NDArray[np.float64]
Direction = Literal["increasing", "decreasing"]

#: The claim feature in which a plain score travels in the portable form (the contract's
#: column for a model's probability; the gate reads it as it reads any claim).
SCORE_COLUMN: Final = "model_confidence"
#: Default floor of ``s`` and ``1 - s`` inside logarithms for plain scores and Beta (the
#: seed's feature map keeps its 1e-5): the float64 machine epsilon ``2**-52``, as the
#: reference ``betacal`` clips. Below it ``1 - s`` cannot differ from 1 - 0, so ``s`` and
#: ``1 - s`` are floored alike; a floor of 1e-5 tied 90% of a naive Bayes classifier's
#: probabilities on breast-cancer data, and even 1e-12 cost a median 0.003 nats against
#: ``betacal`` (docs/calibration.md).
SCORE_EPS: Final = float(np.finfo(np.float64).eps)
#: Transforms that need a score in [0, 1].
_UNIT_TRANSFORMS: Final = frozenset({"logit", "log", "log1m"})

#: Platt's default map: the seed's four features (logit confidence, 720 h recency ramp,
#: trust, contradiction), so a fitted Platt model is the seed formula with learnt weights.
DEFAULT_PLATT_MAP: Final = SEED_FEATURE_MAP


def _terms(column: str, transform: str, *scales: float) -> tuple[Term, ...]:
    return tuple(Term(column=column, transform=transform, scale=s)  # type: ignore[arg-type]
                 for s in scales)


#: A richer map (19 terms) that ``compare_calibrators`` uses for Platt and for the
#: isotonic index: the seed's four terms, then ``log(confidence)`` (with ``logit`` it spans
#: the beta-calibration pair ``log``/``log1m``), linear-spline hinges ``ramp(confidence,
#: 0.6 | 0.8 | 0.9)``, ``log1p(recency / 10 | 100 | 1000 | 10000 h)`` (staleness laws on
#: time scales from hours to a year), ``log``/``log1m(trust)`` and hinges ``ramp(trust,
#: 0.3 | 0.6 | 0.8)``. Chosen because it wins on out-of-fold log loss on the synthetic
#: generator (seeds 1 and 2, 100k rows: 2.3-2.6% above the oracle against 6% for the
#: seed map); it nests the seed map.
RICH_PLATT_MAP: Final = FeatureMap(
    (
        *SEED_FEATURE_MAP.terms,
        Term(column="model_confidence", transform="log", eps=DEFAULT_EPS),
        *_terms("model_confidence", "ramp", 0.6, 0.8, 0.9),
        *_terms("recency_hours", "log1p", 10.0, 100.0, 1000.0, 10000.0),
        Term(column="source_trust_score", transform="log", eps=DEFAULT_EPS),
        Term(column="source_trust_score", transform="log1m", eps=DEFAULT_EPS),
        *_terms("source_trust_score", "ramp", 0.3, 0.6, 0.8),
        # A contradiction weighs differently with the source's trust and the model's
        # confidence; no sum of one-feature terms can say so (2.2% -> 1.3% above the oracle).
        Term(column="contradiction_flag", transform="indicator", by="source_trust_score"),
        Term(column="contradiction_flag", transform="indicator", by="model_confidence"),
    )
)

#: Beta's default scores and the direction in which violation moves with each:
#: more confident, more trusted claims are violated less often.
BETA_SCORES: Final[tuple[tuple[str, Direction], ...]] = (
    ("model_confidence", "decreasing"),
    ("source_trust_score", "decreasing"),
)

#: Beta's default unconstrained extra features: the seed's recency ramp and contradiction.
BETA_EXTRA_MAP: Final = FeatureMap(
    (
        Term(column="recency_hours", transform="ramp", scale=720.0),
        Term(column="contradiction_flag", transform="indicator"),
    )
)

#: Richer extras that ``compare_calibrators`` gives Beta: the seed's recency ramp, the
#: recency terms of :data:`RICH_PLATT_MAP` and contradiction (the constrained score terms
#: stay the ``abm`` pairs of confidence and trust).
RICH_BETA_EXTRA_MAP: Final = FeatureMap(
    (
        Term(column="recency_hours", transform="ramp", scale=720.0),
        *_terms("recency_hours", "log1p", 10.0, 100.0, 1000.0, 10000.0),
        Term(column="contradiction_flag", transform="indicator"),
        Term(column="contradiction_flag", transform="indicator", by="source_trust_score"),
        Term(column="contradiction_flag", transform="indicator", by="model_confidence"),
    )
)

#: Significant digits of every fitted intercept and coefficient (Platt, Beta, the isotonic
#: index's part fits). The optimum a Newton solver reaches is exact only to float noise that
#: follows the machine: the BLAS kernel OpenBLAS picks for the CPU and numpy's SIMD ``exp`` and
#: ``log`` move the coefficients of the sample data by up to about 1e-13 (1e-11 relative for
#: the smallest). Eight digits round that noise away, with a margin of a thousandfold and
#: more, so the fit writes the same bytes on any x86-64 (a value within the noise of a rounding
#: boundary, odds of about 1e-4 per model here, would still differ there, by one unit in the
#: eighth digit); the logit moves by less than 1e-6, far below the fit's statistical error.
COEF_DIGITS: Final = 8
#: Decimals of the isotonic index (a logit) before its table is fitted: the index is a
#: matrix product, whose last bits follow the BLAS kernel too; rounded, the knots do not.
INDEX_DECIMALS: Final = 8

_N_FEATURES: Final = len(CLAIM_FEATURES)


def _round_sig(value: float) -> float:
    """``value`` at :data:`COEF_DIGITS` significant digits (Python's correctly rounded decimal
    conversion, the same on every machine)."""
    return float(f"{value:.{COEF_DIGITS}g}")
_SCORE_INDEX: Final = CLAIM_FEATURES.index(SCORE_COLUMN)


def score_map(*transforms: str, eps: float = SCORE_EPS) -> FeatureMap:
    """A feature map of a plain score: one term per transform, on :data:`SCORE_COLUMN`.

    Parameters
    ----------
    *transforms : str
        Transforms of :data:`~amv_calib.contract.TRANSFORMS` without a scale: ``"logit"``
        (the default when none is given; Platt on the log-odds of a probability),
        ``"identity"`` (a real-valued score such as a decision function; what
        ``CalibratedClassifierCV(method="sigmoid")`` uses), ``"log"``, ``"log1m"``.
    eps : float, default :data:`SCORE_EPS` (``2**-52``, about 2.2e-16)
        Floor of ``s`` and ``1 - s`` inside the logarithms (``logit``, ``log``, ``log1m``):
        0 and 1 give finite terms, never NaN.

    Returns
    -------
    FeatureMap
    """
    out = []
    for t in transforms or ("logit",):
        if t not in ("identity", "logit", "log", "log1m"):
            raise ValueError(f"score transform {t!r} must be 'identity', 'logit', 'log' or "
                             "'log1m'")
        out.append(Term(column=SCORE_COLUMN, transform=t,  # type: ignore[arg-type]
                        eps=eps if t in _UNIT_TRANSFORMS else None))
    return FeatureMap(tuple(out))


def score_features(score: Any) -> FloatArray:
    """Claim features of plain scores: :data:`SCORE_COLUMN` holds the score, the rest 0.

    The input a plain-score calibrator's portable form (``to_portable()``) predicts from:
    ``to_portable().predict(score_features(s))`` equals ``predict_proba(s)[:, 1]``; for one
    score, ``to_portable().predict_one({"model_confidence": s})``.
    """
    s = np.asarray(score, dtype=np.float64).reshape(-1)
    out = np.zeros((s.size, _N_FEATURES), dtype=np.float64)
    out[:, _SCORE_INDEX] = s
    return out


def _score_matrix(X: Any) -> Any:
    """A plain score as a one-column array: 1-D input, a one-column input, or a frame's
    ``score`` column (or its only column)."""
    columns = getattr(X, "columns", None)
    if columns is not None:
        if "score" in columns:
            return np.asarray(X["score"], dtype=np.float64).reshape(-1, 1)
        if len(columns) == 1:
            return np.asarray(X[columns[0]], dtype=np.float64).reshape(-1, 1)
        raise ValueError(f"a plain-score calibrator reads a 'score' column (or a frame of one "
                         f"column); got columns {[str(c) for c in columns]}")
    arr = np.asarray(X) if isinstance(X, (list, tuple)) or hasattr(X, "__array__") else X
    if getattr(arr, "ndim", None) == 1:
        return arr.reshape(-1, 1)
    return arr


def _check_score_map(fmap: FeatureMap, who: str) -> None:
    """A plain-score map may only read the score."""
    bad = [t.name for t in fmap.terms if t.column != SCORE_COLUMN or t.by is not None]
    if bad:
        raise ValueError(f"{who}: with plain_score set the feature map may only read the "
                         f"score ({SCORE_COLUMN!r}, see score_map); {bad} read other columns")


# -- shared machinery -----------------------------------------------------------------------
def _claim_matrix(X: Any) -> tuple[Any, Any]:
    """Split ``X`` into an array in canonical column order and its claim ids (or None)."""
    columns = getattr(X, "columns", None)
    if columns is None:
        return X, None
    missing = [c for c in CLAIM_FEATURES if c not in columns]
    if missing and len(missing) < len(CLAIM_FEATURES):
        raise ValueError(f"claim features lack column(s) {missing}")
    if missing:
        # No claim column at all: a generic frame, read like an array in canonical order.
        return X, None
    arr = np.column_stack([np.asarray(X[c], dtype=np.float64) for c in CLAIM_FEATURES])
    groups = np.asarray(X["claim_id"]) if "claim_id" in columns else None
    return arr, groups


def _fit_logistic(
    F: FloatArray,
    y01: FloatArray,
    w: FloatArray,
    *,
    C: float | None,
    max_iter: int,
    tol: float,
    names: Sequence[str],
) -> tuple[float, FloatArray, int]:
    """Intercept, coefficients and Newton iterations of a logistic regression on ``F``.

    scikit-learn's ``newton-cholesky`` solver: with few terms and many rows, a handful of
    exact Newton steps converge (L-BFGS needs hundreds of steps on correlated terms and
    stops early at its default tolerance). ``C`` is scikit-learn's: the inverse L2 strength
    on the terms as the feature map computes them. A term that is constant on the training
    rows carries no information: it gets weight 0, with a warning naming it. The intercept
    and coefficients are rounded to :data:`COEF_DIGITS` significant digits, so the same data
    give the same bytes on any CPU.
    """
    coef = np.zeros(F.shape[1], dtype=np.float64)
    live = w > 0
    if F.shape[1] == 0:
        rate = float(np.average(y01, weights=w))
        rate = min(max(rate, 1e-12), 1.0 - 1e-12)
        return _round_sig(math.log(rate / (1.0 - rate))), coef, 0
    all_live = bool(live.all())
    Fl = F if all_live else F[live]
    # Columns that vary within the first rows are not constant; only the others need the
    # full pass (which is as expensive as a Newton step on many rows).
    head = Fl[:256]
    const = head.min(axis=0) == head.max(axis=0)
    if np.any(const):
        idx = np.flatnonzero(const)
        const[idx] = np.all(Fl[:, idx] == Fl[0, idx], axis=0)
    if np.any(const):
        which = [f"{names[int(j)]}={float(Fl[0, j])!r}" for j in np.flatnonzero(const)]
        warnings.warn(
            f"feature term(s) {', '.join(which)} constant on all {int(live.sum())} training "
            "rows: weight set to 0 (the data cannot inform it)",
            UserWarning,
            stacklevel=3,
        )
    keep = ~const
    if not np.any(keep):
        b, _, _ = _fit_logistic(F[:, :0], y01, w, C=C, max_iter=max_iter, tol=tol, names=[])
        return b, coef, 0
    model = LogisticRegression(
        C=np.inf if C is None else float(C), max_iter=max_iter, tol=tol,
        solver="newton-cholesky",
    )
    # Unit weights are passed as None: the same fit, without the weighted code path.
    unit = bool(np.all(w == 1.0))
    model.fit(F if bool(np.all(keep)) else F[:, keep], y01,
              sample_weight=None if unit else w)
    # Rounded here, so that every later use (Beta's sign checks, the isotonic index, the
    # predictions through ``portable_``) reads the coefficients that are written.
    coef[keep] = [_round_sig(float(c)) for c in model.coef_[0]]
    intercept = _round_sig(float(model.intercept_[0]))
    return intercept, coef, int(np.max(model.n_iter_))


class _ClaimCalibrator(ClassifierMixin, BaseEstimator):  # type: ignore[misc]
    """Input checks, label encoding and prediction through ``portable_``."""

    portable_: PortableCalibrator
    classes_: NDArray[Any]

    def __sklearn_tags__(self) -> Tags:
        tags = super().__sklearn_tags__()
        assert tags.classifier_tags is not None
        tags.classifier_tags.multi_class = False
        return tags

    def _plain(self) -> Direction | None:
        """The plain score's direction, or None when ``X`` holds the claim features."""
        d = getattr(self, "plain_score", None)
        if d is not None and d not in ("increasing", "decreasing"):
            raise ValueError(f"plain_score={d!r} must be None, 'increasing' or 'decreasing'")
        return cast("Direction | None", d)

    def _unit_score(self) -> bool:
        """Whether the plain score must lie in [0, 1] (a logarithm reads it)."""
        return False

    def _input(self, X: Any) -> tuple[Any, Any]:
        if self._plain() is None:
            return _claim_matrix(X)
        return _score_matrix(X), None

    def _as_claims(self, X: NDArray[Any]) -> FloatArray:
        """Validated input as claim features (a plain score widened by score_features)."""
        self._check_width(X)
        if self._plain() is None:
            return cast(FloatArray, X)
        s = X[:, 0]
        if self._unit_score():
            bad = (s < 0.0) | (s > 1.0)
            if np.any(bad):
                i = int(np.argmax(bad))
                raise ValueError(
                    f"plain score of row {i} is {float(s[i])!r}; {type(self).__name__} takes "
                    "its logarithm, so scores must lie in [0, 1] (a real-valued score such as "
                    "a decision function: PlattCalibrator or IsotonicCalibrator with "
                    "feature_map=score_map('identity'))")
        return score_features(s)

    def _check_X(self, X: Any, *, reset: bool) -> tuple[FloatArray, Any]:
        arr, groups = self._input(X)
        out = validate_data(self, arr, reset=reset, dtype=np.float64)
        return self._as_claims(out), groups

    def _check_fit_input(
        self, X: Any, y: Any, sample_weight: Any
    ) -> tuple[FloatArray, FloatArray, FloatArray, Any]:
        arr, groups = self._input(X)
        y_arr = np.asarray(y)
        if y_arr.dtype == bool:
            # violated given as bool: report classes_ as [0, 1], the documented labels.
            y_arr = y_arr.astype(np.int64)
        Xv, yv = validate_data(self, arr, y_arr, dtype=np.float64, y_numeric=False)
        # Target checks come before the width check so that label errors read as such.
        if yv.dtype.kind in "iuf" and yv.size and bool(np.all((yv == 0) | (yv == 1))):
            # 0/1 labels (violated as int or bool): binary by definition, no sort needed.
            classes = np.array([v for v in (0, 1) if np.any(yv == v)], dtype=yv.dtype)
        else:
            check_classification_targets(yv)
            y_type = type_of_target(yv, input_name="y", raise_unknown=True)
            if y_type != "binary":
                raise ValueError(
                    "Only binary classification is supported. The type of the target is "
                    f"{y_type}."
                )
            classes = np.unique(yv)
        if classes.size < 2:
            raise InsufficientDataError(
                f"y has only one class ({classes.tolist()!r}) over {yv.shape[0]} rows; "
                "a calibrator needs both violated and not-violated claims"
            )
        w = _check_sample_weight(sample_weight, Xv, dtype=np.float64, ensure_non_negative=True)
        if not np.any(w > 0):
            raise ValueError("sample weights are all zero; at least one row needs weight > 0")
        y01 = (yv == classes[1]).astype(np.float64)
        live = w > 0
        if not (np.any(y01[live] == 1.0) and np.any(y01[live] == 0.0)):
            raise InsufficientDataError(
                "only one class carries positive sample weight; a calibrator needs both"
            )
        self.classes_ = classes
        return self._as_claims(Xv), y01, w, groups

    def _check_width(self, X: NDArray[Any]) -> None:
        if self._plain() is not None:
            if X.shape[1] != 1:
                raise ValueError(
                    f"X has n_features={X.shape[1]}; with plain_score set a calibrator reads "
                    "one score (a 1-D array, one column, or a frame's 'score' column)")
            return
        if X.shape[1] != _N_FEATURES:
            raise ValueError(
                f"X has n_features={X.shape[1]}; calibrators read exactly the {_N_FEATURES} "
                f"claim features {list(CLAIM_FEATURES)} in that order"
            )

    def predict_proba(self, X: Any) -> FloatArray:
        """Probabilities of ``classes_``, shape (n, 2); column 1 is ``P(violated)``."""
        check_is_fitted(self)
        arr, _ = self._check_X(X, reset=False)
        p1 = self.portable_.predict(arr)
        return np.column_stack([1.0 - p1, p1])

    def predict(self, X: Any) -> NDArray[Any]:
        """``classes_[1]`` where ``P(violated) > 0.5``, else ``classes_[0]``."""
        p1 = self.predict_proba(X)[:, 1]
        return self.classes_[(p1 > 0.5).astype(np.intp)]

    def to_portable(self, *, clamp: tuple[float, float] | None = None) -> PortableCalibrator:
        """The fitted model as plain data; ``clamp`` replaces the calibrator's own clamp.

        ``to_portable().predict(X)`` equals ``predict_proba(X)[:, 1]``.
        """
        check_is_fitted(self)
        if clamp is None:
            return self.portable_
        return dataclasses.replace(self.portable_, clamp=(float(clamp[0]), float(clamp[1])))


class _LinearCalibrator(_ClaimCalibrator):
    """A calibrator whose portable form is linear, so it has a logit."""

    def decision_function(self, X: Any) -> FloatArray:
        """The logit ``intercept + features @ coef`` of each row (positive: ``classes_[1]``)."""
        check_is_fitted(self)
        arr, _ = self._check_X(X, reset=False)
        return self.portable_.decision_function(arr)


class _LogisticCalibrator(_ClaimCalibrator):
    """A calibrator that fits logistic regressions: their settings and the fit itself."""

    def __init__(self, *, C: float | None = 1.0, max_iter: int = 100, tol: float = 1e-8,
                 plain_score: Direction | None = None) -> None:
        self.C = C
        self.max_iter = max_iter
        self.tol = tol
        self.plain_score = plain_score

    def _logistic_fit(self, F: FloatArray, y01: FloatArray, w: FloatArray,
                      names: Sequence[str]) -> tuple[float, FloatArray, int]:
        """:func:`_fit_logistic` with this calibrator's ``C``, ``max_iter`` and ``tol``."""
        return _fit_logistic(F, y01, w, C=self.C, max_iter=self.max_iter, tol=self.tol,
                             names=names)

    def _keep(self, fmap: FeatureMap, intercept: float, coef: FloatArray, *, n_iter: int,
              source: str, knots: tuple[FloatArray, FloatArray] | None = None) -> None:
        """Keep the fitted model and its portable form, through which it predicts.

        The model is linear, or with ``knots`` (x, y) isotonic over the index
        ``intercept + features @ coef``.
        """
        self.feature_map_ = fmap
        self.n_iter_ = n_iter
        self.intercept_ = intercept
        self.coef_ = coef
        x_knots, y_knots = ((), ()) if knots is None else knots
        self.portable_ = PortableCalibrator(
            kind="linear" if knots is None else "isotonic",
            feature_map=fmap,
            intercept=intercept,
            coef=tuple(float(c) for c in coef),
            x_knots=tuple(float(v) for v in x_knots),
            y_knots=tuple(float(v) for v in y_knots),
            source=source,
        )


# -- Platt ----------------------------------------------------------------------------------
class PlattCalibrator(_LogisticCalibrator, _LinearCalibrator):
    """Multi-feature Platt scaling: logistic regression over a feature map.

    Parameters
    ----------
    feature_map : FeatureMap, optional
        Terms of the linear model; default :data:`DEFAULT_PLATT_MAP` (the seed's features),
        or with ``plain_score`` set ``score_map("logit")`` (Platt on the score's log-odds,
        floored at :data:`SCORE_EPS`); ``score_map("identity")`` for a real-valued score.
    C : float or None, default 1.0
        Inverse L2 strength as in :class:`~sklearn.linear_model.LogisticRegression` (on the
        terms as the feature map computes them); ``None`` or ``inf`` fits unpenalised.
    max_iter : int, default 100
        Newton iteration cap.
    tol : float, default 1e-8
        Newton stopping tolerance (see ``LogisticRegression(solver="newton-cholesky")``).
    plain_score : {"increasing", "decreasing"} or None, default None
        None: ``X`` holds the four claim features. Otherwise ``X`` is one plain score (a 1-D
        array, one column, or a frame's ``score`` column) in which the positive class
        rises (``"increasing"``) or falls; the feature map may read only that score. A fit
        whose probability moves against this direction over the training scores warns.

    Attributes
    ----------
    intercept_ : float
    coef_ : ndarray of shape (n_terms,)
    feature_map_ : FeatureMap
    portable_ : PortableCalibrator

    Examples
    --------
    Fitted on synthetic claims, scored on two of them, exported as the portable form the
    gate loads (same probabilities with numpy alone):

    >>> import numpy as np
    >>> from amv_calib.calibration import PlattCalibrator
    >>> from amv_calib.datasets import synth_claims
    >>> from amv_calib.contract import CLAIM_FEATURES
    >>> claims = synth_claims(2000, seed=1)
    >>> X, y = claims[list(CLAIM_FEATURES)], claims["violated"]
    >>> cal = PlattCalibrator().fit(X, y)
    >>> p = cal.predict_proba(X.head(2))[:, 1]
    >>> bool(np.all((0 < p) & (p < 1)))
    True
    >>> portable = cal.to_portable()
    >>> np.allclose(portable.predict(X.head(2).to_numpy(dtype=float)), p, rtol=1e-12)
    True
    """

    def __init__(self, *, feature_map: FeatureMap | None = None, C: float | None = 1.0,
                 max_iter: int = 100, tol: float = 1e-8,
                 plain_score: Direction | None = None) -> None:
        super().__init__(C=C, max_iter=max_iter, tol=tol, plain_score=plain_score)
        self.feature_map = feature_map

    def _map(self) -> FeatureMap:
        if self.feature_map is not None:
            if self._plain() is not None:
                _check_score_map(self.feature_map, "PlattCalibrator")
            return self.feature_map
        return DEFAULT_PLATT_MAP if self._plain() is None else score_map("logit")

    def _unit_score(self) -> bool:
        return any(t.transform in _UNIT_TRANSFORMS for t in self._map().terms)

    def fit(self, X: Any, y: Any, sample_weight: Any = None) -> PlattCalibrator:
        """Fit the logistic regression; returns ``self``."""
        fmap = self._map()
        Xv, y01, w, _ = self._check_fit_input(X, y, sample_weight)
        F = fmap.transform(Xv)
        b, coef, n_iter = self._logistic_fit(F, y01, w, fmap.names)
        self._keep(fmap, b, coef, n_iter=n_iter, source="platt")
        direction = self._plain()
        if direction is not None:
            _warn_against_direction(self, Xv[:, _SCORE_INDEX], direction)
        return self


def _warn_against_direction(est: _LinearCalibrator, s: FloatArray, direction: Direction
                            ) -> None:
    """Warn when a fitted plain-score logit moves against ``direction`` between the lowest and
    the highest training score."""
    ends = score_features(np.array([np.min(s), np.max(s)]))
    z = est.portable_.decision_function(ends)
    rise = float(z[1] - z[0])
    if (rise < 0.0 if direction == "increasing" else rise > 0.0):
        weights = ", ".join(f"{n}: {c:.4g}" for n, c in
                            zip(est.portable_.feature_map.names, est.portable_.coef,
                                strict=True))
        warnings.warn(
            f"{type(est).__name__}(plain_score={direction!r}): the fitted probability "
            f"{'falls' if rise < 0 else 'rises'} as the score rises over the training scores "
            f"(weights {weights}); the data say the score works the other way round",
            UserWarning, stacklevel=3)


# -- Beta -----------------------------------------------------------------------------------
def _beta_scores(scores: Sequence[tuple[str, str]] | None) -> tuple[tuple[str, Direction], ...]:
    out: list[tuple[str, Direction]] = []
    for item in BETA_SCORES if scores is None else scores:
        column, direction = item
        if column not in CLAIM_FEATURES:
            raise ValueError(f"beta score column={column!r} is not a claim feature")
        if direction not in ("increasing", "decreasing"):
            raise ValueError(
                f"beta score {column!r} direction={direction!r} must be "
                "'increasing' or 'decreasing'"
            )
        out.append((column, cast(Direction, direction)))
    if len({c for c, _ in out}) != len(out):
        raise ValueError(f"beta scores repeat a column: {[c for c, _ in out]}")
    return tuple(out)


class BetaCalibrator(_LogisticCalibrator, _LinearCalibrator):
    """Beta calibration (Kull, Silva Filho and Flach 2017, ``abm``) over several scores.

    For each score ``s`` in [0, 1] the model has the terms ``log(s) = ln s`` and
    ``log1m(s) = -ln(1 - s)``; the logit is ``c + sum(a_s log(s) + b_s log1m(s)) + extra``.
    For an *increasing* score the ``abm`` constraint is ``a_s, b_s >= 0`` (the map rises with
    ``s``); for a *decreasing* one ``a_s, b_s <= 0``, which is ``abm`` on ``1 - s``.

    Constraints are met as in the reference ``betacal`` package: fit all terms; for every
    score whose first-checked coefficient (``a`` for increasing, ``b`` for decreasing, i.e.
    the ``ln s`` term of the score oriented to rise) has the wrong sign, drop that term,
    otherwise drop the other if it has the wrong sign; refit. Unlike the reference, which
    stops after one refit, this repeats until no constrained coefficient has the wrong sign
    (so a score may lose both terms). On one increasing score with no extra features and
    ``C=inf`` this is the reference ``abm`` fit whenever the reference meets its own
    constraint. Dropped terms keep coefficient 0 in the portable map.

    When the constraints drop both terms of a score, the model ignores that score: a warning
    names the score and its terms (usually the direction is the wrong way round).

    Parameters
    ----------
    scores : sequence of (column, "increasing" | "decreasing"), optional
        Default :data:`BETA_SCORES` (confidence and trust, both decreasing).
    extra_map : FeatureMap or sequence of Term, optional
        Unconstrained extra terms; default :data:`BETA_EXTRA_MAP`; ``()`` for none.
    eps : float, default :data:`SCORE_EPS` (``2**-52``, about 2.2e-16)
        Floor of ``s`` and ``1 - s`` inside the logarithms (0 and 1 give finite terms).
        The earlier default 1e-5 tied every score below 1e-5 (most of a naive Bayes
        classifier's probabilities); pass ``eps=1e-5`` for the old fits.
    C, max_iter, tol
        As in :class:`PlattCalibrator`.
    plain_score : {"increasing", "decreasing"} or None, default None
        None: ``X`` holds the four claim features. Otherwise ``X`` is one plain score in
        [0, 1] (a 1-D array, one column, or a frame's ``score`` column) and the model is
        ``abm`` on it alone with this direction (``"increasing"``: the reference ``betacal``
        model); ``scores`` and ``extra_map`` must then be left unset.

    Attributes
    ----------
    intercept_, coef_, feature_map_, portable_
        As in :class:`PlattCalibrator`.
    dropped_terms_ : list of str
        Names of the log terms dropped to meet the constraints.
    n_fits_ : int
        Logistic fits made (1 when no constraint was active).
    """

    def __init__(self, *, scores: Sequence[tuple[str, str]] | None = None,
                 extra_map: FeatureMap | Sequence[Term] | None = None, eps: float = SCORE_EPS,
                 C: float | None = 1.0, max_iter: int = 100, tol: float = 1e-8,
                 plain_score: Direction | None = None) -> None:
        super().__init__(C=C, max_iter=max_iter, tol=tol, plain_score=plain_score)
        self.scores = scores
        self.extra_map = extra_map
        self.eps = eps

    def _unit_score(self) -> bool:
        return True

    def _feature_map(self) -> tuple[FeatureMap, list[tuple[int, int, float]]]:
        """The full map and, per score, (first-checked column, other column, sign)."""
        terms: list[Term] = []
        constrained: list[tuple[int, int, float]] = []
        plain = self._plain()
        extras: tuple[Term, ...] = (
            () if self.extra_map is None else self.extra_map.terms
            if isinstance(self.extra_map, FeatureMap) else tuple(self.extra_map))
        if plain is not None and (self.scores is not None or extras):
            raise ValueError("BetaCalibrator(plain_score=...) calibrates the one plain score: "
                             "leave scores and extra_map unset")
        scores = ((SCORE_COLUMN, plain),) if plain is not None else _beta_scores(self.scores)
        for column, direction in scores:
            j = len(terms)
            terms.append(Term(column=column, transform="log", eps=self.eps))
            terms.append(Term(column=column, transform="log1m", eps=self.eps))
            # abm on the score oriented to rise: for s itself check ln s first; for 1 - s
            # the "ln s" term is ln(1 - s) = -log1m(s), so check log1m first.
            if direction == "increasing":
                constrained.append((j, j + 1, 1.0))
            else:
                constrained.append((j + 1, j, -1.0))
        if plain is None:
            terms.extend(BETA_EXTRA_MAP.terms if self.extra_map is None else extras)
        return FeatureMap(tuple(terms)), constrained

    def design(self) -> tuple[FeatureMap, list[tuple[int, int, float]]]:
        """The full feature map and, per constrained score, ``(first-checked term, other
        term, sign)``: what another fitter (the Spark engine) needs to apply the same
        drop-and-refit rule."""
        return self._feature_map()

    def fit(self, X: Any, y: Any, sample_weight: Any = None) -> BetaCalibrator:
        """Fit with the ``abm`` drop-and-refit rule; returns ``self``."""
        Xv, y01, w, _ = self._check_fit_input(X, y, sample_weight)
        fmap, constrained = self._feature_map()
        F = fmap.transform(Xv)
        names = fmap.names
        active = np.ones(F.shape[1], dtype=bool)
        n_fits = 0
        n_iter = 0
        while True:
            idx = np.flatnonzero(active)
            b, sub, it = self._logistic_fit(F[:, idx], y01, w, [names[i] for i in idx])
            n_fits += 1
            n_iter += it
            coef = np.zeros(F.shape[1], dtype=np.float64)
            coef[idx] = sub
            drop: list[int] = []
            for first, other, sign in constrained:
                if active[first] and sign * coef[first] < 0:
                    drop.append(first)
                elif active[other] and sign * coef[other] < 0:
                    drop.append(other)
            if not drop:
                break
            active[drop] = False
        self.dropped_terms_ = [names[i] for i in np.flatnonzero(~active)]
        self.n_fits_ = n_fits
        for first, other, sign in constrained:
            if not (active[first] or active[other]):
                direction = "increasing" if sign > 0 else "decreasing"
                warnings.warn(
                    f"BetaCalibrator: the {direction} constraint on score "
                    f"{fmap.terms[first].column} dropped both of its terms "
                    f"({names[min(first, other)]}, {names[max(first, other)]}): the "
                    "model ignores this score; the data say it works the other way round "
                    "(check its direction)",
                    UserWarning, stacklevel=2)
        self._keep(fmap, b, coef, n_iter=n_iter, source="beta")
        return self


# -- isotonic -------------------------------------------------------------------------------
def _split_parts(n: int, groups: Any, cv: int, seed: int) -> NDArray[np.intp]:
    """Part label in ``range(cv)`` of each row: seeded, and whole claims when grouped."""
    rng = np.random.default_rng(seed)
    if groups is None:
        parts = np.empty(n, dtype=np.intp)
        parts[rng.permutation(n)] = np.arange(n) % cv
        return parts
    g = np.asarray(groups)
    if g.dtype.kind not in "iub":
        g = g.astype(str)
    uniq, inverse = np.unique(g, return_inverse=True)
    group_part = np.empty(uniq.size, dtype=np.intp)
    group_part[rng.permutation(uniq.size)] = np.arange(uniq.size) % cv
    return group_part[inverse.reshape(-1)]


class IsotonicCalibrator(_LogisticCalibrator):
    """Isotonic regression of ``violated`` on a one-dimensional linear index.

    Cross-fitting (``index="platt"``): rows are split into ``cv`` parts by a seeded
    permutation (whole claims per part when ``X`` carries ``claim_id``). For each part a
    Platt index is fitted on the other parts and evaluated on that part, so each isotonic
    input is an index value from a model that never saw the row. Isotonic regression is fitted
    on these out-of-part values. The deployed index is the mean of the ``cv`` part indexes
    (their intercepts and coefficients averaged): every row informs it, it estimates the
    same coefficients as each part index, so it ranks new rows as they do, which is all the
    isotonic table depends on; and it costs no further fit. The portable form is that one
    linear index plus the knots.
    ``index="seed"`` uses the seed prior's fixed linear score, which needs no cross-fitting.
    Either index is rounded to :data:`INDEX_DECIMALS` decimals before the table is fitted,
    so that the knots do not follow the machine's last bits.

    Ties: isotonic output is a step function (pooled blocks), so rows of one block share one
    probability and AUC drops against the index's own ranking. ``strict=True`` puts one knot
    at the weighted mean index of each block (centred isotonic regression, Oron and Flournoy
    2017) and interpolates linearly, which is strictly increasing between the first and last
    block centre and constant beyond them. ``strict=False`` keeps scikit-learn's knots (both
    ends of each block, linear between blocks).

    Parameters
    ----------
    index : {"platt", "seed"}, default "platt"
    cv : int, default 2
        Number of cross-fitting parts (>= 2) for ``index="platt"``.
    feature_map : FeatureMap, optional
        Map of the Platt index; default :data:`DEFAULT_PLATT_MAP`.
    C, max_iter, tol
        Of the Platt index, as in :class:`PlattCalibrator`.
    increasing : bool, default True
        Direction of the isotonic map in the index (the Platt index rises with risk).
    strict : bool, default False
    out_of_bounds : {"clip"}, default "clip"
        Index values beyond the knots get the end values (the only behaviour the portable
        table has).
    random_state : int, default 0
        Seed of the part split.
    plain_score : {"increasing", "decreasing"} or None, default None
        None: ``X`` holds the four claim features. Otherwise ``X`` is one plain score (a 1-D
        array, one column, or a frame's ``score`` column) and the index is the score itself
        through ``feature_map`` (default ``score_map("identity")``, one term; no
        cross-fitting, ``index`` and ``cv`` are not used), the map rising
        (``"increasing"``) or falling in it; ``increasing`` must then stay True. With the
        default map this is ``sklearn.isotonic.IsotonicRegression(out_of_bounds="clip")`` on
        the score, as ``CalibratedClassifierCV(method="isotonic")`` fits it.

    Attributes
    ----------
    intercept_, coef_ : the deployed index
    x_knots_, y_knots_ : ndarray, the isotonic table over the index
    portable_ : PortableCalibrator (kind "isotonic")
    """

    def __init__(
        self,
        *,
        index: Literal["platt", "seed"] = "platt",
        cv: int = 2,
        feature_map: FeatureMap | None = None,
        C: float | None = 1.0,
        max_iter: int = 100,
        tol: float = 1e-8,
        increasing: bool = True,
        strict: bool = False,
        out_of_bounds: Literal["clip"] = "clip",
        random_state: int = 0,
        plain_score: Direction | None = None,
    ) -> None:
        super().__init__(C=C, max_iter=max_iter, tol=tol, plain_score=plain_score)
        self.index = index
        self.cv = cv
        self.feature_map = feature_map
        self.increasing = increasing
        self.strict = strict
        self.out_of_bounds = out_of_bounds
        self.random_state = random_state

    def _score_index_map(self) -> FeatureMap:
        """The one-term map whose value is a plain score's index."""
        if self.feature_map is None:
            return score_map("identity")
        _check_score_map(self.feature_map, "IsotonicCalibrator")
        if len(self.feature_map.terms) != 1:
            raise ValueError("IsotonicCalibrator(plain_score=...): the index of a plain score is "
                             f"one term, got {self.feature_map.names}")
        return self.feature_map

    def _unit_score(self) -> bool:
        return self._score_index_map().terms[0].transform in _UNIT_TRANSFORMS

    def fit(self, X: Any, y: Any, sample_weight: Any = None) -> IsotonicCalibrator:
        """Cross-fit the index, fit the isotonic table; returns ``self``."""
        if self.out_of_bounds != "clip":
            raise ValueError(f"out_of_bounds={self.out_of_bounds!r}; only 'clip' is supported")
        check_choice("index", self.index, ("platt", "seed"))
        plain = self._plain()
        if plain is not None and not self.increasing:
            raise ValueError("IsotonicCalibrator: with plain_score set, give the direction "
                             "there (plain_score='decreasing') and leave increasing=True")
        Xv, y01, w, groups = self._check_fit_input(X, y, sample_weight)
        if plain is not None:
            fmap = self._score_index_map()
            z = fmap.transform(Xv)[:, 0]
            b, coef = 0.0, np.ones(1)
            n_iter = 0
        elif self.index == "seed":
            seed = seed_prior_calibrator()
            fmap = seed.feature_map
            F = fmap.transform(Xv)
            b, coef = seed.intercept, np.asarray(seed.coef, dtype=np.float64)
            z = F @ coef + b
            n_iter = 0
        else:
            if not isinstance(self.cv, (int, np.integer)) or self.cv < 2:
                raise ValueError(f"cv={self.cv!r} must be an integer >= 2")
            fmap = DEFAULT_PLATT_MAP if self.feature_map is None else self.feature_map
            F = fmap.transform(Xv)
            z, b, coef, n_iter = self._cross_fit_index(F, y01, w, groups, fmap.names)
        if plain is None:
            z = np.round(z, INDEX_DECIMALS)
        sign = 1.0 if self.increasing and plain != "decreasing" else -1.0
        # The portable table needs rising y over rising x: a decreasing map is a rising one
        # over the negated index.
        xk, yk = _isotonic_table(sign * z, y01, w, strict=bool(self.strict))
        if plain is not None and yk[0] == yk[-1] and float(np.ptp(z)) > 0.0:
            warnings.warn(
                f"IsotonicCalibrator(plain_score={plain!r}): the fitted map is constant "
                f"({float(yk[0]):.4g}) over {fmap.names[0]}: in this direction the score says "
                "nothing; the data say it works the other way round (check its direction)",
                UserWarning, stacklevel=2)
        self.x_knots_ = xk
        self.y_knots_ = yk
        self._keep(fmap, sign * float(b), sign * np.asarray(coef, dtype=np.float64),
                   n_iter=n_iter, source="isotonic-strict" if self.strict else "isotonic",
                   knots=(xk, yk))
        return self

    def _cross_fit_index(
        self, F: FloatArray, y01: FloatArray, w: FloatArray, groups: Any, names: list[str]
    ) -> tuple[FloatArray, float, FloatArray, int]:
        """Out-of-part index values, the mean part index (intercept, coef), iterations."""
        cv = int(self.cv)
        parts = _split_parts(F.shape[0], groups, cv, int(self.random_state))
        # Rows ordered by part once, so each part is a contiguous block (a view).
        blocks = [np.flatnonzero(parts == k) for k in range(cv)]
        order = np.concatenate(blocks)
        Fo, yo, wo = F[order], y01[order], w[order]
        bounds = np.r_[0, np.cumsum([b.size for b in blocks])]
        zo = np.empty(F.shape[0], dtype=np.float64)
        fits: list[tuple[float, FloatArray]] = []
        n_iter = 0
        for k in range(cv):
            lo, hi = int(bounds[k]), int(bounds[k + 1])
            if lo == hi:
                continue
            if cv == 2:
                other = slice(0, lo) if k == 1 else slice(hi, None)
                Ft, yt, wt = Fo[other], yo[other], wo[other]
            else:
                mask = np.ones(F.shape[0], dtype=bool)
                mask[lo:hi] = False
                Ft, yt, wt = Fo[mask], yo[mask], wo[mask]
            if not (np.any(yt[wt > 0] == 1.0) and np.any(yt[wt > 0] == 0.0)):
                raise InsufficientDataError(
                    f"isotonic cross-fitting part {k} of {cv}: the other parts hold a single "
                    f"class over {yt.size} rows; use more data or a smaller cv"
                )
            b, coef, it = self._logistic_fit(Ft, yt, wt, names)
            zo[lo:hi] = Fo[lo:hi] @ coef + b
            fits.append((b, coef))
            n_iter += it
        z = np.empty_like(zo)
        z[order] = zo
        b_mean = float(np.mean([b for b, _ in fits]))
        coef_mean = np.mean([c for _, c in fits], axis=0)
        return z, b_mean, coef_mean, n_iter



def _isotonic_table(
    z: FloatArray, y01: FloatArray, w: FloatArray, *, strict: bool
) -> tuple[FloatArray, FloatArray]:
    """Knots of the increasing isotonic regression of ``y01`` on ``z``.

    As :class:`sklearn.isotonic.IsotonicRegression` (rows of equal ``z`` pooled to their
    weighted mean, scikit-learn's pool-adjacent-violators ``isotonic_regression``, then only
    the end points of each constant block kept), computed on one sort of ``z`` that the
    ``strict`` variant reuses: one knot per block at its weighted mean ``z`` (centred
    isotonic regression).
    """
    live = w > 0
    z, y01, w = z[live], y01[live], w[live]
    order = np.argsort(z, kind="stable")
    z, y01, w = z[order], y01[order], w[order]
    starts = np.flatnonzero(np.r_[True, z[1:] != z[:-1]])
    uz = z[starts]
    gw = np.add.reduceat(w, starts)
    gy = np.add.reduceat(w * y01, starts) / gw
    fit = np.asarray(isotonic_regression(gy, sample_weight=gw, increasing=True),
                     dtype=np.float64)
    if not strict:
        keep = np.ones(fit.size, dtype=bool)
        keep[1:-1] = (fit[1:-1] != fit[:-2]) | (fit[1:-1] != fit[2:])
        return uz[keep], fit[keep]
    # A block is a run of equal fitted values: PAVA pools exactly such runs.
    block = np.flatnonzero(np.r_[True, fit[1:] != fit[:-1]])
    centre = np.add.reduceat(gw * uz, block) / np.add.reduceat(gw, block)
    return centre, fit[block]


# -- seed prior -----------------------------------------------------------------------------
class SeedPriorCalibrator(_LinearCalibrator):
    """The seed engine's fixed formula and clamp ``[0.001, 0.999]``, the comparison baseline.

    ``fit`` learns nothing: it checks the input and sets ``classes_``.
    """

    def __init__(self) -> None:
        pass

    def __sklearn_tags__(self) -> Tags:
        tags = super().__sklearn_tags__()
        assert tags.classifier_tags is not None
        tags.classifier_tags.poor_score = True
        return tags

    def fit(self, X: Any, y: Any, sample_weight: Any = None) -> SeedPriorCalibrator:
        """Check the input and set ``classes_``; returns ``self``."""
        self._check_fit_input(X, y, sample_weight)
        self.portable_ = seed_prior_calibrator()
        return self

    def to_portable(self, *, clamp: tuple[float, float] | None = None) -> PortableCalibrator:
        """The seed formula; its own clamp ``[0.001, 0.999]`` unless ``clamp`` is given."""
        return super().to_portable(clamp=clamp)
