"""The gate benchmark runs (``--quick --check``), so that it does not rot, against the seed
engine under node: without node or the seed document it skips, or fails when CI is set."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest


@pytest.mark.slow
@pytest.mark.requires_node
@pytest.mark.requires_seed
def test_bench_gate_quick(run_bench: Callable[..., dict[str, Any]]) -> None:
    report = run_bench("bench_gate")
    single = report["single_one_premise_verifiers"]
    # what node timed is what Gate(mode="seed") decides, case for case (a reference engine)
    assert single["seed_mode_decides_as_node"] is True
    assert report["single_mixed_verifiers"]["seed_mode_decides_as_node"] is True
    assert single["node_ns"] > 0 and "ratio_amv_myopic_vs_node" in single
    # the compiled batch engine beats one pure-Python evaluate per row on the same cases by
    # far (about 60x measured); 5x leaves room for a loaded machine
    row = report["batch"]["one_premise_large_amv_myopic"]
    assert row["ns_per_row"] * 5 < single["python_amv_myopic_ns"]
    checked = {t["name"] for t in report["targets"] if t["checked"]}
    assert any(name.startswith("lookahead_6v_3p") for name in checked)
