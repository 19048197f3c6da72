"""The command line's shared pieces: every command that has a shared option gets it with the
same flag, default and metavar (help text may be the command's own), and every sub-command
runs its stage, or its own ``_run_<command>`` function."""

from __future__ import annotations

import argparse
from typing import Any

import pytest

from amv_calib import cli
from amv_calib.settings import DEFAULT_ALIAS, DEFAULT_SEED
from amv_calib.stages import STAGES, run_command


def _commands() -> dict[str, argparse.ArgumentParser]:
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def _option(p: argparse.ArgumentParser, dest: str) -> argparse.Action:
    return next(a for a in p._actions if a.dest == dest)


def test_every_command_runs_its_own_function() -> None:
    # a stage's command runs the stage (its step kind runs the same one); the few other
    # commands each their own ``_run_<command>``
    for name, p in _commands().items():
        run = p.get_default("func")
        if name in STAGES:
            assert p.get_default("stage") is STAGES[name]
            assert run is run_command, name
        else:
            assert run.__name__ == "_run_" + name.replace("-", "_"), name


@pytest.mark.parametrize(("dest", "commands", "want"), [
    ("models_dir", ["export", "promote", "rollback", "bundle", "unbundle"],
     {"option_strings": ["--models-dir"], "default": None, "metavar": "DIR",
      "help": "artifact root (default: $AMV_CALIB_MODELS_DIR, else models/ in the nearest "
              "folder upwards from here that holds one, else here)"}),
    ("tracking_uri", ["register", "registry-promote", "ui-command"],
     {"option_strings": ["--tracking-uri"], "default": None,
      "help": "MLflow tracking URI (default: $MLFLOW_TRACKING_URI, else sqlite:///mlflow.db)"}),
    ("tracking_uri", ["run"],
     {"option_strings": ["--tracking-uri"], "default": None,
      "help": "MLflow tracking URI (default: the file's [pipeline] tracking_uri, else "
              "$MLFLOW_TRACKING_URI, else sqlite:///mlflow.db)"}),
    ("json", ["compare", "replay", "tune", "transfer", "register", "registry-promote", "run"],
     {"option_strings": ["--json"], "default": False, "const": True}),
    ("seed", ["synth", "compare", "replay", "tune", "transfer"],
     {"option_strings": ["--seed"], "default": DEFAULT_SEED, "type": int}),
    ("out", ["ingest", "compare"],
     {"option_strings": ["--out"], "required": True, "metavar": "DIR",
      "help": "output directory"}),
    ("episodes", ["replay", "tune", "transfer"],
     {"option_strings": [], "metavar": "EPISODES", "help": "episodes JSONL file"}),
    ("alias", ["promote", "rollback"],
     {"option_strings": ["--alias"], "default": DEFAULT_ALIAS,
      "help": f"default: {DEFAULT_ALIAS}"}),
    ("version", ["promote", "bundle"],
     {"option_strings": [], "metavar": "VERSION",
      "help": "vN, or an alias naming one (challenger, production)"}),
])
def test_shared_options_are_alike(dest: str, commands: list[str], want: dict[str, Any]) -> None:
    parsers = _commands()
    for name in commands:
        action = _option(parsers[name], dest)
        assert {k: getattr(action, k) for k in want} == want, name


@pytest.mark.parametrize(("command", "default", "metavar"), [
    ("compare", 200, "N"), ("replay", 1000, None), ("tune", 500, "N"), ("transfer", 500, "N"),
])
def test_n_boot_defaults(command: str, default: int, metavar: str | None) -> None:
    action = _option(_commands()[command], "n_boot")
    assert (action.option_strings, action.default, action.metavar) == (
        ["--n-boot"], default, metavar)
    assert action.type is not None and action.type("7") == 7


def test_seed_help_is_each_commands_own() -> None:
    parsers = _commands()
    assert {c: _option(parsers[c], "seed").help for c in
            ("synth", "compare", "replay", "tune", "transfer")} == {
        "synth": f"random seed (default: {DEFAULT_SEED})",
        "compare": f"bootstrap seed (default {DEFAULT_SEED})",
        "replay": f"answer stream and bootstrap (default {DEFAULT_SEED})",
        "tune": f"seed of the sampler, split and answer stream (default {DEFAULT_SEED})",
        "transfer": f"seed of the sampler, split and answer stream (default {DEFAULT_SEED})"}


def test_every_command_has_a_description_and_every_argument_help() -> None:
    missing = []
    for name, p in _commands().items():
        if not p.description:
            missing.append(f"{name}: description")
        missing += [f"{name}: {a.option_strings or a.dest}" for a in p._actions
                    if not isinstance(a, argparse._HelpAction) and not a.help]
    assert missing == []


@pytest.mark.parametrize("command", sorted(_commands()), ids=str)
def test_help_prints_without_format_escapes(command: str,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main([command, "--help"])
    out = capsys.readouterr().out
    assert "%%" not in out and "``" not in out and ":func:" not in out


def test_unknown_table_ending_is_refused_before_reading(tmp_path: Any,
                                                        capsys: pytest.CaptureFixture[str]
                                                        ) -> None:
    code = cli.main(["label", "--decisions", str(tmp_path / "missing.jsonl"),
                     "--out", str(tmp_path / "claims.txt")])
    assert code == 2
    assert "unknown ending '.txt'; use one of .parquet, .pq, .csv, .jsonl, .ndjson" in \
        capsys.readouterr().err


def _help_texts() -> list[tuple[str, str]]:
    """(command, text) for every description and option help of every command."""
    out = []
    for name, p in _commands().items():
        out.append((name, p.description or ""))
        out += [(name, a.help or "") for a in p._actions]
    return out


def test_every_option_states_its_default() -> None:
    # an option a user may leave out says what happens then; flags (on/off) and required
    # options have none to state
    missing = [f"{name}: {'/'.join(a.option_strings)}" for name, p in _commands().items()
               for a in p._actions
               if a.option_strings and not a.required and a.nargs != 0
               and "default" not in (a.help or "")]
    assert missing == []


def test_readme_sections_and_files_named_in_help_exist(repo_root: Any) -> None:
    import re

    headings = {re.sub(r"^#+\s*", "", line).strip()
                for line in (repo_root / "README.md").read_text().splitlines()
                if line.startswith("#")}
    named, files = [], []
    for name, text in _help_texts():
        flat = " ".join(text.split())
        named += [(name, s) for s in re.findall(r'README,? "([^"]+)"', flat)]
        files += [(name, f) for f in re.findall(r"\b((?:docs|data|pipelines)/[\w./-]+\w)", flat)]
    assert named, "the gate's help names a README section: the check must see it"
    assert [(n, s) for n, s in named if s not in headings] == []
    assert [(n, f) for n, f in files if not (repo_root / f).exists()] == []
