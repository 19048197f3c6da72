"""The gate's three ways to decide: within the work bound, past it, and the seed engine's
rule, operation by operation (the arithmetic is in the docstring of
:mod:`amv_calib.gate._engine`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final, NamedTuple

from amv_calib.gate._model import VOI_TOLERANCE, CandidateAction, Verifier
from amv_calib.gate._planner import MAX_OUTCOMES, Spec, enumerable, plan
from amv_calib.gate._results import Decision, Regime, _decision

_NEG_INF: Final = float("-inf")
_NAN: Final = float("nan")
#: Most verifier ids a reason lists (the rest are counted).
_LISTED: Final = 5

_R_PROCEED: Final = (
    "admissible (R <= min(delta, kappa) and H <= epsilon) and no verification is worth its cost"
)
_R_PROCEED_NONE: Final = "admissible (R <= min(delta, kappa) and H <= epsilon); no verifier left"
_R_ABSTAIN_H: Final = "harm H = P_any exceeds epsilon and no verification is worth its cost"
_R_ABSTAIN_R: Final = (
    "expected loss R = theta * P_any exceeds min(delta, kappa) and no verification is worth "
    "its cost"
)
_R_ABSTAIN_R_PRICED: Final = (
    "expected loss R = (theta + harm_price) * P_any exceeds min(delta, kappa) and no "
    "verification is worth its cost"
)
_R_ABSTAIN_NONE: Final = "not admissible (R > min(delta, kappa) or H > epsilon); no verifier left"
_R_VERIFY: Final = "has the largest one-step VOI, and it is positive"
_R_VERIFY_PLAN: Final = "is the first call of the verification plan that beats stopping"
_R_ABSTAIN_BOUND: Final = (
    "admissible, but the work bound left out verifiers that could be worth calling; the gate "
    "does not proceed on a value it could not compute"
)


def _unknown_premise(verifier: Verifier, pid: str, action: CandidateAction) -> ValueError:
    return ValueError(
        f"resolves_premise_ids of verifier {verifier.id!r} names premise {pid!r}, which "
        f"action {action.action_id!r} does not have (its premises: {list(action._index)})"
    )


def _expect(probs: Sequence[float], q: float, idx: Sequence[int], r: float, theta: float,
            kappa: float, lim: float, eps: float) -> float:
    # E[V_stop after the verifier] over its 2^k joint outcomes (_engine's docstring)
    s = 1.0 - r
    if len(idx) == 2:  # unrolled; the same products in the same order as the loop below
        p1 = probs[idx[0]]
        p2 = probs[idx[1]]
        a1 = 1.0 - p1
        a2 = 1.0 - p2
        c1 = a1 * r + p1 * s
        e1 = p1 * r + a1 * s
        c2 = a2 * r + p2 * s
        e2 = p2 * r + a2 * s
        e = 0.0
        for w1, f1 in ((c1, r / c1 if c1 > 0.0 else 0.0), (e1, s / e1 if e1 > 0.0 else 0.0)):
            if w1 > 0.0:
                g = q * f1
                for w2, f2 in ((c2, r / c2 if c2 > 0.0 else 0.0),
                               (e2, s / e2 if e2 > 0.0 else 0.0)):
                    if w2 > 0.0:
                        h = 1.0 - g * f2
                        rx = theta * h
                        e += (1.0 * w1 * w2) * (rx if (rx <= lim and h <= eps) else kappa)
        return e
    ws = [1.0]
    fs = [q]
    for i in idx:
        p = probs[i]
        a = 1.0 - p
        pc = a * r + p * s
        pr = p * r + a * s
        nw: list[float] = []
        nf: list[float] = []
        fc = r / pc if pc > 0.0 else 0.0
        fr = s / pr if pr > 0.0 else 0.0
        for w, f in zip(ws, fs, strict=True):
            if pc > 0.0:
                nw.append(w * pc)
                nf.append(f * fc)
            if pr > 0.0:
                nw.append(w * pr)
                nf.append(f * fr)
        ws, fs = nw, nf
    e = 0.0
    for w, f in zip(ws, fs, strict=True):
        h = 1.0 - f
        rx = theta * h
        e += w * (rx if (rx <= lim and h <= eps) else kappa)
    return e


class _Screen(NamedTuple):
    """What :meth:`Gate._decide` hands :meth:`Gate._decide_bounded`: the priced ``theta``,
    ``kappa``, ``min(delta, kappa)`` and the screen of the action's beliefs."""

    theta: float
    kappa: float
    lim: float
    q: float
    h: float
    rx: float
    adm: bool
    v_stop: float


