"""Non-myopic planning: the exact value of the optimal verification policy.

The value function over beliefs ``b`` (the premises' violation probabilities) and the set
``R`` of verifiers still available is::

    V(b, R) = min( V_stop(b),  min_{v in R} [ lambda c_v + sum_o P(o | b) V(b | o, R - v) ] )

where ``o`` ranges over the ``2^k`` joint outcomes of the ``k`` premises ``v`` resolves (one
conditionally independent signal per premise, ``P(confirm) = (1-p) r + p (1-r)``). The
gate VERIFIES with the minimising first verifier when its value beats stopping.

Work is bounded. States are memoised by which verifiers were used and what they answered,
so the state space of verifiers resolving ``k_1, ..., k_n`` premises has at most
``prod_j (1 + 2^k_j)`` states. The plan is exact when ``n <= MAX_EXACT_VERIFIERS`` (8)
and ``prod_j (1 + 2^k_j) * sum_j 2^k_j <= MAX_WORK`` (8 single-premise verifiers fit).
Beyond that it is a *beam*: the exact plan over the verifiers that fit, chosen so that
every premise keeps its best verifier and then by evidence per cost (``p(1-p)`` times the
signal's log-likelihood ratio, over ``lambda c``), with the myopic rule over all verifiers
as a floor (its choice wins when its one-step value beats the beam's plan).

Two bounds prune without changing the result: every policy loses at least
``P_any * min(theta, kappa)`` (the clairvoyant's loss; ``P_any`` is a martingale under
verification), and a verifier is abandoned as soon as its partial expected loss reaches
the best alternative. The pruned recursion (plain Python) expands at most
``SCALAR_STATES`` states; where pruning does not bite, the same programme runs over all
states at once with numpy (:func:`_exact_arrays`). With ``reuse`` (a verifier may be
called again) the plan is a receding horizon: exact over the next ``H`` calls, ``H`` the
deepest tree with at most ``RECEDING_WORK`` leaves.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Any, Final, NamedTuple

import numpy as np
from numpy.typing import NDArray

__all__ = [
    "MAX_EXACT_VERIFIERS",
    "MAX_WORK",
    "RECEDING_WORK",
    "SCALAR_STATES",
    "Plan",
    "Spec",
    "outcomes",
    "plan",
]

#: Most verifiers the planner treats exactly.
MAX_EXACT_VERIFIERS: Final = 8
#: Bound on states x outcomes per state of an exact plan (3^8 * 16 for 8 one-premise verifiers).
MAX_WORK: Final = 3**8 * 16
#: Bound on the leaves of a receding-horizon plan (verifiers that may be called again).
RECEDING_WORK: Final = 4096


class Spec(NamedTuple):
    """A verifier as the planner sees it (premise positions in premise order)."""

    idx: tuple[int, ...]
    r: float
    lam_cost: float
    cost: float


class Plan(NamedTuple):
    """Result of :func:`plan`.

    ``value`` is the expected loss of the policy found (``<= v_stop``), ``first`` the
    position (in the ``specs`` given) of the verifier to call now, or None to stop, and
    ``exact`` whether the work bound allowed the exact programme.
    """

    value: float
    first: int | None
    exact: bool


def outcomes(
    probs: Sequence[float], q: float, idx: tuple[int, ...], r: float
) -> list[tuple[int, float, float, list[float]]]:
    """Joint outcomes of one verifier: ``(code, probability, q after, posteriors after)``.

    ``q = prod_i (1 - p_i)``. Outcomes are in ``itertools.product`` order over the resolved
    premises (premise order, confirm before refute); ``code`` is the outcome's position in
    that order (bit set = refute, first premise most significant). Outcomes of probability
    0 are left out. ``q`` after an outcome is ``q * prod (r / P(confirm) or (1 - r) /
    P(refute))`` (each factor divided first), the same arithmetic as the one-step VOI.
    """
    s = 1.0 - r
    states: list[tuple[int, float, float, list[float]]] = [(0, 1.0, q, list(probs))]
    for i in idx:
        p = probs[i]
        a = 1.0 - p
        pc = a * r + p * s
        pr = p * r + a * s
        nxt: list[tuple[int, float, float, list[float]]] = []
        for code, w, f, post in states:
            if pc > 0.0:
                c = post.copy()
                c[i] = p * s / pc
                nxt.append((2 * code, w * pc, f * (r / pc), c))
            if pr > 0.0:
                c = post.copy()
                c[i] = p * r / pr
                nxt.append((2 * code + 1, w * pr, f * (s / pr), c))
        states = nxt
    return states


def _work(specs: Sequence[Spec]) -> tuple[int, int]:
    states = 1
    branch = 0
    for sp in specs:
        states *= 1 + (1 << len(sp.idx))
        branch += 1 << len(sp.idx)
    return states, branch


def _score(probs: Sequence[float], sp: Spec) -> float:
    # Evidence per unit of cost: each resolved premise's variance p(1-p) times the signal's
    # log-likelihood ratio (capped, r = 1 is infinitely strong), over lambda c.
    llr = 40.0 if sp.r >= 1.0 else min(40.0, math.log(sp.r / (1.0 - sp.r)))
    evidence = sum(probs[i] * (1.0 - probs[i]) for i in sp.idx) * llr
    return evidence / (sp.lam_cost + 1e-12)


def _beam(probs: Sequence[float], specs: Sequence[Spec]) -> list[int]:
    """Verifiers kept for the exact plan, in their given order.

    First every premise (the most uncertain first) gets its best-scoring verifier, so that
    no premise becomes unverifiable; then the rest join by score, while the set fits
    ``MAX_EXACT_VERIFIERS`` and ``MAX_WORK``.
    """
    order = sorted(range(len(specs)), key=lambda j: (-_score(probs, specs[j]), j))
    keep: list[int] = []

    def fits(j: int) -> bool:
        trial = [*keep, j]
        if len(trial) > MAX_EXACT_VERIFIERS:
            return False
        states, branch = _work([specs[t] for t in trial])
        return states * branch <= MAX_WORK

    covered: set[int] = set()
    for i in sorted(range(len(probs)), key=lambda i: (-probs[i] * (1.0 - probs[i]), i)):
        if i in covered:
            continue
        for j in order:
            if i in specs[j].idx and j not in keep and fits(j):
                keep.append(j)
                covered.update(specs[j].idx)
                break
    for j in order:
        if j not in keep and fits(j):
            keep.append(j)
    return sorted(keep)


def _exact(
    probs: Sequence[float],
    q: float,
    theta: float,
    kappa: float,
    lim: float,
    eps: float,
    specs: Sequence[Spec],
    depth: int,
    budget: float | None,
    tol: float,
    cap: int = 1 << 62,
) -> tuple[float, int | None]:
    """Memoised, pruned recursion in plain Python; raises _TooMuchWork past ``cap`` states.

    Memo keys record each used verifier's outcome code (0 = unused), so a key names one
    belief whatever order the verifiers were used in.
    """
    n = len(specs)
    radix: list[int] = []
    base = 1
    for sp in specs:
        radix.append(base)
        base *= 1 + (1 << len(sp.idx))
    floor = min(theta, kappa)
    memo: dict[int, float] = {}
    left = [cap]

    def expand(probs: list[float], q: float, key: int, rem: int, d: int, b: float, j: int,
               cut: float) -> float:
        # lambda c_j + E_o V(child): exact, or >= cut as soon as the partial sum reaches it
        sp = specs[j]
        acc = sp.lam_cost
        rj = rem & ~(1 << j)
        step = radix[j]
        d1 = d - 1
        b1 = b - sp.cost
        idx = sp.idx
        if len(idx) == 1:  # the common case, unrolled: confirm, then refute
            i = idx[0]
            p = probs[i]
            r = sp.r
            s = 1.0 - r
            a = 1.0 - p
            pc = a * r + p * s
            pr = p * r + a * s
            if pc > 0.0:
                ck = key + step
                got = memo.get(ck)
                if got is None:
                    post = probs.copy()
                    post[i] = p * s / pc
                    got = value(post, q * (r / pc), ck, rj, d1, b1)
                acc += pc * got
            if pr > 0.0 and acc < cut:
                ck = key + 2 * step
                got = memo.get(ck)
                if got is None:
                    post = probs.copy()
                    post[i] = p * r / pr
                    got = value(post, q * (s / pr), ck, rj, d1, b1)
                acc += pr * got
            return acc
        for code, w, qo, post in outcomes(probs, q, idx, sp.r):
            ck = key + step * (code + 1)
            got = memo.get(ck)
            if got is None:
                got = value(post, qo, ck, rj, d1, b1)
            acc += w * got
            if acc >= cut:
                break
        return acc

    def value(probs: list[float], q: float, key: int, rem: int, d: int, b: float) -> float:
        left[0] -= 1
        if left[0] < 0:
            raise _TooMuchWork
        h = 1.0 - q
        rx = theta * h
        best = rx if (rx <= lim and h <= eps) else kappa
        if d > 0 and rem:
            lb = h * floor  # no policy loses less than the clairvoyant
            for j in range(n):
                if (rem >> j) & 1:
                    sp = specs[j]
                    if sp.lam_cost + lb < best and sp.cost <= b:
                        got = expand(probs, q, key, rem, d, b, j, best)
                        if got < best:
                            best = got
        memo[key] = best
        return best

    # the root: every verifier within tol of the best gets an exact value, so that the
    # first of the (near-)tied optimal first steps is chosen, as the array version does
    start = list(probs)
    b0 = float("inf") if budget is None else budget
    h0 = 1.0 - q
    rx0 = theta * h0
    v_stop = rx0 if (rx0 <= lim and h0 <= eps) else kappa
    best = v_stop
    qs: dict[int, float] = {}
    rem0 = (1 << n) - 1
    if depth > 0:
        lb0 = h0 * floor
        for j in range(n):
            sp = specs[j]
            if sp.lam_cost + lb0 <= best + tol and sp.cost <= b0:
                got = expand(start, q, 0, rem0, depth, b0, j, best + tol)
                if got <= best + tol:
                    qs[j] = got
                    best = min(best, got)
    if not best < v_stop:
        return best, None
    return best, min(j for j, v in qs.items() if v <= best + tol)


def _receding(
    probs: Sequence[float],
    q: float,
    theta: float,
    kappa: float,
    lim: float,
    eps: float,
    specs: Sequence[Spec],
    depth: int,
    budget: float | None,
) -> tuple[float, int | None]:
    branch = sum(1 << len(sp.idx) for sp in specs) or 1
    horizon = 1
    while horizon < depth and branch ** (horizon + 1) <= RECEDING_WORK:
        horizon += 1
    horizon = min(horizon, depth)
    floor = min(theta, kappa)
    memo: dict[tuple[tuple[float, ...], int, float], float] = {}

    def value(probs: list[float], q: float, d: int, b: float, root: bool
              ) -> tuple[float, int | None]:
        h = 1.0 - q
        rx = theta * h
        best = rx if (rx <= lim and h <= eps) else kappa
        first: int | None = None
        if d > 0:
            lb = h * floor
            for j, sp in enumerate(specs):
                acc = sp.lam_cost
                if acc + lb >= best or sp.cost > b:
                    continue
                for _, w, qo, post in outcomes(probs, q, sp.idx, sp.r):
                    ck = (tuple(post), d - 1, b - sp.cost)
                    got = memo.get(ck)
                    if got is None:
                        got = value(post, qo, d - 1, b - sp.cost, False)[0]
                        memo[ck] = got
                    acc += w * got
                    if acc >= best:
                        break
                else:
                    if acc < best:
                        best = acc
                        first = j
        return best, first

    return value(list(probs), q, horizon, float("inf") if budget is None else budget, True)


class _TooMuchWork(Exception):
    pass


# A finite stand-in for the infinite log-likelihood ratio of r = 1: exp(-800) is exactly 0
# in float64, so beliefs still reach 0 or 1, and a contradiction (reached only through an
# outcome of probability 0) stays finite instead of becoming inf - inf.
_LLR_CAP: Final = 800.0


def _expit(x: NDArray[np.float64]) -> NDArray[np.float64]:
    out: NDArray[np.float64] = np.exp(-np.logaddexp(0.0, -x))
    return out


@functools.lru_cache(maxsize=64)
def _layout(widths: tuple[int, ...]) -> dict[str, Any]:
    """The state space of verifiers with ``widths[j] = 1 + 2^k_j`` digits, sorted by level.

    Depends on the verifiers' shapes only, so it is built once per shape. States are
    ordered by the number of verifiers used, so each level is a contiguous block.
    """
    n = len(widths)
    w = np.asarray(widths, dtype=np.int64)
    radix = np.ones(n, dtype=np.int64)
    radix[1:] = np.cumprod(w[:-1])
    total = int(np.prod(w))
    ids = np.arange(total, dtype=np.int64)
    digits = (ids[:, None] // radix[None, :]) % w[None, :]
    used = (digits > 0).sum(axis=1)
    order = np.argsort(used, kind="stable")
    pos = np.empty(total, dtype=np.int64)
    pos[order] = np.arange(total)
    digits = digits[order]
    used = used[order]
    width = int(w.max()) - 1
    codes = np.arange(width)
    # child of (state, verifier, outcome), as a position; 0 where undefined (weight 0 there)
    raw = ids[order][:, None, None] + radix[None, :, None] * (codes[None, None, :] + 1)
    ok = (digits[:, :, None] == 0) & (codes[None, None, :] < (w - 1)[None, :, None])
    child = np.where(ok, pos[np.where(ok, raw, 0)], 0)
    bounds = np.searchsorted(used, np.arange(n + 2))
    for arr in (digits, used, child, bounds):
        arr.setflags(write=False)
    return {"digits": digits, "used": used, "child": child, "bounds": bounds,
            "total": total, "width": width}


def _exact_arrays(
    probs: Sequence[float],
    theta: float,
    kappa: float,
    lim: float,
    eps: float,
    specs: Sequence[Spec],
    depth: int,
    budget: float | None,
    tol: float,
) -> tuple[float, int | None]:
    """The same programme over every state at once, with numpy, level by level.

    A state is a digit per verifier (0 = unused, ``1 + o`` = used with outcome ``o``); all
    ``prod (1 + 2^k_j)`` of them are enumerated (:func:`_layout`). Beliefs come from
    log-odds, which add up whatever the order of the signals: ``logit p_i = logit p0_i
    +- llr_j`` per signal (``llr = ln(r / (1 - r))``, infinite for ``r = 1``). A state
    reachable only through an outcome of probability 0 gets a NaN belief and weight 0.
    Children have one more digit set, so levels are solved from the deepest up.
    """
    n = len(specs)
    lay = _layout(tuple(1 + (1 << len(sp.idx)) for sp in specs))
    digits, child, bounds = lay["digits"], lay["child"], lay["bounds"]
    total, width = lay["total"], lay["width"]
    p0 = np.asarray(probs, dtype=np.float64)
    single = all(len(sp.idx) == 1 for sp in specs)
    with np.errstate(divide="ignore", invalid="ignore"):
        logit0 = np.log(p0) - np.log1p(-p0)
        if single:
            # one premise per verifier (the common case): one gather and one product
            llr = np.array([_LLR_CAP if sp.r >= 1.0 else math.log(sp.r) - math.log1p(-sp.r)
                            for sp in specs])
            table = np.stack([np.zeros(n), -llr, llr], axis=1)  # digit 0, confirm, refute
            inc = table[np.arange(n)[None, :], digits]
            onto = np.zeros((n, len(probs)))
            onto[np.arange(n), [sp.idx[0] for sp in specs]] = 1.0
            lo = logit0 + inc @ onto
        else:
            lo = np.empty((total, len(probs)))
            lo[:] = logit0
            for j, sp in enumerate(specs):
                k = len(sp.idx)
                lj = np.inf if sp.r >= 1.0 else math.log(sp.r) - math.log1p(-sp.r)
                codes = np.arange(1 << k)
                for t, i in enumerate(sp.idx):
                    tab = np.zeros((1 << k) + 1)
                    tab[1:] = np.where((codes >> (k - 1 - t)) & 1, lj, -lj)
                    lo[:, i] += tab[digits[:, j]]
        p = np.exp(-np.logaddexp(0.0, -lo))
    p[0] = p0  # the root keeps the given beliefs exactly (expit(logit p) is off by ulps)
    bad = np.isnan(p).any(axis=1)
    if bad.any():
        p[bad] = 0.0
    q = np.prod(1.0 - p, axis=1)
    h = 1.0 - q
    rx = theta * h
    value = np.where((rx <= lim) & (h <= eps), rx, kappa)
    value[bad] = 0.0
    if single:
        pp = p[:, [sp.idx[0] for sp in specs]]
        rr = np.array([sp.r for sp in specs])
        weights = np.stack([(1.0 - pp) * rr + pp * (1.0 - rr),
                            pp * rr + (1.0 - pp) * (1.0 - rr)], axis=2)
    else:
        weights = np.zeros((total, n, width))
        for j, sp in enumerate(specs):
            k = len(sp.idx)
            r = sp.r
            codes = np.arange(1 << k)
            w = np.ones((total, 1 << k))
            for t, i in enumerate(sp.idx):
                pi = p[:, i:i + 1]
                pc = (1.0 - pi) * r + pi * (1.0 - r)
                pr = pi * r + (1.0 - pi) * (1.0 - r)
                w *= np.where((((codes >> (k - 1 - t)) & 1) == 1)[None, :], pr, pc)
            weights[:, j, :1 << k] = w
    if bad.any():
        weights[bad] = 0.0
    avail = digits == 0
    if budget is not None:
        costs = np.array([sp.cost for sp in specs])
        spent = (~avail * costs[None, :]).sum(axis=1)
        avail = avail & (spent[:, None] + costs[None, :] <= budget)
    lam_cost = np.array([sp.lam_cost for sp in specs])
    root_q = np.full(n, np.inf)
    v_stop = float(value[0])
    for level in range(min(n, depth) - 1, -1, -1):
        a, b = int(bounds[level]), int(bounds[level + 1])
        qv = lam_cost + (weights[a:b] * value[child[a:b]]).sum(axis=2)
        qv = np.where(avail[a:b], qv, np.inf)
        value[a:b] = np.minimum(value[a:b], qv.min(axis=1))
        if level == 0:
            root_q = qv[0]
    best = float(value[0])
    if not best < v_stop:
        return best, None
    return best, int(np.flatnonzero(root_q <= best + tol)[0])


#: States the plain-Python recursion may expand before the array version takes over.
SCALAR_STATES: Final = 48


def _solve(
    probs: Sequence[float],
    q: float,
    theta: float,
    kappa: float,
    lim: float,
    eps: float,
    specs: Sequence[Spec],
    depth: int,
    budget: float | None,
    tol: float,
) -> tuple[float, int | None]:
    # The pruned recursion is fastest when pruning bites (most actions); where it would
    # expand most of the state space, numpy over all states at once is faster.
    try:
        return _exact(probs, q, theta, kappa, lim, eps, specs, depth, budget, tol,
                      cap=SCALAR_STATES)
    except _TooMuchWork:
        return _exact_arrays(probs, theta, kappa, lim, eps, specs, depth, budget, tol)


def plan(
    probs: Sequence[float],
    theta: float,
    kappa: float,
    lim: float,
    eps: float,
    specs: Sequence[Spec],
    *,
    depth: int,
    budget: float | None = None,
    reuse: bool = False,
    myopic_first: int | None = None,
    myopic_value: float | None = None,
    tol: float = 0.0,
) -> Plan:
    """Plan verifications for one action.

    Parameters
    ----------
    probs : sequence of float
        Current violation probabilities, in premise order.
    theta, kappa : float
        Loss of a harmful execution, cost of abstaining.
    lim, eps : float
        Screening: admissible iff ``theta * P_any <= lim`` (``min(delta, kappa)``) and
        ``P_any <= eps``.
    specs : sequence of Spec
        The available verifiers; ties go to the earliest.
    depth : int
        Verifications left (``max_verifications`` minus those made).
    budget : float, optional
        Execution cost left; a verifier costing more is not called.
    reuse : bool, default False
        Whether a verifier may be called again (receding-horizon plan).
    myopic_first, myopic_value : optional
        The myopic rule's choice and the expected loss of taking it (``v_stop - VOI``),
        used as the floor of a beam plan.
    tol : float, default 0
        First steps whose values lie within ``tol`` of the best count as tied; the
        earliest of them is chosen (orders of verifying the same premises often tie).
    """
    q = 1.0
    for p in probs:
        q *= 1.0 - p
    if depth <= 0 or not specs:
        h = 1.0 - q
        rx = theta * h
        return Plan(rx if (rx <= lim and h <= eps) else kappa, None, True)
    if reuse:
        value, first = _receding(probs, q, theta, kappa, lim, eps, specs, depth, budget)
        return Plan(value, first, False)
    states, branch = _work(specs)
    if len(specs) <= MAX_EXACT_VERIFIERS and states * branch <= MAX_WORK:
        value, first = _solve(probs, q, theta, kappa, lim, eps, specs, depth, budget, tol)
        return Plan(value, first, True)
    # beam: an exact plan over the verifiers _beam keeps, floored by the myopic rule
    keep = _beam(probs, specs)
    value, first = _solve(probs, q, theta, kappa, lim, eps, [specs[t] for t in keep], depth,
                          budget, tol)
    mapped = None if first is None else keep[first]
    if myopic_first is not None and myopic_value is not None and myopic_value < value:
        return Plan(myopic_value, myopic_first, False)
    return Plan(value, mapped, False)
