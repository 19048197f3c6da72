"""Kind-aware calibrators: staleness that depends on the kind of memory.

A claim may carry ``memory_kind`` (``preference``, ``deployment``, ...). The kind-aware
calibrators add, for every kind of a closed vocabulary fixed at fit time, an intercept and a
slope on each recency term, *shrunk towards the pooled fit*: the fit minimises

``sum_i w_i * logloss_i + 1/(2 C) * ||beta||^2 + kind_penalty / 2 * ||delta||^2``

where ``beta`` are the pooled coefficients (penalised as the pooled calibrators' are, so that
``kind_penalty -> inf`` gives back the pooled fit) and ``delta`` the kind deviations. A kind
with few labelled uses thus borrows from the rest; the comparison chooses ``kind_penalty``
among :data:`KIND_PENALTIES` by the out-of-fold scoring rule on its own folds.

The vocabulary is the kinds with at least ``min_kind_uses`` training rows, plus
:data:`OTHER_KIND`, which pools the rarer kinds and the claims without a kind; at prediction
an unknown kind is evaluated as ``"other"``. The linear index of a claim of kind ``k`` is

``z = intercept + kind_intercept[k] + sum_j coef_j * term_j + sum_j delta_kj * kterm_j``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any, Final, cast

import numpy as np
from numpy.typing import NDArray
from scipy.special import expit
from sklearn.utils.validation import check_is_fitted

from amv_calib.calibration._calibrators import (
    INDEX_DECIMALS,
    RICH_BETA_EXTRA_MAP,
    RICH_PLATT_MAP,
    BetaCalibrator,
    _isotonic_table,
    _LogisticCalibrator,
    _round_sig,
    _split_parts,
)
from amv_calib.contract import FeatureMap, PortableCalibrator, Term
from amv_calib.exceptions import InsufficientDataError

FloatArray = NDArray[np.float64]

#: The claim column that names a memory's kind.
KIND_COLUMN: Final = "memory_kind"
#: The kind of the vocabulary that pools rare, missing and unknown kinds.
OTHER_KIND: Final = "other"
#: Labelled uses a kind needs to get its own terms (the rest are pooled as ``"other"``).
DEFAULT_MIN_KIND_USES: Final = 200
#: The strengths of the shrinkage towards the pooled fit that the comparison tries (in units
#: of the summed log loss, as scikit-learn's 1 / C; the pooled terms get 1 / C = 1).
KIND_PENALTIES: Final = (0.3, 3.0, 30.0, 300.0, 3000.0)

__all__ = [
    "DEFAULT_MIN_KIND_USES",
    "KIND_COLUMN",
    "KIND_PENALTIES",
    "OTHER_KIND",
    "KindBetaCalibrator",
    "KindIsotonicCalibrator",
    "KindPlattCalibrator",
    "kind_codes",
    "kind_values",
    "kind_vocabulary",
    "penalised_logistic",
]


# -- the vocabulary ---------------------------------------------------------------------------
def kind_values(X: Any) -> NDArray[np.object_] | None:
    """The ``memory_kind`` of each row of a frame (None where missing), or None when ``X``
    has no such column (an array, or a frame without it)."""
    columns = getattr(X, "columns", None)
    if columns is None:
        return None
    name = KIND_COLUMN if KIND_COLUMN in columns else "memoryKind" if "memoryKind" in columns \
        else None
    if name is None:
        return None
    raw = X[name].to_numpy(dtype=object)
    out = np.empty(raw.size, dtype=object)
    for i, v in enumerate(raw):
        out[i] = v if isinstance(v, str) and v else None
    return out


def kind_vocabulary(kinds: NDArray[np.object_] | None, w: FloatArray,
                    min_uses: int) -> tuple[str, ...]:
    """Sorted kinds with at least ``min_uses`` rows of positive weight, and ``"other"``."""
    keep = {OTHER_KIND}
    if kinds is not None:
        live = kinds[w > 0]
        named = live[live != None]  # noqa: E711 (elementwise on an object array)
        uniq, counts = np.unique(named.astype(str), return_counts=True)
        keep |= {str(k) for k, c in zip(uniq, counts, strict=True) if c >= min_uses}
    return tuple(sorted(keep))


def kind_codes(kinds: NDArray[np.object_] | None, vocabulary: Sequence[str], n: int
               ) -> NDArray[np.intp]:
    """Index in ``vocabulary`` of each row's kind; missing and unknown kinds are ``"other"``."""
    other = list(vocabulary).index(OTHER_KIND)
    if kinds is None:
        return np.full(n, other, dtype=np.intp)
    lookup = {k: i for i, k in enumerate(vocabulary)}
    return np.fromiter((lookup.get(k, other) if k is not None else other for k in kinds),
                       dtype=np.intp, count=n)


