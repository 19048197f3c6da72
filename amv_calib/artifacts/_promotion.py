"""Champion and challenger: a new version goes to production only when it earns it.

An export makes a new version the ``challenger``. :func:`decide_promotion` says whether it
may replace ``production``; both conditions must hold:

(a) it carries a certificate (see :mod:`amv_calib.tuning`) at the required alpha and delta
    or stricter, that certified a configuration;
(b) on the newest held-out claims (a time split its calibrator was not fitted on) its log
    loss is not worse than production's beyond noise: the 95% paired-bootstrap interval of
    the mean per-claim difference (challenger minus production) must reach down to 0 or
    below. With no production yet, this part holds;
(c) on the same claims it beats the constant prediction of its training violation rate
    (``profile.json``) beyond noise: the interval of its difference to that constant must
    lie below 0. A calibrator that learned nothing (labels shuffled, a broken join) is
    refused even when production, judged on the same new labels, looks no better.

A person may decide otherwise: ``amv-calib promote NAME vN --force``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np

from amv_calib.contract import CLAIM_FEATURES, LoadedArtifact
from amv_calib.settings import PromoteOptions

#: The defaults of :func:`decide_promotion` (its command line's and step's too).
_PROMOTE: Final = PromoteOptions()
#: Bootstrap resamples of the paired log-loss comparison.
DEFAULT_N_BOOT: Final = _PROMOTE.n_boot
_EPS: Final = 1e-15


@dataclass(frozen=True, kw_only=True)
class PromotionDecision:
    """Whether the challenger may become production, and why (or why not).

    Attributes
    ----------
    promote : bool
        Whether every condition holds.
    reasons : list of str
        One line per condition (see :func:`decide_promotion`).
    certificate_ok : bool
        Whether condition (a), the certificate, holds.
    holdout : dict
        The held-out comparisons' figures (log losses, their difference and interval).
    version : str or None
        The challenger's version judged (``vN``), so that the decision says whom it is
        about when it is logged or written on its own; None when not known.
    """

    promote: bool
    reasons: list[str]
    certificate_ok: bool
    holdout: dict[str, Any] = field(default_factory=dict)
    version: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (the pipeline's ``promotion.json``)."""
        return {"promote": self.promote, "reasons": list(self.reasons),
                "certificate_ok": self.certificate_ok, "holdout": dict(self.holdout)}


def _check_certificate(manifest: Mapping[str, Any], alpha: float, delta: float
                       ) -> tuple[bool, str]:
    cert = manifest.get("certificate")
    if not isinstance(cert, Mapping):
        return False, "it carries no certificate (run the certify step before export)"
    if cert.get("chosen") is None or cert.get("thresholds") is None:
        return False, "its certificate certified no configuration"
    a, d = cert.get("alpha"), cert.get("delta")
    if not (isinstance(a, (int, float)) and isinstance(d, (int, float))
            and a <= alpha and d <= delta):
        return False, (f"its certificate is at alpha={a}, delta={d}; required alpha <= {alpha}"
                       f", delta <= {delta}")
    upper = float(cert.get("observed_upper_bound") or 1.0)
    return True, (f"Gate Harmful <= {a} with probability >= {1 - d} on episodes "
                  f"like its {cert.get('n')} calibration ones (observed calibration harm "
                  f"bound {upper:.4%}, not certified)")


def _row_log_loss(y: np.ndarray, p: np.ndarray) -> np.ndarray:
    p = np.clip(p, _EPS, 1.0 - _EPS)
    out: np.ndarray = -(y * np.log(p) + (1.0 - y) * np.log1p(-p))
    return out


