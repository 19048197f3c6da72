"""Learn-then-Test certification: p-values and testing against MAPIE, and the guarantee."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import binom

from amv_calib.exceptions import ConfigError
from amv_calib.tuning._certify import (
    CertificationError,
    certify,
    clopper_pearson_upper,
    fixed_sequence,
    harm_price_path,
    hb_p_value,
    require_certified,
    supported_alpha,
)

mapie_methods = pytest.importorskip("mapie.risk_control.methods")
mapie_fwer = pytest.importorskip("mapie.risk_control")


@pytest.mark.parametrize("n", [1, 17, 200, 880, 5000])
@pytest.mark.parametrize("alpha", [0.001, 0.01, 0.05, 0.3])
def test_hb_p_value_equals_mapies_binary_hoeffding_bentkus(n: int, alpha: float) -> None:
    ks = sorted({0, 1, 2, n // 100, n // 20, n // 2, n})
    ours = [hb_p_value(k, n, alpha) for k in ks]
    theirs = mapie_methods.compute_hoeffding_bentkus_p_value(
        np.array([k / n for k in ks]), n, alpha, binary=True)[:, 0]
    np.testing.assert_allclose(ours, theirs, rtol=1e-12, atol=1e-300)


def test_fixed_sequence_equals_mapies() -> None:
    rng = np.random.default_rng(3)
    for _ in range(200):
        p = np.sort(rng.uniform(0, 0.2, rng.integers(1, 15)))
        p[rng.integers(0, len(p))] = rng.uniform(0, 1)  # a hole somewhere
        delta = float(rng.choice([0.01, 0.05, 0.1]))
        assert fixed_sequence(p.tolist(), delta) == \
            mapie_fwer.control_fwer(p, delta, "fixed_sequence").tolist()


@pytest.mark.parametrize(("k", "n"), [(0, 50), (3, 880), (40, 1000), (99, 100)])
def test_clopper_pearson_upper_solves_its_defining_equation(k: int, n: int) -> None:
    u = clopper_pearson_upper(k, n, 0.95)
    assert binom.cdf(k, n, u) == pytest.approx(0.05, rel=1e-9)
    assert clopper_pearson_upper(n, n, 0.95) == 1.0


def test_supported_alpha_is_the_smallest_alpha_that_certifies() -> None:
    a = supported_alpha(3, 880, 0.05)
    assert hb_p_value(3, 880, a) <= 0.05 < hb_p_value(3, 880, a * 0.999)
    # by hand: 0 harms in n gives alpha = 1 - delta^(1/n) (binomial tail (1-a)^n = delta)
    assert supported_alpha(0, 300, 0.05) == pytest.approx(1 - 0.05 ** (1 / 300), rel=1e-9)


def test_certify_walks_the_path_from_the_safe_end_and_picks_the_cheapest() -> None:
    # 1000 episodes; harms 0, 2, 4, 30, 1 along the path: the walk stops at the 4th (30 is
    # not <= alpha=1% with confidence), although the 5th alone would pass
    harms = [0, 2, 4, 30, 1]
    losses = [5.0, 3.0, 4.0, 1.0, 0.5]
    path = [{"harm_price": float(10 - j)} for j in range(5)]

    def evaluate(config: dict) -> tuple[np.ndarray, np.ndarray]:
        j = 10 - int(config["harm_price"])
        harmful = np.zeros(1000, dtype=bool)
        harmful[: harms[j]] = True
        return harmful, np.full(1000, losses[j])

    cert = certify(path, evaluate, alpha=0.01, delta=0.05, episodes_fingerprint="x")
    assert cert.certified == [0, 1, 2]
    assert cert.chosen == 1 and cert.thresholds == {"harm_price": 9.0}
    assert cert.upper_bound == pytest.approx(clopper_pearson_upper(2, 1000, 0.95))
    d = cert.to_dict()
    assert d["harm_rate"] == 0.002 and d["method"].startswith("learn-then-test")

    strict = certify(path, evaluate, alpha=0.0005, delta=0.05, episodes_fingerprint="x")
    assert strict.chosen is None
    with pytest.raises(CertificationError, match=r"supports alpha >= 0\.00299"):
        require_certified(strict)


def test_harm_price_path_raises_mu_from_the_tuned_value() -> None:
    path = harm_price_path({"harm_price": 2.0, "planner": "myopic"}, steps=[5.0, 1.0, 0.0])
    assert [c["harm_price"] for c in path] == [7.0, 3.0, 2.0]
    assert all(c["planner"] == "myopic" for c in path)
    with pytest.raises(ConfigError, match="decrease strictly to 0"):
        harm_price_path({}, steps=[1.0, 2.0, 0.0])


def test_guarantee_holds_over_many_calibration_draws() -> None:
    # The LTT guarantee on a known world: configurations with true harm rates along a path;
    # over 2000 calibration draws the chosen one exceeds alpha in at most delta of them.
    rng = np.random.default_rng(11)
    rates = np.array([0.0005, 0.002, 0.006, 0.009, 0.011, 0.015, 0.03])
    losses = np.linspace(3.0, 1.0, len(rates))
    alpha, delta, n = 0.01, 0.05, 1500
    exceed = 0
    draws = 2000
    for _ in range(draws):
        harm_counts = rng.binomial(n, rates)
        p = [hb_p_value(int(k), n, alpha) for k in harm_counts]
        ok = fixed_sequence(p, delta)
        if ok:
            chosen = min(ok, key=lambda j: losses[j])
            exceed += rates[chosen] > alpha
    share = exceed / draws
    assert share <= delta + 3 * np.sqrt(delta * (1 - delta) / draws), share
