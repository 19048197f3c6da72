"""``promote``: point an alias at a verified version; production only when it earns it.

One rule from the command line and in a pipeline: a version goes to production only when
:func:`~amv_calib.artifacts.decide_promotion` says so on the holdout (validated by
:func:`~amv_calib.claims.load_claims`, rejects refused with their reasons) with the call's
seed, and only over a current production that still verifies: a production version that
cannot be verified (tampered, unsigned where keys are trusted) is refused naming it and why
(exit 2), since replacing it would hide what happened to it. ``force`` (a person's
decision) promotes anyway. A version that does not earn production is an error on the
command line (a person asked for it) and the step's outcome in a pipeline (the challenger
stays, the run says why).
"""

from __future__ import annotations

import json
import logging
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from amv_calib.exceptions import ArtifactError, ConfigError
from amv_calib.settings import DEFAULT_ALIAS, DEFAULT_REGISTERED_MODEL, PromoteOptions
from amv_calib.stages._stage import Call, Input, Stage

__all__ = ["PROMOTE", "Promotion", "alias_json", "alias_lines", "check_promotion",
           "resolve_version", "sync_registry"]

log = logging.getLogger(__name__)


def resolve_version(models_dir: Path | None, name: str, version: str) -> str:
    """``version`` as ``vN``: an alias of model ``name`` is turned into the version it names.

    Raises
    ------
    UnknownAliasError
        ``version`` is neither ``vN`` nor an alias the model has.
    """
    if re.fullmatch(r"v[1-9][0-9]*", version):
        return version
    from amv_calib.contract import read_aliases, unknown_alias_message
    from amv_calib.exceptions import UnknownAliasError
    from amv_calib.settings import models_dir as default_models_dir

    mdir = Path(models_dir or default_models_dir()) / name
    aliases = read_aliases(mdir)["aliases"]
    entry = aliases.get(version)
    if entry is None:
        raise UnknownAliasError(f"VERSION {version!r} is not vN; "
                                + unknown_alias_message(mdir, version, aliases))
    return str(entry["version"])


def check_promotion(mdir: Path, version: str, *, holdout: str | Path | None,
                    options: PromoteOptions, seed: int, force: bool = False,
                    how_to_force: str = "pass --force") -> Any:
    """The :class:`~amv_calib.artifacts.PromotionDecision` for ``mdir/version`` to production.

    Raises
    ------
    ConfigError
        The current production version cannot be verified (unless ``force``), naming it and
        why; the holdout holds rows that break the data contract.
    """
    import pandas as pd

    from amv_calib.artifacts import decide_promotion
    from amv_calib.claims import load_claims
    from amv_calib.contract import load_artifact, read_aliases

    challenger = load_artifact(mdir / version)
    production = None
    current = read_aliases(mdir)["aliases"].get(DEFAULT_ALIAS)
    if current is not None:
        try:
            production = load_artifact(f"{mdir}@{DEFAULT_ALIAS}")
        except ArtifactError as exc:
            if not force:
                raise ConfigError(
                    f"the current production {mdir.name} {current.get('version')} cannot be "
                    f"verified ({exc}); replacing it would hide what happened to it: "
                    f"{how_to_force} to promote {version} anyway") from exc
            log.warning("the current production %s %s cannot be verified (%s): promoted "
                        "over it, as forced", mdir.name, current.get("version"), exc)
    if not holdout:  # nothing to compare on: production is only verified, not compared
        return decide_promotion(challenger, None, pd.DataFrame(), alpha=options.alpha,
                                delta=options.delta, n_boot=options.n_boot, seed=seed)
    claims = load_claims(holdout, on_reject="raise")[0]
    return decide_promotion(challenger, production, claims, alpha=options.alpha,
                            delta=options.delta, n_boot=options.n_boot, seed=seed)


def sync_registry(mdir: Path, *, alias: str, registered_name: str,
                  tracking_uri: str | None) -> None:
    """Mirror the file aliases of ``mdir`` into the MLflow registry, where a tracking store
    holds the model; a failure is a warning (the file alias, the source of truth, moved)."""
    from amv_calib.settings import tracking_uri as default_tracking_uri

    uri = tracking_uri or default_tracking_uri()
    if uri.startswith("sqlite:///") and not Path(uri.removeprefix("sqlite:///")).exists():
        return  # no tracking store here: nothing to keep in sync
    from amv_calib.tracking import describe_registry_aliases, sync_registry_aliases

    try:
        # the warnings that concern the alias this command moved, not the others
        synced = sync_registry_aliases(mdir, registered_name=registered_name,
                                       tracking_uri=uri, warn_for={alias})
        line = describe_registry_aliases(synced, registered_name=registered_name,
                                         tracking_uri=uri)
    except Exception as exc:  # noqa: BLE001 - the file alias moved; say the mirror did not
        print(f"amv-calib: warning: MLflow registry not updated ({exc})", file=sys.stderr)
        return
    log.info("%s", line)


@dataclass
class Promotion:
    """What ``promote`` did: the alias entry (None when not promoted) and the decision."""

    name: str
    alias: str
    version: str
    entry: dict[str, Any] | None
    decision: Any = None
    file: Path | None = None
    reasons: list[str] = field(default_factory=list)