# -- the penalised fit -------------------------------------------------------------------------
def _objective(A: FloatArray, beta: FloatArray, y: FloatArray, w: FloatArray,
               lam: FloatArray, centre: FloatArray) -> float:
    z = A @ beta
    d = beta - centre
    return float(w @ (np.logaddexp(0.0, z) - y * z) + 0.5 * float(lam @ (d * d)))


def penalised_logistic(
    F: FloatArray, y: FloatArray, w: FloatArray, penalty: FloatArray, *,
    centre: FloatArray | None = None, intercept_centre: float | None = None,
    intercept_penalty: float = 0.0, max_iter: int = 100, tol: float = 1e-8,
) -> tuple[float, FloatArray, int]:
    """Intercept, coefficients and Newton iterations of a logistic regression on ``F`` with
    the penalty ``sum_j penalty_j / 2 * (coef_j - centre_j)^2`` (and likewise the intercept,
    unpenalised by default).

    Damped Newton steps on the exact Hessian (the step halved until the objective falls);
    stops when no coefficient moves by more than ``tol`` times (1 + its size). With every
    ``penalty_j = 1 / C`` and no centre it minimises the objective of scikit-learn's
    ``LogisticRegression(C=C)``. The results are rounded to :data:`COEF_DIGITS` significant
    digits, so the same data give the same bytes on any CPU.
    """
    n, d = F.shape
    A = np.empty((n, d + 1), dtype=np.float64)
    A[:, 0] = 1.0
    A[:, 1:] = F
    lam = np.r_[float(intercept_penalty), np.asarray(penalty, dtype=np.float64)]
    m = np.zeros(d + 1)
    if centre is not None:
        m[1:] = centre
    if intercept_centre is not None:
        m[0] = intercept_centre
    rate = min(max(float(np.average(y, weights=w)), 1e-9), 1.0 - 1e-9)
    beta = m.copy()
    if intercept_centre is None:
        beta[0] = math.log(rate / (1.0 - rate))
    f = _objective(A, beta, y, w, lam, m)
    # A tiny ridge keeps the Hessian definite when an unpenalised column is constant.
    ridge = 1e-10 * max(float(w.sum()), 1.0)
    it = 0
    for it in range(1, max_iter + 1):  # noqa: B007 (the count is returned)
        p = expit(A @ beta)
        g = A.T @ (w * (p - y)) + lam * (beta - m)
        s = w * p * (1.0 - p)
        H = (A * s[:, None]).T @ A
        H[np.diag_indices_from(H)] += lam + ridge
        step = np.linalg.solve(H, g)
        t = 1.0
        while True:
            cand = beta - t * step
            fc = _objective(A, cand, y, w, lam, m)
            if fc <= f or t < 1e-10:
                break
            t *= 0.5
        moved = float(np.max(np.abs(t * step) / (1.0 + np.abs(beta))))
        beta, f = cand, min(f, fc)
        if moved < tol:
            break
    rounded = np.array([_round_sig(float(v)) for v in beta])
    return float(rounded[0]), rounded[1:], it


# -- the estimators ----------------------------------------------------------------------------
def _recency_terms(fmap: FeatureMap) -> tuple[Term, ...]:
    """The terms of ``fmap`` that read ``recency_hours`` alone (a kind's own recency curve)."""
    return tuple(t for t in fmap.terms if t.column == "recency_hours" and t.by is None)


