"""Batch gate: the decisions of :meth:`Gate.evaluate` for many actions at once.

Arrays are padded: ``n`` actions, at most ``m`` premises and ``V`` verifiers each. Every row
is decided by the compiled engine (:mod:`amv_calib.gate._compiled`), which runs the scalar
engine's arithmetic operation for operation (the myopic rule in both modes and the lookahead
planner), so the decisions agree with :meth:`Gate.evaluate` bit for bit, ties included.

This module imports numpy and the standard library only; the compiled engine (and numba)
is imported on the first :func:`evaluate_batch` call.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final, Protocol

import numpy as np
from numpy.typing import ArrayLike, NDArray

from amv_calib.contract import PortableCalibrator
from amv_calib.gate._model import GateSettings

__all__ = [
    "ABSTAIN",
    "PROCEED",
    "REGIME_NAMES",
    "VERIFY",
    "BatchDecision",
    "calibrate_batch",
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
    def settings(self) -> GateSettings: ...

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
        Screened stopping value, ``(theta + harm_price) * P_any`` (``theta * P_any`` in
        ``mode="seed"``) and ``P_any`` at the current posteriors.
    admissible : ndarray of bool, shape (n,)
        ``r_expected <= min(delta, kappa)`` and ``h_harm <= epsilon``.
    outcomes, left_out, planner_states : ndarray of int64, shape (n,)
        The work of each row (:class:`~amv_calib.gate.Decision`'s fields of the same
        names): joint outcomes enumerated (at most ``MAX_OUTCOMES``), verifiers the work
        bound left out, beliefs the planner valued (at most ``MAX_WORK``).
    """

    regime: NDArray[np.int8]
    verifier: IntArray
    voi: FloatArray
    v_stop: FloatArray
    r_expected: FloatArray
    h_harm: FloatArray
    admissible: BoolArray
    outcomes: NDArray[np.int64]
    left_out: NDArray[np.int64]
    planner_states: NDArray[np.int64]

    def __len__(self) -> int:
        return int(self.regime.shape[0])

    def regime_names(self) -> list[str]:
        """The regimes as strings (``"PROCEED"``, ``"VERIFY"``, ``"ABSTAIN"``)."""
        return [REGIME_NAMES[int(c)] for c in self.regime]


# -- stopping value and posteriors ---------------------------------------------------------


def stopping_value_batch(
    gate: _GateLike, p: ArrayLike, premise_mask: ArrayLike, theta: ArrayLike, kappa: ArrayLike
) -> tuple[FloatArray, FloatArray, FloatArray, BoolArray]:
    """Screened stopping value per row: ``(v_stop, r_expected, h_harm, admissible)``.

    The decisions of :func:`evaluate_batch` with no verifier (one copy of the arithmetic).
    """
    pa = np.asarray(p, dtype=np.float64)
    n, m = pa.shape if pa.ndim == 2 else (0, 0)  # evaluate_batch names a wrong shape
    bd = evaluate_batch(gate, pa, premise_mask, theta, kappa, np.zeros((n, 0, m), dtype=bool),
                        np.zeros((n, 0)), np.zeros((n, 0)))
    return bd.v_stop, bd.r_expected, bd.h_harm, bd.admissible


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
    if gate.settings.mode == "seed":
        rows = np.arange(target.shape[0])
        first = np.argmax(target, axis=1)
        has = target[rows, first]
        target = np.zeros_like(target)
        target[rows[has], first[has]] = True
    r = np.broadcast_to(np.asarray(reliability, dtype=np.float64)[:, None], p.shape)
    post = posterior_batch(p, r, np.asarray(confirm, dtype=bool), mode=gate.settings.mode)
    return np.where(target, post, p)


# -- premise probabilities ------------------------------------------------------------------


