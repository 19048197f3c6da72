"""Monitoring end to end: the real gate logs 60 simulated days, the world drifts (or not),
``amv-calib monitor`` windows them, alerts, and its --on-alert pipeline retrains."""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from sim_world import DAY_S, START, Pool, make_pool, replay_daily, simulate

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
def models(tmp_path_factory: pytest.TempPathFactory,
           shipped_models: Callable[[Path], Path]) -> Path:
    """The shipped models folder, copied: --on-alert exports into it, not the repo."""
    return shipped_models(tmp_path_factory.mktemp("models"))


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


@pytest.mark.slow
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


@pytest.mark.slow
def test_on_alert_produced_a_new_challenger(drift_run: dict[str, Any], models: Path) -> None:
    (on_alert,) = drift_run["report"]["on_alert"]["pipelines"]
    assert drift_run["report"]["actions"] == ["retrain started (retrain-on-alert.toml)"]
    steps = {s["name"]: s for s in on_alert["steps"]}
    assert list(steps) == ["monitor", "ingest", "compare", "export"]
    assert steps["monitor"]["outputs"]["alert"] is True
    aliases = json.loads((models / "amv-guard" / "aliases.json").read_text())["aliases"]
    assert aliases["challenger"]["version"] == steps["export"]["outputs"]["version"] == "v2"
    assert aliases["production"]["version"] == "v1"  # production must be earned
    # the challenger learnt the new law: its profile's violation rate is the logs'
    profile = json.loads((models / "amv-guard" / "v2" / "profile.json").read_text())
    assert profile["violation_rate"] > 0.15


@pytest.mark.slow
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
    # two mean p's, each named: every use, and the labelled uses beside their rate
    head = next(line for line in table.splitlines() if line.startswith("window end"))
    assert head.split()[8:12] == ["p", "all", "p", "lab"]
    assert "p all: mean p over every use; p lab: mean p over the labelled uses" in table
    last = json.loads((out / "monitor.json").read_text())["windows"][-1]
    assert (f" {last['mean_p']:7.4f} {last['calibration']['mean_p']:7.4f} "
            f"{last['calibration']['observed_rate']:7.4f} ") in table.splitlines()[-1]


@pytest.mark.slow
def test_no_drift_world_raises_no_alert_in_20_repetitions(pool: Pool, models: Path,
                                                          tmp_path: Path) -> None:
    # harm ~alpha/2, 60 days: no ALERT at any window's end in 20 worlds, few WARNs
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
    assert statuses.count("WARN") <= 0.1 * len(statuses), statuses


@pytest.mark.slow
@pytest.mark.parametrize(("delta", "margin", "quiet"), [(0.05, 0.005, True), (0.9, 0.0, False)],
                         ids=["as-shipped", "wrong-delta-0.9-no-margin"])
def test_no_drift_world_false_alarm_companion(pool: Pool, models: Path, tmp_path: Path,
                                              delta: float, margin: float, quiet: bool
                                              ) -> None:
    # the same check with a deliberately wrong monitor must fail: the check can see false
    # alarms. A wrong budget alone is not enough here (ALERT at an e-value of 2.2 instead
    # of 40): the world's harm and p sit well inside their tolerances, so the detectors
    # that ALERT stay below 1; testing exact calibration (no margin) as well, p too low
    # by 0.2-0.4 point (three of the four worlds, inside the margin) is seen
    alerts = 0
    for rep in range(4):
        decisions, outcomes = simulate(pool, f"{models}/amv-guard@production",
                                       tmp_path / f"rep{rep}", days=40, per_day=150,
                                       seed=300 + rep, drift_day=None)
        report, _ = monitor(f"{models}/amv-guard@production", decisions, outcomes,
                            window="7d", since=SINCE,
                            config=MonitorConfig(delta=delta, calibration_margin=margin))
        alerts += any(w.status == "ALERT" for w in report.windows)
    assert (alerts == 0) is quiet, alerts


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