def _run(call: Call) -> Promotion:
    from amv_calib.artifacts import promote

    p, opts = call.inputs, call.options
    if p["artifact"] is not None:  # a step names the version by its folder
        from amv_calib.contract import load_artifact

        art = load_artifact(str(p["artifact"]))
        mdir, version = art.path.parent, art.version
    else:
        mdir = Path(call.models_dir or _default_models_dir()) / p["name"]
        version = resolve_version(call.models_dir, p["name"], p["version"])
    alias, decision = p["alias"], None
    if alias == DEFAULT_ALIAS:
        decision = check_promotion(
            mdir, version, holdout=p["holdout"], options=opts, seed=call.seed,
            force=p["force"], how_to_force="set force = true" if call.step else "pass --force")
        for reason in decision.reasons:
            log.info("%s%s", call.where(), reason)
        if not decision.promote and not p["force"] and call.step is None:
            raise ConfigError("; ".join(decision.reasons) + "; pass --force to promote it "
                              "anyway")
    promoted = decision is None or decision.promote or p["force"]
    entry = promote(mdir.name, version, alias=alias, models_dir=mdir.parent) if promoted \
        else None
    result = Promotion(name=mdir.name, alias=alias, version=version, entry=entry,
                       decision=decision, reasons=[] if decision is None else decision.reasons)
    if decision is not None and call.out is not None:
        result.file = call.out / "promotion.json"
        result.file.write_text(json.dumps(
            {"version": version, **decision.to_dict(), "forced": bool(p["force"]) and
             not decision.promote}, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        call.tracker.log_promotion(decision, file=result.file)
    if entry is not None and p["registered_name"]:
        sync_registry(mdir, alias=alias, registered_name=p["registered_name"],
                      tracking_uri=call.tracking_uri)
    return result


def _default_models_dir() -> Path:
    from amv_calib.settings import models_dir

    return models_dir()


def alias_lines(name: str, alias: str, entry: dict[str, Any], undo: str | None) -> list[str]:
    """Where ``promote`` or ``rollback`` left the alias, the versions it named before (the
    stack rollback pops) and the command that undoes this change (``undo``)."""
    earlier = [h["version"] for h in entry["history"]][:-1]  # the last is the current one
    return [f"{name}@{alias} is {entry['version']} now (earlier: {', '.join(earlier) or 'none'})",
            f"undo: {undo}" if undo else
            f"undo: none ({name}@{alias} is new: no earlier version to go back to)"]


def alias_json(name: str, alias: str, entry: dict[str, Any]) -> dict[str, Any]:
    """What ``promote --json`` and ``rollback --json`` print."""
    return {"name": name, "alias": alias, "version": entry["version"],
            "history": [h["version"] for h in entry["history"]]}


def _summary(r: Promotion) -> list[str]:
    assert r.entry is not None  # the command refuses what it does not promote
    # rollback pops the version just pushed; a re-promotion of the same version pushed nothing
    undo = (f"amv-calib rollback {r.name} --alias {r.alias}"
            if len(r.entry["history"]) > 1 else None)
    return alias_lines(r.name, r.alias, r.entry, undo)


def _outputs(r: Promotion) -> dict[str, Any]:
    return {"promoted": r.entry is not None and r.alias == DEFAULT_ALIAS, "version": r.version,
            "reasons": r.reasons, "decision": None if r.file is None else str(r.file)}


_NAME = "the command names the version as NAME VERSION; a step by its folder, artifact"
PROMOTE = Stage(
    name="promote",
    help="point an alias at a verified version",
    description="Verify models/NAME/VERSION and point ALIAS at it (atomic alias file), "
                "then mirror the aliases into the MLflow registry (production -> "
                "@champion, challenger -> @challenger) when it holds the model. To "
                "production only a version certified at --alpha/--delta (and, with "
                "--holdout, not worse than production on those claims) goes, and only over "
                "a production version that still verifies, unless --force.",
    inputs={
        "name": Input(help="artifact name (the folder under models/)", positional=True,
                      metavar="NAME", step=False, why=_NAME),
        "version": Input(help="vN, or an alias naming one (challenger, production)",
                         positional=True, metavar="VERSION", step=False, why=_NAME),
        "artifact": Input(help="the version folder (models/NAME/vN)", path=True, cli=False,
                          required=True, why=_NAME),
        "alias": Input(help=f"default: {DEFAULT_ALIAS}", default=DEFAULT_ALIAS),
        "force": Input(help="promote to production even without a certificate or a better "
                       "held-out log loss, or over a production version that cannot be "
                       "verified (a person's decision)", type=bool, default=False),
        "holdout": Input(help="newest held-out claims: refuse a version whose log loss on "
                         "them is worse than production's beyond the paired-bootstrap "
                         "interval (default: none, no comparison)", path=True,
                         metavar="CLAIMS"),
        "registered_name": Input(
            help=f"MLflow registered model to keep in sync (default: "
            f"{DEFAULT_REGISTERED_MODEL})", default=DEFAULT_REGISTERED_MODEL, step=False,
            why="a pipeline's register step keeps the registry in sync"),
    },
    options=PromoteOptions,
    shared={"models_dir": None, "tracking_uri": None,
            "seed": "seed of the paired bootstrap of the held-out comparison"},
    run=_run,
    summary=_summary,
    to_json=lambda r: alias_json(r.name, r.alias, r.entry or {"version": r.version,
                                                               "history": []}),
    outputs=_outputs,
)
