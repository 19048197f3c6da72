"""The statistics of one monitoring window, and the status they give.

Without labels: per claim feature the population stability index against the training bins
and the two-sample Kolmogorov-Smirnov statistic against the training sample (both from the
artifact's ``profile.json``), and the shift of the mean predicted probability.

With the labels that have arrived: log loss and Brier of the gate's own probabilities
against the training (out-of-fold) level, with bootstrap intervals; ECE and smooth ECE;
calibration-in-the-large (mean p minus the observed rate) with an interval; and Gate
Harmful (PROCEED while a premise was violated) with its Clopper-Pearson bounds against the
certificate's alpha.

Status (thresholds in :class:`MonitorConfig`): ALERT needs evidence (the harm's lower
bound above alpha, calibration worse than training beyond its interval at the alert
confidence, or drift past the alert threshold); WARN is for a bound that merely crosses
(or drift past the warn threshold); a window too small to decide says "insufficient data".
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Final, Literal

import numpy as np
from numpy.typing import NDArray

from amv_calib.contract import CLAIM_FEATURES

Status = Literal["OK", "WARN", "ALERT", "INSUFFICIENT DATA"]
FloatArray = NDArray[np.float64]
_PSI_FLOOR: Final = 1e-4  # share given to an empty bin, so that PSI stays finite


@dataclass(frozen=True, kw_only=True)
class MonitorConfig:
    """Thresholds of the status; the defaults are documented in the README ("Monitoring").

    Attributes
    ----------
    psi_warn, psi_alert : float
        Population stability index of a feature (0.1 and 0.25, the usual rule of thumb).
    ks_alert : float
        Two-sample KS statistic of a feature that alerts when also significant at
        ``alert_confidence``.
    min_uses : int
        Uses a window needs for the drift statistics.
    min_labels : int
        Labelled uses a window needs for the calibration statistics, and labelled actions
        for the harm bound.
    warn_confidence, alert_confidence : float
        Two-sided confidence of the intervals that WARN and ALERT (the latter strict, so
        that many windows and statistics do not alarm on noise).
    n_boot : int
        Bootstrap resamples of the calibration intervals (seeded).
    loss_margin : float
        Log loss above the training level tolerated before calibration counts as worse.
    """

    psi_warn: float = 0.1
    psi_alert: float = 0.25
    ks_alert: float = 0.1
    min_uses: int = 200
    min_labels: int = 200
    warn_confidence: float = 0.95
    alert_confidence: float = 0.999
    n_boot: int = 400
    loss_margin: float = 0.0

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> MonitorConfig:
        """From a config section; unknown keys are refused, naming them."""
        from amv_calib.exceptions import ConfigError

        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(f"monitor config: unknown keys {unknown}; known: {sorted(known)}")
        return cls(**dict(data))

    def to_dict(self) -> dict[str, Any]:
        """Plain data."""
        return asdict(self)


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
    """
    from scipy.special import kolmogorov

    a = np.sort(np.asarray(sample, dtype=float))
    b = np.sort(np.asarray(values, dtype=float))
    n, m = len(a), len(b)
    if n == 0 or m == 0:
        return 0.0, 1.0
    pooled = np.concatenate([a, b])
    d = float(np.max(np.abs(np.searchsorted(a, pooled, side="right") / n
                            - np.searchsorted(b, pooled, side="right") / m)))
    return d, float(kolmogorov(math.sqrt(n * m / (n + m)) * d))


def clopper_pearson(k: int, n: int, confidence: float) -> tuple[float, float]:
    """Two-sided Clopper-Pearson interval of a binomial rate."""
    from scipy.stats import beta

    a = (1.0 - confidence) / 2.0
    lo = 0.0 if k == 0 else float(beta.ppf(a, k, n - k + 1))
    hi = 1.0 if k == n else float(beta.ppf(1.0 - a, k + 1, n - k))
    return lo, hi


