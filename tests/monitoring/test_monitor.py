"""Monitoring end to end: the real gate logs 60 simulated days, the world drifts (or not),
``amv-calib monitor`` windows them, alerts, and its --on-alert pipeline retrains."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from sim_world import DAY_S, START, Pool, make_pool, simulate

from amv_calib import ConfigError
from amv_calib.cli import MONITOR_ALERT_EXIT, main
from amv_calib.exceptions import ArtifactError
from amv_calib.monitoring import (
    MonitorConfig,
    load_monitor_config,
    monitor,
    parse_since,
    parse_window,
)

REPO = Path(__file__).resolve().parents[2]
SINCE = str(START)  # the worlds start on this Monday, 00:00 UTC


def _day(iso: str) -> float:
    """Days since the world's start of an ISO time of the report."""
    t = np.datetime64(iso.rstrip("Z"), "s") - START
    return float(t.astype(np.int64)) / DAY_S


@pytest.fixture(scope="module")
def pool() -> Pool:
    """One world generator for every simulation of this module."""
    return make_pool()


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the shipped champion's folder: --on-alert exports into it, not the repo."""
    root = tmp_path_factory.mktemp("models")
    shutil.copytree(REPO / "models" / "amv-guard", root / "amv-guard")
    return root


@pytest.fixture(scope="module")
def drift_world(pool: Pool, models: Path, tmp_path_factory: pytest.TempPathFactory
                ) -> tuple[Path, Path]:
    """60 days of decisions and outcomes; the staleness law changes on day 30."""
    return simulate(pool, f"{models}/amv-guard@production",
                    tmp_path_factory.mktemp("drift"), days=60, per_day=300, seed=1,
                    drift_day=30)


def _monitor_job_head(name: str, folder: Path, models: Path) -> str:
    """A pipeline file's head and its first step, ``monitor``, up to the step's keys."""
    return f"""
[pipeline]
name = "{name}"
workdir = "{folder / 'work'}"
models_dir = "{models}"
tracking = false

[[steps]]
name = "monitor"
kind = "monitor"
"""


def _retrain_on_alert_toml(folder: Path, models: Path) -> Path:
    """The scheduled job: monitor, and only on ALERT retrain on the labelled claims and
    export a challenger (the decisions and outcomes are set by --on-alert)."""
    thresholds = folder / "thresholds.json"
    manifest = json.loads((models / "amv-guard" / "v1" / "manifest.json").read_text())
    thresholds.write_text(json.dumps(manifest["gate"]), encoding="utf-8")
    toml = folder / "retrain-on-alert.toml"
    toml.write_text(_monitor_job_head("retrain-on-alert", folder, models) + f"""decisions = []
window = "7d"
since = "{SINCE}"

[[steps]]
name = "ingest"
kind = "ingest"
input = "@monitor.claims"

[[steps]]
name = "compare"
kind = "compare"
claims = "@ingest.claims"
folds = 3
n_boot = 20

[[steps]]
name = "export"
kind = "export"
calibrator = "@compare.dir"
thresholds = "{thresholds}"
claims = "@compare.training"
alias = "challenger"
""", encoding="utf-8")
    return toml


