"""A first month from the shipped prior: fits shrunk towards an artifact's calibrator.

A new deployment has a few thousand labels. ``compare --prior ARTIFACT`` adds two
candidates to the comparison:

- ``prior``: the artifact's calibrator as it is (what the gate evaluates), so that the
  champion is never worse than the prior on the folds unless the data say so;
- ``platt_prior``: a logistic fit with the prior's own structure (its feature map, and its
  kinds when it has them), the maximum a posteriori fit under a Gaussian prior centred on
  the artifact's numbers: it minimises
  ``sum_i w_i * logloss_i + prior_penalty / 2 * ||theta - theta_prior||^2`` over the
  intercept, the coefficients and the kind intercepts ``theta``. By default
  ``prior_penalty`` is chosen among :data:`PRIOR_PENALTIES` by empirical Bayes: the largest
  Laplace approximation of the marginal likelihood of the rows the calibrator is fitted on
  (:func:`log_evidence`). The comparison fits it on each fold's training rows, so its
  out-of-fold score includes the choice, and the refit chooses again on all rows. Few labels,
  or a prior the data agree with: close to the prior; many labels, or a prior far from the
  data: the data's fit.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
from numpy.typing import NDArray
from scipy.special import expit
from sklearn.utils.validation import check_is_fitted

from amv_calib.calibration._calibrators import _ClaimCalibrator
from amv_calib.calibration._kinds import kind_values, penalised_logistic
from amv_calib.contract import PortableCalibrator
from amv_calib.exceptions import ArtifactError, ConfigError

FloatArray = NDArray[np.float64]

#: The strengths of the pull towards the prior among which the marginal likelihood chooses
#: (the precision of the Gaussian prior, in units of the summed log loss; the prior itself is
#: the limit of an infinite one): half-decades from a pull the data outweigh at a few
#: thousand rows to one that holds the prior against a hundred thousand.
PRIOR_PENALTIES: Final = (0.1, 0.3, 1.0, 3.0, 10.0, 30.0, 100.0, 300.0, 1000.0, 3000.0,
                          10000.0, 30000.0, 100000.0)
#: Decimals (nats) to which log evidences are rounded before the largest is taken, so that
#: float noise that follows the CPU cannot change the choice; the earliest penalty wins a tie.
EVIDENCE_DECIMALS: Final = 6

__all__ = ["EVIDENCE_DECIMALS", "PRIOR_PENALTIES", "ArtifactPriorCalibrator", "Prior",
           "PriorPlattCalibrator", "load_prior", "log_evidence", "prior_calibrators"]


@dataclass(frozen=True, eq=False)
class Prior:
    """A prior calibrator and the label that names it in ``comparison.json``."""

    calibrator: PortableCalibrator
    label: str

    def __repr__(self) -> str:
        return f"Prior({self.label!r})"


def load_prior(ref: str | os.PathLike[str] | Prior | PortableCalibrator) -> Prior:
    """The calibrator of the artifact ``ref`` (a version folder or ``MODEL@ALIAS``), loaded
    and verified by :func:`~amv_calib.contract.load_artifact` (its gate clamp applied).

    Raises
    ------
    ConfigError
        The artifact is refused, naming it and why.
    """
    if isinstance(ref, Prior):
        return ref
    if isinstance(ref, PortableCalibrator):
        return Prior(ref, ref.source or "prior")
    from amv_calib.contract import load_artifact

    try:
        art = load_artifact(ref)
    except ArtifactError as exc:
        raise ConfigError(f"compare.prior: artifact {os.fspath(ref)!r} refused: "
                          f"[{exc.code}] {exc}") from exc
    return Prior(art.calibrator, f"{art.name} {art.version} (calibrator sha256 "
                                 f"{art.calibrator_sha256[:12]})")


def _kinds_of(X: Any, n: int) -> list[Any]:
    kinds = kind_values(X)
    return [None] * n if kinds is None else list(kinds)


class _PortableCalibrator(_ClaimCalibrator):
    """A calibrator whose fit leaves ``portable_``: it predicts through it, with the kinds."""

    def predict_proba(self, X: Any) -> FloatArray:
        """Probabilities of ``classes_``, shape (n, 2), through ``portable_``."""
        check_is_fitted(self)
        arr, _ = self._check_X(X, reset=False)
        p1 = self.portable_.predict(arr, memory_kinds=_kinds_of(X, arr.shape[0]))
        return np.column_stack([1.0 - p1, p1])


class ArtifactPriorCalibrator(_PortableCalibrator):
    """The prior's calibrator as it is; ``fit`` checks the input and learns nothing.

    Parameters
    ----------
    prior : Prior
    """

    def __init__(self, *, prior: Prior | None = None) -> None:
        self.prior = prior

    def fit(self, X: Any, y: Any, sample_weight: Any = None) -> ArtifactPriorCalibrator:
        """Check the input and set ``classes_``; returns ``self``."""
        if self.prior is None:
            raise ValueError("ArtifactPriorCalibrator needs prior=")
        self._check_fit_input(X, y, sample_weight)
        self.portable_ = self.prior.calibrator
        return self


def log_evidence(F: FloatArray, y: FloatArray, w: FloatArray, intercept: float,
                 coef: FloatArray, centre: FloatArray, penalty: float) -> float:
    """Laplace approximation of the log marginal likelihood of a logistic regression under
    the Gaussian prior ``N(centre, I / penalty)`` on all its ``p`` parameters, at the
    maximum a posteriori fit ``(intercept, coef)``.

    ``log Z = -Phi(theta) + p/2 * log(penalty) - 1/2 * log det(H + penalty * I)``, where
    ``Phi`` is the penalised objective (the weighted log loss summed, ``w`` read as
    replicate counts, plus ``penalty / 2 * ||theta - centre||^2``) and ``H`` the weighted
    Fisher information ``A' diag(w p (1 - p)) A`` of the design ``A = [1, F]``; the
    ``2 pi`` factors cancel. ``centre`` holds the intercept's centre first.
    """
    A = np.empty((F.shape[0], F.shape[1] + 1), dtype=np.float64)
    A[:, 0] = 1.0
    A[:, 1:] = F
    theta = np.r_[float(intercept), np.asarray(coef, dtype=np.float64)]
    z = A @ theta
    # log(1 + e^z) - y z is the log loss without a log of a probability: nothing to clip.
    nll = float(w @ (np.logaddexp(0.0, z) - y * z))
    d = theta - centre
    p = expit(z)
    H = (A * (w * p * (1.0 - p))[:, None]).T @ A
    H[np.diag_indices_from(H)] += penalty
    _, logdet = np.linalg.slogdet(H)
    return (-nll - 0.5 * penalty * float(d @ d) + 0.5 * int(theta.size) * math.log(penalty)
            - 0.5 * float(logdet))


class PriorPlattCalibrator(_PortableCalibrator):
    """A logistic fit with a linear prior's structure, shrunk towards its coefficients.

    Parameters
    ----------
    prior : Prior
        A linear calibrator (with or without kinds).
    prior_penalty : float or None, default None
        L2 strength on the difference from the prior's intercept, coefficients and kind
        intercepts (the precision of a Gaussian prior). None: the one of
        :data:`PRIOR_PENALTIES` with the largest :func:`log_evidence` on the rows fitted.
    max_iter : int, default 100
    tol : float, default 1e-8

    Attributes
    ----------
    portable_ : PortableCalibrator
        The prior's feature map and kinds with the fitted numbers; no clamp.
    prior_penalty_ : float
        The penalty used.
    log_evidence_ : dict of float to float
        With ``prior_penalty=None``: each candidate penalty's log evidence (rounded to
        :data:`EVIDENCE_DECIMALS`); empty otherwise.
    """

    def __init__(self, *, prior: Prior | None = None, prior_penalty: float | None = None,
                 max_iter: int = 100, tol: float = 1e-8) -> None:
        self.prior = prior
        self.prior_penalty = prior_penalty
        self.max_iter = max_iter
        self.tol = tol

    def fit(self, X: Any, y: Any, sample_weight: Any = None) -> PriorPlattCalibrator:
        """Fit the shrunk logistic regression; returns ``self``."""
        if self.prior is None or self.prior.calibrator.kind != "linear":
            raise ValueError("PriorPlattCalibrator needs a linear prior= (an isotonic prior "
                             "is compared as it is)")
        lam = self.prior_penalty
        if lam is not None and not (isinstance(lam, (int, float)) and not isinstance(lam, bool)
                                    and np.isfinite(lam) and lam > 0):
            raise ValueError(f"prior_penalty={lam!r} must be None or a finite number > 0")
        Xv, y01, w, _ = self._check_fit_input(X, y, sample_weight)
        pc = self.prior.calibrator
        codes = pc.kind_codes(_kinds_of(X, Xv.shape[0])) if pc.has_kinds else None
        F = pc.feature_map.transform(Xv)
        if codes is not None:
            for j, tc in enumerate(pc.term_kind_codes):
                if tc >= 0:
                    F[:, j] = np.where(codes == tc, F[:, j], 0.0)
            F = np.hstack([F, (codes[:, None] == np.arange(len(pc.kinds))[None, :])
                           .astype(np.float64)])
        centre = np.r_[np.asarray(pc.coef, dtype=np.float64),
                       np.asarray(pc.kind_intercept, dtype=np.float64)]
        y01 = np.asarray(y01, dtype=np.float64)
        w = np.asarray(w, dtype=np.float64)

        def fit_at(penalty: float) -> tuple[float, FloatArray, int]:
            return penalised_logistic(
                F, y01, w, np.full(F.shape[1], penalty), centre=centre,
                intercept_centre=float(pc.intercept), intercept_penalty=penalty,
                max_iter=self.max_iter, tol=self.tol)

        self.log_evidence_: dict[float, float] = {}
        if lam is None:
            full_centre = np.r_[float(pc.intercept), centre]
            fits = [fit_at(penalty) for penalty in PRIOR_PENALTIES]
            self.log_evidence_ = {
                penalty: round(log_evidence(F, y01, w, b, theta, full_centre, penalty),
                               EVIDENCE_DECIMALS)
                for penalty, (b, theta, _) in zip(PRIOR_PENALTIES, fits, strict=True)}
            i = int(np.argmax(list(self.log_evidence_.values())))  # the earliest of ties
            lam, (b, theta, it) = PRIOR_PENALTIES[i], fits[i]
        else:
            b, theta, it = fit_at(float(lam))
        n_terms = len(pc.coef)
        self.prior_penalty_ = float(lam)
        self.intercept_, self.coef_, self.n_iter_ = b, theta[:n_terms], it
        self.portable_ = PortableCalibrator(
            kind="linear", feature_map=pc.feature_map, intercept=b,
            coef=tuple(float(c) for c in theta[:n_terms]), kinds=pc.kinds,
            kind_intercept=tuple(float(c) for c in theta[n_terms:]), source="platt-prior")
        return self


def prior_calibrators(prior: Any) -> dict[str, Any]:
    """The comparison's candidates of a prior: ``prior`` itself and, for a linear prior,
    ``platt_prior``."""
    got = load_prior(prior)
    out: dict[str, Any] = {"prior": ArtifactPriorCalibrator(prior=got)}
    if got.calibrator.kind == "linear":
        out["platt_prior"] = PriorPlattCalibrator(prior=got)
    return out
