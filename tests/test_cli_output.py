"""Every command prints a short summary for a person by default and, with ``--json``, the
full object for a script: the same facts in both (issue 31, item 5)."""

from __future__ import annotations

import argparse
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from amv_calib import cli

#: At most this many lines for a person; the full object is behind --json.
SHORT: int = 12

Run = Callable[..., tuple[str, Any]]


@pytest.fixture
def both(capsys: pytest.CaptureFixture[str]) -> Run:
    """Run a command as text, then with --json (on ``json_argv`` when given: for a command
    that writes something only once); both must succeed."""

    def run(*argv: str, json_argv: tuple[str, ...] | None = None) -> tuple[str, Any]:
        assert cli.main(list(argv)) == 0
        text = capsys.readouterr().out
        assert cli.main([*(json_argv or argv), "--json"]) == 0
        data = json.loads(capsys.readouterr().out)
        assert 0 < len(text.splitlines()) <= SHORT, text
        with pytest.raises(json.JSONDecodeError):
            json.loads(text)  # the summary is words, not the object
        return text, data

    return run


def test_every_command_but_the_gate_takes_json() -> None:
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name, command in sub.choices.items():
        has = any("--json" in a.option_strings for a in command._actions)
        assert has == (name not in ("gate", "ui-command")), name


def test_label_summary_and_json_agree(tmp_path: Path, examples_dir: Path, both: Run) -> None:
    logs = examples_dir / "logs"
    log, outcomes = logs / "decisions.jsonl", logs / "outcomes.csv"
    text, data = both("label", "--decisions", str(log), "--outcomes", str(outcomes), "--out",
                      str(tmp_path / "a.parquet"),
                      json_argv=("label", "--decisions", str(log), "--outcomes",
                                 str(outcomes), "--out", str(tmp_path / "b.parquet")))
    assert f"read {data['decision_lines']:,} decision lines" in text
    assert f"labelled {data['joined']:,} uses" in text
    assert str((tmp_path / "a.parquet").resolve()) in text
    for reason, n in data["unjoined"].items():
        if n:
            assert f"{n:,} {reason.replace('_', ' ')}" in text


def test_artifact_commands_summary_and_json_agree(tmp_path: Path, repo_root: Path,
                                                  both: Run) -> None:
    models = tmp_path / "models"
    shutil.copytree(repo_root / "models" / "amv-guard", models / "amv-guard")
    v1 = models / "amv-guard" / "v1"
    text, data = both("verify-artifact", str(v1))
    assert data["ok"] is True and text.startswith(f"OK: amv-guard v1 ({v1})")
    assert data["certificate_check"]["certified"] in text
    assert "signature not checked" in text

    keys = tmp_path / "keys"
    text, data = both("keygen", "--out", str(keys),
                      json_argv=("keygen", "--out", str(keys), "--overwrite"))
    assert str(Path(data["private_key"]).resolve()) in text and "0600" in text

    text, data = both("sign", str(v1), "--key", data["private_key"])
    # ECDSA signatures differ each time: the summary names the file and a digest
    assert str(Path(data["signature"]).resolve()) in text and "(sha256 " in text

    base = ("--models-dir", str(models))
    text, data = both("promote", "amv-guard", "v1", "--alias", "staging", *base)
    assert data["version"] == "v1" and text.startswith("amv-guard@staging is v1 now")
    # a new alias: nothing earlier, nothing to roll back to
    assert "(earlier: none)" in text and "undo: none" in text

    out = tmp_path / "b.tar.gz"
    text, data = both("bundle", "amv-guard", "v1", "--out", str(out), *base)
    assert data["sha256"][:12] in text and str(out.resolve()) in text
    assert "amv-calib unbundle" in text

    text, data = both("unbundle", str(out), "--models-dir", str(tmp_path / "elsewhere"),
                      json_argv=("unbundle", str(out), "--models-dir",
                                 str(tmp_path / "elsewhere")))
    assert text.startswith("installed: amv-guard v1")
    assert data["installed"] is False  # the second time: the same files were there


def test_synth_summary_and_json_agree(tmp_path: Path, both: Run) -> None:
    text, data = both("synth", "claims", "--n", "50", "--out", str(tmp_path / "c.csv"))
    assert text.startswith("wrote 50 synthetic claims") and data["sha256"] in text


