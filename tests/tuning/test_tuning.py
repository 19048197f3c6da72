"""Optuna tuning: constraint, resume after interruption, reproducibility, Pareto outputs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from amv_calib import ConfigError
from amv_calib.contract._artifact import check_thresholds
from amv_calib.contract._features import seed_prior_calibrator
from amv_calib.datasets._synth import synth_episodes
from amv_calib.tuning._episodes import EpisodeSet, episode_set
from amv_calib.tuning._search import (
    make_storage,
    split_episodes,
    transfer_check,
    tune_thresholds,
)

pytest.importorskip("optuna")

TARGET = 0.05


@pytest.fixture(scope="module")
def episodes() -> EpisodeSet:
    return episode_set(synth_episodes(240, seed=7))


def _tune(es: EpisodeSet, tmp: Path, name: str, trials: int, **kw: Any) -> Any:
    return tune_thresholds(
        es, calibrator=seed_prior_calibrator(), trials=trials,
        storage=str(tmp / f"{name}.log"), study_name="s", seed=123, target_harmful=TARGET,
        planner="myopic", n_boot=0, **kw,
    )


def _trials(storage: str) -> list[tuple[int, dict[str, Any], float | None]]:
    import optuna

    study = optuna.load_study(study_name="s", storage=make_storage(storage))
    return [(t.number, t.params, t.value if t.values else None) for t in study.trials]


def _complete(storage: str) -> list[tuple[dict[str, Any], float | None]]:
    return [(params, value) for _, params, value in _trials(storage) if value is not None]


class _Stop(RuntimeError):
    pass


def _stop_after(k: int) -> Any:
    def cb(study: Any, trial: Any) -> None:
        if sum(t.state.name == "COMPLETE" for t in study.get_trials(deepcopy=False)) >= k:
            raise _Stop(f"interrupted after {k} trials")
    return cb


def test_constrained_best_is_feasible(episodes: EpisodeSet, tmp_path: Path) -> None:
    res = _tune(episodes, tmp_path, "c", 12, out_dir=tmp_path / "out")
    assert res.n_trials == 12 and res.n_new == 12
    assert res.thresholds is not None
    assert check_thresholds(res.thresholds) == res.thresholds
    assert res.thresholds["planner"] == "myopic"
    assert res.tune_metrics["gate_harmful"] <= TARGET
    # the constraint went through trial.set_constraint
    import optuna

    study = optuna.load_study(study_name="s", storage=make_storage(tmp_path / "c.log"))
    for t in study.trials:
        assert set(t.constraints) == {"gate_harmful"}
        assert t.constraints["gate_harmful"] == pytest.approx(t.user_attrs["gate_harmful"] - TARGET)
    feasible = [t for t in study.trials if t.constraints["gate_harmful"] <= 0]
    assert res.best_trial == min(feasible, key=lambda t: (t.value, t.number)).number
    out = tmp_path / "out"
    assert json.loads((out / "thresholds.json").read_text()) == res.thresholds
    rows = (out / "trials.csv").read_text().splitlines()
    assert len(rows) == 13 and rows[0].startswith("number,state,lambda_cost_scale")
    report = json.loads((out / "tune_report.json").read_text())
    assert report["best_trial"] == res.best_trial and report["n_tune"] == res.n_tune
    assert set(report["holdout"]["baselines"]) == {"always-proceed", "always-verify", "seed"}


def test_resume_after_interruption_continues_the_same_study(
    episodes: EpisodeSet, tmp_path: Path
) -> None:
    with pytest.raises(_Stop):
        _tune(episodes, tmp_path, "r", 9, callbacks=[_stop_after(4)])
    assert len(_trials(str(tmp_path / "r.log"))) == 4
    res = _tune(episodes, tmp_path, "r", 9)
    assert (res.n_trials, res.n_new) == (9, 5)
    again = _tune(episodes, tmp_path, "r", 9)  # nothing left to do
    assert (again.n_trials, again.n_new) == (9, 0)
    # same trials as one uninterrupted run: the sampler is seeded per trial number
    whole = _tune(episodes, tmp_path, "w", 9)
    assert _trials(str(tmp_path / "r.log")) == _trials(str(tmp_path / "w.log"))
    assert res.thresholds == whole.thresholds


def test_resume_after_killed_process(episodes: EpisodeSet, tmp_path: Path) -> None:
    # a worker process dies (SIGKILL) after 3 trials; the journal keeps them
    path = tmp_path / "episodes.jsonl"
    path.write_text("\n".join(json.dumps(e) for e in synth_episodes(240, seed=7)) + "\n")
    script = f"""
