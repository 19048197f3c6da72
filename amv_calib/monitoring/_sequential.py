"""Anytime-valid statistics of production: harm and calibration accumulated day by day.

Everything here is computed from per-day buckets (:class:`DayBuckets`), so a daily run and
a rebuild from scratch give the same numbers bit for bit.

Harm (Gate Harmful of the labelled actions, a Bernoulli indicator each)
-----------------------------------------------------------------------
The e-value of ``H0: harm rate <= m`` on ``n`` actions with ``s`` harmful is a discrete
mixture of likelihood ratios, uniform over the alternatives ``q_i = m c_i`` (``c`` in
:data:`HARM_FACTORS`, capped at ``(1 + m) / 2`` below 1)::

    E(m) = mean_i (q_i / m)^s ((1 - q_i) / (1 - m))^(n - s)

For ``q > m`` and any ``p <= m``, ``E_p[ratio] = p q / m + (1 - p)(1 - q) / (1 - m) <= 1``:
each ratio, and so the mixture, is a nonnegative supermartingale (Ville: ``P(sup E >=
1/d) <= d``). The mirror test of ``H0: rate >= m`` uses ``q_i = m / c_i``.

Drift after a good period (Shekhar and Ramdas): with ``E^(j)`` the e-value of the actions
decided on day ``j`` or later (``E^(j) = 1`` until day ``j``), ``M = sum_j w_j E^(j)`` with
weights fixed in advance, ``w_0 = 1/2`` (since go-live) and ``w_j = (1/2) (j + 1)^-1.5 /
(zeta(1.5) - 1)`` for ``j >= 1`` (summing to 1), is a nonnegative supermartingale with
``M_0 = 1``, valid over unlimited monitoring.

The confidence sequence of the harm rate since go-live is ``{m : E_upper(m) < 1/d and
E_lower(m) < 1/d}`` (both monotone in ``m``, found by bisection) at ``d = w_0 delta_harm``
per side, so that its lower bound above alpha implies ``M >= 1/delta_harm`` (ALERT).

Calibration (per labelled use)
------------------------------
``D = y - p`` (calibration in the large, two-sided: ``E[D] = 0`` for a calibrated ``p``)
and ``X = loss - H(p) - margin`` (the paired log-loss excess, one-sided: ``E[X] <= 0``
for a calibrated ``p``; ``X >= -0.2785 - margin``). Betting e-processes: the average over
a fixed grid of ``lambda`` of ``prod (1 + lambda D_i)`` (each a test martingale under the
null), combined over start days as above. Each day's ``sum log(1 + lambda D_i)`` is kept
in fixed point, every term rounded down (``floor(term 2^32) - 1``: the ``-1`` covers the
float rounding of ``log1p``), so the e-value only gets smaller (still valid) and the sums
are exact integers, the same in any order.

Levels (a union bound): harm ``delta / 2``, calibration in the large ``delta / 4``,
log-loss excess ``delta / 4``. ALERT when a detector reaches ``1 / delta_part``, WARN at
``1 / sqrt(delta_part)``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np
from numpy.typing import NDArray

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]

#: Alternatives of the harm mixture, as multiples of the null rate.
HARM_FACTORS: Final = (1.25, 1.5, 2.0, 3.0, 5.0)
#: Bets of calibration in the large (two-sided) and of the log-loss excess (one-sided).
LAMBDAS_D: Final = (0.05, 0.1, 0.2, 0.4, -0.05, -0.1, -0.2, -0.4)
LAMBDAS_X: Final = (0.05, 0.1, 0.2, 0.4)
#: Fixed-point resolution of the log-wealth sums.
FIXED_BITS: Final = 32
_SCALE: Final = float(2**FIXED_BITS)
#: ``min_p p ln(p / (1 - p))``: the smallest paired log-loss excess of one use.
X_MIN: Final = -0.27846454276107374
#: Share of the error budget of each detector.
DELTA_SHARES: Final = {"harm": 0.5, "in_the_large": 0.25, "log_loss": 0.25}
_P_CLIP: Final = 1e-15
_W0: Final = 0.5


def _zeta_tail(first: int) -> float:
    """``sum_{m >= first} m^-1.5`` (Hurwitz zeta)."""
    from scipy.special import zeta

    return float(zeta(1.5, first))


_NORM: Final = _zeta_tail(2)  # zeta(1.5) - 1


def start_weights(n_days: int) -> FloatArray:
    """``w_0 .. w_{n_days - 1}`` of the start-day combination (module docstring)."""
    j = np.arange(n_days, dtype=np.float64)
    w = 0.5 * (j + 1.0) ** -1.5 / _NORM
    if n_days:
        w[0] = _W0
    return w


def tail_weight(n_days: int) -> float:
    """``sum_{j >= n_days} w_j``: the start days not begun yet (their e-value is 1)."""
    if n_days <= 0:
        return 1.0
    return 0.5 * _zeta_tail(n_days + 1) / _NORM


# -- harm ----------------------------------------------------------------------------------
def _alternatives_up(m: float) -> FloatArray:
    c = np.asarray(HARM_FACTORS, dtype=np.float64)
    return np.minimum(m * c, (1.0 + m) / 2.0)


def harm_log_evalue(n: Any, s: Any, m: float) -> FloatArray:
    """log e-value of ``H0: rate <= m`` for counts ``n`` (actions) and ``s`` (harmful),
    elementwise over arrays of counts."""
    n = np.asarray(n, dtype=np.float64)
    s = np.asarray(s, dtype=np.float64)
    if m <= 0.0:
        return np.where(s > 0, np.inf, 0.0)
    if m >= 1.0:
        return np.zeros(np.broadcast(n, s).shape)
    q = _alternatives_up(m)
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = (np.multiply.outer(s, np.log(q / m))
                 + np.multiply.outer(n - s, np.log1p(-q) - math.log1p(-m)))
    out: FloatArray = _logmeanexp(terms)
    return out


def harm_log_evalue_lower(n: Any, s: Any, m: float) -> FloatArray:
    """log e-value of ``H0: rate >= m`` (the mirror: alternatives ``m / c_i``)."""
    n = np.asarray(n, dtype=np.float64)
    s = np.asarray(s, dtype=np.float64)
    if m >= 1.0:
        return np.where(n - s > 0, np.inf, 0.0)
    if m <= 0.0:
        return np.zeros(np.broadcast(n, s).shape)
    q = m / np.asarray(HARM_FACTORS, dtype=np.float64)
    terms = (np.multiply.outer(s, np.log(q / m))
             + np.multiply.outer(n - s, np.log1p(-q) - math.log1p(-m)))
    out: FloatArray = _logmeanexp(terms)
    return out


def _logmeanexp(terms: FloatArray) -> FloatArray:
    """``log mean exp`` over the last axis, exact for infinite terms."""
    top = np.max(terms, axis=-1, keepdims=True)
    finite = np.where(np.isfinite(top), top, 0.0)
    with np.errstate(invalid="ignore", over="ignore"):
        out = np.log(np.mean(np.exp(terms - finite), axis=-1)) + finite[..., 0]
    out = np.where(np.isposinf(top[..., 0]), np.inf, out)
    return np.asarray(out, dtype=np.float64)


def _bisect(f: Any, want_low: bool, iters: int = 64) -> float:
    """The boundary in [0, 1] where ``f`` (monotone) turns; ``want_low``: f true above it."""
    lo, hi = 0.0, 1.0
    for _ in range(iters):
        mid = 0.5 * (lo + hi)
        if f(mid) == want_low:
            hi = mid
        else:
            lo = mid
    return lo if want_low else hi


def harm_cs(n: int, s: int, level: float) -> tuple[float, float]:
    """``(lower, upper)`` of the harm rate's confidence sequence at ``level`` per side.

    ``lower = inf {m : E_upper(m) < 1/level}`` and ``upper = sup {m : E_lower(m) <
    1/level}``, both by bisection (``E_upper`` falls and ``E_lower`` rises with ``m``)."""
    thr = math.log(1.0 / level)
    if n <= 0:
        return 0.0, 1.0
    lower = 0.0 if float(harm_log_evalue(n, s, 1e-300)) < thr else _bisect(
        lambda m: bool(float(harm_log_evalue(n, s, m)) < thr), want_low=True)
    upper = 1.0 if float(harm_log_evalue_lower(n, s, 1.0 - 1e-16)) < thr else _bisect(
        lambda m: bool(float(harm_log_evalue_lower(n, s, m)) < thr), want_low=False)
    # the bisection's last interval straddles the boundary: report its safe side
    return lower, upper


def _suffix(x: NDArray[Any]) -> NDArray[Any]:
    """``out[j] = sum_{d >= j} x[d]`` along the first axis."""
    return np.asarray(np.cumsum(x[::-1], axis=0)[::-1])


def _group_weights(days: IntArray) -> FloatArray:
    """Weight of the start days each data day stands for: ``(days[k-1], days[k]]``.

    A start day with no data before the next data day has the same suffix, hence the same
    e-value, as that data day; a one-day range takes its weight as is, a longer one the
    difference of two tails (so that a span of years costs its data days, not its days)."""
    d = np.asarray(days, dtype=np.int64)
    prev = np.concatenate([[-1], d[:-1]])
    w = 0.5 * (d + 1.0) ** -1.5 / _NORM
    w[d == 0] = _W0
    for k in np.flatnonzero(d - prev > 1).tolist():
        w[k] = tail_weight(int(prev[k]) + 1) - tail_weight(int(d[k]) + 1)
    return np.asarray(w, dtype=np.float64)


def _combine(days: IntArray, log_e: FloatArray) -> float:
    """``log (sum_j w_j E^(j))`` over every start day, from the e-values ``log_e`` of the
    suffixes starting at the data days ``days`` (ascending): the start days after the last
    data day have no data yet (``E = 1``)."""
    if not len(days):
        return 0.0
    parts = np.concatenate([np.log(_group_weights(days)) + log_e,
                            [math.log(tail_weight(int(days[-1]) + 1))]])
    top = float(np.max(parts))
    if math.isinf(top):
        return top
    return top + math.log(float(np.sum(np.exp(parts - top))))


def harm_detector(n_by_day: Any, s_by_day: Any, alpha: float,
                  days: IntArray | None = None) -> float:
    """log M of the harm drift detector at ``alpha`` (module docstring).

    ``days`` names the day (since go-live) of each entry, ascending; by default the entries
    are days 0, 1, 2, ..."""
    n = _suffix(np.asarray(n_by_day, dtype=np.float64))
    s = _suffix(np.asarray(s_by_day, dtype=np.float64))
    if days is None:
        days = np.arange(len(n), dtype=np.int64)
    return _combine(days, harm_log_evalue(n, s, alpha)) if len(n) else 0.0


# -- calibration ---------------------------------------------------------------------------
def fixed_log_terms(values: FloatArray, lambdas: Sequence[float]) -> NDArray[np.int64]:
    """``floor(log(1 + lambda v) 2^32) - 1`` per value (rows) and lambda (columns)."""
    v = np.asarray(values, dtype=np.float64)
    lam = np.asarray(lambdas, dtype=np.float64)
    t = np.log1p(np.multiply.outer(v, lam)) * _SCALE
    return (np.floor(t) - 1.0).astype(np.int64)


def calibration_values(y: FloatArray, p: FloatArray, margin: float
                       ) -> tuple[FloatArray, FloatArray]:
    """``D = y - p`` and ``X = loss - H(p) - margin`` per labelled use (p clipped to
    [1e-15, 1 - 1e-15], as the descriptive statistics)."""
    pc = np.clip(np.asarray(p, dtype=np.float64), _P_CLIP, 1.0 - _P_CLIP)
    yy = np.asarray(y, dtype=np.float64)
    loss = -(yy * np.log(pc) + (1.0 - yy) * np.log1p(-pc))
    h = -(pc * np.log(pc) + (1.0 - pc) * np.log1p(-pc))
    return yy - np.asarray(p, dtype=np.float64), loss - h - margin


def betting_detector(sums_by_day: Any, days: IntArray | None = None) -> float:
    """log M of a betting detector from its per-day fixed-point sums (days x lambdas);
    ``days`` as in :func:`harm_detector`."""
    if not len(sums_by_day):  # no day yet: no evidence (and nothing to reshape)
        return 0.0
    sums = np.asarray(sums_by_day, dtype=np.float64).reshape(len(sums_by_day), -1)
    log_w = _suffix(sums) / _SCALE  # log wealth per start day and lambda
    if days is None:
        days = np.arange(len(sums), dtype=np.int64)
    return _combine(days, _logmeanexp(log_w))


# -- the day buckets -------------------------------------------------------------------------
@dataclass(kw_only=True)
class DayBuckets:
    """Per decision day since go-live: labelled actions, harmful ones, labelled uses, and
    the fixed-point log-wealth sums of each bet (integers: exact, order-free)."""

    actions: dict[int, int] = field(default_factory=dict)
    harmful: dict[int, int] = field(default_factory=dict)
    uses: dict[int, int] = field(default_factory=dict)
    d_sums: dict[int, list[int]] = field(default_factory=dict)
    x_sums: dict[int, list[int]] = field(default_factory=dict)

    def add_actions(self, day: IntArray, harmful: NDArray[np.bool_]) -> None:
        """Count labelled actions by decision day."""
        for d, n, h in _grouped(day, np.ones(len(day), np.int64),
                                np.asarray(harmful, dtype=np.int64)):
            self.actions[d] = self.actions.get(d, 0) + n
            self.harmful[d] = self.harmful.get(d, 0) + h

    def add_uses(self, day: IntArray, y: FloatArray, p: FloatArray, margin: float) -> None:
        """Add labelled uses (their bets' fixed-point terms) by decision day."""
        if not len(day):
            return
        dv, xv = calibration_values(y, p, margin)
        td = fixed_log_terms(dv, LAMBDAS_D)
        tx = fixed_log_terms(xv, LAMBDAS_X)
        order = np.argsort(day, kind="stable")
        d_sorted = np.asarray(day)[order]
        cuts = np.flatnonzero(np.diff(d_sorted)) + 1
        starts = np.concatenate([[0], cuts])
        sd = np.add.reduceat(td[order], starts, axis=0)
        sx = np.add.reduceat(tx[order], starts, axis=0)
        for k, d in enumerate(d_sorted[starts].tolist()):
            n = int((cuts[k] if k < len(cuts) else len(d_sorted)) - starts[k])
            self.uses[d] = self.uses.get(d, 0) + n
            self.d_sums[d] = [a + int(b) for a, b in
                              zip(self.d_sums.get(d, [0] * len(LAMBDAS_D)), sd[k], strict=True)]
            self.x_sums[d] = [a + int(b) for a, b in
                              zip(self.x_sums.get(d, [0] * len(LAMBDAS_X)), sx[k], strict=True)]

    def last_day(self) -> int:
        """The newest day with anything counted (-1 when empty)."""
        return max([*self.actions, *self.uses], default=-1)

    def sparse(self, upto: int) -> dict[str, NDArray[Any]]:
        """The days 0 .. ``upto`` that hold anything (``days``, ascending) and their arrays:
        a quiet day changes no suffix, so the detectors need only these."""
        days = np.array(sorted(d for d in {*self.actions, *self.uses} if 0 <= d <= upto),
                        dtype=np.int64)
        listed = days.tolist()
        out: dict[str, NDArray[Any]] = {"days": days}
        for name in ("actions", "harmful", "uses"):
            values = getattr(self, name)
            out[name] = np.array([values.get(d, 0) for d in listed], dtype=np.int64)
        for name, width in (("d_sums", len(LAMBDAS_D)), ("x_sums", len(LAMBDAS_X))):
            values = getattr(self, name)
            # exact ints as float64 (|sum| < 2^53 per day)
            out[name] = np.array([values.get(d, [0] * width) for d in listed],
                                 dtype=np.float64).reshape(len(listed), width)
        return out

    def to_dict(self) -> dict[str, Any]:
        """JSON form: day -> numbers, days as strings, sorted."""
        return {name: {str(d): v for d, v in sorted(getattr(self, name).items())}
                for name in ("actions", "harmful", "uses", "d_sums", "x_sums")}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> DayBuckets:
        """Inverse of :meth:`to_dict`."""
        return cls(**{name: {int(d): v for d, v in data.get(name, {}).items()}
                      for name in ("actions", "harmful", "uses", "d_sums", "x_sums")})


def _grouped(day: IntArray, *values: IntArray) -> list[tuple[int, ...]]:
    if not len(day):
        return []
    uniq, inv = np.unique(np.asarray(day), return_inverse=True)
    sums = [np.bincount(inv, weights=v, minlength=len(uniq)).astype(np.int64) for v in values]
    return [(int(d), *(int(s[i]) for s in sums)) for i, d in enumerate(uniq.tolist())]


# -- the evidence as of a day ---------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class Evidence:
    """The sequential statistics as of the end of one day (``day`` since go-live)."""

    day: int
    actions: int
    harmful: int
    uses: int
    alpha: float | None
    delta: float
    harm_log_m: float | None
    harm_cs: tuple[float, float]
    in_the_large_log_m: float
    log_loss_log_m: float

    def threshold(self, part: str, warn: bool = False) -> float:
        """log of the e-value that ALERTs (or WARNs) for detector ``part``."""
        d = self.delta * DELTA_SHARES[part]
        return math.log(1.0 / d) * (0.5 if warn else 1.0)

    @property
    def cs_level(self) -> float:
        """Per-side level of the harm confidence sequence (``w_0 delta_harm``)."""
        return _W0 * self.delta * DELTA_SHARES["harm"]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (e-values as values, not logs)."""
        def ev(x: float | None) -> float | None:
            if x is None:
                return None
            return float(math.exp(min(x, 700.0)))

        return {"day": self.day, "labelled_actions": self.actions, "harmful": self.harmful,
                "labelled_uses": self.uses, "alpha": self.alpha, "delta": self.delta,
                "harm_rate": self.harmful / self.actions if self.actions else None,
                "harm_cs": list(self.harm_cs), "harm_cs_confidence": 1.0 - self.cs_level,
                "harm_e": ev(self.harm_log_m), "in_the_large_e": ev(self.in_the_large_log_m),
                "log_loss_e": ev(self.log_loss_log_m),
                "alert_at": {k: 1.0 / (self.delta * v) for k, v in DELTA_SHARES.items()},
                "warn_at": {k: 1.0 / math.sqrt(self.delta * v)
                            for k, v in DELTA_SHARES.items()}}


def evidence(buckets: DayBuckets, day: int, alpha: float | None, delta: float, *,
             seen: Mapping[str, NDArray[Any]] | None = None) -> Evidence:
    """The sequential statistics from the buckets of days 0 .. ``day``.

    ``seen``: ``buckets.sparse(last)`` for some ``last >= day``, read once by a caller that
    asks for many days (each takes its prefix instead of reading the buckets again)."""
    if seen is None:
        b = buckets.sparse(day)
    else:
        k = int(np.searchsorted(seen["days"], day, side="right"))
        b = {name: arr[:k] for name, arr in seen.items()}
    n, s = int(b["actions"].sum()), int(b["harmful"].sum())
    level = _W0 * delta * DELTA_SHARES["harm"]
    return Evidence(
        day=day, actions=n, harmful=s, uses=int(b["uses"].sum()), alpha=alpha, delta=delta,
        harm_log_m=None if alpha is None else harm_detector(b["actions"], b["harmful"], alpha,
                                                            b["days"]),
        harm_cs=harm_cs(n, s, level),
        in_the_large_log_m=betting_detector(b["d_sums"], b["days"]),
        log_loss_log_m=betting_detector(b["x_sums"], b["days"]))


def judge(ev: Evidence) -> tuple[list[str], list[str], list[str]]:
    """``(alerts, warns, notes)`` of the sequential statistics (module docstring)."""
    alerts: list[str] = []
    warns: list[str] = []
    notes: list[str] = []
    lo, hi = ev.harm_cs
    conf = f"{100 * (1 - ev.cs_level):g}%"
    if ev.alpha is None:
        notes.append("harm: the artifact has no certificate, no alpha to compare with")
    elif ev.harm_log_m is not None:
        rate = ev.harmful / ev.actions if ev.actions else 0.0
        text = (f"harm: Gate Harmful {rate:.4f} ({ev.harmful} of {ev.actions} labelled "
                f"actions since go-live), {conf} confidence sequence [{lo:.4f}, {hi:.4f}], "
                f"e-value {math.exp(min(ev.harm_log_m, 700.0)):.3g}")
        if ev.harm_log_m >= ev.threshold("harm"):
            alerts.append(f"{text} >= {math.exp(ev.threshold('harm')):.3g}: harm above the "
                          f"certified alpha {ev.alpha:g}")
        elif ev.harm_log_m >= ev.threshold("harm", warn=True):
            warns.append(f"{text} >= {math.exp(ev.threshold('harm', True)):.3g}: evidence "
                         f"of harm above alpha {ev.alpha:g} building")
        elif hi > ev.alpha:
            notes.append(f"{text}: cannot yet tell it below alpha {ev.alpha:g}")
        else:
            notes.append(f"{text}: below alpha {ev.alpha:g}")
    for part, log_m, what in (("in_the_large", ev.in_the_large_log_m,
                               "mean p of the labelled uses against their observed "
                               "rate"),
                              ("log_loss", ev.log_loss_log_m,
                               "log loss above what a calibrated p scores")):
        text = (f"calibration: {what}, e-value {math.exp(min(log_m, 700.0)):.3g} over "
                f"{ev.uses} labelled uses")
        if log_m >= ev.threshold(part):
            alerts.append(f"{text} >= {math.exp(ev.threshold(part)):.3g}")
        elif log_m >= ev.threshold(part, warn=True):
            warns.append(f"{text} >= {math.exp(ev.threshold(part, True)):.3g}")
    return alerts, warns, notes


def insufficient(ev: Evidence) -> bool:
    """Whether the harm is not yet known to be below alpha (the CS upper bound above it)."""
    return ev.alpha is not None and ev.harm_cs[1] > ev.alpha
