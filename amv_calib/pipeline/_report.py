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
    for s in result.steps:
        if s.kind == "ingest":
            lines += [f"## ingest: {s.outputs.get('read')} rows read, "
                      f"{s.outputs.get('accepted')} accepted, "
                      f"{s.outputs.get('rejected')} rejected", ""]
        elif s.kind == "compare":
            lines += [f"## calibrator comparison (champion: {s.outputs.get('champion_name')})",
                      "", _read(s.outputs.get("table")) or "(no table)", ""]
        elif s.kind == "tune":
            th = _read(s.outputs.get("thresholds"))
            if th:
                lines += ["## tuned gate thresholds", "",
                          json.dumps(json.loads(th), indent=2, sort_keys=True), ""]
            lines += ["## replay on held-out episodes", "",
                      _read(s.outputs.get("replay_table")) or "(no replay table)", ""]
            storage = s.outputs.get("storage")
            if isinstance(storage, str) and "://" not in storage:
                lines += [f"Optuna study {s.outputs.get('study')!r} in the journal file "
                          f"{storage}; browse it with", "",
                          f"    optuna-dashboard {storage}   # pip install optuna-dashboard",
                          ""]
        elif s.kind == "certify":
            lines += _certificate_lines(s.outputs.get("certificate"))
            lines += ["## replay of the certified gate on held-out episodes", "",
                      _read(s.outputs.get("replay_table"))
                      or "(none: every unseen episode calibrated; set the certify step's "
                         "test_fraction to keep a share for this table)", ""]
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
                      *_aliases_now(s.outputs.get("artifact"))]
        elif s.kind == "register" and s.outputs.get("registered"):
            held = [f"@{a}" for a, v in (s.outputs.get("registry_aliases") or {}).items()
                    if v == s.outputs.get("model_version")]
            lines += [f"## MLflow model{_cached(s)}: {s.outputs.get('registered_name')} version "
                      f"{s.outputs.get('model_version')} {' '.join(held)}".rstrip(), ""]
    if result.tracking:
        uri = result.tracking_uri or tracking_uri()
        lines += ["## inspect in MLflow", "", f"    {ui_command(uri)}",
                  "then open http://127.0.0.1:5000 (experiment "
                  f"{result.spec.experiment!r}"
                  + (f", run {result.run_id})" if result.run_id else ")"), ""]
    return "\n".join(lines)


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
