"""Every stage's command and step kind are made from one definition: the command's flags and
the step's keys are its inputs and its options object, with the same defaults and checks;
what only one path has says why, and the command-only flags are named once
(:data:`~amv_calib.stages.CLI_ONLY`)."""

from __future__ import annotations

import argparse
import re

import pytest

from amv_calib import cli
from amv_calib.exceptions import ConfigError
from amv_calib.pipeline._steps import STEP_KINDS
from amv_calib.stages import CLI_ONLY, SHARED, STAGES, Input, Stage


def _actions(command: str) -> dict[str, argparse.Action]:
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return {a.dest: a for a in sub.choices[command]._actions
            if not isinstance(a, argparse._HelpAction)}


@pytest.mark.parametrize("name", sorted(STAGES))
def test_the_flags_and_the_step_keys_come_from_the_same_definition(name: str) -> None:
    stage: Stage = STAGES[name]
    actions = _actions(name)
    assert set(actions) - set(CLI_ONLY) == set(stage.cli_keys())
    kind = STEP_KINDS[name]
    assert kind.options is stage.options
    assert set(kind.all_params()) == set(stage.step_keys())
    defaults = None if stage.options is None else stage.options.defaults()
    for key, spec in stage.cli_keys().items():
        want = spec.default if isinstance(spec, Input) else getattr(defaults, key)
        if not (isinstance(spec, Input) and (spec.positional or spec.required)):
            assert actions[key].default == want, (key, actions[key].default, want)
        assert spec.help.split(" (default")[0] in (actions[key].help or ""), key
    for key, spec in stage.step_keys().items():
        want = spec.default if isinstance(spec, Input) else getattr(defaults, key)
        assert kind.all_params()[key].default == want, key


@pytest.mark.parametrize("name", sorted(STAGES))
def test_what_one_path_lacks_says_why(name: str) -> None:
    stage = STAGES[name]
    specs = {**stage.inputs, **({} if stage.options is None else stage.options.spec())}
    for key, spec in specs.items():
        if not (spec.cli and spec.step):
            assert spec.why, f"{name}.{key} is on one path only and does not say why"
    for key in stage.shared:
        assert SHARED[key].why, key


@pytest.mark.parametrize(("name", "key", "value", "message"), [
    ("ingest", "chunksize", "0", r"chunksize=0 must lie in \[1, inf\)"),
    ("promote", "n_boot", "0", r"n_boot=0 must lie in \[1, inf\)"),
])
def test_one_check_whatever_the_value_comes_from(
        name: str, key: str, value: str, message: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    stage = STAGES[name]
    assert stage.options is not None
    flag = f"--{key.replace('_', '-')}"
    argv = {"ingest": ["X", "--out", "o"], "promote": ["m", "v1"]}[name]
    parser = cli.build_parser()
    with pytest.raises(SystemExit) as exc:
        parser.parse_args([name, *argv, flag, value])
    assert exc.value.code == 2
    assert re.search(message, capsys.readouterr().err)
    with pytest.raises(ConfigError, match=message):  # a step's key, a TOML table, a call
        stage.options.from_mapping({key: int(value)})
