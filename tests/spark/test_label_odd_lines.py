"""The odd lines of the attack review on Spark: each odd line of tests/claims/
test_reader_threats.py beside each kind of neighbour, in one log cut into many byte ranges
(lines fall at range ends), labelled by ``label --engine spark`` and on one machine: the
same files to the byte, and the verdict the rule gives each odd line (corrupt lines
skipped, read lines' values)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from repo_paths import load_module

from ._messy import label_both, same_folders


def _threats() -> Any:
    """tests/claims/test_reader_threats.py (the corpus: ODD and NEIGHBOURS)."""
    return load_module(Path(__file__).parents[1] / "claims" / "test_reader_threats.py",
                       "reader_threats")


def _odd_log(folder: Path) -> tuple[Path, Path, dict[int, tuple[str, str, float | None]]]:
    """A log of every (odd line, neighbour) placement, each line an action of its own; the
    outcome CSV that decides every valid use of claim c1; the odd lines by line number."""
    t = _threats()
    lines: list[bytes] = []
    odd_at: dict[int, tuple[str, str, float | None]] = {}
    k = 0
    for name, raw, verdict, value in t.ODD:
        for around in t.NEIGHBOURS.values():
            k += 1
            # the action id ends where the tool name starts: suffixed, every line an action
            line = raw.replace(b'","tool_name"', b'-%d","tool_name"' % k, 1)
            if name == "BOM":  # a byte-order mark counts at the start of the file only
                line = line[3:]
            if around is not None:
                lines.append(around.replace(b'","tool_name"', b'-%d","tool_name"' % k, 1))
            lines.append(line)
            odd_at[len(lines)] = (name, verdict, value)
    log = folder / "odd.jsonl"
    log.write_bytes(b"\xef\xbb\xbf" + b"\n".join(lines) + b"\n" + b'{"time":"2026-01-0')
    outcomes = folder / "outcomes.csv"
    outcomes.write_text("claim_id,time,violated\nc1,2026-01-02T00:00:00Z,true\n")
    return log, outcomes, odd_at


@pytest.fixture(scope="module")
def both(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    folder = tmp_path_factory.mktemp("odd")
    log, outcomes, odd_at = _odd_log(folder)
    # 4 KiB ranges: about 60 tasks, odd lines and their neighbours cut at range ends
    local, report = label_both(spark, log, outcomes, folder, min_verifier_calls=1,
                               split_bytes=4 << 10)
    return folder, local, report, odd_at


def test_same_files_as_one_machine(both: Any) -> None:
    folder, local, report, _ = both
    same_folders(folder, local.report, report)


def test_each_odd_line_gets_the_rules_verdict(both: Any) -> None:
    folder, _, _, odd_at = both
    claims = pd.read_parquet(folder / "spark" / "claims.parquet")
    unjoined = pd.read_csv(folder / "spark" / "claims.unjoined.csv")
    uses = unjoined[unjoined["kind"] == "use"]
    read_lines = set(claims["decision_line"]) | set(uses["line"])
    for line, (name, verdict, value) in odd_at.items():
        assert (line in read_lines) == (verdict == "read"), (name, line)
        if verdict == "read" and value is not None and math.isfinite(value):
            got = claims.loc[claims["decision_line"] == line, "recency_hours"]
            assert got.tolist() == [value], (name, line)
            assert math.copysign(1.0, got.iloc[0]) == math.copysign(1.0, value), (name, line)
