"""Human-readable summary of a pipeline run (what ``make demo`` ends by printing)."""

from __future__ import annotations

import json
from pathlib import Path

from amv_calib.pipeline._spec import PipelineResult
from amv_calib.settings import tracking_uri, ui_command


def _read(path: object) -> str | None:
    if not isinstance(path, str):
        return None
    p = Path(path)
    return p.read_text(encoding="utf-8").rstrip() + "\n" if p.is_file() else None


def pipeline_report(result: PipelineResult) -> str:
    """The comparison table, tuned thresholds, replay table, artifact and MLflow UI command."""
    lines: list[str] = [f"# pipeline {result.spec.name} ({result.spec.path.name})", ""]
    for s in result.steps:
        lines.append(f"- {s.name:<10} {s.status:<8} {s.seconds:7.1f} s")
    lines.append("")
    kinds = [s.kind for s in result.steps]
    for i, s in enumerate(result.steps):
        if s.kind == "ingest":
            lines += [f"## ingest: {s.outputs.get('read')} rows read, "
                      f"{s.outputs.get('accepted')} accepted, "
                      f"{s.outputs.get('rejected')} rejected", ""]
        elif s.kind == "compare":
            lines += [f"## calibrator comparison (champion: {s.outputs.get('champion_name')})",
                      "", _read(s.outputs.get("table")) or "(no table)", ""]
        elif s.kind == "tune" and "certify" in kinds[i:]:
            # What ships is what certify chooses (its harm price), replayed on episodes
            # neither tune nor certify used; tune's own replay is of another configuration,
            # on the episodes that calibrate the certificate: not shown (it is in MLflow).
            lines += [f"## tuning: {s.outputs.get('trials')} trials", "",
                      "the certify step below chooses the harm price; the thresholds that ship "
                      "are printed with the artifact", ""]
            lines += _optuna_lines(s)
        elif s.kind == "tune":
            th = _read(s.outputs.get("thresholds"))
            if th:
                lines += ["## tuned gate thresholds", "",
                          json.dumps(json.loads(th), indent=2, sort_keys=True), ""]
            lines += ["## replay on held-out episodes", "",
                      _read(s.outputs.get("replay_table")) or "(no replay table)", ""]
            lines += _optuna_lines(s)
        elif s.kind == "certify":
            lines += _certificate_lines(s.outputs.get("certificate"))
            table = _read(s.outputs.get("replay_table"))
            lines += (["## replay of the certified gate on held-out episodes", "", table, ""]
                      if table else
                      ["no held-out table: no episode was set aside (every episode the "
                       "thresholds did not see calibrated the certificate; the certify "
                       "step's test_fraction sets a share aside when tune and certify share "
                       "their episodes)", ""])
        elif s.kind == "promote":
            reasons = s.outputs.get("reasons", [])
            if any(str(r).endswith("is production already") for r in reasons):
                verdict = "was production already: nothing changed"
            else:
                verdict = "promoted to production" if s.outputs.get("promoted") else \
                    "stays challenger"
            lines += [f"## promotion{_cached(s)}: {s.outputs.get('version')} {verdict}", "",
                      *[f"- {r}" for r in reasons], ""]
        elif s.kind == "monitor":
            lines += [f"## monitor: latest window {s.outputs.get('status')}", "",
                      _read(str(Path(str(s.outputs.get("report"))).with_name("monitor.txt")))
                      or "", ""]
        elif s.kind == "replay":
            lines += ["## replay", "", _read(s.outputs.get("replay_table")) or "", ""]
        elif s.kind == "export":
            lines += [f"## artifact{_cached(s)}: {s.outputs.get('name')} "
                      f"{s.outputs.get('version')}", f"{s.outputs.get('artifact')}", "",
                      *_gate_lines(s.outputs.get("artifact")),
                      *_aliases_now(s.outputs.get("artifact"))]
        elif s.kind == "register" and s.outputs.get("registered"):
            held = [f"@{a}" for a, v in (s.outputs.get("registry_aliases") or {}).items()
                    if v == s.outputs.get("model_version")]
            version = s.outputs.get("artifact_version")
            lines += [f"## MLflow model{_cached(s)}: "
                      + (f"{version} registered as " if version else "")
                      + f"{s.outputs.get('registered_name')} (MLflow version "
                      f"{s.outputs.get('model_version')}) {' '.join(held)}".rstrip(), ""]
            if s.outputs.get("registry_line"):
                lines += [str(s.outputs["registry_line"]), ""]
    if result.tracking:
        uri = result.tracking_uri or tracking_uri()
        lines += ["## inspect in MLflow", "", f"    {ui_command(uri)}",
                  "then open http://127.0.0.1:5000 (experiment "
                  f"{result.spec.experiment!r}"
                  + (f", run {result.run_id})" if result.run_id else ")"), ""]
    return "\n".join(lines)


def _optuna_lines(step: object) -> list[str]:
    """Where the tune step's Optuna study is, and the command that browses it."""
    outputs = getattr(step, "outputs", {})
    storage = outputs.get("storage")
    if not isinstance(storage, str) or "://" in storage:
        return []
    return [f"Optuna study {outputs.get('study')!r} in the journal file {storage}; browse "
            f"it with", "", f"    optuna-dashboard {storage}   # pip install optuna-dashboard",
            ""]


def _gate_lines(artifact: object) -> list[str]:
    """The gate thresholds as the exported manifest holds them (what ships, once)."""
    from amv_calib.contract import read_json_object
    from amv_calib.exceptions import AmvCalibError

    if not isinstance(artifact, str):
        return []
    try:
        gate = read_json_object(Path(artifact) / "manifest.json", what="manifest").get("gate")
    except AmvCalibError:
        return []
    if not isinstance(gate, dict):
        return []
    return ["gate thresholds (the manifest's):", "",
            json.dumps(gate, indent=2, sort_keys=True), ""]


def _certificate_lines(path: object) -> list[str]:
    from amv_calib.tuning import describe_certificate

    text = _read(path)
    if not text:
        return []
    c = json.loads(text)
    if c.get("chosen") is None:
        return ["## certificate: nothing certified", ""]
    return [f"## certificate (Learn-then-Test, {c['n']} calibration episodes)", "",
            *describe_certificate(c), ""]


def _cached(step: object) -> str:
    """`` (cached from an earlier run)`` for a skipped step, whose outputs are its past."""
    return " (cached from an earlier run)" if getattr(step, "status", "") == "skipped" else ""


def _aliases_now(artifact: object) -> list[str]:
    """What the model's file aliases name now, read when the report is written (a cached
    step's outputs describe the run that made them, not the aliases since)."""
    from amv_calib.contract import read_aliases
    from amv_calib.exceptions import ArtifactError

    if not isinstance(artifact, str):
        return []
    mdir = Path(artifact).parent
    try:
        aliases = read_aliases(mdir)["aliases"]
    except ArtifactError:
        return []
    now = ", ".join(f"{a} = {e['version']}" for a, e in sorted(aliases.items())) or "none"
    return [f"aliases of {mdir.name} now: {now}", ""]
