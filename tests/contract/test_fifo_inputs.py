"""A FIFO given as any user file is refused at once (exit 2, naming it) by every command that
reads the user's files: none waits for a writer.
"""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd
import pytest
from threat_helpers import CLAIM_ROW, answers_within


# -- readers hang on a FIFO or a device ------------------------------------------------------------
@pytest.fixture
def fifos(tmp_path: Path) -> dict[str, Path]:
    """A FIFO under each name a reader might be given (nobody ever writes to them)."""
    out = {}
    for name in ("claims.csv", "log.jsonl", "outcomes.csv", "episodes.jsonl", "config.toml",
                 "action.json"):
        out[name] = tmp_path / "fifo" / name
        out[name].parent.mkdir(exist_ok=True)
        os.mkfifo(out[name])
    folder = tmp_path / "parquet"
    folder.mkdir()
    pd.DataFrame([CLAIM_ROW]).to_parquet(folder / "a.parquet")
    os.mkfifo(folder / "b.parquet")
    out["parquet folder"] = folder
    return out


def _reader_cases(f: dict[str, Path], tmp: Path, repo: Path) -> dict[str, list[str]]:
    art = str(repo / "models" / "amv-guard" / "v1")
    log = str(repo / "data" / "examples" / "decisions.jsonl")
    return {
        "ingest": ["ingest", str(f["claims.csv"]), "--out", str(tmp / "i")],
        "ingest-parquet-folder": ["ingest", str(f["parquet folder"]), "--out", str(tmp / "j")],
        "label-decisions": ["label", "--decisions", str(f["log.jsonl"]), "--out",
                            str(tmp / "l.parquet")],
        "label-outcomes": ["label", "--decisions", log, "--outcomes", str(f["outcomes.csv"]),
                           "--out", str(tmp / "m.parquet")],
        "replay": ["replay", str(f["episodes.jsonl"]), "--policy", "always-proceed"],
        "certify": ["certify", art, str(f["episodes.jsonl"])],
        "monitor-decisions": ["monitor", "--artifact", art, "--decisions",
                              str(f["log.jsonl"]), "--no-tracking"],
        "monitor-config": ["monitor", "--artifact", art, "--decisions", log, "--config",
                           str(f["config.toml"]), "--no-tracking"],
        "gate-action": ["gate", "--action", str(f["action.json"]), "--no-artifact"],
    }


_READERS = ["ingest", "ingest-parquet-folder", "label-decisions", "label-outcomes", "replay",
            "certify", "monitor-decisions", "monitor-config", "gate-action"]


@pytest.mark.parametrize("reader", _READERS, ids=_READERS)
def test_every_reader_refuses_a_fifo_at_once(
        fifos: dict[str, Path], tmp_path: Path, repo_root: Path, reader: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    # Attack: `mkfifo f.csv; amv-calib ingest f.csv` hung (open() waits for a writer). Now
    # every reader of the user's files opens regular files only and says so at once.
    argv = _reader_cases(fifos, tmp_path, repo_root)[reader]
    assert answers_within(argv) == 2
    err = capsys.readouterr().err
    assert "is a FIFO, not a regular file" in err, err
