"""The prior part of ``bench/kinds_acceptance.py``: ``compare --prior`` on a world unlike
the sample, with few and with many labels.

The world is the acceptance script's five-kind world with the kinds hidden: a calibrator
sees the four claim features only, so the oracle is ``P(violated | four features)``, the
kinds' laws mixed by the posterior of each kind given the age (the only feature whose
distribution depends on the kind).

With 5,000 claims the table also gives the ceiling of the shrinkage: the smallest excess of
``platt_prior`` over the fixed pulls of ``PRIOR_PENALTIES``, the pull chosen by looking at the
oracle (no procedure that sees only the labels can choose better on these folds). When the
ceiling is above the target, no choice of the pull towards this prior meets it.

It gives the floor of the prior's form too: the prior's feature map fitted by Platt on
``FLOOR_N`` claims of the world (their own seed), so with next to no estimation error, scored
on the seed's claims. No calibrator of that form (any pull, any subset of its terms) is
expected to score below it; fitted on the four fifths of 5,000 claims that a fold trains on,
each free parameter adds about ``1 / (2 * 4,000)`` nats to it.

The out-of-fold excess scores models fitted on four fifths of the claims against noisy labels;
the table adds what ships, the champion refitted on all of them, scored by its expected excess
over the oracle on ``FRESH`` new claims of the same world (cross-entropy against ``p_true``,
no label noise): informative only, the targets stay the out-of-fold ones.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from _bench import Target, at_most, holds

REPO = Path(__file__).resolve().parents[1]
PRIOR = REPO / "models" / "amv-guard" / "v1"
SIZES = (5_000, 60_000)
#: The seeds of the claims (``--seeds``): the verdict is counted over them, not one lucky seed.
SEEDS = (12, 13, 14, 15, 16, 17, 18, 19)
#: The acceptance bound on the champion's excess log loss with 5,000 claims, in %.
EXCESS_AT_MOST = 0.5
PRIOR_CANDIDATES = ("prior", "platt_prior")
#: Fresh claims (their own seed) on which the refitted champion's expected excess is measured.
FRESH, FRESH_SEED = 100_000, 999
#: Claims (their own seed) on which the floor's model, the prior's map, is fitted.
FLOOR_N, FLOOR_SEED = 200_000, 998


def hidden_kind_claims(world: Any, n: int, seed: int) -> Any:
    """``n`` claims of ``world`` without ``memory_kind``, ``p_true`` given the features."""
    from amv_calib.datasets import synth_kind_claims

    claims = synth_kind_claims(n, seed=seed, world=world)
    h = claims["recency_hours"].to_numpy(dtype=float)
    logs = []
    for law in world.kinds:
        z = (np.log(np.maximum(h, 1e-300)) - math.log(law.recency_median)) / law.recency_sigma
        logs.append(math.log(law.weight) - 0.5 * z * z - math.log(law.recency_sigma))
    post = np.exp(np.array(logs) - np.max(logs, axis=0))
    post /= post.sum(axis=0)
    t = claims["source_trust_score"].to_numpy(dtype=float)
    c = claims["model_confidence"].to_numpy(dtype=float)
    k = claims["contradiction_flag"].to_numpy(dtype=float)
    laws = np.stack([world.probability(np.full(n, i, dtype=np.intp), h, t, c, k)
                     for i in range(len(world.kinds))])
    p = np.clip((post * laws).sum(axis=0), 1e-6, 1 - 1e-6)
    return claims.drop(columns="memory_kind").assign(p_true=p)


def _row(result: Any, name: str) -> dict[str, Any]:
    table = result.table.set_index("name")
    return {"name": name, "log_loss": float(table.loc[name, "log_loss"]),
            "excess_rel": float(table.loc[name, "excess_log_loss_rel"]),
            "excess_low": float(table.loc[name, "excess_log_loss_low"]),
            "excess_high": float(table.loc[name, "excess_log_loss_high"])}


def _prior_rows(result: Any) -> str:
    """The prior candidates' own excess over the oracle (and the chosen pull): why they win
    or lose, whichever is champion."""
    table = result.table.set_index("name")
    parts = [f"{name} {100 * float(table.loc[name, 'excess_log_loss_rel']):.2f}%"
             for name in PRIOR_CANDIDATES if name in table.index]
    pull = result.config.get("chosen_by_evidence", {}).get("platt_prior", {}).get("chosen")
    if pull:
        parts.append(f"pull {pull['prior_penalty']:g}")
    return ", ".join(parts) or "-"


def refit_excess(result: Any, fresh: Any) -> float:
    """The refitted champion's expected log loss on ``fresh`` above the oracle's, relative:
    ``sum CE(p_true, p) / sum CE(p_true, p_true) - 1`` (``p`` clipped before logs)."""
    from amv_calib.calibration._metrics import LOG_EPS
    from amv_calib.contract import CLAIM_FEATURES

    q = fresh["p_true"].to_numpy(dtype=float)
    p = result.estimators[result.champion].predict_proba(fresh[list(CLAIM_FEATURES)])[:, 1]
    p = np.clip(p, LOG_EPS, 1.0 - LOG_EPS)
    qc = np.clip(q, LOG_EPS, 1.0 - LOG_EPS)
    ce = -(q * np.log(p) + (1.0 - q) * np.log1p(-p)).sum()
    h = -(q * np.log(qc) + (1.0 - q) * np.log1p(-qc)).sum()
    return float(ce / h - 1.0)


def ceiling(claims: Any) -> dict[str, float]:
    """The smallest out-of-fold excess (relative) of ``platt_prior`` over its fixed pulls, and
    that pull: the best the shrinkage can do on these folds, chosen by the oracle."""
    from amv_calib.calibration import compare_calibrators
    from amv_calib.calibration._prior import PRIOR_PENALTIES, PriorPlattCalibrator, load_prior

    prior = load_prior(PRIOR)
    cals = {f"pull_{lam:g}": PriorPlattCalibrator(prior=prior, prior_penalty=lam)
            for lam in PRIOR_PENALTIES}
    result = compare_calibrators(claims, calibrators=cals, n_boot=0, refit=False)
    table = result.table.set_index("name")
    excess = {lam: float(table.loc[f"pull_{lam:g}", "excess_log_loss_rel"])
              for lam in PRIOR_PENALTIES}
    best = min(excess, key=lambda lam: excess[lam])
    return {"excess_rel": excess[best], "prior_penalty": best}


def floor_model(world: Any) -> Any:
    """The prior's feature map fitted by Platt on ``FLOOR_N`` claims of ``world``."""
    from amv_calib.calibration import PlattCalibrator
    from amv_calib.calibration._prior import load_prior
    from amv_calib.contract import CLAIM_FEATURES

    claims = hidden_kind_claims(world, FLOOR_N, FLOOR_SEED)
    fmap = load_prior(PRIOR).calibrator.feature_map
    return PlattCalibrator(feature_map=fmap).fit(claims[list(CLAIM_FEATURES)],
                                                 claims["violated"])


