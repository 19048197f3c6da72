"""Benchmark: the calibrator comparison beside the bare scikit-learn fits it wraps, same run.

Measured (issue 4 targets) on synthetic claims (``amv_calib.datasets``, 1,000,000 by default):

* ``compare``: :func:`amv_calib.calibration._compare.compare_calibrators` with the default four
  calibrators (Platt and the isotonic index on the 17-term rich map, Beta with the rich
  extras, the seed prior), 5 time-ordered folds, refit on all rows, no bootstrap: fold
  assignment, feature maps, input checks, every fit, out-of-fold predictions, per-fold
  and pooled metrics, reliability bins. Target: under 60 s on 2 cores.
* the named baseline, ``bare``: on the same folds plus the all-rows refit, only the
  scikit-learn fits the calibrators wrap, on design matrices built *outside* the timer:
  ``LogisticRegression(solver="newton-cholesky")`` for Platt; for Beta the same ``abm``
  drop-and-refit sequence of ``LogisticRegression`` fits; for isotonic the two
  cross-fitting ``LogisticRegression`` fits on half the rows each and one
  ``IsotonicRegression``. Target: compare / bare <= 1.3. The comparison's extra work is
  everything else: building the feature maps, input checks, predicting the test folds,
  the metrics, the strict isotonic knots. A second ratio adds to the baseline the cost of
  building its two design matrices once on all rows (its input).
* the bootstrap of all seven metrics over the out-of-fold predictions of the four
  calibrators, timed apart, per resample.

Both sides run once, in this process, after the same imports. The ratio's clock is process
CPU time (``time.process_time``: this process, all its threads, the BLAS threads of both
sides alike; ``bench/README.md``), wall time beside it; the one-minute target is wall time
on 2 cores. The bare all-rows Platt fit must give the comparison's refitted Platt
coefficients (the baseline fits the same models). Run ``.venv/bin/python
bench/bench_calibrators.py [--quick] [--check]``; the numbers go to
``bench/results/calibrators.json``.
"""

from __future__ import annotations

import sys
import time
import warnings
from collections.abc import Callable
from typing import Any

import _bench
import numpy as np

RATIO_TARGET = 1.3
WALL_TARGET_S = 60.0


def _timed(fn: Callable[[], Any]) -> tuple[float, float, Any]:
    t0, c0 = time.perf_counter(), time.process_time()
    out = fn()
    return time.perf_counter() - t0, time.process_time() - c0, out


def _bare_fits(claims: Any, fold: np.ndarray, folds: int) -> dict[str, Any]:
    """Seconds of the bare sklearn fits of every fold and the refit (``wall``, ``cpu``),
    and of building their design matrices (``design_wall``, ``design_cpu``); the all-rows
    Platt fit's ``platt_intercept`` and ``platt_coef``."""
    from sklearn.isotonic import IsotonicRegression
    from sklearn.linear_model import LogisticRegression

    from amv_calib.calibration._calibrators import (
        RICH_BETA_EXTRA_MAP,
        RICH_PLATT_MAP,
        SCORE_EPS,
        _split_parts,
    )
    from amv_calib.contract._features import FeatureMap, Term

    # Beta's log terms with its default floor (SCORE_EPS), as the calibrator builds them.
    beta_map = FeatureMap((
        Term(column="model_confidence", transform="log", eps=SCORE_EPS),
        Term(column="model_confidence", transform="log1m", eps=SCORE_EPS),
        Term(column="source_trust_score", transform="log", eps=SCORE_EPS),
        Term(column="source_trust_score", transform="log1m", eps=SCORE_EPS),
        *RICH_BETA_EXTRA_MAP.terms,
    ))
    y = claims["violated"].to_numpy().astype(np.float64)
    groups = claims["claim_id"].astype(str).to_numpy()
    d_wall, d_cpu, (P, B) = _timed(lambda: (RICH_PLATT_MAP.transform(claims),
                                            beta_map.transform(claims)))
    # abm on decreasing scores: coefficients of both log terms must be <= 0; check the
    # log1m term first (see BetaCalibrator), refit until none has the wrong sign.
    pairs = [(1, 0), (3, 2)]

    def lr() -> Any:
        return LogisticRegression(C=1.0, solver="newton-cholesky", tol=1e-8, max_iter=100)

    splits = [(fold != k) for k in range(folds)] + [np.ones(len(y), dtype=bool)]
    wall = cpu = 0.0
    n_fits = 0
    for train in splits:
        Pt, Bt, yt = P[train], B[train], y[train]
        parts = _split_parts(int(train.sum()), groups[train], 2, 0)
        t0, c0 = time.perf_counter(), time.process_time()
        platt = lr().fit(Pt, yt)
        active = np.ones(B.shape[1], dtype=bool)  # Beta
        while True:
            m = lr().fit(Bt[:, active], yt)
            n_fits += 1
            coef = np.zeros(B.shape[1])
            coef[active] = m.coef_[0]
            drop = []
            for first, other in pairs:
                if active[first] and coef[first] > 0:
                    drop.append(first)
                elif active[other] and coef[other] > 0:
                    drop.append(other)
            if not drop:
                break
            active[drop] = False
        z = np.empty(len(yt))  # isotonic: cross-fitted index, then the isotonic fit
        for k in (0, 1):
            m = lr().fit(Pt[parts != k], yt[parts != k])
            z[parts == k] = m.decision_function(Pt[parts == k])
        IsotonicRegression(out_of_bounds="clip").fit(z, yt)
        wall += time.perf_counter() - t0
        cpu += time.process_time() - c0
        n_fits += 3
    return {"wall": wall, "cpu": cpu, "fits": n_fits, "design_wall": d_wall, "design_cpu": d_cpu,
            "platt_intercept": float(platt.intercept_[0]), "platt_coef": platt.coef_[0]}


