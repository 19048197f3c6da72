"""``amv-calib replay``, ``amv-calib tune`` and ``amv-calib transfer``.

replay:   amv-calib replay EPISODES --policy P [--policy P2 | --policy all] [--artifact DIR]
          [--thresholds FILE] [--json] [--seed S] [--by-family]
tune:     amv-calib tune EPISODES --calibrator REF --trials N [--storage URL]
          [--mode constrained|multi] [--target-harmful X] [--out DIR]
transfer: amv-calib transfer EPISODES --tune-families a,b,c [--calibrator REF] --trials N
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from amv_calib.replay import format_table

__all__ = ["register"]


def register(subparsers: Any) -> None:
    """Add the ``replay``, ``tune`` and ``transfer`` sub-commands."""
    from amv_calib.replay import POLICIES
    from amv_calib.settings import DEFAULT_SEED

    p = subparsers.add_parser(
        "replay",
        help="replay policies over frozen episodes and print the paper-style table",
        description="Replay gate policies over an episodes JSONL file with common random "
        "numbers and report Gate Harmful, verification cost, queries, Proceed Coverage, "
        "abstention rate and total loss (bootstrap 95%% intervals).",
    )
    p.add_argument("episodes", metavar="EPISODES", help="episodes JSONL file")
    p.add_argument("--policy", action="append", required=True,
                   choices=[*POLICIES, "all"], help="policy to replay (repeatable, or 'all')")
    p.add_argument("--artifact", default=None,
                   help="artifact for the learned policies (default: the shipped champion)")
    p.add_argument("--thresholds", default=None,
                   help="thresholds.json overriding the artifact's gate thresholds")
    p.add_argument("--seed", type=int, default=DEFAULT_SEED, help="answer stream and bootstrap")
    p.add_argument("--tau", type=float, default=None, help="threshold of the static policy")
    p.add_argument("--lambda-eval", type=float, default=None,
                   help="price of verifier cost in the total loss (default 1.0)")
    p.add_argument("--n-boot", type=int, default=1000, help="bootstrap resamples (0: none)")
    p.add_argument("--by-family", action="store_true", help="also print one table per family")
    p.add_argument("--jobs", type=int, default=1,
                   help="worker processes for the lookahead planner (same results)")
    p.add_argument("--json", action="store_true",
                   help="print {POLICY: {metric: value, ..., n}} instead of the table")
    p.set_defaults(func=_run_replay)

    t = subparsers.add_parser(
        "tune",
        help="tune the gate's VOI thresholds with Optuna on replayed episodes",
        description="Search lambda, delta, epsilon and the verification budget on a tuning "
        "split, report on the held-out split, write thresholds.json. An interrupted study "
        "resumes from its storage and runs only the missing trials.",
    )
    t.add_argument("episodes", metavar="EPISODES", help="episodes JSONL file")
    _tune_options(t, DEFAULT_SEED)
    t.add_argument("--mode", choices=("constrained", "multi"), default="constrained")
    t.add_argument("--tune-fraction", type=float, default=0.5)
    t.add_argument("--study-name", default="amv-calib-tune")
    t.add_argument("--workers", type=int, default=1,
                   help="parallel worker processes sharing the storage (not reproducible)")
    t.set_defaults(func=_run_tune)

    x = subparsers.add_parser(
        "transfer",
        help="tune on some families, report on families never seen in tuning",
    )
    x.add_argument("episodes", metavar="EPISODES", help="episodes JSONL file")
    x.add_argument("--tune-families", required=True, help="comma-separated families to tune on")
    _tune_options(x, DEFAULT_SEED)
    x.add_argument("--study-name", default=None)
    x.set_defaults(func=_run_transfer)


def _tune_options(p: argparse.ArgumentParser, seed: int) -> None:
    p.add_argument("--calibrator", default=None,
                   help="artifact reference, compare DIR, .json or .joblib calibrator, or "
                   "'seed' (default: the shipped champion)")
    p.add_argument("--trials", type=int, required=True, help="target number of completed trials")
    p.add_argument("--storage", default=None,
                   help="journal file path (default .optuna/journal.log) or RDB URL")
    p.add_argument("--target-harmful", type=float, default=0.02)
    p.add_argument("--planner", choices=("lookahead", "myopic"), default="lookahead")
    p.add_argument("--seed", type=int, default=seed)
    p.add_argument("--n-boot", type=int, default=500)
    p.add_argument("--out", default=None, help="output DIR (thresholds.json, trials.csv, ...)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")


def _learned(args: argparse.Namespace) -> tuple[Any, Any]:
    from amv_calib._exceptions import ConfigError
    from amv_calib.gate import Gate
    from amv_calib.gate._artifact import check_thresholds, load_artifact

    art = load_artifact(args.artifact)
    t = dict(art.thresholds)
    if args.thresholds:
        try:
            with open(args.thresholds, encoding="utf-8") as fh:
                t = check_thresholds(json.load(fh))
        except (OSError, ValueError) as exc:
            raise ConfigError(f"--thresholds {args.thresholds}: {exc}") from None
    gate = Gate(
        lambda_cost_scale=t["lambda_cost_scale"],
        delta_loss_threshold=t["delta_loss_threshold"],
        epsilon_harm_bound=t["epsilon_harm_bound"],
        planner=t["planner"],
        max_verifications=t["max_verifications"],
        calibrator=art.calibrator,
        artifact_name=art.name,
        artifact_version=art.version,
    )
    return gate, art.calibrator


def _run_replay(args: argparse.Namespace) -> int:
    from amv_calib.replay import DEFAULT_TAU, LAMBDA_EVAL, POLICIES, read_episodes, replay

    names = list(POLICIES) if "all" in args.policy else list(dict.fromkeys(args.policy))
    es = read_episodes(args.episodes)
    gate = cal = None
    if any(n in ("static", "myopic", "lookahead") for n in names):
        gate, cal = _learned(args)
    results = {
        n: replay(es, n, seed=args.seed, gate=gate, calibrator=cal,  # type: ignore[arg-type]
                  tau=DEFAULT_TAU if args.tau is None else args.tau,
                  lambda_eval=LAMBDA_EVAL if args.lambda_eval is None else args.lambda_eval,
                  n_boot=args.n_boot, n_jobs=args.jobs)
        for n in names
    }
    if args.json:
        print(json.dumps({n: r.summary() for n, r in results.items()}, indent=2))
        return 0
    print(f"{args.episodes}: {len(es)} instances, {es.n_premises} premises, seed {args.seed}")
    print(format_table({n: r.to_dict()["overall"] for n, r in results.items()},
                       {n: r.n for n, r in results.items()}))
    if args.by_family:
        for fam in es.families:
            print(f"\nfamily {fam}")
            print(format_table(
                {n: r.to_dict()["by_family"][fam] for n, r in results.items()},
                {n: r.family_n[fam] for n in results for r in [results[n]]},
            ))
    return 0


def _calibrator_ref(args: argparse.Namespace) -> Any:
    from amv_calib.settings import champion_reference

    return args.calibrator if args.calibrator else champion_reference()


def _run_tune(args: argparse.Namespace) -> int:
    from amv_calib.tuning import tune_thresholds

    res = tune_thresholds(
        args.episodes, calibrator=_calibrator_ref(args), trials=args.trials,
        storage=args.storage, study_name=args.study_name, seed=args.seed,
        target_harmful=args.target_harmful, mode=args.mode, tune_fraction=args.tune_fraction,
        planner=args.planner, out_dir=args.out, n_workers=args.workers, n_boot=args.n_boot,
        progress=not args.json,
    )
    if args.json:
        print(json.dumps(res.to_dict(), indent=2))
        return 0
    print(f"study {res.study_name!r} in {res.storage}: {res.n_trials} completed trials "
          f"({res.n_new} new), tuning split {res.n_tune}, held-out {res.n_holdout}")
    if res.thresholds is None:
        print(f"no trial meets Gate Harmful <= {res.target_harmful}; nothing written")
        return 1
    print("thresholds: " + json.dumps(res.thresholds))
    if res.holdout_metrics:
        rows = {"tuned": res.holdout_metrics["tuned"], **res.holdout_metrics["baselines"]}
        print("held-out split:")
        print(format_table(rows, {k: res.n_holdout for k in rows}))
    for role, path in res.files.items():
        print(f"wrote {role}: {path}")
    return 0


def _run_transfer(args: argparse.Namespace) -> int:
    from amv_calib.tuning import transfer_check

    fams = [f.strip() for f in args.tune_families.split(",") if f.strip()]
    res = transfer_check(
        args.episodes, tune_families=fams, calibrator=_calibrator_ref(args),
        trials=args.trials, seed=args.seed, target_harmful=args.target_harmful,
        planner=args.planner, storage=args.storage, study_name=args.study_name,
        n_boot=args.n_boot, out_dir=args.out, progress=not args.json,
    )
    if args.json:
        print(json.dumps(res.to_dict(), indent=2))
        return 0
    print(f"tuned on {res.tune_families}; reporting on unseen {res.test_families}")
    if res.tune.thresholds is not None:
        print("thresholds: " + json.dumps(res.tune.thresholds))
    rows = {k: v.to_dict()["overall"] for k, v in res.unseen.items()}
    print(format_table(rows, {k: v.n for k, v in res.unseen.items()}))
    if res.seen is not None:
        print("\ntuned gate on the tuning families (in-domain):")
        print(format_table({"tuned": res.seen.to_dict()["overall"]}, {"tuned": res.seen.n}))
    return 0 if res.tune.thresholds is not None else 1