class _KindLinear(_LogisticCalibrator):
    """Shared machinery: the vocabulary, the kind design and prediction."""

    kinds_: tuple[str, ...]
    kind_terms_: tuple[Term, ...]
    kind_intercept_: FloatArray
    kind_coef_: FloatArray  # shape (len(kinds_), len(kind_terms_))
    x_knots_: FloatArray | None = None
    y_knots_: FloatArray | None = None

    def candidate_params(self) -> list[dict[str, Any]]:
        """The settings the comparison chooses among by its folds."""
        return [{"kind_penalty": lam} for lam in KIND_PENALTIES]

    def _check_kind_params(self) -> None:
        m = getattr(self, "min_kind_uses", DEFAULT_MIN_KIND_USES)
        if isinstance(m, bool) or not isinstance(m, (int, np.integer)) or m < 1:
            raise ValueError(f"min_kind_uses={m!r} must be an integer >= 1")
        lam = getattr(self, "kind_penalty", 1.0)
        if not (isinstance(lam, (int, float)) and math.isfinite(lam) and lam > 0):
            raise ValueError(f"kind_penalty={lam!r} must be a finite number > 0")

    def _kind_design(self, Xv: FloatArray, codes: NDArray[np.intp]) -> FloatArray:
        """One column per (kind, kind term): the term's value on that kind's rows, else 0;
        then one column per kind: its indicator."""
        n, K = Xv.shape[0], len(self.kinds_)
        G = FeatureMap(self.kind_terms_).transform(Xv) if self.kind_terms_ else np.zeros((n, 0))
        r = G.shape[1]
        D = np.zeros((n, K * r + K))
        rows = np.arange(n)
        for j in range(r):
            D[rows, codes * r + j] = G[:, j]
        D[rows, K * r + codes] = 1.0
        return D

    def _claims(self, X: Any) -> tuple[FloatArray, list[Any]]:
        check_is_fitted(self)
        arr, _ = self._check_X(X, reset=False)
        kinds = kind_values(X)
        return arr, [None] * arr.shape[0] if kinds is None else list(kinds)

    def decision_function(self, X: Any) -> FloatArray:
        """The linear index of each row (for isotonic: before the table), through
        ``portable_``."""
        arr, kinds = self._claims(X)
        return self.portable_.decision_function(arr, memory_kinds=kinds)

    def predict_proba(self, X: Any) -> FloatArray:
        """Probabilities of ``classes_``, shape (n, 2); column 1 is ``P(violated)``,
        computed through ``portable_`` (what the gates evaluate)."""
        arr, kinds = self._claims(X)
        p1 = self.portable_.predict(arr, memory_kinds=kinds)
        return np.column_stack([1.0 - p1, p1])

    def design_rows(self, X: Any) -> FloatArray:
        """The rows of the full design (1, the pooled terms, each kind's terms, the kind
        indicators) in the order of ``(intercept_, coef_, kind_coef_, kind_intercept_)``."""
        arr, kinds = self._claims(X)
        codes = kind_codes(np.asarray(kinds, dtype=object), self.kinds_, arr.shape[0])
        return np.hstack([np.ones((arr.shape[0], 1)), self.feature_map_.transform(arr),
                          self._kind_design(arr, codes)])

    def _keep_portable(self, source: str) -> None:
        """The fitted model as a portable calibrator with kinds (``format_version`` 2): the
        pooled terms, then each kind's copy of the kind terms, in vocabulary order."""
        kinds = self.kinds_
        terms = [*self.feature_map_.terms,
                 *(dataclasses.replace(t, kind=k) for k in kinds for t in self.kind_terms_)]
        knots = self.x_knots_ is not None and self.y_knots_ is not None
        self.portable_ = PortableCalibrator(
            kind="isotonic" if knots else "linear",
            feature_map=FeatureMap(tuple(terms)),
            intercept=float(self.intercept_),
            coef=tuple(float(c) for c in np.r_[self.coef_, self.kind_coef_.reshape(-1)]),
            x_knots=() if not knots else tuple(float(v) for v in cast(FloatArray,
                                                                       self.x_knots_)),
            y_knots=() if not knots else tuple(float(v) for v in cast(FloatArray,
                                                                       self.y_knots_)),
            kinds=kinds,
            kind_intercept=tuple(float(v) for v in self.kind_intercept_),
            source=source,
        )

    def _penalties(self, n_pooled: int) -> FloatArray:
        pooled = 0.0 if self.C is None or math.isinf(self.C) else 1.0 / float(self.C)
        K, r = len(self.kinds_), len(self.kind_terms_)
        return np.concatenate([np.full(n_pooled, pooled),
                               np.full(K * r + K, float(self.kind_penalty))])

    def _split(self, coef: FloatArray, n_pooled: int) -> None:
        K, r = len(self.kinds_), len(self.kind_terms_)
        self.coef_ = coef[:n_pooled]
        self.kind_coef_ = coef[n_pooled:n_pooled + K * r].reshape(K, r)
        self.kind_intercept_ = coef[n_pooled + K * r:]

    def _prepare(self, X: Any, y: Any, sample_weight: Any
                 ) -> tuple[FloatArray, FloatArray, FloatArray, Any, NDArray[np.intp]]:
        self._check_kind_params()
        if self._plain() is not None:
            raise ValueError(f"{type(self).__name__} reads claim features and memory_kind; "
                             "plain_score is not supported")
        Xv, y01, w, groups = self._check_fit_input(X, y, sample_weight)
        kinds = kind_values(X)
        self.kinds_ = kind_vocabulary(kinds, w, int(self.min_kind_uses))
        codes = kind_codes(kinds, self.kinds_, Xv.shape[0])
        self.kind_uses_ = {k: int(np.sum(w[codes == i] > 0)) for i, k in enumerate(self.kinds_)}
        return Xv, y01, w, groups, codes

    def kind_params(self) -> dict[str, Any]:
        """The fitted kind terms as plain data: ``kinds``, ``kind_intercept`` and, per kind,
        its coefficient on each kind term (``kind_coef``, named by ``kind_terms``)."""
        check_is_fitted(self)
        return {"kinds": list(self.kinds_),
                "kind_intercept": [float(v) for v in self.kind_intercept_],
                "kind_terms": [t.name for t in self.kind_terms_],
                "kind_coef": {k: [float(v) for v in self.kind_coef_[i]]
                              for i, k in enumerate(self.kinds_)}}


