"""Synthetic claim outcomes and action episodes with a known truth.

Claims come from ten *perturbation families* (stale contact details, changed balances, ...).
Each family has its own feature distributions and its own violation law (the generative
truth, :func:`family_probability`):

- a hazard-style staleness law: the fact behind the claim has changed by age ``h`` with
  probability ``pi * (1 - exp(-(h / scale) ** shape))``;
- a wrong-from-the-start rate that grows as the source's trust falls:
  ``wrong * (1 - trust) ** trust_power``;
- an over-confident model confidence: its evidence is Beta-shaped and weak,
  ``conf_low * -ln(conf) - conf_high * -ln(1 - conf)``, so a confidence of 0.99 is far from
  a 1% error rate;
- a contradiction flag whose weight grows as trust falls (an interaction):
  ``contradiction * (flag_base + flag_trust * (1 - trust))``.

``logit(p_family) = logit(prior) + evidence``. The label ``violated`` of a row is drawn from
its own family's law. Calibrators see only the four features, never the family, so the
column ``p_true`` is the probability given the four features: the Bayes posterior over
families, ``sum_g P(g | x) p_g(x)``, computed exactly from the known feature densities. That
is the oracle a calibrator can at best reach (``E[violated | x] == p_true``).

numpy and pandas; the same seed gives the same bytes.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import numpy as np
from numpy.typing import NDArray

from amv_calib.contract import CLAIM_FEATURES, sigmoid
from amv_calib.datasets._common import EPOCH_START, YEAR_S, check_size_seed
from amv_calib.datasets._kinds import synth_kind_claims
from amv_calib.exceptions import ConfigError

if TYPE_CHECKING:
    import pandas as pd


FloatArray = NDArray[np.float64]
BoolArray = NDArray[np.bool_]

#: Columns of :func:`synth_claims`, in order.
CLAIM_COLUMNS: Final = (
    "claim_id", "timestamp", *CLAIM_FEATURES, "violated", "source", "tool_name", "family",
    "p_true",
)

_YEAR_S: Final = YEAR_S

_P_EPS: Final = 1e-6


@dataclass(frozen=True, kw_only=True)
class Family:
    """One perturbation family: where its claims live in feature space and how they fail.

    Feature distributions: ``recency_hours ~ LogNormal(ln(recency_median), recency_sigma)``,
    ``source_trust_score ~ Beta(*trust_beta)``, ``model_confidence ~ Beta(*conf_beta)``,
    ``contradiction_flag ~ Bernoulli(contradiction_rate)``. The law's parameters are
    described in the module docstring.
    """

    name: str
    description: str
    weight: float
    # where its claims live in feature space (the class docstring)
    recency_median: float
    recency_sigma: float
    trust_beta: tuple[float, float]
    conf_beta: tuple[float, float]
    contradiction_rate: float
    # how they fail: the staleness law (the module docstring)
    pi: float
    scale: float
    shape: float
    wrong: float
    trust_power: float
    conf_low: float
    conf_high: float
    flag_base: float
    flag_trust: float
    source: str
    tools: tuple[str, str, str]  # (low-impact read, medium, irreversible)


FAMILIES: Final[tuple[Family, ...]] = (
    Family(name="stale_contact_details",
           description="a contact's email or phone number changed",
           weight=0.12, recency_median=900.0, recency_sigma=1.4, trust_beta=(7.0, 2.0),
           conf_beta=(6.0, 1.5), contradiction_rate=0.06, pi=0.55, scale=10000.0, shape=1.3,
           wrong=0.05, trust_power=1.5, conf_low=1.1, conf_high=0.35, flag_base=1.2,
           flag_trust=2.0, source="crm",
           tools=("lookup_contact", "send_email", "send_contract_for_signature")),
    Family(name="changed_balance",
           description="an account balance moved since it was remembered",
           weight=0.10, recency_median=20.0, recency_sigma=1.4, trust_beta=(14.0, 1.5),
           conf_beta=(8.0, 1.2), contradiction_rate=0.05, pi=0.70, scale=150.0, shape=0.8,
           wrong=0.025, trust_power=1.0, conf_low=0.9, conf_high=0.25, flag_base=1.5,
           flag_trust=1.0, source="bank_api",
           tools=("get_balance_summary", "pay_invoice", "bank_transfer")),
    Family(name="revoked_permission",
           description="an access right was revoked",
           weight=0.09, recency_median=500.0, recency_sigma=1.4, trust_beta=(6.0, 2.0),
           conf_beta=(5.0, 1.5), contradiction_rate=0.07, pi=0.45, scale=3750.0, shape=2.2,
           wrong=0.04, trust_power=1.5, conf_low=1.0, conf_high=0.30, flag_base=1.4,
           flag_trust=2.0, source="iam",
           tools=("read_document", "share_document", "grant_admin_access")),
    Family(name="moved_address",
           description="a shipping or postal address changed",
           weight=0.10, recency_median=2500.0, recency_sigma=1.4, trust_beta=(6.0, 2.5),
           conf_beta=(5.0, 1.8), contradiction_rate=0.05, pi=0.40, scale=22500.0, shape=1.1,
           wrong=0.06, trust_power=1.2, conf_low=1.2, conf_high=0.40, flag_base=1.3,
           flag_trust=2.2, source="user_chat",
           tools=("check_delivery_eta", "update_shipping_address", "ship_order")),
    Family(name="price_change",
           description="a quoted price is no longer valid",
           weight=0.11, recency_median=96.0, recency_sigma=1.4, trust_beta=(9.0, 2.0),
           conf_beta=(7.0, 1.5), contradiction_rate=0.04, pi=0.60, scale=600.0, shape=1.6,
           wrong=0.03, trust_power=1.3, conf_low=0.8, conf_high=0.30, flag_base=1.4,
           flag_trust=1.6, source="web_scrape",
           tools=("get_quote", "add_to_cart", "place_order")),
    Family(name="cancelled_order",
           description="an order was cancelled after it was remembered",
           weight=0.09, recency_median=150.0, recency_sigma=1.4, trust_beta=(10.0, 2.0),
           conf_beta=(6.0, 1.4), contradiction_rate=0.05, pi=0.30, scale=1000.0, shape=0.7,
           wrong=0.025, trust_power=1.0, conf_low=1.0, conf_high=0.25, flag_base=1.6,
           flag_trust=1.5, source="order_service",
           tools=("check_order_status", "notify_customer", "refund_order")),
    Family(name="configuration_drift",
           description="a service's configuration drifted from the remembered one",
           weight=0.10, recency_median=300.0, recency_sigma=1.4, trust_beta=(8.0, 2.0),
           conf_beta=(6.0, 2.0), contradiction_rate=0.06, pi=0.50, scale=2000.0, shape=1.8,
           wrong=0.035, trust_power=1.4, conf_low=1.1, conf_high=0.35, flag_base=1.3,
           flag_trust=2.0, source="config_repo",
           tools=("read_config", "restart_service", "update_config")),
    Family(name="contradicted_by_newer_memory",
           description="a newer memory says something else",
           weight=0.09, recency_median=400.0, recency_sigma=1.4, trust_beta=(5.0, 2.5),
           conf_beta=(4.0, 2.0), contradiction_rate=0.55, pi=0.35, scale=3000.0, shape=1.0,
           wrong=0.05, trust_power=1.2, conf_low=1.2, conf_high=0.40, flag_base=1.0,
           flag_trust=2.5, source="agent_memory",
           tools=("suggest_meeting_time", "schedule_meeting", "book_travel")),
    Family(name="low_trust_source_injection",
           description="the claim came from an untrusted page or message",
           weight=0.10, recency_median=200.0, recency_sigma=1.4, trust_beta=(1.6, 5.0),
           conf_beta=(5.0, 1.3), contradiction_rate=0.10, pi=0.20, scale=5000.0, shape=1.0,
           wrong=0.225, trust_power=1.8, conf_low=0.7, conf_high=0.15, flag_base=0.8,
           flag_trust=3.0, source="web_page",
           tools=("summarize_page", "post_message", "execute_payment")),
    Family(name="duplicated_conflicting_value",
           description="the same claim is stored twice with different values",
           weight=0.10, recency_median=600.0, recency_sigma=1.4, trust_beta=(5.0, 2.0),
           conf_beta=(3.0, 2.0), contradiction_rate=0.30, pi=0.35, scale=6250.0, shape=1.2,
           wrong=0.1, trust_power=1.0, conf_low=1.3, conf_high=0.45, flag_base=1.1,
           flag_trust=2.0, source="crm",
           tools=("search_crm", "update_crm_record", "send_invoice")),
)
_BY_NAME: Final = {f.name: f for f in FAMILIES}
_WEIGHTS: Final = np.array([f.weight for f in FAMILIES]) / sum(f.weight for f in FAMILIES)

# Impact tiers of the three tools of a family: theta and kappa ranges (log-uniform).
_THETA_RANGE: Final = ((0.05, 1.5), (1.5, 40.0), (40.0, 2000.0))
_KAPPA_RANGE: Final = ((0.3, 2.0), (1.0, 6.0), (2.0, 10.0))


# --------------------------------------------------------------------------------------
# the laws


def _as_features(
    recency_hours: Any, source_trust_score: Any, model_confidence: Any, contradiction_flag: Any
) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
    h = np.asarray(recency_hours, dtype=np.float64)
    t = np.clip(np.asarray(source_trust_score, dtype=np.float64), _P_EPS, 1 - _P_EPS)
    c = np.clip(np.asarray(model_confidence, dtype=np.float64), _P_EPS, 1 - _P_EPS)
    k = np.asarray(contradiction_flag, dtype=np.float64)
    if np.any(h < 0) or not np.all(np.isfinite(h)):
        raise ValueError("recency_hours must be finite and >= 0")
    return h, t, c, k


def family_probability(
    family: str,
    recency_hours: Any,
    source_trust_score: Any,
    model_confidence: Any,
    contradiction_flag: Any,
) -> FloatArray:
    """The violation probability under one family's law (the generative truth of a row).

    Raises
    ------
    ValueError
        If ``family`` is unknown or a feature is out of its domain.
    """
    f = _family(family)
    h, t, c, k = _as_features(recency_hours, source_trust_score, model_confidence,
                              contradiction_flag)
    changed = f.pi * -np.expm1(-np.power(h / f.scale, f.shape))
    wrong = f.wrong * np.power(1.0 - t, f.trust_power)
    prior = np.clip(1.0 - (1.0 - changed) * (1.0 - wrong), _P_EPS, 1 - _P_EPS)
    z = (np.log(prior) - np.log1p(-prior)
         + f.conf_low * -np.log(c) - f.conf_high * -np.log1p(-c)
         + k * (f.flag_base + f.flag_trust * (1.0 - t)))
    return sigmoid(z)


def _family(name: str) -> Family:
    f = _BY_NAME.get(name)
    if f is None:
        raise ValueError(f"family={name!r} is not one of {', '.join(_BY_NAME)}")
    return f


def _log_beta_pdf(x: FloatArray, a: float, b: float) -> FloatArray:
    norm = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
    return np.asarray((a - 1.0) * np.log(x) + (b - 1.0) * np.log1p(-x) + norm)


def _family_log_density(
    f: Family, h: FloatArray, t: FloatArray, c: FloatArray, k: FloatArray
) -> FloatArray:
    """log density of the four features under family ``f`` (up to a term common to all)."""
    with np.errstate(divide="ignore"):
        lh = np.log(np.maximum(h, 1e-300))
    z = (lh - math.log(f.recency_median)) / f.recency_sigma
    log_h = -0.5 * z * z - math.log(f.recency_sigma)  # the -ln(h) term is common
    return np.asarray(
        log_h
        + _log_beta_pdf(t, *f.trust_beta)
        + _log_beta_pdf(c, *f.conf_beta)
        + k * math.log(f.contradiction_rate) + (1.0 - k) * math.log1p(-f.contradiction_rate)
    )


def family_posterior(
    recency_hours: Any, source_trust_score: Any, model_confidence: Any, contradiction_flag: Any
) -> FloatArray:
    """``P(family | four features)`` under the generator, shape ``(n, len(FAMILIES))``."""
    h, t, c, k = _as_features(recency_hours, source_trust_score, model_confidence,
                              contradiction_flag)
    logits = np.stack(
        [math.log(w) + _family_log_density(f, h, t, c, k)
         for w, f in zip(_WEIGHTS, FAMILIES, strict=True)],
        axis=-1,
    )
    logits -= logits.max(axis=-1, keepdims=True)
    post = np.exp(logits)
    return np.asarray(post / post.sum(axis=-1, keepdims=True))


def true_probability(
    recency_hours: Any, source_trust_score: Any, model_confidence: Any, contradiction_flag: Any
) -> FloatArray:
    """``P(violated | four features)``: the best any calibrator can do (the ``p_true`` column).

    The Bayes mixture ``sum_g P(g | x) * family_probability(g, x)``; rows at
    ``recency_hours == 0`` use the families' limits.
    """
    post = family_posterior(recency_hours, source_trust_score, model_confidence,
                            contradiction_flag)
    laws = np.stack(
        [family_probability(f.name, recency_hours, source_trust_score, model_confidence,
                            contradiction_flag) for f in FAMILIES],
        axis=-1,
    )
    return np.asarray(np.clip((post * laws).sum(axis=-1), _P_EPS, 1 - _P_EPS))


# --------------------------------------------------------------------------------------
# sampling


_check = check_size_seed


@dataclass(frozen=True, kw_only=True)
class _Draw:
    family: NDArray[np.int64]
    h: FloatArray
    t: FloatArray
    c: FloatArray
    k: BoolArray
    violated: BoolArray
    p_true: FloatArray


def _draw(rng: np.random.Generator, family: NDArray[np.int64]) -> _Draw:
    """Features, labels and ``p_true`` for rows of the given families (indices)."""
    n = len(family)
    h = np.empty(n)
    t = np.empty(n)
    c = np.empty(n)
    k = np.empty(n, dtype=bool)
    u = rng.random((n, 4))
    # One draw per feature and row, family by family in a fixed order: reproducible.
    for i, f in enumerate(FAMILIES):
        sel = family == i
        m = int(sel.sum())
        if m == 0:
            continue
        h[sel] = np.exp(math.log(f.recency_median) + f.recency_sigma * rng.standard_normal(m))
        t[sel] = rng.beta(*f.trust_beta, size=m)
        c[sel] = rng.beta(*f.conf_beta, size=m)
        k[sel] = u[sel, 0] < f.contradiction_rate
    # Rounded as written to files; the truth is computed from the rounded values.
    h = np.round(h, 3)
    t = np.clip(np.round(t, 4), 1e-4, 1 - 1e-4)
    c = np.clip(np.round(c, 4), 1e-4, 1 - 1e-4)
    p_row = np.empty(n)
    for i, f in enumerate(FAMILIES):
        sel = family == i
        if sel.any():
            p_row[sel] = family_probability(f.name, h[sel], t[sel], c[sel], k[sel])
    violated = u[:, 1] < p_row
    p_true = np.clip(np.round(true_probability(h, t, c, k), 6), _P_EPS, 1 - _P_EPS)
    return _Draw(family=family, h=h, t=t, c=c, k=k, violated=violated, p_true=p_true)


def synth_claims(n: int, *, seed: int, kinds: bool = False) -> pd.DataFrame:
    """``n`` claim outcomes in the data contract, with ``family`` and ``p_true``.

    Rows are in time order over the year 2026 (``timestamp`` is ``datetime64[us, UTC]``);
    ``claim_id`` is unique per row (``clm-0000001``...). ``tool_name`` is one of the
    family's tools, ``source`` its usual source.

    With ``kinds=True``: claims of the world whose memory kinds age differently instead
    (:func:`~amv_calib.datasets.synth_kind_claims` of
    :data:`~amv_calib.datasets.DEFAULT_KIND_WORLD`: ``memory_kind`` and ``p_true``, no
    family).

    Raises
    ------
    ConfigError
        If ``n`` or ``seed`` is not a non-negative integer.
    """
    import pandas as pd

    if kinds:
        return synth_kind_claims(n, seed=seed)
    _check(n, seed)
    rng = np.random.default_rng([seed, 0])
    family = rng.choice(len(FAMILIES), size=n, p=_WEIGHTS).astype(np.int64)
    d = _draw(rng, family)
    seconds = np.sort(rng.integers(0, _YEAR_S, size=n))
    tool_tier = rng.integers(0, 3, size=n)
    names = np.array([f.name for f in FAMILIES], dtype=object)
    sources = np.array([f.source for f in FAMILIES], dtype=object)
    tools = np.array([f.tools for f in FAMILIES], dtype=object)
    ts = pd.to_datetime(EPOCH_START + seconds, unit="s", utc=True).as_unit("us")
    frame = pd.DataFrame({
        "claim_id": [f"clm-{i:07d}" for i in range(1, n + 1)],
        "timestamp": ts,
        "recency_hours": d.h,
        "source_trust_score": d.t,
        "model_confidence": d.c,
        "contradiction_flag": d.k,
        "violated": d.violated,
        "source": sources[family],
        "tool_name": tools[family, tool_tier],
        "family": names[family],
        "p_true": d.p_true,
    })
    for col in ("claim_id", "source", "tool_name", "family"):
        frame[col] = frame[col].astype("str")
    return frame


def _log_uniform(rng: np.random.Generator, lo: float, hi: float) -> float:
    return float(math.exp(rng.uniform(math.log(lo), math.log(hi))))


def synth_episodes(n: int, *, seed: int) -> list[dict[str, Any]]:
    """``n`` frozen action instances in the episodes format (BRIEF "Episodes JSONL").

    Each instance has a family and one of its three tools, whose impact tier sets
    ``impact_cost_theta`` (log-uniform: reads 0.05-1.5, medium 1.5-40, irreversible
    40-2000) and ``abstention_cost_kappa``; 1-4 premises, each a claim of that family with
    ``violated`` drawn from the family's law and ``p_true`` as in :func:`synth_claims`;
    1-4 verifiers with costs (log-uniform 0.01-3) and reliabilities in (0.5, 1] (about a
    third perfect), each resolving one, two or all premises (so some premises may have no
    verifier).
    """
    _check(n, seed)
    rng = np.random.default_rng([seed, 1])
    family = rng.choice(len(FAMILIES), size=n, p=_WEIGHTS).astype(np.int64)
    n_prem = rng.integers(1, 5, size=n)
    prem_family = np.repeat(family, n_prem)
    d = _draw(rng, prem_family)
    starts = np.concatenate([[0], np.cumsum(n_prem)])
    episodes: list[dict[str, Any]] = []
    for i in range(n):
        f = FAMILIES[int(family[i])]
        tier = int(rng.integers(0, 3))
        iid = f"ep-{i + 1:05d}"
        premises = []
        for j in range(int(n_prem[i])):
            r = int(starts[i]) + j
            premises.append({
                "id": f"p{j + 1}",
                "claim_id": f"{iid}-c{j + 1}",
                "recency_hours": float(d.h[r]),
                "source_trust_score": float(d.t[r]),
                "model_confidence": float(d.c[r]),
                "contradiction_flag": bool(d.k[r]),
                "violated": bool(d.violated[r]),
                "p_true": float(d.p_true[r]),
            })
        ids = [p["id"] for p in premises]
        verifiers = []
        for v in range(int(rng.integers(1, 5))):
            kind = rng.random()
            if kind < 0.6 or len(ids) == 1:
                resolves = [ids[int(rng.integers(0, len(ids)))]]
            elif kind < 0.9:
                pick = np.sort(rng.choice(len(ids), size=2, replace=False))
                resolves = [ids[int(x)] for x in pick]
            else:
                resolves = list(ids)
            perfect = rng.random() < 0.3
            reliability = 1.0 if perfect else round(float(rng.uniform(0.6, 0.98)), 3)
            verifiers.append({
                "id": f"v{v + 1}",
                "resolves_premise_ids": resolves,
                "execution_cost": round(_log_uniform(rng, 0.01, 3.0), 4),
                "symmetric_reliability": reliability,
            })
        episodes.append({
            "instance_id": iid,
            "family": f.name,
            "tool_name": f.tools[tier],
            "impact_cost_theta": round(_log_uniform(rng, *_THETA_RANGE[tier]), 4),
            "abstention_cost_kappa": round(_log_uniform(rng, *_KAPPA_RANGE[tier]), 4),
            "premises": premises,
            "verifiers": verifiers,
        })
    return episodes


# --------------------------------------------------------------------------------------
# writers


def _claims_format(path: Path) -> str:
    ending = path.suffix.lower()
    if ending == ".csv":
        return "csv"
    if ending in (".parquet", ".pq"):
        return "parquet"
    if ending in (".jsonl", ".ndjson"):
        return "jsonl"
    raise ConfigError(f"cannot tell the format of {path.name!r}: use .csv, .parquet or .jsonl")


def write_claims(frame: pd.DataFrame, path: str | os.PathLike[str]) -> Path:
    """Write claims as CSV, Parquet or JSONL (from the ending); returns the path.

    Text formats write timestamps as ISO-8601 UTC (``2026-03-01T12:00:00Z``) and flags as
    ``true``/``false``; the output depends only on the frame (same frame, same bytes).
    """
    p = Path(path)
    fmt = _claims_format(p)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(f".{p.name}.{os.getpid()}.tmp")
    try:
        if fmt == "parquet":
            frame.to_parquet(tmp, index=False)
        else:
            text = frame.copy()
            text["timestamp"] = text["timestamp"].dt.strftime("%Y-%m-%dT%H:%M:%SZ")
            for col in ("contradiction_flag", "violated"):
                text[col] = np.where(text[col].to_numpy(), "true", "false")
            if fmt == "csv":
                text.to_csv(tmp, index=False, lineterminator="\n")
            else:
                with open(tmp, "w", encoding="utf-8", newline="\n") as fh:
                    for rec in text.to_dict(orient="records"):
                        for col in ("contradiction_flag", "violated"):
                            rec[col] = rec[col] == "true"
                        fh.write(json.dumps(rec, separators=(",", ":")) + "\n")
        os.replace(tmp, p)
    finally:
        tmp.unlink(missing_ok=True)
    return p


def write_episodes(episodes: Sequence[Mapping[str, Any]], path: str | os.PathLike[str]) -> Path:
    """Write episodes as JSONL, one compact object per line; returns the path."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(f".{p.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8", newline="\n") as fh:
            for ep in episodes:
                fh.write(json.dumps(ep, separators=(",", ":")) + "\n")
        os.replace(tmp, p)
    finally:
        tmp.unlink(missing_ok=True)
    return p
