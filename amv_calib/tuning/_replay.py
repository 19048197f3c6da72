"""Episode replay: frozen action instances, common random numbers, baseline policies, metrics.

An *episode set* is the padded-array form of an episodes JSONL file (``docs/data.md``,
BRIEF "Episodes JSONL"). :func:`replay` runs one policy over it:

- verifier answers come from a counter-based random stream keyed by
  ``(seed, instance_id, verifier_id, premise_id, call_index)`` (:func:`answer_uniform`), so
  every policy that calls the same verifier on the same premise sees the same answer
  (common random numbers) and a replay is byte-identical for identical inputs;
- the gate policies step all active instances through :func:`~amv_calib.gate.evaluate_batch`
  together (sequential stopping): decide, draw the chosen verifiers' answers, update the
  posteriors, mark the verifier used, repeat until every instance stops or spends its budget;
- the metrics of the source paper are computed per instance and summarised with seeded
  bootstrap intervals, overall and per family (see :data:`METRICS`).

numpy and the standard library only.
"""

from __future__ import annotations

import hashlib
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Literal, TypedDict, Unpack, cast, get_args

import numpy as np
from numpy.typing import NDArray

from amv_calib.contract import (
    PortableCalibrator,
    seed_prior_calibrator,
)
from amv_calib.exceptions import ConfigError

if TYPE_CHECKING:
    from amv_calib.gate import Gate

from amv_calib.tuning._episodes import EpisodeSet, _as_episode_set
from amv_calib.tuning._stream import _check_seed, stream_uniform

Policy = Literal[
    "always-proceed", "always-verify", "static", "seed", "myopic", "lookahead", "oracle"
]
POLICIES: Final[tuple[str, ...]] = get_args(Policy)
#: Row labels of the paper-style table.
POLICY_LABELS: Final[dict[str, str]] = {
    "always-proceed": "Always Proceed",
    "always-verify": "Always Verify",
    "static": "Static threshold",
    "seed": "Seed engine",
    "myopic": "AMV-Guard (myopic)",
    "lookahead": "AMV-Guard (lookahead)",
    "oracle": "Oracle",
}
#: The metrics, in table order; all are means over instances (rates as fractions).
METRICS: Final = (
    "gate_harmful",
    "verification_cost",
    "queries",
    "proceed_coverage",
    "abstention_rate",
    "total_loss",
)
#: Price of one unit of verifier cost in the evaluation's total loss (fixed for comparisons;
#: independent of the gate's own ``lambda_cost_scale``, which is a tuned knob).
LAMBDA_EVAL: Final = 1.0
#: Default ``tau`` of the static rule: verify a premise when its probability exceeds it.
DEFAULT_TAU: Final = 0.05

FloatArray = NDArray[np.float64]
BoolArray = NDArray[np.bool_]
IntArray = NDArray[np.intp]

# -- outcomes and metrics -------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Outcomes:
    """What a policy did on each instance.

    Attributes
    ----------
    proceed : ndarray of bool, shape (n,)
        Final decision PROCEED (else ABSTAIN).
    harmful : ndarray of bool, shape (n,)
        PROCEED while a premise is in fact violated.
    queries : ndarray of intp, shape (n,)
        Number of verifier calls.
    cost : ndarray of float64, shape (n,)
        Summed execution cost of those calls.
    loss : ndarray of float64, shape (n,)
        ``theta * harmful + kappa * abstain + lambda_eval * cost``.
    calls : ndarray of intp, shape (n, V)
        Calls per verifier slot.
    """

    proceed: BoolArray
    harmful: BoolArray
    queries: IntArray
    cost: FloatArray
    loss: FloatArray
    calls: IntArray

    def per_instance(self) -> FloatArray:
        """The per-instance values behind :data:`METRICS`, shape (n, 6)."""
        return np.column_stack(
            [
                self.harmful.astype(np.float64),
                self.cost,
                self.queries.astype(np.float64),
                self.proceed.astype(np.float64),
                (~self.proceed).astype(np.float64),
                self.loss,
            ]
        )


@dataclass(frozen=True, kw_only=True)
class MetricCI:
    """A metric's value on the data and its bootstrap percentile interval."""

    value: float
    lo: float
    hi: float

    def to_dict(self) -> dict[str, float]:
        return {"value": self.value, "lo": self.lo, "hi": self.hi}