class KindPlattCalibrator(_KindLinear):
    """Platt scaling with a kind-specific intercept and recency curve, shrunk towards the
    pooled fit (see the module docstring).

    Parameters
    ----------
    feature_map : FeatureMap, optional
        The pooled terms; default :data:`RICH_PLATT_MAP`.
    kind_terms : sequence of Term, optional
        The terms each kind gets its own coefficient on; default the map's recency terms.
    kind_penalty : float, default 30.0
        L2 strength on the kind deviations (larger: closer to the pooled fit).
    min_kind_uses : int, default 200
        Training rows a kind needs to enter the vocabulary; rarer kinds are ``"other"``.
    C, max_iter, tol
        As in :class:`~amv_calib.calibration.PlattCalibrator` (``C`` penalises the pooled
        terms).

    Attributes
    ----------
    kinds_ : tuple of str
        The closed vocabulary (sorted; contains ``"other"``).
    kind_uses_ : dict of str to int
        Training rows per kind of the vocabulary.
    intercept_, coef_ : the pooled part
    kind_intercept_ : ndarray of shape (n_kinds,)
    kind_coef_ : ndarray of shape (n_kinds, n_kind_terms)
    kind_terms_ : tuple of Term
    feature_map_ : FeatureMap
    """

    def __init__(self, *, feature_map: FeatureMap | None = None,
                 kind_terms: Sequence[Term] | None = None, kind_penalty: float = 30.0,
                 min_kind_uses: int = DEFAULT_MIN_KIND_USES, C: float | None = 1.0,
                 max_iter: int = 100, tol: float = 1e-8) -> None:
        super().__init__(C=C, max_iter=max_iter, tol=tol)
        self.feature_map = feature_map
        self.kind_terms = kind_terms
        self.kind_penalty = kind_penalty
        self.min_kind_uses = min_kind_uses

    def _maps(self) -> tuple[FeatureMap, tuple[Term, ...]]:
        fmap = RICH_PLATT_MAP if self.feature_map is None else self.feature_map
        terms = _recency_terms(fmap) if self.kind_terms is None else tuple(self.kind_terms)
        return fmap, terms

    def _fit_index(self, Xv: FloatArray, y01: FloatArray, w: FloatArray,
                   codes: NDArray[np.intp]) -> tuple[float, FloatArray, int]:
        F = np.hstack([self.feature_map_.transform(Xv), self._kind_design(Xv, codes)])
        return penalised_logistic(F, y01, w, self._penalties(len(self.feature_map_.terms)),
                                  max_iter=self.max_iter, tol=self.tol)

    def fit(self, X: Any, y: Any, sample_weight: Any = None) -> KindPlattCalibrator:
        """Fit the pooled and kind terms together; returns ``self``."""
        Xv, y01, w, _, codes = self._prepare(X, y, sample_weight)
        self.feature_map_, self.kind_terms_ = self._maps()
        b, coef, it = self._fit_index(Xv, y01, w, codes)
        self.intercept_, self.n_iter_ = b, it
        self._split(coef, len(self.feature_map_.terms))
        self._keep_portable("platt-kind")
        # The inverse penalised Hessian at the fit: the Laplace covariance of the
        # coefficients (the penalty read as a Gaussian prior), for the curves' intervals.
        A = np.hstack([np.ones((Xv.shape[0], 1)), self.feature_map_.transform(Xv),
                       self._kind_design(Xv, codes)])
        p = expit(A @ np.r_[b, coef])
        H = (A * (w * p * (1.0 - p))[:, None]).T @ A
        H[np.diag_indices_from(H)] += np.r_[0.0, self._penalties(len(self.feature_map_.terms))]
        self.cov_ = np.linalg.pinv(H)
        return self


