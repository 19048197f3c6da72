"""Certification by Learn-then-Test: a harm bound that holds on the user's own episodes.

Angelopoulos, Bates, Candès, Jordan and Lei, *Learn then Test: calibrating predictive
algorithms to achieve risk control* (Annals of Applied Statistics, 2025). The procedure:

1. a *path* of gate configurations is fixed before the calibration episodes are looked at:
   the tuned thresholds with the harm price mu raised step by step, listed from the safest
   (largest mu) to the riskiest (the tuned mu);
2. on calibration episodes disjoint from the tuning ones, each configuration's Gate Harmful
   (the share of episodes where it PROCEEDs while a premise is violated; a binary loss) gets
   a valid p-value for ``H0: harm rate > alpha``, the Hoeffding-Bentkus p-value for a
   binary loss: ``min(exp(-n h(min(r, alpha), alpha)), P(Binomial(n, alpha) <= n r))``;
3. fixed-sequence testing at level delta walks the path from the safest end and certifies
   configurations while their p-value is at most delta (the family-wise error stays at
   most delta, so every certified configuration has harm rate <= alpha with probability at
   least 1 - delta, for episodes exchangeable with the calibration ones);
4. the certified configuration with the lowest total loss on the calibration episodes is
   chosen (any choice among certified ones keeps the guarantee).

The certificate also gives the Clopper-Pearson upper bound (confidence 1 - delta) of the
chosen configuration's harm rate. ``tests/tuning/test_certify.py`` checks the p-values and
the testing against MAPIE's risk-control module and the guarantee by simulation.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

import numpy as np
from numpy.typing import NDArray

from amv_calib.exceptions import ConfigError, InsufficientDataError

if TYPE_CHECKING:
    from amv_calib.contract import PortableCalibrator
    from amv_calib.tuning._replay import EpisodeSet

#: What ``Certificate.method`` says.
METHOD: Final = "learn-then-test: fixed-sequence testing, Hoeffding-Bentkus p-values (binary)"
#: Harm prices of the default path, added to the tuned one, safest first; the last step is
#: the tuned thresholds themselves. In units of loss, like theta.
HARM_PRICE_STEPS: Final = (1e6, 1e5, 3e4, 1e4, 3e3, 1e3, 300.0, 100.0, 30.0, 10.0, 3.0, 1.0,
                           0.3, 0.1, 0.0)

BoolArray = NDArray[np.bool_]
FloatArray = NDArray[np.float64]


class CertificationError(InsufficientDataError):
    """No configuration of the path could be certified at the requested alpha and delta."""


# -- the statistics ----------------------------------------------------------------------
def hb_p_value(harms: int, n: int, alpha: float) -> float:
    """Hoeffding-Bentkus p-value of ``H0: harm rate > alpha`` for a binary loss.

    ``harms`` of ``n`` calibration episodes were harmful (empirical rate ``r = harms / n``).
    Valid for i.i.d. (exchangeable) episodes; the Bentkus term is the binomial tail, which
    for a binary loss needs no factor ``e`` (LTT, section 3.2).
    """
    from scipy.stats import binom

    if n <= 0:
        return 1.0
    r = harms / n
    rr = min(r, alpha)
    h = (rr * math.log(rr / alpha) if rr > 0.0 else 0.0) + (
        (1.0 - rr) * math.log((1.0 - rr) / (1.0 - alpha)))
    hoeffding = math.exp(-n * h)
    bentkus = float(binom.cdf(math.ceil(n * r), n, alpha))
    return min(hoeffding, bentkus)


def fixed_sequence(p_values: Sequence[float], delta: float) -> list[int]:
    """Indices certified by fixed-sequence testing: a prefix of the path, each p <= delta."""
    out: list[int] = []
    for j, p in enumerate(p_values):
        if not p <= delta:
            break
        out.append(j)
    return out


def clopper_pearson_upper(harms: int, n: int, confidence: float) -> float:
    """One-sided Clopper-Pearson upper bound of a binomial rate at ``confidence``."""
    from scipy.stats import beta

    if n <= 0:
        return 1.0
    if harms >= n:
        return 1.0
    return float(beta.ppf(confidence, harms + 1, n - harms))


def supported_alpha(harms: int, n: int, delta: float) -> float:
    """The smallest alpha at which ``harms`` of ``n`` gives a p-value <= delta (bisection)."""
    if hb_p_value(harms, n, 1.0 - 1e-12) > delta:
        return 1.0
    lo, hi = 0.0, 1.0 - 1e-12
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        if hb_p_value(harms, n, mid) <= delta:
            hi = mid
        else:
            lo = mid
    return hi


# -- the certificate ---------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class Certificate:
    """What certification found; ``to_dict`` is what the manifest records.

    Attributes
    ----------
    alpha, delta : float
        Harm level and error probability: P(harm rate of the chosen gate > alpha) <= delta.
    n : int
        Calibration episodes.
    method : str
    path : list of dict
        The configurations tested, safest first (each a thresholds object).
    harms, losses, p_values : list
        Per configuration: harmful calibration episodes, mean total loss, p-value.
    certified : list of int
        Positions in ``path`` certified (a prefix; empty when none).
    chosen : int or None
        The certified position of lowest mean loss.
    upper_bound : float or None
        Clopper-Pearson upper bound (confidence ``1 - delta``) of the chosen harm rate.
    episodes_fingerprint : str
        sha256 of the calibration episodes' ids, in order.
    """

    alpha: float
    delta: float
    n: int
    method: str
    path: list[dict[str, Any]]
    harms: list[int]
    losses: list[float]
    p_values: list[float]
    certified: list[int]
    chosen: int | None
    upper_bound: float | None
    episodes_fingerprint: str
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def thresholds(self) -> dict[str, Any] | None:
        """The chosen configuration, or None when nothing was certified."""
        return None if self.chosen is None else dict(self.path[self.chosen])

    @property
    def supported_alpha(self) -> float:
        """The smallest alpha the safest configuration of the path could be certified at."""
        return supported_alpha(self.harms[0], self.n, self.delta) if self.harms else 1.0

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (the manifest's ``certificate``)."""
        chosen = self.chosen
        return {
            "alpha": self.alpha, "delta": self.delta, "n": self.n, "method": self.method,
            "path": self.path, "harms": self.harms, "losses": self.losses,
            "p_values": self.p_values, "certified": self.certified, "chosen": chosen,
            "thresholds": self.thresholds,
            "harm_rate": None if chosen is None else self.harms[chosen] / self.n,
            "clopper_pearson_upper": self.upper_bound,
            "supported_alpha": self.supported_alpha,
            "episodes_fingerprint": self.episodes_fingerprint, **self.extra,
        }


