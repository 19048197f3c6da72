"""Batch gate: the decisions of :meth:`Gate.evaluate` for many actions at once, with numpy.

Arrays are padded: ``n`` actions, at most ``m`` premises and ``V`` verifiers each. The myopic
rule (``mode="amv"`` and ``mode="seed"``) is vectorised over actions; the lookahead planner is
vectorised too (a dynamic programme over the verifiers' outcome states, see
:func:`_lookahead`). Every float operation follows the scalar engine's order, so the decisions
agree with :meth:`Gate.evaluate` bit for bit, ties included.

This module imports numpy and the standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final, Protocol

import numpy as np
from numpy.typing import ArrayLike, NDArray

from amv_calib.gate._engine import VOI_TOLERANCE

__all__ = [
    "ABSTAIN",
    "PROCEED",
    "REGIME_NAMES",
    "VERIFY",
    "BatchDecision",
    "evaluate_batch",
    "posterior_batch",
    "stopping_value_batch",
    "update_batch",
]

#: Regime codes of the batch arrays (BRIEF: 0=PROCEED, 1=VERIFY, 2=ABSTAIN).
PROCEED: Final = 0
VERIFY: Final = 1
ABSTAIN: Final = 2
REGIME_NAMES: Final = ("PROCEED", "VERIFY", "ABSTAIN")

FloatArray = NDArray[np.float64]
BoolArray = NDArray[np.bool_]
IntArray = NDArray[np.intp]


class _GateLike(Protocol):
    """What the batch gate reads from a :class:`~amv_calib.gate.Gate`."""

    @property
    def lambda_cost_scale(self) -> float: ...

    @property
    def delta_loss_threshold(self) -> float: ...

    @property
    def epsilon_harm_bound(self) -> float: ...

    @property
    def planner(self) -> str: ...

    @property
    def mode(self) -> str: ...

    @property
    def max_verifications(self) -> int: ...

    @property
    def refusal(self) -> str | None: ...


@dataclass(frozen=True, kw_only=True)
class BatchDecision:
    """Decisions for ``n`` actions, one entry per row.

    Attributes
    ----------
    regime : ndarray of int8, shape (n,)
        0 = PROCEED, 1 = VERIFY, 2 = ABSTAIN.
    verifier : ndarray of intp, shape (n,)
        Column of the chosen verifier where the regime is VERIFY, else -1.
    voi : ndarray of float64, shape (n,)
        Value of the best verification (myopic: one-step VOI; lookahead: ``v_stop`` minus the
        planned expected loss); ``-inf`` where no verifier is available.
    v_stop, r_expected, h_harm : ndarray of float64, shape (n,)
        Screened stopping value, ``theta * P_any`` and ``P_any`` at the current posteriors.
    admissible : ndarray of bool, shape (n,)
        ``r_expected <= min(delta, kappa)`` and ``h_harm <= epsilon``.
    """

    regime: NDArray[np.int8]
    verifier: IntArray
    voi: FloatArray
    v_stop: FloatArray
    r_expected: FloatArray
    h_harm: FloatArray
    admissible: BoolArray

    def __len__(self) -> int:
        return int(self.regime.shape[0])

    def regime_names(self) -> list[str]:
        """The regimes as strings (``"PROCEED"``, ``"VERIFY"``, ``"ABSTAIN"``)."""
        return [REGIME_NAMES[int(c)] for c in self.regime]


# -- arithmetic shared with the scalar engine (same operation order) -----------------------


def _q(p: FloatArray, mask: BoolArray) -> FloatArray:
    """``q = prod (1 - p_i)`` multiplied left to right from 1.0 (``mode="amv"``)."""
    n, m = p.shape
    q = np.ones(n, dtype=np.float64)
    t = np.empty(n, dtype=np.float64)
    for j in range(m):
        np.subtract(1.0, p[:, j], out=t)
        if bool(mask[:, j].all()):
            np.multiply(q, t, out=q)
        else:
            np.multiply(q, t, out=t)
            np.copyto(q, t, where=mask[:, j])
    return q


def _p_any_seed(p: FloatArray, mask: BoolArray) -> FloatArray:
    """``P_any`` accumulated as the seed does: ``acc = 1 - (1 - acc)(1 - p)``."""
    n, m = p.shape
    acc = np.zeros(n, dtype=np.float64)
    t = np.empty(n, dtype=np.float64)
    u = np.empty(n, dtype=np.float64)
    for j in range(m):
        np.subtract(1.0, acc, out=t)
        np.subtract(1.0, p[:, j], out=u)
        np.multiply(t, u, out=t)
        np.subtract(1.0, t, out=t)
        np.copyto(acc, t, where=mask[:, j])
    return acc


def _screen(
    h: FloatArray, theta: FloatArray, kappa: FloatArray, lim: FloatArray, eps: float
) -> tuple[FloatArray, FloatArray, BoolArray]:
    """``(V_stop, R, admissible)`` from ``H``; NaN compares False (inadmissible) as in JS."""
    r = theta * h
    adm = (r <= lim) & (h <= eps)
    return np.where(adm, r, kappa), r, adm


def _lim(gate: _GateLike, kappa: FloatArray) -> FloatArray:
    delta = float(gate.delta_loss_threshold)
    return np.where(delta < kappa, delta, kappa)


def stopping_value_batch(
    gate: _GateLike, p: ArrayLike, premise_mask: ArrayLike, theta: ArrayLike, kappa: ArrayLike
) -> tuple[FloatArray, FloatArray, FloatArray, BoolArray]:
    """Screened stopping value per row: ``(v_stop, r_expected, h_harm, admissible)``."""
    pa = np.asarray(p, dtype=np.float64)
    mask = np.asarray(premise_mask, dtype=bool)
    th = np.asarray(theta, dtype=np.float64)
    ka = np.asarray(kappa, dtype=np.float64)
    h = _p_any_seed(pa, mask) if gate.mode == "seed" else 1.0 - _q(pa, mask)
    v, r, adm = _screen(h, th, ka, _lim(gate, ka), float(gate.epsilon_harm_bound))
    return v, r, h, adm


def posterior_batch(
    p: FloatArray, r: FloatArray, confirm: BoolArray, *, mode: str = "amv"
) -> FloatArray:
    """Bayes posterior of one premise after one signal, elementwise (the scalar formulas).

    ``mode="amv"``: :func:`~amv_calib.gate.posterior_confirm` /
    :func:`~amv_calib.gate.posterior_refute` (``p(1-r) / (p(1-r) + (1-p)r)`` and
    ``p r / (p r + (1-p)(1-r))``; a signal of probability zero believes the perfect
    verifier: 0 after a confirmation, 1 after a refutation). ``mode="seed"``: the seed's
    ``P(refute) = 1 - P(confirm)`` arithmetic, clipped to [0, 1].
    """
    with np.errstate(divide="ignore", invalid="ignore"):
        if mode == "seed":
            pc = (1.0 - p) * r + p * (1.0 - r)
            pr = 1.0 - pc
            up = np.clip(p * (1.0 - r) / pc, 0.0, 1.0)
            down = np.clip(p * r / pr, 0.0, 1.0)
            return np.where(
                confirm, np.where(pc > 0.0, up, 0.0), np.where(pr > 0.0, down, 1.0)
            ).astype(np.float64)
        num_c = p * (1.0 - r)
        den_c = num_c + (1.0 - p) * r
        num_r = p * r
        den_r = num_r + (1.0 - p) * (1.0 - r)
        up = np.where(den_c > 0.0, num_c / den_c, 0.0)
        down = np.where(den_r > 0.0, num_r / den_r, 1.0)
    return np.where(confirm, up, down).astype(np.float64)


def update_batch(
    gate: _GateLike,
    p: FloatArray,
    premise_mask: BoolArray,
    resolves: BoolArray,
    confirm: BoolArray,
    reliability: FloatArray,
) -> FloatArray:
    """Posteriors after one verifier call per row (what ``Gate.run`` does after a call).

    Parameters
    ----------
    gate : Gate
        Its ``mode`` chooses the update: ``"amv"`` updates every premise the verifier resolves
        (one conditionally independent signal each); ``"seed"`` only the first of them in
        premise order, as the seed engine does.
    p : ndarray, shape (n, m)
        Current violation probabilities.
    premise_mask : ndarray of bool, shape (n, m)
    resolves : ndarray of bool, shape (n, m)
        Premises the called verifier resolves (rows without a call: all False).
    confirm : ndarray of bool, shape (n, m)
        The signal on each resolved premise (True = "valid").
    reliability : ndarray, shape (n,)
        Reliability of the called verifier.
    """
    target = np.asarray(resolves, dtype=bool) & np.asarray(premise_mask, dtype=bool)
    if gate.mode == "seed":
        rows = np.arange(target.shape[0])
        first = np.argmax(target, axis=1)
        has = target[rows, first]
        target = np.zeros_like(target)
        target[rows[has], first[has]] = True
    r = np.broadcast_to(np.asarray(reliability, dtype=np.float64)[:, None], p.shape)
    post = posterior_batch(p, r, np.asarray(confirm, dtype=bool), mode=gate.mode)
    return np.where(target, post, p)


# -- input checks ---------------------------------------------------------------------------


def _as(name: str, value: ArrayLike, dtype: Any, shape: tuple[int, ...]) -> NDArray[Any]:
    arr = np.asarray(value, dtype=dtype)
    if arr.shape != shape:
        raise ValueError(f"{name} has shape {arr.shape}, expected {shape}")
    return arr


def _check_range(name: str, arr: FloatArray, where: BoolArray, ok: BoolArray, rule: str) -> None:
    bad = where & ~ok
    if np.any(bad):
        idx = tuple(int(i) for i in np.argwhere(bad)[0])
        at = ", ".join(map(str, idx))
        raise ValueError(f"{name}[{at}]={float(arr[idx])!r} must be {rule}")


def _within(arr: FloatArray, where: BoolArray | None, lo: float, hi: float, *,
            low_open: bool) -> bool:
    """True when every entry (where ``where``) lies in ``(lo, hi]`` (``low_open``) or
    ``[lo, hi]``; False on NaN.

    ``hi = inf`` asks for finite entries.
    """
    if where is not None:
        arr = arr[where]
    if arr.size == 0:
        return True
    a, b = float(arr.min()), float(arr.max())
    if not (a > lo if low_open else a >= lo):
        return False
    return b < hi if hi == np.inf else b <= hi


# -- the planners -----------------------------------------------------------------------------


#: Rows per chunk of the vectorised myopic rule: a chunk's temporaries stay in the cache.
CHUNK_ROWS: Final = 8192


class _Scratch:
    """Preallocated temporaries of the chunk loop, handed out as views of ``c`` columns."""

    def __init__(self, lead: tuple[int, ...], width: int) -> None:
        self._lead = lead
        self._width = width
        self._bufs: dict[tuple[str, Any, tuple[int, ...]], NDArray[Any]] = {}
        self.c = width

    def __call__(self, name: str, dtype: Any = np.float64,
                 lead: tuple[int, ...] | None = None) -> NDArray[Any]:
        shape = self._lead if lead is None else lead
        key = (name, dtype, shape)
        buf = self._bufs.get(key)
        if buf is None:
            buf = np.empty((*shape, self._width), dtype=dtype)
            self._bufs[key] = buf
        return buf[..., : self.c]


def _select(cond: BoolArray, a: FloatArray, b: FloatArray | float, out: FloatArray,
            tmp: FloatArray) -> FloatArray:
    """``where(cond, a, b)`` into ``out`` for finite ``a`` and ``b``, without masked loops.

    ``a * 1 + b * 0`` is ``a`` and ``a * 0 + b * 1`` is ``b`` exactly (``x + (+-0) = x``
    for every ``x`` that is not itself a zero; neither ``a`` nor ``b`` is ``-0.0`` here).
    """
    np.copyto(tmp, cond)
    np.multiply(a, tmp, out=out)
    np.subtract(1.0, tmp, out=tmp)
    np.multiply(tmp, b, out=tmp)
    return np.add(out, tmp, out=out)


def _myopic_rows(
    gate: _GateLike,
    p: FloatArray,
    mask: BoolArray,
    theta: FloatArray,
    kappa: FloatArray,
    resolves: BoolArray,
    cost: FloatArray,
    rel: FloatArray,
    avail: BoolArray,
    *,
    keep: bool = False,
) -> tuple[FloatArray | None, FloatArray, FloatArray, FloatArray, BoolArray, FloatArray,
           IntArray | None, NDArray[np.int8], IntArray]:
    """Screen, one-step VOI and the myopic decision per row: ``(q, h, v_stop, r_expected,
    admissible, best, idx, regime, verifier)``.

    ``best`` is the largest one-step VOI of a row (``-inf`` when no verifier is available)
    and ``idx`` the first verifier column reaching it. ``mode="amv"``: the arithmetic the
    ``_engine`` module docstring fixes: outcomes in product order, ``w`` and ``q_o``
    multiplied premise by premise (``q_o *= r / Pc``, the factor divided first),
    zero-probability outcomes skipped. ``mode="seed"``: the seed's first-premise update and
    ``P_any`` accumulation (``q`` is then all ones).

    Rows run in chunks of :data:`CHUNK_ROWS` through preallocated verifier-major buffers, so
    every ufunc loops over a contiguous chunk in the cache and nothing is allocated per
    step. The chunk kernels take the common case: in ``"amv"`` mode a verifier resolving
    exactly one premise, in ``"seed"`` mode one resolving at least one. The other (row,
    verifier) pairs are computed after the loop by the general code, and their rows'
    maxima then. ``q`` and ``idx`` are returned only with ``keep`` (else None): every
    full-size array costs its first-touch page faults.
    """
    n, m = p.shape
    n_ver = cost.shape[1]
    lam = float(gate.lambda_cost_scale)
    eps = float(gate.epsilon_harm_bound)
    delta = float(gate.delta_loss_threshold)
    seed = gate.mode == "seed"
    full_mask = bool(mask.all())
    full_avail = bool(avail.all())
    # padded slots may hold anything (NaN included); zero them so products stay finite
    # (in "amv" mode a zero slot then multiplies q by exactly 1)
    pz = p if full_mask else np.where(mask, p, 0.0)
    q = np.empty(n, dtype=np.float64) if keep else None
    h = np.empty(n, dtype=np.float64)
    v_stop = np.empty(n, dtype=np.float64)
    r_exp = np.empty(n, dtype=np.float64)
    adm = np.empty(n, dtype=bool)
    best = np.empty(n, dtype=np.float64)
    idx = np.empty(n, dtype=np.intp) if keep else None
    regime = np.empty(n, dtype=np.int8)
    chosen = np.empty(n, dtype=np.intp)
    voi_all: FloatArray | None = None  # kept only once a chunk has pairs for later
    late: list[tuple[int, int]] = []
    odd_rows: list[IntArray] = []
    odd_cols: list[IntArray] = []
    w = max(1, min(CHUNK_ROWS, n))
    s = _Scratch((n_ver,), w)
    # column indices of a chunk in one byte when they fit (cheaper integer passes)
    idx_t: Any = np.int8 if n_ver < 127 else np.intp
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        for i0 in range(0, n, w):
            i1 = min(i0 + w, n)
            s.c = i1 - i0
            pt = s("pt", lead=(m,))
            np.copyto(pt, pz[i0:i1].T)
            qc = s("q", lead=()) if q is None else q[i0:i1]
            hc, th, ka = h[i0:i1], theta[i0:i1], kappa[i0:i1]
            ic = s("idx", idx_t, ()) if idx is None else idx[i0:i1]
            if seed:
                qc.fill(1.0)
                _seed_p_any(s, pt, mask[i0:i1], full_mask, hc)
            else:
                if m:
                    np.subtract(1.0, pt[0], out=qc)  # 1.0 * (1 - p_0)
                else:
                    qc.fill(1.0)
                tmp1 = s("tmp1", lead=())
                for j in range(1, m):
                    np.subtract(1.0, pt[j], out=tmp1)
                    np.multiply(qc, tmp1, out=qc)
                np.subtract(1.0, qc, out=hc)
            li = s("li", lead=())
            if delta != delta:  # NaN: where(delta < kappa, delta, kappa) is kappa
                np.copyto(li, ka)
            else:
                np.minimum(ka, delta, out=li)
            rc, ac, vs = r_exp[i0:i1], adm[i0:i1], v_stop[i0:i1]
            np.multiply(th, hc, out=rc)
            b1 = s("b1", np.bool_, ())
            np.less_equal(rc, li, out=ac)
            np.less_equal(hc, eps, out=b1)
            np.logical_and(ac, b1, out=ac)
            _select(ac, rc, ka, vs, s("tmp1", lead=()))
            if n_ver == 0:
                best[i0:i1] = -np.inf
                ic.fill(0)
                _decide(s, ac, best[i0:i1], ic, th, ka, seed, regime[i0:i1], chosen[i0:i1])
                continue
            tb = s("tb", np.bool_, (m, n_ver))
            np.copyto(tb, resolves[i0:i1].transpose(2, 1, 0))
            r = s("r")
            np.copyto(r, rel[i0:i1].T)
            lc = s("lc")
            np.multiply(cost[i0:i1].T, lam, out=lc)
            rows = (qc, th, ka, li, vs)
            out = s("voi")
            if seed:
                odd = _seed_chunk(s, tb, pt, mask[i0:i1], r, lc, rows, eps, out)
            else:
                odd = _amv_chunk(s, tb, pt, r, lc, rows, eps, out)
            if not full_avail:
                off = s("off", np.bool_)
                np.logical_not(avail[i0:i1].T, out=off)
                np.copyto(out, -np.inf, where=off)
                np.logical_and(odd, avail[i0:i1].T, out=odd)
            if odd.any():
                cols, at = np.nonzero(odd)
                odd_rows.append(at + i0)
                odd_cols.append(cols)
                if voi_all is None:
                    voi_all = np.empty((n_ver, n), dtype=np.float64)
                voi_all[:, i0:i1] = out
                late.append((i0, i1))
            else:
                _first_max(out, ic, best[i0:i1], s("ne", np.bool_, ()))
                _decide(s, ac, best[i0:i1], ic, th, ka, seed, regime[i0:i1], chosen[i0:i1])
    if voi_all is not None:
        at = np.concatenate(odd_rows)
        cols = np.concatenate(odd_cols)
        if seed:
            # no premise to update: one outcome, E = V_stop, as the seed computes it
            voi_all[cols, at] = -lam * cost[at, cols]
        else:
            lim = _lim(gate, kappa)
            q_all = _q(p, mask) if q is None else q  # the same products as the chunks'
            voi_all[cols, at] = _amv_voi(p, resolves[at, cols], at, theta, kappa, lim, eps,
                                         rel[at, cols], lam * cost[at, cols], q_all, v_stop)
        for i0, i1 in late:
            s.c = i1 - i0
            ic = s("idx", idx_t, ()) if idx is None else idx[i0:i1]
            _first_max(voi_all[:, i0:i1], ic, best[i0:i1], s("ne", np.bool_, ()))
            _decide(s, adm[i0:i1], best[i0:i1], ic, theta[i0:i1], kappa[i0:i1], seed,
                    regime[i0:i1], chosen[i0:i1])
    return q, h, v_stop, r_exp, adm, best, idx, regime, chosen


def _decide(s: _Scratch, adm: BoolArray, best: FloatArray, idx: NDArray[np.integer[Any]],
            theta: FloatArray,
            kappa: FloatArray, seed: bool, regime: NDArray[np.int8], chosen: IntArray) -> None:
    """The myopic rule into ``regime`` and ``chosen``: VERIFY with ``idx`` when ``best``
    exceeds the tolerance (0 in ``"seed"`` mode), else PROCEED if admissible, else ABSTAIN."""
    go = s("go", np.bool_, ())
    if seed:
        np.greater(best, 0.0, out=go)
    else:
        tol = s("tol", lead=())
        np.add(theta, kappa, out=tol)
        np.multiply(tol, VOI_TOLERANCE, out=tol)
        np.greater(best, tol, out=go)
    # base = ABSTAIN (2) - 2 * admissible; regime = base - go * (base - VERIFY);
    # chosen = (idx + 1) * go - 1 (integer arithmetic, no masked loops)
    base = s("base", np.int8, ())
    np.multiply(adm, -2, out=base, dtype=np.int8, casting="unsafe")
    np.add(base, ABSTAIN, out=base)
    np.subtract(base, VERIFY, out=regime)
    np.multiply(regime, go, out=regime)
    np.subtract(base, regime, out=regime)
    c1 = s("c1", idx.dtype, ())
    np.add(idx, 1, out=c1)
    np.multiply(c1, go, out=c1)
    np.subtract(c1, 1, out=chosen)


def _first_max(voi: FloatArray, idx: NDArray[np.integer[Any]], best: FloatArray,
               ne: BoolArray) -> None:
    """Into ``idx`` and ``best``: per column of ``voi`` (V, c), the row of the first largest
    entry and that entry.

    The first maximum, like ``np.argmax`` and the scalar gate's strict ``voi > best`` scan
    (the entries are never NaN; ``-0.0`` and ``0.0`` tie).
    """
    n_ver = voi.shape[0]
    if n_ver == 1:
        np.copyto(best, voi[0])
    else:
        np.maximum(voi[0], voi[1], out=best)
        for v in range(2, n_ver):
            np.maximum(best, voi[v], out=best)
    idx.fill(0)
    for v in range(n_ver - 2, -1, -1):
        # idx = 0 if voi[v] is the maximum, else 1 + (the index among the later rows)
        np.not_equal(voi[v], best, out=ne)
        np.add(idx, 1, out=idx)
        np.multiply(idx, ne, out=idx)
    # the maximum of -0.0 and 0.0 may be either: take the chosen entry's own sign
    z = np.flatnonzero(best == 0.0)
    if z.size:
        best[z] = voi[idx[z], z]


_Rows = tuple[FloatArray, FloatArray, FloatArray, FloatArray, FloatArray]


def _outcome(s: _Scratch, f: FloatArray, w: FloatArray, rows: _Rows, eps: float,
             out: FloatArray) -> FloatArray:
    """``w * V_stop(q * f)`` into ``out`` (``f`` is overwritten with ``H``)."""
    q, th, ka, li, _ = rows
    np.multiply(q, f, out=f)
    np.subtract(1.0, f, out=f)
    return _weighted_screen(s, f, w, rows, eps, out)


def _weighted_screen(s: _Scratch, h: FloatArray, w: FloatArray, rows: _Rows, eps: float,
                     out: FloatArray) -> FloatArray:
    """``w * V_stop`` at harm ``h`` into ``out``."""
    _, th, ka, li, _ = rows
    np.multiply(th, h, out=out)
    b1 = s("b1", np.bool_)
    b2 = s("b2", np.bool_)
    np.less_equal(out, li, out=b1)
    np.less_equal(h, eps, out=b2)
    np.logical_and(b1, b2, out=b1)
    _select(b1, out, ka, out, s("sel"))
    return np.multiply(w, out, out=out)


def _near_one(r: FloatArray) -> bool:
    """Whether some reliability is within 1e-9 of 1 (only then can an outcome have
    probability 0, or ``1 - P(confirm)`` round to 0)."""
    return bool(r.max(initial=0.0) > 1.0 - 1e-9)


def _amv_chunk(s: _Scratch, tb: BoolArray, pt: FloatArray, r: FloatArray, lc: FloatArray,
               rows: _Rows, eps: float, out: FloatArray) -> BoolArray:
    """VOI of the (row, verifier) pairs into ``out``; returns the pairs left to do.

    When every pair resolves at most one premise, the pairs resolving exactly one are done
    and the others (none resolved) are returned; when some resolve 2 to
    :data:`_GENERAL_MAX_K` premises, :func:`_amv_chunk_general` does them all.
    """
    m = tb.shape[0]
    kk = s("kk", np.uint8)
    tu = tb.view(np.uint8)
    np.copyto(kk, tu[0])
    for j in range(1, m):
        np.add(kk, tu[j], out=kk)
    odd = s("odd", np.bool_)
    k_max = int(kk.max(initial=0))
    if 2 <= k_max <= _GENERAL_MAX_K:
        _amv_chunk_general(s, tb, kk, k_max, pt, r, lc, rows, eps, out)
        odd.fill(False)
        return odd
    np.not_equal(kk, 1, out=odd)
    ps = s("ps")
    tmp = s("tmp")
    # the one resolved premise's p: x * 1 + 0 * y + ... is x exactly
    np.multiply(pt[0], tb[0], out=ps)
    for j in range(1, m):
        np.multiply(pt[j], tb[j], out=tmp)
        np.add(ps, tmp, out=ps)
    sr = s("sr")
    np.subtract(1.0, r, out=sr)
    a = s("a")
    np.subtract(1.0, ps, out=a)
    pc = s("pc")
    np.multiply(a, r, out=pc)
    np.multiply(ps, sr, out=tmp)
    np.add(pc, tmp, out=pc)
    pr = s("pr")
    np.multiply(ps, r, out=pr)
    np.multiply(a, sr, out=tmp)
    np.add(pr, tmp, out=pr)
    fc = s("fc")
    fr = s("fr")
    if _near_one(r):
        # An outcome of probability 0 (only with r = 1) is skipped by the scalar engine.
        # Dividing by 1 instead keeps everything finite, and its weight 0 then adds exactly
        # +0 to E.
        zb = s("zb", np.bool_)
        np.equal(pc, 0.0, out=zb)
        np.add(pc, zb, out=tmp)
        np.divide(r, tmp, out=fc)
        np.equal(pr, 0.0, out=zb)
        np.add(pr, zb, out=tmp)
        np.divide(sr, tmp, out=fr)
    else:
        np.divide(r, pc, out=fc)
        np.divide(sr, pr, out=fr)
    ec = _outcome(s, fc, pc, rows, eps, s("ec"))
    er = _outcome(s, fr, pr, rows, eps, s("er"))
    np.add(ec, er, out=out)
    np.subtract(rows[4], out, out=out)
    np.subtract(out, lc, out=out)
    return odd


#: Most premises one verifier may resolve for :func:`_amv_chunk_general` (beyond, the
#: products of its factors could leave the float range where the scalar engine's would not).
_GENERAL_MAX_K: Final = 4


def _amv_chunk_general(s: _Scratch, tb: BoolArray, kk: NDArray[np.uint8], k_max: int,
                       pt: FloatArray, r: FloatArray, lc: FloatArray, rows: _Rows, eps: float,
                       out: FloatArray) -> None:
    """VOI of pairs resolving 0 to ``k_max`` premises into ``out``, all ``2^k_max`` outcomes.

    Slot ``t`` holds a pair's ``t``-th resolved premise (premise order). A pair resolving
    ``k < k_max`` premises gets the missing slots as a perfect verifier of a sure premise
    (``p = 0``, ``r = 1``): its confirm factor and probability are exactly 1 (``w`` and
    ``q_o`` unchanged), its refute outcome has probability 0 (guarded to a finite ``q_o``)
    and adds exactly +0 to ``E``, so the sum equals the scalar engine's over the pair's own
    ``2^k`` outcomes in product order. The factors lie in [0, 1e16] and
    ``k_max <= 4``, so no product overflows where the scalar one would not.
    """
    m = tb.shape[0]
    lead = (k_max, *tb.shape[1:2])
    pk = s("gp", lead=lead)
    pres = s("gpres", np.bool_, lead)
    pk.fill(0.0)
    pres.fill(False)
    cnt = s("gcnt", np.uint8)
    cnt.fill(0)
    sel = s("gsel", np.bool_)
    eq = s("geq", np.bool_)
    tmp = s("tmp")
    tu = tb.view(np.uint8)
    for j in range(m):
        for t in range(min(j + 1, k_max)):
            # premise j is slot t where it is resolved and t premises came before it
            np.equal(cnt, t, out=eq)
            np.logical_and(tb[j], eq, out=sel)
            np.multiply(pt[j], sel, out=tmp)
            np.add(pk[t], tmp, out=pk[t])
            np.logical_or(pres[t], sel, out=pres[t])
        np.add(cnt, tu[j], out=cnt)
    wc = s("gwc", lead=lead)
    wr = s("gwr", lead=lead)
    fc = s("gfc", lead=lead)
    fr = s("gfr", lead=lead)
    rt = s("grt")
    st = s("gst")
    a = s("ga")
    zb = s("zb", np.bool_)
    for t in range(k_max):
        _select(pres[t], r, 1.0, rt, tmp)  # r, or 1 on a missing slot
        np.subtract(1.0, rt, out=st)
        np.subtract(1.0, pk[t], out=a)
        np.multiply(a, rt, out=wc[t])
        np.multiply(pk[t], st, out=tmp)
        np.add(wc[t], tmp, out=wc[t])
        np.multiply(pk[t], rt, out=wr[t])
        np.multiply(a, st, out=tmp)
        np.add(wr[t], tmp, out=wr[t])
        # a zero-probability outcome: divide by 1 instead (finite; its weight 0 adds +0)
        np.equal(wc[t], 0.0, out=zb)
        np.add(wc[t], zb, out=tmp)
        np.divide(rt, tmp, out=fc[t])
        np.equal(wr[t], 0.0, out=zb)
        np.add(wr[t], zb, out=tmp)
        np.divide(st, tmp, out=fr[t])
    q = rows[0]
    w_l = s("gw", lead=lead)
    f_l = s("gf", lead=lead)
    e = s("ge")
    e.fill(0.0)
    term = s("gterm")
    h = s("gh")

    def walk(t: int, w_up: FloatArray) -> None:
        # depth first, confirm before refute: itertools.product order
        for wt, ft in ((wc[t], fc[t]), (wr[t], fr[t])):
            if t == 0:
                w = wt  # 1.0 * w_0
                np.multiply(q, ft, out=f_l[0])
            else:
                w = np.multiply(w_up, wt, out=w_l[t])
                np.multiply(f_l[t - 1], ft, out=f_l[t])
            if t + 1 < k_max:
                walk(t + 1, w)
            else:
                np.subtract(1.0, f_l[t], out=h)
                _weighted_screen(s, h, w, rows, eps, term)
                np.add(e, term, out=e)

    walk(0, wc[0])
    np.subtract(rows[4], e, out=out)
    np.subtract(out, lc, out=out)


def _seed_chunk(s: _Scratch, tb: BoolArray, pt: FloatArray, mask: BoolArray, r: FloatArray,
                lc: FloatArray, rows: _Rows, eps: float, out: FloatArray) -> BoolArray:
    """Seed-mode VOI of the pairs resolving some premise into ``out``; returns the others."""
    m = tb.shape[0]
    isf = s("isf", np.bool_, tb.shape[:2])
    seen = s("seen", np.bool_)
    zb = s("zb", np.bool_)
    np.copyto(isf[0], tb[0])
    np.copyto(seen, tb[0])
    for j in range(1, m):
        np.logical_not(seen, out=zb)
        np.logical_and(tb[j], zb, out=isf[j])
        np.logical_or(seen, tb[j], out=seen)
    f1 = s("f1", lead=tb.shape[:2])  # 1.0 at the first resolved premise
    np.copyto(f1, isf)
    f0 = s("f0", lead=tb.shape[:2])
    np.subtract(1.0, f1, out=f0)
    omp = s("omp", lead=(m,))
    np.subtract(1.0, pt, out=omp)
    ps = s("ps")
    tmp = s("tmp")
    np.multiply(f1[0], pt[0], out=ps)
    for j in range(1, m):
        np.multiply(f1[j], pt[j], out=tmp)
        np.add(ps, tmp, out=ps)
    sr = s("sr")
    np.subtract(1.0, r, out=sr)
    pc = s("pc")
    np.subtract(1.0, ps, out=pc)
    np.multiply(pc, r, out=pc)
    np.multiply(ps, sr, out=tmp)
    np.add(pc, tmp, out=pc)
    pr = s("pr")
    np.subtract(1.0, pc, out=pr)
    up = s("up")
    np.multiply(ps, sr, out=up)
    down = s("down")
    np.multiply(ps, r, out=down)
    if _near_one(r):
        # P(outcome) = 0 (or P(confirm) rounding to 1) needs r at or next to 1: divide by 1
        # instead (finite), the weight 0 then adds exactly +0 to E
        np.equal(pc, 0.0, out=zb)
        np.add(pc, zb, out=tmp)
        np.divide(up, tmp, out=up)
        np.equal(pr, 0.0, out=zb)
        np.add(pr, zb, out=tmp)
        np.divide(down, tmp, out=down)
    else:
        np.divide(up, pc, out=up)
        np.divide(down, pr, out=down)
    full = [bool(mask[:, j].all()) for j in range(m)]
    ec = _seed_outcome(s, up, f0, f1, omp, mask, full, pc, rows, eps, s("ec"))
    er = _seed_outcome(s, down, f0, f1, omp, mask, full, pr, rows, eps, s("er"))
    np.add(ec, er, out=out)
    np.subtract(rows[4], out, out=out)
    np.subtract(out, lc, out=out)
    np.logical_not(seen, out=seen)
    return seen


def _seed_p_any(s: _Scratch, pt: FloatArray, mask: BoolArray, full_mask: bool,
                out: FloatArray) -> None:
    """Into ``out``: ``P_any`` of the rows as the seed accumulates it (see
    :func:`_p_any_seed`); ``pt`` is (m, c)."""
    out.fill(0.0)
    t = s("tmp1", lead=())
    u = s("tmp2", lead=())
    for j in range(pt.shape[0]):
        np.subtract(1.0, out, out=t)
        np.subtract(1.0, pt[j], out=u)
        np.multiply(t, u, out=t)
        if full_mask:
            np.subtract(1.0, t, out=out)
        else:
            np.subtract(1.0, t, out=t)
            np.copyto(out, t, where=mask[:, j])


def _seed_outcome(s: _Scratch, x: FloatArray, f0: FloatArray, f1: FloatArray,
                  omp: FloatArray, mask: BoolArray, full: list[bool], w: FloatArray,
                  rows: _Rows, eps: float, out: FloatArray) -> FloatArray:
    """``w * V_stop`` with the first resolved premise at ``x`` (``x`` is overwritten).

    ``P_any`` accumulates as the seed does, ``acc = 1 - (1 - acc)(1 - p)`` from 0.
    """
    np.subtract(1.0, x, out=x)  # 1 - x, finite
    fac = s("fac")
    tmp = s("tmp")
    acc = s("acc")
    new = s("new")
    for j in range(omp.shape[0]):
        # 1 - p_j, or 1 - x at the first resolved premise (one product of each pair is +-0)
        np.multiply(f0[j], omp[j], out=fac)
        np.multiply(f1[j], x, out=tmp)
        np.add(fac, tmp, out=fac)
        if j == 0:
            np.subtract(1.0, fac, out=new)  # 1 - (1 - 0) * fac
        else:
            np.subtract(1.0, acc, out=tmp)
            np.multiply(tmp, fac, out=tmp)
            np.subtract(1.0, tmp, out=new)
        if full[j]:
            acc, new = new, acc
        else:
            if j == 0:
                acc.fill(0.0)
            np.copyto(acc, new, where=mask[:, j])
    return _weighted_screen(s, acc, w, rows, eps, out)


def _amv_voi(
    p: FloatArray,
    target: BoolArray,
    row: IntArray,
    theta: FloatArray,
    kappa: FloatArray,
    lim: FloatArray,
    eps: float,
    r: FloatArray,
    lam_c: FloatArray,
    q: FloatArray,
    v_stop: FloatArray,
) -> FloatArray:
    """VOI of verifier calls ``t`` (action ``row[t]``, resolving ``target[t]``, reliability
    ``r[t]``, scaled cost ``lam_c[t]``), grouped by the number of premises resolved."""
    n = row.size
    val = np.empty(n, dtype=np.float64)
    k_row = target.sum(axis=1)
    zero = k_row == 0
    # one outcome of weight 1 leaving q unchanged: E = V_stop exactly
    vz = v_stop[row[zero]]
    val[zero] = (vz - vz) - lam_c[zero]
    with np.errstate(divide="ignore", invalid="ignore"):
        for k in range(1, int(k_row.max(initial=0)) + 1):
            sel = np.flatnonzero(k_row == k)
            if sel.size == 0:
                continue
            at = row[sel]
            cols = np.nonzero(target[sel])[1].reshape(sel.size, k)  # premise order
            pk = p[at[:, None], cols]
            rk = r[sel][:, None]
            sk = 1.0 - rk
            ak = 1.0 - pk
            pc = ak * rk + pk * sk
            pr = pk * rk + ak * sk
            fc = np.where(pc > 0.0, rk / pc, 0.0)
            fr = np.where(pr > 0.0, sk / pr, 0.0)
            qk, th, ka, li = q[at], theta[at], kappa[at], lim[at]
            e = np.zeros(sel.size, dtype=np.float64)
            for combo in range(1 << k):
                # itertools.product order: the first premise is the most significant digit,
                # confirm (0) before refute (1); outcomes of probability 0 are skipped
                w = np.ones(sel.size, dtype=np.float64)
                f = qk
                ok = np.ones(sel.size, dtype=bool)
                for t in range(k):
                    if (combo >> (k - 1 - t)) & 1:
                        w = w * pr[:, t]
                        f = f * fr[:, t]
                        ok &= pr[:, t] > 0.0
                    else:
                        w = w * pc[:, t]
                        f = f * fc[:, t]
                        ok &= pc[:, t] > 0.0
                h = 1.0 - f
                rx = th * h
                e = np.where(ok, e + w * np.where((rx <= li) & (h <= eps), rx, ka), e)
            val[sel] = (v_stop[at] - e) - lam_c[sel]
    return val


def evaluate_batch(
    gate: _GateLike,
    p: ArrayLike,
    premise_mask: ArrayLike,
    theta: ArrayLike,
    kappa: ArrayLike,
    resolves: ArrayLike,
    cost: ArrayLike,
    reliability: ArrayLike,
    available: ArrayLike | None = None,
    *,
    budget: ArrayLike | None = None,
    n_jobs: int = 1,
) -> BatchDecision:
    """Decide PROCEED / VERIFY / ABSTAIN for ``n`` padded actions at once.

    Row ``i`` gets the decision ``gate.evaluate(action_i, verifiers_i)`` would give, where
    ``action_i`` has the premises ``premise_mask[i]`` marks (in slot order) carrying the
    probabilities ``p[i]`` and ``verifiers_i`` are the available verifiers in column order.

    Parameters
    ----------
    gate : Gate
        Thresholds, ``planner``, ``mode``, ``max_verifications`` and ``refusal`` come from it.
    p : array_like, shape (n, m)
        Violation probability of each premise (ignored where ``premise_mask`` is False).
    premise_mask : array_like of bool, shape (n, m)
        Which premise slots are real.
    theta, kappa : array_like, shape (n,)
        Loss of a harmful execution and cost of abstaining, both > 0.
    resolves : array_like of bool, shape (n, V, m)
        ``resolves[i, v, j]``: verifier ``v`` of action ``i`` resolves premise ``j``.
    cost, reliability : array_like, shape (n, V)
        Execution cost (>= 0) and symmetric reliability (in (0.5, 1]) of each verifier.
    available : array_like of bool, shape (n, V), optional
        Verifiers that may be called (real and not yet used); default all.
    budget : array_like of int, shape (n,), optional
        Verifications left per row (``max_verifications`` minus those made, as in
        ``Gate.run``); rows with 0 never VERIFY. Default ``gate.max_verifications``.
    n_jobs : int, default 1
        Worker processes for the lookahead planner's rows (used from
        :data:`PARALLEL_MIN_ROWS` rows on); the decisions do not depend on it.

    Returns
    -------
    BatchDecision

    Raises
    ------
    ValueError
        On a shape mismatch or an out-of-range value, naming the array and the index.

    Notes
    -----
    The myopic rule (both modes) is vectorised over rows, with loops over verifier columns,
    joint outcomes and premise slots only. The lookahead planner runs the scalar planner
    (:func:`amv_calib.gate._planner.plan`) row by row, so its memoised, pruned dynamic
    programme is reproduced exactly; rows where the planner provably stops at its root
    (every verifier's ``lambda * c`` plus the clairvoyant bound ``P_any * min(theta, kappa)``
    already reaches ``V_stop``) are decided vectorised without calling it.
    """
    pa = np.asarray(p, dtype=np.float64)
    if pa.ndim != 2:
        raise ValueError(f"p must have shape (n, m), got {pa.shape}")
    n, m = pa.shape
    mask = _as("premise_mask", premise_mask, bool, (n, m))
    th = _as("theta", theta, np.float64, (n,))
    ka = _as("kappa", kappa, np.float64, (n,))
    res = np.asarray(resolves, dtype=bool)
    if res.ndim != 3 or res.shape[0] != n or res.shape[2] != m:
        raise ValueError(f"resolves has shape {res.shape}, expected ({n}, V, {m})")
    n_ver = res.shape[1]
    co = _as("cost", cost, np.float64, (n, n_ver))
    rel = _as("reliability", reliability, np.float64, (n, n_ver))
    avail_in = None if available is None else _as("available", available, bool, (n, n_ver))
    left = None if budget is None else _as("budget", budget, np.intp, (n,))
    if left is None and int(gate.max_verifications) <= 0:
        left = np.zeros(n, dtype=np.intp)  # no row may verify
    look = gate.planner == "lookahead" and gate.mode != "seed"
    avail = np.ones((n, n_ver), dtype=bool) if avail_in is None else avail_in
    rows = _numpy_rows(gate, pa, mask, th, ka, res, co, rel, avail, left, keep=look)
    if isinstance(rows, BatchDecision):
        return rows
    q, h, v_stop, r_exp, adm, best, idx, regime, chosen = rows
    if look and n_ver > 0:
        avail = np.ones((n, n_ver), dtype=bool) if avail_in is None else avail_in
        if left is None:
            left = np.full(n, int(gate.max_verifications), dtype=np.intp)
        elif not bool((left > 0).all()):
            avail = avail & (left > 0)[:, None]
        if bool(np.any(avail)):
            assert q is not None and idx is not None
            tol = VOI_TOLERANCE * (th + ka)
            eps = float(gate.epsilon_harm_bound)
            if not bool(mask.all()):
                res = res & mask[:, None, :]
            go, idx, best = _lookahead(gate, pa, mask, th, ka, _lim(gate, ka), eps, res, co,
                                       rel, avail, left, q, v_stop, best, idx, tol, n_jobs)
            regime = np.where(adm, PROCEED, ABSTAIN).astype(np.int8)
            regime[go] = VERIFY
            chosen = np.where(go, idx, -1).astype(np.intp)
    return BatchDecision(
        regime=regime,
        verifier=chosen,
        voi=best,
        v_stop=v_stop,
        r_expected=r_exp,
        h_harm=h,
        admissible=adm,
    )


_RowsOut = tuple[FloatArray | None, FloatArray, FloatArray, FloatArray, BoolArray, FloatArray,
                 IntArray | None, NDArray[np.int8], IntArray]


def _numpy_rows(gate: _GateLike, pa: FloatArray, mask: BoolArray, th: FloatArray,
                ka: FloatArray, res: BoolArray, co: FloatArray, rel: FloatArray,
                avail: BoolArray, left: IntArray | None, *,
                keep: bool) -> _RowsOut | BatchDecision:
    """Checks, then :func:`_myopic_rows` (a refusing gate's decisions directly)."""
    n, m = pa.shape
    full_mask = bool(mask.all())
    full_avail = bool(avail.all())
    # cheap min/max screens first; the elementwise checks only run to name a bad entry
    if not _within(pa, None if full_mask else mask, 0.0, 1.0, low_open=False):
        _check_range("p", pa, mask, (pa >= 0.0) & (pa <= 1.0), "in [0, 1]")
    if not _within(th, None, 0.0, np.inf, low_open=True):
        _check_range("theta", th, np.ones(n, dtype=bool), (th > 0.0) & np.isfinite(th),
                     "> 0 and finite")
    if not _within(ka, None, 0.0, np.inf, low_open=True):
        _check_range("kappa", ka, np.ones(n, dtype=bool), (ka > 0.0) & np.isfinite(ka),
                     "> 0 and finite")
    av = None if full_avail else avail
    if not _within(co, av, 0.0, np.inf, low_open=False):
        _check_range("cost", co, avail, (co >= 0.0) & np.isfinite(co), ">= 0 and finite")
    if not _within(rel, av, 0.5, 1.0, low_open=True):
        _check_range("reliability", rel, avail, (rel > 0.5) & (rel <= 1.0), "in (0.5, 1]")
    if not full_mask:
        res = res & mask[:, None, :]

    if gate.refusal is not None:
        # fail closed as the scalar gate does: P_any = 1, V_stop = kappa
        return BatchDecision(
            regime=np.full(n, ABSTAIN, dtype=np.int8), verifier=np.full(n, -1, dtype=np.intp),
            voi=np.full(n, -np.inf), v_stop=ka.copy(), r_expected=th.copy(),
            h_harm=np.ones(n), admissible=np.zeros(n, dtype=bool),
        )
    if left is not None and not bool((left > 0).all()):
        avail = avail & (left > 0)[:, None]
    return _myopic_rows(gate, pa, mask, th, ka, res, co, rel, avail, keep=keep)


def _lookahead(
    gate: _GateLike,
    p: FloatArray,
    mask: BoolArray,
    theta: FloatArray,
    kappa: FloatArray,
    lim: FloatArray,
    eps: float,
    resolves: BoolArray,
    cost: FloatArray,
    rel: FloatArray,
    avail: BoolArray,
    left: IntArray,
    q: FloatArray,
    v_stop: FloatArray,
    best: FloatArray,
    best_idx: IntArray,
    tol: FloatArray | float,
    n_jobs: int = 1,
) -> tuple[BoolArray, IntArray, FloatArray]:
    """The lookahead decision per row: ``(verify, verifier column, gain)``."""
    from amv_calib.gate._planner import Spec

    n, n_ver = cost.shape
    lam = float(gate.lambda_cost_scale)
    lam_c = lam * cost
    tol_a = np.broadcast_to(np.asarray(tol, dtype=np.float64), (n,))
    offered = avail.any(axis=1)
    reuse = bool(getattr(gate, "reuse_verifiers", False))
    # Root pruning, exactly as the planner tests it: verifier j is expanded only if
    # lambda*c_j + h*min(theta, kappa) <= v_stop + tol (the clairvoyant bound)
    lb = (1.0 - q) * np.minimum(theta, kappa)
    pruned = np.all(~avail | (lam_c + lb[:, None] > (v_stop + tol_a)[:, None]), axis=1)
    trivial = offered & pruned & (best <= tol_a) & (not reuse)
    gain = np.where(offered, 0.0, -np.inf)
    go = np.zeros(n, dtype=bool)
    col = np.full(n, -1, dtype=np.intp)
    todo = np.flatnonzero(offered & ~trivial)
    if todo.size:
        res_l = resolves[todo].tolist()
        p_l, m_l, av_l = p[todo].tolist(), mask[todo].tolist(), avail[todo].tolist()
        r_l, c_l, lc_l = rel[todo].tolist(), cost[todo].tolist(), lam_c[todo].tolist()
        th_l, ka_l, lim_l = theta[todo].tolist(), kappa[todo].tolist(), lim[todo].tolist()
        best_l, bi_l = best[todo].tolist(), best_idx[todo].tolist()
        vs_l, tol_l, left_l = v_stop[todo].tolist(), tol_a[todo].tolist(), left[todo].tolist()
        jobs: list[_PlanJob] = []
        col_of: list[list[int]] = []
        for k in range(todo.size):
            real = [j for j, on in enumerate(m_l[k]) if on]
            slot = {j: t for t, j in enumerate(real)}
            specs: list[Spec] = []
            cols: list[int] = []
            for v in range(n_ver):
                if av_l[k][v]:
                    idx = tuple(slot[j] for j, on in enumerate(res_l[k][v]) if on)
                    specs.append(Spec(idx, r_l[k][v], lc_l[k][v], c_l[k][v]))
                    cols.append(v)
            b = best_l[k]
            jobs.append(([p_l[k][j] for j in real], th_l[k], ka_l[k], lim_l[k], eps, specs,
                         left_l[k], reuse, cols.index(bi_l[k]) if b > tol_l[k] else None,
                         vs_l[k] - b, tol_l[k]))
            col_of.append(cols)
        plans = _run_plans(jobs, n_jobs)
        for k, (value, first) in enumerate(plans):
            i = int(todo[k])
            g = vs_l[k] - value
            gain[i] = g
            if first is not None and g > tol_l[k]:
                go[i] = True
                col[i] = col_of[k][first]
    return go, col, gain


_PlanJob = tuple[list[float], float, float, float, float, list[Any], int, bool, "int | None",
                 float, float]


def _plan_chunk(jobs: list[_PlanJob]) -> list[tuple[float, int | None]]:
    """Run the scalar planner on a list of rows (also the worker-process entry point)."""
    from amv_calib.gate._planner import plan

    out: list[tuple[float, int | None]] = []
    for probs, theta, kappa, lim, eps, specs, depth, reuse, mfirst, mvalue, tol in jobs:
        pl = plan(probs, theta, kappa, lim, eps, specs, depth=depth, budget=None, reuse=reuse,
                  myopic_first=mfirst, myopic_value=mvalue, tol=tol)
        out.append((pl.value, pl.first))
    return out


#: Fewest planner rows worth starting worker processes for.
PARALLEL_MIN_ROWS: Final = 2000


def _run_plans(jobs: list[_PlanJob], n_jobs: int) -> list[tuple[float, int | None]]:
    if n_jobs <= 1 or len(jobs) < PARALLEL_MIN_ROWS:
        return _plan_chunk(jobs)
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    # The planner is deterministic, so the split does not change any decision.
    k = max(1, -(-len(jobs) // (4 * n_jobs)))
    chunks = [jobs[i : i + k] for i in range(0, len(jobs), k)]
    ctx = multiprocessing.get_context("fork" if "fork" in
                                      multiprocessing.get_all_start_methods() else "spawn")
    with ProcessPoolExecutor(max_workers=n_jobs, mp_context=ctx) as pool:
        parts = list(pool.map(_plan_chunk, chunks))
    return [r for part in parts for r in part]
