"""The stages that were written twice before (replay, transfer, monitor): the command and
the pipeline step run one body, so they agree; what only one path may do is refused on the
other with a reason."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from amv_calib import cli
from amv_calib.exceptions import ConfigError, PipelineError
from amv_calib.pipeline import load_pipeline, run_pipeline


@pytest.fixture(scope="module")
def episodes(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """150 synthetic episodes of every family."""
    from amv_calib.datasets import synth_episodes, write_episodes

    return write_episodes(synth_episodes(150, seed=4),
                          tmp_path_factory.mktemp("episodes") / "episodes.jsonl")


def _pipeline(folder: Path, models: Path, steps: str) -> Path:
    toml = folder / "p.toml"
    toml.write_text(f"""
[pipeline]
name = "p"
workdir = "{folder / 'work'}"
models_dir = "{models}"
seed = 8
tracking = false

{steps}""", encoding="utf-8")
    return toml


def test_replay_command_and_step_agree(episodes: Path, tmp_path: Path,
                                       shipped_models: Callable[[Path], Path],
                                       capsys: pytest.CaptureFixture[str]) -> None:
    models = shipped_models(tmp_path / "models")
    artifact = models / "amv-guard" / "v1"
    assert cli.main(["replay", str(episodes), "--policy", "seed", "--policy", "lookahead",
                     "--artifact", str(artifact), "--seed", "8", "--n-boot", "20",
                     "--json"]) == 0
    command = json.loads(capsys.readouterr().out)
    # the step's artifact defaults to the pipeline's production version: v1 here
    toml = _pipeline(tmp_path, models, f"""[[steps]]
name = "replay"
kind = "replay"
episodes = "{episodes}"
policies = ["seed", "lookahead"]
n_boot = 20
""")
    result = run_pipeline(load_pipeline(toml))
    step = json.loads((Path(result.steps[0].outputs["dir"]) / "replay.json").read_text())
    assert list(command) == ["seed", "lookahead"] and set(step) == set(command)
    for policy, summary in command.items():
        assert summary == {**{k: v["value"] for k, v in step[policy]["overall"].items()},
                           "n": step[policy]["n"]}, policy


def test_a_step_checks_its_list_choices(episodes: Path, tmp_path: Path,
                                        shipped_models: Callable[[Path], Path]) -> None:
    toml = _pipeline(tmp_path, shipped_models(tmp_path / "models"), f"""[[steps]]
name = "replay"
kind = "replay"
episodes = "{episodes}"
policies = ["seed", "psychic"]
""")
    with pytest.raises(ConfigError, match=r"policies: \['psychic'\] not among"):
        load_pipeline(toml)


def test_transfer_step_writes_what_the_command_prints(episodes: Path, tmp_path: Path,
                                                      shipped_models: Callable[[Path], Path],
                                                      capsys: pytest.CaptureFixture[str]
                                                      ) -> None:
    models = shipped_models(tmp_path / "models")
    toml = _pipeline(tmp_path, models, f"""[[steps]]
name = "transfer"
kind = "transfer"
episodes = "{episodes}"
tune_families = "moved_address,price_change"
calibrator = "{models / 'amv-guard' / 'v1'}"
trials = 2
target_harmful = 1.0
planner = "myopic"
n_boot = 0
""")
    outputs = run_pipeline(load_pipeline(toml)).steps[0].outputs
    written = json.loads(Path(outputs["transfer"]).read_text())
    assert outputs["tune_families"] == written["tune_families"] == ["moved_address",
                                                                     "price_change"]
    assert outputs["tuned"] and set(outputs["test_families"]).isdisjoint(
        outputs["tune_families"])


def test_a_monitor_step_refuses_a_pipeline_on_alert(tmp_path: Path,
                                                    shipped_models: Callable[[Path], Path]
                                                    ) -> None:
    # the command runs a pipeline file on ALERT through its hook; a step's retrain is the
    # steps after it
    log = tmp_path / "decisions.jsonl"
    log.write_text("", encoding="utf-8")
    toml = _pipeline(tmp_path, shipped_models(tmp_path / "models"), f"""[[steps]]
name = "monitor"
kind = "monitor"
decisions = ["{log}"]
on_alert = ["retrain.toml"]
""")
    with pytest.raises(PipelineError, match=r"on_alert='retrain.toml'; only 'derisk'"):
        run_pipeline(load_pipeline(toml))


def test_the_monitor_command_is_lent_the_pipeline_hook() -> None:
    import argparse

    parser = cli.build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    hooks = sub.choices["monitor"].get_default("hooks")
    assert set(hooks) == {"pipeline"}
    assert all(sub.choices[name].get_default("hooks") == {}
               for name in ("replay", "transfer", "compare"))
