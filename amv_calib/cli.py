"""The ``amv-calib`` command line: wiring over :mod:`amv_calib.stages` and the library.

A stage's command (ingest, label, compare, tune, certify, export, promote, register) is made
from its :class:`~amv_calib.stages.Stage` (:func:`~amv_calib.stages.add_command`), as its
pipeline step kind is. The commands written here are not stages, having no step kind:
synth, replay and transfer, rollback, verify-artifact, keygen, sign, bundle, unbundle,
registry-promote, ui-command, gate, run; and monitor (its step kind is still
``pipeline._steps``' own). Each adds its parsers in a ``_parsers_<group>`` function whose
sub-commands point at a ``_run_<command>`` function. Commands import heavy libraries inside
their run function only, so ``amv-calib --help`` and ``amv-calib gate`` start fast (no
pandas, no MLflow). Results go to stdout (JSON where a script reads them), progress and
logs to stderr.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import logging
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final, TypeVar

from amv_calib import __version__
from amv_calib.exceptions import AmvCalibError, ArtifactError, ConfigError
from amv_calib.settings import (
    DEFAULT_ALIAS,
    DEFAULT_REGISTERED_MODEL,
    DEFAULT_SEED,
    PLANNERS,
    TRUSTED_KEYS_ENV,
    MonitorOptions,
    Options,
    TuneOptions,
    models_dir,
    set_process_env,
    trusted_keys,
)
from amv_calib.stages import (
    STAGES,
    add_command,
    add_options,
    alias_json,
    alias_lines,
    parse_option,
    registered_json,
    registered_lines,
    require_inputs,
    sync_registry,
    where,
    with_default,
)

__all__ = ["build_parser", "main"]

_GATE_DOC = """Decide PROCEED / VERIFY / ABSTAIN for one action file and print the decision as JSON.

The action file holds {"action": {...}, "verifiers": [...]} in the seed's field names
(camelCase) or snake_case; a premise may embed its claim under "claim" (an example:
data/examples/action.json; its shape: the README, "3. Ship an artifact to the production
gate, and roll it back").

Without --artifact the gate loads models/amv-guard@production (under $AMV_CALIB_MODELS_DIR
when set); when that does not exist it exits 2. --mode seed runs the seed's rule with its
prior instead. With --no-artifact, premises that carry no probability make the gate fail
closed (ABSTAIN with the reason), never PROCEED.
"""


_URI_HELP = "MLflow tracking URI (default: $MLFLOW_TRACKING_URI, else sqlite:///mlflow.db)"


# -- what every command has, and options several commands share -------------------------------

def _command(subparsers: Any, name: str, run: Callable[[argparse.Namespace], int], *,
             help: str, description: str,
             formatter_class: type[argparse.HelpFormatter] = argparse.HelpFormatter,
             ) -> argparse.ArgumentParser:
    """Add the sub-command ``name``, carried out by ``run``."""
    p: argparse.ArgumentParser = subparsers.add_parser(
        name, help=help, description=description, formatter_class=formatter_class)
    p.set_defaults(func=run)
    return p


OptionsT = TypeVar("OptionsT", bound=Options)


def _options_from(args: argparse.Namespace, cls: type[OptionsT]) -> OptionsT:
    """The options object of a command's parsed arguments (options it has no flag for keep
    their defaults)."""
    return cls.from_mapping({k: getattr(args, k) for k in cls.spec() if hasattr(args, k)})


def _harm_price_option(p: argparse.ArgumentParser, help: str) -> None:
    """``--harm-price`` of the gate and replay: checked as tune's ``harm_price`` option."""
    p.add_argument("--harm-price", dest="harm_price", default=None, metavar="X", help=help,
                   type=parse_option("--harm-price", TuneOptions.spec()["harm_price"]))


def _seed_option(p: argparse.ArgumentParser, help: str,
                 default: int = DEFAULT_SEED) -> None:
    """``--seed``: the random seed of the command's draws."""
    p.add_argument("--seed", type=int, default=default, help=with_default(help, default))


def _n_boot_option(p: argparse.ArgumentParser, default: int, help: str,
                   metavar: str | None = None) -> None:
    """``--n-boot``: bootstrap resamples of the intervals."""
    p.add_argument("--n-boot", type=int, default=default, metavar=metavar,
                   help=with_default(help, default))


def _json_option(p: argparse.ArgumentParser,
                 help: str = "print the full result as JSON instead of the summary") -> None:
    """``--json``: the result as JSON on stdout instead of text."""
    p.add_argument("--json", action="store_true", help=help)


def _emit(args: argparse.Namespace, data: Any, summary: Iterable[str]) -> None:
    """The command's result: a few lines for a person, or with ``--json`` the full object
    (one object, sorted keys) for a script."""
    if getattr(args, "json", False):
        _print_json(data)
    else:
        sys.stdout.write("".join(f"{line}\n" for line in summary))
    sys.stdout.flush()


def _tracking_uri_option(p: argparse.ArgumentParser, help: str = _URI_HELP) -> None:
    """``--tracking-uri``: the MLflow tracking server or store."""
    p.add_argument("--tracking-uri", default=None, help=help)


def _episodes_argument(p: argparse.ArgumentParser) -> None:
    """``EPISODES``: the episodes a replay or tuning command reads."""
    p.add_argument("episodes", metavar="EPISODES", help="episodes JSONL file")


def _models_dir_option(p: argparse.ArgumentParser) -> None:
    """``--models-dir``: the root of the artifact folders."""
    p.add_argument("--models-dir", metavar="DIR", default=None,
                   help="artifact root (default: $AMV_CALIB_MODELS_DIR, else models/ in the "
                   "nearest folder upwards from here that holds one, else here)")


def _version_arguments(p: argparse.ArgumentParser) -> None:
    """``NAME VERSION``: one artifact version, by number or by one of its aliases."""
    p.add_argument("name", metavar="NAME", help="artifact name (the folder under models/)")
    p.add_argument("version", metavar="VERSION",
                   help="vN, or an alias naming one (challenger, production)")


