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
    assert "amv-calib rollback amv-guard --alias staging" in text

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
