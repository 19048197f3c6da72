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
    q = np.ones(p.shape[0], dtype=np.float64)
    for j in range(p.shape[1]):
        q = np.where(mask[:, j], q * (1.0 - p[:, j]), q)
    return q


def _p_any_seed(p: FloatArray, mask: BoolArray) -> FloatArray:
    """``P_any`` accumulated as the seed does: ``acc = 1 - (1 - acc)(1 - p)``."""
    acc = np.zeros(p.shape[0], dtype=np.float64)
    for j in range(p.shape[1]):
        acc = np.where(mask[:, j], 1.0 - (1.0 - acc) * (1.0 - p[:, j]), acc)
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
        raise ValueError(f"{name}[{', '.join(map(str, idx))}]={arr[idx]!r} must be {rule}")


# -- the planners -----------------------------------------------------------------------------


def _myopic_voi(
    gate: _GateLike,
    p: FloatArray,
    mask: BoolArray,
    theta: FloatArray,
    kappa: FloatArray,
    resolves: BoolArray,
    cost: FloatArray,
    rel: FloatArray,
    avail: BoolArray,
    q: FloatArray,
    v_stop: FloatArray,
) -> FloatArray:
    """One-step VOI of every verifier, shape (n, V); ``-inf`` where unavailable.

    ``mode="amv"``: the arithmetic the ``_engine`` module docstring fixes: outcomes in
    product order, ``w`` and ``q_o`` multiplied premise by premise (``q_o *= r / Pc``, the
    factor divided first), zero-probability outcomes skipped. ``mode="seed"``: the seed's
    first-premise update.
    """
    n, n_ver = cost.shape
    lam = float(gate.lambda_cost_scale)
    eps = float(gate.epsilon_harm_bound)
    lim = _lim(gate, kappa)
    voi = np.full((n, n_ver), -np.inf, dtype=np.float64)
    if gate.mode != "seed":
        # every (row, verifier) pair at once, grouped by how many premises it resolves
        rows, cols = np.nonzero(avail)
        if rows.size:
            voi[rows, cols] = _amv_voi(p, resolves[rows, cols] & mask[rows], rows,
                                       theta, kappa, lim, eps, rel[rows, cols],
                                       lam * cost[rows, cols], q, v_stop)
        return voi
    rows_all = np.arange(n)
    with np.errstate(divide="ignore", invalid="ignore"):
        for v in range(n_ver):
            on = avail[:, v]
            if not np.any(on):
                continue
            target = resolves[:, v, :] & mask
            r = rel[:, v]
            lam_c = lam * cost[:, v]
            first = np.argmax(target, axis=1)
            has = target[rows_all, first]
            pt = p[rows_all, first]
            pc = (1.0 - pt) * r + pt * (1.0 - r)
            pr = 1.0 - pc
            one = np.zeros_like(target)
            one[rows_all[has], first[has]] = True
            up = np.where(one, (pt * (1.0 - r) / pc)[:, None], p)
            down = np.where(one, (pt * r / pr)[:, None], p)
            vc, _, _ = _screen(_p_any_seed(up, mask), theta, kappa, lim, eps)
            vr, _, _ = _screen(_p_any_seed(down, mask), theta, kappa, lim, eps)
            # a zero-probability outcome is skipped (the seed's 0 * kappa adds exactly 0)
            e = np.where(pc != 0.0, pc * vc, 0.0)
            e = np.where(pr != 0.0, e + pr * vr, e)
            val = np.where(has, (v_stop - e) - lam_c, -lam * cost[:, v])
            voi[:, v] = np.where(on, val, -np.inf)
    return voi


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
    avail = (
        np.ones((n, n_ver), dtype=bool)
        if available is None
        else _as("available", available, bool, (n, n_ver)).copy()
    )
    left = (
        np.full(n, int(gate.max_verifications), dtype=np.intp)
        if budget is None
        else _as("budget", budget, np.intp, (n,))
    )
    everywhere = np.ones(n, dtype=bool)
    _check_range("p", pa, mask, (pa >= 0.0) & (pa <= 1.0), "in [0, 1]")
    _check_range("theta", th, everywhere, (th > 0.0) & np.isfinite(th), "> 0 and finite")
    _check_range("kappa", ka, everywhere, (ka > 0.0) & np.isfinite(ka), "> 0 and finite")
    _check_range("cost", co, avail, (co >= 0.0) & np.isfinite(co), ">= 0 and finite")
    _check_range("reliability", rel, avail, (rel > 0.5) & (rel <= 1.0), "in (0.5, 1]")
    res = res & mask[:, None, :]

    seed_mode = gate.mode == "seed"
    eps = float(gate.epsilon_harm_bound)
    lim = _lim(gate, ka)
    if seed_mode:
        q = np.ones(n, dtype=np.float64)
        h = _p_any_seed(pa, mask)
    else:
        q = _q(pa, mask)
        h = 1.0 - q
    v_stop, r_exp, adm = _screen(h, th, ka, lim, eps)
    regime = np.where(adm, PROCEED, ABSTAIN).astype(np.int8)
    chosen = np.full(n, -1, dtype=np.intp)
    best = np.full(n, -np.inf, dtype=np.float64)
    if gate.refusal is not None:
        # fail closed as the scalar gate does: P_any = 1, V_stop = kappa
        return BatchDecision(
            regime=np.full(n, ABSTAIN, dtype=np.int8), verifier=chosen, voi=best,
            v_stop=ka.copy(), r_expected=th.copy(), h_harm=np.ones(n), admissible=
            np.zeros(n, dtype=bool),
        )
    avail &= (left > 0)[:, None]
    if n_ver > 0 and np.any(avail):
        voi = _myopic_voi(gate, pa, mask, th, ka, res, co, rel, avail, q, v_stop)
        # argmax keeps the first maximum, like the strict ``voi > best`` scans
        idx = np.argmax(voi, axis=1)
        best = voi[np.arange(n), idx]
        tol = 0.0 if seed_mode else VOI_TOLERANCE * (th + ka)
        if gate.planner == "lookahead" and not seed_mode:
            go, idx, best = _lookahead(gate, pa, mask, th, ka, lim, eps, res, co, rel, avail,
                                       left, q, v_stop, best, idx, tol, n_jobs)
        else:
            go = best > tol
        regime = np.where(go, VERIFY, regime).astype(np.int8)
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