def _bootstrap(values: FloatArray, confidence: float, n_boot: int, seed: int
               ) -> tuple[float, float]:
    """Percentile bootstrap interval of a mean (seeded)."""
    rng = np.random.default_rng(seed)
    n = len(values)
    means = values[rng.integers(0, n, size=(n_boot, n))].mean(axis=1)
    a = (1.0 - confidence) / 2.0
    lo, hi = np.quantile(means, [a, 1.0 - a])
    return float(lo), float(hi)


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
                      config: MonitorConfig, seed: int) -> dict[str, Any]:
    """Log loss, Brier, ECE, smooth ECE and calibration-in-the-large of logged ``p``."""
    from amv_calib.calibration import brier_score, ece, log_loss, smooth_ece

    pc = np.clip(p, 1e-15, 1 - 1e-15)
    row_ll = -(y * np.log(pc) + (1 - y) * np.log1p(-pc))
    n_boot = config.n_boot
    out: dict[str, Any] = {
        "log_loss": log_loss(y, p), "brier": brier_score(y, p),
        "ece": ece(y, p, strategy="quantile"), "smooth_ece": smooth_ece(y, p),
        "training_log_loss": training.get("log_loss"),
        "log_loss_warn_ci": _bootstrap(row_ll, config.warn_confidence, n_boot, seed),
        "log_loss_alert_ci": _bootstrap(row_ll, config.alert_confidence, n_boot, seed),
        "mean_p": float(p.mean()), "observed_rate": float(y.mean()),
        "in_the_large": float(p.mean() - y.mean()),
        "in_the_large_alert_ci": _bootstrap(p - y, config.alert_confidence, n_boot, seed + 1),
        "in_the_large_warn_ci": _bootstrap(p - y, config.warn_confidence, n_boot, seed + 1),
    }
    return out


def harm_stats(harmful: NDArray[np.bool_], alpha: float | None,
               config: MonitorConfig) -> dict[str, Any]:
    """Gate Harmful of the labelled actions with its Clopper-Pearson bounds."""
    n, k = len(harmful), int(np.count_nonzero(harmful))
    warn = clopper_pearson(k, n, config.warn_confidence)
    alert = clopper_pearson(k, n, config.alert_confidence)
    return {"n": n, "harmful": k, "rate": k / n if n else None, "alpha": alpha,
            "warn_ci": list(warn), "alert_ci": list(alert)}


def decide(w: WindowStats, config: MonitorConfig) -> None:
    """Set ``w.status`` and ``w.reasons`` from its statistics (module docstring)."""
    alerts: list[str] = []
    warns: list[str] = []
    if w.uses < config.min_uses:
        w.status, w.reasons = "INSUFFICIENT DATA", [
            f"{w.uses} uses (fewer than {config.min_uses}): too few to decide"]
        return
    for name, s in w.drift.items():
        strong = s["ks"] > config.ks_alert and s["ks_pvalue"] < 1 - config.alert_confidence
        if s["psi"] > config.psi_alert or strong:
            alerts.append(f"drift: {name} PSI {s['psi']:.3f}, KS {s['ks']:.3f}")
        elif s["psi"] > config.psi_warn:
            warns.append(f"drift: {name} PSI {s['psi']:.3f}")
    c = w.calibration
    level = c.get("training_log_loss")
    if c and isinstance(level, (int, float)):
        worse = level + config.loss_margin
        if c["log_loss_alert_ci"][0] > worse:
            alerts.append(f"calibration: log loss {c['log_loss']:.4f} worse than training "
                          f"{level:.4f} beyond its interval")
        elif c["log_loss_warn_ci"][0] > worse:
            warns.append(f"calibration: log loss {c['log_loss']:.4f} above training "
                         f"{level:.4f}")
    if c and (c["in_the_large_alert_ci"][0] > 0 or c["in_the_large_alert_ci"][1] < 0):
        alerts.append(f"calibration: mean p {c['mean_p']:.4f} against observed rate "
                      f"{c['observed_rate']:.4f} beyond its interval")
    h = w.harm
    alpha = h.get("alpha") if h else None
    if h and alpha is not None:
        if h["alert_ci"][0] > alpha:
            alerts.append(f"harm: Gate Harmful {h['rate']:.4f}, its lower bound "
                          f"{h['alert_ci'][0]:.4f} above the certified alpha {alpha:g}")
        elif h["warn_ci"][1] > alpha:
            warns.append(f"harm: Gate Harmful upper bound {h['warn_ci'][1]:.4f} above alpha "
                         f"{alpha:g}")
    notes = []
    if w.labelled < config.min_labels:
        notes.append(f"{w.labelled} labelled uses: calibration insufficient data")
    if w.actions_labelled < config.min_labels:
        notes.append(f"{w.actions_labelled} labelled actions: harm insufficient data")
    w.status = "ALERT" if alerts else "WARN" if warns else "OK"
    w.reasons = alerts + warns + notes


def safe_float(x: Any) -> float | None:
    """``x`` as a float for JSON, None when missing or not finite."""
    try:
        f = float(x)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None