def calibrate_batch(
    calibrator: PortableCalibrator,
    features: ArrayLike,
    premise_mask: ArrayLike | None = None,
    memory_kinds: Any = None,
) -> FloatArray:
    """Violation probability of each premise slot from its claim, by the compiled engine.

    The same bits as the scalar gate's (``calibrator.predict_one`` of each claim with its
    kind), so ``evaluate_batch`` on the result decides as :meth:`Gate.evaluate` does on
    premises that carry claims.

    Parameters
    ----------
    calibrator : PortableCalibrator
    features : array_like, shape (n, m, 4)
        The claim features of each slot, in ``CLAIM_FEATURES`` order (``recency_hours``,
        ``source_trust_score``, ``model_confidence``, ``contradiction_flag`` as 0 or 1).
    premise_mask : array_like of bool, shape (n, m), optional
        Which slots are real (default all); the others get 0 and are not checked.
    memory_kinds : array_like, shape (n, m), optional
        Each claim's memory kind: a string, or None / NaN for none (evaluated as
        ``"other"``, as is a kind outside the calibrator's vocabulary). Ignored by a
        calibrator without kinds.

    Returns
    -------
    ndarray of float64, shape (n, m)

    Raises
    ------
    ValueError
        A shape mismatch, a feature out of the range a :class:`MemoryClaim` allows, or a
        kind the contract's rule refuses (:func:`~amv_calib.contract.check_memory_kind`,
        as the scalar gate refuses it), naming the array and the index.
    """
    from amv_calib.contract import CLAIM_FEATURES

    feat = np.asarray(features, dtype=np.float64)
    if feat.ndim != 3 or feat.shape[2] != len(CLAIM_FEATURES):
        raise ValueError(f"features has shape {feat.shape}, expected (n, m, "
                         f"{len(CLAIM_FEATURES)}) with columns {list(CLAIM_FEATURES)}")
    n, m = feat.shape[:2]
    mask = (np.ones((n, m), dtype=bool) if premise_mask is None
            else _as("premise_mask", premise_mask, bool, (n, m)))
    for c, (name, lo, hi) in enumerate((("recency_hours", 0.0, np.inf),
                                        ("source_trust_score", 0.0, 1.0),
                                        ("model_confidence", 0.0, 1.0),
                                        ("contradiction_flag", 0.0, 1.0))):
        col = feat[:, :, c]
        ok = (col >= lo) & (col <= hi) & np.isfinite(col)
        if c == 3:
            ok &= (col == 0.0) | (col == 1.0)
        _check_range(f"features[..., {c}] ({name})", col, mask, ok,
                     "0 or 1" if c == 3 else f"in [{lo:g}, {hi:g}] and finite")
    codes = np.full((n, m), -1, dtype=np.int64)
    if calibrator.has_kinds:
        if memory_kinds is None:
            codes[:] = calibrator.kind_code(None)
        else:
            kinds = np.asarray(memory_kinds, dtype=object)
            if kinds.shape != (n, m):
                raise ValueError(f"memory_kinds has shape {kinds.shape}, expected {(n, m)}")
            flat = kinds.reshape(-1)
            _check_kinds(flat, m)
            codes[:] = calibrator.kind_codes(flat).reshape(n, m)
    from amv_calib.gate import _compiled

    cc = np.ascontiguousarray
    return _compiled.calibrate_rows(calibrator, cc(feat), cc(codes), cc(mask))


# -- input checks ---------------------------------------------------------------------------


def _check_kinds(flat: NDArray[Any], m: int) -> None:
    """Refuse the first kind of ``flat`` (slots of rows of ``m``) that the contract's rule
    refuses (:class:`~amv_calib.contract.MemoryKindError`, a ``ValueError``), naming its
    slot; None and NaN are absent. Each distinct value is checked once."""
    from amv_calib.contract import check_memory_kind

    def absent(v: Any) -> bool:
        return v is None or (isinstance(v, float) and v != v)

    try:
        for v in {v for v in flat.tolist() if not absent(v)}:
            check_memory_kind(v)
        return
    except (TypeError, ValueError):  # unhashable or refused: find the first such slot
        pass
    for at, v in enumerate(flat.tolist()):
        if not absent(v):
            check_memory_kind(v, f"memory_kinds[{at // m}, {at % m}]")


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


