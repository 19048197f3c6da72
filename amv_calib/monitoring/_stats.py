"""The statistics of one monitoring window, and the status they give.

Without labels: per claim feature the population stability index against the training bins
and the two-sample Kolmogorov-Smirnov statistic against the training sample (both from the
artifact's ``profile.json``), and the shift of the mean predicted probability.

With the labels that have arrived: log loss and Brier of the gate's own probabilities
beside the training (out-of-fold) level, and the paired log-loss excess over what a
calibrated ``p`` would score on the same rows, with intervals (normal, with the exact
bootstrap standard error of a mean); ECE and smooth ECE; calibration-in-the-large (mean p
minus the observed rate) with an interval; and Gate Harmful (PROCEED while a premise was
violated) with its Clopper-Pearson bounds against the certificate's alpha.

Status (:func:`decide`): the sequential statistics of :mod:`._sequential` as of the
window's end (ALERT and WARN need an e-value past its threshold), and the window's drift
(PSI or KS past its size: WARN). The intervals here are descriptive: they draw the
timeline, they do not set the status.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Final, Literal

import numpy as np
from numpy.typing import NDArray

from amv_calib.contract import CLAIM_FEATURES
from amv_calib.settings import MonitorConfig

Status = Literal["OK", "WARN", "ALERT", "INSUFFICIENT DATA"]
FloatArray = NDArray[np.float64]
_PSI_FLOOR: Final = 1e-4  # share given to an empty bin, so that PSI stays finite


def psi(edges: Sequence[float], ref_shares: Sequence[float], values: FloatArray) -> float:
    """Population stability index: ``sum (a - r) ln(a / r)`` over the reference bins, ``a``
    the window's share and ``r`` the training share (empty bins floored at 1e-4)."""
    counts = np.bincount(np.searchsorted(np.asarray(edges, dtype=float), values, side="right"),
                         minlength=len(edges) + 1)
    a = np.maximum(counts / max(1, len(values)), _PSI_FLOOR)
    r = np.maximum(np.asarray(ref_shares, dtype=float), _PSI_FLOOR)
    return float(np.sum((a - r) * np.log(a / r)))


def ks(sample: Sequence[float], values: FloatArray) -> tuple[float, float]:
    """Two-sample KS statistic of the window against the training sample, and its
    asymptotic p-value (Kolmogorov distribution at ``sqrt(n m / (n + m)) D``).

    ``D = max |F_ref(x) - F_win(x)|`` over the pooled values, each ECDF evaluated by
    ``searchsorted`` (ties counted as in ``scipy.stats.ks_2samp``, which the tests check).
    A window value is evaluated once per distinct value (its ECDF is the end of its run of
    ties), and ``values`` already sorted are not sorted again: windows hold millions of
    uses, the training sample a few thousand.
    """
    from scipy.special import kolmogorov

    a = np.sort(np.asarray(sample, dtype=float))
    b = np.asarray(values, dtype=float)
    if b.size > 1 and not bool(np.all(b[1:] >= b[:-1])):
        b = np.sort(b)
    n, m = len(a), len(b)
    if n == 0 or m == 0:
        return 0.0, 1.0
    # searchsorted(b, b[ends - 1], "right"): the end of each run of ties
    ends = np.flatnonzero(np.append(b[1:] != b[:-1], True)) + 1
    d_win = np.abs(np.searchsorted(a, b[ends - 1], side="right") / n - ends / m)
    d_ref = np.abs(np.searchsorted(a, a, side="right") / n
                   - np.searchsorted(b, a, side="right") / m)
    d = float(max(np.max(d_win), np.max(d_ref)))
    return d, float(kolmogorov(math.sqrt(n * m / (n + m)) * d))


def _z(confidence: float) -> float:
    """The two-sided normal quantile of ``confidence`` (``ndtri`` is what scipy.stats'
    ``norm.ppf`` computes)."""
    from scipy.special import ndtri

    return float(ndtri(0.5 + confidence / 2.0))


def _mean_interval(values: FloatArray, confidence: float) -> tuple[float, float]:
    """Normal interval of a mean with its bootstrap standard error.

    The ideal (infinitely resampled) nonparametric bootstrap variance of a sample mean is
    the plug-in variance over ``n``, so it is computed exactly instead of by resampling:
    no seed, no Monte Carlo error in the far tails the ALERT level looks at, and no
    ``n_boot x n`` resample matrix on windows of a million labels. A per-row difference
    (``values``) makes it the paired bootstrap.
    """
    n = len(values)
    m = float(values.mean())
    se = float(values.std()) / math.sqrt(n)
    h = _z(confidence) * se
    return m - h, m + h


@dataclass(kw_only=True)
class WindowStats:
    """Everything computed for one window, and its status with the reasons."""

    start: str
    end: str
    uses: int
    labelled: int
    actions_labelled: int
    drift: dict[str, dict[str, float]] = field(default_factory=dict)
    mean_p: float | None = None
    mean_p_shift: float | None = None
    calibration: dict[str, Any] = field(default_factory=dict)
    harm: dict[str, Any] = field(default_factory=dict)
    status: Status = "OK"
    reasons: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return asdict(self)


