"""Certification by Learn-then-Test: a harm bound that holds on the user's own episodes.

Angelopoulos, Bates, Candès, Jordan and Lei, *Learn then Test: calibrating predictive
algorithms to achieve risk control* (Annals of Applied Statistics, 2025). The procedure:

1. a *path* of gate configurations is fixed before the calibration episodes are looked at:
   the tuned thresholds with the harm price mu raised step by step, listed from the safest
   (largest mu) to the riskiest (the tuned mu), on a grid fixed in advance
   (:data:`HARM_PRICE_STEPS`; fixed-sequence testing pays nothing for more steps);
2. the calibration episodes are every episode given that did not shape the thresholds:
   the artifact's :class:`~amv_calib.tuning.TuningRecord` (its tuning split, and the
   calibration set of any earlier certificate that chose its harm price) is excluded;
3. on them each configuration's Gate Harmful (the share of episodes where it PROCEEDs while
   a premise is violated; a binary loss) gets the exact binomial p-value of ``H0: harm rate
   > alpha``, ``P(Binomial(n, alpha) <= harms)`` (valid for exchangeable episodes);
4. fixed-sequence testing at level delta walks the path from the safest end and certifies
   configurations while their p-value is at most delta (the family-wise error stays at
   most delta, so every certified configuration has harm rate <= alpha with probability at
   least 1 - delta, for episodes exchangeable with the calibration ones);
5. the certified configuration with the lowest total loss on the calibration episodes is
   chosen (any choice among certified ones keeps the guarantee).

Only that statement is certified. The chosen configuration's Clopper-Pearson upper bound is
computed after the choice looked at the same data, so it is reported as an *observed*
bound, not a certified one. The certificate names what it vouches for: the sha256 of the
calibrator, the path's thresholds, the calibration episodes' fingerprint and count, and the
record of the episodes the certified thresholds have now seen (the loader and the exporter
refuse a certificate moved onto anything else: :func:`amv_calib.contract.
check_certificate_binding`). ``tests/tuning/test_certify.py`` checks the p-values against
scipy, the testing against MAPIE, and the guarantee by simulation, with the least favourable
configuration just above alpha and deliberately wrong methods that must fail.
"""

from __future__ import annotations

import hashlib
import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import numpy as np
from numpy.typing import NDArray

from amv_calib.calibration import clopper_pearson_upper
from amv_calib.contract import (
    PortableCalibrator,
    calibrator_sha256,
    check_thresholds,
    with_gate_clamp,
)
from amv_calib.exceptions import ConfigError, InsufficientDataError
from amv_calib.settings import CertifyOptions
from amv_calib.tuning._record import TuningRecord

if TYPE_CHECKING:
    from amv_calib.tuning._episodes import EpisodeSet

#: What ``Certificate.method`` says.
METHOD: Final = "learn-then-test: fixed-sequence testing, exact binomial p-values (binary harm)"
#: Harm prices of the default path, added to the tuned one, safest first; the last step is
#: the tuned thresholds themselves. In units of loss, like theta. About four steps a decade
#: where the sample worlds cross alpha (tens), so that a certified step lands near alpha.
HARM_PRICE_STEPS: Final = (1e6, 1e5, 3e4, 1e4, 5e3, 3e3, 2e3, 1e3, 700.0, 500.0, 300.0,
                           200.0, 150.0, 100.0, 70.0, 50.0, 40.0, 30.0, 25.0, 20.0, 15.0,
                           12.0, 10.0, 8.0, 6.0, 5.0, 4.0, 3.0, 2.0, 1.5, 1.0, 0.7, 0.5,
                           0.3, 0.2, 0.1, 0.0)

BoolArray = NDArray[np.bool_]
FloatArray = NDArray[np.float64]
#: The defaults of :func:`certify_episodes` (its command line's and step's too).
_CERTIFY: Final = CertifyOptions()


