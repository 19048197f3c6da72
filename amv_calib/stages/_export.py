"""``export``: a fitted calibrator and gate thresholds as a new version ``models/NAME/vN``.

Production is never given by an export alone: an alias ``production`` goes to the new
version only when it earns it as ``promote`` with its defaults would let it (exit 2 naming
why otherwise). A certificate's ``frontier.png`` beside it goes into the version.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from amv_calib.exceptions import ConfigError
from amv_calib.settings import DEFAULT_ALIAS, DEFAULT_MODEL_NAME, PromoteOptions
from amv_calib.stages._promote import check_promotion
from amv_calib.stages._stage import Call, Input, Stage
from amv_calib.stages._text import where

__all__ = ["EXPORT", "Exported"]


@dataclass
class Exported:
    """What ``export`` wrote: the version, and the alias it now carries (or None)."""

    result: Any
    alias: str | None


def _run(call: Call) -> Exported:
    from amv_calib.artifacts import export_artifact, promote
    from amv_calib.contract import read_aliases, read_json_object

    p = call.inputs
    metrics = None
    if p["metrics"]:
        metrics = read_json_object(p["metrics"], what=f"{call.key('metrics')} file")
        if not isinstance(metrics, dict):
            raise ConfigError(f"{p['metrics']}: metrics must be a JSON object")
    certificate = p["certificate"]
    frontier = Path(certificate).parent / "frontier.png" if certificate else None
    figures = [*(p["figure"] or []), *([frontier] if frontier and frontier.is_file() else [])]
    res = export_artifact(
        calibrator=p["calibrator"], thresholds=p["thresholds"], name=p["model"],
        models_dir=call.models_dir, claims=p["claims"], metrics=metrics, figures=figures,
        include_joblib=not p["no_joblib"], signing_key=p["signing_key"],
        certificate=certificate, tuning=p["tuning"],
        # a pipeline re-run (after an interruption, or `make demo` reproducing the shipped
        # champion) reuses the version that holds the same content; a person's export mints one
        reuse_identical=call.step is not None)
    alias = p["alias"] or p["promote"]
    if alias == DEFAULT_ALIAS:  # production only as `promote` would let it
        decision = check_promotion(Path(res.path).parent, res.version, holdout=None,
                                   options=PromoteOptions(), seed=call.seed)
        if not decision.promote:
            raise ConfigError(f"{call.where()}" + "; ".join(decision.reasons)
                              + "; export as challenger and promote it with --force to "
                              "promote it anyway")
    if alias:
        current = read_aliases(Path(res.path).parent)["aliases"].get(alias, {}).get("version")
        if current != res.version:
            promote(res.name, res.version, alias=alias, models_dir=Path(res.path).parent.parent)
    call.tracker.log_artifact_export(res)
    return Exported(res, alias)


def _summary(e: Exported) -> list[str]:
    res = e.result
    lines = [f"exported {res.name} {res.version}: {where(res.path)}"]
    if e.alias:
        lines.append(f"  {res.name}@{e.alias} is {res.version} now")
    else:
        lines.append(f"next: amv-calib promote {res.name} {res.version} --alias {DEFAULT_ALIAS}")
    return lines


def _json(e: Exported) -> dict[str, Any]:
    res = e.result
    out: dict[str, Any] = {"path": str(res.path), "name": res.name, "version": res.version}
    if e.alias:
        out["alias"] = e.alias
    return out


_ALIAS = ("a new version from a pipeline is the challenger and the promote step decides "
          "about production; a person's export may point any alias at it")
EXPORT = Stage(
    name="export",
    help="write a new artifact version models/NAME/vN",
    description="Export a fitted calibrator and gate thresholds as models/NAME/vN "
                "(manifest.json, calibrator.json, calibrator.joblib, report files).",
    inputs={
        "calibrator": Input(help="a compare DIR, a portable champion.json, or a fitted "
                            ".joblib", required=True, path=True, metavar="FITTED"),
        "thresholds": Input(help="thresholds.json from tuning (default: the seed's gate "
                            "settings)", path=True, metavar="TUNED"),
        "model": Input(help="model name (folder under the models dir) (default: "
                       f"{DEFAULT_MODEL_NAME})", flags=("--name",), default=DEFAULT_MODEL_NAME,
                       metavar="NAME"),
        "claims": Input(help="training claims (.parquet/.csv/.jsonl) for the data "
                        "fingerprint (default: none recorded)", path=True, metavar="CLAIMS"),
        "metrics": Input(help="a JSON object of extra metrics for the manifest (default: "
                         "none)", path=True, metavar="JSON"),
        "figure": Input(help="copy FILE into the artifact (repeatable; default: none)",
                        type=list, default=[], path=True, metavar="FILE"),
        "no_joblib": Input(help="leave calibrator.joblib out", type=bool, default=False),
        "promote": Input(help="also point ALIAS at the new version (production only when it "
                         "earns it as `amv-calib promote` with its defaults; else `promote "
                         "--force`)", metavar="ALIAS", step=False, why=_ALIAS),
        "alias": Input(help="the alias the new version gets", default="challenger",
                       cli=False, why=_ALIAS),
        "signing_key": Input(help="sign the new version with this private key (from "
                             "`amv-calib keygen`; default: unsigned)", path=True,
                             metavar="PRIVATE"),
        "certificate": Input(
            help="certificate.json of `amv-calib certify`, recorded in the manifest; refused "
            "unless it certified this calibrator and --thresholds (its thresholds.json) "
            "(default: none: the version is not certified)", path=True, metavar="JSON"),
        "tuning": Input(
            help="tuning.json of `amv-calib tune` or `certify` (tuning-episodes.u64 beside "
            "it): the episodes that shaped the thresholds, which a later certify excludes "
            "(default: the tuning.json beside --certificate)", path=True, metavar="JSON"),
    },
    shared={"models_dir": None},
    run=_run,
    summary=_summary,
    to_json=_json,
    outputs=lambda e: {"artifact": str(e.result.path), "name": e.result.name,
                       "version": e.result.version, "alias": e.alias,
                       "reused": e.result.reused},
)
