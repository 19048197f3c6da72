"""The anytime-valid statistics against independent computations, and their guarantees by
simulation; every validity and detection check has a companion that runs a deliberately
wrong threshold and shows the same check then fails."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from amv_calib.monitoring._sequential import (
    HARM_FACTORS,
    LAMBDAS_D,
    LAMBDAS_X,
    X_MIN,
    DayBuckets,
    betting_detector,
    calibration_values,
    evidence,
    fixed_log_terms,
    harm_cs,
    harm_detector,
    harm_log_evalue,
    harm_log_evalue_lower,
    judge,
    start_weights,
    tail_weight,
)

ALPHA = 0.01
DELTA = 0.05


def _direct_mixture(bits: list[int], m: float, factors: tuple[float, ...] = HARM_FACTORS,
                    up: bool = True) -> float:
    """The mixture e-value as the mean over alternatives of the product of per-observation
    likelihood ratios, in exact rational arithmetic (an independent computation)."""
    total = Fraction(0)
    mm = Fraction(m)
    for c in factors:
        q = min(mm * Fraction(c), (1 + mm) / 2) if up else mm / Fraction(c)
        prod = Fraction(1)
        for b in bits:
            prod *= (q / mm) if b else (1 - q) / (1 - mm)
        total += prod
    return float(total / len(factors))


@pytest.mark.parametrize("m", [0.01, 0.05, 0.3], ids=["alpha", "five-percent", "capped"])
def test_harm_evalue_is_the_product_of_likelihood_ratios(m: float) -> None:
    rng = np.random.default_rng(3)
    bits = (rng.random(40) < 0.2).astype(int).tolist()
    n, s = len(bits), sum(bits)
    assert math.exp(float(harm_log_evalue(n, s, m))) == pytest.approx(
        _direct_mixture(bits, m), rel=1e-10)
    assert math.exp(float(harm_log_evalue_lower(n, s, m))) == pytest.approx(
        _direct_mixture(bits, m, up=False), rel=1e-10)


def test_each_alternative_is_a_supermartingale_factor() -> None:
    # E_p[ratio] = p q/m + (1 - p)(1 - q)/(1 - m) <= 1 for every p <= m (by hand)
    m = ALPHA
    for q in np.minimum(m * np.array(HARM_FACTORS), (1 + m) / 2):
        for p in np.linspace(0, m, 11):
            assert p * q / m + (1 - p) * (1 - q) / (1 - m) <= 1 + 1e-15


def test_start_weights_sum_to_one() -> None:
    # an independent sum: 10^6 terms plus the integral bounds of the rest
    j = np.arange(1, 1_000_001, dtype=np.float64)
    head = float(np.sum((j + 1) ** -1.5))
    rest_lo, rest_hi = 2 * (1_000_002) ** -0.5, 2 * (1_000_001) ** -0.5
    norm_lo, norm_hi = head + rest_lo, head + rest_hi
    w = start_weights(50)
    assert w[0] == 0.5
    assert 0.5 * (2.0 ** -1.5) / norm_hi <= w[1] <= 0.5 * (2.0 ** -1.5) / norm_lo
    assert float(w.sum()) + tail_weight(50) == pytest.approx(1.0, abs=1e-12)
    assert tail_weight(0) == 1.0


def test_confidence_sequence_bounds_are_where_the_tests_turn() -> None:
    n, s, level = 6000, 102, 0.0125
    lo, hi = harm_cs(n, s, level)
    thr = math.log(1 / level)
    grid = np.linspace(1e-5, 0.1, 20001)
    e_up = np.array([float(harm_log_evalue(n, s, m)) for m in grid])
    e_lo = np.array([float(harm_log_evalue_lower(n, s, m)) for m in grid])
    assert np.all(np.diff(e_up) <= 1e-12) and np.all(np.diff(e_lo) >= -1e-12)  # monotone
    kept = grid[(e_up < thr) & (e_lo < thr)]  # the CS by brute force on the grid
    assert lo == pytest.approx(kept.min(), abs=1e-5)
    assert hi == pytest.approx(kept.max(), abs=1e-5)
    assert lo < s / n < hi
    assert harm_cs(0, 0, level) == (0.0, 1.0)
    assert harm_cs(50, 0, level)[0] == 0.0


def _harm_crossing_share(p: float, runs: int, log_threshold: float, *, days: int = 60,
                         per_day: int = 300, seed: int = 0) -> float:
    """Share of runs, monitored daily, whose harm detector ever reaches the threshold."""
    rng = np.random.default_rng(seed)
    crossed = 0
    for _ in range(runs):
        s = rng.binomial(per_day, p, size=days)
        n = np.full(days, per_day)
        if any(harm_detector(n[:d + 1], s[:d + 1], ALPHA) >= log_threshold
               for d in range(days)):
            crossed += 1
    return crossed / runs


def _noise(level: float, runs: int) -> float:
    return 3.0 * math.sqrt(level * (1 - level) / runs)


@pytest.fixture(scope="module")
def harm_threshold() -> float:
    return math.log(1.0 / (DELTA / 2))


@pytest.mark.slow
@pytest.mark.parametrize(("shrink", "valid"), [(1.0, True), (20.0, False)],
                         ids=["ville-threshold", "wrong-threshold"])
def test_harm_false_alarms_at_the_least_favourable_rate(harm_threshold: float, shrink: float,
                                                        valid: bool) -> None:
    # the null's worst case is p = alpha exactly; a threshold 20x too low must fail the check
    runs = 400
    share = _harm_crossing_share(ALPHA, runs, harm_threshold - math.log(shrink))
    within = share <= DELTA / 2 + _noise(DELTA / 2, runs)
    assert within is valid, share


@pytest.mark.parametrize(("log_threshold", "valid"), [(None, True), (math.log(1e9), False)],
                         ids=["ville-threshold", "wrong-threshold"])
def test_harm_detects_a_wrong_world_within_6000_actions(harm_threshold: float,
                                                        log_threshold: float | None,
                                                        valid: bool) -> None:
    # harm 1.7% against alpha 1%, 300 labelled actions a day: ALERT within 20 days (6,000)
    # in at least 90% of runs; a threshold far too high (no false alarm ever) misses it
    thr = harm_threshold if log_threshold is None else log_threshold
    rng = np.random.default_rng(11)
    runs, hits = 200, 0
    for _ in range(runs):
        s = rng.binomial(300, 0.017, size=20)
        n = np.full(20, 300)
        hits += any(harm_detector(n[:d + 1], s[:d + 1], ALPHA) >= thr for d in range(20))
    assert (hits / runs >= 0.9) is valid, hits / runs


# -- calibration -------------------------------------------------------------------------------
def test_fixed_point_terms_round_down_and_ignore_order() -> None:
    rng = np.random.default_rng(5)
    d = rng.uniform(-1, 1, size=1000)
    t = fixed_log_terms(d, LAMBDAS_D)
    exact = np.log1p(np.multiply.outer(d, LAMBDAS_D))
    assert np.all(t / 2.0**32 <= exact)
    assert np.all(exact - t / 2.0**32 <= 2.5 / 2.0**32)
    perm = rng.permutation(len(d))
    a, b = DayBuckets(), DayBuckets()
    day = rng.integers(0, 5, size=len(d))
    y = (rng.random(len(d)) < 0.3).astype(float)
    p = rng.uniform(0.01, 0.99, size=len(d))
    a.add_uses(day, y, p, 0.0)
    b.add_uses(day[perm], y[perm], p[perm], 0.0)
    assert a.to_dict() == b.to_dict()


def test_log_loss_excess_by_hand_and_its_floor() -> None:
    d, x = calibration_values(np.array([1.0, 0.0]), np.array([0.2, 0.2]), 0.0)
    h = -(0.2 * math.log(0.2) + 0.8 * math.log(0.8))
    assert d.tolist() == pytest.approx([0.8, -0.2])
    assert x.tolist() == pytest.approx([-math.log(0.2) - h, -math.log(0.8) - h])
    p = np.linspace(1e-6, 1 - 1e-6, 100001)
    for y in (0.0, 1.0):
        _, x = calibration_values(np.full_like(p, y), p, 0.0)
        assert x.min() >= X_MIN - 1e-12
    assert 1 + max(LAMBDAS_X) * (X_MIN - 1.0) > 0  # the largest margin allowed


def test_betting_detector_is_the_average_wealth() -> None:
    rng = np.random.default_rng(2)
    p = rng.uniform(0.05, 0.5, size=300)
    y = (rng.random(300) < p).astype(float)
    b = DayBuckets()
    b.add_uses(np.zeros(300, np.int64), y, p, 0.0)
    one = b.sparse(0)
    wealth = [math.prod(1 + lam * (yy - pp) for yy, pp in zip(y, p, strict=True))
              for lam in LAMBDAS_D]
    # one day: M = w_0 E^(0) + tail = E^(0) / 2 + 1/2
    assert math.exp(betting_detector(one["d_sums"], one["days"])) == pytest.approx(
        0.5 * float(np.mean(wealth)) + 0.5, rel=1e-6)


@pytest.mark.parametrize("gap", [1, 40, 3_000_000], ids=["daily", "weeks", "millennia"])
def test_quiet_days_cost_nothing_and_change_nothing(gap: int) -> None:
    # The detectors read only the days that hold data: a quiet day changes no suffix, so the
    # start days it stands for share the next data day's e-value and weigh their sum. Held
    # against the detectors on every day (zeros where quiet) where that can be spelt out.
    rng = np.random.default_rng(5)
    days = np.cumsum(rng.integers(1, gap + 1, size=12)) - 1
    n = rng.integers(50, 400, size=12)
    s = rng.binomial(n, 0.02)
    b = DayBuckets()
    for d, nn, ss in zip(days.tolist(), n.tolist(), s.tolist(), strict=True):
        b.add_actions(np.full(nn, d), np.arange(nn) < ss)
        p = rng.uniform(0.05, 0.5, size=nn)
        b.add_uses(np.full(nn, d), (rng.random(nn) < p + 0.05).astype(float), p, 0.0)
    seen = b.sparse(int(days[-1]) + 5)
    assert seen["days"].tolist() == days.tolist()
    sparse = [harm_detector(seen["actions"], seen["harmful"], ALPHA, seen["days"]),
              betting_detector(seen["d_sums"], seen["days"]),
              betting_detector(seen["x_sums"], seen["days"])]
    if gap > 1000:  # a dense pass would take millions of days: the result must stay finite
        assert all(math.isfinite(x) for x in sparse)
        return
    full = int(days[-1]) + 1
    on_every_day = {k: np.zeros((full, *seen[k].shape[1:])) for k in seen if k != "days"}
    for k, arr in on_every_day.items():
        arr[days] = seen[k]
    dense = [harm_detector(on_every_day["actions"], on_every_day["harmful"], ALPHA),
             betting_detector(on_every_day["d_sums"]), betting_detector(on_every_day["x_sums"])]
    assert sparse == pytest.approx(dense, rel=1e-9, abs=1e-12)


def test_evidence_of_any_day_from_one_read_equals_its_own_read() -> None:
    # the report reads the buckets once and takes each window's prefix
    rng = np.random.default_rng(9)
    b = DayBuckets()
    for d in (0, 1, 4, 9, 30):
        n = int(rng.integers(50, 200))
        b.add_actions(np.full(n, d), rng.random(n) < 0.03)
        p = rng.uniform(0.05, 0.5, size=n)
        b.add_uses(np.full(n, d), (rng.random(n) < p).astype(float), p, 0.0)
    seen = b.sparse(40)
    for day in (0, 3, 4, 20, 30, 40):
        assert evidence(b, day, ALPHA, 0.05, seen=seen) == evidence(b, day, ALPHA, 0.05)


def _calibration_crossing_share(shift: float, runs: int, log_threshold: float,
                                sums: str, *, days: int = 60, per_day: int = 600,
                                seed: int = 1) -> float:
    rng = np.random.default_rng(seed)
    crossed = 0
    for _ in range(runs):
        b = DayBuckets()
        hit = False
        for d in range(days):
            p = rng.beta(1.0, 6.0, size=per_day)
            y = (rng.random(per_day) < np.clip(p + shift, 0, 1)).astype(float)
            b.add_uses(np.full(per_day, d), y, p, 0.0)
            seen = b.sparse(d)
            if betting_detector(seen[sums], seen["days"]) >= log_threshold:
                hit = True
                break
        crossed += hit
    return crossed / runs


@pytest.mark.slow
@pytest.mark.parametrize("sums", ["d_sums", "x_sums"], ids=["in-the-large", "log-loss"])
@pytest.mark.parametrize(("shrink", "valid"), [(1.0, True), (40.0, False)],
                         ids=["ville-threshold", "wrong-threshold"])
def test_calibrated_probabilities_rarely_alarm(sums: str, shrink: float, valid: bool) -> None:
    # the betting e-processes are conservative: only a threshold 40x too low (2 instead of
    # 80) fails the check
    level = DELTA / 4
    runs = 200
    share = _calibration_crossing_share(0.0, runs, math.log(1 / level) - math.log(shrink), sums)
    assert (share <= level + _noise(level, runs)) is valid, share


@pytest.mark.parametrize(("log_threshold", "valid"), [(math.log(1 / (DELTA / 4)), True),
                                                      (math.log(1e300), False)],
                         ids=["ville-threshold", "wrong-threshold"])
def test_miscalibration_is_detected_fast(log_threshold: float, valid: bool) -> None:
    # observed rate 5 points above mean p: both detectors alert within the 60 days; with
    # a threshold no evidence reaches, the same check fails
    for sums in ("d_sums", "x_sums"):
        share = _calibration_crossing_share(0.05, 20, log_threshold, sums, days=20)
        assert (share == 1.0) is valid, (sums, share)


# -- the verdict -------------------------------------------------------------------------------
def _buckets(rate: float, days: int, per_day: int, seed: int = 0) -> DayBuckets:
    rng = np.random.default_rng(seed)
    b = DayBuckets()
    for d in range(days):
        b.add_actions(np.full(per_day, d), rng.random(per_day) < rate)
    return b


@pytest.mark.parametrize(("rate", "days", "status"), [
    (0.005, 3, "insufficient"), (0.005, 40, "ok"), (0.03, 10, "alert")],
    ids=["few-actions", "half-alpha", "three-alpha"])
def test_judge(rate: float, days: int, status: str) -> None:
    ev = evidence(_buckets(rate, days, 300), days - 1, ALPHA, DELTA)
    alerts, warns, notes = judge(ev)
    if status == "alert":
        assert alerts and alerts[0].startswith("harm:") and "above the certified alpha" in \
            alerts[0]
        assert ev.harm_cs[0] > ALPHA
    else:
        assert not alerts and not warns
        assert ("cannot yet tell" in notes[0]) is (status == "insufficient"), notes


