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
Every calibrator is off by something, so a test of exact calibration rejects every real one
once it has data enough; the monitor tests a tolerance, one-sided, and tells the two
directions apart. With ``D = y - p`` and ``m`` the calibration margin:

- **p too low** (the dangerous direction: the gate PROCEEDs on premises staler than it
  thinks): ``H0: E[D] <= m``, bets on ``D - m``;
- **p too high** (the costly direction: verifications and abstentions wasted): ``H0:
  E[-D] <= m``, bets on ``-D - m``;
- the paired log-loss excess ``X = loss - H(p) - loss_margin`` (``E[X] <= 0`` when
  calibrated; ``X >= -0.2785 - loss_margin``): any miscalibration, no direction.

Betting e-processes (Waudby-Smith and Ramdas, JRSS-B 2024): the average over a fixed grid
of ``lambda > 0`` of ``prod (1 + lambda V_i)`` (each a nonnegative supermartingale while
the conditional mean of ``V`` is at most 0), combined over start days as above. Each day's
``sum log(1 + lambda V_i)`` is kept in fixed point, every term rounded down
(``floor(term 2^32) - 1``: the ``-1`` covers the float rounding of ``log1p``), so the
e-value only gets smaller (still valid) and the sums are exact integers, the same in any
order.

Levels: only harm and p too low ALERT, and they split ``delta`` (``delta / 2`` each: the
chance of any false ALERT over unlimited monitoring is at most ``delta``); they WARN at
``1 / sqrt(delta_part)`` (evidence building). p too high and the log-loss excess never
ALERT: each WARNs at ``1 / (delta / 4)`` with the cost and a hint to retrain.
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
#: Bets of calibration in the large, each direction (p too low: on ``y - p - m``; p too
#: high: on ``p - y - m``), and of the log-loss excess; all below ``1 / (1 + m)`` for
#: ``m <= 0.2``, so that ``1 + lambda V > 0``.
LAMBDAS_D: Final = (0.05, 0.1, 0.2, 0.4)
LAMBDAS_X: Final = (0.05, 0.1, 0.2, 0.4)
#: Fixed-point resolution of the log-wealth sums.
FIXED_BITS: Final = 32
_SCALE: Final = float(2**FIXED_BITS)
#: ``min_p p ln(p / (1 - p))``: the smallest paired log-loss excess of one use.
X_MIN: Final = -0.27846454276107374
#: Share of the error budget of each detector: the two that ALERT split delta; the two
#: that only WARN have delta / 4 each.
DELTA_SHARES: Final = {"harm": 0.5, "in_the_large": 0.5, "too_high": 0.25, "log_loss": 0.25}
#: The detectors that can ALERT (the others WARN at their full level, never ALERT).
ALERTING: Final = ("harm", "in_the_large")
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


def fixed_p(p: FloatArray) -> NDArray[np.int64]:
    """``floor(p 2^32)`` per use: the mean p since go-live kept as an exact integer sum."""
    return np.floor(np.clip(np.asarray(p, dtype=np.float64), 0.0, 1.0) * _SCALE
                    ).astype(np.int64)


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
#: The per-day counts (integers) and the per-day fixed-point sums of each bet (lists).
_COUNTS: Final = ("actions", "harmful", "cautious", "uses", "violated", "p_sums")
_SUMS: Final = {"d_sums": LAMBDAS_D, "h_sums": LAMBDAS_D, "x_sums": LAMBDAS_X}