class _DecisionModes:
    """:class:`~amv_calib.gate.Gate`'s decision routines (a part of the gate: it holds no
    state of its own)."""

    __slots__ = ()
    _delta: float
    _eps: float
    _lam: float
    _seed: bool
    _price: float
    _lookahead: bool
    _reuse: bool

    def _indices(self, action: CandidateAction, verifier: Verifier) -> tuple[int, ...]:
        index = action._index
        out = []
        for pid in verifier.resolves_premise_ids:
            i = index.get(pid)
            if i is None:
                raise _unknown_premise(verifier, pid, action)
            out.append(i)
        return tuple(sorted(out))

    def _closed(self, action: CandidateAction, reason: str) -> Decision:
        # fail closed as if every premise were violated: P_any = 1
        return _decision("ABSTAIN", None, None, action.abstention_cost_kappa,
                         action.impact_cost_theta + self._price, 1.0, (), reason, None, ())

    def _decide(self, action: CandidateAction, probs: Sequence[float],
                verifiers: Sequence[Verifier], left: int, budget: float | None,
                limit: int = MAX_OUTCOMES) -> Decision:
        """The decision; past ``limit`` joint outcomes, :meth:`_decide_bounded`'s (a
        ``limit`` below 2 sends every action with a verifier there: the tests' way in)."""
        # The hot path: plain floats and locals, no dataclass copies (_engine's docstring).
        kappa = action.abstention_cost_kappa
        probs_t = probs if type(probs) is tuple else tuple(probs)
        if self._seed:
            if budget is not None:
                verifiers = [v for v in verifiers if v.execution_cost <= budget]
            return self._decide_seed(action, probs_t, verifiers, left,
                                     action.impact_cost_theta, kappa)
        theta = action.impact_cost_theta + self._price  # _engine's docstring, "Harm price"
        delta = self._delta
        lim = delta if delta < kappa else kappa
        eps = self._eps
        lam = self._lam
        q = 1.0
        for p in probs_t:
            q *= 1.0 - p
        h = 1.0 - q
        rx = theta * h
        adm = rx <= lim and h <= eps
        v_stop = rx if adm else kappa
        index = action._index
        look = self._lookahead
        best = _NEG_INF
        best_v: Verifier | None = None
        best_j = -1
        vois: list[float] = []
        specs: list[Spec] = []
        offered: list[Verifier] = []
        spent = 0  # joint outcomes enumerated so far (_engine's docstring, "Work bound")
        if left > 0:
            add = vois.append
            one = -1
            for v in verifiers:
                pid = v._single
                r = v.symmetric_reliability
                if pid is not None:
                    i = index.get(pid)
                    if i is None:
                        raise _unknown_premise(v, pid, action)
                    spent += 2
                    if spent > limit:
                        return self._decide_bounded(
                            action, probs_t, verifiers, left, budget,
                            _Screen(theta, kappa, lim, q, h, rx, adm, v_stop))
                    # one premise, unrolled (_engine's docstring)
                    p = probs_t[i]
                    s = 1.0 - r
                    a = 1.0 - p
                    pc = a * r + p * s
                    pr = p * r + a * s
                    e = 0.0
                    if pc > 0.0:
                        hc = 1.0 - q * (r / pc)
                        rc = theta * hc
                        e = pc * (rc if (rc <= lim and hc <= eps) else kappa)
                    if pr > 0.0:
                        hr = 1.0 - q * (s / pr)
                        rr = theta * hr
                        e += pr * (rr if (rr <= lim and hr <= eps) else kappa)
                    idx: tuple[int, ...] | None = None
                    one = i
                else:
                    idx = self._indices(action, v)
                    spent += 1 << len(idx)
                    if spent > limit:
                        return self._decide_bounded(
                            action, probs_t, verifiers, left, budget,
                            _Screen(theta, kappa, lim, q, h, rx, adm, v_stop))
                    e = _expect(probs_t, q, idx, r, theta, kappa, lim, eps)
                cost = v.execution_cost
                voi = v_stop - e - lam * cost
                add(voi)
                if budget is not None and cost > budget:
                    continue
                if voi > best:
                    best = voi
                    best_v = v
                    best_j = len(offered)
                if look:
                    specs.append(Spec((one,) if idx is None else idx, r, lam * cost, cost))
                    offered.append(v)
        else:
            for v in verifiers:
                self._indices(action, v)
        tol = VOI_TOLERANCE * (theta + kappa)
        if best_v is None:
            return _decision("PROCEED" if adm else "ABSTAIN", None, None, v_stop, rx, h, probs_t,
                             _R_PROCEED_NONE if adm else _R_ABSTAIN_NONE, None, tuple(vois),
                             spent)
        if look:
            pl = plan(probs_t, theta, kappa, lim, eps, specs, depth=left, budget=budget,
                      reuse=self._reuse, myopic_first=best_j if best > tol else None,
                      myopic_value=v_stop - best, tol=tol)
            gain = v_stop - pl.value
            if pl.first is not None and gain > tol:
                v = offered[pl.first]
                return _decision("VERIFY", v, gain, v_stop, rx, h, probs_t,
                                 "lookahead: verifier " + v.id + " " + _R_VERIFY_PLAN,
                                 pl.value, tuple(vois), spent, (), pl.states)
            return _decision("PROCEED" if adm else "ABSTAIN", None, gain, v_stop, rx, h,
                             probs_t, _R_PROCEED if adm else _abstain_reason(rx, lim, self._price),
                             pl.value, tuple(vois), spent, (), pl.states)
        if best > tol:
            regime: Regime = "VERIFY"
            reason = "verifier " + best_v.id + " " + _R_VERIFY
        else:
            regime = "PROCEED" if adm else "ABSTAIN"
            reason = _R_PROCEED if adm else _abstain_reason(rx, lim, self._price)
            best_v = None
        return _decision(regime, best_v, best, v_stop, rx, h, probs_t, reason, None,
                         tuple(vois), spent)

    def _decide_bounded(self, action: CandidateAction, probs: tuple[float, ...],
                        verifiers: Sequence[Verifier], left: int, budget: float | None,
                        screen: _Screen) -> Decision:
        """:meth:`_decide` past the work bound (_engine's docstring, "Work bound").

        Only the verifiers :func:`~._planner.enumerable` keeps are enumerated and planned;
        the others get the upper bound of their one-step VOI, and an admissible action one
        of whose affordable left-out verifiers could be worth calling is ABSTAINED on
        instead of PROCEEDED. Every value it shares with :meth:`_decide` is computed with
        the same operations (one premise through :func:`_expect` gives the unrolled
        branch's bits), and the compiled engine repeats it.
        """
        theta, kappa, lim, q, h, rx, adm, v_stop = screen
        eps, lam, look = self._eps, self._lam, self._lookahead
        tol = VOI_TOLERANCE * (theta + kappa)
        # no policy loses less than the clairvoyant: P_any * min(theta, kappa)
        lb = h * (theta if theta < kappa else kappa)
        idxs = [self._indices(action, v) for v in verifiers]
        keep = enumerable([len(idx) for idx in idxs])
        best, best_v, best_j = _NEG_INF, None, -1
        vois: list[float] = []
        specs: list[Spec] = []
        offered: list[Verifier] = []
        out: list[str] = []
        could: list[tuple[str, float]] = []  # left out, affordable, upper bound above tol
        spent = 0
        for v, idx, kept in zip(verifiers, idxs, keep, strict=True):
            cost = v.execution_cost
            affordable = budget is None or cost <= budget
            if not kept:
                vois.append(_NAN)
                out.append(v.id)
                ub = v_stop - lam * cost - lb
                if affordable and ub > tol:
                    could.append((v.id, ub))
                continue
            spent += 1 << len(idx)
            r = v.symmetric_reliability
            voi = v_stop - _expect(probs, q, idx, r, theta, kappa, lim, eps) - lam * cost
            vois.append(voi)
            if not affordable:
                continue
            if voi > best:
                best, best_v, best_j = voi, v, len(offered)
            specs.append(Spec(idx, r, lam * cost, cost))
            offered.append(v)
        note = _bound_note(verifiers, idxs, keep, could)
        stop: Regime = "ABSTAIN" if could or not adm else "PROCEED"
        states = 0
        if best_v is None:
            voi_out: float | None = None
            value = None
            why = (_R_ABSTAIN_BOUND if adm and could
                   else _R_PROCEED_NONE if adm else _R_ABSTAIN_NONE)
        elif look:
            pl = plan(probs, theta, kappa, lim, eps, specs, depth=left, budget=budget,
                      reuse=self._reuse, myopic_first=best_j if best > tol else None,
                      myopic_value=v_stop - best, tol=tol)
            voi_out, value, states = v_stop - pl.value, pl.value, pl.states
            if pl.first is not None and voi_out > tol:
                v = offered[pl.first]
                return _decision("VERIFY", v, voi_out, v_stop, rx, h, probs,
                                 "lookahead: verifier " + v.id + " " + _R_VERIFY_PLAN + note,
                                 value, tuple(vois), spent, tuple(out), states)
            why = (_R_ABSTAIN_BOUND if adm and could
                   else _R_PROCEED if adm else _abstain_reason(rx, lim, self._price))
        else:
            voi_out, value = best, None
            if best > tol:
                return _decision("VERIFY", best_v, best, v_stop, rx, h, probs,
                                 "verifier " + best_v.id + " " + _R_VERIFY + note, None,
                                 tuple(vois), spent, tuple(out), 0)
            why = (_R_ABSTAIN_BOUND if adm and could
                   else _R_PROCEED if adm else _abstain_reason(rx, lim, self._price))
        return _decision(stop, None, voi_out, v_stop, rx, h, probs, why + note, value,
                         tuple(vois), spent, tuple(out), states)

    def _decide_seed(self, action: CandidateAction, probs: tuple[float, ...],
                     verifiers: Sequence[Verifier], left: int, theta: float,
                     kappa: float) -> Decision:
        # The seed engine's evaluate(), operation by operation (_engine's docstring).
        delta = self._delta
        lim = kappa if kappa < delta else delta  # min(delta, kappa)
        eps = self._eps
        lam = self._lam
        # pre[j]: the seed's running P_any after the first j premises; an outcome that
        # changes premise t re-runs the same recurrence from pre[t], so the arithmetic is
        # the seed's, operation for operation
        pre = [0.0]
        keep = pre.append
        h = 0.0
        for p in probs:
            h = 1.0 - (1.0 - h) * (1.0 - p)
            keep(h)
        rx = h * theta
        adm = rx <= lim and h <= eps
        v_stop = rx if adm else kappa
        index = action._index
        best = _NEG_INF
        best_v: Verifier | None = None
        vois: list[float] = []
        add = vois.append
        m = len(probs)
        for v in verifiers:
            pid = v._single
            if pid is not None:
                t = index.get(pid)
                if t is None:
                    raise _unknown_premise(v, pid, action)
            else:
                found = self._indices(action, v)
                t = found[0] if found else None
            if t is None:
                voi = -lam * v.execution_cost
            else:
                p = probs[t]
                r = v.symmetric_reliability
                pc = (1.0 - p) * r + p * (1.0 - r)
                pr = 1.0 - pc
                # A zero-probability outcome: the seed's NaN posterior is inadmissible and
                # 0 * kappa adds exactly 0, which leaving the term out reproduces.
                e = 0.0
                base = 1.0 - pre[t]
                if pc != 0.0:
                    acc = 1.0 - base * (1.0 - (p * (1.0 - r)) / pc)
                    for j in range(t + 1, m):
                        acc = 1.0 - (1.0 - acc) * (1.0 - probs[j])
                    ra = acc * theta
                    e = pc * (ra if (ra <= lim and acc <= eps) else kappa)
                if pr != 0.0:
                    acc = 1.0 - base * (1.0 - (p * r) / pr)
                    for j in range(t + 1, m):
                        acc = 1.0 - (1.0 - acc) * (1.0 - probs[j])
                    ra = acc * theta
                    e = e + pr * (ra if (ra <= lim and acc <= eps) else kappa)
                voi = (v_stop - e) - (lam * v.execution_cost)
            add(voi)
            if voi > best:
                best = voi
                best_v = v
        if left <= 0 or best_v is None:
            return _decision("PROCEED" if adm else "ABSTAIN", None, None, v_stop, rx, h, probs,
                             _R_PROCEED_NONE if adm else _R_ABSTAIN_NONE, None, tuple(vois))
        if best > 0.0:
            return _decision("VERIFY", best_v, best, v_stop, rx, h, probs,
                             "verifier " + best_v.id + " " + _R_VERIFY, None, tuple(vois))
        return _decision("PROCEED" if adm else "ABSTAIN", None, best, v_stop, rx, h, probs,
                         _R_PROCEED if adm else _abstain_reason(rx, lim, 0.0), None, tuple(vois))