def _trusted_key_option(p: argparse.ArgumentParser) -> None:
    """``--trusted-key``: public keys one of which must have signed the artifact."""
    # None when not given: an empty list would name no key and refuse every artifact
    p.add_argument("--trusted-key", dest="trusted_keys", action="append", default=None,
                   metavar="PUBLIC",
                   help="public key (from `amv-calib keygen`) that must have signed the "
                   "artifact (repeatable: any one of them; also $AMV_CALIB_TRUSTED_KEYS, "
                   "separated by ':'); an unsigned or wrongly signed artifact is refused "
                   "(default: the variable's keys, else no signature check)")


def _alias_option(p: argparse.ArgumentParser) -> None:
    """``--alias`` of an artifact name."""
    p.add_argument("--alias", default=DEFAULT_ALIAS, help=f"default: {DEFAULT_ALIAS}")


# -- synth -------------------------------------------------------------------------------------

#: Sizes of the bundled sample files (data/sample/).
_SYNTH_DEFAULT_N: dict[str, int] = {"claims": 20_000, "episodes": 3_520, "logs": 2_500}


def _parsers_synth(subparsers: Any) -> None:
    """Add the ``synth`` sub-command with its ``claims`` and ``episodes`` kinds."""
    p = _command(
        subparsers, "synth", _run_synth,
        help="generate synthetic claim outcomes or action episodes with a known truth",
        description=(
            "Generate synthetic data from ten perturbation families (see docs/data.md). "
            "claims: CSV, Parquet or JSONL by the ending of --out; episodes: JSONL; logs: "
            "the folder --out gets decisions.jsonl, written by the gate of --artifact running "
            "over synthetic actions with a verifier less reliable than declared, and "
            "outcomes.csv (data/examples/logs/ is made this way). "
            "The same --seed gives the same bytes."
        ),
    )
    p.add_argument("kind", choices=("claims", "episodes", "logs"),
                   help="claims: labelled claim outcomes; episodes: action episodes; logs: "
                   "a simulated production's decision log and outcomes")
    p.add_argument("--n", type=int, default=None, metavar="N",
                   help="rows / instances / actions (default: 20000 claims, 3520 episodes, "
                   "2500 actions)")
    p.add_argument("--artifact", default=None, metavar="REF",
                   help="logs: the artifact whose gate decides (default: the shipped "
                   "models/amv-guard/v1)")
    p.add_argument("--true-reliability", type=float, default=0.85, metavar="R",
                   help="logs: how often cache-api answers right (default 0.85)")
    p.add_argument("--declared-reliability", type=float, default=0.95, metavar="R",
                   help="logs: the reliability cache-api declares (default 0.95)")
    p.add_argument("--start", default=None, metavar="TIME",
                   help="logs: time of the first decision, ISO-8601 (UTC when no offset; "
                   "default: midnight UTC after the artifact went live, so that "
                   "'amv-calib monitor' counts them)")
    _seed_option(p, f"random seed (default: {DEFAULT_SEED})")
    p.add_argument("--out", required=True, metavar="PATH",
                   help="output file (a folder for logs)")


def _run_synth(args: argparse.Namespace) -> int:
    """Generate and write; print the summary line."""
    from amv_calib.datasets import synth_claims, synth_episodes, write_claims, write_episodes

    n = _SYNTH_DEFAULT_N[args.kind] if args.n is None else args.n
    out = Path(args.out)
    if args.kind == "logs":
        from amv_calib.datasets import simulate_production
        from amv_calib.settings import DEFAULT_MODEL_NAME, models_dir

        artifact = args.artifact or str(models_dir() / DEFAULT_MODEL_NAME / "v1")
        start = _synth_start(artifact, args.start)
        try:
            sim = simulate_production(artifact, out, n_actions=n, seed=args.seed,
                                      true_reliability=args.true_reliability,
                                      declared_reliability=args.declared_reliability,
                                      start=start)
        except ValueError as exc:  # an argument out of range: said as such, exit 2
            raise ConfigError(str(exc)) from None
        data = {"kind": "logs", "n": n, "seed": args.seed, "artifact": artifact,
                "start": start.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
                "answers": sim.answers, "outcome_records": sim.outcome_records,
                "sha256": {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
                           for p in (sim.decisions, sim.outcomes)}}
        _emit(args, data, [
            f"simulated {n:,} actions of {artifact} (seed {args.seed}) from "
            f"{data['start']}: {sim.outcome_records:,} outcome records",
            f"  decisions: {where(sim.decisions)}", f"  outcomes:  {where(sim.outcomes)}",
            f"next: amv-calib label --decisions {sim.decisions} --outcomes {sim.outcomes} "
            "--out claims.parquet"])
        return 0
    if args.kind == "claims":
        path = write_claims(synth_claims(n, seed=args.seed), out)
    else:
        if out.suffix.lower() not in (".jsonl", ".ndjson"):
            raise ConfigError(f"episodes are JSONL: --out {str(out)!r} must end in .jsonl")
        path = write_episodes(synth_episodes(n, seed=args.seed), out)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    _emit(args, {"kind": args.kind, "n": n, "seed": args.seed, "out": str(path),
                 "sha256": digest},
          [f"wrote {n:,} synthetic {args.kind} (seed {args.seed}): {where(path)}",
           f"  sha256 {digest}"])
    return 0