import os, signal
from amv_calib.contract._features import seed_prior_calibrator
from amv_calib.tuning._search import tune_thresholds
def cb(study, trial):
    if sum(t.state.name == "COMPLETE" for t in study.trials) >= 3:
        os.kill(os.getpid(), signal.SIGKILL)
tune_thresholds({str(path)!r}, calibrator=seed_prior_calibrator(), trials=8,
                storage={str(tmp_path / "k.log")!r}, study_name="s", seed=123,
                target_harmful={TARGET}, planner="myopic", n_boot=0, callbacks=[cb])
"""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=120,
                          env={**os.environ, "PYTHONHASHSEED": "0"})
    assert proc.returncode == -9, proc.stderr.decode()[-2000:]
    assert len(_trials(str(tmp_path / "k.log"))) == 3
    res = _tune(episode_set(synth_episodes(240, seed=7)), tmp_path, "k", 8)
    assert (res.n_trials, res.n_new) == (8, 5)
    assert [t[0] for t in _trials(str(tmp_path / "k.log"))] == list(range(8))


def test_resume_after_process_killed_mid_trial(episodes: EpisodeSet, tmp_path: Path) -> None:
    # the process dies inside its 4th trial: that trial stays RUNNING in the journal; the
    # resumed run marks it FAIL and then completes the trials one uninterrupted run would
    path = tmp_path / "episodes.jsonl"
    path.write_text("\n".join(json.dumps(e) for e in synth_episodes(240, seed=7)) + "\n")
    script = f"""
import os, signal
import amv_calib.tuning._search as tuning
from amv_calib.contract._features import seed_prior_calibrator
real = tuning._evaluate
calls = []
def dying(*a, **k):
    calls.append(1)
    if len(calls) == 4:
        os.kill(os.getpid(), signal.SIGKILL)
    return real(*a, **k)
tuning._evaluate = dying
tuning.tune_thresholds({str(path)!r}, calibrator=seed_prior_calibrator(), trials=8,
                       storage={str(tmp_path / "mid.log")!r}, study_name="s", seed=123,
                       target_harmful={TARGET}, planner="myopic", n_boot=0)