def drift_stats(window: Any, profile: Mapping[str, Any]) -> dict[str, dict[str, float]]:
    """PSI and KS of each claim feature of ``window`` (a frame of uses) against the profile."""
    out: dict[str, dict[str, float]] = {}
    for name in CLAIM_FEATURES:
        ref = profile["features"][name]
        values = window[name].to_numpy(dtype=float)
        values = values[np.isfinite(values)]
        if len(values) == 0:
            continue
        d, pv = ks(ref["sample"], values)
        out[name] = {"psi": psi(ref["psi_edges"], ref["psi_shares"], values), "ks": d,
                     "ks_pvalue": pv}
    return out


def calibration_stats(y: FloatArray, p: FloatArray, training: Mapping[str, Any],
                      config: MonitorConfig) -> dict[str, Any]:
    """Log loss, Brier, ECE, smooth ECE and calibration-in-the-large of logged ``p``.

    Log loss is compared twice. Against ``training["log_loss"]`` (the out-of-fold level of
    the profile): informative, but a window whose claims are easier or harder than the
    training ones moves it although the calibrator is right. And, paired row by row,
    against the binary entropy ``H(p_i)``, which is what the row scores on average *if*
    ``p_i`` is its true probability: the excess ``mean(loss_i - H(p_i))`` is zero for a
    calibrated ``p`` on any mix of claims, so its interval is the evidence of
    miscalibration. Brier likewise against ``p_i (1 - p_i)``.
    """
    from amv_calib.calibration import brier_score, ece, log_loss, smooth_ece

    pc = np.clip(p, 1e-15, 1 - 1e-15)
    row_ll = -(y * np.log(pc) + (1 - y) * np.log1p(-pc))
    row_h = -(pc * np.log(pc) + (1 - pc) * np.log1p(-pc))
    excess = row_ll - row_h
    brier_excess = (p - y) ** 2 - p * (1 - p)
    level = training.get("log_loss")
    out: dict[str, Any] = {
        "n": len(y),
        "log_loss": log_loss(y, p), "brier": brier_score(y, p),
        "ece": ece(y, p, strategy="quantile"), "smooth_ece": smooth_ece(y, p),
        "training_log_loss": safe_float(level),
        "training_brier": safe_float(training.get("brier")),
        "log_loss_warn_ci": _mean_interval(row_ll, config.warn_confidence),
        "log_loss_alert_ci": _mean_interval(row_ll, config.alert_confidence),
        "expected_log_loss": float(row_h.mean()),
        "log_loss_excess": float(excess.mean()),
        "log_loss_excess_warn_ci": _mean_interval(excess, config.warn_confidence),
        "log_loss_excess_alert_ci": _mean_interval(excess, config.alert_confidence),
        "brier_excess": float(brier_excess.mean()),
        "brier_excess_warn_ci": _mean_interval(brier_excess, config.warn_confidence),
        "mean_p": float(p.mean()), "observed_rate": float(y.mean()),
        "in_the_large": float(p.mean() - y.mean()),
        "in_the_large_warn_ci": _mean_interval(p - y, config.warn_confidence),
        "in_the_large_alert_ci": _mean_interval(p - y, config.alert_confidence),
    }
    return out


def harm_stats(harmful: NDArray[np.bool_], alpha: float | None,
               config: MonitorConfig) -> dict[str, Any]:
    """Gate Harmful of the labelled actions with its Clopper-Pearson bounds."""
    from amv_calib.calibration import clopper_pearson

    n, k = len(harmful), int(np.count_nonzero(harmful))
    warn = clopper_pearson(k, n, config.warn_confidence)
    alert = clopper_pearson(k, n, config.alert_confidence)
    return {"n": n, "harmful": k, "rate": k / n if n else None, "alpha": alpha,
            "warn_ci": list(warn), "alert_ci": list(alert)}


def drift_warnings(w: WindowStats, config: MonitorConfig) -> list[str]:
    """Descriptive shifts past their documented size (a WARN, never an ALERT): a feature's
    PSI above ``psi_alert``, or its KS statistic above ``ks_alert`` and significant at
    ``alert_confidence``; judged only on windows of ``min_uses`` uses."""
    if w.uses < config.min_uses:
        return []
    out: list[str] = []
    for name, s in w.drift.items():
        strong = s["ks"] > config.ks_alert and s["ks_pvalue"] < 1 - config.alert_confidence
        if s["psi"] > config.psi_alert or strong:
            out.append(f"drift: {name} PSI {s['psi']:.3f}, KS {s['ks']:.3f}")
    return out


def decide(w: WindowStats, evidence: Any, config: MonitorConfig) -> None:
    """Set ``w.status`` and ``w.reasons``: the sequential statistics as of the window's end
    (:func:`amv_calib.monitoring._sequential.judge`: ALERT and WARN need an e-value past
    its threshold) and the window's drift (WARN). With neither, INSUFFICIENT DATA while the
    harm's confidence sequence still reaches above alpha, else OK."""
    from amv_calib.monitoring._sequential import insufficient, judge

    alerts, warns, notes = judge(evidence)
    warns = warns + drift_warnings(w, config)
    if w.uses < config.min_uses:
        notes.append(f"drift: {w.uses} uses in the window (fewer than {config.min_uses}): "
                     f"not judged")
    w.status = ("ALERT" if alerts else "WARN" if warns
                else "INSUFFICIENT DATA" if insufficient(evidence) else "OK")
    w.reasons = alerts + warns + notes


def safe_float(x: Any) -> float | None:
    """``x`` as a float for JSON, None when missing or not finite."""
    try:
        f = float(x)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None