def _check_levels(alpha: float, delta: float) -> None:
    for name, v in (("alpha", alpha), ("delta", delta)):
        if not (isinstance(v, (int, float)) and 0.0 < float(v) < 1.0):
            raise ConfigError(f"{name}={v!r} must lie in (0, 1)")


def certify(
    path: Sequence[Mapping[str, Any]],
    evaluate: Callable[[Mapping[str, Any]], tuple[BoolArray, FloatArray]],
    *,
    alpha: float,
    delta: float,
    episodes_fingerprint: str,
) -> Certificate:
    """Learn-then-Test over ``path`` (safest first) with ``evaluate(config) -> (harmful,
    loss)`` per calibration episode; see the module docstring. Never raises for a path that
    certifies nothing: ``chosen`` is then None (see :func:`require_certified`)."""
    _check_levels(alpha, delta)
    if not path:
        raise ConfigError("the certification path is empty")
    harms: list[int] = []
    losses: list[float] = []
    n = -1
    for config in path:
        harmful, loss = evaluate(config)
        if n < 0:
            n = len(harmful)
        harms.append(int(np.count_nonzero(harmful)))
        losses.append(float(np.mean(loss)) if len(loss) else math.nan)
    p_values = [hb_p_value(k, n, alpha) for k in harms]
    certified = fixed_sequence(p_values, delta)
    chosen = min(certified, key=lambda j: (losses[j], j)) if certified else None
    upper = None if chosen is None else clopper_pearson_upper(harms[chosen], n, 1.0 - delta)
    return Certificate(alpha=float(alpha), delta=float(delta), n=n, method=METHOD,
                       path=[dict(c) for c in path], harms=harms, losses=losses,
                       p_values=p_values, certified=certified, chosen=chosen,
                       upper_bound=upper, episodes_fingerprint=episodes_fingerprint)