def _synth_start(artifact: str, start: str | None) -> datetime.datetime:
    """``synth logs``' first decision: ``--start``, else midnight UTC after the artifact
    went live (the monitor counts only decisions since go-live)."""
    from amv_calib.monitoring import go_live, parse_since

    if start is not None:
        t_us = parse_since(start)
    else:
        from amv_calib.contract import load_artifact

        day_us = 86_400_000_000
        t_us = (parse_since(go_live(load_artifact(artifact))) // day_us + 1) * day_us
    return (datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
            + datetime.timedelta(microseconds=t_us))


# -- label -------------------------------------------------------------------------------------

def _log_options(p: argparse.ArgumentParser, outcomes_help: str) -> None:
    """``--decisions LOG...`` and ``--outcomes FILE...`` (label and monitor)."""
    p.add_argument("--decisions", nargs="+", required=True, metavar="LOG",
                   help="decision log files (JSON lines), in time order")
    p.add_argument("--outcomes", nargs="+", default=[], metavar="FILE", help=outcomes_help)


def _skip_corrupt_option(p: argparse.ArgumentParser) -> None:
    """``--skip-corrupt`` (label and monitor)."""
    p.add_argument("--skip-corrupt", action="store_true",
                   help="skip (and count) corrupt decision-log lines instead of failing")


# -- compare -----------------------------------------------------------------------------------

_log = logging.getLogger(__name__)


# -- replay ------------------------------------------------------------------------------------

def _parsers_replay(subparsers: Any) -> None:
    """Add the ``replay``, ``tune`` and ``transfer`` sub-commands."""
    from amv_calib.tuning import POLICIES

    p = _command(
        subparsers, "replay", _run_replay,
        help="replay policies over frozen episodes and print the paper-style table",
        description="Replay gate policies over an episodes JSONL file with common random "
        "numbers and report Gate Harmful, verification cost, queries, Proceed Coverage, "
        "abstention rate and total loss (bootstrap 95 % intervals).",
    )
    _episodes_argument(p)
    p.add_argument("--policy", action="append", required=True,
                   choices=[*POLICIES, "all"], help="policy to replay (repeatable, or 'all')")
    p.add_argument("--artifact", default=None,
                   help="artifact for the learned policies (default: the shipped champion)")
    p.add_argument("--thresholds", default=None,
                   help="thresholds.json overriding the artifact's gate thresholds (default: "
                   "the artifact's)")
    _harm_price_option(p, "harm price of the learned policies, overriding the thresholds' "
                          "(default: theirs, else 0)")
    _seed_option(p, "answer stream and bootstrap")
    p.add_argument("--tau", type=float, default=None,
                   help="probability threshold of the static policy: PROCEED when every "
                   "premise's p is below it (default: the policy's own, 0.5)")
    p.add_argument("--lambda-eval", type=float, default=None,
                   help="price of verifier cost in the total loss (default 1.0)")
    _n_boot_option(p, 1000, "bootstrap resamples (0: none)")
    p.add_argument("--by-family", action="store_true", help="also print one table per family")
    p.add_argument("--jobs", type=int, default=1,
                   help="threads for the compiled batch engine (same results; default 1)")
    _json_option(p, "print {POLICY: {metric: value, ..., n}} instead of the table")

    x = _command(
        subparsers, "transfer", _run_transfer,
        help="tune on some families, report on families never seen in tuning",
        description="Tune the gate on the episodes of --tune-families only, then replay the "
                    "tuned gate on the other families: how the thresholds transfer to "
                    "perturbations never seen in tuning.",
    )
    _episodes_argument(x)
    x.add_argument("--tune-families", required=True, help="comma-separated families to tune on")
    _tune_options(x)
    add_options(x, TuneOptions, only=("trials", "target_harmful", "planner", "n_boot"))
    x.add_argument("--study-name", default=None,
                   help="Optuna study name (default: one named after the tune families)")

def _tune_options(p: argparse.ArgumentParser) -> None:
    """The options ``tune`` and ``transfer`` share."""
    p.add_argument("--calibrator", default=None,
                   help="artifact reference, compare DIR, .json or .joblib calibrator, or "
                   "'seed' (default: the shipped champion)")
    p.add_argument("--storage", default=None,
                   help="journal file path (default .optuna/journal.log) or RDB URL")
    _seed_option(p, f"seed of the sampler, split and answer stream (default {DEFAULT_SEED})")
    p.add_argument("--out", default=None, help="output DIR (thresholds.json, trials.csv, "
                   "tuning.json, ...; default: nothing written)")
    _json_option(p, "print the result as JSON")


def _learned(args: argparse.Namespace) -> tuple[Any, Any]:
    from amv_calib.contract import check_thresholds, load_artifact
    from amv_calib.gate import Gate

    art = load_artifact(args.artifact)
    t = dict(art.thresholds)
    if args.thresholds:
        try:
            t = check_thresholds(_read_json(args.thresholds, "--thresholds"))
        except ValueError as exc:
            raise ConfigError(f"--thresholds {args.thresholds}: {exc}") from None
    gate = Gate(
        lambda_cost_scale=t["lambda_cost_scale"],
        delta_loss_threshold=t["delta_loss_threshold"],
        epsilon_harm_bound=t["epsilon_harm_bound"],
        harm_price=(t.get("harm_price", 0.0) if args.harm_price is None else args.harm_price),
        planner=t["planner"],
        max_verifications=t["max_verifications"],
        calibrator=art.calibrator,
        artifact_name=art.name,
        artifact_version=art.version,
    )
    return gate, art.calibrator


def _run_replay(args: argparse.Namespace) -> int:
    from amv_calib.tuning import (
        DEFAULT_TAU,
        LAMBDA_EVAL,
        POLICIES,
        format_table,
        read_episodes,
        replay,
    )

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


def _run_transfer(args: argparse.Namespace) -> int:
    from amv_calib.tuning import format_table, transfer_check

    _quiet_optuna(args)
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


# -- artifacts ---------------------------------------------------------------------------------

def _print_json(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj, indent=2, sort_keys=True) + "\n")


