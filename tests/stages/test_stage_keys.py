"""Every stage's command and step kind are made from one definition: the command's flags and
the step's keys are its inputs and its options object, with the same defaults and checks;
what only one path has says why, and the command-only flags are named once
(:data:`~amv_calib.stages.CLI_ONLY`)."""

from __future__ import annotations

import argparse
import inspect
import re
from collections.abc import Callable
from typing import Any

import pytest

from amv_calib import cli
from amv_calib.artifacts import decide_promotion
from amv_calib.calibration import compare_calibrators
from amv_calib.claims import label_logs_parts
from amv_calib.exceptions import ConfigError
from amv_calib.monitoring import derisk, monitor
from amv_calib.pipeline._steps import STEP_KINDS
from amv_calib.settings import (
    CertifyOptions,
    CompareOptions,
    LabelOptions,
    MonitorOptions,
    Option,
    Options,
    PromoteOptions,
    ReplayOptions,
    TransferOptions,
    TuneOptions,
)
from amv_calib.spark import compare_calibrators_spark
from amv_calib.stages import CLI_ONLY, SHARED, STAGES, Input, Stage
from amv_calib.tuning import certify_episodes, replay, transfer_check, tune_thresholds

#: command -> (its options class, the library functions taking them, {option: parameter}
#: where the function spells it otherwise, options the function has no parameter for).
LIBRARY: dict[str, tuple[type[Options], list[Callable[..., Any]], dict[str, str], set[str]]] = {
    "compare": (CompareOptions, [compare_calibrators, compare_calibrators_spark],
                {"weights": "sample_weight"},
                {"holdout_newest"}),  # the step splits the newest claims off first
    "tune": (TuneOptions, [tune_thresholds], {"workers": "n_workers"},
             {"harm_price"}),  # pinned through `space`
    "certify": (CertifyOptions, [certify_episodes], {},
                {"assume_unseen"}),  # the caller passes seen=None
    "label": (LabelOptions, [label_logs_parts], {},
              {"skip_corrupt", "overwrite"}),  # on_corrupt="skip"; the outputs' writer
    "promote": (PromoteOptions, [decide_promotion], {}, set()),
    "monitor": (MonitorOptions, [monitor], {},
                # derisk(steps=...) acts on the ALERT monitor() reports; on_corrupt="skip"
                {"derisk_steps", "skip_corrupt"}),
    "replay": (ReplayOptions, [replay], {"jobs": "n_jobs"},
               {"harm_price", "by_family"}),  # the gate's harm price; the summary's tables
    "transfer": (TransferOptions, [transfer_check], {}, set()),
}


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
        if not (isinstance(spec, Input) and (spec.positional or spec.required
                                             or spec.cli_required)):
            assert actions[key].default == want, (key, actions[key].default, want)
        assert spec.help.split(" (default")[0] in (actions[key].help or ""), key
    for key, spec in stage.step_keys().items():
        want = spec.default if isinstance(spec, Input) else getattr(defaults, key)
        assert kind.all_params()[key].default == want, key


@pytest.mark.parametrize("name", sorted(STAGES))
def test_what_one_path_lacks_says_why(name: str) -> None:
    stage = STAGES[name]
    specs: dict[str, Input | Option] = {
        **stage.inputs, **({} if stage.options is None else stage.options.spec())}
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


@pytest.mark.parametrize("command", sorted(LIBRARY))
def test_the_library_functions_take_the_options_defaults(command: str) -> None:
    cls, functions, renamed, not_params = LIBRARY[command]
    defaults = cls.defaults()
    assert dict(cls.PARAMETERS) == renamed
    for name in cls.spec():
        for fn in functions:
            params = inspect.signature(fn).parameters
            param = renamed.get(name, name)
            if name in not_params:
                assert param not in params, (fn.__name__, name)
                continue
            assert params[param].default == getattr(defaults, name), (fn.__name__, name)
    for fn in functions:
        # what the command line and the step pass: every option the function takes
        assert defaults.arguments(fn) == {renamed.get(n, n): getattr(defaults, n)
                                          for n in cls.spec() if n not in not_params}


def _parser(command: str) -> argparse.ArgumentParser:
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices[command]  # type: ignore[no-any-return]


@pytest.mark.parametrize(("command", "argv", "message"), [
    ("compare", ["--folds", "1"], r"--folds=1 must lie in \[2, inf\)"),
    ("tune", ["--target-harmful", "1.5"], r"--target_harmful=1.5 must lie in \[0, 1\]"),
    ("certify", ["--alpha", "0"], r"--alpha=0.0 must lie in \(0, 1\)"),
    ("label", ["--min-verifier-calls", "-1"], r"--min_verifier_calls=-1 must lie in \[0, inf\)"),
    ("monitor", ["--derisk-steps", "0"], r"--derisk_steps=0 must lie in \[1, inf\)"),
], ids=["compare", "tune", "certify", "label", "monitor"])
def test_the_command_line_refuses_what_the_library_refuses(
        command: str, argv: list[str], message: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    from amv_calib.exceptions import ConfigError

    with pytest.raises(SystemExit) as exc:
        _parser(command).parse_args(["X", *argv] if command not in ("label", "monitor")
                                    else ["--decisions", "d", "--out", "o", *argv])
    assert exc.value.code == 2
    import re

    assert re.search(message, capsys.readouterr().err)
    # the same check, from a pipeline step's table or a library call
    cls = LIBRARY[command][0]
    name = argv[0].removeprefix("--").replace("-", "_")
    with pytest.raises(ConfigError, match=f"{command}.{name}="):
        cls.from_mapping({name: cls.spec()[name].type(argv[1])})


def test_compare_ties_and_weights_are_decided_in_one_place() -> None:
    # Both entry points once spelt these differently (the CLI broke ties by the other rule,
    # the step did not; the step weighed by label_weight, the CLI by nothing): now the
    # library decides, from the same options.
    from amv_calib.calibration import tie_break_of, weight_column

    assert tie_break_of("log_loss") == "brier" and tie_break_of("brier") == "log_loss"
    assert weight_column(["label_weight", "x"], "auto") == ("label_weight", True)
    assert weight_column(["x"], "auto") == (None, False)
    assert weight_column(["w"], "w") == ("w", False)
    assert weight_column(["label_weight"], "none") == (None, False)
    assert _actions("compare")["weights"].option_strings == ["--weights", "--weight-column"]


def test_derisk_steps_default_is_the_monitor_options_one() -> None:
    # the one option monitor() has no parameter for: derisk() takes it, as `steps`
    assert inspect.signature(derisk).parameters["steps"].default == \
        MonitorOptions.defaults().derisk_steps


def test_arguments_refuses_a_function_taking_kwargs() -> None:
    # write_label_spark takes soft_labels through **options: its signature does not say so,
    # and Options.arguments would have left it out without a word
    from amv_calib.spark import write_label_spark

    with pytest.raises(TypeError, match=r"write_label_spark takes \*\*kwargs"):
        LabelOptions().arguments(write_label_spark)


def test_the_command_only_flags_are_named_once_with_a_reason() -> None:
    # every flag a stage's command has beyond its keys is one of these four, each saying why
    # no step has it (the first test above holds each command to them)
    assert set(CLI_ONLY) == {"out", "json", "quiet", "verbose"}
    assert all(reason.strip() for reason in CLI_ONLY.values())
    assert {"replay", "transfer", "monitor"} <= set(STAGES)