def test_promote_and_rollback_print_the_command_that_undoes_them(
        tmp_path: Path, models_with_v2: Path, capsys: pytest.CaptureFixture[str]) -> None:
    models = models_with_v2
    base = ["--models-dir", str(models), "--alias", "staging"]
    assert cli.main(["promote", "amv-guard", "v1", *base]) == 0
    assert cli.main(["promote", "amv-guard", "v2", *base]) == 0
    out, err = capsys.readouterr()
    last = out.splitlines()[-2:]
    # "earlier" holds the versions before the current one, not the current one
    assert last[0] == "amv-guard@staging is v2 now (earlier: v1)"
    assert last[1] == "undo: amv-calib rollback amv-guard --alias staging"
    assert "now points at" not in err  # announced once, on stdout
    assert cli.main(["rollback", "amv-guard", *base]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "amv-guard@staging is v1 now (earlier: none)"
    undo = out[1].removeprefix("undo: ")
    assert undo == "amv-calib promote amv-guard v2 --alias staging"
    # running the printed command restores the state before the rollback
    assert cli.main([*undo.split()[1:], "--models-dir", str(models), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["history"] == ["v1", "v2"]


@pytest.mark.parametrize("argv", [
    ["verify-artifact", "{models}/amv-guard@prod"],
    ["promote", "amv-guard", "prod", "--alias", "staging", "--models-dir", "{models}"],
    ["bundle", "amv-guard", "prod", "--out", "{models}/b.tar.gz", "--models-dir", "{models}"],
    ["rollback", "amv-guard", "--alias", "prod", "--models-dir", "{models}"],
    ["gate", "--artifact", "{models}/amv-guard@prod", "--action", "{action}"],
])
def test_an_unknown_alias_is_a_usage_error_with_a_hint(
        argv: list[str], models_with_v2: Path, examples_dir: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    models = models_with_v2
    args = [a.format(models=models, action=examples_dir / "action.json") for a in argv]
    assert cli.main(args) == 2
    captured = capsys.readouterr()
    assert captured.out == ""  # the gate prints no decision for a mistyped alias
    assert "no alias 'prod'" in captured.err
    aliases = json.loads((models / "amv-guard" / "aliases.json").read_text("utf-8"))
    assert f"known aliases: {', '.join(sorted(aliases['aliases']))})" in captured.err
    assert "did you mean production?" in captured.err


def test_the_runtime_gate_still_abstains_on_an_unknown_alias(
        models_with_v2: Path, examples_dir: Path) -> None:
    from amv_calib.gate import CandidateAction, Gate

    models = models_with_v2
    gate = Gate.from_artifact(f"{models / 'amv-guard'}@prod")
    data = json.loads((examples_dir / "action.json").read_text(encoding="utf-8"))
    action = CandidateAction.from_dict({k: v for k, v in data["action"].items()
                                        if k != "verifiers"})
    d = gate.evaluate(action, [])
    assert d.regime == "ABSTAIN" and "did you mean production?" in d.reason


def test_label_and_ingest_say_what_they_wrote(tmp_path: Path, examples_dir: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    logs = examples_dir / "logs"
    out = tmp_path / "label"
    assert cli.main(["label", "--decisions", str(logs / "decisions.jsonl"), "--outcomes",
                     str(logs / "outcomes.csv"), "--out", str(out)]) == 0
    text = capsys.readouterr().out
    verifiers = json.loads((out / "verifiers.json").read_text(encoding="utf-8"))
    assert f"episodes:  {(out / 'episodes.jsonl').resolve()}" in text
    assert f"verifiers: {(out / 'verifiers.json').resolve()}" in text
    flagged = [n for n, v in verifiers["verifiers"].items() if v["declared_outside_interval"]]
    assert flagged  # the example logs hold a verifier that overstates its reliability
    for name in flagged:
        v = verifiers["verifiers"][name]
        assert (f"flagged: verifier {name} declares reliability {v['declared']:g}, its "
                f"labelled answers give {v['reliability']['estimate']:.3f}") in text
    nxt = text.splitlines()[-1]
    assert nxt.startswith(f"next: amv-calib compare {(out / 'claims.parquet').resolve()} --out ")
    assert "CLAIMS" not in nxt and "DIR" not in nxt

    assert cli.main(["ingest", str(out / "claims.parquet"), "--out",
                     str(tmp_path / "ingest")]) == 0
    captured = capsys.readouterr()
    # label's own columns are known: no warning, no "ignored" line
    assert "ignor" not in captured.out + captured.err
    assert captured.out.splitlines()[-1].startswith(
        f"next: amv-calib compare {(tmp_path / 'ingest' / 'claims.parquet').resolve()} --out ")


def test_label_columns_are_every_column_label_adds(tmp_path: Path,
                                                   examples_dir: Path) -> None:
    import pandas as pd

    from amv_calib.claims import LABEL_COLUMNS
    from amv_calib.contract import OPTIONAL_COLUMNS, REQUIRED_COLUMNS

    logs = examples_dir / "logs"
    assert cli.main(["label", "--decisions", str(logs / "decisions.jsonl"), "--outcomes",
                     str(logs / "outcomes.csv"), "--out", str(tmp_path / "c.parquet")]) == 0
    columns = set(pd.read_parquet(tmp_path / "c.parquet").columns)
    assert columns - set(REQUIRED_COLUMNS) - set(OPTIONAL_COLUMNS) == set(LABEL_COLUMNS)