class KindBetaCalibrator(_KindLinear):
    """Beta calibration (the ``abm`` pairs of confidence and trust, their signs kept by
    :class:`~amv_calib.calibration.BetaCalibrator`'s drop-and-refit rule) with a
    kind-specific intercept and recency curve on its extras, shrunk towards the pooled fit.

    Parameters
    ----------
    extra_map : FeatureMap, optional
        Unconstrained extras; default :data:`RICH_BETA_EXTRA_MAP`.
    kind_terms, kind_penalty, min_kind_uses, C, max_iter, tol
        As in :class:`KindPlattCalibrator` (``kind_terms`` default: the extras' recency
        terms).
    """

    def __init__(self, *, extra_map: FeatureMap | None = None,
                 kind_terms: Sequence[Term] | None = None, kind_penalty: float = 30.0,
                 min_kind_uses: int = DEFAULT_MIN_KIND_USES, C: float | None = 1.0,
                 max_iter: int = 100, tol: float = 1e-8) -> None:
        super().__init__(C=C, max_iter=max_iter, tol=tol)
        self.extra_map = extra_map
        self.kind_terms = kind_terms
        self.kind_penalty = kind_penalty
        self.min_kind_uses = min_kind_uses

    def fit(self, X: Any, y: Any, sample_weight: Any = None) -> KindBetaCalibrator:
        """Fit with the drop-and-refit rule on the constrained pairs; returns ``self``."""
        Xv, y01, w, _, codes = self._prepare(X, y, sample_weight)
        extras = RICH_BETA_EXTRA_MAP if self.extra_map is None else self.extra_map
        fmap, constrained = BetaCalibrator(extra_map=extras).design()
        self.kind_terms_ = (_recency_terms(extras) if self.kind_terms is None
                            else tuple(self.kind_terms))
        F = fmap.transform(Xv)
        D = self._kind_design(Xv, codes)
        lam = self._penalties(F.shape[1])
        active = np.ones(F.shape[1], dtype=bool)
        n_iter = 0
        while True:
            idx = np.flatnonzero(active)
            cols = np.r_[idx, F.shape[1] + np.arange(D.shape[1])]
            b, sub, it = penalised_logistic(np.hstack([F[:, idx], D]), y01, w, lam[cols],
                                            max_iter=self.max_iter, tol=self.tol)
            n_iter += it
            coef = np.zeros(F.shape[1] + D.shape[1])
            coef[cols] = sub
            drop = [first if active[first] and sign * coef[first] < 0 else other
                    for first, other, sign in constrained
                    if (active[first] and sign * coef[first] < 0)
                    or (active[other] and sign * coef[other] < 0)]
            if not drop:
                break
            active[drop] = False
        names = fmap.names
        self.dropped_terms_ = [names[i] for i in np.flatnonzero(~active)]
        self.feature_map_, self.intercept_, self.n_iter_ = fmap, b, n_iter
        self._split(coef, F.shape[1])
        self._keep_portable("beta-kind")
        return self