def _abstain_reason(rx: float, lim: float, price: float) -> str:
    if not rx > lim:
        return _R_ABSTAIN_H
    return _R_ABSTAIN_R if price == 0.0 else _R_ABSTAIN_R_PRICED


def _listed(ids: Sequence[str]) -> str:
    shown = ", ".join(ids[:_LISTED])
    return shown if len(ids) <= _LISTED else f"{shown} and {len(ids) - _LISTED} more"


def _bound_note(verifiers: Sequence[Verifier], idxs: Sequence[tuple[int, ...]],
                keep: Sequence[bool], could: Sequence[tuple[str, float]]) -> str:
    """The reason's account of the work bound: who was left out, why, and whether it
    could matter."""
    out = [v.id for v, kept in zip(verifiers, keep, strict=True) if not kept]
    if not out:
        return ""
    ks = [len(idx) for idx, kept in zip(idxs, keep, strict=True) if not kept]
    span = str(min(ks)) if min(ks) == max(ks) else f"{min(ks)} to {max(ks)}"
    note = (f"; work bound: verifier(s) {_listed(out)} (over {span} premises, 2^k joint "
            f"outcomes each) not enumerated, at most {MAX_OUTCOMES} outcomes per decision")
    if could:
        ub = max(u for _, u in could)
        return (note + f"; upper bound of the one-step VOI, V_stop - lambda c - P_any * "
                f"min(theta, kappa), positive for {_listed([i for i, _ in could])} "
                f"(up to {ub:.6g}): they could be worth calling")
    return note + ("; upper bound of their one-step VOI, V_stop - lambda c - P_any * "
                   "min(theta, kappa), not positive: they cannot change the decision")