"""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=120)
    assert proc.returncode == -9, proc.stderr.decode()[-2000:]
    import optuna

    study = optuna.load_study(study_name="s", storage=make_storage(tmp_path / "mid.log"))
    assert [t.state.name for t in study.trials] == ["COMPLETE"] * 3 + ["RUNNING"]
    res = _tune(episodes, tmp_path, "mid", 8)
    assert (res.n_trials, res.n_new) == (8, 5)
    study = optuna.load_study(study_name="s", storage=make_storage(tmp_path / "mid.log"))
    assert study.trials[3].state.name == "FAIL"
    _tune(episodes, tmp_path, "whole", 8)
    assert _complete(str(tmp_path / "mid.log")) == _complete(str(tmp_path / "whole.log"))


def test_running_trials_of_live_or_remote_workers_are_kept(
    episodes: EpisodeSet, tmp_path: Path
) -> None:
    import optuna

    from amv_calib.tuning._search import fail_abandoned_trials

    study = optuna.create_study(study_name="s", storage=make_storage(tmp_path / "o.log"))
    mine = study.ask()
    mine.set_user_attr("amv_calib_worker", {"host": __import__("socket").gethostname(),
                                            "pid": os.getpid()})
    remote = study.ask()
    remote.set_user_attr("amv_calib_worker", {"host": "another-machine", "pid": 1})
    study.ask()  # no owner recorded: left alone
    assert fail_abandoned_trials(study) == []
    assert [t.state.name for t in study.trials] == ["RUNNING"] * 3


def test_seeded_runs_are_identical(episodes: EpisodeSet, tmp_path: Path) -> None:
    a = _tune(episodes, tmp_path, "a", 8, out_dir=tmp_path / "oa")
    b = _tune(episodes, tmp_path, "b", 8, out_dir=tmp_path / "ob")
    assert _trials(str(tmp_path / "a.log")) == _trials(str(tmp_path / "b.log"))
    assert (tmp_path / "oa" / "thresholds.json").read_bytes() == \
        (tmp_path / "ob" / "thresholds.json").read_bytes()
    assert (tmp_path / "oa" / "trials.csv").read_bytes() == \
        (tmp_path / "ob" / "trials.csv").read_bytes()
    assert a.holdout_metrics == b.holdout_metrics


def test_harm_price_is_searched_with_an_exact_zero(episodes: EpisodeSet, tmp_path: Path) -> None:
    import csv

    import optuna

    from amv_calib.tuning._search import (
        HARM_PRICE_SWITCH,
        SEARCH_SPACE,
        _evaluate,
        _gate_for,
        split_episodes,
    )

    assert SEARCH_SPACE["harm_price"] == (1e-3, 1e3, True)
    res = _tune(episodes, tmp_path, "h", 16, out_dir=tmp_path / "oh")
    study = optuna.load_study(study_name="s", storage=make_storage(tmp_path / "h.log"))
    on = {t.number: t.params[HARM_PRICE_SWITCH] for t in study.trials}
    assert set(on.values()) == {False, True}  # both arms are drawn
    for t in study.trials:
        assert ("harm_price" in t.params) == on[t.number]
        if on[t.number]:
            assert 1e-3 <= t.params["harm_price"] <= 1e3
    with (tmp_path / "oh" / "trials.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert [float(r["harm_price"]) == 0.0 for r in rows] == [not on[int(r["number"])]
                                                            for r in rows]
    # the thresholds carry the chosen trial's price, and its gate is the one that was scored
    assert res.thresholds is not None and isinstance(res.thresholds["harm_price"], float)
    best = study.trials[res.best_trial]
    assert res.thresholds["harm_price"] == best.params.get("harm_price", 0.0)
    tune, _ = split_episodes(episodes, 0.5)
    es_tune = episodes.subset(tune)
    cal = seed_prior_calibrator()
    again = _evaluate(es_tune, es_tune.probabilities(cal),
                      _gate_for(res.thresholds, "myopic", cal), seed=123, lambda_eval=1.0)
    assert again == res.tune_metrics


def test_harm_price_pinned_by_the_space(episodes: EpisodeSet, tmp_path: Path) -> None:
    from amv_calib.tuning._search import SEARCH_SPACE

    space = {**SEARCH_SPACE, "harm_price": (2.5, 2.5, False)}
    res = _tune(episodes, tmp_path, "p", 4, space=space)
    assert res.thresholds is not None and res.thresholds["harm_price"] == 2.5
    no_price = {k: v for k, v in SEARCH_SPACE.items() if k != "harm_price"}
    res = _tune(episodes, tmp_path, "n", 4, space=no_price)
    assert res.thresholds is not None and res.thresholds["harm_price"] == 0.0


def test_multi_objective_pareto(episodes: EpisodeSet, tmp_path: Path) -> None:
    res = _tune(episodes, tmp_path, "m", 14, mode="multi", out_dir=tmp_path / "om")
    assert res.pareto, "a non-empty Pareto front"
    pts = [(r["gate_harmful"], r["verification_cost"], -r["proceed_coverage"])
           for r in res.pareto]
    for i, a in enumerate(pts):  # no front point dominates another
        for j, b in enumerate(pts):
            if i != j:
                assert not (all(x <= y for x, y in zip(b, a, strict=True)) and b != a)
    out = tmp_path / "om"
    lines = (out / "pareto.csv").read_text().splitlines()
    assert len(lines) == len(res.pareto) + 1
    assert (out / "pareto.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # the multi study refuses to be resumed as a constrained one
    with pytest.raises(ConfigError, match="directions"):
        _tune(episodes, tmp_path, "m", 15)


def test_study_setup_must_match_on_resume(episodes: EpisodeSet, tmp_path: Path) -> None:
    _tune(episodes, tmp_path, "x", 2)
    with pytest.raises(ConfigError, match=r"different set-up \(differs in \['target_harmful'\]"):
        tune_thresholds(episodes, calibrator=seed_prior_calibrator(), trials=3,
                        storage=str(tmp_path / "x.log"), study_name="s", seed=123,
                        target_harmful=0.2, planner="myopic", n_boot=0)


def test_storage_label_hides_the_password() -> None:
    from amv_calib.tuning._search import _storage_label

    assert _storage_label("postgresql://amv:s3cret@db:5432/optuna") == \
        "postgresql://amv:***@db:5432/optuna"
    assert _storage_label("postgresql://amv@db/optuna") == "postgresql://amv@db/optuna"


def test_sqlite_refused_for_parallel_workers(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="SQLite is for a single process"):
        make_storage(f"sqlite:///{tmp_path / 'o.db'}", n_workers=2)
    make_storage(f"sqlite:///{tmp_path / 'o.db'}", n_workers=1)  # single process: fine


def test_split_is_deterministic_by_instance_id(episodes: EpisodeSet) -> None:
    tune, hold = split_episodes(episodes, 0.5)
    assert not np.any(tune & hold) and np.all(tune | hold)
    assert 0.35 < tune.mean() < 0.65
    # reordering the instances moves nobody across the split
    rev = episodes.subset(np.arange(len(episodes))[::-1])
    tune_rev, _ = split_episodes(rev, 0.5)
    np.testing.assert_array_equal(tune_rev[::-1], tune)
    with pytest.raises(ConfigError, match="tune_fraction"):
        split_episodes(episodes, 0.0)


def test_transfer_check_reports_unseen_families(episodes: EpisodeSet, tmp_path: Path) -> None:
    fams = episodes.families
    seen = fams[: len(fams) // 2]
    res = transfer_check(episodes, tune_families=seen, calibrator=seed_prior_calibrator(),
                         trials=6, seed=5, target_harmful=0.1, planner="myopic",
                         storage=str(tmp_path / "t.log"), n_boot=0,
                         out_dir=tmp_path / "ot")
    assert res.test_families == sorted(set(fams) - set(seen))
    assert set(res.unseen) >= {"untuned", "always-proceed", "always-verify", "seed", "oracle"}
    n_test = sum(f in res.test_families for f in episodes.family)
    assert all(r.n == n_test for r in res.unseen.values())
    assert res.tune.n_tune == len(episodes) - n_test and res.tune.n_holdout == 0
    assert set(res.unseen["oracle"].by_family) == set(res.test_families)
    assert (tmp_path / "ot" / "transfer.json").is_file()
    with pytest.raises(ConfigError, match="unknown families"):
        transfer_check(episodes, tune_families=["nope"], calibrator=seed_prior_calibrator(),
                       trials=1, storage=str(tmp_path / "t2.log"))
    with pytest.raises(ConfigError, match="proper subset"):
        transfer_check(episodes, tune_families=fams, calibrator=seed_prior_calibrator(),
                       trials=1, storage=str(tmp_path / "t3.log"))


@pytest.fixture(scope="module")
def postgres_url(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A throw-away PostgreSQL server on a unix socket (skipped where none can run)."""
    import shutil
    import tempfile

    pytest.importorskip("psycopg")
    initdb, pg_ctl = shutil.which("initdb"), shutil.which("pg_ctl")
    if initdb is None or pg_ctl is None:
        pytest.skip("PostgreSQL server binaries (initdb, pg_ctl) not found")
    prefix: list[str] = []
    if os.geteuid() == 0:  # the server refuses to run as root
        runuser = shutil.which("runuser")
        try:
            import pwd

            pwd.getpwnam("postgres")
        except KeyError:
            runuser = None
        if runuser is None:
            pytest.skip("running as root without a 'postgres' user to run the server")
        prefix = [runuser, "-u", "postgres", "--"]
    base = Path(tempfile.mkdtemp(prefix="amv-pg-"))
    base.chmod(0o755)
    data, sock = base / "data", base / "sock"
    data.mkdir()
    sock.mkdir()
    if prefix:
        shutil.chown(data, "postgres")
        shutil.chown(sock, "postgres")
    port = "54329"
    subprocess.run([*prefix, initdb, "-D", str(data), "-A", "trust", "-U", "postgres"],
                   check=True, capture_output=True, timeout=120)
    subprocess.run([*prefix, pg_ctl, "-D", str(data), "-l", str(sock / "log"), "-w", "-o",
                    f"-k {sock} -c listen_addresses='' -p {port}", "start"],
                   check=True, capture_output=True, timeout=120)
    try:
        import psycopg

        with psycopg.connect(f"host={sock} port={port} user=postgres dbname=postgres",
                             autocommit=True) as conn:
            conn.execute("CREATE DATABASE optuna")
        yield f"postgresql://postgres@/optuna?host={sock}&port={port}"
    finally:
        subprocess.run([*prefix, pg_ctl, "-D", str(data), "-m", "fast", "stop"],
                       capture_output=True, timeout=120)
        shutil.rmtree(base, ignore_errors=True)


@pytest.mark.slow
def test_two_workers_share_one_postgres_study(episodes: EpisodeSet, postgres_url: str) -> None:
    res = tune_thresholds(episodes, calibrator=seed_prior_calibrator(), trials=10,
                          storage=postgres_url, study_name="pg", seed=3, target_harmful=TARGET,
                          planner="myopic", n_boot=0, n_workers=2)
    # each worker stops once completed + running trials reach the target: at most one extra
    assert 10 <= res.n_trials <= 11
    assert res.storage.startswith("postgresql://postgres@/optuna")
    import optuna

    study = optuna.load_study(study_name="pg", storage=make_storage(postgres_url))
    numbers = [t.number for t in study.trials]
    assert numbers == list(range(len(numbers)))
    # resuming from another "machine" (this process) runs only what is missing
    again = tune_thresholds(episodes, calibrator=seed_prior_calibrator(), trials=12,
                            storage=postgres_url, study_name="pg", seed=3,
                            target_harmful=TARGET, planner="myopic", n_boot=0)
    assert again.n_trials == 12 and again.n_new == 12 - res.n_trials
