"""A regular file that cannot be read (``/proc/self/mem`` answers every read with EIO) is a
clear error naming the file, exit 2, from every command that reads the user's files."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from amv_calib.cli import main

MEM = Path("/proc/self/mem")
pytestmark = pytest.mark.skipif(not MEM.exists(), reason="needs /proc/self/mem (Linux)")


def _cases(tmp: Path, repo: Path) -> dict[str, tuple[list[str], Path, str]]:
    """reader -> (argv, the unreadable path it is given, what the error calls it)."""
    def mem(name: str) -> Path:
        path = tmp / "mem" / name
        path.parent.mkdir(exist_ok=True)
        path.symlink_to(MEM)  # /proc/self: the process that reads it
        return path

    art = str(repo / "models" / "amv-guard" / "v1")
    log = str(repo / "data" / "examples" / "decisions.jsonl")
    cases: dict[str, tuple[list[str], Path, str]] = {}
    for name in ("claims.csv", "claims.jsonl", "claims.csv.gz"):
        p = mem(name)
        cases[f"ingest {name}"] = (["ingest", str(p), "--out", str(tmp / name)], p,
                                   "input file")
    p = mem("log.jsonl")
    cases["label --decisions"] = (["label", "--decisions", str(p), "--out",
                                   str(tmp / "l.parquet")], p, "decision log")
    for name in ("outcomes.csv", "outcomes.jsonl"):
        p = mem(name)
        cases[f"label --outcomes {name}"] = (["label", "--decisions", log, "--outcomes", str(p),
                                             "--out", str(tmp / f"{name}.parquet")], p,
                                            "outcome file")
    p = mem("episodes.jsonl")
    cases["replay"] = (["replay", str(p), "--policy", "always-proceed"], p, "episodes file")
    cases["certify"] = (["certify", art, str(p)], p, "episodes file")
    p = mem("action.json")
    cases["gate --action"] = (["gate", "--action", str(p), "--no-artifact"], p,
                              "--action file")
    p = mem("config.toml")
    cases["monitor --config"] = (["monitor", "--artifact", art, "--decisions", log, "--config",
                                  str(p), "--no-tracking"], p, "--config file")
    return cases


_READERS = ["ingest claims.csv", "ingest claims.jsonl", "ingest claims.csv.gz",
            "label --decisions", "label --outcomes outcomes.csv",
            "label --outcomes outcomes.jsonl", "replay", "certify", "gate --action",
            "monitor --config"]


@pytest.mark.parametrize("reader", _READERS)
def test_an_unreadable_file_is_a_clear_error_not_a_traceback(
        reader: str, tmp_path: Path, repo_root: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    # Attack: `label --decisions /proc/self/mem` ended in an OSError traceback (EIO on the
    # first read of a file that passed the regular-file check).
    argv, path, what = _cases(tmp_path, repo_root)[reader]
    code: list[int] = []
    thread = threading.Thread(target=lambda: code.append(main(argv)), daemon=True)
    thread.start()
    thread.join(120)
    assert not thread.is_alive(), f"amv-calib {reader} hung"
    err = capsys.readouterr().err
    assert code == [2], err
    assert f"{path}: cannot read the {what} ({os.strerror(5)})" in err, err