def require_certified(cert: Certificate) -> dict[str, Any]:
    """The certified thresholds, or :class:`CertificationError` saying what the data support."""
    if cert.thresholds is not None:
        return cert.thresholds
    raise CertificationError(
        f"no configuration of the path is certified at alpha={cert.alpha:g}, "
        f"delta={cert.delta:g} on {cert.n} calibration episodes: even the safest one was "
        f"harmful in {cert.harms[0]} of them, which supports alpha >= "
        f"{cert.supported_alpha:.4g} at this delta; raise alpha to that, or certify on more "
        f"episodes")


# -- gates, episodes and the harm-price path ---------------------------------------------
def harm_price_path(thresholds: Mapping[str, Any],
                    steps: Sequence[float] = HARM_PRICE_STEPS) -> list[dict[str, Any]]:
    """The tuned ``thresholds`` with the harm price raised by each of ``steps``, safest
    (largest) first; ``steps`` must be decreasing and end at 0 (the tuned gate)."""
    s = [float(x) for x in steps]
    if not s or s[-1] != 0.0 or any(a <= b for a, b in zip(s, s[1:], strict=False)):
        raise ConfigError(f"harm-price steps {list(steps)} must decrease strictly to 0")
    base = float(thresholds.get("harm_price", 0.0) or 0.0)
    return [{**thresholds, "harm_price": base + x} for x in s]


def episodes_fingerprint(es: EpisodeSet) -> str:
    """sha256 over the episodes' ids in order (what the calibration set was)."""
    h = hashlib.sha256(b"amv-calib/episodes-v1\n")
    for iid in es.instance_id:
        h.update(str(iid).encode("utf-8") + b"\n")
    return h.hexdigest()


def certification_split(es: EpisodeSet, tune_fraction: float
                        ) -> tuple[BoolArray, BoolArray, BoolArray]:
    """Masks ``(tune, calibration, test)``: the tuning split of
    :func:`~amv_calib.tuning.split_episodes`, and the rest halved by a second hash of the
    instance id (independent of the first), so certification never sees a tuning episode
    and a test half stays for the held-out table."""
    from amv_calib.tuning._search import split_episodes

    tune, rest = split_episodes(es, tune_fraction)
    u = np.array([int.from_bytes(hashlib.blake2b(
        f"amv-calib/certify-split\x1f{iid}".encode(), digest_size=8).digest(), "little")
        / 2.0**64 for iid in es.instance_id])
    calibration = rest & (u < 0.5)
    return tune, calibration, rest & ~calibration


def gate_evaluator(es: EpisodeSet, calibrator: PortableCalibrator, *, seed: int,
                   lambda_eval: float) -> Callable[[Mapping[str, Any]], tuple[BoolArray,
                                                                           FloatArray]]:
    """``evaluate(thresholds) -> (harmful, loss)`` per episode of ``es``, by replay."""
    from amv_calib.gate import Gate
    from amv_calib.tuning._replay import _run_policy

    def evaluate(t: Mapping[str, Any]) -> tuple[BoolArray, FloatArray]:
        gate = Gate(lambda_cost_scale=t["lambda_cost_scale"],
                    delta_loss_threshold=t["delta_loss_threshold"],
                    epsilon_harm_bound=t["epsilon_harm_bound"], planner=t["planner"],
                    max_verifications=t["max_verifications"],
                    harm_price=t.get("harm_price", 0.0), calibrator=calibrator)
        out, _ = _run_policy(es, t["planner"], seed=seed, gate=gate, calibrator=calibrator,
                             tau=0.0, lambda_eval=lambda_eval)
        return out.harmful, out.loss

    return evaluate