def main(argv: list[str] | None = None) -> int:
    parser = _bench.parser(__doc__, "calibrators")
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--n-boot", type=int, default=20)
    args = parser.parse_args(argv)
    rows = 20_000 if args.quick else args.rows
    n_boot = 2 if args.quick else args.n_boot

    # Imports are not what is measured: load what both sides use first.
    import sklearn.isotonic  # noqa: F401
    import sklearn.linear_model  # noqa: F401
    from threadpoolctl import threadpool_info

    import amv_calib.calibration._calibrators  # noqa: F401
    from amv_calib.calibration._calibrators import COEF_DIGITS
    from amv_calib.calibration._compare import compare_calibrators, make_folds
    from amv_calib.calibration._metrics import METRICS, bootstrap_metrics
    from amv_calib.datasets._synth import synth_claims

    t = time.perf_counter()
    claims = synth_claims(rows, seed=7)
    print(f"synthetic claims: {rows} rows in {time.perf_counter() - t:.1f} s", flush=True)
    with warnings.catch_warnings():
        # Constant terms in tiny quick runs are expected; they must not flood the output.
        warnings.simplefilter("ignore", UserWarning)
        wall_c, cpu_c, res = _timed(lambda: compare_calibrators(
            claims, folds=args.folds, split="time", n_boot=0, refit=True))
    fold = make_folds(claims, folds=args.folds, split="time")
    bare = _bare_fits(claims, fold, args.folds)
    wall_b, cpu_b, n_fits = bare["wall"], bare["cpu"], int(bare["fits"])
    # The bare fits with their inputs: both design matrices built once, on all rows.
    wall_bd, cpu_bd = wall_b + bare["design_wall"], cpu_b + bare["design_cpu"]
    y = res.y
    t0 = time.perf_counter()
    for p in res.oof.values():
        bootstrap_metrics(METRICS, y, p, n_boot=n_boot, seed=1)
    wall_boot = time.perf_counter() - t0
    refit = res.estimators["platt"]
    # The comparison writes its coefficients at COEF_DIGITS significant digits (the same
    # bytes on any CPU); the bare fit's, rounded alike, are what it should equal.
    bare_rounded = [float(f"{v:.{COEF_DIGITS}g}")
                    for v in (bare["platt_intercept"], *bare["platt_coef"])]
    platt_diff = float(np.max(np.abs(np.r_[refit.intercept_, refit.coef_] - bare_rounded)))

    out: dict[str, Any] = {
        "quick": args.quick,
        "rows": rows,
        "folds": args.folds,
        "calibrators": list(res.oof),
        "compare_wall_s": wall_c,
        "compare_cpu_s": cpu_c,
        "bare_wall_s": wall_b,
        "bare_cpu_s": cpu_b,
        "bare_sklearn_fits": n_fits,
        "bare_design_wall_s": bare["design_wall"],
        "bare_design_cpu_s": bare["design_cpu"],
        "ratio_wall": wall_c / wall_b,
        "ratio_cpu": cpu_c / cpu_b,
        "ratio_with_design_wall": wall_c / wall_bd,
        "ratio_with_design_cpu": cpu_c / cpu_bd,
        "ratio_target": RATIO_TARGET,
        "wall_target_s": WALL_TARGET_S,
        "fit_seconds": res.timings,
        "bootstrap_resamples": n_boot,
        "bootstrap_wall_s_per_resample_all_calibrators": wall_boot / max(n_boot, 1),
        "champion": res.champion,
        "platt_refit_max_abs_diff_vs_bare": platt_diff,
        "threads": [{k: d.get(k) for k in ("user_api", "internal_api", "num_threads")}
                    for d in threadpool_info()],
    }
    targets = [
        _bench.holds("the bare all-rows Platt fit gives the comparison's refit (within 1e-9)",
                     platt_diff <= 1e-9),
        _bench.at_most("compare / bare fits, CPU", out["ratio_cpu"], RATIO_TARGET, unit="x",
                       full_only=True, ours=cpu_c, baseline=cpu_b, side_unit=" s CPU",
                       baseline_name="the bare scikit-learn fits it wraps"),
        _bench.at_most("compare, wall", wall_c, WALL_TARGET_S, unit=" s", full_only=True),
    ]
    _bench.write_results(args.out, out, targets, quick=args.quick)
    print(f"compare ({len(res.oof)} calibrators, {args.folds} folds + refit, {rows} rows): "
          f"{wall_c:.1f} s wall, {cpu_c:.1f} s CPU (target < {WALL_TARGET_S:.0f} s)")
    print(f"bare sklearn fits, same folds ({n_fits} fits): {wall_b:.1f} s wall, "
          f"{cpu_b:.1f} s CPU")
    print(f"ratio compare / bare: {out['ratio_wall']:.2f} wall, {out['ratio_cpu']:.2f} CPU "
          f"(target <= {RATIO_TARGET})")
    print(f"ratio compare / (bare + building its two design matrices once, "
          f"{bare['design_cpu']:.1f} s CPU): {out['ratio_with_design_wall']:.2f} wall, "
          f"{out['ratio_with_design_cpu']:.2f} CPU")
    print(f"bootstrap, 7 metrics x {len(res.oof)} calibrators: "
          f"{out['bootstrap_wall_s_per_resample_all_calibrators']:.2f} s per resample")
    print(f"wrote {args.out}")
    return _bench.finish(targets, quick=args.quick, check=args.check)


if __name__ == "__main__":
    sys.exit(main())