class CertificationError(InsufficientDataError):
    """No configuration of the path could be certified at the requested alpha and delta."""


# -- the statistics ----------------------------------------------------------------------
def binomial_p_value(harms: int, n: int, alpha: float) -> float:
    """Exact p-value of ``H0: harm rate > alpha`` from ``harms`` harmful of ``n`` episodes.

    ``P(Binomial(n, alpha) <= harms)``: under H0 the count is stochastically larger than a
    Binomial(n, alpha), so this tail is a valid p-value for a binary loss (it is the
    Bentkus term of the Hoeffding-Bentkus p-value, which is never smaller, taken exactly on
    the integer count).
    """
    from scipy.stats import binom

    if n <= 0:
        return 1.0
    if not (isinstance(harms, (int, np.integer)) and 0 <= harms <= n):
        raise ValueError(f"harms={harms!r} must be an integer in [0, n={n}]")
    return float(binom.cdf(int(harms), int(n), alpha))


def fixed_sequence(p_values: Sequence[float], delta: float) -> list[int]:
    """Indices certified by fixed-sequence testing: a prefix of the path, each p <= delta."""
    out: list[int] = []
    for j, p in enumerate(p_values):
        if not p <= delta:
            break
        out.append(j)
    return out


def supported_alpha(harms: int, n: int, delta: float) -> float:
    """The smallest alpha at which ``harms`` of ``n`` gives a p-value <= delta: the
    Clopper-Pearson upper bound at confidence ``1 - delta`` (where the binomial tail at
    ``harms`` equals delta)."""
    return clopper_pearson_upper(harms, n, 1.0 - delta)


def min_calibration_episodes(alpha: float, delta: float) -> int:
    """The fewest calibration episodes with which anything can be certified: zero harms in
    ``n`` give the p-value ``(1 - alpha)**n``, at most delta from this ``n`` on."""
    _check_levels(alpha, delta)
    n = math.ceil(math.log(delta) / math.log1p(-alpha))
    while (1.0 - alpha) ** n > delta:  # guard the float rounding of the quotient
        n += 1
    return int(n)