class KindIsotonicCalibrator(_KindLinear):
    """Centred isotonic regression over a cross-fitted kind-aware Platt index.

    The index is :class:`KindPlattCalibrator`'s, cross-fitted as
    :class:`~amv_calib.calibration.IsotonicCalibrator` cross-fits its Platt index (``cv``
    seeded parts, whole claims per part; the deployed index is the mean of the part
    indexes), rounded to :data:`INDEX_DECIMALS` decimals; then one isotonic table serves
    every kind.

    Parameters
    ----------
    feature_map, kind_terms, kind_penalty, min_kind_uses, C, max_iter, tol
        Of the index, as in :class:`KindPlattCalibrator`.
    cv : int, default 2
    strict : bool, default True
        Centred isotonic regression (strictly increasing between the block centres).
    random_state : int, default 0
    """

    def __init__(self, *, feature_map: FeatureMap | None = None,
                 kind_terms: Sequence[Term] | None = None, kind_penalty: float = 30.0,
                 min_kind_uses: int = DEFAULT_MIN_KIND_USES, C: float | None = 1.0,
                 max_iter: int = 100, tol: float = 1e-8, cv: int = 2, strict: bool = True,
                 random_state: int = 0) -> None:
        super().__init__(C=C, max_iter=max_iter, tol=tol)
        self.feature_map = feature_map
        self.kind_terms = kind_terms
        self.kind_penalty = kind_penalty
        self.min_kind_uses = min_kind_uses
        self.cv = cv
        self.strict = strict
        self.random_state = random_state

    def fit(self, X: Any, y: Any, sample_weight: Any = None) -> KindIsotonicCalibrator:
        """Cross-fit the index, fit the table; returns ``self``."""
        if isinstance(self.cv, bool) or not isinstance(self.cv, (int, np.integer)) \
                or self.cv < 2:
            raise ValueError(f"cv={self.cv!r} must be an integer >= 2")
        Xv, y01, w, groups, codes = self._prepare(X, y, sample_weight)
        platt = KindPlattCalibrator(feature_map=self.feature_map, kind_terms=self.kind_terms,
                                    kind_penalty=self.kind_penalty, C=self.C,
                                    max_iter=self.max_iter, tol=self.tol)
        platt.kinds_ = self.kinds_
        self.feature_map_, self.kind_terms_ = platt._maps()
        platt.feature_map_, platt.kind_terms_ = self.feature_map_, self.kind_terms_
        F = np.hstack([self.feature_map_.transform(Xv), platt._kind_design(Xv, codes)])
        lam = platt._penalties(len(self.feature_map_.terms))
        parts = _split_parts(Xv.shape[0], groups, int(self.cv), int(self.random_state))
        z = np.empty(Xv.shape[0])
        fits: list[FloatArray] = []
        n_iter = 0
        for k in range(int(self.cv)):
            test = parts == k
            train = ~test & (w > 0)
            yt = y01[train]
            if not (np.any(yt == 1.0) and np.any(yt == 0.0)):
                raise InsufficientDataError(
                    f"isotonic cross-fitting part {k} of {self.cv}: the other parts hold a "
                    f"single class over {yt.size} rows; use more data or a smaller cv")
            b, coef, it = penalised_logistic(F[train], yt, w[train], lam,
                                             max_iter=self.max_iter, tol=self.tol)
            z[test] = F[test] @ coef + b
            fits.append(np.r_[b, coef])
            n_iter += it
        mean = np.mean(fits, axis=0)
        self.intercept_ = float(mean[0])
        self._split(mean[1:], len(self.feature_map_.terms))
        self.n_iter_ = n_iter
        xk, yk = _isotonic_table(np.round(z, INDEX_DECIMALS), y01, w, strict=bool(self.strict))
        self.x_knots_, self.y_knots_ = xk, yk
        self._keep_portable("isotonic-kind")
        return self

