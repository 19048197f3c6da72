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


# -- on real gates --------------------------------------------------------------------------
def test_shipped_champion_is_certified_and_holds_on_held_out_episodes(repo_root, sample_dir
                                                                       ) -> None:
    from amv_calib.contract import load_artifact
    from amv_calib.gate import Gate
    from amv_calib.tuning import certification_split, read_episodes, replay

    art = load_artifact(repo_root / "models" / "amv-guard" / "v1")
    cert = art.manifest["certificate"]
    assert (cert["alpha"], cert["delta"]) == (0.01, 0.05) and cert["chosen"] is not None
    assert cert["thresholds"] == {k: art.thresholds[k] for k in cert["thresholds"]}
    es = read_episodes(sample_dir / "episodes.jsonl")
    _, calibration, test = certification_split(es, 0.5)
    assert cert["n"] == int(calibration.sum())
    t = art.thresholds
    gate = Gate(lambda_cost_scale=t["lambda_cost_scale"],
                delta_loss_threshold=t["delta_loss_threshold"],
                epsilon_harm_bound=t["epsilon_harm_bound"], planner=t["planner"],
                max_verifications=t["max_verifications"], harm_price=t["harm_price"],
                calibrator=art.calibrator)
    held_out = replay(es.subset(test), t["planner"], seed=20261202, gate=gate, n_boot=0)
    assert held_out.outcomes.harmful.mean() <= cert["alpha"]


@pytest.mark.slow
def test_certificate_is_valid_over_200_calibration_draws(repo_root) -> None:
    # A synthetic world; each configuration of the harm-price path replayed once on a pool of
    # 60,000 episodes; 200 calibration draws of 5,000 of the first 40,000 certify, and the
    # chosen gate's harm is measured on the 20,000 fresh ones. alpha sits between two true
    # harm rates of the path, so a too-risky configuration can be certified (the test can
    # fail) and a safe one usually is (the test is not vacuous).
    from amv_calib.claims import synth_episodes
    from amv_calib.contract import load_artifact
    from amv_calib.tuning import episode_set, harm_price_path
    from amv_calib.tuning._certify import gate_evaluator

    art = load_artifact(repo_root / "models" / "amv-guard" / "v1")
    path = harm_price_path({**art.thresholds, "harm_price": 0.0},
                           steps=[1e4, 1e3, 300.0, 100.0, 30.0, 10.0, 3.0, 1.0, 0.0])
    pool = episode_set(synth_episodes(60_000, seed=77))
    evaluate = gate_evaluator(pool, art.calibrator, seed=5, lambda_eval=1.0)
    harm, loss = zip(*(evaluate(c) for c in path), strict=True)
    true_rate = np.array([h[40_000:].mean() for h in harm])
    above = np.sort(true_rate[true_rate > 0.005])
    alpha = float(above[:2].mean())
    delta, n, draws = 0.1, 5000, 200
    rng = np.random.default_rng(2)
    exceed = certified = 0
    for _ in range(draws):
        take = rng.choice(40_000, size=n, replace=False)
        cert = certify(path, lambda c, take=take: (harm[path.index(c)][take],
                                                   loss[path.index(c)][take]),
                       alpha=alpha, delta=delta, episodes_fingerprint="draw")
        if cert.chosen is not None:
            certified += 1
            exceed += bool(true_rate[cert.chosen] > alpha)
    share = exceed / draws
    assert certified >= draws // 2, (certified, alpha, true_rate)
    assert share <= delta + 3 * np.sqrt(delta * (1 - delta) / draws), (share, alpha, true_rate)