def certify_thresholds(
    episodes: EpisodeSet,
    calibrator: PortableCalibrator,
    thresholds: Mapping[str, Any],
    *,
    alpha: float,
    delta: float,
    seed: int,
    lambda_eval: float = 1.0,
    steps: Sequence[float] = HARM_PRICE_STEPS,
) -> Certificate:
    """Certify the harm-price path of ``thresholds`` on calibration ``episodes``."""
    path = harm_price_path(thresholds, steps)
    evaluate = gate_evaluator(episodes, calibrator, seed=seed, lambda_eval=lambda_eval)
    return certify(path, evaluate, alpha=alpha, delta=delta,
                   episodes_fingerprint=episodes_fingerprint(episodes))


def frontier_figure(certificate: Mapping[str, Any]) -> Any:
    """Harm against loss along the certified path (the paper's Figures 3 and 4 style).

    Each configuration of the path is a point (calibration Gate Harmful against mean total
    loss; filled when certified), the chosen one is ringed with its Clopper-Pearson upper
    bound drawn as an error bar, and the line at alpha marks the certified level.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    n = int(certificate["n"])
    harm = np.asarray(certificate["harms"], dtype=float) / max(n, 1)
    loss = np.asarray(certificate["losses"], dtype=float)
    mu = [float(c.get("harm_price", 0.0)) for c in certificate["path"]]
    certified = np.zeros(len(harm), dtype=bool)
    certified[list(certificate["certified"])] = True
    fig = Figure(figsize=(7.0, 5.0), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    ax.plot(loss, harm * 100, "-", color="0.6", linewidth=1, zorder=1)
    ax.scatter(loss[certified], harm[certified] * 100, s=30, color="C0", zorder=2,
               label="certified configurations")
    if (~certified).any():
        ax.scatter(loss[~certified], harm[~certified] * 100, s=30, facecolors="none",
                   edgecolors="C3", zorder=2, label="not certified")
    span_x = float(np.ptp(loss)) or 1.0
    span_y = float(np.ptp(harm * 100)) or 1.0
    placed: list[tuple[float, float]] = []
    for x, y, m in zip(loss, harm * 100, mu, strict=True):
        # one label where several configurations fall on the same spot
        if any(abs(x - a) < 0.04 * span_x and abs(y - b) < 0.04 * span_y for a, b in placed):
            continue
        placed.append((x, y))
        ax.annotate(f"mu={m:g}", (x, y), textcoords="offset points", xytext=(4, 3),
                    fontsize=6, color="0.35")
    alpha = float(certificate["alpha"])
    ax.axhline(alpha * 100, color="C3", linestyle="--", linewidth=1,
               label=f"alpha = {alpha:.2%}")
    chosen = certificate.get("chosen")
    if chosen is not None:
        upper = float(certificate["clopper_pearson_upper"])
        ax.errorbar([loss[chosen]], [harm[chosen] * 100],
                    yerr=[[0.0], [(upper - harm[chosen]) * 100]], fmt="o", markersize=11,
                    markerfacecolor="none", color="C2", capsize=4, zorder=3,
                    label=f"chosen (mu={mu[chosen]:g}); upper bound {upper:.2%}")
    ax.set_xlabel("mean total loss per episode (calibration)")
    ax.set_ylabel("Gate Harmful % (calibration)")
    ax.set_title(f"Harm against loss along the certified path (n = {n}, "
                 f"delta = {float(certificate['delta']):g}; chosen = lowest loss certified)",
                 fontsize=9)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, loc="upper right")
    return fig
