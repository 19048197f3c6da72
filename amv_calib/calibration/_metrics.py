"""Calibration and scoring metrics for binary outcomes, with seeded bootstrap intervals.

Every metric takes ``y`` (0/1 or bool: 1 = violated), ``p`` (predicted ``P(y = 1)`` in
[0, 1]) and an optional non-negative ``sample_weight``. Weighted and row-repeated inputs agree
exactly (a weight of 2 is the row twice), which is how :func:`bootstrap_ci` resamples: a
bootstrap replicate is the original rows weighted by their multiplicities.

Definitions (``W`` is the total weight, sums run over rows or over the rows of a bin ``b``):

- ``log_loss = -sum w [y ln p + (1 - y) ln(1 - p)] / W`` with ``p`` clipped to
  ``[eps, 1 - eps]`` (``eps = 1e-15``) before the logarithms;
- ``brier_score = sum w (p - y)^2 / W``;
- ``roc_auc``: weighted Mann-Whitney statistic, ``P(p_pos > p_neg) + P(p_pos = p_neg) / 2``;
- ``ece = sum_b |sum_b w (y - p)| / W`` (the bin-weighted mean of ``|observed - predicted|``),
  ``mce = max_b |observed_b - predicted_b|`` over non-empty bins. ``strategy="uniform"``: bins
  ``(k/B, (k+1)/B]`` with the first one closed, ``[0, 1/B]`` (as
  ``sklearn.calibration.calibration_curve`` and Guo et al. 2017: a ``p`` on an inner edge
  belongs to the lower bin; the edges are ``numpy.linspace(0, 1, B + 1)``);
  ``strategy="quantile"`` (equal mass): rows sorted by ``p``, a group of tied ``p`` values goes
  whole to bin ``floor(B * m / W)`` where ``m`` is the cumulative weight at the group's middle;
  ``strategy="quantile_tail"`` (reliability diagrams only): those bins, each wider than
  :data:`TAIL_WIDTH` cut into equal-width pieces of at least :data:`TAIL_MIN_ROWS` rows;
- ``smooth_ece`` (Blasiok and Nakkiran 2024): ``smECE_s = integral over [0, 1] of
  |sum w K_s(t, p) (y - p)| / W dt`` with the reflected Gaussian kernel ``K_s`` on [0, 1],
  at the bandwidth ``s*`` where ``smECE_s* = s*`` (found by regula falsi; ``smECE_s`` falls as
  ``s`` grows).

numpy only, except :func:`reliability_curve` (returns a pandas DataFrame).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from statistics import NormalDist
from typing import TYPE_CHECKING, Any, Final, Literal, Protocol, cast

import numpy as np
from numpy.typing import NDArray

from amv_calib.exceptions import check_choice

if TYPE_CHECKING:
    import pandas as pd


FloatArray = NDArray[np.float64]
Strategy = Literal["uniform", "quantile", "quantile_tail"]
#: ``quantile_tail``: an equal-mass bin wider than this (in p) is split into equal-width
#: pieces, so that the sparse high-p range where the gate abstains shows several points ...
TAIL_WIDTH: Final = 0.1
#: ... each holding at least this many rows (a shorter piece joins its neighbour below).
TAIL_MIN_ROWS: Final = 30

#: Clip of probabilities before logarithms.
LOG_EPS: Final = 1e-15
#: Smallest smooth-ECE bandwidth searched (the grid gets finer as the bandwidth shrinks).
SMOOTH_ECE_MIN_SIGMA: Final = 1e-3


class Metric(Protocol):
    """A metric: ``metric(y, p, sample_weight=None) -> float``."""

    def __call__(self, y: Any, p: Any, sample_weight: Any = None) -> float: ...


# -- input checks -----------------------------------------------------------------------------
def _check(
    y: Any, p: Any, sample_weight: Any, *, probability: bool = True
) -> tuple[FloatArray, FloatArray, FloatArray]:
    yy = np.asarray(y)
    pp = np.asarray(p, dtype=np.float64)
    if yy.ndim != 1 or pp.ndim != 1:
        raise ValueError(f"y and p must be 1-D, got shapes {yy.shape} and {pp.shape}")
    if yy.shape != pp.shape:
        raise ValueError(f"y has {yy.shape[0]} rows but p has {pp.shape[0]}")
    if yy.size == 0:
        raise ValueError("metrics need at least one row")
    yf = yy.astype(np.float64)
    bad = ~((yf == 0.0) | (yf == 1.0))
    if np.any(bad):
        i = int(np.argmax(bad))
        raise ValueError(f"y must be 0/1 or bool; row {i} has y={yy[i].item()!r}")
    bad = ~np.isfinite(pp) | (((pp < 0.0) | (pp > 1.0)) if probability else False)
    if np.any(bad):
        i = int(np.argmax(bad))
        where = "lie in [0, 1]" if probability else "be finite"
        raise ValueError(f"p must {where}; row {i} has p={float(pp[i])!r}")
    if sample_weight is None:
        w = np.ones_like(pp)
    else:
        w = np.asarray(sample_weight, dtype=np.float64)
        if w.shape != pp.shape:
            raise ValueError(f"sample_weight has shape {w.shape}, expected {pp.shape}")
        bad = ~np.isfinite(w) | (w < 0.0)
        if np.any(bad):
            i = int(np.argmax(bad))
            raise ValueError(
                f"sample_weight must be finite and >= 0; row {i} has {float(w[i])!r}"
            )
        if not np.any(w > 0):
            raise ValueError("sample_weight is zero on every row")
    return yf, pp, w


# -- the computations, on rows sorted by p ---------------------------------------------------
class _Prepared:
    """Validated rows sorted by ``p``, with what every metric reuses across weightings.

    The metric methods take a weight vector in this sorted order; :func:`bootstrap_metrics`
    calls them once per resample with the resample's multiplicities.
    """

    def __init__(self, yf: FloatArray, pp: FloatArray) -> None:
        self.order: NDArray[np.intp] | None
        if pp.size > 1 and bool(np.all(pp[1:] >= pp[:-1])):
            self.order = None
            self.y, self.p = yf, pp
        else:
            self.order = np.argsort(pp, kind="stable")
            self.y, self.p = yf[self.order], pp[self.order]
        self.starts = np.flatnonzero(np.r_[True, self.p[1:] != self.p[:-1]])
        self.sizes = np.diff(np.r_[self.starts, self.p.size])
        self.ties = self.starts.size < self.p.size
        pc = np.clip(self.p, LOG_EPS, 1.0 - LOG_EPS)
        self.log_loss_rows = -(self.y * np.log(pc) + (1.0 - self.y) * np.log1p(-pc))
        d = self.p - self.y
        self.squared_rows = d * d
        self._uniform: dict[int, NDArray[np.intp]] = {}
        self._last_bins: tuple[FloatArray, int, str, tuple[Any, Any, Any, Any, Any]] | None = None
        self._fine: tuple[NDArray[np.intp], FloatArray] | None = None

    def sort_weights(self, w: FloatArray) -> FloatArray:
        return w if self.order is None else w[self.order]

    def group_sum(self, x: FloatArray) -> FloatArray:
        """Sums of ``x`` over each group of tied predictions."""
        return np.add.reduceat(x, self.starts) if self.ties else x

    # proper scores and ranking
    def log_loss(self, w: FloatArray) -> float:
        return float((w * self.log_loss_rows).sum() / w.sum())

    def brier(self, w: FloatArray) -> float:
        return float((w * self.squared_rows).sum() / w.sum())

    def auc(self, w: FloatArray) -> float:
        pos = self.group_sum(w * self.y)
        neg = self.group_sum(w) - pos
        n_pos, n_neg = float(pos.sum()), float(neg.sum())
        if n_pos <= 0.0 or n_neg <= 0.0:
            raise ValueError("roc_auc is undefined when y has only one class (by weight)")
        neg_below = np.cumsum(neg) - neg
        return float((pos * (neg_below + 0.5 * neg)).sum() / (n_pos * n_neg))

    # binned calibration: rows are sorted by p and both bin rules are monotone in p, so
    # every bin is a contiguous run of rows, given by its start and end positions.
    def bounds(self, w: FloatArray, n_bins: int, strategy: str) -> NDArray[np.intp]:
        """Row positions ``[start_0, ..., start_{B-1}, n]`` of the ``n_bins`` bins."""
        if strategy == "uniform":
            got = self._uniform.get(n_bins)
            if got is None:
                # Bin k is (k/B, (k+1)/B], the first one closed, as sklearn's
                # calibration_curve (searchsorted of p in the inner edges, side "left") and
                # Guo et al. (2017): a p exactly on an inner edge belongs to the lower bin,
                # so bin k starts at the first row with p > k/B.
                edges = np.linspace(0.0, 1.0, n_bins + 1)
                inner = np.searchsorted(self.p, edges[1:-1], side="right")
                got = np.r_[0, inner, self.p.size].astype(np.intp)
                self._uniform[n_bins] = got
            return got
        if strategy == "quantile_tail":
            return self._split_wide(self.bounds(w, n_bins, "quantile"))
        # Equal mass: a group of tied p goes to bin floor(B * m / W), m the cumulative weight
        # at the group's middle; the first group of bin k is the first with that >= k.
        gw = self.group_sum(w)
        mid = np.cumsum(gw) - 0.5 * gw
        gbin = np.minimum(n_bins - 1, np.floor(n_bins * mid / gw.sum()))
        first = np.searchsorted(gbin, np.arange(1, n_bins), side="left")
        starts = np.r_[self.starts, self.p.size]
        return cast(NDArray[np.intp], np.r_[0, starts[first], self.p.size].astype(np.intp))

    def _split_wide(self, bd: NDArray[np.intp]) -> NDArray[np.intp]:
        """Bounds ``bd`` with every bin wider than :data:`TAIL_WIDTH` in p cut into
        equal-width pieces of at most that width (a tie group stays whole), each piece of
        fewer than :data:`TAIL_MIN_ROWS` rows joined to the one below it."""
        out = [int(bd[0])]
        for a, b in zip(bd[:-1], bd[1:], strict=True):
            if b <= a:
                continue
            lo, hi = float(self.p[a]), float(self.p[b - 1])
            k = int(np.ceil((hi - lo) / TAIL_WIDTH - 1e-12))
            cuts = np.searchsorted(self.p[a:b], lo + (hi - lo) * np.arange(1, k) / k,
                                   side="right") + a if k > 1 else np.zeros(0, np.intp)
            for end in [*(int(c) for c in cuts), int(b)]:
                if end == b or end - out[-1] >= TAIL_MIN_ROWS:
                    out.append(end)  # a cut that would leave a short piece is skipped
            if out[-2] > a and out[-1] - out[-2] < TAIL_MIN_ROWS:
                del out[-2]  # the bin's last piece was short: it joins the one below
        return np.asarray(out, dtype=np.intp)

    def bins(
        self, w: FloatArray, n_bins: int, strategy: str
    ) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray, NDArray[np.intp]]:
        """Per bin: weight, weighted sum of y, weighted sum of p, row count; and the bounds."""
        last = self._last_bins
        # ECE and MCE of one weighting share their bins.
        if last is not None and last[0] is w and last[1] == n_bins and last[2] == strategy:
            wb, yb, pb, nb, bd = last[3]
            return wb, yb, pb, nb, bd
        bd = self.bounds(w, n_bins, strategy)
        out = (
            _segment_sums(w, bd),
            _segment_sums(w * self.y, bd),
            _segment_sums(w * self.p, bd),
            np.diff(bd).astype(np.float64),
            bd,
        )
        self._last_bins = (w, n_bins, strategy, out)
        return out

    def ece(self, w: FloatArray, n_bins: int, strategy: str) -> float:
        wb, yb, pb, _, _ = self.bins(w, n_bins, strategy)
        return float(np.abs(yb - pb).sum() / wb.sum())

    def mce(self, w: FloatArray, n_bins: int, strategy: str) -> float:
        wb, yb, pb, _, _ = self.bins(w, n_bins, strategy)
        live = wb > 0
        return float(np.max(np.abs(yb[live] - pb[live]) / wb[live]))

    # smooth ECE
    def grid_residuals(self, r: FloatArray, g: int) -> FloatArray:
        """Residual masses ``r`` linearly binned onto ``g`` grid points of [0, 1].

        The data are binned once onto the finest grid of the ladder; a coarser grid's masses
        are the finer ones binned again (exact: the coarse nodes are fine nodes, and a
        coarse hat function is linear between adjacent fine nodes).
        """
        if self._fine is None:
            x = self.p * (_GRID_MAX - 1)
            i = np.minimum(np.floor(x).astype(np.intp), _GRID_MAX - 2)
            self._fine = (i, x - i)
        i, frac = self._fine
        masses = _wsum(i, r * (1.0 - frac), minlength=_GRID_MAX) + _wsum(
            i + 1, r * frac, minlength=_GRID_MAX
        )
        while masses.size > g:
            masses = _restrict(masses)
        return masses

    def grid_ladder(self, r: FloatArray) -> dict[int, FloatArray]:
        """:meth:`grid_residuals` on every grid of the ladder, binning the data once."""
        masses = self.grid_residuals(r, _GRID_MAX)
        out = {masses.size: masses}
        while masses.size > 1025:
            masses = _restrict(masses)
            out[masses.size] = masses
        return out

    def smooth_ece(self, w: FloatArray, sigma: float | None, tol: float) -> float:
        return _SmoothEce(self, w).value(sigma, tol)


def _segment_sums(x: FloatArray, bounds: NDArray[np.intp]) -> FloatArray:
    """Sums of ``x[bounds[k]:bounds[k + 1]]`` (0 for an empty run)."""
    out = np.zeros(bounds.size - 1, dtype=np.float64)
    live = bounds[:-1] < bounds[1:]
    if np.any(live):
        out[live] = np.add.reduceat(x, bounds[:-1][live])
    return out


def _wsum(idx: NDArray[np.intp], w: FloatArray, minlength: int) -> FloatArray:
    """Weighted ``bincount`` as float64."""
    return np.bincount(idx, weights=w, minlength=minlength).astype(np.float64, copy=False)


def _restrict(fine: FloatArray) -> FloatArray:
    """Masses on ``4 (G - 1) + 1`` nodes linearly re-binned onto ``G`` nodes."""
    g = (fine.size - 1) // 4 + 1
    pad = np.concatenate([np.zeros(3), fine, np.zeros(3)])
    out = np.zeros(g, dtype=np.float64)
    for d, share in ((-3, 0.25), (-2, 0.5), (-1, 0.75), (0, 1.0), (1, 0.75), (2, 0.5),
                     (3, 0.25)):
        out += share * pad[3 + d : 3 + d + 4 * (g - 1) + 1 : 4]
    return out


def _grid_size(sigma: float) -> int:
    """Grid points for bandwidth ``sigma``: spacing at most sigma / 20, from a fixed ladder
    ``4^k * 1024 + 1`` (the finest, for the smallest bandwidth, is :data:`_GRID_MAX`)."""
    g = 1024
    while g < 20.0 / sigma:
        g *= 4
    return g + 1


_GRID_MAX: Final = _grid_size(SMOOTH_ECE_MIN_SIGMA)


class _SmoothEce:
    """``smECE_s`` of one weighting of the rows, for any bandwidth ``s``.

    With ``K(t, u) = g(t - u) + g(t + u)`` (``g`` the Gaussian wrapped with period 2, which
    is ``u + s Z`` reflected at 0 and 1), smoothing the residual masses on a grid of
    spacing ``h = 1 / (G - 1)`` is a circular convolution of their even extension (period
    ``2 (G - 1)`` points) with ``g``. In Fourier space that is a product with ``g``'s
    coefficients ``exp(-(pi k s)^2 / 2)``, so each bandwidth costs one inverse FFT.
    """

    def __init__(self, prep: _Prepared, w: FloatArray) -> None:
        self._prep = prep
        self._r = w * (prep.y - prep.p) / w.sum()
        self._spectra: dict[int, NDArray[np.complex128]] = {}
        self._masses: dict[int, FloatArray] | None = None

    def _spectrum(self, g: int) -> NDArray[np.complex128]:
        got = self._spectra.get(g)
        if got is None:
            if self._masses is None:
                self._masses = self._prep.grid_ladder(self._r)
            r = self._masses[g]
            ext = np.concatenate([r, r[-2:0:-1]])
            # The end points are their own mirror images: both kernel terms hit them.
            ext[0] *= 2.0
            ext[g - 1] *= 2.0
            got = np.fft.rfft(ext)
            self._spectra[g] = got
        return got

    def at(self, sigma: float) -> float:
        """``smECE_sigma``: trapezoid integral of the smoothed residual's absolute value."""
        g = _grid_size(sigma)
        n = 2 * (g - 1)
        k = np.arange(n // 2 + 1, dtype=np.float64)
        # DFT of the sampled wrapped Gaussian (times h) is its Fourier coefficients; the
        # aliased terms are below exp(-1000) on grids this fine.
        gain = np.exp(-0.5 * (math.pi * sigma * k) ** 2)
        dens = np.fft.irfft(self._spectrum(g) * gain, n)[:g]
        a = np.abs(dens)
        return float(a.sum() - 0.5 * (a[0] + a[-1]))

    def sigma_star(self, tol: float) -> tuple[float, float]:
        """The bandwidth ``s*`` with ``smECE_s* = s*`` (relative ``tol``) and ``smECE_s*``.

        ``f(s) = smECE_s - s`` falls with ``s``; its root is bracketed by steps of 4 from
        0.25, then found by regula falsi with the Illinois modification.
        """
        lo = SMOOTH_ECE_MIN_SIGMA
        hi = 0.25
        v_hi = self.at(hi)
        if v_hi > hi:
            lo, v_lo = hi, v_hi
            hi, v_hi = 1.0, self.at(1.0)
            if v_hi >= 1.0:
                return 1.0, v_hi
        else:
            s = hi
            while True:
                s = max(s / 4.0, SMOOTH_ECE_MIN_SIGMA)
                v = self.at(s)
                if v > s:
                    lo, v_lo = s, v
                    break
                hi, v_hi = s, v
                if s <= SMOOTH_ECE_MIN_SIGMA:
                    return s, v
        f_lo, f_hi = v_lo - lo, v_hi - hi
        side = 0
        s, v = hi, v_hi
        for _ in range(100):
            s = hi - f_hi * (hi - lo) / (f_hi - f_lo)
            v = self.at(s)
            f = v - s
            if abs(f) <= tol * s:
                break
            if f > 0:
                lo, f_lo = s, f
                if side == 1:
                    f_hi *= 0.5
                side = 1
            else:
                hi, f_hi = s, f
                if side == -1:
                    f_lo *= 0.5
                side = -1
            if hi - lo <= tol * lo:
                break
        return s, v

    def value(self, sigma: float | None, tol: float) -> float:
        if sigma is None:
            return self.sigma_star(tol)[1]
        return self.at(sigma)


def _check_bins(n_bins: int, strategy: str) -> None:
    if isinstance(n_bins, bool) or not isinstance(n_bins, (int, np.integer)) or n_bins < 1:
        raise ValueError(f"n_bins={n_bins!r} must be a positive integer")
    check_choice("strategy", strategy, ("uniform", "quantile", "quantile_tail"))


def _prepare(
    y: Any, p: Any, sample_weight: Any, *, probability: bool = True
) -> tuple[_Prepared, FloatArray]:
    yf, pp, w = _check(y, p, sample_weight, probability=probability)
    prep = _Prepared(yf, pp)
    return prep, prep.sort_weights(w)


def _prepare_binned(
    y: Any, p: Any, sample_weight: Any, n_bins: int, strategy: str
) -> tuple[_Prepared, FloatArray]:
    """:func:`_prepare` for a binned metric, the bin settings checked first."""
    _check_bins(n_bins, strategy)
    return _prepare(y, p, sample_weight)


# -- public metrics ---------------------------------------------------------------------------
def log_loss(y: Any, p: Any, sample_weight: Any = None) -> float:
    """Mean negative log-likelihood (nats), ``p`` clipped to ``[1e-15, 1 - 1e-15]``."""
    yf, pp, w = _check(y, p, sample_weight)
    pc = np.clip(pp, LOG_EPS, 1.0 - LOG_EPS)
    loss = -(yf * np.log(pc) + (1.0 - yf) * np.log1p(-pc))
    return float((w * loss).sum() / w.sum())


def brier_score(y: Any, p: Any, sample_weight: Any = None) -> float:
    """Mean squared error of the probabilities."""
    yf, pp, w = _check(y, p, sample_weight)
    d = pp - yf
    return float((w * d * d).sum() / w.sum())


def roc_auc(y: Any, p: Any, sample_weight: Any = None) -> float:
    """Area under the ROC curve of any finite scores ``p``; ties count one half.

    Raises ValueError if ``y`` has one class (by weight).
    """
    prep, w = _prepare(y, p, sample_weight, probability=False)
    return prep.auc(w)


def ece(y: Any, p: Any, sample_weight: Any = None, *, n_bins: int = 15,
        strategy: Strategy = "uniform") -> float:
    """Expected calibration error over ``n_bins`` bins (equal-width or equal-mass)."""
    prep, w = _prepare_binned(y, p, sample_weight, n_bins, strategy)
    return prep.ece(w, n_bins, strategy)


def mce(y: Any, p: Any, sample_weight: Any = None, *, n_bins: int = 15,
        strategy: Strategy = "uniform") -> float:
    """Maximum calibration error: the largest ``|observed - predicted|`` of a non-empty bin."""
    prep, w = _prepare_binned(y, p, sample_weight, n_bins, strategy)
    return prep.mce(w, n_bins, strategy)


def reliability_curve(y: Any, p: Any, sample_weight: Any = None, *, n_bins: int = 15,
                      strategy: Strategy = "uniform", alpha: float = 0.05,
                      interval: Literal["wilson", "clopper-pearson"] = "wilson"
                      ) -> pd.DataFrame:
    """Reliability-diagram data, one row per non-empty bin.

    Columns: ``bin``, ``bin_lower`` and ``bin_upper`` (the bin's range: its edges for
    uniform bins, its smallest and largest prediction for quantile bins), ``count`` (rows),
    ``weight``, ``mean_pred``, ``observed_rate``, and the ``1 - alpha`` binomial interval
    ``ci_low``/``ci_high`` of the observed rate (Wilson score, or Clopper-Pearson from beta
    quantiles), computed from ``count`` trials at the weighted rate.
    """
    import pandas as pd

    if not (0.0 < alpha < 1.0):
        raise ValueError(f"alpha={alpha!r} must lie in (0, 1)")
    check_choice("interval", interval, ("wilson", "clopper-pearson"))
    prep, w = _prepare_binned(y, p, sample_weight, n_bins, strategy)
    wb, yb, pb, nb, bd = prep.bins(w, n_bins, strategy)
    live = np.flatnonzero(wb > 0)
    if strategy == "uniform":
        edges = np.linspace(0.0, 1.0, n_bins + 1)
        lower, upper = edges[live], edges[live + 1]
    else:
        lower, upper = prep.p[bd[live]], prep.p[bd[live + 1] - 1]
    rate = yb[live] / wb[live]
    n = nb[live]
    ci_lo, ci_hi = _binomial_interval(rate, n, alpha, interval)
    return pd.DataFrame(
        {
            "bin": live.astype(np.int64),
            "bin_lower": lower,
            "bin_upper": upper,
            "count": n.astype(np.int64),
            "weight": wb[live],
            "mean_pred": pb[live] / wb[live],
            "observed_rate": rate,
            "ci_low": ci_lo,
            "ci_high": ci_hi,
        }
    )


def _binomial_interval(
    rate: FloatArray, n: FloatArray, alpha: float, interval: str
) -> tuple[FloatArray, FloatArray]:
    if interval == "wilson":
        z = NormalDist().inv_cdf(1.0 - alpha / 2.0)
        denom = 1.0 + z * z / n
        centre = (rate + z * z / (2.0 * n)) / denom
        half = z * np.sqrt(rate * (1.0 - rate) / n + z * z / (4.0 * n * n)) / denom
        return np.clip(centre - half, 0.0, 1.0), np.clip(centre + half, 0.0, 1.0)
    return _clopper_pearson(rate * n, n, alpha / 2.0)


def _clopper_pearson(k: FloatArray, n: FloatArray, tail: float,
                     upper_level: float | None = None) -> tuple[FloatArray, FloatArray]:
    """Clopper-Pearson bounds of ``k`` events in ``n`` trials, ``tail`` outside each bound
    (the upper bound at ``upper_level`` instead when given: a one-sided bound); 0 and 1 at
    the ends where ``k`` is 0 or ``n``."""
    # the beta quantile (scipy.stats' beta.ppf computes it the same way, to the bit);
    # scipy.special spares the monitor importing scipy.stats. Only evaluated where its
    # shape parameters are positive.
    from scipy.special import betaincinv

    lo = np.zeros_like(k)
    hi = np.ones_like(k)
    pos, below = k > 0, k < n
    lo[pos] = betaincinv(k[pos], n[pos] - k[pos] + 1.0, tail)
    hi[below] = betaincinv(k[below] + 1.0, n[below] - k[below],
                           1.0 - tail if upper_level is None else upper_level)
    return lo, hi


def clopper_pearson(k: int, n: int, confidence: float) -> tuple[float, float]:
    """Two-sided Clopper-Pearson (exact) interval of ``k`` events in ``n`` trials."""
    lo, hi = _clopper_pearson(np.array([k], dtype=np.float64), np.array([n], dtype=np.float64),
                              (1.0 - confidence) / 2.0)
    return float(lo[0]), float(hi[0])


def clopper_pearson_upper(k: int, n: int, confidence: float) -> float:
    """One-sided Clopper-Pearson (exact) upper bound of a rate, ``k`` events in ``n``
    trials, at ``confidence``: 1 when ``k >= n`` (no trial: 1 too)."""
    _, hi = _clopper_pearson(np.array([k], dtype=np.float64), np.array([n], dtype=np.float64),
                             0.0, upper_level=confidence)
    return float(hi[0])


def smooth_ece(
    y: Any,
    p: Any,
    sample_weight: Any = None,
    *,
    sigma: float | None = None,
    tol: float = 1e-4,
) -> float:
    """Smooth ECE at bandwidth ``sigma``, by default at the fixed point ``smECE_s = s``.

    The fixed point is searched in ``[1e-3, 1]`` until ``|smECE_s - s| <= tol * s``.
    The data are linearly binned onto a uniform grid of spacing at most ``sigma / 20``,
    smoothed with the reflected Gaussian kernel, and integrated by the trapezoidal rule.
    """
    if sigma is not None and not (0.0 < sigma <= 1.0):
        raise ValueError(f"sigma={sigma!r} must lie in (0, 1]")
    prep, w = _prepare(y, p, sample_weight)
    return prep.smooth_ece(w, sigma, tol)


def smooth_ece_sigma(y: Any, p: Any, sample_weight: Any = None, *, tol: float = 1e-4) -> float:
    """The automatic smooth-ECE bandwidth ``s*`` (``smECE_s* = s*``, floored at 1e-3)."""
    prep, w = _prepare(y, p, sample_weight)
    return _SmoothEce(prep, w).sigma_star(tol)[0]


def _ece_mass(y: Any, p: Any, sample_weight: Any = None) -> float:
    return ece(y, p, sample_weight, strategy="quantile")


#: The metrics ``compare_calibrators`` reports, by name (ECE and MCE with 15 bins;
#: ``ece`` equal-width, ``ece_mass`` equal-mass, ``mce`` equal-width).
METRICS: Final[Mapping[str, Metric]] = {
    "log_loss": log_loss,
    "brier": brier_score,
    "auc": roc_auc,
    "ece": ece,
    "ece_mass": _ece_mass,
    "mce": mce,
    "smooth_ece": smooth_ece,
}

# The same metrics on prepared rows (the bootstrap fast path), keyed by public function.
_FAST: Final[dict[Any, Callable[[_Prepared, FloatArray], float]]] = {
    log_loss: _Prepared.log_loss,
    brier_score: _Prepared.brier,
    roc_auc: _Prepared.auc,
    ece: lambda prep, w: prep.ece(w, 15, "uniform"),
    _ece_mass: lambda prep, w: prep.ece(w, 15, "quantile"),
    mce: lambda prep, w: prep.mce(w, 15, "uniform"),
    smooth_ece: lambda prep, w: prep.smooth_ece(w, None, 1e-4),
}


# -- bootstrap --------------------------------------------------------------------------------
IntervalMethod = Literal["auto", "percentile", "centred"]

#: Metrics whose bootstrap replicates are biased upward against the value on all rows (binned
#: and smoothed calibration errors: noise adds to ``|observed - predicted|``, and a resample's
#: repeated rows add more); ``method="auto"`` gives them the centred interval.
_BIASED_UP: Final = frozenset({ece, _ece_mass, mce, smooth_ece})


@dataclass(frozen=True, kw_only=True)
class BootstrapInterval:
    """A metric's value on all rows and its bootstrap interval.

    Attributes
    ----------
    estimate : float
        The metric on all rows (the plug-in value; never changed by the bootstrap).
    low, high : float
        The ``1 - alpha`` interval; NaN without valid replicates.
    n_boot, n_valid : int
        Resamples drawn, and those on which the metric was defined.
    method : {"percentile", "centred"}
        ``"percentile"``: the ``alpha / 2`` and ``1 - alpha / 2`` quantiles of the replicates.
        ``"centred"``: the basic (reverse-percentile) interval of the replicates about their
        median ``m``, ``[estimate - (q_hi - m), estimate + (m - q_lo)]``, clipped to [0, 1];
        it always contains ``estimate``.
    bias : float
        ``m - estimate``, the bootstrap's median bias: ``estimate - bias`` is a debiased
        estimate, and ``[low - bias, high - bias]`` is then
        ``scipy.stats.bootstrap(method="basic")``'s interval (before the clip).
    """

    estimate: float
    low: float
    high: float
    n_boot: int
    n_valid: int
    method: str = "percentile"
    bias: float = math.nan


def bootstrap_counts(n: int, n_boot: int, seed: int) -> Iterator[NDArray[np.float64]]:
    """Row multiplicities of ``n_boot`` bootstrap resamples of ``n`` rows, from ``seed``.

    Replicate ``b`` is ``bincount`` of ``n`` uniform draws with replacement; the stream
    depends on ``(n, seed)`` only, so several calibrators can share the same resamples. The
    draws are those of ``scipy.stats.bootstrap(..., rng=numpy.random.default_rng(seed))``.
    """
    rng = np.random.default_rng(seed)
    for _ in range(n_boot):
        yield np.bincount(rng.integers(0, n, size=n), minlength=n).astype(np.float64)


def _interval(estimate: float, values: FloatArray, *, alpha: float, method: str, n_boot: int
              ) -> BootstrapInterval:
    """The interval of one metric from its replicate values (NaN where undefined)."""
    ok = values[np.isfinite(values)]
    if not ok.size:
        return BootstrapInterval(estimate=estimate, low=math.nan, high=math.nan,
                                 n_boot=n_boot, n_valid=0, method=method)
    q_lo, med, q_hi = (float(v) for v in np.quantile(ok, [alpha / 2.0, 0.5, 1.0 - alpha / 2.0]))
    bias = med - estimate
    if method == "percentile" or not math.isfinite(estimate):
        low, high = q_lo, q_hi
    else:
        # Basic interval about the median replicate, moved onto the estimate: contains it
        # because q_lo <= med <= q_hi, and rounding is monotone.
        low = min(max(estimate - (q_hi - med), 0.0), 1.0)
        high = min(max(estimate + (med - q_lo), 0.0), 1.0)
    return BootstrapInterval(estimate=estimate, low=low, high=high, n_boot=n_boot,
                             n_valid=int(ok.size), method=method, bias=bias)


def _method_of(metric: Callable[..., float], method: str) -> str:
    if method == "auto":
        return "centred" if metric in _BIASED_UP else "percentile"
    return method


def bootstrap_metrics(metrics: Mapping[str, Callable[..., float]], y: Any, p: Any,
                      sample_weight: Any = None, *, n_boot: int = 200, seed: int = 0,
                      alpha: float = 0.05, method: IntervalMethod = "auto"
                      ) -> dict[str, BootstrapInterval]:
    """Bootstrap intervals of several metrics over the same resamples.

    Parameters
    ----------
    metrics : mapping of str to callable
        ``{name: metric}``; a metric is called as ``metric(y, p, weights)``.
    y, p, sample_weight
        As for the metrics.
    n_boot : int, default 200
        Resamples (0: no interval, only the estimates).
    seed : int, default 0
        Seed of the resamples (:func:`bootstrap_counts`): identical inputs give identical
        intervals.
    alpha : float, default 0.05
        ``1 - alpha`` intervals.
    method : {"auto", "percentile", "centred"}, default "auto"
        ``"auto"``: ``"centred"`` for the calibration errors :func:`ece`, :func:`mce`,
        :func:`smooth_ece` and the equal-mass ECE of :data:`METRICS`, whose replicates sit
        above the value on all rows, so that a percentile interval can miss its own
        estimate; ``"percentile"`` for every other metric. See :class:`BootstrapInterval`.

    Returns
    -------
    dict of str to BootstrapInterval

    Notes
    -----
    A replicate whose metric is undefined (for example AUC of a one-class resample) is left
    out of that metric's quantiles; ``n_valid`` counts the rest. The bias-corrected and
    accelerated interval (BCa) is no remedy: it contains the estimate exactly when the
    percentile interval does (both need the estimate between the ``alpha / 2`` and
    ``1 - alpha / 2`` quantiles of the replicates), see ``docs/calibration.md``.
    """
    if not (0.0 < alpha < 1.0):
        raise ValueError(f"alpha={alpha!r} must lie in (0, 1)")
    if n_boot < 0:
        raise ValueError(f"n_boot={n_boot!r} must be >= 0")
    check_choice("method", method, ("auto", "percentile", "centred"))
    prep, w = _prepare(y, p, sample_weight)
    fast = {name: _FAST.get(m) for name, m in metrics.items()}
    estimates: dict[str, float] = {}
    for name, m in metrics.items():
        f = fast[name]
        try:
            estimates[name] = f(prep, w) if f is not None else float(m(prep.y, prep.p, w))
        except ValueError:
            estimates[name] = math.nan
    values = {name: np.full(n_boot, np.nan) for name in metrics}
    for b, counts in enumerate(bootstrap_counts(prep.p.size, n_boot, seed)):
        wb = prep.sort_weights(counts) * w
        if not np.any(wb > 0):
            continue
        for name, m in metrics.items():
            f = fast[name]
            try:
                values[name][b] = f(prep, wb) if f is not None else m(prep.y, prep.p, wb)
            except ValueError:
                # e.g. AUC of a resample holding one class: undefined, left out.
                continue
    return {
        name: _interval(estimates[name], v, alpha=alpha, n_boot=n_boot,
                        method=_method_of(metrics[name], method))
        for name, v in values.items()
    }


def bootstrap_ci(metric: Callable[..., float] | str, y: Any, p: Any,
                 sample_weight: Any = None, *, n_boot: int = 200, seed: int = 0,
                 alpha: float = 0.05, method: IntervalMethod = "auto") -> BootstrapInterval:
    """Bootstrap interval of one metric (a callable or a :data:`METRICS` name).

    The callable is called as ``metric(y, p, weights)``, ``weights`` being the row
    multiplicities of the resample times ``sample_weight``. ``method`` as in
    :func:`bootstrap_metrics`.
    """
    if isinstance(metric, str):
        if metric not in METRICS:
            raise ValueError(f"unknown metric {metric!r}; expected one of {sorted(METRICS)}")
        fn: Callable[..., float] = METRICS[metric]
    else:
        fn = metric
    res = bootstrap_metrics(
        {"m": fn}, y, p, sample_weight, n_boot=n_boot, seed=seed, alpha=alpha, method=method
    )
    return res["m"]
