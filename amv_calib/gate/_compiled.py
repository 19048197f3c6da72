"""The compiled batch engine: the gate's decisions for many actions at once, with numba.

One engine covers every setting of the batch gate: the myopic rule in ``mode="amv"`` and
``mode="seed"``, and the lookahead planner (the exact memoised, pruned recursion; the beam
with its myopic floor past the work bound; the receding horizon when verifiers may be called
again; verifiers resolving several premises with their ``2^k`` joint outcomes; verifications
left per row; availability masks; padded premise slots), the harm price (``theta + mu`` per
row) and the decision work bound (``_engine``, "Work bound"): a row whose verifiers' outcomes
pass ``MAX_OUTCOMES`` gets its VOIs again from :func:`_bounded_vois`, which counts the
verifiers per ``k`` (:func:`_cut`) to find the ones ``enumerable`` keeps, as
``Gate._decide_bounded`` does.

It is a transcription of the scalar reference engine, :mod:`amv_calib.gate._engine` and
:mod:`amv_calib.gate._planner`, not a second design: every floating-point expression keeps
the reference's operands and order, and the recursions visit the same states in the same
order with the same memo, pruning, ties and tolerance. The results are therefore the same
bit for bit (tests/gate/test_compiled.py checks it with hypothesis against ``Gate.evaluate``). The
functions are compiled without ``fastmath``, so LLVM neither reassociates sums nor contracts
``a * b + c`` into a fused multiply-add, and ``error_model="numpy"`` only drops the
zero-division checks (the reference guards every division).

The planner's recursions run on explicit stacks, one frame per level (the arrays ``lvp``,
``lvf`` and ``lvi``: a frame's beliefs, floats and integers): numba compiles loops far
better than recursion, and the frames make the visiting order explicit. The exact
planner's memo is a dense table indexed by the reference's memo key (each used verifier's
outcome code in a mixed radix) with a generation stamp per entry, so it is never cleared;
the receding horizon's memo, keyed by the beliefs themselves, is an open-addressing hash
table with the reference's ``==`` on floats.

The functions run without numba's runtime (NRT): with it, every array passed to a function
or sliced is reference-counted with an atomic operation, which cost more than the
arithmetic. So nothing is allocated in compiled code; :func:`_work` makes the work arrays
(one set per thread, kept and reused). The hot helpers are inlined by numba (a call between
compiled functions is not inlined by LLVM); calls of more than 30 arguments cannot be, so
rows travel in tuples there. The myopic rule and the planner have separate entry points
(:func:`_rows_myopic`, :func:`_rows_lookahead`), compiled on first use: about 5 s cold for
the myopic rule, about 30 s for the planner on a shared 2-core machine.

Importing this module imports numba (``import amv_calib.gate`` does not: the batch gate
imports this module on its first call). The functions are compiled on first use and cached
on disk (``cache=True``).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from typing import Any, Final, TypeVar, cast

import numpy as np
from numba import njit
from numpy.typing import NDArray

from amv_calib.contract import portable_exp, portable_log, portable_log1p
from amv_calib.gate._model import VOI_TOLERANCE
from amv_calib.gate._planner import (
    MAX_EXACT_VERIFIERS,
    MAX_HORIZON,
    MAX_OUTCOMES,
    MAX_OUTCOMES_LOG2,
    MAX_WORK,
    RECEDING_WORK,
    Plan,
    Spec,
    _check_bound,
)

__all__ = ["PARALLEL_MIN_ROWS", "calibrate_rows", "decide_rows", "plan"]

_JIT: Final[dict[str, Any]] = {"cache": True, "nogil": True, "error_model": "numpy",
                               "_nrt": False}

_F = TypeVar("_F", bound=Callable[..., Any])


def _jit(fn: _F) -> _F:
    """``numba.njit`` with the engine's options: no fastmath, the on-disk cache, no GIL,
    no zero-division checks and no NRT (no reference counting, so no array is allocated
    in compiled code: the caller hands every work array in)."""
    return cast(_F, njit(**_JIT)(fn))


def _inline(fn: _F) -> _F:
    """:func:`_jit`, inlined into its callers by numba. A call between compiled functions
    is not inlined by LLVM, and passing a dozen arrays (each a struct of pointers, shape
    and strides) costs more than a planner step; the hot helpers are therefore inlined."""
    return cast(_F, njit(inline="always", **_JIT)(fn))


# The portable log, log1p and exp (amv_calib.contract._portable_math): the very Python
# functions compiled, so the batch gate computes the scalar gate's bits (and TypeScript's).
# numba's on-disk cache does not see a change of that module (only of the file of the
# function it compiles): a change there needs the cache cleared, as the module says.
_log = _inline(portable_log)
_log1p = _inline(portable_log1p)
_exp = _inline(portable_exp)

_INF: Final = math.inf
_NEG_INF: Final = -math.inf

# regime codes (amv_calib.gate._engine.REGIME_CODES)
_PROCEED: Final = 0
_VERIFY: Final = 1
_ABSTAIN: Final = 2

# columns of a verifier's floats: reliability, lambda * cost, cost
_R: Final = 0
_LC: Final = 1
_C: Final = 2

# a planner frame's floats: belief's q, cost budget left, best value so far, clairvoyant
# bound, partial expected loss of the verifier being expanded, its cut-off, the weight of
# the outcome whose value is being computed
_Q: Final = 0
_B: Final = 1
_BEST: Final = 2
_LB: Final = 3
_ACC: Final = 4
_CUT: Final = 5
_W: Final = 6
_NF: Final = 7

# a planner frame's integers: memo key, verifiers left (bit mask), calls left, next verifier
# to try, verifier being expanded, its next outcome code, first call (receding root)
_KEY: Final = 0
_REM: Final = 1
_D: Final = 2
_VJ: Final = 3
_EJ: Final = 4
_OC: Final = 5
_FIRST: Final = 6
_NI: Final = 7

# rows of the integer and float work arrays of the beam and the exact plan's root
_KEEP: Final = 0
_ORDER: Final = 1
_PORDER: Final = 2
_COVERED: Final = 3
_RADIX: Final = 4
_NWI: Final = 5
_SKEY: Final = 0
_PKEY: Final = 1
_QS: Final = 2
_NWF: Final = 3

# states of the planners' frame machines
_EXPAND: Final = 0
_SCAN: Final = 1

# -- the screen and one verifier's outcomes -------------------------------------------------


@_inline
def _screen(h: float, theta: float, kappa: float, lim: float, eps: float) -> float:
    """``V_stop`` at harm ``h``: ``R = theta * h`` if admissible, else ``kappa``."""
    rx = theta * h
    return rx if (rx <= lim and h <= eps) else kappa


@_inline
def _outcome(probs: Any, q: float, idx: Any, k: int, r: float, code: int) -> Any:
    """``(possible, w, q_o)`` of outcome ``code`` of a verifier resolving ``idx[:k]``.

    The products of :func:`amv_calib.gate._planner.outcomes` (and of the engine's
    ``_expect``): ``w`` from 1.0 and ``q_o`` from ``q``, premise by premise, the factor
    ``r / Pc`` or ``(1 - r) / Pr`` divided first. Impossible (a factor of probability 0)
    outcomes are left out, as the reference drops them.
    """
    s = 1.0 - r
    w = 1.0
    f = q
    for t in range(k):
        p = probs[idx[t]]
        a = 1.0 - p
        if (code >> (k - 1 - t)) & 1:
            pr = p * r + a * s
            if not pr > 0.0:
                return False, w, f
            w = w * pr
            f = f * (s / pr)
        else:
            pc = a * r + p * s
            if not pc > 0.0:
                return False, w, f
            w = w * pc
            f = f * (r / pc)
    return True, w, f


@_inline
def _posterior(probs: Any, m: int, idx: Any, k: int, r: float, code: int, post: Any) -> None:
    """Into ``post``: the beliefs after outcome ``code`` (a possible one), as
    :func:`amv_calib.gate._planner.outcomes` computes them (``p (1-r) / Pc``, ``p r / Pr``)."""
    s = 1.0 - r
    for t in range(m):
        post[t] = probs[t]
    for t in range(k):
        i = idx[t]
        p = probs[i]
        a = 1.0 - p
        if (code >> (k - 1 - t)) & 1:
            post[i] = p * r / (p * r + a * s)
        else:
            post[i] = p * s / (a * r + p * s)


@_inline
def _expect(probs: Any, q: float, idx: Any, k: int, r: float, theta: float, kappa: float,
            lim: float, eps: float) -> float:
    """``E[V_stop]`` after one verifier, as ``Gate._decide`` computes it: one premise
    unrolled, several through ``_modes._expect`` (outcomes in product order)."""
    s = 1.0 - r
    if k == 1:
        p = probs[idx[0]]
        a = 1.0 - p
        pc = a * r + p * s
        pr = p * r + a * s
        e = 0.0
        if pc > 0.0:
            e = pc * _screen(1.0 - q * (r / pc), theta, kappa, lim, eps)
        if pr > 0.0:
            e += pr * _screen(1.0 - q * (s / pr), theta, kappa, lim, eps)
        return e
    e = 0.0
    for code in range(1 << k):
        ok, w, f = _outcome(probs, q, idx, k, r, code)
        if ok:
            e += w * _screen(1.0 - f, theta, kappa, lim, eps)
    return e


# -- the exact planner: _planner._exact on an explicit stack ---------------------------------
#
# Level lv holds one value() frame (its belief in lvp[lv] and lvf[lv, _Q], its key, verifiers
# left, calls left and budget left; its best value and bound) and the expand() it runs (the
# verifier, next outcome code, partial sum and cut-off); level lv + 1 holds the child belief
# whose value the expansion waits for.


@_inline
def _exact_enter(lvf: Any, lvi: Any, lv: int, n: int, theta: float, kappa: float,
                 lim: float, eps: float, floor: float) -> None:
    """Open ``value()`` at level ``lv`` (its belief is in place): stopping value and bound."""
    h = 1.0 - lvf[lv, _Q]
    lvf[lv, _BEST] = _screen(h, theta, kappa, lim, eps)
    lvf[lv, _LB] = h * floor
    on = lvi[lv, _D] > 0 and lvi[lv, _REM] != 0
    lvi[lv, _VJ] = 0 if on else n


@_inline
def _exact_next(lvf: Any, lvi: Any, lv: int, n: int, sf: Any) -> int:
    """Open ``expand()`` at level ``lv`` for the next verifier ``value()`` tries; -1 when
    none is left. The reference's loop condition: still available, ``lambda c + bound <
    best`` and affordable; the cut-off is the best value so far."""
    rem = lvi[lv, _REM]
    for j in range(lvi[lv, _VJ], n):
        if (rem >> j) & 1:
            if sf[j, _LC] + lvf[lv, _LB] < lvf[lv, _BEST] and sf[j, _C] <= lvf[lv, _B]:
                lvi[lv, _VJ] = j + 1
                _exact_start(lvf, lvi, lv, j, lvf[lv, _BEST], sf)
                return j
    lvi[lv, _VJ] = n
    return -1


@_inline
def _exact_start(lvf: Any, lvi: Any, lv: int, j: int, cut: float, sf: Any) -> None:
    """Open ``expand(j)`` in the frame of level ``lv``: ``acc = lambda c_j``."""
    lvi[lv, _EJ] = j
    lvi[lv, _OC] = 0
    lvf[lv, _ACC] = sf[j, _LC]
    lvf[lv, _CUT] = cut


@_inline
def _exact_step(lvp: Any, lvf: Any, lvi: Any, lv: int, m: int, sidx: Any, sk: Any, sf: Any,
                radix: Any, memo: Any, stamp: Any, gen: int) -> bool:
    """Advance ``expand()`` at level ``lv`` through memoised outcomes.

    Returns True with the next new belief set up at level ``lv + 1`` (its value is
    needed), False when the expansion is over (its value is in ``_ACC``). One premise:
    confirm, then refute only while the partial sum is below the cut; several: stop as soon
    as the partial sum reaches the cut (the reference's two loops).
    """
    j = lvi[lv, _EJ]
    k = sk[j]
    r = sf[j, _R]
    while lvi[lv, _OC] < (1 << k):
        code = lvi[lv, _OC]
        lvi[lv, _OC] = code + 1
        if k == 1 and code == 1 and not lvf[lv, _ACC] < lvf[lv, _CUT]:
            return False
        ok, w, qo = _outcome(lvp[lv], lvf[lv, _Q], sidx[j], k, r, code)
        if not ok:
            continue
        ck = lvi[lv, _KEY] + radix[j] * (code + 1)
        if stamp[ck] == gen:
            lvf[lv, _ACC] += w * memo[ck]
            if k != 1 and lvf[lv, _ACC] >= lvf[lv, _CUT]:
                return False
            continue
        _posterior(lvp[lv], m, sidx[j], k, r, code, lvp[lv + 1])
        lvf[lv, _W] = w
        lvf[lv + 1, _Q] = qo
        lvf[lv + 1, _B] = lvf[lv, _B] - sf[j, _C]
        lvi[lv + 1, _KEY] = ck
        lvi[lv + 1, _REM] = lvi[lv, _REM] & ~(1 << j)
        lvi[lv + 1, _D] = lvi[lv, _D] - 1
        return True
    return False


@_inline
def _exact_expand(lvp: Any, lvf: Any, lvi: Any, radix: Any, memo: Any, stamp: Any, gen: int,
                  j0: int, cut0: float, n: int, m: int, sidx: Any, sk: Any, sf: Any,
                  theta: float, kappa: float, lim: float, eps: float, floor: float) -> Any:
    """``expand(j0)`` at the root (level 0): ``(lambda c + E_o V(child), beliefs valued)``,
    the value exact or ``>= cut0``."""
    _exact_start(lvf, lvi, 0, j0, cut0, sf)
    lv = 0
    stored = 0
    state = _EXPAND
    while True:
        if state == _EXPAND:
            if _exact_step(lvp, lvf, lvi, lv, m, sidx, sk, sf, radix, memo, stamp, gen):
                lv += 1
                _exact_enter(lvf, lvi, lv, n, theta, kappa, lim, eps, floor)
                state = _SCAN
                continue
            got = lvf[lv, _ACC]  # expand() returns ...
            if lv == 0:
                return got, stored
            if got < lvf[lv, _BEST]:  # ... to value() at lv
                lvf[lv, _BEST] = got
            state = _SCAN
        elif _exact_next(lvf, lvi, lv, n, sf) >= 0:
            state = _EXPAND
        else:
            best = lvf[lv, _BEST]  # value() returns, memoised, to expand() at lv - 1
            memo[lvi[lv, _KEY]] = best
            stamp[lvi[lv, _KEY]] = gen
            stored += 1
            lv -= 1
            lvf[lv, _ACC] += lvf[lv, _W] * best
            k = sk[lvi[lv, _EJ]]
            if k != 1 and lvf[lv, _ACC] >= lvf[lv, _CUT]:
                lvi[lv, _OC] = 1 << k  # cut off: the expansion ends with this partial sum
            state = _EXPAND


@_inline
def _exact(probs: Any, m: int, q: float, theta: float, kappa: float, lim: float, eps: float,
           sidx: Any, sk: Any, sf: Any, n: int, depth: int, b0: float, tol: float,
           lvp: Any, lvf: Any, lvi: Any, radix: Any, qs: Any, memo: Any, stamp: Any,
           gen: Any) -> Any:
    """:func:`amv_calib.gate._planner._exact`: ``(value, first, states)``, first -1 to stop.

    ``gen[0]`` is the memo's generation, advanced here, so no memo entry of an earlier
    plan is seen.
    """
    base = 1
    for j in range(n):
        radix[j] = base
        base *= 1 + (1 << sk[j])
        qs[j] = _INF  # no exact value (yet)
    floor = kappa if kappa < theta else theta  # min(theta, kappa)
    gen[0] += 1
    for t in range(m):
        lvp[0, t] = probs[t]
    lvf[0, _Q] = q
    lvf[0, _B] = b0
    lvi[0, _KEY] = 0
    lvi[0, _REM] = (1 << n) - 1
    lvi[0, _D] = depth
    h0 = 1.0 - q
    v_stop = _screen(h0, theta, kappa, lim, eps)
    best = v_stop
    states = 0
    if depth > 0:
        lb0 = h0 * floor
        for j in range(n):
            if sf[j, _LC] + lb0 <= best + tol and sf[j, _C] <= b0:
                got, stored = _exact_expand(lvp, lvf, lvi, radix, memo, stamp, gen[0], j,
                                            best + tol, n, m, sidx, sk, sf, theta, kappa, lim,
                                            eps, floor)
                states += stored
                if got <= best + tol:
                    qs[j] = got
                    if got < best:  # min(best, got)
                        best = got
    if not best < v_stop:
        return best, -1, states
    for j in range(n):
        if qs[j] <= best + tol:  # the first of the (near-)tied first steps
            return best, j, states
    return best, -1, states


# -- the receding horizon: _planner._receding on an explicit stack ---------------------------
#
# The memo is a hash table: hk[at] the beliefs, hf[at] (budget left, value), hi[at] (calls
# left, generation stamp).


@_jit
def _horizon(branch: int, depth: int) -> int:
    """The reference's horizon: deepest ``H <= min(depth, MAX_HORIZON)`` with ``branch^H``
    leaves at most ``RECEDING_WORK`` (at least 1); ``branch`` is saturated above
    ``RECEDING_WORK``."""
    horizon = 1
    while horizon < min(depth, MAX_HORIZON):
        leaves = 1
        for _ in range(horizon + 1):
            leaves *= branch
            if leaves > RECEDING_WORK:
                break
        if leaves > RECEDING_WORK:
            break
        horizon += 1
    return horizon if horizon < depth else depth


@_inline
def _branch(sk: Any, n: int) -> int:
    """``sum_j 2^k_j`` (1 when it is 0), saturated just above ``RECEDING_WORK``."""
    branch = 0
    for j in range(n):
        if sk[j] > 20:
            return RECEDING_WORK + 1
        branch += 1 << sk[j]
        if branch > RECEDING_WORK:
            return RECEDING_WORK + 1
    return branch if branch > 0 else 1


@_inline
def _slot(hk: Any, hf: Any, hi: Any, hbits: Any, gen: int, post: Any, m: int, d: int,
          b: float) -> Any:
    """Hash-table slot of the memo key ``(beliefs, calls left, budget left)``: the slot
    holding an equal key (``==`` on floats, so ``-0.0`` equals ``0.0``), else the empty
    slot where it goes."""
    bits = hbits.view(np.uint64)
    hsh = np.uint64(1469598103934665603) ^ np.uint64(d)
    for t in range(m + 1):
        hbits[0] = (post[t] if t < m else b) + 0.0  # + 0.0: -0.0 hashes as 0.0
        hsh = (hsh ^ bits[0]) * np.uint64(1099511628211)
        hsh ^= hsh >> np.uint64(29)
    mask = hk.shape[0] - 1
    at = np.int64(hsh & np.uint64(mask))
    while hi[at, 1] == gen:
        same = hi[at, 0] == d and hf[at, 0] == b
        t = 0
        while same and t < m:
            same = hk[at, t] == post[t]
            t += 1
        if same:
            return at
        at = (at + 1) & mask
    return at


@_inline
def _rec_enter(lvf: Any, lvi: Any, lv: int, n: int, theta: float, kappa: float, lim: float,
               eps: float, floor: float) -> None:
    """Open the receding ``value()`` at level ``lv`` (its belief is in place)."""
    h = 1.0 - lvf[lv, _Q]
    lvf[lv, _BEST] = _screen(h, theta, kappa, lim, eps)
    lvf[lv, _LB] = h * floor
    lvi[lv, _FIRST] = -1
    lvi[lv, _VJ] = 0 if lvi[lv, _D] > 0 else n


@_inline
def _rec_next(lvf: Any, lvi: Any, lv: int, n: int, sf: Any) -> int:
    """Open the expansion of the next verifier the receding ``value()`` at level ``lv``
    tries (every verifier, as often as it likes); -1 when none is left."""
    for j in range(lvi[lv, _VJ], n):
        if not (sf[j, _LC] + lvf[lv, _LB] >= lvf[lv, _BEST] or sf[j, _C] > lvf[lv, _B]):
            lvi[lv, _VJ] = j + 1
            lvi[lv, _EJ] = j
            lvi[lv, _OC] = 0
            lvf[lv, _ACC] = sf[j, _LC]
            return j
    lvi[lv, _VJ] = n
    return -1


@_inline
def _rec_step(lvp: Any, lvf: Any, lvi: Any, lv: int, m: int, sidx: Any, sk: Any, sf: Any,
              hk: Any, hf: Any, hi: Any, hbits: Any, gen: int) -> int:
    """Advance the receding expansion at level ``lv``: 1 = a new belief is set up at level
    ``lv + 1``, 0 = all outcomes added, -1 = cut off (the partial sum reached the best)."""
    j = lvi[lv, _EJ]
    k = sk[j]
    r = sf[j, _R]
    d1 = lvi[lv, _D] - 1
    b1 = lvf[lv, _B] - sf[j, _C]
    post = lvp[lv + 1]
    while lvi[lv, _OC] < (1 << k):
        code = lvi[lv, _OC]
        lvi[lv, _OC] = code + 1
        ok, w, qo = _outcome(lvp[lv], lvf[lv, _Q], sidx[j], k, r, code)
        if not ok:
            continue
        _posterior(lvp[lv], m, sidx[j], k, r, code, post)
        at = _slot(hk, hf, hi, hbits, gen, post, m, d1, b1)
        if hi[at, 1] == gen:
            lvf[lv, _ACC] += w * hf[at, 1]
            if lvf[lv, _ACC] >= lvf[lv, _BEST]:
                return -1
            continue
        lvf[lv, _W] = w
        lvf[lv + 1, _Q] = qo
        lvf[lv + 1, _B] = b1
        lvi[lv + 1, _D] = d1
        return 1
    return 0


@_inline
def _rec_store(lvp: Any, lvf: Any, lvi: Any, lv: int, m: int, got: float, hk: Any, hf: Any,
               hi: Any, hbits: Any, gen: int) -> None:
    """Memoise the value ``got`` of the belief at level ``lv``."""
    at = _slot(hk, hf, hi, hbits, gen, lvp[lv], m, lvi[lv, _D], lvf[lv, _B])
    for t in range(m):
        hk[at, t] = lvp[lv, t]
    hf[at, 0] = lvf[lv, _B]
    hf[at, 1] = got
    hi[at, 0] = lvi[lv, _D]
    hi[at, 1] = gen


@_inline
def _receding(probs: Any, m: int, q: float, theta: float, kappa: float, lim: float,
              eps: float, sidx: Any, sk: Any, sf: Any, n: int, depth: int, b0: float,
              lvp: Any, lvf: Any, lvi: Any, hk: Any, hf: Any, hi: Any, hbits: Any,
              gen: Any) -> Any:
    """:func:`amv_calib.gate._planner._receding`: ``(value, first, states)``, first -1 to
    stop."""
    floor = kappa if kappa < theta else theta
    gen[1] += 1
    g = gen[1]
    for t in range(m):
        lvp[0, t] = probs[t]
    lvf[0, _Q] = q
    lvf[0, _B] = b0
    lvi[0, _D] = _horizon(_branch(sk, n), depth)
    _rec_enter(lvf, lvi, 0, n, theta, kappa, lim, eps, floor)
    lv = 0
    stored = 0
    state = _SCAN
    while True:
        if state == _EXPAND:
            step = _rec_step(lvp, lvf, lvi, lv, m, sidx, sk, sf, hk, hf, hi, hbits, g)
            if step == 1:
                lv += 1
                _rec_enter(lvf, lvi, lv, n, theta, kappa, lim, eps, floor)
            elif step == 0 and lvf[lv, _ACC] < lvf[lv, _BEST]:
                lvf[lv, _BEST] = lvf[lv, _ACC]
                lvi[lv, _FIRST] = lvi[lv, _EJ]
            state = _SCAN
        elif _rec_next(lvf, lvi, lv, n, sf) >= 0:
            state = _EXPAND
        elif lv == 0:
            return lvf[0, _BEST], lvi[0, _FIRST], stored
        else:
            got = lvf[lv, _BEST]  # value() returns; the caller memoises it
            _rec_store(lvp, lvf, lvi, lv, m, got, hk, hf, hi, hbits, g)
            stored += 1
            lv -= 1
            lvf[lv, _ACC] += lvf[lv, _W] * got
            if not lvf[lv, _ACC] >= lvf[lv, _BEST]:
                state = _EXPAND  # else cut off: on to the next verifier


# -- the beam: _planner._beam ----------------------------------------------------------------


@_inline
def _score(probs: Any, idx: Any, k: int, r: float, lam_cost: float) -> float:
    """:func:`amv_calib.gate._planner._score`: evidence per unit of cost."""
    if r >= 1.0:
        llr = 40.0
    else:
        x = _log(r / (1.0 - r))
        llr = x if x < 40.0 else 40.0  # min(40.0, x)
    var = 0.0
    for t in range(k):
        var += probs[idx[t]] * (1.0 - probs[idx[t]])
    return var * llr / (lam_cost + 1e-12)


@_inline
def _sort_by(key: Any, order: Any, n: int) -> None:
    """``order[:n] = sorted(range(n), key=lambda j: (key[j], j))`` (a stable insertion
    sort; ``-0.0`` and ``0.0`` tie as in Python)."""
    for j in range(n):
        order[j] = j
    for a in range(1, n):
        j = order[a]
        b = a - 1
        while b >= 0 and key[j] < key[order[b]]:
            order[b + 1] = order[b]
            b -= 1
        order[b + 1] = j


@_inline
def _fits(sk: Any, keep: Any, nkeep: int) -> bool:
    """``prod (1 + 2^k_j) * sum 2^k_j <= MAX_WORK`` over the verifiers ``keep[:nkeep]``, or
    over the first ``nkeep`` ones when ``keep`` is empty (the products saturate instead of
    overflowing)."""
    states = 1
    branch = 0
    for t in range(nkeep):
        k = sk[keep[t]] if keep.shape[0] else sk[t]
        if k > 20:
            return False
        states *= 1 + (1 << k)
        branch += 1 << k
        if states > MAX_WORK:
            return False
    return states * branch <= MAX_WORK


@_inline
def _try_keep(sk: Any, keep: Any, nkeep: int, j: int) -> int:
    """The reference's ``if j not in keep and fits(j): keep.append(j)``: returns the new
    length of ``keep`` (``keep[nkeep]`` is scratch)."""
    for t in range(nkeep):
        if keep[t] == j:
            return nkeep
    if nkeep + 1 > MAX_EXACT_VERIFIERS:
        return nkeep
    keep[nkeep] = j
    return nkeep + 1 if _fits(sk, keep, nkeep + 1) else nkeep


@_jit
def _beam(probs: Any, m: int, sidx: Any, sk: Any, sf: Any, n: int, wi: Any, wf: Any) -> int:
    """:func:`amv_calib.gate._planner._beam`: the verifiers kept, ascending, into
    ``wi[_KEEP]``; returns how many."""
    order = wi[_ORDER]
    porder = wi[_PORDER]
    covered = wi[_COVERED]
    keep = wi[_KEEP]
    for j in range(n):
        wf[_SKEY, j] = -_score(probs, sidx[j], sk[j], sf[j, _R], sf[j, _LC])
    _sort_by(wf[_SKEY], order, n)
    for i in range(m):
        wf[_PKEY, i] = -probs[i] * (1.0 - probs[i])
        covered[i] = 0
    _sort_by(wf[_PKEY], porder, m)
    nkeep = 0
    for a in range(m):
        i = porder[a]
        if covered[i]:
            continue
        for b in range(n):
            j = order[b]
            hit = False
            for t in range(sk[j]):
                hit = hit or sidx[j, t] == i
            if hit:
                kept = _try_keep(sk, keep, nkeep, j)
                if kept > nkeep:
                    nkeep = kept
                    for t in range(sk[j]):
                        covered[sidx[j, t]] = 1
                    break
    for b in range(n):
        nkeep = _try_keep(sk, keep, nkeep, order[b])
    _sort_by(keep, order, nkeep)  # sorted(keep): order is free again
    for t in range(nkeep):
        porder[t] = keep[order[t]]
    for t in range(nkeep):
        keep[t] = porder[t]
    return nkeep


# -- plan(): _planner.plan -------------------------------------------------------------------


@_jit
def _plan(probs: Any, m: int, theta: float, kappa: float, lim: float, eps: float,
          sidx: Any, sk: Any, sf: Any, n: int, depth: int, b0: float, reuse: bool,
          myopic_first: int, myopic_value: float, tol: float, lvp: Any, lvf: Any, lvi: Any,
          memo: Any, stamp: Any, gen: Any, wi: Any, wf: Any, hk: Any, hf: Any, hi: Any,
          hbits: Any) -> Any:
    """:func:`amv_calib.gate._planner.plan`: ``(value, first, exact, states)``, first -1 to
    stop.

    ``b0`` is the cost budget (inf for none), ``myopic_first`` -1 for no myopic choice.
    The verifier arrays have ``MAX_EXACT_VERIFIERS`` spare rows after the ``n`` given, where
    a beam puts the verifiers it keeps.
    """
    q = 1.0
    for t in range(m):
        q *= 1.0 - probs[t]
    if depth <= 0 or n == 0:
        return _screen(1.0 - q, theta, kappa, lim, eps), -1, True, 0
    if reuse:
        value, first, states = _receding(probs, m, q, theta, kappa, lim, eps, sidx, sk, sf, n,
                                         depth, b0, lvp, lvf, lvi, hk, hf, hi, hbits, gen)
        return value, first, False, states
    exact = n <= MAX_EXACT_VERIFIERS and _fits(sk, sk[:0], n)
    n_use = n
    at = 0
    if not exact:  # a beam: the kept verifiers go to the spare rows after the n given
        n_use = _beam(probs, m, sidx, sk, sf, n, wi, wf)
        at = n
        for t in range(n_use):
            j = wi[_KEEP, t]
            sk[n + t] = sk[j]
            for u in range(sk[j]):
                sidx[n + t, u] = sidx[j, u]
            for u in range(3):
                sf[n + t, u] = sf[j, u]
    value, first, states = _exact(probs, m, q, theta, kappa, lim, eps, sidx[at:], sk[at:],
                                  sf[at:], n_use, depth, b0, tol, lvp, lvf, lvi, wi[_RADIX],
                                  wf[_QS], memo, stamp, gen)
    if exact:
        return value, first, True, states
    mapped = -1 if first < 0 else wi[_KEEP, first]
    if myopic_first >= 0 and myopic_value < value:
        return myopic_value, myopic_first, False, states
    return value, mapped, False, states


# -- one row: Gate._decide and Gate._decide_seed ---------------------------------------------
#
# A row is read in place: premise slot j is real where mask[i, j], and a verifier's premises
# are its resolved real slots in slot order (the scalar gate's premise order). The planner
# alone gets the row compressed to its real premises and offered verifiers (_gather).


@_inline
def _q_row(i: int, p: Any, mask: Any) -> Any:
    """``(inputs in range, q)`` of row ``i``: ``q = prod (1 - p)`` from 1.0 over the real
    slots in slot order (``mode="amv"``)."""
    good = True
    q = 1.0
    for j in range(p.shape[1]):
        if mask[i, j]:
            x = p[i, j]
            good &= (x >= 0.0) & (x <= 1.0)
            q *= 1.0 - x
    return good, q


@_inline
def _p_any_seed(i: int, p: Any, mask: Any, pre: Any) -> Any:
    """``(inputs in range, P_any)`` of row ``i`` as the seed accumulates it, ``acc = 1 -
    (1 - acc)(1 - p)`` from 0, with ``pre[j]`` its value before slot ``j``."""
    good = True
    h = 0.0
    for j in range(p.shape[1]):
        pre[j] = h
        if mask[i, j]:
            x = p[i, j]
            good &= (x >= 0.0) & (x <= 1.0)
            h = 1.0 - (1.0 - h) * (1.0 - x)
    return good, h


@_inline
def _resolved(i: int, v: int, mask: Any, res: Any, idx: Any) -> int:
    """The real slots verifier ``v`` of row ``i`` resolves, in slot order, into ``idx``;
    returns how many."""
    k = 0
    for j in range(mask.shape[1]):
        idx[k] = j  # written always, kept when resolved (no branch to mispredict)
        k += res[i, v, j] & mask[i, j]
    return k


@_inline
def _kept(k: int, ck: int, cn: int, seen: int) -> Any:
    """``(enumerated, seen)`` for the next available verifier, resolving ``k`` premises,
    under the cut ``(ck, cn)`` of :func:`_cut`; ``seen`` counts the verifiers with ``k ==
    ck`` met so far (column order, the scalar gate's order)."""
    if k == ck:
        return seen < cn, seen + 1
    return k < ck, seen


@_inline
def _cut(cnt: Any) -> Any:
    """:func:`amv_calib.gate._planner.enumerable` from ``cnt[k]``, the verifiers resolving
    ``k <= MAX_OUTCOMES_LOG2`` premises: ``(ck, cn)``, the verifiers enumerated being those
    with ``k < ck`` and the first ``cn`` with ``k == ck``.

    Taken by ``(k, position)``, a level ``k`` fits ``left >> k`` more verifiers; the first
    level that does not fit all of them ends the prefix (no later verifier fits either).
    """
    left = MAX_OUTCOMES
    for k in range(MAX_OUTCOMES_LOG2 + 1):
        fit = left >> k
        if cnt[k] > fit:
            return k, fit
        left -= cnt[k] << k
    return MAX_OUTCOMES_LOG2 + 1, 0


@_inline
def _gather(i: int, p: Any, mask: Any, res: Any, cost: Any, rel: Any, avail: Any, lam: float,
            probs: Any, slot: Any, oidx: Any, ok: Any, of: Any, ocol: Any, ck: int,
            cn: int) -> Any:
    """Row ``i`` compressed for the planner: ``(m, n)``.

    Its real premises in slot order go to ``probs[:m]``; its available verifiers that the
    cut ``(ck, cn)`` enumerates (:func:`_cut`), in column order, to ``oidx`` (positions among
    the real premises, in premise order), ``ok``, ``of`` and ``ocol``.
    """
    mr = 0
    for j in range(p.shape[1]):
        slot[j] = mr if mask[i, j] else -1
        if mask[i, j]:
            probs[mr] = p[i, j]
            mr += 1
    nv = 0
    seen = 0
    for v in range(cost.shape[1]):
        if avail[i, v]:
            k = 0
            for j in range(p.shape[1]):
                oidx[nv, k] = slot[j]
                k += res[i, v, j] & mask[i, j]
            kept, seen = _kept(k, ck, cn, seen)
            if not kept:
                continue  # the next verifier overwrites this one's row
            ok[nv] = k
            of[nv, _R] = rel[i, v]
            of[nv, _LC] = lam * cost[i, v]
            of[nv, _C] = cost[i, v]
            ocol[nv] = v
            nv += 1
    return mr, nv


@_inline
def _verifier(i: int, v: int, cost: Any, rel: Any) -> Any:
    """``(cost, reliability, in range)`` of verifier ``v`` of row ``i``: the batch's checks
    of an available verifier are cost >= 0 and finite, r in (0.5, 1]."""
    c = cost[i, v]
    r = rel[i, v]
    return c, r, (c >= 0.0) & (c < _INF) & (r > 0.5) & (r <= 1.0)


@_inline
def _amv(i: int, p: Any, mask: Any, res: Any, cost: Any, rel: Any, avail: Any, depth: int,
         theta: float, kappa: float, lam: float, delta: float, eps: float, look: bool,
         reuse: bool, idx: Any, probs: Any, oidx: Any, ok: Any, of: Any, ocol: Any,
         cnt: Any, planner: Any) -> Any:
    """``Gate._decide`` for ``mode="amv"`` (no cost budget): ``(inputs in range, regime,
    verifier column or -1, voi, v_stop, r_expected, h_harm, admissible, outcomes, left out,
    planner states)``, voi ``-inf`` for None. ``theta`` is priced (``theta + mu``);
    ``depth`` is the number of verifications left; ``idx`` and ``cnt`` are scratch,
    ``planner`` the planner's work arrays (a tuple, as a call of more than 30 arguments
    cannot be inlined). Past the work bound the VOIs come from :func:`_bounded_vois`
    (``Gate._decide_bounded``)."""
    good, q = _q_row(i, p, mask)
    lim = delta if delta < kappa else kappa
    h = 1.0 - q
    rx = theta * h
    adm = rx <= lim and h <= eps
    v_stop = rx if adm else kappa
    best = _NEG_INF
    bj = -1  # column of the first largest VOI
    bo = -1  # ... and its position among the offered verifiers
    nv = 0
    spent = 0  # joint outcomes enumerated so far: past MAX_OUTCOMES, the bounded routine
    over = False
    row = p[i]
    for v in range(cost.shape[1]):
        if not avail[i, v]:
            continue
        c, r, in_range = _verifier(i, v, cost, rel)
        good &= in_range
        if depth <= 0 or over:
            continue  # every available verifier's inputs are still checked
        k = _resolved(i, v, mask, res, idx)
        if k > MAX_OUTCOMES_LOG2:  # (1 << k would overflow from k = 63 on)
            over = True
            continue
        spent += 1 << k
        if spent > MAX_OUTCOMES:
            over = True
            continue
        voi = v_stop - _expect(row, q, idx, k, r, theta, kappa, lim, eps) - lam * c
        if voi > best:
            best = voi
            bj = v
            bo = nv
        nv += 1
    if not good:
        return good, _ABSTAIN, -1, _NEG_INF, v_stop, rx, h, adm, 0, 0, 0
    tol = VOI_TOLERANCE * (theta + kappa)
    ck, cn, out, could = MAX_OUTCOMES_LOG2 + 1, 0, 0, False  # within the bound: all, none
    if over:
        best, bj, bo, nv, spent, out, could, ck, cn = _bounded_vois(
            i, p, mask, res, cost, rel, avail, q, v_stop, theta, kappa, lam, lim, eps, h, tol,
            idx, cnt)
    # an admissible row does not PROCEED while a left-out verifier could be worth calling
    stop = _ABSTAIN if could or not adm else _PROCEED
    if nv == 0:
        return good, stop, -1, _NEG_INF, v_stop, rx, h, adm, spent, out, 0
    if look:
        mr, nv = _gather(i, p, mask, res, cost, rel, avail, lam, probs, idx, oidx, ok, of,
                         ocol, ck, cn)
        lvp, lvf, lvi, memo, stamp, gen, wi, wf, hk, hf, hi, hbits = planner
        value, first, _, states = _plan(
            probs, mr, theta, kappa, lim, eps, oidx, ok, of, nv, depth, _INF, reuse,
            bo if best > tol else -1, v_stop - best, tol, lvp, lvf, lvi, memo, stamp, gen, wi,
            wf, hk, hf, hi, hbits)
        gain = v_stop - value
        if first >= 0 and gain > tol:
            return good, _VERIFY, ocol[first], gain, v_stop, rx, h, adm, spent, out, states
        return good, stop, -1, gain, v_stop, rx, h, adm, spent, out, states
    if best > tol:
        return good, _VERIFY, bj, best, v_stop, rx, h, adm, spent, out, 0
    return good, stop, -1, best, v_stop, rx, h, adm, spent, out, 0


@_jit
def _bounded_vois(i: int, p: Any, mask: Any, res: Any, cost: Any, rel: Any, avail: Any,
                  q: float, v_stop: float, theta: float, kappa: float, lam: float, lim: float,
                  eps: float, h: float, tol: float, idx: Any, cnt: Any) -> Any:
    """The VOI loop of ``Gate._decide_bounded`` for a row past the work bound: ``(best,
    its column, its position among the enumerated, enumerated, outcomes, left out, could
    matter, ck, cn)``.

    Only the verifiers the cut ``(ck, cn)`` of :func:`_cut` enumerates get a VOI; each
    other one counts as left out, and ``could matter`` is whether any has an upper bound
    ``V_stop - lambda c - P_any * min(theta, kappa)`` above the tolerance. Compiled on its
    own, not inlined, and without the planner (which :func:`_amv` calls on what this
    returns): it is the rare path, and the myopic entry point stays small.
    """
    lb = h * (theta if theta < kappa else kappa)  # the clairvoyant's loss
    for t in range(MAX_OUTCOMES_LOG2 + 1):
        cnt[t] = 0
    for v in range(cost.shape[1]):
        if avail[i, v]:
            k = _resolved(i, v, mask, res, idx)
            if k <= MAX_OUTCOMES_LOG2:
                cnt[k] += 1
    ck, cn = _cut(cnt)
    best = _NEG_INF
    bj = -1
    bo = -1
    nv = 0
    seen = 0
    spent = 0
    out = 0
    could = False
    row = p[i]
    for v in range(cost.shape[1]):
        if not avail[i, v]:
            continue
        c = cost[i, v]
        k = _resolved(i, v, mask, res, idx)
        kept, seen = _kept(k, ck, cn, seen)
        if not kept:
            out += 1
            could |= v_stop - lam * c - lb > tol
            continue
        spent += 1 << k
        voi = v_stop - _expect(row, q, idx, k, rel[i, v], theta, kappa, lim, eps) - lam * c
        if voi > best:
            best = voi
            bj = v
            bo = nv
        nv += 1
    return best, bj, bo, nv, spent, out, could, ck, cn


@_inline
def _seed_screen(row: Any, mask: Any, i: int, t: int, base: float, post: float,
                 theta: float, kappa: float, lim: float, eps: float) -> float:
    """``V_stop`` after real slot ``t`` moved to ``post``: ``P_any`` from ``base = 1 -
    pre[t]`` re-accumulated over the real slots after ``t``, in the seed's order."""
    acc = 1.0 - base * (1.0 - post)
    for j in range(t + 1, row.shape[0]):
        if mask[i, j]:
            acc = 1.0 - (1.0 - acc) * (1.0 - row[j])
    return _screen(acc, theta, kappa, lim, eps)


@_inline
def _seed_expect(row: Any, mask: Any, i: int, pre: Any, t: int, r: float, theta: float,
                 kappa: float, lim: float, eps: float) -> float:
    """``E[V_stop]`` of the seed engine: real slot ``t`` updated, ``P_any`` re-accumulated
    from ``pre[t]`` over the real slots after it (``Gate._decide_seed``)."""
    p = row[t]
    pc = (1.0 - p) * r + p * (1.0 - r)
    pr = 1.0 - pc
    base = 1.0 - pre[t]
    e = 0.0
    if pc != 0.0:
        e = pc * _seed_screen(row, mask, i, t, base, (p * (1.0 - r)) / pc, theta, kappa, lim,
                              eps)
    if pr != 0.0:
        e = e + pr * _seed_screen(row, mask, i, t, base, (p * r) / pr, theta, kappa, lim, eps)
    return e


@_inline
def _seed(i: int, p: Any, mask: Any, res: Any, cost: Any, rel: Any, avail: Any, depth: int,
          theta: float, kappa: float, lam: float, delta: float, eps: float, idx: Any,
          pre: Any) -> Any:
    """``Gate._decide_seed``: the same tuple as :func:`_amv` (the seed mode enumerates no
    joint outcomes and plans nothing: its counters are 0)."""
    good, h = _p_any_seed(i, p, mask, pre)
    row = p[i]
    lim = kappa if kappa < delta else delta  # min(delta, kappa)
    rx = h * theta
    adm = rx <= lim and h <= eps
    v_stop = rx if adm else kappa
    stop = _PROCEED if adm else _ABSTAIN
    best = _NEG_INF
    bj = -1
    for v in range(cost.shape[1]):
        if not avail[i, v]:
            continue
        c, r, in_range = _verifier(i, v, cost, rel)
        good &= in_range
        if depth <= 0:
            continue
        if _resolved(i, v, mask, res, idx) == 0:
            voi = -lam * c
        else:  # the seed updates the first premise it resolves only
            e = _seed_expect(row, mask, i, pre, idx[0], r, theta, kappa, lim, eps)
            voi = (v_stop - e) - lam * c
        if voi > best:
            best = voi
            bj = v
    if not good or bj < 0:
        return good, stop, -1, _NEG_INF, v_stop, rx, h, adm, 0, 0, 0
    if best > 0.0:
        return good, _VERIFY, bj, best, v_stop, rx, h, adm, 0, 0, 0
    return good, stop, -1, best, v_stop, rx, h, adm, 0, 0, 0


# -- the batch ---------------------------------------------------------------------------------


@_inline
def _rows(lo: int, hi_: int, seed: bool, look: bool, reuse: bool, consts: Any, ins: Any,
          outs: Any, work: Any) -> int:
    """Rows ``lo:hi_`` into the outputs; returns the number of rows with an input out of
    range (their outputs are left as they were).

    ``consts`` is ``(lambda, delta, epsilon, harm price)``; ``ins`` the inputs and ``outs``
    the outputs of :func:`decide_rows`; ``work`` the work arrays of :func:`_work`. Arguments
    travel in tuples because numba cannot inline a call of more than 30 arguments.
    """
    lam, delta, eps, mu = consts
    p, mask, theta, kappa, res, cost, rel, avail, left = ins
    out_f, out_i, verifier, regime, adm = outs
    (probs, slot, pre, oidx, ok, of, ocol, lvp, lvf, lvi, memo, stamp, gen, wi, wf, hk, hf,
     hi, hbits, cnt) = work
    planner = (lvp, lvf, lvi, memo, stamp, gen, wi, wf, hk, hf, hi, hbits)
    bad = 0
    for i in range(lo, hi_):
        th = theta[i]
        ka = kappa[i]
        if not (th > 0.0 and th < _INF and ka > 0.0 and ka < _INF):
            bad += 1
            continue
        if seed:
            good, reg, col, voi, v_stop, rx, h, a, n_out, n_left, n_states = _seed(
                i, p, mask, res, cost, rel, avail, left[i], th, ka, lam, delta, eps, slot, pre)
        else:  # priced as Gate._decide prices it: theta + mu
            good, reg, col, voi, v_stop, rx, h, a, n_out, n_left, n_states = _amv(
                i, p, mask, res, cost, rel, avail, left[i], th + mu, ka, lam, delta, eps, look,
                reuse, slot, probs, oidx, ok, of, ocol, cnt, planner)
        if not good:
            bad += 1
            continue
        regime[i] = reg
        verifier[i] = col
        out_f[0, i] = voi
        out_f[1, i] = v_stop
        out_f[2, i] = rx
        out_f[3, i] = h
        out_i[0, i] = n_out
        out_i[1, i] = n_left
        out_i[2, i] = n_states
        adm[i] = a
    return bad


@_jit
def _rows_myopic(lo: int, hi_: int, seed: bool, consts: Any, ins: Any, outs: Any,
                 work: Any) -> int:
    """:func:`_rows` for the myopic rule (either mode). An entry of its own, without the
    planner's code, which would otherwise crowd the myopic loop's registers."""
    return _rows(lo, hi_, seed, False, False, consts, ins, outs, work)


@_jit
def _rows_lookahead(lo: int, hi_: int, reuse: bool, consts: Any, ins: Any, outs: Any,
                    work: Any) -> int:
    """:func:`_rows` for the lookahead planner (``mode="amv"``)."""
    return _rows(lo, hi_, False, True, reuse, consts, ins, outs, work)


@_jit
def _receding_need(mask: Any, res: Any, avail: Any, left: Any, cnt: Any) -> Any:
    """``(deepest horizon, most beliefs memoised)`` of the receding plans of a batch: sizes
    the frame stack and the hash table. A plan's verifiers are those the work bound
    enumerates (:func:`_cut`), so ``branch <= MAX_OUTCOMES``; ``cnt`` is scratch."""
    n, n_ver, m = res.shape
    deepest = 0
    most = 0
    for i in range(n):
        if left[i] <= 0:
            continue
        for t in range(MAX_OUTCOMES_LOG2 + 1):
            cnt[t] = 0
        for v in range(n_ver):
            if avail[i, v]:
                k = 0
                for j in range(m):
                    if res[i, v, j] and mask[i, j]:
                        k += 1
                if k <= MAX_OUTCOMES_LOG2:
                    cnt[k] += 1
        ck, cn = _cut(cnt)
        branch = 0  # sum of 2^k over the enumerated verifiers
        for k in range(min(ck, MAX_OUTCOMES_LOG2 + 1)):
            branch += cnt[k] << k
        if ck <= MAX_OUTCOMES_LOG2:
            branch += cn << ck
        if branch == 0:
            continue
        horizon = _horizon(branch if branch <= RECEDING_WORK else RECEDING_WORK + 1, left[i])
        nodes = 0
        level = 1
        for _ in range(horizon):
            level = level * branch
            nodes += level
        deepest = max(deepest, horizon)
        most = max(most, nodes)
    return deepest, most


# -- the Python side ---------------------------------------------------------------------------

#: Fewest rows per thread worth a thread of its own (``n_jobs``).
PARALLEL_MIN_ROWS: Final = 2048
#: Largest receding-horizon memo (beliefs) the engine allocates for one plan.
MAX_TABLE: Final = 1 << 24


def _table(most: int) -> int:
    """Hash-table size for ``most`` memoised beliefs: a power of two, at most half full."""
    if 2 * most + 2 > MAX_TABLE:
        raise ValueError(
            f"a receding-horizon plan would memoise {most} beliefs, more than the engine "
            f"allows ({MAX_TABLE // 2})"
        )
    return 1 << max(4, int(2 * most + 2).bit_length())


def _work(m: int, n_ver: int, levels: int, table: int, memo: int) -> tuple[Any, ...]:
    """The work arrays of one thread, in the order :func:`_rows` unpacks them.

    Rows of at most ``m`` premises and ``n_ver`` verifiers; ``levels`` frames (one per
    verification, plus one); a receding hash table of ``table`` entries (a power of two, 0
    without reuse); an exact memo of ``memo`` entries (1 without lookahead).
    """
    m1, v1, t1 = max(m, 1), max(n_ver, 1), max(table, 1)
    w = max(m1, v1) + 1
    spare = v1 + MAX_EXACT_VERIFIERS  # room for the verifiers a beam keeps
    return (
        np.zeros(m1), np.zeros(m1, dtype=np.int64), np.zeros(m1 + 1),  # probs, slot, pre
        np.zeros((spare, m1), dtype=np.int64), np.zeros(spare, dtype=np.int64),  # oidx, ok
        np.zeros((spare, 3)), np.zeros(v1, dtype=np.int64),  # of, ocol
        np.zeros((levels, m1)), np.zeros((levels, _NF)),  # lvp, lvf
        np.zeros((levels, _NI), dtype=np.int64),  # lvi
        np.empty(memo), np.zeros(memo, dtype=np.int64), np.zeros(2, dtype=np.int64),
        np.zeros((_NWI, w), dtype=np.int64), np.zeros((_NWF, w)),  # wi, wf
        np.empty((t1, m1)), np.empty((t1, 2)), np.zeros((t1, 2), dtype=np.int64),
        np.zeros(1),  # hk, hf, hi, hbits
        np.zeros(MAX_OUTCOMES_LOG2 + 1, dtype=np.int64),  # cnt
    )


def _sizes(look: bool, reuse: bool, mask: NDArray[np.bool_], res: NDArray[np.bool_],
           avail: NDArray[np.bool_], left: NDArray[np.int64]) -> tuple[int, int, int]:
    """``(levels, table, memo)`` of :func:`_work` for a batch."""
    levels, table = MAX_EXACT_VERIFIERS + 2, 0
    if look and reuse:
        deepest, most = _receding_need(mask, res, avail, left,
                                       np.zeros(MAX_OUTCOMES_LOG2 + 1, dtype=np.int64))
        levels = max(levels, int(deepest) + 2)
        table = _table(int(most))
    return levels, table, (MAX_WORK + 1 if look else 1)


# -- the portable calibrator ----------------------------------------------------------------

#: Transform codes of :func:`_calibrate_rows` (``contract._features.TRANSFORMS`` order).
_TRANSFORM_CODES: Final = {"identity": 0, "logit": 1, "log": 2, "log1m": 3, "ramp": 4,
                           "log1p": 5, "indicator": 6}


@_inline
def _pymax(a: float, b: float) -> float:
    """Python's ``max(a, b)``: ``a`` unless ``b`` is strictly beyond it."""
    return b if b > a else a


@_inline
def _pymin(a: float, b: float) -> float:
    """Python's ``min(a, b)``."""
    return b if b < a else a


@_inline
def _interp(z: float, xs: Any, ys: Any) -> Any:
    """numpy's ``interp(z, xs, ys)`` for one point (numpy/_core/src/multiarray/
    compiled_base.c), as ``clients/typescript/src/calibrator.ts`` transcribes it."""
    n = xs.shape[0]
    left = ys[0]
    right = ys[n - 1]
    if n == 1:
        return left if z < xs[0] else right if z > xs[0] else ys[0]
    if z != z:
        return z
    if z > xs[n - 1]:
        return right
    if z < xs[0]:
        return left
    lo = 0
    hi = n
    while hi - lo > 1:
        mid = (lo + hi) >> 1
        if xs[mid] <= z:
            lo = mid
        else:
            hi = mid
    j = lo
    if j == n - 1 or xs[j] == z:
        return ys[j]
    slope = (ys[j + 1] - ys[j]) / (xs[j + 1] - xs[j])
    out = slope * (z - xs[j]) + ys[j]
    if out != out:
        out = slope * (z - xs[j + 1]) + ys[j + 1]
        if out != out and ys[j] == ys[j + 1]:
            out = ys[j]
    return out


@_jit
def _calibrate_rows(feat: NDArray[np.float64], codes: NDArray[np.int64],
                    mask: NDArray[np.bool_], tint: NDArray[np.int64],
                    tflt: NDArray[np.float64], intercept: float,
                    kint: NDArray[np.float64], iso: bool, xs: NDArray[np.float64],
                    ys: NDArray[np.float64], clamp: NDArray[np.float64],
                    out: NDArray[np.float64]) -> None:
    """``PortableCalibrator.predict_one`` of every real premise slot, operation by operation.

    ``feat[i, j]``: the four claim features (CLAIM_FEATURES order); ``codes[i, j]``: the
    kind index (-1 without kinds). ``tint`` per term: column, transform code, ``by`` column
    (-1 none), kind index (-1 every kind); ``tflt`` per term: coefficient, scale, eps.
    ``clamp`` is ``[lo, hi, on]``.
    """
    n, m = codes.shape
    nt = tint.shape[0]
    for i in range(n):
        for j in range(m):
            if not mask[i, j]:
                out[i, j] = 0.0
                continue
            k = codes[i, j]
            z = intercept
            if k >= 0:
                z += kint[k]
            for t in range(nt):
                tk = tint[t, 3]
                if tk >= 0 and tk != k:
                    continue
                x = feat[i, j, tint[t, 0]]
                tr = tint[t, 1]
                eps = tflt[t, 2]
                if tr == 0:
                    v = x
                elif tr == 1:
                    v = _log(_pymax(eps, x)) - _log(_pymax(eps, 1.0 - x))
                elif tr == 2:
                    v = _log(_pymax(eps, x))
                elif tr == 3:
                    v = -_log(_pymax(eps, 1.0 - x))
                elif tr == 4:
                    v = _pymin(1.0, x / tflt[t, 1])
                elif tr == 5:
                    v = _log1p(x / tflt[t, 1])
                else:
                    v = 1.0 if x > 0.5 else 0.0
                if tint[t, 2] >= 0:
                    v = v * feat[i, j, tint[t, 2]]
                z += tflt[t, 0] * v
            if iso:
                p = _interp(z, xs, ys)
            elif z >= 0:
                p = 1.0 / (1.0 + _exp(-z))
            else:
                e = _exp(z)
                p = e / (1.0 + e)
            if clamp[2] > 0.0:
                p = _pymin(clamp[1], _pymax(clamp[0], p))
            out[i, j] = p


def calibrate_rows(calibrator: Any, feat: NDArray[np.float64], codes: NDArray[np.int64],
                   mask: NDArray[np.bool_]) -> NDArray[np.float64]:
    """The calibrator's probability of every real premise slot (0 elsewhere), shape (n, m).

    ``calibrator`` is a :class:`~amv_calib.contract.PortableCalibrator`; ``feat`` (n, m, 4),
    ``codes`` (n, m) its kind indices (:meth:`~amv_calib.contract.PortableCalibrator.kind_codes`)
    and ``mask`` (n, m), all C-contiguous. The same bits as ``predict_one`` slot by slot.
    """
    from amv_calib.contract import CLAIM_FEATURES, DEFAULT_EPS

    cols = {c: i for i, c in enumerate(CLAIM_FEATURES)}
    terms = calibrator.feature_map.terms
    tint = np.empty((len(terms), 4), dtype=np.int64)
    tflt = np.empty((len(terms), 3))
    for t, (term, w, kc) in enumerate(zip(terms, calibrator.coef, calibrator.term_kind_codes,
                                          strict=True)):
        tint[t] = (cols[term.column], _TRANSFORM_CODES[term.transform],
                   -1 if term.by is None else cols[term.by], kc)
        tflt[t] = (w, 1.0 if term.scale is None else term.scale,
                   DEFAULT_EPS if term.eps is None else term.eps)
    clamp = (np.zeros(3) if calibrator.clamp is None
             else np.array([calibrator.clamp[0], calibrator.clamp[1], 1.0]))
    iso = calibrator.kind == "isotonic"
    xs = np.asarray(calibrator.x_knots if iso else (0.0,), dtype=np.float64)
    ys = np.asarray(calibrator.y_knots if iso else (0.0,), dtype=np.float64)
    kint = np.asarray(calibrator.kind_intercept or (0.0,), dtype=np.float64)
    out = np.empty(codes.shape)
    _calibrate_rows(feat, codes, mask, tint, tflt, float(calibrator.intercept), kint, iso,
                    xs, ys, clamp, out)
    return out


_CACHE = threading.local()


def _cached_work(m: int, n_ver: int, levels: int, table: int, memo: int) -> tuple[Any, ...]:
    """:func:`_work` kept per thread and reused while it is large enough.

    Larger arrays than a batch needs are harmless (the engine loops over the sizes it is
    given; the hash table only needs a power of two), and the memo and hash table are
    stamped with generations that keep counting across batches, so they are never cleared:
    a batch after the first allocates nothing.
    """
    have = getattr(_CACHE, "sizes", None)
    want = (max(m, 1), max(n_ver, 1), levels, table, memo)
    if have is None or any(w > h for w, h in zip(want, have, strict=True)):
        sizes = want if have is None else tuple(max(w, h) for w, h in zip(want, have,
                                                                            strict=True))
        _CACHE.work = _work(*sizes)
        _CACHE.sizes = sizes
    work: tuple[Any, ...] = _CACHE.work
    return work


def decide_rows(*, seed: bool, look: bool, reuse: bool, lam: float, delta: float, eps: float,
                mu: float, p: NDArray[np.float64], mask: NDArray[np.bool_],
                theta: NDArray[np.float64], kappa: NDArray[np.float64], res: NDArray[np.bool_],
                cost: NDArray[np.float64], rel: NDArray[np.float64], avail: NDArray[np.bool_],
                left: NDArray[np.int64], out_f: NDArray[np.float64], out_i: NDArray[np.int64],
                verifier: NDArray[np.int64], regime: NDArray[np.int8], adm: NDArray[np.bool_],
                n_jobs: int = 1) -> int:
    """Decide every row into ``out_f`` (voi, v_stop, r_expected, h_harm; shape (4, n)),
    ``out_i`` (outcomes enumerated, verifiers left out, planner states; shape (3, n)),
    ``verifier`` (column or -1), ``regime`` and ``adm``; returns the number of rows with an
    input out of range. ``mu`` is the harm price (not applied with ``seed``).

    The arrays must be C-contiguous with the dtypes annotated (one compiled signature).
    ``n_jobs > 1`` splits the rows into contiguous blocks decided by that many threads
    (the engine runs without the GIL) when each gets at least :data:`PARALLEL_MIN_ROWS`;
    each block has its own work arrays, so the results do not depend on it.
    """
    levels, table, memo = _sizes(look, reuse, mask, res, avail, left)
    n = theta.shape[0]
    m, n_ver = p.shape[1], cost.shape[1]
    consts = (lam, delta, eps, mu)
    ins = (p, mask, theta, kappa, res, cost, rel, avail, left)
    outs = (out_f, out_i, verifier, regime, adm)

    def block(lo: int, hi_: int, work: tuple[Any, ...]) -> int:
        if look:
            return int(_rows_lookahead(lo, hi_, reuse, consts, ins, outs, work))
        return int(_rows_myopic(lo, hi_, seed, consts, ins, outs, work))

    threads = max(1, min(n_jobs, n // PARALLEL_MIN_ROWS))
    if threads == 1:
        return block(0, n, _cached_work(m, n_ver, levels, table, memo))
    from concurrent.futures import ThreadPoolExecutor

    cuts = [t * n // threads for t in range(threads + 1)]
    # the first block in this thread (with its kept work arrays), the others in new threads
    with ThreadPoolExecutor(max_workers=threads - 1) as pool:
        rest = [pool.submit(block, cuts[t], cuts[t + 1], _work(m, n_ver, levels, table, memo))
                for t in range(1, threads)]
        bad = block(0, cuts[1], _cached_work(m, n_ver, levels, table, memo))
        return bad + sum(f.result() for f in rest)


def plan(probs: list[float] | tuple[float, ...], theta: float, kappa: float, lim: float,
         eps: float, specs: list[Spec], *, depth: int, budget: float | None = None,
         reuse: bool = False, myopic_first: int | None = None,
         myopic_value: float | None = None, tol: float = 0.0) -> Plan:
    """:func:`amv_calib.gate._planner.plan` by the compiled engine (same arguments, same
    result bit for bit)."""
    _check_bound(specs)
    m, n = len(probs), len(specs)
    table, levels = 0, MAX_EXACT_VERIFIERS + 2
    if reuse and n and depth > 0:
        branch = sum(1 << len(sp.idx) for sp in specs) or 1
        horizon = int(_horizon(min(branch, RECEDING_WORK + 1), depth))
        table = _table(sum(branch**t for t in range(1, horizon + 1)))
        levels = max(levels, horizon + 2)
    work = _work(m, n, levels, table, MAX_WORK + 1)
    probs_a, _, _, sidx, sk, sf = work[:6]
    probs_a[:m] = probs
    for j, sp in enumerate(specs):
        sk[j] = len(sp.idx)
        sidx[j, : len(sp.idx)] = sp.idx
        sf[j] = (sp.r, sp.lam_cost, sp.cost)
    mfirst = -1 if myopic_first is None or myopic_value is None else myopic_first
    value, first, exact, states = _plan(
        probs_a, m, theta, kappa, lim, eps, sidx, sk, sf, n, depth,
        math.inf if budget is None else budget, reuse, mfirst,
        math.nan if myopic_value is None else myopic_value, tol, *work[7:19])
    return Plan(float(value), None if first < 0 else int(first), bool(exact), int(states))