# -- the certificate ---------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class Certificate:
    """What certification found; ``to_dict`` is what the manifest records.

    Attributes
    ----------
    alpha, delta : float
        Harm level and error probability: P(harm rate of the chosen gate > alpha) <= delta,
        for episodes exchangeable with the calibration ones. This is what is certified.
    n : int
        Calibration episodes.
    method : str
    path : list of dict
        The configurations tested, safest first (each a checked thresholds object).
    harms, losses, p_values : list
        Per configuration: harmful calibration episodes, mean total loss, p-value.
    certified : list of int
        Positions in ``path`` certified (a prefix; empty when none).
    chosen : int or None
        The certified position of lowest mean loss.
    upper_bound : float or None
        The chosen harm rate's Clopper-Pearson upper bound at confidence ``1 - delta``:
        *observed*, not certified (the choice looked at the same episodes).
    episodes_fingerprint : str
        sha256 of the calibration episodes' ids, in order.
    calibrator_sha256 : str or None
        sha256 of the ``calibrator.json`` certified (as an export writes it).
    calibration : dict
        ``{"n", "fingerprint", "read", "excluded", "test"}``: episodes given, excluded
        because they shaped the thresholds, and kept out for a held-out table.
    excluded, seen : dict or None
        ``{"n", "fingerprint"}`` of the record excluded, and of the record the chosen
        thresholds carry from now on (it adds the calibration episodes, which chose).
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
    calibrator_sha256: str | None = None
    calibration: dict[str, Any] = field(default_factory=dict)
    excluded: dict[str, Any] | None = None
    seen: dict[str, Any] | None = None

    @property
    def thresholds(self) -> dict[str, Any] | None:
        """The chosen configuration, or None when nothing was certified."""
        return None if self.chosen is None else dict(self.path[self.chosen])

    @property
    def supported_alpha(self) -> float:
        """The smallest alpha the safest configuration of the path could be certified at."""
        return supported_alpha(self.harms[0], self.n, self.delta) if self.harms else 1.0

    @property
    def loss_given_up(self) -> float | None:
        """The chosen configuration's mean loss minus the lowest on the path (certified or
        not): what the guarantee costs on the calibration episodes."""
        if self.chosen is None:
            return None
        finite = [x for x in self.losses if math.isfinite(x)]
        return self.losses[self.chosen] - min(finite) if finite else None

    @property
    def statement(self) -> str:
        """The certified claim, in words."""
        return (f"Gate Harmful <= {self.alpha:g} with probability >= {1 - self.delta:g} on "
                f"episodes like the {self.n} calibration ones")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Certificate:
        """The certificate a manifest records (:meth:`to_dict`'s inverse)."""
        keys = ("alpha", "delta", "n", "method", "path", "harms", "losses", "p_values",
                "certified", "chosen", "episodes_fingerprint", "calibrator_sha256",
                "calibration", "excluded", "seen")
        missing = [k for k in keys[:11] if k not in data]
        if missing:
            raise ConfigError(f"certificate lacks {missing}")
        fields: dict[str, Any] = {k: data[k] for k in keys if k in data}
        return cls(**fields, upper_bound=data.get("observed_upper_bound"))

    def with_chosen(self, index: int) -> Certificate:
        """The same certificate with another certified configuration chosen (any choice
        among the certified ones keeps the guarantee: fixed-sequence testing certified each
        of them). Raises ConfigError for a position that was not certified."""
        if index not in self.certified:
            raise ConfigError(f"position {index} of the path was not certified (certified: "
                              f"{self.certified})")
        upper = clopper_pearson_upper(self.harms[index], self.n, 1.0 - self.delta)
        return replace(self, chosen=index, upper_bound=upper)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (the manifest's ``certificate``)."""
        chosen = self.chosen
        return {
            "alpha": self.alpha, "delta": self.delta, "n": self.n, "method": self.method,
            "statement": self.statement if chosen is not None else None,
            "path": self.path, "harms": self.harms, "losses": self.losses,
            "p_values": self.p_values, "certified": self.certified, "chosen": chosen,
            "thresholds": self.thresholds,
            "harm_rate": None if chosen is None else self.harms[chosen] / self.n,
            "observed_upper_bound": self.upper_bound,
            "loss_given_up": self.loss_given_up,
            "supported_alpha": self.supported_alpha,
            "episodes_fingerprint": self.episodes_fingerprint,
            "calibrator_sha256": self.calibrator_sha256,
            "calibration": self.calibration, "excluded": self.excluded, "seen": self.seen,
        }


def _check_levels(alpha: float, delta: float) -> None:
    """``alpha`` and ``delta`` checked as the certify stage's options are (one check)."""
    spec = CertifyOptions.spec()
    for name, v in (("alpha", alpha), ("delta", delta)):
        spec[name].check(name, v)


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
    p_values = [binomial_p_value(k, n, alpha) for k in harms]
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


def calibration_split(es: EpisodeSet, seen: TuningRecord | None, test_fraction: float = 0.0
                      ) -> tuple[BoolArray, BoolArray, BoolArray]:
    """Masks ``(excluded, calibration, test)`` over ``es``.

    ``excluded``: the episodes ``seen`` covers (they shaped the thresholds). Of the others,
    a share ``test_fraction`` (by a hash of the instance id independent of the tuning
    split's: ``blake2b("amv-calib/certify-split" 0x1f id)``) is kept out for a held-out
    table, and every other episode calibrates.
    """
    if not (isinstance(test_fraction, (int, float)) and 0.0 <= test_fraction < 1.0):
        raise ConfigError(f"test_fraction={test_fraction!r} must lie in [0, 1)")
    excluded = (seen.contains(es.instance_id) if seen is not None
                else np.zeros(len(es), dtype=bool))
    u = np.array([int.from_bytes(hashlib.blake2b(
        f"amv-calib/certify-split\x1f{iid}".encode(), digest_size=8).digest(), "little")
        / 2.0**64 for iid in es.instance_id])
    test = ~excluded & (u >= 1.0 - test_fraction)
    return excluded, ~excluded & ~test, test


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
    """Certify the harm-price path of ``thresholds`` on calibration ``episodes`` (all of
    them: choose them with :func:`certify_episodes`, which excludes what tuning saw).

    The calibrator is evaluated, and its sha256 bound, as an export writes it: with the
    thresholds' clamp (:func:`amv_calib.contract.with_gate_clamp`).
    """
    try:
        base = check_thresholds(thresholds)
    except ValueError as exc:
        raise ConfigError(f"thresholds: {exc}") from None
    cal, base = with_gate_clamp(calibrator, base)
    path = harm_price_path(base, steps)
    evaluate = gate_evaluator(episodes, cal, seed=seed, lambda_eval=lambda_eval)
    cert = certify(path, evaluate, alpha=alpha, delta=delta,
                   episodes_fingerprint=episodes_fingerprint(episodes))
    return replace(cert, calibrator_sha256=calibrator_sha256(cal))


@dataclass(frozen=True, kw_only=True)
class Certification:
    """:func:`certify_episodes`' result: the certificate and how the episodes were used.

    Attributes
    ----------
    certificate : Certificate
    calibrator : PortableCalibrator
        The calibrator certified, as export writes it (with the thresholds' clamp); its
        sha256 is the certificate's ``calibrator_sha256``.
    excluded, calibration, test : ndarray of bool
        Masks over the episodes given (see :func:`calibration_split`).
    record : TuningRecord or None
        The record the chosen thresholds carry: the one excluded and the calibration
        episodes; None when nothing was certified.
    """

    certificate: Certificate
    calibrator: PortableCalibrator
    excluded: BoolArray
    calibration: BoolArray
    test: BoolArray
    record: TuningRecord | None


def certify_episodes(
    episodes: EpisodeSet,
    calibrator: PortableCalibrator,
    thresholds: Mapping[str, Any],
    *,
    seen: TuningRecord | None,
    alpha: float = _CERTIFY.alpha,
    delta: float = _CERTIFY.delta,
    seed: int,
    test_fraction: float = _CERTIFY.test_fraction,
    lambda_eval: float = 1.0,
    steps: Sequence[float] = HARM_PRICE_STEPS,
) -> Certification:
    """Certify on every episode of ``episodes`` that ``seen`` does not cover.

    The defaults are :class:`~amv_calib.tuning.CertifyOptions`' (the command line's and
    the step's too; its ``assume_unseen`` is the caller's ``seen=None``).

    Parameters
    ----------
    seen : TuningRecord or None
        The episodes that shaped ``thresholds`` (the tune step's record, or an artifact's).
        None only when the caller vouches that no episode given touched the thresholds.
    test_fraction : float, default 0
        Share of the unseen episodes kept out of calibration for a held-out table.

    Raises
    ------
    CertificationError
        Fewer calibration episodes remain than :func:`min_calibration_episodes` needs
        (saying how many were excluded), or nothing was certified.
    """
    excluded, cal_mask, test = calibration_split(episodes, seen, test_fraction)
    n_cal, n_min = int(cal_mask.sum()), min_calibration_episodes(alpha, delta)
    if n_cal < n_min:
        raise CertificationError(
            f"{n_cal} calibration episodes remain of {len(episodes)} given ({int(excluded.sum())} "
            f"excluded because they shaped the thresholds, {int(test.sum())} kept for the "
            f"held-out table); certifying anything at alpha={alpha:g}, delta={delta:g} needs "
            f"at least {n_min} (zero harms in {n_min}); certify on episodes the version "
            f"never saw")
    es_cal = episodes.subset(cal_mask)
    try:
        cal, _ = with_gate_clamp(calibrator, check_thresholds(thresholds))
    except ValueError as exc:
        raise ConfigError(f"thresholds: {exc}") from None
    cert = certify_thresholds(es_cal, cal, thresholds, alpha=alpha, delta=delta,
                              seed=seed, lambda_eval=lambda_eval, steps=steps)
    record = None
    if cert.chosen is not None and seen is not None:
        record = seen.with_episodes(es_cal.instance_id, step="certify")
    elif cert.chosen is not None:
        record = TuningRecord.of(es_cal.instance_id, split={"rule": "none"}, step="certify")
    cert = replace(
        cert,
        calibration={"n": n_cal, "fingerprint": cert.episodes_fingerprint,
                     "read": len(episodes), "excluded": int(excluded.sum()),
                     "test": int(test.sum())},
        excluded=None if seen is None else seen.summary(),
        seen=None if record is None else record.summary())
    return Certification(certificate=cert, calibrator=cal, excluded=excluded,
                         calibration=cal_mask, test=test, record=record)


def describe_certificate(data: Mapping[str, Any]) -> list[str]:
    """Lines a person reads about a certificate (``Certificate.to_dict()`` or the JSON):
    what is certified, on which episodes, what was chosen, and what is only observed."""
    if data.get("chosen") is None:
        return [f"nothing certified at alpha={data['alpha']:g}, delta={data['delta']:g} on "
                f"{data['n']} calibration episodes (supported alpha "
                f"{data.get('supported_alpha', 1.0):.4g})"]
    cal = data.get("calibration") or {}
    mu = data["path"][data["chosen"]].get("harm_price", 0.0)
    return [
        f"certified: {data['statement']}",
        f"calibration episodes: {cal.get('n')} of {cal.get('read')} given ("
        f"{cal.get('excluded')} excluded: they shaped the thresholds"
        + (f"; {cal.get('test')} set aside for the held-out table)" if cal.get("test")
           else ")"),
        f"chosen: harm price {mu:g}, {len(data['certified'])} of {len(data['path'])} "
        f"configurations certified; mean loss {data['losses'][data['chosen']]:.4f}, "
        f"{data['loss_given_up']:.4f} above the best of the path",
        f"observed (not certified): calibration harm {data['harm_rate']:.2%}, "
        f"Clopper-Pearson upper bound {data['observed_upper_bound']:.2%}",
    ]


def write_certification(result: Certification, out_dir: str | os.PathLike[str]
                        ) -> dict[str, str]:
    """Write what export needs from a certification into ``out_dir``.

    ``certificate.json`` always; when something was certified, ``calibrator.json`` (the
    calibrator certified, byte for byte as export writes it), ``thresholds.json`` (the
    chosen configuration), the tuning record they now carry (``tuning.json`` and
    ``tuning-episodes.u64``) and ``frontier.png``: everything ``amv-calib export`` needs.
    Returns ``{name: path}``.
    """
    from amv_calib.calibration import write_figure_png
    from amv_calib.contract import canonical_json_bytes

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    cert = result.certificate
    data = cert.to_dict()
    (out / "certificate.json").write_bytes(canonical_json_bytes(data))
    files = {"certificate": str(out / "certificate.json")}
    if cert.thresholds is not None:
        (out / "thresholds.json").write_bytes(canonical_json_bytes(cert.thresholds))
        files["thresholds"] = str(out / "thresholds.json")
        (out / "calibrator.json").write_bytes(canonical_json_bytes(result.calibrator.to_dict()))
        files["calibrator"] = str(out / "calibrator.json")
        write_figure_png(frontier_figure(data), out / "frontier.png")
        files["frontier"] = str(out / "frontier.png")
    if result.record is not None:
        files["tuning"] = str(result.record.write(out))
    return files


def frontier_figure(certificate: Mapping[str, Any]) -> Any:
    """Harm against loss along the certified path (the paper's Figures 3 and 4 style).

    Each configuration of the path (one harm price mu) is a point (calibration Gate Harmful
    against mean total loss): filled when certified, hollow when not. The grey line joins
    only the Pareto-efficient points (no other point has both less loss and less harm), in
    order of loss: the path itself doubles back, since a higher harm price can cost more
    loss for no less harm. The chosen one is ringed, with its observed Clopper-Pearson upper
    bound as an error bar; the dashed line is alpha. Only the chosen point and the two ends
    of the path are labelled with their harm price, and a caption says what "not
    certified" means.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from amv_calib.tuning._outputs import _frontier

    n = int(certificate["n"])
    harm = np.asarray(certificate["harms"], dtype=float) / max(n, 1) * 100
    loss = np.asarray(certificate["losses"], dtype=float)
    mu = [float(c.get("harm_price", 0.0)) for c in certificate["path"]]
    certified = np.zeros(len(harm), dtype=bool)
    certified[list(certificate["certified"])] = True
    alpha, delta = float(certificate["alpha"]), float(certificate["delta"])
    chosen = certificate.get("chosen")
    fig = Figure(figsize=(8.0, 5.6), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_axes((0.1, 0.27, 0.62, 0.63))
    efficient = _frontier([(float(x), float(y)) for x, y in zip(loss, harm, strict=True)
                           if np.isfinite(x) and np.isfinite(y)])
    ax.plot([x for x, _ in efficient], [y for _, y in efficient], "-", color="0.6",
            linewidth=1, zorder=1,
            label="Pareto-efficient: no other has\nboth less loss and less harm")
    ax.scatter(loss[certified], harm[certified], s=30, color="C0", zorder=2,
               label="certified")
    if (~certified).any():
        ax.scatter(loss[~certified], harm[~certified], s=30, facecolors="none",
                   edgecolors="C3", zorder=2, label="not certified")
    ax.axhline(alpha * 100, color="C3", linestyle="--", linewidth=1,
               label=f"alpha = {alpha:.2%}")
    if chosen is not None:
        upper = float(certificate["observed_upper_bound"])
        ax.errorbar([loss[chosen]], [harm[chosen]], yerr=[[0.0], [upper * 100 - harm[chosen]]],
                    fmt="o", markersize=11, markerfacecolor="none", color="C2", capsize=4,
                    zorder=3, label=f"chosen; observed upper\nbound {upper:.2%} (not certified)")
    labelled = dict.fromkeys([0, len(mu) - 1] + ([] if chosen is None else [chosen]))
    for j in labelled:
        ax.annotate(f"harm price mu = {mu[j]:g}" + (" (chosen)" if j == chosen else ""),
                    (loss[j], harm[j]), textcoords="offset points", xytext=(6, 6),
                    fontsize=7, color="0.25",
                    ha="right" if loss[j] > np.nanmean(loss) else "left")
    ax.margins(x=0.12, y=0.15)
    ax.set_xlabel("mean total loss per episode (calibration)")
    ax.set_ylabel("Gate Harmful % (calibration)")
    ax.set_title(f"Harm against loss over the harm price mu ({len(mu)} configurations, "
                 f"n = {n})", fontsize=9)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0), frameon=False)
    fig.text(
        0.1, 0.03,
        f"Certified: Gate Harmful <= {alpha:g} with probability >= {1 - delta:g} on episodes "
        f"like the calibration ones.\nFixed-sequence testing walks the path from the safest "
        f"configuration (largest harm price mu) and stops at the first p-value > "
        f"{delta:g};\npoints after it are 'not certified' even when their observed harm lies "
        f"below alpha (they were never tested).\nThe chosen configuration is the certified "
        f"one of lowest loss; its upper bound is observed after choosing, not certified.",
        fontsize=7, color="0.25", va="bottom")
    return fig