@dataclass(kw_only=True)
class DayBuckets:
    """Per decision day since go-live: labelled actions, harmful ones (PROCEEDed on a
    violated premise), cautious ones (not PROCEEDed, every premise valid), labelled uses,
    violated ones, ``sum floor(p 2^32)``, and the fixed-point log-wealth sums of each bet
    (p too low ``d_sums``, p too high ``h_sums``, log-loss excess ``x_sums``): integers,
    exact and order-free."""

    actions: dict[int, int] = field(default_factory=dict)
    harmful: dict[int, int] = field(default_factory=dict)
    cautious: dict[int, int] = field(default_factory=dict)
    uses: dict[int, int] = field(default_factory=dict)
    violated: dict[int, int] = field(default_factory=dict)
    p_sums: dict[int, int] = field(default_factory=dict)
    d_sums: dict[int, list[int]] = field(default_factory=dict)
    h_sums: dict[int, list[int]] = field(default_factory=dict)
    x_sums: dict[int, list[int]] = field(default_factory=dict)

    def add_actions(self, day: IntArray, harmful: NDArray[np.bool_],
                    cautious: NDArray[np.bool_] | None = None) -> None:
        """Count labelled actions by decision day (``cautious`` None: none)."""
        held = np.zeros(len(day), np.int64) if cautious is None else cautious
        for d, n, h, c in _grouped(day, np.ones(len(day), np.int64),
                                   np.asarray(harmful, dtype=np.int64),
                                   np.asarray(held, dtype=np.int64)):
            self.actions[d] = self.actions.get(d, 0) + n
            self.harmful[d] = self.harmful.get(d, 0) + h
            self.cautious[d] = self.cautious.get(d, 0) + c

    def add_uses(self, day: IntArray, y: FloatArray, p: FloatArray, loss_margin: float,
                 margin: float = 0.0) -> None:
        """Add labelled uses (their bets' fixed-point terms) by decision day;
        ``margin``: the calibration margin of both in-the-large directions."""
        if not len(day):
            return
        dv, xv = calibration_values(y, p, loss_margin)
        terms = {"d_sums": fixed_log_terms(dv - margin, LAMBDAS_D),
                 "h_sums": fixed_log_terms(-dv - margin, LAMBDAS_D),
                 "x_sums": fixed_log_terms(xv, LAMBDAS_X)}
        order = np.argsort(day, kind="stable")
        d_sorted = np.asarray(day)[order]
        cuts = np.flatnonzero(np.diff(d_sorted)) + 1
        starts = np.concatenate([[0], cuts])
        summed = {k: np.add.reduceat(t[order], starts, axis=0) for k, t in terms.items()}
        viol = np.add.reduceat((np.asarray(y) > 0.5).astype(np.int64)[order], starts)
        psum = np.add.reduceat(fixed_p(p)[order], starts)
        for k, d in enumerate(d_sorted[starts].tolist()):
            n = int((cuts[k] if k < len(cuts) else len(d_sorted)) - starts[k])
            self.uses[d] = self.uses.get(d, 0) + n
            self.violated[d] = self.violated.get(d, 0) + int(viol[k])
            self.p_sums[d] = self.p_sums.get(d, 0) + int(psum[k])
            for name, lams in _SUMS.items():
                mine: dict[int, list[int]] = getattr(self, name)
                mine[d] = [a + int(b) for a, b in
                           zip(mine.get(d, [0] * len(lams)), summed[name][k], strict=True)]

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
        for name in _COUNTS:
            values = getattr(self, name)
            # p_sums reach 2^32 per use: Python ints summed exactly, then as float
            out[name] = np.array([values.get(d, 0) for d in listed],
                                 dtype=np.float64 if name == "p_sums" else np.int64)
        for name, lams in _SUMS.items():
            values = getattr(self, name)
            # exact ints as float64 (|sum| < 2^53 per day)
            out[name] = np.array([values.get(d, [0] * len(lams)) for d in listed],
                                 dtype=np.float64).reshape(len(listed), len(lams))
        return out

    def to_dict(self) -> dict[str, Any]:
        """JSON form: day -> numbers, days as strings, sorted."""
        return {name: {str(d): v for d, v in sorted(getattr(self, name).items())}
                for name in (*_COUNTS, *_SUMS)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> DayBuckets:
        """Inverse of :meth:`to_dict`, checked: every day an integer string, every count a
        non-negative integer, every sum a list of integers of its bets' length, and no day
        with more harmful or cautious actions than actions, or more violated uses than
        uses (ValueError naming the field and day)."""
        out = cls()
        for name in (*_COUNTS, *_SUMS):
            raw = data.get(name)
            if not isinstance(raw, dict):
                raise ValueError(f"buckets.{name} is not an object")
            mine: dict[int, Any] = getattr(out, name)
            for key, v in raw.items():
                if not (isinstance(key, str) and key.isdigit() and len(key) < 10):
                    raise ValueError(f"buckets.{name}: day {key!r} is not a day number")
                if name in _SUMS:
                    ok = (isinstance(v, list) and len(v) == len(_SUMS[name])
                          and all(type(x) is int and abs(x) < 2**62 for x in v))
                else:
                    ok = type(v) is int and 0 <= v < 2**62
                if not ok:
                    raise ValueError(f"buckets.{name}[{key}] = {v!r} is not valid")
                mine[int(key)] = v
        for name, of, scale in (("harmful", "actions", 1), ("cautious", "actions", 1),
                                ("violated", "uses", 1), ("p_sums", "uses", 2**FIXED_BITS)):
            total = getattr(out, of)
            for d, v in getattr(out, name).items():
                if v > total.get(d, 0) * scale:
                    raise ValueError(f"buckets.{name}[{d}] = {v} exceeds what "
                                     f"buckets.{of}[{d}] allows")
        return out


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
    cautious: int
    uses: int
    violated: int
    mean_p: float | None
    alpha: float | None
    delta: float
    margin: float
    harm_log_m: float | None
    harm_cs: tuple[float, float]
    in_the_large_log_m: float
    too_high_log_m: float
    log_loss_log_m: float

    def threshold(self, part: str, warn: bool = False) -> float:
        """log of the e-value that ALERTs (or, ``warn``, shows evidence building) for
        detector ``part``; a detector that never ALERTs WARNs at the first."""
        d = self.delta * DELTA_SHARES[part]
        return math.log(1.0 / d) * (0.5 if warn else 1.0)

    @property
    def cs_level(self) -> float:
        """Per-side level of the harm confidence sequence (``w_0 delta_harm``)."""
        return _W0 * self.delta * DELTA_SHARES["harm"]

    @property
    def observed_rate(self) -> float | None:
        """Violated share of the labelled uses since go-live."""
        return self.violated / self.uses if self.uses else None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (e-values as values, not logs)."""
        def ev(x: float | None) -> float | None:
            if x is None:
                return None
            return float(math.exp(min(x, 700.0)))

        return {"day": self.day, "labelled_actions": self.actions, "harmful": self.harmful,
                "cautious_valid_actions": self.cautious,
                "labelled_uses": self.uses, "violated_uses": self.violated,
                "mean_p": self.mean_p, "observed_rate": self.observed_rate,
                "alpha": self.alpha, "delta": self.delta, "calibration_margin": self.margin,
                "harm_rate": self.harmful / self.actions if self.actions else None,
                "harm_cs": list(self.harm_cs), "harm_cs_confidence": 1.0 - 2 * self.cs_level,
                "harm_cs_side_confidence": 1.0 - self.cs_level,
                "harm_e": ev(self.harm_log_m), "in_the_large_e": ev(self.in_the_large_log_m),
                "too_high_e": ev(self.too_high_log_m), "log_loss_e": ev(self.log_loss_log_m),
                "alert_at": {k: 1.0 / (self.delta * DELTA_SHARES[k]) for k in ALERTING},
                "warn_at": {k: (1.0 / math.sqrt(self.delta * v) if k in ALERTING
                                else 1.0 / (self.delta * v))
                            for k, v in DELTA_SHARES.items()}}


def evidence(buckets: DayBuckets, day: int, alpha: float | None, delta: float, *,
             margin: float = 0.0, seen: Mapping[str, NDArray[Any]] | None = None
             ) -> Evidence:
    """The sequential statistics from the buckets of days 0 .. ``day``.

    ``margin``: the calibration margin the buckets' in-the-large bets were made with (it
    is only reported here). ``seen``: ``buckets.sparse(last)`` for some ``last >= day``,
    read once by a caller that asks for many days (each takes its prefix instead of
    reading the buckets again)."""
    if seen is None:
        b = buckets.sparse(day)
    else:
        k = int(np.searchsorted(seen["days"], day, side="right"))
        b = {name: arr[:k] for name, arr in seen.items()}
    n, s = int(b["actions"].sum()), int(b["harmful"].sum())
    uses = int(b["uses"].sum())
    level = _W0 * delta * DELTA_SHARES["harm"]
    return Evidence(
        day=day, actions=n, harmful=s, cautious=int(b["cautious"].sum()), uses=uses,
        violated=int(b["violated"].sum()),
        mean_p=float(b["p_sums"].sum()) / _SCALE / uses if uses else None,
        alpha=alpha, delta=delta, margin=margin,
        harm_log_m=None if alpha is None else harm_detector(b["actions"], b["harmful"], alpha,
                                                            b["days"]),
        harm_cs=harm_cs(n, s, level),
        in_the_large_log_m=betting_detector(b["d_sums"], b["days"]),
        too_high_log_m=betting_detector(b["h_sums"], b["days"]),
        log_loss_log_m=betting_detector(b["x_sums"], b["days"]))


def cs_label(ev: Evidence) -> str:
    """How the harm interval holds: both sides at once, and each side."""
    return (f"{100 * (1 - 2 * ev.cs_level):g} % confidence sequence "
            f"({100 * (1 - ev.cs_level):g} % each side)")


def _graded(ev: Evidence, name: str, log_m: float, text: str,
            into: tuple[list[str], list[str]], *, alert: str, warn: str) -> bool:
    """Grade an e-process of a dangerous direction: at its ALERT threshold ``text`` with
    ``alert`` goes to ``into[0]`` (the alerts), at its WARN one with ``warn`` to ``into[1]``
    (the warnings), each naming the threshold reached; whether it reached one."""
    for (level, warn_level), said in zip((("alert", False), ("warn", True)), (alert, warn),
                                         strict=True):
        threshold = ev.threshold(name, warn=warn_level)
        if log_m >= threshold:
            into[0 if level == "alert" else 1].append(
                f"{text} >= {math.exp(min(threshold, 700.0)):.3g}: {said}")
            return True
    return False


def judge(ev: Evidence) -> tuple[list[str], list[str], list[str]]:
    """``(alerts, warns, notes)`` of the sequential statistics (module docstring): only
    harm above alpha and p too low ALERT; p too high and the log-loss excess WARN."""
    alerts: list[str] = []
    warns: list[str] = []
    notes: list[str] = []
    lo, hi = ev.harm_cs
    if ev.alpha is None:
        notes.append("harm: the artifact has no certificate, no alpha to compare with")
    elif ev.harm_log_m is not None:
        rate = ev.harmful / ev.actions if ev.actions else 0.0
        text = (f"harm: Gate Harmful {rate:.4f} ({ev.harmful} of {ev.actions} labelled "
                f"actions since go-live), {cs_label(ev)} [{lo:.4f}, {hi:.4f}], "
                f"e-value {math.exp(min(ev.harm_log_m, 700.0)):.3g}")
        if not _graded(ev, "harm", ev.harm_log_m, text, (alerts, warns),
                       alert=f"harm above the certified alpha {ev.alpha:g}",
                       warn=f"evidence of harm above alpha {ev.alpha:g} building"):
            notes.append(f"{text}: cannot yet tell it below alpha {ev.alpha:g}"
                         if hi > ev.alpha else f"{text}: below alpha {ev.alpha:g}")
    if ev.mean_p is None or ev.observed_rate is None:
        return alerts, warns, notes
    gap = ev.observed_rate - ev.mean_p
    seen = (f"mean p {ev.mean_p:.4f} vs observed {ev.observed_rate:.4f} over {ev.uses} "
            f"labelled uses since go-live")

    def e(x: float) -> str:
        return f"{math.exp(min(x, 700.0)):.3g}"

    low = (f"calibration: p too low (the dangerous direction: the gate PROCEEDs on "
           f"premises staler than it thinks), {seen}, e-value {e(ev.in_the_large_log_m)} "
           f"of p too low by more than {ev.margin:g}")
    _graded(ev, "in_the_large", ev.in_the_large_log_m, low, (alerts, warns),
            alert="harm ahead; retrain on the newest claims", warn="evidence building")
    if ev.too_high_log_m >= ev.threshold("too_high"):
        warns.append(
            f"calibration: p too high (the costly direction: verifications and abstentions "
            f"wasted, no harm from it), {seen}, e-value {e(ev.too_high_log_m)} of p too high "
            f"by more than {ev.margin:g} >= {e(ev.threshold('too_high'))}; p overstates "
            f"staleness by {-gap:.4f}; {ev.cautious} of {ev.actions} labelled actions were "
            f"verified or abstained although every premise held; retrain on the newest "
            f"claims to win them back")
    if ev.log_loss_log_m >= ev.threshold("log_loss"):
        warns.append(
            f"calibration: log loss above what a calibrated p scores, {seen}, e-value "
            f"{e(ev.log_loss_log_m)} >= {e(ev.threshold('log_loss'))}: p misranks or "
            f"misstates staleness somewhere (no direction: harm is tested above); retrain on "
            f"the newest claims")
    return alerts, warns, notes


def insufficient(ev: Evidence) -> bool:
    """Whether the harm is not yet known to be below alpha (the CS upper bound above it)."""
    return ev.alpha is not None and ev.harm_cs[1] > ev.alpha
