"""A synthetic world whose memory kinds age differently, with a known truth.

Every claim carries a ``memory_kind``; each kind has its own staleness law, as in
:mod:`amv_calib.datasets._synth` (the fact behind a claim has changed by age ``h`` with
probability ``pi * (1 - exp(-(h / scale) ** shape))``) and its own age distribution, while
the trust, confidence and contradiction evidence is shared:

``logit(p) = logit(1 - (1 - changed) * (1 - wrong * (1 - trust) ** 1.3))
+ conf_low * -ln(conf) - conf_high * -ln(1 - conf) + flag * (1.2 + 2 * (1 - trust))``.

The kind is observed, so ``p_true`` is this law itself: the oracle a calibrator that reads
the kind can at best reach. numpy and pandas; the same seed gives the same bytes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

import numpy as np
from numpy.typing import NDArray

from amv_calib.contract import sigmoid
from amv_calib.datasets._common import EPOCH_START, YEAR_S, check_size_seed

if TYPE_CHECKING:
    import pandas as pd

FloatArray = NDArray[np.float64]

_P_EPS: Final = 1e-6


@dataclass(frozen=True, kw_only=True)
class KindLaw:
    """One memory kind: its share of the claims, its ages and its staleness law.

    ``recency_hours ~ LogNormal(ln(recency_median), recency_sigma)``; the law is the module
    docstring's.
    """

    name: str
    weight: float
    recency_median: float
    recency_sigma: float
    pi: float
    scale: float
    shape: float


@dataclass(frozen=True, kw_only=True)
class KindWorld:
    """Kinds and the evidence they share (the module docstring's law)."""

    kinds: tuple[KindLaw, ...]
    wrong: float = 0.05
    conf_low: float = 1.0
    conf_high: float = 0.3
    trust_beta: tuple[float, float] = (7.0, 2.0)
    conf_beta: tuple[float, float] = (5.0, 1.5)
    contradiction_rate: float = 0.06

    def probability(self, kind: NDArray[np.intp], h: FloatArray, t: FloatArray,
                    c: FloatArray, k: FloatArray) -> FloatArray:
        """``P(violated)`` of claims of the kinds ``kind`` (indices into ``kinds``)."""
        pi = np.array([x.pi for x in self.kinds])[kind]
        scale = np.array([x.scale for x in self.kinds])[kind]
        shape = np.array([x.shape for x in self.kinds])[kind]
        changed = pi * -np.expm1(-np.power(h / scale, shape))
        wrong = self.wrong * np.power(1.0 - t, 1.3)
        prior = np.clip(1.0 - (1.0 - changed) * (1.0 - wrong), _P_EPS, 1 - _P_EPS)
        z = (np.log(prior) - np.log1p(-prior) + self.conf_low * -np.log(c)
             - self.conf_high * -np.log1p(-c) + k * (1.2 + 2.0 * (1.0 - t)))
        return np.asarray(sigmoid(z))


# (name, weight, recency_median, recency_sigma, pi, scale, shape) of each default kind.
_DEFAULT_LAWS: Final = (
    ("behaviour", 0.15, 600.0, 1.4, 0.55, 2000.0, 1.5),
    ("deployment", 0.15, 60.0, 1.4, 0.7, 120.0, 0.9),
    ("event", 0.15, 150.0, 1.4, 0.85, 300.0, 1.3),
    ("fact", 0.25, 800.0, 1.4, 0.25, 20000.0, 1.0),
    ("opinion", 0.1, 700.0, 1.4, 0.5, 1500.0, 0.8),
    ("preference", 0.2, 1500.0, 1.4, 0.4, 6000.0, 1.2),
)
#: The default world: six kinds, from facts that hardly age to deployments stale in days.
DEFAULT_KIND_WORLD: Final = KindWorld(kinds=tuple(
    KindLaw(name=name, weight=weight, recency_median=median, recency_sigma=sigma, pi=pi,
            scale=scale, shape=shape)
    for name, weight, median, sigma, pi, scale, shape in _DEFAULT_LAWS))


def synth_kind_claims(n: int, *, seed: int, world: KindWorld = DEFAULT_KIND_WORLD
                      ) -> pd.DataFrame:
    """``n`` claim outcomes with ``memory_kind`` and ``p_true``, in time order over 2026.

    Raises
    ------
    ConfigError
        If ``n`` or ``seed`` is not a non-negative integer.
    """
    import pandas as pd

    check_size_seed(n, seed)
    rng = np.random.default_rng([seed, 7])
    weights = np.array([x.weight for x in world.kinds])
    kind = rng.choice(len(world.kinds), size=n, p=weights / weights.sum()).astype(np.intp)
    median = np.array([x.recency_median for x in world.kinds])[kind]
    sigma = np.array([x.recency_sigma for x in world.kinds])[kind]
    h = np.round(np.exp(np.log(median) + sigma * rng.standard_normal(n)), 3)
    t = np.clip(np.round(rng.beta(*world.trust_beta, size=n), 4), 1e-4, 1 - 1e-4)
    c = np.clip(np.round(rng.beta(*world.conf_beta, size=n), 4), 1e-4, 1 - 1e-4)
    k = rng.random(n) < world.contradiction_rate
    p = np.clip(np.round(world.probability(kind, h, t, c, k.astype(np.float64)), 6),
                _P_EPS, 1 - _P_EPS)
    violated = rng.random(n) < p
    seconds = np.sort(rng.integers(0, YEAR_S, size=n))
    names = np.array([x.name for x in world.kinds], dtype=object)
    frame = pd.DataFrame({
        "claim_id": [f"knd-{i:07d}" for i in range(1, n + 1)],
        "timestamp": pd.to_datetime(EPOCH_START + seconds, unit="s", utc=True).as_unit("us"),
        "recency_hours": h,
        "source_trust_score": t,
        "model_confidence": c,
        "contradiction_flag": k,
        "violated": violated,
        "memory_kind": names[kind],
        "p_true": p,
    })
    for col in ("claim_id", "memory_kind"):
        frame[col] = frame[col].astype("str")
    return frame