def test_windows_start_at_the_go_live_day_without_since(small_world: tuple[Path, Path],
                                                       models: Path) -> None:
    decisions, outcomes = small_world
    report, claims = monitor(f"{models}/amv-guard@production", decisions, outcomes,
                             window="3d")
    times = pd.to_datetime([json.loads(line)["time"] for line in
                            decisions.read_text().splitlines()], utc=True)
    live = pd.Timestamp(report.scope["go_live"]).normalize()  # midnight of the go-live day
    starts = [pd.Timestamp(w.start) for w in report.windows]
    assert all((s - live) % pd.Timedelta(days=3) == pd.Timedelta(0) for s in starts)
    assert starts[0] <= times.min() < starts[0] + pd.Timedelta(days=3)  # the first with a use
    assert starts[-1] <= times.max() < pd.Timestamp(report.windows[-1].end)
    assert len(report.windows) in (4, 5)  # 10 days over 3-day windows
    assert sum(w.uses for w in report.windows) == report.uses_read
    assert report.uses_outside == 0
    assert sum(w.labelled for w in report.windows) == report.labelled_read == len(claims)


def test_since_leaves_earlier_uses_out(small_world: tuple[Path, Path], models: Path) -> None:
    decisions, outcomes = small_world
    since = str(START + np.timedelta64(4, "D"))
    report, _ = monitor(f"{models}/amv-guard@production", decisions, outcomes,
                        window="3d", since=since)
    assert report.windows[0].start.startswith(since[:10])
    assert len(report.windows) == 2
    assert report.uses_outside == report.uses_read - sum(w.uses for w in report.windows) > 0


def test_small_worlds_are_insufficient_data_not_warn(small_world: tuple[Path, Path],
                                                     models: Path) -> None:
    # 400 actions: the harm's confidence sequence still reaches above alpha -- not a WARN
    decisions, outcomes = small_world
    report, _ = monitor(f"{models}/amv-guard@production", decisions, outcomes, window="1d")
    assert {w.status for w in report.windows} == {"INSUFFICIENT DATA"}
    assert report.status == "INSUFFICIENT DATA"
    assert "cannot yet tell it below alpha 0.01" in report.reasons[0]
    assert report.evidence["harm_cs"][1] > 0.01
    assert any("fewer than 200): not judged" in r for r in report.windows[0].reasons)


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


def test_artifact_without_profile_is_refused(repo_root: Path, small_world: tuple[Path, Path],
                                             tmp_path: Path) -> None:
    from amv_calib.artifacts import export_artifact

    v1 = repo_root / "models" / "amv-guard" / "v1"
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
    line = capsys.readouterr().out
    # 400 actions: too few labelled actions to tell the harm below alpha, in one line
    assert line.startswith("INSUFFICIENT DATA: amv-guard@v1 harm ")
    assert "cannot yet tell it below alpha" in line
    client = MlflowClient(tracking_uri=uri)
    (run,) = client.search_runs(client.search_experiments()[0].experiment_id,
                                filter_string="tags.`monitor.latest_status` != ''")
    history = client.get_metric_history(run.info.run_id, "monitor.uses")
    assert [m.step for m in sorted(history, key=lambda m: m.step)] == [0, 1, 2, 3]
    assert run.data.tags["monitor.latest_status"] == "INSUFFICIENT DATA"


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


@pytest.mark.slow
def test_bench_quick_runs(run_bench: Any) -> None:
    res = run_bench("bench_monitor", timeout=240)
    assert res["agree"] is True  # the daily run and the rebuild
    assert res["incremental"]["mode"] == "incremental" and res["rebuild"]["mode"] == "rebuild"
    assert res["incremental"]["join"]["pending_taken_back"] > 0
    assert res["ratios"]["time_rebuild_over_label"] > 0


