"""Every option a user may need of ``ingest``, ``label``, ``compare`` and ``tune`` is also a key
of its pipeline step, and the other way round: the two lists are compared here, and each
option that is not a key says why."""

from __future__ import annotations

import argparse

import pytest

from amv_calib import cli
from amv_calib.pipeline._steps import STEP_KINDS

#: command -> {CLI dest: step key} where the two are spelt differently.
RENAMED = {
    "compare": {"weight_column": "weights"},
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
}
#: step keys with no CLI option of the same command, and why.
PIPELINE_ONLY = {
    ("compare", "holdout_newest"): "the promote step judges on the newest claims",
    ("tune", "artifact"): "the CLI's --calibrator takes an artifact reference too",
}


def _dests(command: str) -> set[str]:
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return {a.dest for a in sub.choices[command]._actions
            if not isinstance(a, argparse._HelpAction)}


@pytest.mark.parametrize("command", ["ingest", "label", "compare", "tune"])
def test_cli_options_and_step_keys_match(command: str) -> None:
    keys = set(STEP_KINDS[command].params)
    renamed = RENAMED.get(command, {})
    want = {renamed.get(d, d) for d in _dests(command) if d not in NOT_KEYS}
    only = {k for (c, k) in PIPELINE_ONLY if c == command}
    assert sorted(want - keys) == [], f"{command}: options without a step key"
    assert sorted(keys - want - only) == [], f"{command}: step keys without an option"


def test_allow_constant_features_reaches_the_compare_step() -> None:
    assert STEP_KINDS["compare"].params["allow_constant_features"].default is False
    assert STEP_KINDS["label"].params["min_verifier_calls"].default == 200
