"""Learn-then-Test certification: exact p-values against scipy, testing against MAPIE, and the
guarantee by simulations that can fail (the least favourable configuration sits just above
alpha, and deliberately wrong methods are shown to fail the same check)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from scipy.stats import binom, binomtest

from amv_calib.calibration import clopper_pearson_upper
from amv_calib.exceptions import ConfigError
from amv_calib.tuning import (
    CertificationError,
    TuningRecord,
    binomial_p_value,
    calibration_split,
    certify,
    certify_episodes,
    episode_set,
    harm_price_path,
    hash_split,
    min_calibration_episodes,
    require_certified,
    split_episodes,
)
from amv_calib.tuning._certify import fixed_sequence, supported_alpha


# -- the statistics -------------------------------------------------------------------------
@pytest.mark.parametrize("n", [1, 17, 200, 857, 5000], ids=lambda n: f"n{n}")
@pytest.mark.parametrize("alpha", [0.001, 0.01, 0.013, 0.05, 0.3], ids=lambda a: f"a{a}")
def test_p_value_is_the_exact_binomial_tail(n: int, alpha: float) -> None:
    # scipy's exact one-sided binomial test of H0: rate >= alpha against rate < alpha
    for k in sorted({0, 1, 2, n // 100, n // 20, n // 2, n} & set(range(n + 1))):
        want = binomtest(k, n, alpha, alternative="less").pvalue
        assert binomial_p_value(k, n, alpha) == pytest.approx(want, rel=1e-10, abs=1e-300)


def test_p_value_has_no_off_by_one_where_the_rate_is_not_exact_in_floating_point() -> None:
    # 51/5000 * 5000 = 51.00000000000001: a ceil of n * (k / n) tested k + 1 instead of k.
    assert 5000 * (51 / 5000) != 51
    p = binomial_p_value(51, 5000, 0.013)
    assert p == pytest.approx(0.04200, abs=5e-5)          # certified at delta = 0.05
    assert binom.cdf(52, 5000, 0.013) == pytest.approx(0.0555, abs=5e-4)  # what k + 1 gave


def test_mapies_binary_hoeffding_bentkus_p_value_is_never_smaller() -> None:
    methods = pytest.importorskip("mapie.risk_control.methods")
    for n, alpha in [(200, 0.01), (5000, 0.013), (857, 0.01), (100, 0.07)]:
        ks = np.arange(0, n // 10)
        theirs = methods.compute_hoeffding_bentkus_p_value(ks / n, n, alpha, binary=True)[:, 0]
        ours = np.array([binomial_p_value(int(k), n, alpha) for k in ks])
        assert np.all(ours <= theirs * (1 + 1e-12))
    # ... and strictly larger where its ceil of a rounded rate takes k + 1
    theirs = methods.compute_hoeffding_bentkus_p_value(np.array([51 / 5000]), 5000, 0.013,
                                                       binary=True)[0, 0]
    assert theirs > 0.05 > binomial_p_value(51, 5000, 0.013)


def test_fixed_sequence_equals_mapies() -> None:
    risk_control = pytest.importorskip("mapie.risk_control")
    rng = np.random.default_rng(3)
    for _ in range(200):
        p = np.sort(rng.uniform(0, 0.2, rng.integers(1, 15)))
        p[rng.integers(0, len(p))] = rng.uniform(0, 1)  # a hole somewhere
        delta = float(rng.choice([0.01, 0.05, 0.1]))
        assert fixed_sequence(p.tolist(), delta) == \
            risk_control.control_fwer(p, delta, "fixed_sequence").tolist()


@pytest.mark.parametrize(("k", "n"), [(0, 50), (3, 880), (40, 1000), (99, 100)])
def test_clopper_pearson_upper_solves_its_defining_equation(k: int, n: int) -> None:
    u = clopper_pearson_upper(k, n, 0.95)
    assert binom.cdf(k, n, u) == pytest.approx(0.05, rel=1e-9)
    assert clopper_pearson_upper(n, n, 0.95) == 1.0


@pytest.mark.parametrize("confidence", [0.9, 0.95, 0.99, 0.999])
def test_clopper_pearson_upper_is_scipy_stats_beta_quantile_to_the_bit(confidence: float
                                                                       ) -> None:
    # Certificates record this bound: it is scipy.stats' beta quantile exactly (computed
    # through scipy.special, which the monitor imports without scipy.stats).
    from scipy.stats import beta

    for n in (1, 7, 50, 880, 10_000):
        for k in sorted({0, 1, n // 3, n - 1} - {n}):  # k = n: the bound is 1
            assert clopper_pearson_upper(k, n, confidence) == \
                float(beta.ppf(confidence, k + 1, n - k)), (k, n)
    assert clopper_pearson_upper(0, 0, confidence) == 1.0


def test_supported_alpha_is_the_smallest_alpha_that_certifies() -> None:
    a = supported_alpha(3, 880, 0.05)
    assert binomial_p_value(3, 880, a * 1.000001) <= 0.05 < binomial_p_value(3, 880, a * 0.999)
    # by hand: 0 harms in n gives alpha = 1 - delta^(1/n) (binomial tail (1-a)^n = delta)
    assert supported_alpha(0, 300, 0.05) == pytest.approx(1 - 0.05 ** (1 / 300), rel=1e-9)


@pytest.mark.parametrize(("alpha", "delta", "want"), [(0.01, 0.05, 299), (0.05, 0.05, 59),
                                                      (0.001, 0.1, 2302)])
def test_min_calibration_episodes_is_where_zero_harms_first_certify(alpha: float, delta: float,
                                                                   want: int) -> None:
    n = min_calibration_episodes(alpha, delta)
    assert n == want
    assert binomial_p_value(0, n, alpha) <= delta < binomial_p_value(0, n - 1, alpha)


def test_certify_walks_the_path_from_the_safe_end_and_picks_the_cheapest() -> None:
    # 1000 episodes; harms 0, 2, 4, 30, 1 along the path: the walk stops at the 4th (30 is
    # not <= alpha=1% with confidence), although the 5th alone would pass
    harms = [0, 2, 4, 30, 1]
    losses = [5.0, 3.0, 4.0, 1.0, 0.5]
    path = [{"harm_price": float(10 - j)} for j in range(5)]

    def evaluate(config: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
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
    assert d["observed_upper_bound"] == cert.upper_bound and "clopper_pearson_upper" not in d
    assert d["loss_given_up"] == pytest.approx(3.0 - 0.5)  # against the path's best, 0.5
    assert d["statement"] == ("Gate Harmful <= 0.01 with probability >= 0.95 on episodes "
                              "like the 1000 calibration ones")

    strict = certify(path, evaluate, alpha=0.0005, delta=0.05, episodes_fingerprint="x")
    assert strict.chosen is None and strict.to_dict()["statement"] is None
    with pytest.raises(CertificationError, match=r"supports alpha >= 0\.00299"):
        require_certified(strict)


def test_harm_price_path_raises_mu_from_the_tuned_value() -> None:
    path = harm_price_path({"harm_price": 2.0, "planner": "myopic"}, steps=[5.0, 1.0, 0.0])
    assert [c["harm_price"] for c in path] == [7.0, 3.0, 2.0]
    assert all(c["planner"] == "myopic" for c in path)
    with pytest.raises(ConfigError, match="decrease strictly to 0"):
        harm_price_path({}, steps=[1.0, 2.0, 0.0])


# -- validity, with power -------------------------------------------------------------------
# A known world: configurations along a path with true harm rates, safest first, and losses
# falling along it. Harm events are drawn independently per configuration, so a method that
# certifies configurations one by one (no family-wise control) picks up the ones just above
# alpha. The least favourable configuration, 1.05 alpha, comes right after two safe ones.
ALPHA, DELTA, N_CAL, DRAWS = 0.01, 0.05, 1000, 2000
RATES = np.array([0.001, 0.002, 0.0105, 0.0107, 0.011, 0.0112, 0.0115, 0.0118, 0.012,
                  0.0125, 0.013, 0.015])
LOSSES = np.linspace(3.0, 1.0, len(RATES))
Routine = Callable[..., Any]


def _exceed_share(routine: Routine, *, delta: float, alpha: float, seed: int = 11) -> float:
    """Share of calibration draws whose chosen configuration has true harm > ALPHA."""
    rng = np.random.default_rng(seed)
    path = [{"j": j} for j in range(len(RATES))]
    exceed = 0
    for _ in range(DRAWS):
        harm = rng.random((len(RATES), N_CAL)) < RATES[:, None]
        cert = routine(path, lambda c, harm=harm: (harm[c["j"]], np.full(N_CAL, LOSSES[c["j"]])),
                       alpha=alpha, delta=delta, episodes_fingerprint="draw")
        exceed += cert.chosen is not None and RATES[cert.chosen] > ALPHA
    return exceed / DRAWS


def _exact_exceed() -> float:
    """The exact exceed probability of the correct method in this world: the walk reaches and
    certifies the first configuration above alpha (then the cheapest certified one is at or
    after it, so above alpha too) iff every count up to it is at most the critical count c,
    the largest k with P(Binomial(n, alpha) <= k) <= delta."""
    c = int(np.flatnonzero(binom.cdf(np.arange(N_CAL + 1), N_CAL, ALPHA) <= DELTA)[-1])
    first_above = int(np.flatnonzero(RATES > ALPHA)[0])
    return float(np.prod(binom.cdf(c, N_CAL, RATES[: first_above + 1])))


def _valid(share: float) -> bool:
    """The check: the exceed share is at most delta within binomial noise (3 SE)."""
    return share <= DELTA + 3 * np.sqrt(DELTA * (1 - DELTA) / DRAWS)


def _certify_each_alone(path: Sequence[Any], evaluate: Any, *, alpha: float, delta: float,
                        episodes_fingerprint: str) -> Any:
    """A wrong method: every configuration tested alone at delta (no family-wise control),
    the cheapest passing one chosen."""
    cert = certify(path, evaluate, alpha=alpha, delta=1.0 - 1e-12,
                   episodes_fingerprint=episodes_fingerprint)
    passing = [j for j, p in enumerate(cert.p_values) if p <= delta]
    return SimpleNamespace(chosen=min(passing, key=lambda j: cert.losses[j]) if passing
                           else None)


def test_guarantee_holds_and_matches_its_exact_value_in_the_least_favourable_world() -> None:
    share, exact = _exceed_share(certify, delta=DELTA, alpha=ALPHA), _exact_exceed()
    assert 0.015 < exact < DELTA  # the world is near the edge: the test can fail
    assert _valid(share), share
    assert abs(share - exact) <= 4 * np.sqrt(exact * (1 - exact) / DRAWS), (share, exact)


@pytest.mark.parametrize(
    ("routine", "delta", "alpha"),
    [(certify, 3 * DELTA, ALPHA), (_certify_each_alone, DELTA, ALPHA),
     (certify, DELTA, 1.2 * ALPHA)],
    ids=["delta-x3", "no-family-wise-control", "p-value-at-1.2-alpha"])
def test_the_validity_check_fails_a_wrong_method(routine: Routine, delta: float,
                                                  alpha: float) -> None:
    # The routine called with a wrong setting, judged by the same check at the nominal
    # delta: the check must fail, or it could not catch the mistake.
    share = _exceed_share(routine, delta=delta, alpha=alpha)
    assert not _valid(share), share


# -- the calibration set ----------------------------------------------------------------------
@pytest.fixture(scope="module")
def pool() -> Any:
    from amv_calib.datasets import synth_episodes

    return episode_set(synth_episodes(3000, seed=41))


def test_calibration_excludes_exactly_what_the_record_covers_and_uses_all_the_rest(pool: Any
                                                                                    ) -> None:
    tune, _ = split_episodes(pool, 0.5)
    record = TuningRecord.of(pool.subset(tune).instance_id, split=hash_split(0.5))
    excluded, cal, test = calibration_split(pool, record)
    np.testing.assert_array_equal(excluded, tune)
    assert cal.sum() == (~tune).sum() and not test.any()
    # a file of fresh episodes is used whole
    from amv_calib.datasets import synth_episodes

    fresh = episode_set([{**e, "instance_id": "fresh-" + e["instance_id"]}
                         for e in synth_episodes(500, seed=42)])
    excluded, cal, _ = calibration_split(fresh, record)
    assert not excluded.any() and cal.all()
    # a share kept for a table, by a hash independent of the tuning split's
    _, cal, test = calibration_split(pool, record, 0.5)
    assert abs(int(test.sum()) - int((~tune).sum()) // 2) < 100 and not (test & tune).any()


def test_certifying_on_the_tuning_episodes_refuses_saying_how_many_were_excluded(
        pool: Any, repo_root: Path) -> None:
    from amv_calib.contract import load_artifact

    art = load_artifact(repo_root / "models" / "amv-guard" / "v1")
    tune, _ = split_episodes(pool, 0.5)
    record = TuningRecord.of(pool.subset(tune).instance_id, split=hash_split(0.5))
    with pytest.raises(CertificationError,
                       match=rf"0 calibration episodes remain of {int(tune.sum())} given "
                             rf"\({int(tune.sum())} excluded.*at least 299"):
        certify_episodes(pool.subset(tune), art.calibrator, art.thresholds, seen=record,
                         alpha=0.01, delta=0.05, seed=1)


def test_a_certificate_binds_its_calibrator_thresholds_data_and_record(pool: Any,
                                                                       repo_root: Path) -> None:
    from amv_calib.contract import calibrator_sha256, load_artifact, thresholds_sha256

    art = load_artifact(repo_root / "models" / "amv-guard" / "v1")
    tune, _ = split_episodes(pool, 0.5)
    record = TuningRecord.of(pool.subset(tune).instance_id, split=hash_split(0.5))
    res = certify_episodes(pool, art.calibrator, art.thresholds, seen=record, alpha=0.02,
                           delta=0.1, seed=1)
    c = res.certificate.to_dict()
    assert c["calibrator_sha256"] == calibrator_sha256(art.calibrator) == art.calibrator_sha256
    assert thresholds_sha256(c["path"][-1]) == thresholds_sha256(art.thresholds)
    assert c["calibration"] == {"n": int(res.calibration.sum()), "read": len(pool),
                                "excluded": int(tune.sum()), "test": 0,
                                "fingerprint": c["episodes_fingerprint"]}
    assert c["excluded"] == record.summary()
    # the chosen thresholds have now seen the calibration episodes too
    assert res.record is not None and len(res.record) == len(pool)
    assert c["seen"] == res.record.summary()
    assert res.record.sources[-1]["step"] == "certify"


# -- on real gates --------------------------------------------------------------------------
def test_shipped_champion_is_certified_and_holds_on_held_out_episodes(repo_root, sample_dir
                                                                       ) -> None:
    from amv_calib.contract import load_artifact
    from amv_calib.gate import Gate
    from amv_calib.tuning import artifact_record, read_episodes, replay

    art = load_artifact(repo_root / "models" / "amv-guard" / "v1")
    cert = art.manifest["certificate"]
    assert (cert["alpha"], cert["delta"]) == (0.01, 0.05) and cert["chosen"] is not None
    es = read_episodes(sample_dir / "episodes.jsonl")
    seen = artifact_record(art)
    assert seen is not None and cert["seen"] == seen.summary()
    # its record covers its tuning split and its calibration quarter; the rest was never seen
    tune, _ = split_episodes(es, 0.5)
    excluded, unseen, _ = calibration_split(es, seen)
    assert (excluded & ~tune).sum() == cert["n"] and not (tune & ~excluded).any()
    t = art.thresholds
    gate = Gate(lambda_cost_scale=t["lambda_cost_scale"],
                delta_loss_threshold=t["delta_loss_threshold"],
                epsilon_harm_bound=t["epsilon_harm_bound"], planner=t["planner"],
                max_verifications=t["max_verifications"], harm_price=t["harm_price"],
                calibrator=art.calibrator)
    held_out = replay(es.subset(unseen), t["planner"], seed=20261202, gate=gate, n_boot=0)
    assert held_out.outcomes.harmful.mean() <= cert["alpha"]
