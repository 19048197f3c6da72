"""The Spark label through the CLI and the streaming writer, on a generated log with every
case (tests/spark/_messy.py): ``label --engine spark`` writes the single-machine files to the
byte (a folder, and the table outputs .parquet and .jsonl with the scratch folder emptied),
and the driver collects no per-use rows (a session whose result cap is smaller than them
labels the log). Apart from tests/spark/test_label.py so that the two halves can run on two
test workers."""

from __future__ import annotations

import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest

from amv_calib.cli import main

from ._jvm import JVM_OPTIONS
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
                     "--spark-master", "local[2]"]) == 0
    capsys.readouterr()
    for name in ("claims.parquet", "claims.unjoined.csv", "episodes.jsonl", "verifiers.json"):
        assert (tmp_path / "spark" / name).read_bytes() == (tmp_path / "local" / name) \
            .read_bytes(), name
    same_report_file(tmp_path / "local" / "claims.join_report.json",
                     tmp_path / "spark" / "claims.join_report.json")



@pytest.mark.parametrize("suffix", [".parquet", ".jsonl"])
def test_streamed_table_is_the_single_machine_table(
        data: tuple[list[Path], Path], spark: Any, tmp_path: Path,
        capsys: pytest.CaptureFixture[str], suffix: str) -> None:
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


_CAPPED = f"""
import sys, warnings
from amv_calib.spark import spark_session, write_label_spark
log, outcomes, out = sys.argv[1:]
spark = spark_session("local[2]", app_name="amv-calib-capped", driver_memory="1g",
                      shuffle_partitions=4, conf={{"spark.driver.maxResultSize": "1m",
                      "spark.driver.extraJavaOptions": "{JVM_OPTIONS}"}})
try:
    spark.range(1_000_000).toPandas()
    print("COLLECTED")
except Exception as exc:
    print("CAPPED" if "maxResultSize" in str(exc) else f"OTHER {{exc}}")
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    write_label_spark([log], [outcomes], spark=spark, out=out, on_corrupt="skip")
spark.stop()
print("LABELLED")
"""


def test_the_driver_collects_no_per_use_rows(
        data: tuple[list[Path], Path], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    # A session of its own (the result cap is fixed when a session starts) whose driver may
    # collect 1 MiB per job: collecting 1 M longs fails there, and the label of a log whose
    # claim rows and unjoined uses are many times that succeeds, writing the same files.
    logs, outcomes = data
    small = _head(logs[0], 40_000, tmp_path / "d.jsonl")
    out = tmp_path / "spark" / "claims.parquet"
    proc = subprocess.run([sys.executable, "-c", _CAPPED, str(small), str(outcomes), str(out)],
                          capture_output=True, text=True, check=False, timeout=600)
    assert proc.stdout.split() == ["CAPPED", "LABELLED"], proc.stderr[-3000:]
    args = ["label", "--decisions", str(small), "--outcomes", str(outcomes), "--skip-corrupt",
            "--out", str(tmp_path / "local" / "claims.parquet")]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert main(args) == 0
    capsys.readouterr()
    rows = tmp_path / "spark" / "claims.unjoined.csv"
    assert out.stat().st_size + rows.stat().st_size > 4 << 20  # what would have been collected
    for name in ("claims.parquet", "claims.unjoined.csv"):
        assert (tmp_path / "spark" / name).read_bytes() == \
            (tmp_path / "local" / name).read_bytes(), name
