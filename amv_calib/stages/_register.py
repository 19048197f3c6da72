"""``register``: an exported artifact as the servable MLflow gate model.

The command registers in a run of its own and sets the registry alias it is given; a step
registers in the pipeline's run and mirrors the file aliases (production -> @champion,
challenger -> @challenger) that the promote step decided, the source of truth.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from amv_calib.settings import DEFAULT_REGISTERED_MODEL
from amv_calib.stages._stage import Call, Input, Stage

__all__ = ["REGISTER", "Registered", "registered_json", "registered_lines"]


@dataclass
class Registered:
    """What ``register`` did: the registry version (None: tracking off), the aliases
    mirrored (a step) and the line that says so."""

    version: Any
    registered_name: str
    artifact: Path
    synced: Any = None
    line: str | None = None


def _run(call: Call) -> Registered:
    p = call.inputs
    artifact, name = Path(p["artifact"]), p["registered_name"]
    if call.step is None:
        from amv_calib.tracking import register_champion

        return Registered(register_champion(
            artifact, registered_name=name, alias=p["alias"] or None,
            tracking_uri=call.tracking_uri, experiment=call.experiment), name, artifact)
    if not call.tracker.enabled:
        return Registered(None, name, artifact)
    from amv_calib.tracking import describe_registry_aliases, sync_registry_aliases

    version = call.tracker.register_champion(artifact, registered_name=name, alias=None)
    uri = call.tracker.get().tracking_uri
    synced = sync_registry_aliases(artifact.parent, registered_name=name, tracking_uri=uri)
    return Registered(version, name, artifact, synced, describe_registry_aliases(
        synced, registered_name=name, tracking_uri=uri))


def registered_json(result: Any) -> dict[str, Any]:
    """A registry version as ``register --json`` and ``registry-promote --json`` print it."""
    return {"name": result.name, "version": result.version, "alias": result.alias,
            "model_uri": result.model_uri, "run_id": result.run_id,
            "artifact_name": result.artifact_name, "artifact_version": result.artifact_version,
            "artifact_sha256": result.artifact_sha256}


def registered_lines(result: Any, verb: str) -> list[str]:
    """A registry version for a person: ``verb`` is what was done (registered, promoted)."""
    alias = f" @{result.alias}" if result.alias else ""
    return [f"{verb} {result.name} version {result.version}{alias} "
            f"(artifact {result.artifact_name} {result.artifact_version}, "
            f"manifest sha256 {result.artifact_sha256[:12]})",
            f"model URI: {result.model_uri}"]


def _outputs(r: Registered) -> dict[str, Any]:
    if r.version is None:
        return {"registered": False}
    return {"registered": True, "registered_name": r.registered_name,
            "model_version": r.version.version, "artifact_version": r.artifact.name,
            "registry_aliases": r.synced, "registry_line": r.line}


REGISTER = Stage(
    name="register",
    json_indent=None,
    help="register an exported artifact as the servable MLflow gate model",
    description="Log ARTIFACT (a version folder models/NAME/vN, or models/NAME@ALIAS) as "
                "an MLflow pyfunc model, register it and point an alias at it.",
    inputs={
        "artifact": Input(help="artifact version folder or reference", required=True,
                          path=True, positional=True, metavar="ARTIFACT"),
        "registered_name": Input(help=f"registered model name (default: "
                                 f"{DEFAULT_REGISTERED_MODEL})", flags=("--name",),
                                 default=DEFAULT_REGISTERED_MODEL),
        "alias": Input(help="alias to set (default: champion); '' sets none",
                       default="champion", step=False,
                       why="a step mirrors the file aliases the promote step decided"),
    },
    shared={"experiment": "MLflow experiment of the run (default: amv-calib)",
            "tracking_uri": None},
    run=_run,
    summary=lambda r: registered_lines(r.version, "registered"),
    to_json=lambda r: registered_json(r.version),
    outputs=_outputs,
    json_help="print the result as one JSON object",
)