def _parsers_artifacts(subparsers: Any) -> None:
    """Add the artifact sub-commands."""
    p = _command(
        subparsers, "rollback", _run_rollback,
        help="move an alias back to its previous version",
        description="Point ALIAS back at the version it named before the current one.")
    p.add_argument("name", metavar="NAME", help="artifact name (the folder under models/)")
    _alias_option(p)
    _models_dir_option(p)
    _registry_options(p)

    p = _command(
        subparsers, "verify-artifact", _run_verify_artifact,
        help="check an artifact as the gate would; print its summary",
        description="Check manifest, sha256 of every file, calibrator.json, the certificate's "
                    "binding and (with trusted keys) the signature, as the gate does; print "
                    "what was checked and what the version holds (--json: the manifest "
                    "summary as one object). Exit 1 when the artifact is refused, 2 when "
                    "PATH names an alias the model does not have.")
    p.add_argument("path", metavar="PATH", help="models/NAME/vN or models/NAME@ALIAS")
    _trusted_key_option(p)

    p = _command(
        subparsers, "keygen", _run_keygen, help="write a key pair for signing artifacts",
        description="Write an ECDSA P-256 key pair into DIR: amv-calib-signing.key (private, "
                    "mode 0600; keep it where artifacts are exported) and amv-calib-signing.pub "
                    "(give it to every gate as --trusted-key or $AMV_CALIB_TRUSTED_KEYS).")
    p.add_argument("--out", required=True, metavar="DIR", help="folder for the two key files")
    p.add_argument("--overwrite", action="store_true", help="replace an existing key pair")

    p = _command(
        subparsers, "sign", _run_sign, help="sign an artifact version with a private key",
        description="Write VERSION_DIR/model.sig (OpenSSF model signing, key-based): a "
                    "signature over the sha256 of every file of the version, manifest.json "
                    "included. A gate with trusted keys loads only versions one of them signed.")
    p.add_argument("path", metavar="VERSION_DIR", help="models/NAME/vN")
    p.add_argument("--key", required=True, metavar="PRIVATE", help="the private key file")

    p = _command(
        subparsers, "bundle", _run_bundle, help="write one version as a deterministic .tar.gz",
        description="Verify models/NAME/VERSION and write it as one reproducible .tar.gz "
                    "(extract with: tar -xzf FILE -C models). Given an alias as VERSION, the "
                    "bundle also carries NAME/aliases.json with that alias, so that "
                    "NAME@ALIAS resolves where it is extracted; tar replaces an aliases.json "
                    "already there: use `amv-calib unbundle` on a machine that has the model.")
    _version_arguments(p)
    p.add_argument("--out", metavar="FILE", default=None,
                   help="output file (default: NAME-VERSION.tar.gz, NAME-ALIAS-VERSION.tar.gz "
                        "for an alias)")
    _models_dir_option(p)

    p = _command(
        subparsers, "unbundle", _run_unbundle,
        help="install a bundle into a models folder without replacing its aliases",
        description="Verify the bundle's version and add it to the models folder (an existing "
                    "folder of that version must hold the same files); add the bundle's alias "
                    "when the model has no such alias. An alias that points at another "
                    "version is not moved (exit 1, saying how to promote).")
    p.add_argument("bundle", metavar="FILE", help="a .tar.gz written by `amv-calib bundle`")
    _models_dir_option(p)
    _trusted_key_option(p)


def _registry_options(p: argparse.ArgumentParser) -> None:
    """Where the registry mirror of the file aliases lives."""
    p.add_argument("--registered-name", default=DEFAULT_REGISTERED_MODEL,
                   help=f"MLflow registered model to keep in sync (default: "
                   f"{DEFAULT_REGISTERED_MODEL})")
    _tracking_uri_option(p)


def _run_rollback(args: argparse.Namespace) -> int:
    from amv_calib.artifacts import rollback

    entry = rollback(args.name, alias=args.alias, models_dir=args.models_dir)
    # rolling back again would go further back: promoting the version left undoes this one
    left = entry["log"][-1]["from_version"]
    force = " --force" if args.alias == DEFAULT_ALIAS else ""
    _emit(args, alias_json(args.name, args.alias, entry), alias_lines(
        args.name, args.alias, entry,
        f"amv-calib promote {args.name} {left} --alias {args.alias}{force}"))
    sync_registry(Path(args.models_dir or models_dir()) / args.name, alias=args.alias,
                  registered_name=args.registered_name, tracking_uri=args.tracking_uri)
    return 0


def _run_verify_artifact(args: argparse.Namespace) -> int:
    from amv_calib.artifacts import verify_artifact

    info = verify_artifact(args.path, trusted_keys=args.trusted_keys or None)
    _emit(args, info, _artifact_summary(info))
    return 0


def _artifact_summary(info: Mapping[str, Any]) -> list[str]:
    """What ``verify-artifact`` checked and what the version holds, for a person."""
    sig = info.get("signature") or {}
    cert = info.get("certificate_check") or {}
    gate = info.get("gate") or {}
    signed = (f"signature verified by {sig['verified_by']}" if sig.get("verified_by")
              else "signature not checked (no trusted key given)" if not sig.get("file")
              else f"signed ({sig['file']}), not checked: no trusted key given")
    lines = [f"OK: {info.get('name')} {info.get('version')} ({info.get('path')}) loads as "
             f"the gate loads it: {len(info.get('files') or {})} files' sha256 match; "
             f"{signed}"]
    if cert:
        bound = ("bound to this calibrator and thresholds" if cert.get("matches")
                 else "NOT bound to this calibrator and thresholds")
        lines.append(f"  certificate: {cert.get('certified')} ({bound}; observed upper "
                     f"bound {cert.get('observed_upper_bound', float('nan')):.4f})")
    else:
        lines.append("  certificate: none (not certified)")
    lines.append(f"  calibrator: {info.get('calibrator_source')} ({info.get('calibrator_kind')}, "
                 f"{len(info.get('feature_map') or [])} features)")
    lines.append("  gate: " + ", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}"
                                        for k, v in sorted(gate.items()) if v is not None))
    aliases = info.get("aliases") or []
    lines.append(f"  aliases on this version: {', '.join(aliases) or 'none'}; created "
                 f"{info.get('created_utc')} by amv-calib {info.get('package_version')}")
    lines.append("full manifest: --json")
    return lines