def test_without_outcomes_only_drift_is_judged(small_world: tuple[Path, Path], models: Path
                                               ) -> None:
    report, claims = monitor(f"{models}/amv-guard@production", small_world[0], window="30d")
    (w,) = report.windows
    assert claims is not None and len(claims) == 0 and w.labelled == 0 and not w.calibration
    assert set(w.drift) == {"recency_hours", "source_trust_score", "model_confidence",
                            "contradiction_flag"}
    # no label: nothing is known of harm, and nothing alarms
    assert w.status == "INSUFFICIENT DATA" and report.evidence["labelled_actions"] == 0


def test_older_claims_warn_as_feature_drift(small_world: tuple[Path, Path], models: Path,
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
    assert w.status == "WARN"  # drift is descriptive: it warns, it does not alert
    assert w.reasons[0].startswith("drift: recency_hours PSI")
    assert w.drift["recency_hours"]["psi"] > 0.25
    assert w.drift["model_confidence"]["psi"] < 0.1


# -- incremental runs --------------------------------------------------------------------------
def _comparable(report: Any) -> dict[str, Any]:
    """What an incremental run and a rebuild must agree on, exactly."""
    d = report.to_dict()
    counts = {k: v for k, v in d["counts"].items() if k != "late_for_window"}
    return {"evidence": d["evidence"], "status": d["status"], "reasons": d["reasons"],
            "counts": counts, "latest": d["windows"][-1], "timeline": d["timeline"],
            "statuses": [w["status"] for w in d["windows"]], "line": d["line"]}


def test_daily_incremental_runs_agree_with_a_rebuild(pool: Pool, models: Path,
                                                     tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from amv_calib.monitoring import _state

    # pending partitions written in many slices (a million rows at a time in production)
    monkeypatch.setattr(_state, "_WRITE_ROWS", 97)
    decisions, outcomes = simulate(pool, f"{models}/amv-guard@production", tmp_path / "w",
                                   days=16, per_day=200, seed=21, drift_day=None)
    state = tmp_path / "state"
    modes = []
    for d, o in replay_daily(decisions, outcomes, tmp_path / "daily"):
        daily, claims = monitor(f"{models}/amv-guard@production", d, o, since=SINCE,
                                state=state)
        modes.append(daily.run["mode"])
        assert claims is None or daily.run["mode"] == "rebuild"
    assert modes[0] == "rebuild" and set(modes[1:]) == {"incremental"}
    assert daily.join["pending_taken_back"] > 0  # outcomes decided pending uses
    again, claims = monitor(f"{models}/amv-guard@production", d, o, since=SINCE, state=state,
                            rebuild=True)
    assert again.run["mode"] == "rebuild" and claims is not None
    assert _comparable(daily) == _comparable(again)
    # and the same files read at once without a state: the same evidence
    whole, _ = monitor(f"{models}/amv-guard@production", d, o, since=SINCE)
    assert whole.evidence == again.evidence
    assert whole.evidence["labelled_actions"] > 2000


# -- de-risking ----------------------------------------------------------------------------
def _cli_json(argv: list[str]) -> tuple[int, dict[str, Any]]:
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        code = main(argv)
    return code, json.loads(buf.getvalue())


@pytest.mark.slow
def test_wrong_world_alerts_derisks_and_rollback_restores(
        pool: Pool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        shipped_models: Callable[[Path], Path]) -> None:
    # the shipped champion where the verifiers are right 0.3 less often than declared:
    # harm about 1.7% against its certified 1%
    models = shipped_models(tmp_path / "models")
    ref = f"{models}/amv-guard@production"
    world = tmp_path / "world"
    decisions, outcomes = simulate(pool, ref, world, days=25, per_day=300, seed=5,
                                   drift_day=None, reliability_drop=0.3)
    monkeypatch.setenv("SOURCE_DATE_EPOCH", str(int(
        (START + np.timedelta64(25, "D")).astype("datetime64[s]").astype(np.int64))))
    out = tmp_path / "out"
    argv = ["monitor", "--artifact", ref, "--decisions", str(decisions), "--outcomes",
            str(outcomes), "--since", SINCE, "--out", str(out), "--json", "--no-tracking",
            "--on-alert", "derisk"]
    code, first = _cli_json(argv)
    assert code == MONITOR_ALERT_EXIT and first["status"] == "ALERT"
    assert first["evidence"]["labelled_actions"] <= 6000
    assert first["evidence"]["harm_cs"][0] > 0.01  # the band is above alpha
    assert first["actions"] == ["de-risked to v2"]
    assert "de-risked to v2" in first["line"]
    aliases = json.loads((models / "amv-guard" / "aliases.json").read_text())["aliases"]
    production = aliases["production"]
    assert production["version"] == "v2"
    assert "harm: Gate Harmful" in production["history"][-1]["reason"]
    v2 = json.loads((models / "amv-guard" / "v2" / "manifest.json").read_text())
    assert v2["certificate"]["chosen"] == 0 and v2["gate"]["harm_price"] == 1e6
    assert v2["certificate"]["calibrator_sha256"] == first_cert_sha(models)
    # the same world goes on under the safer version: its harm is within alpha
    simulate(pool, ref, world, days=30, per_day=300, seed=6, drift_day=None,
             reliability_drop=0.3, start_day=25, append=True)
    code, second = _cli_json(argv[:-2])
    assert second["scope"]["calibrator"] == "amv-guard@v2"
    assert second["run"]["mode"] == "rebuild"  # a new version: monitoring restarts
    ev = second["evidence"]
    assert ev["labelled_actions"] > 5000 and ev["harm_rate"] <= 0.01
    assert code == 0 and second["status"] != "ALERT"
    # moving back needs a person: rollback restores v1
    assert main(["rollback", "amv-guard", "--alias", "production", "--models-dir",
                 str(models)]) == 0
    aliases = json.loads((models / "amv-guard" / "aliases.json").read_text())["aliases"]
    assert aliases["production"]["version"] == "v1"


def first_cert_sha(models: Path) -> str:
    manifest = json.loads((models / "amv-guard" / "v1" / "manifest.json").read_text())
    return str(manifest["certificate"]["calibrator_sha256"])


def test_a_truncated_log_forces_a_rebuild(small_world: tuple[Path, Path], models: Path,
                                          tmp_path: Path, caplog: pytest.LogCaptureFixture
                                          ) -> None:
    decisions = Path(shutil.copy(small_world[0], tmp_path / "d.jsonl"))
    state = tmp_path / "state"
    first, _ = monitor(f"{models}/amv-guard@production", decisions, small_world[1],
                       state=state)
    lines = decisions.read_bytes().splitlines(keepends=True)
    with decisions.open("r+b") as fh:  # the same file, cut to half
        fh.truncate(sum(len(x) for x in lines[: len(lines) // 2]))
    with caplog.at_level("WARNING"):
        again, claims = monitor(f"{models}/amv-guard@production", decisions, small_world[1],
                                state=state)
    assert again.run["mode"] == "rebuild" and "truncated or replaced" in \
        again.run["rebuilt_because"]
    assert "rebuilding from the logs" in caplog.text
    assert again.uses_read < first.uses_read and claims is not None
    # a state file lost: a rebuild, not a crash
    next(state.glob("pending-*.arrow")).unlink()
    lost, _ = monitor(f"{models}/amv-guard@production", decisions, small_world[1],
                      state=state)
    assert lost.run["mode"] == "rebuild" and "is missing" in lost.run["rebuilt_because"]
    # rewritten in place with other first bytes: also a rebuild
    decisions.write_bytes(b"\n" + decisions.read_bytes())
    third, _ = monitor(f"{models}/amv-guard@production", decisions, small_world[1],
                       state=state)
    assert "first" in third.run["rebuilt_because"] and "changed" in \
        third.run["rebuilt_because"]


def test_a_monitor_run_imports_neither_scikit_learn_nor_scipy_stats(
        small_world: tuple[Path, Path], models: Path, tmp_path: Path) -> None:
    # a daily run is short: importing the calibrators' scikit-learn and scipy.stats (~1.3 s)
    # would be a sixth of it; the monitor needs the metrics and figures only
    import subprocess
    import sys

    code = ("import sys\n"
            "from amv_calib.cli import main\n"
            "try:\n"
            f"    main(['monitor', '--artifact', {f'{models}/amv-guard@production'!r}, "
            f"'--decisions', {str(small_world[0])!r}, '--outcomes', {str(small_world[1])!r}, "
            f"'--out', {str(tmp_path / 'out')!r}, '--no-tracking'])\n"
            "except SystemExit:\n"
            "    pass\n"
            "print(sorted(m for m in ('sklearn', 'scipy.stats') if m in sys.modules))\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert (tmp_path / "out" / "timeline.png").is_file(), run.stderr
    assert run.stdout.strip().splitlines()[-1] == "[]", run.stdout


def test_a_state_of_another_format_version_is_rebuilt(small_world: tuple[Path, Path],
                                                     models: Path, tmp_path: Path) -> None:
    # e.g. a state whose key hashes were made by an earlier hash function: continuing it
    # would never match its pending uses again
    state = tmp_path / "state"
    ref = f"{models}/amv-guard@production"
    first, _ = monitor(ref, small_world[0], small_world[1], state=state)
    doc = json.loads((state / "state.json").read_text())
    doc["format_version"] -= 1
    raw = json.dumps(doc).encode()
    (state / "state.json").write_bytes(raw)
    # its digest rewritten too, so that it is the version that is refused
    (state / "state.sha256").write_text(f"{hashlib.sha256(raw).hexdigest()}  state.json\n")
    again, claims = monitor(ref, small_world[0], small_world[1], state=state)
    assert again.run["mode"] == "rebuild"
    assert "not a monitor state of this version" in again.run["rebuilt_because"]
    assert again.uses_read == first.uses_read and claims is not None


def test_a_rotated_log_is_followed_and_old_uses_expire(small_world: tuple[Path, Path],
                                                       models: Path, tmp_path: Path) -> None:
    # logrotate: the file is renamed, a new one takes its name; given both, the old one is
    # known by its inode and not read again
    lines = small_world[0].read_bytes().splitlines(keepends=True)
    live = tmp_path / "d.jsonl"
    live.write_bytes(b"".join(lines[:200]))
    state = tmp_path / "state"
    cfg = MonitorConfig(label_horizon_days=2)
    monitor(f"{models}/amv-guard@production", live, small_world[1], state=state, config=cfg)
    rotated = live.rename(tmp_path / "d.jsonl.1")
    live.write_bytes(b"".join(lines[200:]))
    inc, _ = monitor(f"{models}/amv-guard@production", [rotated, live], small_world[1],
                     state=state, config=cfg)
    full, _ = monitor(f"{models}/amv-guard@production", [rotated, live], small_world[1],
                      config=cfg, state=tmp_path / "other", rebuild=True)
    assert inc.run["mode"] == "incremental"
    assert inc.uses_read == full.uses_read  # nothing read twice
    assert inc.counts["expired_uses"] > 0  # unlabelled uses older than 2 days
    assert inc.counts["expired_uses"] == full.counts["expired_uses"]
    assert inc.counts["pending_entries"] == full.counts["pending_entries"]


def test_derisk_moves_along_the_certified_path_and_refuses_what_it_cannot_vouch_for(
        repo_root: Path, tmp_path: Path, shipped_models: Callable[[Path], Path]) -> None:
    from amv_calib.artifacts import export_artifact
    from amv_calib.contract import load_artifact
    from amv_calib.monitoring import derisk

    models = shipped_models(tmp_path / "models")
    one_step = derisk(f"{models}/amv-guard@production", evidence="test", steps=1)
    assert (one_step.version, one_step.position, one_step.chosen_before) == ("v2", 20, 21)
    v2 = load_artifact(f"{models}/amv-guard@production")  # the loader checks the binding
    assert v2.version == "v2" and v2.manifest["certificate"]["chosen"] == 20
    assert v2.thresholds == load_artifact(models / "amv-guard" / "v1").manifest[
        "certificate"]["path"][20]
    floor = derisk(f"{models}/amv-guard@production", evidence="test")
    assert (floor.version, floor.position) == ("v3", 0)
    again = derisk(f"{models}/amv-guard@production", evidence="test")
    assert again.version is None  # already the safest certified configuration
    with pytest.raises(ArtifactError, match="alias 'production' points at v3, not at the "
                                            "monitored v1"):
        derisk(models / "amv-guard" / "v1", evidence="test")
    bare = export_artifact(calibrator=repo_root / "models" / "amv-guard" / "v1" / "calibrator.json",
                           name="bare", models_dir=models)
    with pytest.raises(ArtifactError, match="no certificate"):
        derisk(bare.path, evidence="test")
    with pytest.raises(ConfigError, match="steps=0"):
        derisk(f"{models}/amv-guard@production", evidence="test", steps=0)


@pytest.mark.slow
@pytest.mark.parametrize(("delta", "alerts"), [(0.05, True), (1e-300, False)],
                         ids=["delta-0.05", "wrong-delta-1e-300"])
def test_wrong_world_detection_companion(pool: Pool, models: Path, tmp_path: Path,
                                         delta: float, alerts: bool) -> None:
    # the detection check with a threshold no evidence reaches must fail
    decisions, outcomes = simulate(pool, f"{models}/amv-guard@production", tmp_path / "w",
                                   days=20, per_day=375, seed=8, drift_day=None,
                                   reliability_drop=0.3)
    report, _ = monitor(f"{models}/amv-guard@production", decisions, outcomes, since=SINCE,
                        config=MonitorConfig(delta=delta))
    assert report.evidence["labelled_actions"] <= 6000
    assert (report.status == "ALERT") is alerts, report.reasons[:1]


def test_monitor_step_on_alert_takes_only_derisk(small_world: tuple[Path, Path],
                                                 models: Path, tmp_path: Path) -> None:
    from amv_calib.exceptions import PipelineError
    from amv_calib.pipeline import load_pipeline, run_pipeline

    decisions, outcomes = (Path(shutil.copy(f, tmp_path)) for f in small_world)
    toml = _scheduled_toml(tmp_path, models, decisions, outcomes)
    quiet = run_pipeline(load_pipeline(toml, ['monitor.on_alert=["derisk"]']))
    out = quiet.steps[0].outputs
    assert out["derisked_to"] is None and out["alert"] is False  # nothing to de-risk
    assert (tmp_path / "work" / "monitor.state" / "state.json").is_file()
    with pytest.raises(PipelineError, match="only 'derisk'"):
        run_pipeline(load_pipeline(toml, ['monitor.on_alert=["retrain"]']), force=True)


def test_a_version_derives_only_from_its_own_calibrator(repo_root: Path, tmp_path: Path) -> None:
    from amv_calib.artifacts import export_artifact

    v1 = repo_root / "models" / "amv-guard" / "v1"
    other = json.loads((v1 / "calibrator.json").read_text())
    other["intercept"] = float(other["intercept"]) + 0.5
    path = tmp_path / "other.json"
    path.write_text(json.dumps(other), encoding="utf-8")
    with pytest.raises(ConfigError, match="derive only from the same calibrator"):
        export_artifact(calibrator=path, name="x", models_dir=tmp_path / "m", derived_from=v1)
    base = json.loads((v1 / "manifest.json").read_text())
    kept = export_artifact(calibrator=v1 / "calibrator.json", name="x",
                           thresholds=base["gate"], models_dir=tmp_path / "m",
                           derived_from=v1)
    assert kept.manifest["training_data"] == base["training_data"]
    assert kept.manifest["files"]["profile.json"] == base["files"]["profile.json"]