def paired_log_loss(claims: Any, challenger: LoadedArtifact, production: LoadedArtifact,
                    *, n_boot: int = DEFAULT_N_BOOT, seed: int = 0) -> dict[str, Any]:
    """Mean per-claim log loss of both on ``claims``, their difference and its 95% interval
    (percentile bootstrap over claims, the same resamples for both: paired).

    Rows that carry a ``label_weight`` (the two rows of a verifier soft label from
    ``amv-calib label``) count with that weight, as in the compare step; unweighted, such a
    pair would count as one violated and one valid claim.
    """
    X = claims[list(CLAIM_FEATURES)].to_numpy(dtype=np.float64)
    y = claims["violated"].to_numpy(dtype=np.float64)
    # each calibrator reads the claims' memory kinds if it has kinds (and ignores them if not)
    kinds = claims["memory_kind"].to_numpy(dtype=object) \
        if "memory_kind" in claims.columns else None
    ours = _row_log_loss(y, challenger.calibrator.predict(X, kinds))
    theirs = _row_log_loss(y, production.calibrator.predict(X, kinds))
    if "label_weight" in claims.columns and len(claims):
        w = claims["label_weight"].to_numpy(dtype=np.float64)
        w = np.where(np.isfinite(w), w, 1.0)
        if not np.all(w == 1.0):
            return _weighted_paired(ours, theirs, w, production.version, n_boot, seed)
    d = ours - theirs
    n = len(d)
    out: dict[str, Any] = {"n": n, "n_boot": n_boot, "production_version": production.version,
                           "challenger_log_loss": None, "production_log_loss": None,
                           "difference": None, "difference_ci95": [None, None]}
    if n == 0:
        return out
    rng = np.random.default_rng(seed)
    means = np.array([d[rng.integers(0, n, n)].mean() for _ in range(n_boot)])
    out.update(challenger_log_loss=float(ours.mean()), production_log_loss=float(theirs.mean()),
               difference=float(d.mean()),
               difference_ci95=[float(q) for q in np.quantile(means, [0.025, 0.975])])
    return out


def _weighted_paired(ours: np.ndarray, theirs: np.ndarray, w: np.ndarray, version: str,
                     n_boot: int, seed: int) -> dict[str, Any]:
    """:func:`paired_log_loss` with row weights: weighted means, rows resampled."""
    d = ours - theirs
    n = len(d)
    rng = np.random.default_rng(seed)
    means = []
    for _ in range(n_boot):
        idx = rng.integers(0, n, n)
        means.append(float(np.sum(d[idx] * w[idx]) / max(np.sum(w[idx]), 1e-300)))
    total = float(w.sum())
    return {"n": n, "n_boot": n_boot, "production_version": version, "weighted": True,
            "challenger_log_loss": float(np.sum(ours * w) / total),
            "production_log_loss": float(np.sum(theirs * w) / total),
            "difference": float(np.sum(d * w) / total),
            "difference_ci95": [float(q) for q in np.quantile(means, [0.025, 0.975])]}


def decide_promotion(challenger: LoadedArtifact, production: LoadedArtifact | None,
                     holdout_claims: Any, *, alpha: float = _PROMOTE.alpha,
                     delta: float = _PROMOTE.delta, n_boot: int = _PROMOTE.n_boot,
                     seed: int = 0) -> PromotionDecision:
    """See the module docstring: (a) the certificate, (b) the skill over a constant, (c) the
    held-out log loss against production. The defaults are
    :class:`~amv_calib.settings.PromoteOptions`'.

    ``reasons`` holds one line per condition, in that order, each ``"<condition>: yes|NO|
    not checked -- <the figures>"``, so that the rule a verdict follows is on its line.
    """
    cert_ok, cert_reason = _check_certificate(challenger.manifest, alpha, delta)
    reasons = [f"certified: {'yes' if cert_ok else 'NO'} -- {cert_reason}"]
    holdout: dict[str, Any] = {}
    skill_ok, skill_line = _skill(challenger, holdout_claims, holdout, n_boot, seed)
    reasons.append(skill_line)
    loss_ok, loss_line = _not_worse(challenger, production, holdout_claims, holdout, n_boot,
                                    seed)
    reasons.append(loss_line)
    return PromotionDecision(promote=cert_ok and loss_ok and skill_ok, reasons=reasons,
                             certificate_ok=cert_ok, holdout=holdout,
                             version=challenger.version)


_SKILL: Final = "beats the constant prediction beyond noise"
_LOSS: Final = "not worse than production beyond noise"


