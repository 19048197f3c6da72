"""label and ingest pointed at the same folder: neither silently replaces the other's files
(issue 17, item 11), and with --overwrite nothing stale of the other is left."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from repo_paths import REPO_ROOT

from amv_calib import cli
from amv_calib.claims import (
    WRITTEN_BY,
    OutputConflictError,
    claim_outputs,
    ingest_file,
    record_outputs,
)

EXAMPLES = REPO_ROOT / "data" / "examples"
LABEL = ["label", "--decisions", str(EXAMPLES / "logs" / "decisions.jsonl"),
         "--outcomes", str(EXAMPLES / "logs" / "outcomes.csv")]
MEM0 = ["ingest", "--adapter", "mem0", str(EXAMPLES / "mem0" / "history.json")]


def _record(folder: Path) -> dict[str, str]:
    return dict(json.loads((folder / WRITTEN_BY).read_text(encoding="utf-8"))["files"])


@pytest.mark.parametrize(("first", "second", "other", "mine"), [
    (LABEL, MEM0, "label", "ingest"),
    (MEM0, LABEL, "ingest", "label"),
], ids=["label-then-ingest", "ingest-then-label"])
def test_a_different_command_is_refused_naming_the_file(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], first: list[str],
        second: list[str], other: str, mine: str) -> None:
    out = tmp_path / "mine"
    assert cli.main([*first, "--out", str(out)]) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    capsys.readouterr()
    assert cli.main([*second, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"{out / 'claims.parquet'} was written by `amv-calib {other}`" in err
    assert "--overwrite" in err
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # nothing touched
    assert cli.main([*second, "--out", str(out), "--overwrite"]) == 0
    record = _record(out)
    assert set(record.values()) == {mine}
    # nothing of the other command is left: every file is the new command's or the record
    assert sorted(p.name for p in out.iterdir()) == sorted([*record, WRITTEN_BY])


def test_label_table_form_is_guarded_too(tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "mine"
    assert cli.main([*MEM0, "--out", str(out)]) == 0
    assert cli.main([*LABEL, "--out", str(out / "claims.parquet")]) == 2
    assert "was written by `amv-calib ingest`" in capsys.readouterr().err
    assert cli.main([*LABEL, "--out", str(out / "claims.parquet"), "--overwrite"]) == 0
    assert not (out / "rejects.csv").exists()
    assert _record(out) == {"claims.parquet": "label", "claims.join_report.json": "label",
                            "claims.unjoined.csv": "label"}


def test_the_same_command_rewrites_its_own_files(repo_root: Path, tmp_path: Path) -> None:
    src = repo_root / "data" / "sample" / "claims.csv"
    ingest_file(src, tmp_path)
    ingest_file(src, tmp_path)  # no conflict with itself
    assert _record(tmp_path) == {"claims.parquet": "ingest", "rejects.csv": "ingest",
                                 "rejects.jsonl": "ingest"}
    with pytest.raises(OutputConflictError, match=r"claims\.parquet was written by `amv-calib "
                                                  r"ingest`"):
        claim_outputs(tmp_path, "label", ["claims.parquet"])


def test_unrecorded_files_are_replaced_as_before(tmp_path: Path) -> None:
    (tmp_path / "claims.parquet").write_bytes(b"by hand")
    claim_outputs(tmp_path, "label", ["claims.parquet"])  # no record: nothing to refuse
    record_outputs(tmp_path, "label", ["claims.parquet"])
    assert _record(tmp_path) == {"claims.parquet": "label"}


def test_pipeline_steps_record_their_files(tmp_path: Path) -> None:
    from amv_calib.pipeline._runner import load_pipeline, run_pipeline

    toml = tmp_path / "p.toml"
    toml.write_text(f"""
[pipeline]
name = "p"
workdir = "work"
tracking = false

[[steps]]
name = "label"
kind = "label"
decisions = ["{EXAMPLES / 'logs' / 'decisions.jsonl'}"]
outcomes = ["{EXAMPLES / 'logs' / 'outcomes.csv'}"]

[[steps]]
name = "ingest"
kind = "ingest"
input = "@label.claims"
""", encoding="utf-8")
    res = run_pipeline(load_pipeline(toml))
    steps = {s.name: s for s in res.steps}
    label_dir = Path(steps["label"].outputs["dir"])
    assert set(_record(label_dir).values()) == {"label"}
    assert set(_record(Path(steps["ingest"].outputs["claims"]).parent).values()) == {"ingest"}
