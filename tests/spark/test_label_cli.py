"""The Spark label through the CLI and the streaming writer, on a generated log with every
case (tests/spark/_messy.py): ``label --engine spark`` writes the single-machine files to the
byte (a folder and a .jsonl table, the scratch folder emptied each time), and the driver
collects no per-use rows (the tests' session, whose result cap is smaller than them, labels
the log)."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest

from amv_calib.cli import main
from amv_calib.spark import write_label_spark

from ._jvm import RESULT_CAP
from ._messy import same_report_file, write_messy

LINES = 80_000


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[Path], Path]:
    """Two logs of 40k lines each and their outcomes."""
    return write_messy(tmp_path_factory.mktemp("messy"), LINES, seed=5)


def _head(log: Path, lines: int, out: Path) -> Path:
    """The first ``lines`` lines of ``log``, written to ``out``."""
    out.write_text("".join(log.read_text().splitlines(keepends=True)[:lines]))
    return out


def test_cli_label_engine_spark_writes_the_same_files(
        data: tuple[list[Path], Path], spark: Any, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    logs, outcomes = data
    small = _head(logs[0], 5000, tmp_path / "d.jsonl")
    args = ["label", "--decisions", str(small), "--outcomes", str(outcomes),
            "--skip-corrupt", "--min-verifier-calls", "20"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert main([*args, "--out", str(tmp_path / "local")]) == 0
        assert main([*args, "--out", str(tmp_path / "spark"), "--engine", "spark",
                     "--spark-master", "local[2]",
                     "--spark-scratch", str(tmp_path / "scratch")]) == 0
    capsys.readouterr()
    for name in ("claims.parquet", "claims.unjoined.csv", "episodes.jsonl", "verifiers.json"):
        assert (tmp_path / "spark" / name).read_bytes() == (tmp_path / "local" / name) \
            .read_bytes(), name
    same_report_file(tmp_path / "local" / "claims.join_report.json",
                     tmp_path / "spark" / "claims.join_report.json")
    assert list((tmp_path / "scratch").iterdir()) == []  # the part files are removed


def test_streamed_table_is_the_single_machine_table(
        data: tuple[list[Path], Path], spark: Any, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    # a table output other than Parquet (the folder above holds claims.parquet)
    suffix = ".jsonl"
    logs, outcomes = data
    small = _head(logs[1], 4000, tmp_path / "d.jsonl")
    args = ["label", "--decisions", str(small), "--outcomes", str(outcomes), "--skip-corrupt"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert main([*args, "--out", str(tmp_path / "local" / f"c{suffix}")]) == 0
        assert main([*args, "--out", str(tmp_path / "spark" / f"c{suffix}"), "--engine",
                     "spark", "--spark-master", "local[2]",
                     "--spark-scratch", str(tmp_path / "scratch")]) == 0
    capsys.readouterr()
    for name in (f"c{suffix}", "c.unjoined.csv"):
        assert (tmp_path / "spark" / name).read_bytes() == \
            (tmp_path / "local" / name).read_bytes(), name
    same_report_file(tmp_path / "local" / "c.join_report.json",
                      tmp_path / "spark" / "c.join_report.json")
    assert list((tmp_path / "scratch").iterdir()) == []  # the part files are removed


def test_the_driver_collects_no_per_use_rows(
        data: tuple[list[Path], Path], spark: Any, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    # The tests' session lets the driver collect RESULT_CAP per job (tests/spark/_jvm.py):
    # collecting 1 M longs fails there, and the label of a log whose claim rows and unjoined
    # uses are several times the cap succeeds, writing the same files.
    with pytest.raises(Exception, match="maxResultSize"):
        spark.range(1_000_000).toPandas()
    logs, outcomes = data
    small = _head(logs[0], 40_000, tmp_path / "d.jsonl")
    out = tmp_path / "spark" / "claims.parquet"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        write_label_spark([small], [outcomes], spark=spark, out=out, on_corrupt="skip")
        assert main(["label", "--decisions", str(small), "--outcomes", str(outcomes),
                     "--skip-corrupt", "--out", str(tmp_path / "local" / "claims.parquet")]) == 0
    capsys.readouterr()
    rows = tmp_path / "spark" / "claims.unjoined.csv"
    cap = int(RESULT_CAP.removesuffix("m")) << 20
    assert out.stat().st_size + rows.stat().st_size > 2 * cap  # what would have been collected
    for name in ("claims.parquet", "claims.unjoined.csv"):
        assert (tmp_path / "spark" / name).read_bytes() == \
            (tmp_path / "local" / name).read_bytes(), name