def _run_keygen(args: argparse.Namespace) -> int:
    from amv_calib.artifacts import keygen

    private, public = keygen(args.out, overwrite=args.overwrite)
    _emit(args, {"private_key": str(private), "public_key": str(public)},
          [f"private key: {where(private)} (mode 0600: keep it where versions are signed, "
           "never commit it)",
           f"public key:  {where(public)} (give it to every gate: --trusted-key or "
           f"${TRUSTED_KEYS_ENV})",
           f"next: amv-calib sign models/NAME/vN --key {private}"])
    return 0


def _run_sign(args: argparse.Namespace) -> int:
    from amv_calib.artifacts import sign_artifact
    from amv_calib.contract import load_artifact

    load_artifact(args.path, check_signature=False)  # sign only what the gate could load
    sig = sign_artifact(args.path, args.key)
    digest = hashlib.sha256(sig.read_bytes()).hexdigest()
    _emit(args, {"path": str(args.path), "signature": str(sig), "sha256": digest},
          [f"signed {args.path}: {where(sig)} (sha256 {digest[:12]})",
           f"check: amv-calib verify-artifact {args.path} --trusted-key PUBLIC_KEY"])
    return 0


def _run_bundle(args: argparse.Namespace) -> int:
    from amv_calib.artifacts import bundle

    path = bundle(args.name, args.version, args.out, models_dir=args.models_dir)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    _emit(args, {"bundle": str(path), "sha256": digest},
          [f"wrote {where(path)} (sha256 {digest[:12]})",
           f"on the receiving machine: amv-calib unbundle {path.name} (or tar -xzf "
           f"{path.name} -C models where the model is new)"])
    return 0


def _run_unbundle(args: argparse.Namespace) -> int:
    from amv_calib.artifacts import unbundle

    res = unbundle(args.bundle, models_dir=args.models_dir, trusted_keys=args.trusted_keys)
    lines = [f"{'installed' if res['installed'] else 'already there (same files)'}: "
             f"{res['name']} {res['version']} at {where(res['path'])}"]
    if res.get("alias"):
        lines.append(f"  {res['name']}@{res['alias']} "
                     f"{'set to' if res['alias_set'] else 'already'} {res['version']}")
    _emit(args, res, lines)
    return 0


# -- mlflow ------------------------------------------------------------------------------------

def _parsers_mlflow(subparsers: Any) -> None:
    """Add the ``registry-promote`` and ``ui-command`` sub-commands."""
    q = _command(
        subparsers, "registry-promote", _run_registry_promote,
        help="move a registered MLflow model's alias to another version",
        description="Point ALIAS of registered model NAME at VERSION: a registry version "
                    "number (3), an artifact version (v3), or an artifact folder.",
    )
    q.add_argument("name", metavar="NAME", help="registered model name")
    q.add_argument("version", metavar="VERSION", help="registry version, vN or artifact folder")
    q.add_argument("--alias", default="champion", help="alias to move (default: champion)")
    _tracking_uri_option(q)
    _json_option(q, "print the result as one JSON object")

    u = _command(
        subparsers, "ui-command", _run_ui_command,
        help="print the command that opens MLflow's UI on the tracked runs",
        description="Print the `mlflow ui` command for the tracking store (a local SQLite "
                    "store as an absolute path, so the command works from any folder), or "
                    "the address of a tracking server.",
    )
    _tracking_uri_option(u)
    u.add_argument("--port", type=int, default=5000, help="port for the UI (default: 5000)")


def _run_registry_promote(args: argparse.Namespace) -> int:
    from amv_calib.tracking import registry_promote

    result = registry_promote(args.version, args.alias, registered_name=args.name,
                                       tracking_uri=args.tracking_uri)
    _emit(args, registered_json(result), registered_lines(result, "promoted"))
    return 0


def _run_ui_command(args: argparse.Namespace) -> int:
    from amv_calib.settings import ui_command

    print(ui_command(args.tracking_uri, port=args.port))
    return 0


# -- gate --------------------------------------------------------------------------------------

def _parsers_gate(subparsers: Any) -> None:
    """Add the ``gate`` sub-command."""
    p = _command(
        subparsers, "gate", _run_gate,
        help="decide PROCEED / VERIFY / ABSTAIN for one candidate action (JSON out)",
        description=_GATE_DOC,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--action", required=True, metavar="ACTION.json",
                   help='{"action": {...}, "verifiers": [...]}; "-" reads stdin')
    src = p.add_mutually_exclusive_group()
    src.add_argument("--artifact", metavar="DIR",
                     help="artifact version folder or MODEL_DIR@ALIAS (calibrator + "
                     "thresholds); default models/amv-guard@production when it exists")
    src.add_argument("--calibrator", metavar="FILE",
                     help="a portable calibrator.json to compute p from claims, with the built-in "
                   "thresholds (default: the artifact's calibrator)")
    src.add_argument("--no-artifact", action="store_true",
                     help="load no artifact: the built-in thresholds, and only the "
                     "probabilities the action file carries (other premises ABSTAIN)")
    p.add_argument("--strict", action="store_true",
                   help="error out on a refused artifact instead of failing closed (ABSTAIN)")
    p.add_argument("--mode", choices=("amv", "seed"), default=None,
                   help="amv: the calibrated gate; seed: the seed's uncalibrated rule "
                   "(default: the artifact's)")
    p.add_argument("--planner", choices=PLANNERS, default=None,
                   help="verification planner (default: the artifact's)")
    p.add_argument("--lambda", dest="lambda_cost_scale", type=float, default=None,
                   metavar="X", help="lambda_cost_scale: weight of a verifier's execution cost "
                   "in the loss, unitless (default: the artifact's, else 1.0)")
    p.add_argument("--delta", dest="delta_loss_threshold", type=float, default=None,
                   metavar="X", help="delta_loss_threshold: largest expected loss an action "
                   "may carry and PROCEED, in theta's units (default: the artifact's, else 10.0)")
    p.add_argument("--epsilon", dest="epsilon_harm_bound", type=float, default=None,
                   metavar="X", help="epsilon_harm_bound: largest probability that any premise "
                   "is violated for PROCEED, in [0, 1] (default: the artifact's, else 0.05)")
    _harm_price_option(p, "harm_price: the price of harm, added to theta when planning "
                          "(default: the artifact's, else 0)")
    p.add_argument("--max-verifications", dest="max_verifications", type=int, default=None,
                   metavar="N", help="verification budget (default: the artifact's)")
    p.add_argument("--decision-log", dest="decision_log", metavar="PATH", default=None,
                   help="append the decision record to this JSON-lines file (default: no log)")
    _trusted_key_option(p)