def _check_inputs(pa: FloatArray, mask: BoolArray, th: FloatArray, ka: FloatArray,
                  co: FloatArray, rel: FloatArray, avail: BoolArray) -> None:
    """Raise ValueError naming the first entry out of range (array, index, value, rule)."""
    n = th.shape[0]
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
        Thresholds (the harm price included), ``planner``, ``mode``, ``max_verifications``,
        ``reuse_verifiers`` and ``refusal`` come from it.
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
        Threads for the rows (used from :data:`~amv_calib.gate._compiled.PARALLEL_MIN_ROWS`
        rows per thread on); the decisions do not depend on it.

    Returns
    -------
    BatchDecision

    Raises
    ------
    ValueError
        On a shape mismatch or an out-of-range value, naming the array and the index.

    Notes
    -----
    The first call imports numba and loads the compiled engine (compiling it, if its
    on-disk cache is missing or stale). The arrays of the result are views of one
    allocation: keeping one of them keeps the block alive. Each row obeys the scalar
    gate's work bound (``amv_calib.gate._engine``, "Work bound") with the same rule.
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
    avail = (np.ones((n, n_ver), dtype=bool) if available is None
             else _as("available", available, bool, (n, n_ver)))
    st = gate.settings
    left = (np.full(n, st.max_verifications, dtype=np.int64) if budget is None
            else _as("budget", budget, np.int64, (n,)))
    seed = st.mode == "seed"
    mu = 0.0 if seed else st.harm_price  # the seed engine knows no harm price
    if gate.refusal is not None:
        # fail closed as the scalar gate does: P_any = 1, V_stop = kappa
        _check_inputs(pa, mask, th, ka, co, rel, avail)
        zero = np.zeros(n, dtype=np.int64)
        return BatchDecision(
            regime=np.full(n, ABSTAIN, dtype=np.int8), verifier=np.full(n, -1, dtype=np.intp),
            voi=np.full(n, -np.inf), v_stop=ka.copy(), r_expected=th + mu,
            h_harm=np.ones(n), admissible=np.zeros(n, dtype=bool),
            outcomes=zero, left_out=zero.copy(), planner_states=zero.copy(),
        )
    from amv_calib.gate import _compiled

    # The outputs share one block: for large batches numpy backs it with huge pages, and
    # first-touch page faults on ten separate arrays would cost as much as the engine.
    f8 = np.dtype(np.float64).itemsize
    block = np.empty(n * (8 * f8 + 2), dtype=np.uint8)
    out_f = block[: 4 * f8 * n].view(np.float64).reshape(4, n)
    out_i = block[4 * f8 * n: 7 * f8 * n].view(np.int64).reshape(3, n)
    verifier = block[7 * f8 * n: 8 * f8 * n].view(np.int64)
    regime = block[8 * f8 * n: (8 * f8 + 1) * n].view(np.int8)
    adm = block[(8 * f8 + 1) * n:].view(np.bool_)
    c = np.ascontiguousarray
    bad = _compiled.decide_rows(
        seed=seed, look=st.planner == "lookahead", reuse=st.reuse_verifiers,
        lam=st.lambda_cost_scale, delta=st.delta_loss_threshold, eps=st.epsilon_harm_bound,
        mu=mu,
        p=c(pa), mask=c(mask), theta=c(th), kappa=c(ka), res=c(res), cost=c(co), rel=c(rel),
        avail=c(avail), left=c(left), out_f=out_f, out_i=out_i, verifier=verifier,
        regime=regime, adm=adm, n_jobs=n_jobs)
    if bad:
        _check_inputs(pa, mask, th, ka, co, rel, avail)
        raise RuntimeError("the compiled gate refused an input that the checks accept")
    return BatchDecision(
        regime=regime,
        verifier=verifier.view(np.intp),
        voi=out_f[0],
        v_stop=out_f[1],
        r_expected=out_f[2],
        h_harm=out_f[3],
        admissible=adm,
        outcomes=out_i[0],
        left_out=out_i[1],
        planner_states=out_i[2],
    )
