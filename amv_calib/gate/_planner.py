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
signal's log-likelihood ratio with the portable ``log``, over ``lambda c``), with the
myopic rule over all verifiers as a floor (its choice wins when its one-step value beats
the beam's plan).

The verifiers a plan is given are those the gate enumerated (:func:`enumerable`: their
``sum_j 2^k_j`` is at most ``MAX_OUTCOMES``, which :func:`plan` checks), so every plan values
at most ``MAX_WORK`` beliefs (:attr:`Plan.states`): an exact plan at most ``prod_j (1 +
2^k_j) <= MAX_WORK / sum_j 2^k_j``; a receding horizon at most ``sum_t branch^t``
(``branch^H <= RECEDING_WORK``, or ``H = 1`` and ``branch <= MAX_OUTCOMES``; ``H <=
MAX_HORIZON``), under ``2 * RECEDING_WORK``.

Two bounds prune without changing the result: every policy loses at least
``P_any * min(theta, kappa)`` (the clairvoyant's loss; ``P_any`` is a martingale under
verification), and a verifier is abandoned as soon as its partial expected loss reaches
the best alternative. The pruned, memoised recursion :func:`_exact` is the one exact
solver. With ``reuse`` (a verifier may be called again) the plan is a receding horizon:
exact over the next ``H`` calls, ``H`` the deepest tree with at most ``RECEDING_WORK``
leaves.

This module is the readable reference of the planner: the compiled batch engine
(:mod:`amv_calib.gate._compiled`) runs the same programme, operation for operation (same
traversal order, memo, pruning, ties and tolerance), and tests/gate/test_compiled.py holds the
two equal bit for bit.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Final, NamedTuple

from amv_calib.contract import portable_log

__all__ = [
    "MAX_EXACT_VERIFIERS",
    "MAX_HORIZON",
    "MAX_OUTCOMES",
    "MAX_OUTCOMES_LOG2",
    "MAX_WORK",
    "RECEDING_WORK",
    "Plan",
    "Spec",
    "enumerable",
    "outcomes",
    "plan",
]

#: Most verifiers the planner treats exactly.
MAX_EXACT_VERIFIERS: Final = 8
#: Bound on states x outcomes per state of an exact plan (3^8 * 16 for 8 one-premise verifiers).
MAX_WORK: Final = 3**8 * 16
#: Bound on the leaves of a receding-horizon plan (verifiers that may be called again).
RECEDING_WORK: Final = 4096
#: Bound on the joint outcomes one decision enumerates for its one-step VOIs, summed over the
#: verifiers offered (``sum_j 2^k_j``); the verifiers past it are left out (:func:`enumerable`).
MAX_OUTCOMES: Final = 4096
#: ``log2(MAX_OUTCOMES)``: a verifier resolving more premises than this is never enumerated.
MAX_OUTCOMES_LOG2: Final = 12
#: Deepest receding horizon. Only a plan whose verifiers resolve no premise (one outcome
#: each) would go deeper within ``RECEDING_WORK``; it learns nothing by doing so.
MAX_HORIZON: Final = 12


class Spec(NamedTuple):
    """A verifier as the planner sees it (premise positions in premise order)."""

    idx: tuple[int, ...]
    r: float
    lam_cost: float
    cost: float


class _Task(NamedTuple):
    """One planning problem: the action's losses, the screen, the verifiers and the limits
    (the arguments of :func:`plan` the solvers share)."""

    theta: float
    kappa: float
    lim: float
    eps: float
    specs: Sequence[Spec]
    depth: int
    budget: float | None
    tol: float


class Plan(NamedTuple):
    """Result of :func:`plan`.

    ``value`` is the expected loss of the policy found (``<= v_stop``), ``first`` the
    position (in the ``specs`` given) of the verifier to call now, or None to stop,
    ``exact`` whether the work bound allowed the exact programme, and ``states`` the
    number of beliefs the plan valued (its memo's entries; at most ``MAX_WORK``).
    """

    value: float
    first: int | None
    exact: bool
    states: int = 0


def enumerable(ks: Sequence[int]) -> list[bool]:
    """Which verifiers, resolving ``ks[j]`` premises each, a decision enumerates.

    The work bound of the one-step VOIs: the verifiers are taken in order of ``(k,
    position)`` and each is enumerated while the running total of their ``2^k`` joint
    outcomes stays within ``MAX_OUTCOMES``; once one does not fit, no later one does (its
    ``k`` is as large). The cheapest verifiers to value go first, so that one verifier over
    many premises cannot crowd out many over one. Within the bound (``sum_j 2^k_j <=
    MAX_OUTCOMES``) every verifier is enumerated.
    """
    out = [False] * len(ks)
    left = MAX_OUTCOMES
    for j in sorted(range(len(ks)), key=lambda j: (ks[j], j)):
        if ks[j] > MAX_OUTCOMES_LOG2 or (1 << ks[j]) > left:
            break
        left -= 1 << ks[j]
        out[j] = True
    return out


def _check_bound(specs: Sequence[Spec]) -> None:
    """Refuse verifiers past the work bound: the gate never gives them to a plan."""
    total = 0
    for sp in specs:
        total += 1 << len(sp.idx)
    if total > MAX_OUTCOMES:
        raise ValueError(
            f"the verifiers have {total} joint outcomes, more than MAX_OUTCOMES = "
            f"{MAX_OUTCOMES}; plan only those that enumerable() keeps"
        )


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
    # (A plain loop, not sum(): from Python 3.12 on sum() of floats is compensated, and the
    # compiled engine must add in the same order on every version; the portable log gives
    # the compiled engine's and the TypeScript planner's bits, so ties break alike.)
    llr = 40.0 if sp.r >= 1.0 else min(40.0, portable_log(sp.r / (1.0 - sp.r)))
    var = 0.0
    for i in sp.idx:
        var += probs[i] * (1.0 - probs[i])
    return var * llr / (sp.lam_cost + 1e-12)


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


def _exact(probs: Sequence[float], q: float, task: _Task) -> tuple[float, int | None, int]:
    """The exact plan: ``(value, first, states)``, ``first`` None when stopping is best.

    A memoised, pruned recursion, depth first over the verifiers in the order given and
    their outcomes in :func:`outcomes` order. Memo keys record each used verifier's outcome
    code (0 = unused), so a key names one belief whatever order the verifiers were used in;
    the first path to reach a key computes its value (the beliefs reached by different
    orders agree up to rounding), which is why the traversal order is part of the result.
    """
    theta, kappa, lim, eps, specs = task.theta, task.kappa, task.lim, task.eps, task.specs
    n = len(specs)
    radix: list[int] = []
    base = 1
    for sp in specs:
        radix.append(base)
        base *= 1 + (1 << len(sp.idx))
    floor = min(theta, kappa)
    memo: dict[int, float] = {}

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
        if len(idx) == 1:  # the common case, without outcomes()' lists: confirm, then refute
            i = idx[0]
            p = probs[i]
            r = sp.r
            s = 1.0 - r
            a = 1.0 - p
            for code, w, like_p, like_q in ((1, a * r + p * s, s, r), (2, p * r + a * s, r, s)):
                if w > 0.0:
                    ck = key + code * step
                    got = memo.get(ck)
                    if got is None:
                        post = probs.copy()
                        post[i] = p * like_p / w
                        got = value(post, q * (like_q / w), ck, rj, d1, b1)
                    acc += w * got
                    if acc >= cut:
                        break
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

    value_, first = _root(probs, q, task, expand)
    return value_, first, len(memo)


def _root(probs: Sequence[float], q: float, task: _Task,
          expand: Callable[[list[float], float, int, int, int, float, int, float], float],
          ) -> tuple[float, int | None]:
    """The root of :func:`_exact`: every verifier within ``tol`` of the best gets an exact
    value, so that the first of the (near-)tied optimal first steps is chosen (orders of
    verifying the same premises tie up to rounding)."""
    theta, kappa, lim, eps, specs = task.theta, task.kappa, task.lim, task.eps, task.specs
    depth, budget, tol = task.depth, task.budget, task.tol
    n = len(specs)
    start = list(probs)
    b0 = float("inf") if budget is None else budget
    h0 = 1.0 - q
    rx0 = theta * h0
    v_stop = rx0 if (rx0 <= lim and h0 <= eps) else kappa
    best = v_stop
    qs: dict[int, float] = {}
    rem0 = (1 << n) - 1
    if depth > 0:
        lb0 = h0 * min(theta, kappa)
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


def _receding(probs: Sequence[float], q: float, task: _Task
              ) -> tuple[float, int | None, int]:
    theta, kappa, lim, eps, specs = task.theta, task.kappa, task.lim, task.eps, task.specs
    depth, budget = task.depth, task.budget
    branch = sum(1 << len(sp.idx) for sp in specs) or 1
    horizon = 1
    while horizon < min(depth, MAX_HORIZON) and branch ** (horizon + 1) <= RECEDING_WORK:
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

    best, first = value(list(probs), q, horizon, float("inf") if budget is None else budget,
                        True)
    return best, first, len(memo)


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
        The available verifiers; ties go to the earliest. Their joint outcomes ``sum_j
        2^k_j`` must be within ``MAX_OUTCOMES`` (ValueError otherwise; the gate plans only
        the verifiers :func:`enumerable` keeps).
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
    _check_bound(specs)
    q = 1.0
    for p in probs:
        q *= 1.0 - p
    if depth <= 0 or not specs:
        h = 1.0 - q
        rx = theta * h
        return Plan(rx if (rx <= lim and h <= eps) else kappa, None, True)
    task = _Task(theta, kappa, lim, eps, specs, depth, budget, tol)
    if reuse:
        value, first, n_states = _receding(probs, q, task)
        return Plan(value, first, False, n_states)
    states, branch = _work(specs)
    if len(specs) <= MAX_EXACT_VERIFIERS and states * branch <= MAX_WORK:
        value, first, n_states = _exact(probs, q, task)
        return Plan(value, first, True, n_states)
    # beam: an exact plan over the verifiers _beam keeps, floored by the myopic rule
    keep = _beam(probs, specs)
    value, first, n_states = _exact(probs, q, task._replace(specs=[specs[t] for t in keep]))
    mapped = None if first is None else keep[first]
    if myopic_first is not None and myopic_value is not None and myopic_value < value:
        return Plan(myopic_value, myopic_first, False, n_states)
    return Plan(value, mapped, False, n_states)