def _read_json(where: str, flag: str = "--action") -> Any:
    """The JSON document in file ``where`` (``-``: stdin), errors naming ``flag``: a regular
    file only, UTF-8, every key of an object given once."""
    from amv_calib.contract import loads_strict, read_regular

    try:
        raw = sys.stdin.buffer.read() if where == "-" else read_regular(
            where, what=f"{flag} file", error=ConfigError)
    except OSError as exc:
        raise ConfigError(f"{flag} {where}: cannot read ({exc.strerror})") from None
    try:
        return loads_strict(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise ConfigError(f"{flag} {where}: line {line}: not UTF-8 text ({exc.reason} at "
                          f"byte {exc.start})") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{flag} {where}: not JSON ({exc})") from None
    except RecursionError:
        raise ConfigError(f"{flag} {where}: JSON nested too deeply") from None
    except ValueError as exc:  # a key given twice: which copy counts is ambiguous
        raise ConfigError(f"{flag} {where}: {exc}") from None


def _default_artifact() -> str:
    """``models/amv-guard@production`` when it exists, else exit 2 naming the flags."""
    from amv_calib.settings import champion_reference

    ref = champion_reference()
    folder = Path(ref.rpartition("@")[0])
    if not (folder / "aliases.json").is_file():
        raise ConfigError(f"no --artifact given and no {ref} to default to; pass --artifact "
                          f"DIR (or MODEL_DIR@ALIAS), --calibrator FILE or --no-artifact")
    return ref


def _check_alias(ref: str) -> None:
    """Exit 2 on a reference through an alias the model does not have (a typo, usually):
    a usage error, not a refused artifact. Any other refusal is the gate's to report: it
    ABSTAINs, saying why (fail closed)."""
    from amv_calib.contract import resolve_reference
    from amv_calib.exceptions import UnknownAliasError

    try:
        resolve_reference(ref)
    except UnknownAliasError:
        raise
    except ArtifactError:
        pass  # the gate refuses it below and ABSTAINs with the reason


def _run_gate(args: argparse.Namespace) -> int:
    """Evaluate the action and print the decision as one JSON object."""
    from amv_calib.contract import PortableCalibrator
    from amv_calib.gate import CandidateAction, Gate, Verifier

    data = _read_json(args.action)
    if not isinstance(data, dict):
        raise ConfigError(f"--action {args.action}: expected a JSON object")
    raw_action = data.get("action", data if "premises" in data else None)
    if not isinstance(raw_action, dict):
        raise ConfigError(f"--action {args.action}: lacks an 'action' object")
    raw_action = {k: v for k, v in raw_action.items() if k != "verifiers"}
    raw_verifiers = data.get("verifiers", data.get("action", {}).get("verifiers", []))
    if not isinstance(raw_verifiers, list):
        raise ConfigError(f"--action {args.action}: 'verifiers' must be a list")
    try:
        action = CandidateAction.from_dict(raw_action)
        verifiers = [Verifier.from_dict(v) for v in raw_verifiers]
    except ValueError as exc:
        raise ConfigError(f"--action {args.action}: {exc}") from None

    overrides: dict[str, Any] = {
        k: getattr(args, k)
        for k in ("mode", "planner", "lambda_cost_scale", "delta_loss_threshold",
                  "epsilon_harm_bound", "harm_price", "max_verifications", "decision_log")
        if getattr(args, k) is not None
    }
    try:
        if (args.artifact is None and args.calibrator is None and not args.no_artifact
                and args.mode != "seed"):
            args.artifact = _default_artifact()
        if args.artifact is not None:
            _check_alias(args.artifact)
            gate = Gate.from_artifact(args.artifact, strict=args.strict,
                                      trusted_keys=args.trusted_keys or None, **overrides)
        else:
            if args.calibrator is not None:
                if args.trusted_keys or trusted_keys():
                    raise ConfigError(
                        "trusted keys are configured (--trusted-key or "
                        f"${TRUSTED_KEYS_ENV}): a bare --calibrator file carries no "
                        "signature; pass a signed --artifact instead")
                cal_data = _read_json(args.calibrator, "--calibrator")
                overrides["calibrator"] = PortableCalibrator.from_dict(cal_data)
            gate = Gate(**overrides)
        decision = gate.evaluate(action, verifiers)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    out = {
        "action_id": action.action_id,
        **decision.to_dict(),
        "gate": {
            "mode": gate.mode,
            "planner": gate.planner,
            "lambda_cost_scale": gate.lambda_cost_scale,
            "delta_loss_threshold": gate.delta_loss_threshold,
            "epsilon_harm_bound": gate.epsilon_harm_bound,
            "harm_price": gate.harm_price,
            "max_verifications": gate.max_verifications,
            "artifact": None if gate.artifact_name is None
            else {"name": gate.artifact_name, "version": gate.artifact_version},
            "refusal": gate.refusal,
        },
    }
    print(json.dumps(out, indent=2, allow_nan=False))
    return 0


# -- run ---------------------------------------------------------------------------------------

def _parsers_run(sub: Any) -> None:
    """Add the ``run`` sub-command."""
    p = _command(
        sub, "run", _run_run,
        help="run a pipeline file (pipelines/retrain.toml, tune.toml, evaluate.toml)",
        description="Run the steps of a pipeline file in order; unchanged steps are skipped.")
    p.add_argument("pipeline", help="the pipeline TOML file")
    p.add_argument("--set", dest="overrides", action="append", default=[],
                   metavar="STEP.KEY=VALUE",
                   help="override a parameter, e.g. --set tune.trials=20 (repeatable; default: "
                   "the file's values)")
    p.add_argument("--force", action="store_true", help="re-run steps even if unchanged")
    p.add_argument("--wait", nargs="?", const=True, default=False, type=float,
                   metavar="SECONDS",
                   help="when another run of this pipeline holds its work folder, wait for "
                   "it (at most SECONDS if given) instead of failing at once (default: fail "
                   "at once)")
    p.add_argument("--no-tracking", action="store_true", help="run without MLflow")
    _tracking_uri_option(p, "MLflow tracking URI (default: the file's [pipeline] "
                         "tracking_uri, else $MLFLOW_TRACKING_URI, else sqlite:///mlflow.db)")
    _json_option(p, "print a JSON summary on stdout")
    p.add_argument("-q", "--quiet", action="store_true", default=argparse.SUPPRESS,
                   help="no progress on stderr, no report on stdout")


def _run_run(args: argparse.Namespace) -> int:
    """Run the pipeline and print its summary."""
    from amv_calib.pipeline import load_pipeline, pipeline_report, run_pipeline

    spec = load_pipeline(args.pipeline, args.overrides)
    if any(s.kind == "tune" for s in spec.steps):
        _quiet_optuna(args)
    result = run_pipeline(spec, force=args.force, wait=args.wait,
                          tracking=False if args.no_tracking else None,
                          tracking_uri=args.tracking_uri)
    if args.json:
        json.dump(result.to_json(), sys.stdout, sort_keys=True)
        sys.stdout.write("\n")
    elif not getattr(args, "quiet", False):
        sys.stdout.write(pipeline_report(result))
    return 0


# -- monitor ---------------------------------------------------------------------------------

#: Exit code of ``monitor`` when the latest window is ALERT (1 and 2 are errors).
MONITOR_ALERT_EXIT = 3


def _parsers_monitor(sub: Any) -> None:
    """Add the ``monitor`` sub-command."""
    p = _command(
        sub, "monitor", _run_monitor,
        help="track harm and calibration of production anytime-validly; de-risk on ALERT",
        description="Track the production version since it went live: its harm rate (Gate "
        "Harmful of the labelled actions) with a confidence sequence and an e-value "
        "against the certificate's alpha, and its calibration (in the large, and the log "
        "loss against what a calibrated p scores) with e-processes, all valid at every "
        "look however often it runs (false ALERT probability <= delta over unlimited "
        "monitoring). Per time window, drift (PSI, KS), ECE and the rest are descriptive "
        "context. With --out the run continues from the state it left there, reading only "
        "new decision lines. Prints one line: status, the harm confidence sequence against "
        "alpha, the labelled actions counted, what was done (docs/monitoring.md). "
        f"Exit {MONITOR_ALERT_EXIT} on ALERT, 0 otherwise.")
    p.add_argument("--artifact", default=None, metavar="REF",
                   help="the artifact the gate runs (default: models/amv-guard@production)")
    _log_options(p, "outcome records (.jsonl, .csv or .parquet); without them (the default) "
                 "only drift is monitored")
    add_options(p, MonitorOptions)
    p.add_argument("--config", default=None, metavar="TOML",
                   help="a TOML file whose [monitor] table sets the thresholds (default: the "
                   "built-in ones, docs/monitoring.md)")
    _json_option(p, "print the run as JSON instead of the line")
    p.add_argument("--out", default=None, metavar="DIR",
                   help="write monitor.json, monitor.txt, timeline.png (and claims.parquet "
                   "when everything was read) here, and keep the incremental state in "
                   "DIR/monitor.state) (default: print only, no state: every run reads all)")
    p.add_argument("--on-alert", action="append", default=[], metavar="derisk|PIPELINE",
                   help="on ALERT: 'derisk' moves production to a safer certified "
                   "configuration (on a harm ALERT); a pipeline file runs with the monitored "
                   "logs as the decisions and outcomes of its monitor and label steps (e.g. "
                   "pipelines/retrain-from-logs.toml); repeatable, run in order (default: "
                   "report only)")
    p.add_argument("--signing-key", default=None, metavar="KEY",
                   help="sign the de-risked version with this private key (default: unsigned)")
    p.add_argument("--on-alert-set", dest="on_alert_overrides", action="append", default=[],
                   metavar="STEP.KEY=VALUE",
                   help="override a parameter of the --on-alert pipeline (repeatable; default: "
                   "the file's values)")
    _skip_corrupt_option(p)
    _trusted_key_option(p)
    p.add_argument("--no-tracking", action="store_true",
                   help="log nothing to MLflow (default: the windows as stepped metrics)")
    _tracking_uri_option(p)


def _log_overrides(pipeline: str, decisions: Sequence[str], outcomes: Sequence[str]
                   ) -> list[str]:
    """``--set`` overrides giving the logs to every monitor and label step of a pipeline."""
    from amv_calib.pipeline import load_pipeline

    out: list[str] = []
    for step in load_pipeline(pipeline).steps:
        if step.kind in ("monitor", "label"):
            for key, files in (("decisions", decisions), ("outcomes", outcomes)):
                out.append(f"{step.name}.{key}="
                           + json.dumps([str(Path(f).resolve()) for f in files]))
    return out


def _run_monitor(args: argparse.Namespace) -> int:
    """Monitor; on ALERT de-risk and/or run pipelines; write, log and print the run."""
    import tempfile

    from amv_calib.monitoring import (
        derisk,
        harm_alert_recomputed,
        load_monitor_config,
        monitor,
        write_monitor_outputs,
    )

    require_inputs(p for p in (*args.decisions, *args.outcomes) if "://" not in p)
    for action in args.on_alert:
        if action != "derisk" and not Path(action).is_file():
            raise ConfigError(f"--on-alert {action!r}: neither 'derisk' nor a pipeline file")
    config = load_monitor_config(args.config)
    artifact = args.artifact or _default_artifact()
    state = Path(args.out) / "monitor.state" if args.out else None
    opts = _options_from(args, MonitorOptions)
    report, claims = monitor(artifact, args.decisions, args.outcomes or None,
                             window=opts.window, since=opts.since, config=config,
                             on_corrupt="skip" if args.skip_corrupt else "raise",
                             trusted_keys=args.trusted_keys or None, state=state,
                             rebuild=opts.rebuild, other_artifacts=opts.other_artifacts)
    on_alert: dict[str, Any] = {}
    results: list[Any] = []
    if report.alert:
        for action in args.on_alert:
            if action == "derisk":
                if not report.harm_alert:
                    report.actions.append("not de-risked (the ALERT is not on harm)")
                    continue
                # only evidence read from the logs in this run moves production
                acting = harm_alert_recomputed(
                    report, artifact, args.decisions, args.outcomes or None,
                    window=opts.window, since=opts.since, config=config,
                    on_corrupt="skip" if args.skip_corrupt else "raise",
                    trusted_keys=args.trusted_keys or None,
                    other_artifacts=opts.other_artifacts)
                if acting is None:
                    report.actions.append("not de-risked (the harm ALERT did not hold when "
                                          "recomputed from the logs)")
                    continue
                try:
                    done = derisk(artifact, evidence=acting.line().split("; ")[0] + "; "
                                  + acting.reasons[0], steps=opts.derisk_steps,
                                  signing_key=args.signing_key,
                                  trusted_keys=args.trusted_keys or None)
                except ArtifactError as exc:  # the ALERT is still reported, exit 3
                    logging.getLogger(__name__).error("de-risk refused: %s", exc)
                    report.actions.append(f"de-risk refused: {exc}")
                    continue
                on_alert["derisk"] = done.to_dict()
                report.actions.append(f"de-risked to {done.version}" if done.version
                                      else "already at the safest certified configuration")
                continue
            from amv_calib.pipeline import load_pipeline, run_pipeline

            logging.getLogger(__name__).info("ALERT: running %s", action)
            spec = load_pipeline(action, [
                *_log_overrides(action, args.decisions, args.outcomes),
                *args.on_alert_overrides])
            report.actions.append(f"retrain started ({Path(action).name})")
            result = run_pipeline(spec, tracking=False if args.no_tracking else None,
                                  tracking_uri=args.tracking_uri)
            results.append(result)
            on_alert.setdefault("pipelines", []).append(result.to_json())
    with tempfile.TemporaryDirectory(prefix="amv-monitor-") as tmp:
        out = Path(args.out) if args.out else Path(tmp)
        written = write_monitor_outputs(report, claims, out)
        if not args.no_tracking:
            from amv_calib.tracking import PipelineTracker

            with PipelineTracker(run_name="monitor", tracking_uri=args.tracking_uri,
                                 tags={"amv_calib.stage": "monitor"}) as tracker:
                tracker.log_monitoring(report, files=written)
    if args.json:
        json.dump({**report.to_dict(), "on_alert": on_alert or None}, sys.stdout,
                  sort_keys=True)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(report.line() + "\n")
        sys.stdout.write("".join(f"  {r}\n" for r in report.reasons))
        if results:
            from amv_calib.pipeline import pipeline_report

            for result in results:
                sys.stdout.write("\n" + pipeline_report(result))
    return MONITOR_ALERT_EXIT if report.alert else 0


# -- the entry point ------------------------------------------------------------------------

_PARSERS = (
    _parsers_synth,
    _parsers_artifacts,
    _parsers_mlflow,
    _parsers_gate,
    _parsers_replay,
    _parsers_run,
    _parsers_monitor,
)


#: Commands whose output is already what a script reads and a person can read.
_NO_SUMMARY: Final = ("gate", "ui-command")


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with every sub-command."""
    parser = argparse.ArgumentParser(
        prog="amv-calib",
        description="Calibrate memory-staleness probabilities and gate irreversible actions.",
    )
    parser.add_argument("--version", action="version", version=f"amv-calib {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging on stderr")
    parser.add_argument("-q", "--quiet", action="store_true", help="only errors on stderr")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for stage in STAGES.values():
        add_command(sub, stage)
    for add in _PARSERS:
        add(sub)
    # Every command prints a summary for a person, or with --json the full object; the
    # gate's product is its decision, JSON already, and ui-command's a shell command.
    for name, command in sub.choices.items():
        if name not in _NO_SUMMARY and not any("--json" in a.option_strings
                                               for a in command._actions):
            _json_option(command)
    return parser


#: Libraries whose INFO lines would interleave with the commands' own progress.
_QUIET_LIBRARIES: Final = ("optuna", "mlflow", "alembic", "py4j", "numba", "matplotlib",
                           "urllib3", "httpx")


def _quiet_libraries() -> None:
    """Keep the libraries' logging at WARNING and up (``-v`` shows it all)."""
    for name in _QUIET_LIBRARIES:
        logging.getLogger(name).setLevel(logging.WARNING)


def _quiet_optuna(args: argparse.Namespace) -> None:
    """Optuna sets its own logger to INFO when first imported (its trial lines would
    interleave with ours): the commands that tune set it back, unless ``-v``."""
    if not args.verbose:
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the process exit code."""
    set_process_env()
    parser = build_parser()
    args = parser.parse_args(argv)
    level = logging.DEBUG if args.verbose else logging.ERROR if args.quiet else logging.INFO
    logging.basicConfig(level=level, stream=sys.stderr, format="%(message)s")
    if not args.verbose:  # one progress display: the libraries' INFO lines only with -v
        _quiet_libraries()
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help(sys.stderr)
        return 2
    try:
        code = func(args)
    except AmvCalibError as exc:
        if args.verbose:  # the original traceback, through a wrapped step's cause
            import traceback

            traceback.print_exception(exc, file=sys.stderr)
        print(f"amv-calib {args.command}: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print(f"amv-calib {args.command}: interrupted", file=sys.stderr)
        return 130
    return int(code or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
