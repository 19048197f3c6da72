"""One source for every option: each stage's options class makes the command line's flags and
the pipeline step's keys, and gives the library function its keyword defaults. Checked here
for every option of compare, tune, certify, label, promote and monitor: the flag, the step
key and the function's parameter agree on default, type and choices; every other flag of a
command is a step key too, or says why not."""

from __future__ import annotations

import argparse
import inspect
from collections.abc import Callable
from typing import Any

import pytest

from amv_calib import cli
from amv_calib.artifacts import decide_promotion
from amv_calib.calibration import compare_calibrators
from amv_calib.claims import label_logs
from amv_calib.monitoring import derisk, monitor
from amv_calib.pipeline._steps import STEP_KINDS
from amv_calib.settings import (
    CertifyOptions,
    CompareOptions,
    LabelOptions,
    MonitorOptions,
    Options,
    PromoteOptions,
    TuneOptions,
)
from amv_calib.spark import compare_calibrators_spark
from amv_calib.tuning import certify_episodes, tune_thresholds

#: command -> (its options class, the library functions taking them, {option: parameter}
#: where the function spells it otherwise, options the function has no parameter for).
STAGES: dict[str, tuple[type[Options], list[Callable[..., Any]], dict[str, str], set[str]]] = {
    "compare": (CompareOptions, [compare_calibrators, compare_calibrators_spark],
                {"weights": "sample_weight"},
                {"holdout_newest"}),  # the step splits the newest claims off first
    "tune": (TuneOptions, [tune_thresholds], {"workers": "n_workers"},
             {"harm_price"}),  # pinned through `space`
    "certify": (CertifyOptions, [certify_episodes], {},
                {"assume_unseen"}),  # the caller passes seen=None
    "label": (LabelOptions, [label_logs], {},
              {"skip_corrupt", "overwrite"}),  # on_corrupt="skip"; the outputs' writer
    "promote": (PromoteOptions, [decide_promotion], {}, set()),
    "monitor": (MonitorOptions, [monitor], {},
                {"derisk_steps"}),  # derisk(steps=...) acts on the ALERT monitor() reports
}
#: CLI dests that are deliberately not step keys, and why.
NOT_KEYS = {
    "out": "a step writes into its own folder under the work folder",
    "json": "the command's output format; a pipeline prints its report (run --json)",
    "seed": "the pipeline's [pipeline] seed, shared by every step",
    "study_name": "the step names its study after its inputs, so a killed run resumes it",
    "engine": "the pipeline's [pipeline] engine, shared by every step that has two engines",
    "spark_master": "the pipeline's [pipeline] spark_master",
    "spark_scratch": "the pipeline's [pipeline] spark_scratch",
    "artifact": "certify's ARTIFACT: the step takes the tune step's calibrator and thresholds",
    "calibrator": "tune's --calibrator takes an artifact reference too (step: two keys)",
}
#: step keys with no CLI option of the same command, and why.
PIPELINE_ONLY = {
    ("compare", "holdout_newest"): "the promote step judges on the newest claims",
    ("tune", "artifact"): "the CLI's --calibrator takes an artifact reference too",
    ("tune", "calibrator"): "the CLI's --calibrator (a dest of the same name) covers both",
    ("certify", "calibrator"): "the CLI certifies an artifact's calibrator",
    ("certify", "thresholds"): "the CLI certifies an artifact's thresholds",
    ("certify", "tuning"): "the CLI reads the artifact's own tuning record",
    ("monitor", "artifact"): "the CLI's --artifact (a dest of the same name) covers it",
    ("monitor", "model"): "the step names the artifact as model@alias in its models_dir",
    ("monitor", "alias"): "the step names the artifact as model@alias in its models_dir",
    ("monitor", "stop_unless_alert"): "a scheduled job's later steps run only on ALERT",
}
#: CLI dests of one command that are deliberately not its step keys, and why.
CLI_ONLY = {
    ("monitor", "out"): "a step writes into its own folder (its state beside it)",
    ("monitor", "on_alert_overrides"): "--on-alert PIPELINE: in a pipeline, later steps",
    ("monitor", "skip_corrupt"): "the step fails on a corrupt line (a scheduled job must not "
                                 "skip data silently)",
    ("monitor", "trusted_keys"): "the pipeline's gate trusts $AMV_CALIB_TRUSTED_KEYS",
    ("monitor", "no_tracking"): "the pipeline's [pipeline] tracking",
    ("monitor", "tracking_uri"): "the pipeline's [pipeline] tracking_uri",
}


def _parser(command: str) -> argparse.ArgumentParser:
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices[command]  # type: ignore[no-any-return]


def _actions(command: str) -> dict[str, argparse.Action]:
    return {a.dest: a for a in _parser(command)._actions
            if not isinstance(a, argparse._HelpAction)}


@pytest.mark.parametrize("command", sorted(STAGES))
def test_every_option_has_one_default_type_and_check_everywhere(command: str) -> None:
    cls, functions, renamed, not_params = STAGES[command]
    defaults = cls.defaults()
    actions = _actions(command)
    step = STEP_KINDS[command].all_params()
    assert STEP_KINDS[command].options is cls
    assert dict(cls.PARAMETERS) == renamed
    for name, opt in cls.spec().items():
        want = getattr(defaults, name)
        if opt.cli:
            a = actions[name]
            assert a.option_strings[0] == "--" + name.replace("_", "-"), name
            assert a.default == want, (name, a.default, want)
            assert opt.help in (a.help or ""), name
            if opt.choices is not None and opt.type is not list:
                assert tuple(a.choices or ()) == opt.choices, name
        else:
            assert name not in actions, name
        if opt.step:
            assert step[name].default == want and step[name].kind is opt.type, name
        else:
            assert name not in step, name
        for fn in functions:
            params = inspect.signature(fn).parameters
            param = renamed.get(name, name)
            if name in not_params:
                assert param not in params, (fn.__name__, name)
                continue
            assert params[param].default == want, (fn.__name__, name, params[param].default)
    for fn in functions:
        # what the command line and the step pass: every option the function takes
        assert defaults.arguments(fn) == {renamed.get(n, n): getattr(defaults, n)
                                          for n in cls.spec() if n not in not_params}


@pytest.mark.parametrize("command", ["ingest", "compare", "tune", "certify", "label",
                                     "monitor"])
def test_every_other_flag_is_a_step_key_or_says_why_not(command: str) -> None:
    keys = set(STEP_KINDS[command].all_params())
    want = {d for d in _actions(command)
            if d not in NOT_KEYS and (command, d) not in CLI_ONLY}
    only = {k for (c, k) in PIPELINE_ONLY if c == command}
    assert sorted(want - keys) == [], f"{command}: options without a step key"
    assert sorted(keys - want - only) == [], f"{command}: step keys without an option"


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
    cls = STAGES[command][0]
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