@pytest.fixture(scope="module")
def drift_run(drift_world: tuple[Path, Path], models: Path,
              tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """``amv-calib monitor ... --json --out --on-alert`` on the drifting world."""
    decisions, outcomes = drift_world
    work = tmp_path_factory.mktemp("monitor-run")
    toml = _retrain_on_alert_toml(work, models)
    out = work / "out"
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        code = main(["monitor", "--artifact", f"{models}/amv-guard@production",
                     "--decisions", str(decisions), "--outcomes", str(outcomes),
                     "--window", "7d", "--since", SINCE, "--json", "--out", str(out),
                     "--on-alert", str(toml), "--no-tracking"])
    return {"code": code, "report": json.loads(buf.getvalue()), "out": out}


def test_drift_world_alerts_after_day_30_and_not_before(drift_run: dict[str, Any]) -> None:
    windows = drift_run["report"]["windows"]
    assert len(windows) == 9  # 60 days in 7-day windows from the first Monday
    before = [w for w in windows if _day(w["end"]) <= 30]
    assert before and all(w["status"] != "ALERT" for w in before), \
        [(w["end"], w["status"], w["reasons"]) for w in before]
    early = [w for w in windows if 30 < _day(w["end"]) <= 44 and w["status"] == "ALERT"]
    assert early, [(w["end"], w["status"]) for w in windows]
    for w in early:
        assert any(r.startswith("calibration:") for r in w["reasons"]), w["reasons"]
        assert any(r.startswith("harm:") and "alpha" in r for r in w["reasons"]), w["reasons"]
    assert drift_run["report"]["latest_status"] == "ALERT"
    assert drift_run["code"] == MONITOR_ALERT_EXIT


def test_on_alert_produced_a_new_challenger(drift_run: dict[str, Any], models: Path) -> None:
    on_alert = drift_run["report"]["on_alert"]
    steps = {s["name"]: s for s in on_alert["steps"]}
    assert list(steps) == ["monitor", "ingest", "compare", "export"]
    assert steps["monitor"]["outputs"]["alert"] is True
    aliases = json.loads((models / "amv-guard" / "aliases.json").read_text())["aliases"]
    assert aliases["challenger"]["version"] == steps["export"]["outputs"]["version"] == "v2"
    assert aliases["production"]["version"] == "v1"  # production must be earned
    # the challenger learnt the new law: its profile's violation rate is the logs'
    profile = json.loads((models / "amv-guard" / "v2" / "profile.json").read_text())
    assert profile["violation_rate"] > 0.15


def test_outputs_written(drift_run: dict[str, Any]) -> None:
    out: Path = drift_run["out"]
    assert {p.name for p in out.iterdir()} >= {"monitor.json", "monitor.txt", "timeline.png",
                                               "claims.parquet"}
    assert (out / "timeline.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    claims = pd.read_parquet(out / "claims.parquet")
    assert len(claims) == drift_run["report"]["labelled_uses"]
    assert set(claims["label_source"].astype(str)) == {"outcome"}  # no soft labels
    table = (out / "monitor.txt").read_text()
    assert table.count("ALERT") >= 4 and "calibration:" in table


@pytest.mark.slow
def test_no_drift_world_raises_no_alert_in_20_repetitions(pool: Pool, models: Path,
                                                          tmp_path: Path) -> None:
    statuses: list[str] = []
    for rep in range(20):
        decisions, outcomes = simulate(pool, f"{models}/amv-guard@production",
                                       tmp_path / f"rep{rep}", days=60, per_day=150,
                                       seed=100 + rep, drift_day=None)
        report, _ = monitor(f"{models}/amv-guard@production", decisions, outcomes,
                            window="7d", since=SINCE)
        assert len(report.windows) == 9
        alerts = [(w.end, w.reasons) for w in report.windows if w.status == "ALERT"]
        assert not alerts, (rep, alerts)
        statuses += [w.status for w in report.windows]
    # the labels were enough to judge: calibration and harm were evaluated
    assert statuses.count("INSUFFICIENT DATA") == 0


# -- smaller pieces --------------------------------------------------------------------------
@pytest.mark.parametrize(("text", "seconds"), [("7d", 7 * 86400), ("12h", 43200),
                                               ("30m", 1800), ("2w", 14 * 86400),
                                               ("1.5d", 129600)],
                         ids=["days", "hours", "minutes", "weeks", "fraction"])
def test_parse_window(text: str, seconds: int) -> None:
    assert parse_window(text) == seconds * 1_000_000


@pytest.mark.parametrize("text", ["7", "d", "-1d", "0d", "7y"],
                         ids=["no-unit", "no-number", "negative", "zero", "unknown-unit"])
def test_parse_window_refuses(text: str) -> None:
    with pytest.raises(ConfigError, match="window="):
        parse_window(text)


def test_parse_since() -> None:
    assert parse_since("2027-01-04") == parse_since("2027-01-04T01:00:00+01:00")
    with pytest.raises(ConfigError, match="since='yesterday'"):
        parse_since("yesterday")


@pytest.fixture(scope="module")
def small_world(pool: Pool, models: Path, tmp_path_factory: pytest.TempPathFactory
                ) -> tuple[Path, Path]:
    """10 days, 40 actions a day, no drift."""
    return simulate(pool, f"{models}/amv-guard@production",
                    tmp_path_factory.mktemp("small"), days=10, per_day=40, seed=3,
                    drift_day=None)


def test_windows_end_at_the_newest_use_without_since(small_world: tuple[Path, Path],
                                                     models: Path) -> None:
    decisions, outcomes = small_world
    report, claims = monitor(f"{models}/amv-guard@production", decisions, outcomes,
                             window="3d")
    times = pd.to_datetime([json.loads(line)["time"] for line in
                            decisions.read_text().splitlines()], utc=True)
    assert len(report.windows) == 4  # 10 days need four 3-day windows
    last_end = pd.Timestamp(report.windows[-1].end)
    assert times.max() < last_end <= times.max() + pd.Timedelta(seconds=1)
    assert sum(w.uses for w in report.windows) == report.uses_read
    assert report.uses_outside == 0
    assert sum(w.labelled for w in report.windows) == len(claims)


def test_since_leaves_earlier_uses_out(small_world: tuple[Path, Path], models: Path) -> None:
    decisions, outcomes = small_world
    since = str(START + np.timedelta64(4, "D"))
    report, _ = monitor(f"{models}/amv-guard@production", decisions, outcomes,
                        window="3d", since=since)
    assert report.windows[0].start.startswith(since[:10])
    assert len(report.windows) == 2
    assert report.uses_outside == report.uses_read - sum(w.uses for w in report.windows) > 0


def test_small_windows_are_insufficient_data(small_world: tuple[Path, Path],
                                             models: Path) -> None:
    decisions, outcomes = small_world
    report, _ = monitor(f"{models}/amv-guard@production", decisions, outcomes, window="1d")
    assert {w.status for w in report.windows} == {"INSUFFICIENT DATA"}
    assert "too few to decide" in report.windows[0].reasons[0]


def test_harm_counts_only_fully_labelled_actions(small_world: tuple[Path, Path],
                                                 models: Path, tmp_path: Path) -> None:
    decisions, outcomes = small_world
    rows = [json.loads(line) for line in outcomes.read_text().splitlines()]
    # drop the outcome of one premise of every multi-premise action
    seen: set[str] = set()
    kept = []
    for r in rows:
        if r["action_id"] in seen:
            continue
        kept.append(r)
        seen.add(r["action_id"])
    partial = tmp_path / "partial.jsonl"
    partial.write_text("\n".join(json.dumps(r) for r in kept) + "\n", encoding="utf-8")
    cfg = MonitorConfig(min_uses=1, min_labels=1, min_actions=1)
    full, _ = monitor(f"{models}/amv-guard@production", decisions, outcomes, window="30d",
                      config=cfg)
    half, _ = monitor(f"{models}/amv-guard@production", decisions, partial, window="30d",
                      config=cfg)
    n_premises = {}
    for line in decisions.read_text().splitlines():
        rec = json.loads(line)
        n_premises[rec["action_id"]] = len(rec["premises"])
    single = sum(1 for r in kept if n_premises[r["action_id"]] == 1)
    assert half.windows[0].actions_labelled == single
    assert full.windows[0].actions_labelled == len(kept)


def test_artifact_without_profile_is_refused(small_world: tuple[Path, Path],
                                             tmp_path: Path) -> None:
    from amv_calib.artifacts import export_artifact

    v1 = REPO / "models" / "amv-guard" / "v1"
    res = export_artifact(calibrator=v1 / "calibrator.json", name="bare",
                          models_dir=tmp_path)  # no claims: no profile
    with pytest.raises(ArtifactError, match="no profile.json"):
        monitor(str(res.path), small_world[0])


def test_config_from_toml(tmp_path: Path) -> None:
    path = tmp_path / "monitor.toml"
    path.write_text("[monitor]\npsi_alert = 0.3\nmin_labels = 500\n[other]\nx = 1\n")
    cfg = load_monitor_config(path)
    assert (cfg.psi_alert, cfg.min_labels, cfg.psi_warn) == (0.3, 500, 0.1)
    path.write_text("[monitor]\npsi_alrt = 0.3\n")
    with pytest.raises(ConfigError, match=r"unknown keys \['psi_alrt'\]"):
        load_monitor_config(path)


def test_mlflow_gets_every_window_as_a_step(small_world: tuple[Path, Path], models: Path,
                                            tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    from mlflow import MlflowClient

    decisions, outcomes = small_world
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    code = main(["monitor", "--artifact", f"{models}/amv-guard@production", "--decisions",
                 str(decisions), "--outcomes", str(outcomes), "--window", "3d",
                 "--tracking-uri", uri])
    assert code == 0
    table = capsys.readouterr().out
    # about 300 uses a window: a status, but too few labelled actions to judge harm
    assert table.startswith("monitor ") and "harm: " in table
    assert "insufficient data" in table
    client = MlflowClient(tracking_uri=uri)
    (run,) = client.search_runs(client.search_experiments()[0].experiment_id,
                                filter_string="tags.`monitor.latest_status` != ''")
    history = client.get_metric_history(run.info.run_id, "monitor.uses")
    assert [m.step for m in sorted(history, key=lambda m: m.step)] == [0, 1, 2, 3]
    assert run.data.tags["monitor.latest_status"] == "OK"


def _scheduled_toml(folder: Path, models: Path, decisions: Path, outcomes: Path) -> Path:
    toml = folder / "scheduled.toml"
    toml.write_text(_monitor_job_head("scheduled", folder, models) + f"""decisions = ["{decisions}"]
outcomes = ["{outcomes}"]
window = "3d"

[steps.config]
min_uses = 100

[[steps]]
name = "ingest"
kind = "ingest"
input = "@monitor.claims"
""", encoding="utf-8")
    return toml


def test_scheduled_pipeline_stops_after_monitor_unless_alert(
        small_world: tuple[Path, Path], models: Path, tmp_path: Path) -> None:
    from amv_calib.pipeline import load_pipeline, pipeline_report, run_pipeline

    decisions, outcomes = (Path(shutil.copy(f, tmp_path)) for f in small_world)
    toml = _scheduled_toml(tmp_path, models, decisions, outcomes)
    result = run_pipeline(load_pipeline(toml))
    assert [s.name for s in result.steps] == ["monitor"]
    out = result.steps[0].outputs
    assert out["stop_pipeline"] is True and out["alert"] is False
    assert out["status"] in ("OK", "WARN", "INSUFFICIENT DATA")
    assert "## monitor: latest window" in pipeline_report(result)
    # the same logs again: skipped; a grown log: monitored again
    again = run_pipeline(load_pipeline(toml))
    assert again.steps[0].status == "skipped" and len(again.steps) == 1
    with decisions.open("ab") as fh:  # the action decided again: its last record counts
        fh.write(decisions.read_bytes().splitlines(keepends=True)[-1])
    grown = run_pipeline(load_pipeline(toml))
    assert grown.steps[0].status == "ran"
    # stop_unless_alert = false: the retrain runs whatever the status
    forced = run_pipeline(load_pipeline(toml, ["monitor.stop_unless_alert=false"]))
    assert [s.name for s in forced.steps] == ["monitor", "ingest"]


def test_monitor_step_refuses_missing_logs(models: Path, tmp_path: Path) -> None:
    from amv_calib.pipeline import load_pipeline

    toml = _scheduled_toml(tmp_path, models, tmp_path / "none.jsonl", tmp_path / "o.jsonl")
    with pytest.raises(ConfigError, match=r"decisions entry '.*none.jsonl' not found"):
        load_pipeline(toml)


def test_bench_quick_runs(run_bench: Any) -> None:
    res = run_bench("bench_monitor", timeout=240)
    assert res["monitor"]["uses"] == res["label"]["uses"] > 0
    # monitoring labels from outcomes exactly the uses the label join does (the time ratio
    # means nothing at 10,000 lines, where fixed costs dominate: --check bounds it at 10 M)
    assert res["monitor"]["labelled"] == res["label"]["joined_by_outcome"] > 0


def test_without_outcomes_only_drift_is_judged(small_world: tuple[Path, Path], models: Path
                                               ) -> None:
    report, claims = monitor(f"{models}/amv-guard@production", small_world[0], window="30d")
    (w,) = report.windows
    assert len(claims) == 0 and w.labelled == 0 and not w.calibration
    assert w.status == "OK" and set(w.drift) == {"recency_hours", "source_trust_score",
                                                 "model_confidence", "contradiction_flag"}
    assert any("calibration: 0 labelled uses" in r for r in w.reasons)


def test_older_claims_alert_as_feature_drift(small_world: tuple[Path, Path], models: Path,
                                             tmp_path: Path) -> None:
    lines = []
    for line in small_world[0].read_text().splitlines():
        rec = json.loads(line)
        for p in rec["premises"]:
            p["recency_hours"] *= 5.0  # the agent now acts on much older memories
        lines.append(json.dumps(rec))
    aged = tmp_path / "aged.jsonl"
    aged.write_text("\n".join(lines) + "\n", encoding="utf-8")
    report, _ = monitor(f"{models}/amv-guard@production", aged, window="30d")
    (w,) = report.windows
    assert w.status == "ALERT"
    assert w.reasons[0].startswith("drift: recency_hours PSI")
    assert w.drift["recency_hours"]["psi"] > 0.25
    assert w.drift["model_confidence"]["psi"] < 0.1
