"""The TypeScript gate reads a premise's memory kind by the Python contract's rule: on every
case of ``tests/kind_corpus.py`` both gates give the same verdict (the kind, none, or a
refusal of the premise) and the same message."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from kind_corpus import CASES
from repo_paths import load_module

from amv_calib.gate import Premise

TS = load_module(Path(__file__).parent / "ts_gate" / "ts_harness.py", "ts_harness")
pytestmark = [pytest.mark.requires_node, pytest.mark.requires_npm]

FEATURES = {"recencyHours": 12.0, "sourceTrustScore": 0.5, "modelConfidence": 0.75,
            "contradictionFlag": False}


def _python(premise: dict[str, Any]) -> dict[str, Any]:
    try:
        return {"memory_kind": Premise.from_dict(premise).memory_kind}
    except ValueError as exc:
        return {"error": str(exc)}


def test_both_gates_give_each_premise_the_same_kind() -> None:
    TS.built_dist()
    premises = [{"id": "p1", **FEATURES, **fields} for _, fields, _ in CASES]
    got = TS.run_harness([{"id": i, "kind": "premise", "premise": p}
                          for i, p in enumerate(premises)])
    differ = []
    for i, (name, _, (what, expected)) in enumerate(CASES):
        ts = {k: v for k, v in got[i].items() if k != "id"}
        py = _python(premises[i])
        assert ts.keys() == py.keys(), name  # the verdict: a kind (or None), or a refusal
        if what != "error":
            assert ts == py, name
        elif ts != py:
            differ.append(name)
        if what == "error":
            assert re.search(expected, py["error"].removeprefix("premise 'p1': ")), name
            assert py["error"].startswith("premise 'p1': "), name
        else:
            assert py == {"memory_kind": expected}, name
    # the messages too, but where a value holds a character Python's repr escapes beyond
    # Latin-1 (the TypeScript client's repr writes it as it is)
    assert differ == ["ideographic-space", "trailing-line-separator"]


def test_a_refused_kind_refuses_the_action_in_both_gates() -> None:
    # a premise the gate cannot read is an input error (as any malformed premise field),
    # never a decision made without it
    TS.built_dist()
    action = {"actionId": "a", "toolName": "t", "impactCostTheta": 50.0,
              "abstentionCostKappa": 2.0,
              "premises": [{"id": "p1", **FEATURES, "memoryKind": " event"}]}
    ref = str(TS.REPO_ROOT / "models" / "amv-guard" / "v1")
    (answer,) = TS.run_harness([{"id": 0, "kind": "decide", "ref": ref, "trusted_keys": None,
                                 "action": action, "verifiers": [], "run": None}]).values()
    assert answer == {"id": 0, "error": "premise 'p1': memoryKind=' event' begins or ends "
                                        "with whitespace"}