@dataclass(frozen=True, kw_only=True)
class ReplayResult:
    """One policy's replay: per-instance outcomes and summarised metrics.

    ``overall`` and each ``by_family[f]`` map every name in :data:`METRICS` to a
    :class:`MetricCI`; ``family_n[f]`` is the family's instance count.
    """

    policy: str
    n: int
    outcomes: Outcomes
    overall: dict[str, MetricCI]
    by_family: dict[str, dict[str, MetricCI]]
    family_n: dict[str, int]
    config: dict[str, Any] = field(default_factory=dict)

    def summary(self) -> dict[str, float | int]:
        """Point values of every metric plus ``n`` (the ``--json`` object of one policy)."""
        out: dict[str, float | int] = {k: self.overall[k].value for k in METRICS}
        out["n"] = self.n
        return out

    def to_dict(self) -> dict[str, Any]:
        """Everything but the per-instance arrays, as plain data."""
        return {
            "policy": self.policy,
            "n": self.n,
            "overall": {k: v.to_dict() for k, v in self.overall.items()},
            "by_family": {
                f: {k: v.to_dict() for k, v in d.items()} for f, d in self.by_family.items()
            },
            "family_n": dict(self.family_n),
            "config": dict(self.config),
        }


def _bootstrap(
    values: FloatArray, *, n_boot: int, seed: int, ci: float
) -> list[MetricCI]:
    n = values.shape[0]
    point = values.mean(axis=0)
    if n_boot <= 0 or n == 0:
        return [MetricCI(value=float(v), lo=float(v), hi=float(v)) for v in point]
    rng = np.random.default_rng(seed)
    means = np.empty((n_boot, values.shape[1]), dtype=np.float64)
    # A resample is a vector of counts (how often each instance is drawn): bincount of n
    # uniform draws, then one matrix product gives every metric's mean at once.
    chunk = max(1, min(n_boot, 8_000_000 // max(n, 1)))
    counts = np.empty((chunk, n), dtype=np.float64)
    for start in range(0, n_boot, chunk):
        b = min(chunk, n_boot - start)
        for k in range(b):
            counts[k] = np.bincount(rng.integers(0, n, size=n), minlength=n)
        means[start : start + b] = counts[:b] @ values / n
    a = (1.0 - ci) / 2.0
    lo = np.quantile(means, a, axis=0)
    hi = np.quantile(means, 1.0 - a, axis=0)
    return [
        MetricCI(value=float(v), lo=float(lo_), hi=float(hi_))
        for v, lo_, hi_ in zip(point, lo, hi, strict=True)
    ]


def _group_seed(seed: int, group: str) -> int:
    digest = hashlib.blake2b(f"{seed}\x1fbootstrap\x1f{group}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little")


def summarise(
    outcomes: Outcomes,
    family: Sequence[str],
    *,
    n_boot: int = 1000,
    seed: int = 0,
    ci: float = 0.95,
) -> tuple[dict[str, MetricCI], dict[str, dict[str, MetricCI]], dict[str, int]]:
    """Metric values with percentile bootstrap intervals, overall and per family.

    The resampling indices depend only on ``seed``, the group and its size, so two policies
    replayed on the same episodes are resampled identically (paired intervals).
    """
    if not 0.0 < ci < 1.0:
        raise ValueError(f"ci={ci!r} must lie in (0, 1)")
    values = outcomes.per_instance()
    overall = dict(zip(METRICS, _bootstrap(values, n_boot=n_boot, seed=_group_seed(seed, ""),
                                           ci=ci), strict=True))
    fam = np.asarray(family, dtype=object)
    by_family: dict[str, dict[str, MetricCI]] = {}
    counts: dict[str, int] = {}
    for f in sorted(set(family)):
        sel = fam == f
        counts[f] = int(sel.sum())
        by_family[f] = dict(
            zip(
                METRICS,
                _bootstrap(values[sel], n_boot=n_boot, seed=_group_seed(seed, f), ci=ci),
                strict=True,
            )
        )
    return overall, by_family, counts


def _outcomes(
    es: EpisodeSet, proceed: BoolArray, calls: IntArray, lambda_eval: float
) -> Outcomes:
    harmful = proceed & es.any_violated
    queries = calls.sum(axis=1).astype(np.intp)
    cost = (calls * np.where(es.verifier_mask, es.cost, 0.0)).sum(axis=1)
    loss = es.theta * harmful + es.kappa * (~proceed) + lambda_eval * cost
    return Outcomes(proceed=proceed, harmful=harmful, queries=queries, cost=cost, loss=loss,
                    calls=calls)


# -- the policies -------------------------------------------------------------------------------


def _signals(es: EpisodeSet, rows: IntArray, v: IntArray, calls: IntArray, seed: int) -> BoolArray:
    """Confirm (True) / refute signal of verifier ``v[k]`` on every premise of ``rows[k]``."""
    keys = es.stream_key[rows, v, :]
    u = stream_uniform(keys, seed, calls[rows, v][:, None]).reshape(keys.shape)
    correct = u < es.reliability[rows, v][:, None]
    truth_valid = ~es.violated[rows]
    return cast(BoolArray, truth_valid == correct)


def _cheapest(es: EpisodeSet) -> IntArray:
    """Per premise slot, its cheapest verifier (first on ties), -1 if none resolves it."""
    res = es.resolves & es.verifier_mask[:, :, None]
    c = np.where(res, es.cost[:, :, None], np.inf)
    best = np.argmin(c, axis=1)
    has = np.any(res, axis=1)
    return cast(IntArray, np.where(has & es.premise_mask, best, -1).astype(np.intp))


def _static(es: EpisodeSet, flagged: BoolArray, seed: int) -> tuple[BoolArray, IntArray]:
    """Verify the flagged premises once each with their cheapest verifier.

    Each chosen verifier is called once and answers for every premise it resolves. PROCEED iff
    no answer is a refutation and every flagged premise got at least one answer; a flagged
    premise that no verifier resolves therefore forces ABSTAIN.
    """
    n, nv = es.cost.shape
    cheap = _cheapest(es)
    flagged = flagged & es.premise_mask
    chosen = np.zeros((n, nv), dtype=bool)
    rows, cols = np.nonzero(flagged & (cheap >= 0))
    chosen[rows, cheap[rows, cols]] = True
    calls = chosen.astype(np.intp)
    refuted = np.zeros(n, dtype=bool)
    answered = np.zeros(es.premise_mask.shape, dtype=bool)
    zero = np.zeros((n, nv), dtype=np.intp)
    for v in range(nv):
        r = np.flatnonzero(chosen[:, v])
        if r.size == 0:
            continue
        vv = np.full(r.size, v, dtype=np.intp)
        sig = _signals(es, r, vv, zero, seed)
        res = es.resolves[r, v, :] & es.premise_mask[r]
        refuted[r] |= np.any(res & ~sig, axis=1)
        answered[r] |= res
    proceed = ~refuted & ~np.any(flagged & ~answered, axis=1)
    return proceed, calls


def _gate_policy(
    es: EpisodeSet, gate: Gate, p: FloatArray, seed: int, n_jobs: int = 1
) -> tuple[BoolArray, IntArray, IntArray]:
    """Sequential stopping with the batch gate; returns (proceed, calls, steps)."""
    from amv_calib.gate import PROCEED, VERIFY, evaluate_batch, update_batch

    n, nv = es.cost.shape
    post = p.copy()
    avail = es.verifier_mask.copy()
    calls = np.zeros((n, nv), dtype=np.intp)
    proceed = np.zeros(n, dtype=bool)
    steps = np.zeros(n, dtype=np.intp)
    active = np.arange(n)
    budget = int(gate.max_verifications)
    reuse = bool(gate.reuse_verifiers)
    for step in range(budget + 1):
        if active.size == 0:
            break
        left = np.full(active.size, budget - step, dtype=np.intp)
        bd = evaluate_batch(
            gate, post[active], es.premise_mask[active], es.theta[active], es.kappa[active],
            es.resolves[active], es.cost[active], es.reliability[active], avail[active],
            budget=left, n_jobs=n_jobs,
        )
        verify = bd.regime == VERIFY
        done = active[~verify]
        proceed[done] = bd.regime[~verify] == PROCEED
        rows = active[verify]
        if rows.size == 0:
            break
        v = bd.verifier[verify]
        sig = _signals(es, rows, v, calls, seed)
        post[rows] = update_batch(
            gate, post[rows], es.premise_mask[rows], es.resolves[rows, v, :], sig,
            es.reliability[rows, v],
        )
        calls[rows, v] += 1
        if not reuse:
            avail[rows, v] = False
        steps[rows] += 1
        active = rows
    return proceed, calls, steps


def _default_gate(policy: str, calibrator: PortableCalibrator | None, gate: Gate | None) -> Gate:
    from amv_calib.gate import Gate as _Gate

    if policy == "seed":
        return _Gate(mode="seed", planner="myopic", calibrator=seed_prior_calibrator())
    if gate is not None:
        cal = calibrator if calibrator is not None else gate.calibrator
        return _Gate(
            lambda_cost_scale=gate.lambda_cost_scale,
            delta_loss_threshold=gate.delta_loss_threshold,
            epsilon_harm_bound=gate.epsilon_harm_bound,
            harm_price=gate.harm_price,
            planner=cast(Literal["myopic", "lookahead"], policy),
            mode="amv",
            max_verifications=gate.max_verifications,
            reuse_verifiers=gate.reuse_verifiers,
            calibrator=cal,
            refusal=gate.refusal,
        )
    if calibrator is None:
        raise ConfigError(f"policy {policy!r} needs a calibrator (or a gate holding one)")
    return _Gate(planner=cast(Literal["myopic", "lookahead"], policy), calibrator=calibrator)


class _ReplayOptions(TypedDict, total=False):
    """The keyword options of :func:`replay` besides ``seed``, as :func:`replay_many` passes
    them on (an option left out takes :func:`replay`'s default)."""

    gate: Gate | None
    calibrator: PortableCalibrator | None
    tau: float
    lambda_eval: float
    n_boot: int
    ci: float
    n_jobs: int


def replay(
    episodes: EpisodeSet | str | os.PathLike[str] | Iterable[Mapping[str, Any]],
    policy: Policy,
    *,
    seed: int,
    gate: Gate | None = None,
    calibrator: PortableCalibrator | None = None,
    tau: float = DEFAULT_TAU,
    lambda_eval: float = LAMBDA_EVAL,
    n_boot: int = 1000,
    ci: float = 0.95,
    n_jobs: int = 1,
) -> ReplayResult:
    """Replay ``policy`` over frozen episodes and summarise the metrics.

    Parameters
    ----------
    episodes : EpisodeSet, path or iterable of episode objects
    policy : {"always-proceed", "always-verify", "static", "seed", "myopic", "lookahead", \
"oracle"}
        ``always-proceed``: PROCEED, no verification. ``always-verify``: every premise is
        verified once with its cheapest verifier; PROCEED iff every answer confirms.
        ``static``: the same, restricted to premises whose calibrated probability exceeds
        ``tau``. ``seed``: the seed engine (seed prior, seed thresholds, myopic VOI,
        ``mode="seed"``). ``myopic`` / ``lookahead``: AMV-Guard with the learned
        calibrator and that planner, thresholds from ``gate`` (else the gate defaults).
        ``oracle``: PROCEED iff no premise is violated, no verification.
    seed : int
        Seeds the answer stream and the bootstrap.
    gate : Gate, optional
        Thresholds (the harm price included), budget and calibrator for ``myopic`` /
        ``lookahead`` (its planner is replaced by the policy's).
    calibrator : PortableCalibrator, optional
        Overrides the gate's calibrator; ``static`` needs one (or a gate holding one).
    tau : float
        Threshold of ``static``.
    lambda_eval : float
        Price of a unit of verifier cost in ``total_loss`` (fixed at 1.0 to compare policies).
    n_boot : int
        Bootstrap resamples (0: no intervals).
    ci : float
        Interval coverage.
    n_jobs : int
        Threads for the compiled batch engine (same results for any value).

    Returns
    -------
    ReplayResult
    """
    if policy not in POLICIES:
        raise ConfigError(f"policy={policy!r} is not one of {list(POLICIES)}")
    seed = _check_seed(seed)
    es = _as_episode_set(episodes)
    outcomes, config = _run_policy(es, policy, seed=seed, gate=gate, calibrator=calibrator,
                                   tau=tau, lambda_eval=lambda_eval, n_jobs=n_jobs)
    overall, by_family, counts = summarise(outcomes, es.family, n_boot=n_boot, seed=seed, ci=ci)
    return ReplayResult(policy=policy, n=len(es), outcomes=outcomes, overall=overall,
                        by_family=by_family, family_n=counts, config=config)


def _run_policy(
    es: EpisodeSet,
    policy: str,
    *,
    seed: int,
    gate: Gate | None,
    calibrator: PortableCalibrator | None,
    tau: float,
    lambda_eval: float,
    n_jobs: int = 1,
) -> tuple[Outcomes, dict[str, Any]]:
    n, nv = es.cost.shape
    config: dict[str, Any] = {"policy": policy, "seed": seed, "lambda_eval": lambda_eval}
    if policy == "always-proceed":
        proceed = np.ones(n, dtype=bool)
        calls = np.zeros((n, nv), dtype=np.intp)
    elif policy == "oracle":
        proceed = ~es.any_violated
        calls = np.zeros((n, nv), dtype=np.intp)
    elif policy == "always-verify":
        proceed, calls = _static(es, es.premise_mask.copy(), seed)
    elif policy == "static":
        cal = calibrator if calibrator is not None else (gate.calibrator if gate else None)
        if cal is None:
            raise ConfigError("policy 'static' needs a calibrator (or a gate holding one)")
        if not math.isfinite(tau):
            raise ValueError(f"tau={tau!r} must be finite")
        proceed, calls = _static(es, es.probabilities(cal) > tau, seed)
        config["tau"] = tau
    else:
        g = _default_gate(policy, calibrator, gate)
        if g.calibrator is None:
            raise ConfigError(f"policy {policy!r} needs a calibrator (or a gate holding one)")
        proceed, calls, _ = _gate_policy(es, g, es.probabilities(g.calibrator), seed, n_jobs)
        config.update(
            lambda_cost_scale=g.lambda_cost_scale,
            delta_loss_threshold=g.delta_loss_threshold,
            epsilon_harm_bound=g.epsilon_harm_bound,
            harm_price=g.harm_price,
            planner=g.planner,
            mode=g.mode,
            max_verifications=g.max_verifications,
        )
    return _outcomes(es, proceed, calls, lambda_eval), config


def replay_many(
    episodes: EpisodeSet | str | os.PathLike[str] | Iterable[Mapping[str, Any]],
    policies: Sequence[Policy],
    *,
    seed: int,
    **options: Unpack[_ReplayOptions],
) -> dict[str, ReplayResult]:
    """:func:`replay` for several policies on the same episodes and answer stream.

    ``seed`` and the other keyword options are :func:`replay`'s, with its defaults.
    """
    es = _as_episode_set(episodes)
    return {p: replay(es, p, seed=seed, **options) for p in policies}


# -- the paper-style table ------------------------------------------------------------
_TABLE_COLUMNS = (
    ("gate_harmful", "Gate Harmful %", 100.0),
    ("verification_cost", "Verif. cost", 1.0),
    ("queries", "Queries", 1.0),
    ("proceed_coverage", "Proceed Cov. %", 100.0),
    ("abstention_rate", "Abstain %", 100.0),
    ("total_loss", "Total loss", 1.0),
)


def _fmt(m: Mapping[str, Any], key: str, scale: float) -> str:
    v = m[key]
    if isinstance(v, Mapping):
        return f"{v['value'] * scale:.2f} [{v['lo'] * scale:.2f}, {v['hi'] * scale:.2f}]"
    return f"{float(v) * scale:.2f}"


def format_table(rows: Mapping[str, Mapping[str, Any]], counts: Mapping[str, int],
                 observed_bound: Mapping[str, float] | None = None) -> str:
    """Paper-style table: one row per policy, value [95% interval] per metric.

    ``observed_bound`` maps a policy to the Clopper-Pearson upper bound of its Gate Harmful
    on the calibration episodes of a Learn-then-Test certificate: a column "Calibration harm
    bound % (observed)" then shows it ("-" for the other policies). It is not certified
    (the configuration was chosen on the same episodes); the certificate's statement is
    "Gate Harmful <= alpha with probability >= 1 - delta".
    """
    labels = {**POLICY_LABELS, "tuned": "AMV-Guard (tuned)",
              "untuned": "AMV-Guard (default thresholds)"}
    extra = ["Calibration harm bound % (observed)"] if observed_bound else []
    header = ["Policy", *[c[1] for c in _TABLE_COLUMNS], *extra, "n"]
    body = [
        [labels.get(name, name), *[_fmt(m, k, s) for k, _, s in _TABLE_COLUMNS],
         *([f"{observed_bound[name] * 100:.2f}" if name in observed_bound else "-"]
           if observed_bound else []),
         str(counts[name])]
        for name, m in rows.items()
    ]
    widths = [max(len(r[i]) for r in [header, *body]) for i in range(len(header))]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in body]
    return "\n".join(lines)

