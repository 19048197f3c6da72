"""The certificate on the path users run: tune, then certify on the episodes the tuner never
saw, then measure the true harm on a large fresh sample.

Two slow simulations:

- validity: over 200 draws of a small data set, the chosen gate's true harm exceeds alpha in
  at most delta of the draws (within binomial noise);
- efficiency: on a world with separate tuning, calibration and test sets, the certified
  gate's test harm is at most alpha and its test loss is close to the best harm price an
  oracle could pick on the test set itself.

``python tests/tuning/test_certify_validity.py`` prints the figures of both.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from amv_calib.contract import PortableCalibrator, with_gate_clamp
from amv_calib.datasets import synth_claims, synth_episodes
from amv_calib.tuning import (
    HARM_PRICE_STEPS,
    EpisodeSet,
    TuningRecord,
    certify_episodes,
    episode_set,
    harm_price_path,
    hash_split,
    split_episodes,
    tune_thresholds,
)
from amv_calib.tuning._certify import gate_evaluator

ALPHA, DELTA = 0.01, 0.05


def _world_calibrator(seed: int) -> PortableCalibrator:
    """A Platt calibrator fitted on 30,000 claims of the synthetic world."""
    from amv_calib.calibration import PlattCalibrator
    from amv_calib.contract import CLAIM_FEATURES

    claims = synth_claims(30_000, seed=seed)
    fitted = PlattCalibrator().fit(claims[list(CLAIM_FEATURES)], claims["violated"])
    portable: PortableCalibrator = fitted.to_portable()
    return portable


def _prefixed(episodes: list[dict[str, Any]], prefix: str) -> EpisodeSet:
    return episode_set([{**e, "instance_id": f"{prefix}-{e['instance_id']}"} for e in episodes])


def _tune(es: EpisodeSet, cal: PortableCalibrator, *, storage: Path, seed: int,
          trials: int, tune_fraction: float) -> tuple[dict[str, Any], TuningRecord]:
    """The tune step: its thresholds and the record of the episodes it tuned on."""
    res = tune_thresholds(es, calibrator=cal, trials=trials, storage=storage,
                          study_name=f"s{seed}", seed=seed, target_harmful=0.02,
                          planner="myopic", tune_fraction=tune_fraction, n_boot=0)
    assert res.thresholds is not None
    tune, _ = split_episodes(es, tune_fraction)
    record = TuningRecord.of(es.subset(tune).instance_id, split=hash_split(tune_fraction))
    return res.thresholds, record


@dataclass
class Draws:
    certified: int
    exceed: int
    draws: int
    true_harm: list[float]


def validity_draws(tmp: Path, *, draws: int = 200, n: int = 2000) -> Draws:
    """Each draw: ``n`` episodes, tuned on half, certified on the other half, the chosen
    gate's true harm measured on 20,000 fresh episodes of the same world."""
    cal = _world_calibrator(seed=501)
    pool = synth_episodes(draws * n // 4 + n, seed=502)
    test = _prefixed(synth_episodes(20_000, seed=503), "test")
    rng = np.random.default_rng(504)
    certified = exceed = 0
    harms: list[float] = []
    for d in range(draws):
        take = rng.choice(len(pool), size=n, replace=False)
        es = _prefixed([pool[i] for i in take], f"d{d}")
        thresholds, record = _tune(es, cal, storage=tmp / f"d{d}.log", seed=d, trials=6,
                                   tune_fraction=0.5)
        res = certify_episodes(es, cal, thresholds, seen=record, alpha=ALPHA, delta=DELTA,
                               seed=d)
        chosen = res.certificate.thresholds
        if chosen is None:
            continue
        certified += 1
        cal_eff, _ = with_gate_clamp(cal, chosen)
        harm = float(gate_evaluator(test, cal_eff, seed=d, lambda_eval=1.0)(chosen)[0].mean())
        harms.append(harm)
        exceed += harm > ALPHA
    return Draws(certified=certified, exceed=exceed, draws=draws, true_harm=harms)


@pytest.mark.slow
def test_certificate_on_the_path_users_run_is_valid_over_200_draws(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Optuna's journal file fsyncs every write (~100 per draw's study here): durability
    # these throwaway studies do not need, and the test's largest wait. The trials and
    # the thresholds are the same without it.
    monkeypatch.setattr(os, "fsync", lambda fd: None)
    r = validity_draws(tmp_path)
    # not vacuous: most draws certify something, and the chosen gates reach toward alpha
    assert r.certified >= 0.8 * r.draws, r
    assert np.quantile(r.true_harm, 0.9) > ALPHA / 3, np.quantile(r.true_harm, 0.9)
    assert r.exceed / r.draws <= DELTA + 3 * np.sqrt(DELTA * (1 - DELTA) / r.draws), r


@dataclass
class WorldFigures:
    n_tune: int
    n_calibration: int
    calibration_used: float
    chosen_mu: float
    test_harm: float
    test_loss: float
    oracle_mu: float
    oracle_loss: float
    oracle_safe_loss: float
    always_verify_loss: float

    @property
    def ratio(self) -> float:
        return self.test_loss / self.oracle_loss


def world_figures(tmp: Path, *, seed: int = 601) -> WorldFigures:
    """Tune on 3,000 episodes, certify on a separate 3,000, test on 20,000."""
    from amv_calib.tuning import replay

    cal = _world_calibrator(seed)
    tune_es = _prefixed(synth_episodes(3000, seed=seed + 1), "tune")
    cal_es = _prefixed(synth_episodes(3000, seed=seed + 2), "cal")
    test = _prefixed(synth_episodes(20_000, seed=seed + 3), "test")
    thresholds, record = _tune(tune_es, cal, storage=tmp / "world.log", seed=seed, trials=60,
                               tune_fraction=1.0)
    res = certify_episodes(cal_es, cal, thresholds, seen=record, alpha=ALPHA, delta=DELTA,
                           seed=seed)
    chosen = res.certificate.thresholds
    assert chosen is not None
    cal_eff, base = with_gate_clamp(cal, thresholds)
    evaluate = gate_evaluator(test, cal_eff, seed=seed, lambda_eval=1.0)
    # the oracle: every harm price of a fine grid, judged on the test set itself
    grid = sorted(set(HARM_PRICE_STEPS) | {float(x) for x in np.geomspace(0.05, 2e4, 120)},
                  reverse=True) + [0.0]
    grid = sorted(set(grid), reverse=True)
    path = harm_price_path(base, grid)
    scored = [(float(loss.mean()), float(harm.mean()), c["harm_price"])
              for c in path for harm, loss in [evaluate(c)]]
    oracle_loss, _, oracle_mu = min(scored)
    safe = [s for s in scored if s[1] <= ALPHA]
    harm, loss = evaluate(chosen)
    verify = replay(test, "always-verify", seed=seed, n_boot=0)
    return WorldFigures(
        n_tune=len(tune_es), n_calibration=len(cal_es),
        calibration_used=res.certificate.n / len(cal_es), chosen_mu=chosen["harm_price"],
        test_harm=float(harm.mean()), test_loss=float(loss.mean()), oracle_mu=oracle_mu,
        oracle_loss=oracle_loss, oracle_safe_loss=min(safe)[0] if safe else float("nan"),
        always_verify_loss=float(verify.outcomes.loss.mean()))


@pytest.mark.slow
def test_certified_gate_is_safe_and_near_the_oracle_on_a_world_of_its_own(tmp_path: Path
                                                                           ) -> None:
    w = world_figures(tmp_path)
    assert w.calibration_used == 1.0  # a separate calibration file is used whole
    assert w.test_harm <= ALPHA, w
    assert w.ratio <= 1.05, w


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        print(world_figures(Path(d)))
        r = validity_draws(Path(d))
        print(f"validity: certified {r.certified}/{r.draws}, exceed {r.exceed} "
              f"({r.exceed / r.draws:.3f}), true harm quantiles 10/50/90%: "
              f"{np.quantile(r.true_harm, [0.1, 0.5, 0.9])}")