def floor_excess(model: Any, claims: Any) -> float:
    """``model``'s log loss on ``claims`` above the oracle's, relative to the oracle's (as
    the comparison computes its excess, on the same rows and labels)."""
    from amv_calib.calibration._metrics import LOG_EPS
    from amv_calib.contract import CLAIM_FEATURES

    y = claims["violated"].to_numpy(dtype=float)

    def loss(p: Any) -> Any:
        p = np.clip(p, LOG_EPS, 1.0 - LOG_EPS)
        return -(y * np.log(p) + (1.0 - y) * np.log1p(-p))

    oracle = float(loss(claims["p_true"].to_numpy(dtype=float)).mean())
    p = model.predict_proba(claims[list(CLAIM_FEATURES)])[:, 1]
    return float(loss(p).mean()) / oracle - 1.0


def part_prior(world: Any, n_boot: int, seeds: Sequence[int] = SEEDS
               ) -> tuple[list[Target], dict[str, Any]]:
    """One table per seed (both sizes, without and with the prior), a target per seed and
    size, and the count of seeds meeting each: a single seed's verdict is luck either way
    (on 5,000 claims the champions differ by less than their intervals)."""
    from amv_calib.calibration import compare_calibrators

    targets: list[Target] = []
    report: dict[str, Any] = {}
    met = {n: 0 for n in SIZES}
    fresh = hidden_kind_claims(world, FRESH, FRESH_SEED)
    floor = floor_model(world)
    for seed in seeds:
        print(f"## Prior: {PRIOR.relative_to(REPO)} on the five-kind world, kinds hidden, "
              f"seed {seed}")
        print("| claims | prior | champion | log loss | excess over oracle [95% CI] | "
              "prior candidates' excess | ceiling: best fixed pull | floor: the prior's map, "
              f"{FLOOR_N} labels | refit on fresh claims |")
        print("|---:|---|---|---:|---:|---|---|---:|---:|")
        report[str(seed)] = {}
        for n in SIZES:
            claims = hidden_kind_claims(world, n, seed)
            got = {}
            for label, prior in (("without", None), ("with", str(PRIOR))):
                t = time.perf_counter()
                result = compare_calibrators(claims, n_boot=n_boot, prior=prior)
                row = _row(result, result.champion)
                row["seconds"] = time.perf_counter() - t
                row["refit_excess_rel"] = refit_excess(result, fresh)
                row["chosen"] = result.config.get("chosen_by_evidence", {})
                got[label] = row
                best = low = "-"
                if prior and n == SIZES[0]:
                    row["ceiling"] = ceiling(claims)
                    best = (f"{100 * row['ceiling']['excess_rel']:.2f}% (pull "
                            f"{row['ceiling']['prior_penalty']:g})")
                    row["floor_excess_rel"] = floor_excess(floor, claims)
                    low = f"{100 * row['floor_excess_rel']:.2f}%"
                print(f"| {n} | {label} | {row['name']} | {row['log_loss']:.4f} | "
                      f"{100 * row['excess_rel']:.2f}% [{row['excess_low']:.5f}, "
                      f"{row['excess_high']:.5f}] | "
                      f"{_prior_rows(result) if prior else '-'} | {best} | {low} | "
                      f"{100 * row['refit_excess_rel']:.2f}% |")
            report[str(seed)][str(n)] = got
            if n == SIZES[0]:
                target = at_most(f"seed {seed}, {n} claims with the prior: champion's excess "
                                 f"log loss over the oracle (without: "
                                 f"{100 * got['without']['excess_rel']:.2f}%)",
                                 100 * got["with"]["excess_rel"], EXCESS_AT_MOST, unit="%")
            else:
                target = holds(f"seed {seed}, {n} claims: the champion with the prior no worse "
                               f"than without ({got['with']['log_loss']:.5f} <= "
                               f"{got['without']['log_loss']:.5f})",
                               got["with"]["log_loss"] <= got["without"]["log_loss"])
            targets.append(target)
            met[n] += int(target.met)
        print()
    counts = {str(n): {"met": met[n], "seeds": len(seeds)} for n in SIZES}
    floors = [100 * report[str(s)][str(SIZES[0])]["with"]["floor_excess_rel"] for s in seeds]
    print(f"floor of the prior's form on {SIZES[0]} claims: mean {np.mean(floors):.2f}% "
          f"({min(floors):.2f}% to {max(floors):.2f}%), before any estimation cost")
    print(f"{SIZES[0]} claims: {met[SIZES[0]]} of {len(seeds)} seeds meet an excess <= "
          f"{EXCESS_AT_MOST}% with the prior; {SIZES[1]} claims: {met[SIZES[1]]} of "
          f"{len(seeds)} no worse than without")
    report["counts"] = counts
    return targets, report