def _skill(challenger: LoadedArtifact, claims: Any, holdout: dict[str, Any], n_boot: int,
           seed: int) -> tuple[bool, str]:
    """(c): its log loss on the held-out claims beats the constant prediction of its training
    violation rate beyond noise (the interval of the difference lies below 0)."""
    base_rate = training_violation_rate(challenger)
    if base_rate is None:
        return True, f"{_SKILL}: not checked -- no profile.json (no training violation rate)"
    if not len(claims):
        return True, f"{_SKILL}: not checked -- no held-out claims"
    skill = paired_log_loss(claims, challenger, _constant(challenger, base_rate),
                            n_boot=n_boot, seed=seed)
    holdout["skill"] = skill
    high = skill["difference_ci95"][1]
    ok = high is not None and high < 0.0
    detail = (f"on {skill['n']} newest held-out claims its log loss "
              f"{skill['challenger_log_loss']:.4f} against {skill['production_log_loss']:.4f} "
              f"for the constant prediction of its {describe_training_rate(base_rate)} "
              f"(difference {skill['difference']:+.4f}, 95% interval up to {high:+.4f})")
    if ok:
        return True, f"{_SKILL}: yes -- {detail}"
    return False, (f"{_SKILL}: NO -- {detail}: it does not beat the constant prediction of its "
                   f"training violation rate; it learned nothing that holds on new claims")


def _not_worse(challenger: LoadedArtifact, production: LoadedArtifact | None, claims: Any,
               holdout: dict[str, Any], n_boot: int, seed: int) -> tuple[bool, str]:
    """(b): not worse than production beyond noise (the 95% interval of the paired log-loss
    difference reaches 0 or below): a difference the data cannot tell from noise passes."""
    if production is None:
        return True, f"{_LOSS}: yes -- no production version yet"
    if production.path == challenger.path:
        return True, f"{_LOSS}: yes -- {challenger.version} is production already"
    paired = paired_log_loss(claims, challenger, production, n_boot=n_boot, seed=seed)
    holdout.update(paired)
    low, high = paired["difference_ci95"]
    if low is None:
        return False, f"{_LOSS}: NO -- no held-out claims to compare it with production"
    interval = (f"(difference {paired['difference']:+.4f}, 95% paired-bootstrap interval "
                f"[{low:+.4f}, {high:+.4f}])")
    if low > 0.0:
        return False, (f"{_LOSS}: NO -- on {paired['n']} newest held-out claims its log loss "
                       f"{paired['challenger_log_loss']:.4f} is worse than production "
                       f"{production.version}'s {paired['production_log_loss']:.4f} beyond "
                       f"noise {interval}")
    detail = (f"on {paired['n']} newest held-out claims its log loss "
              f"{paired['challenger_log_loss']:.4f} against production {production.version}'s "
              f"{paired['production_log_loss']:.4f} {interval}")
    verdict = ("better" if high < 0.0 else "within noise of production: the interval reaches 0, "
               "so the difference may be chance")
    return True, f"{_LOSS}: yes -- {detail}: {verdict}"


def describe_training_rate(rate: float) -> str:
    """The training violation rate as every output words it (promotion reasons, the MLflow
    description): one figure, rounded, saying what it is the rate of."""
    return (f"training violation rate {rate:.4f} (the share of the training claims' weight "
            f"labelled violated)")


def training_violation_rate(art: LoadedArtifact) -> float | None:
    """The training violation rate recorded in the artifact's profile, if any (read from
    the bytes the loader hashed, not from the folder again): the weighted share of the
    training claims labelled violated (a soft label counts by its weight)."""
    from amv_calib.contract import loads_strict

    raw = art.contents.get("profile.json")
    if raw is None:
        return None
    profile = loads_strict(raw)
    rate = profile.get("violation_rate") if isinstance(profile, dict) else None
    return float(rate) if isinstance(rate, (int, float)) else None


def _constant(art: LoadedArtifact, rate: float) -> LoadedArtifact:
    """``art`` with a calibrator that predicts ``rate`` for every claim (a logistic model
    whose one term has coefficient 0: the intercept alone)."""
    import math
    from dataclasses import replace

    from amv_calib.contract import FeatureMap, PortableCalibrator, Term

    r = min(max(rate, 1e-12), 1.0 - 1e-12)
    constant = PortableCalibrator(
        kind="linear", feature_map=FeatureMap(terms=(Term(column="source_trust_score",
                                                          transform="identity"),)),
        intercept=math.log(r / (1.0 - r)), coef=(0.0,), source="constant")
    return replace(art, calibrator=constant, version=f"the constant {rate:.4f}")
