"""The decision-log writer and reader: one write per line, torn tails, aliases, threads."""

from __future__ import annotations

import ast
import json
import math
import multiprocessing
import os
import sys
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from amv_calib.contract import (
    DecisionLogWarning,
    LogReadStats,
    encode_record,
    normalize_decision,
    read_decision_log,
)
from amv_calib.contract import _decision_log as log_format
from amv_calib.exceptions import DataContractError
from amv_calib.gate import _decision_log as dl
from amv_calib.gate._decision_log import DecisionLogWriter


def _record(i: int) -> dict[str, Any]:
    return {
        "time": f"2026-12-01T10:00:{i % 60:02d}.000000Z",
        "action_id": f"act-{i}",
        "tool_name": "bank_transfer",
        "theta": 120.0,
        "kappa": 4.0,
        "premises": [
            {"id": "p1", "claim_id": f"iban-{i}", "recency_hours": 12.5,
             "source_trust_score": 0.8, "model_confidence": 0.9,
             "contradiction_flag": False, "p": 0.04},
        ],
        "calibrator": {"name": "amv-guard", "version": "3"},
        "regime": "PROCEED",
        "verifier": None,
        "voi": 0.0,
        "reason": "admissible: R=4.8 <= 4, H=0.04 <= 0.05 \u2014 \"quoted\"\nnewline",
        "planner": "lookahead",
        "mode": "amv",
    }


def test_round_trip_keeps_every_field(tmp_path: Path) -> None:
    path = tmp_path / "log" / "decisions.jsonl"
    records = [_record(i) for i in range(5)]
    with DecisionLogWriter(path) as w:
        for r in records:
            w.append(r)
        assert w.lines_written == 5
    assert list(read_decision_log(path)) == records
    # One record per line and nothing else in the file.
    assert path.read_bytes().count(b"\n") == 5


def test_each_line_is_one_os_write(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[bytes] = []
    real = os.write

    def spy(fd: int, data: Any) -> int:
        calls.append(bytes(data))
        return real(fd, data)

    path = tmp_path / "d.jsonl"
    w = DecisionLogWriter(path)
    monkeypatch.setattr(os, "write", spy)
    for i in range(3):
        w.append(_record(i))
    w.close()
    assert len(calls) == 3
    for i, chunk in enumerate(calls):
        assert chunk.endswith(b"\n") and chunk.count(b"\n") == 1
        assert json.loads(chunk) == _record(i)


def test_short_writes_are_completed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = os.write

    def dribble(fd: int, data: Any) -> int:
        return real(fd, bytes(data)[:7])

    path = tmp_path / "d.jsonl"
    w = DecisionLogWriter(path)
    monkeypatch.setattr(os, "write", dribble)
    w.append(_record(1))
    w.close()
    assert json.loads(path.read_bytes()) == _record(1)


def test_fsync_flag_syncs_every_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    synced: list[int] = []
    monkeypatch.setattr(os, "fsync", lambda fd: synced.append(fd))
    with DecisionLogWriter(tmp_path / "d.jsonl", fsync=True) as w:
        w.append(_record(0))
        w.append(_record(1))
    assert len(synced) == 2


def test_missing_time_is_filled_and_caller_dict_untouched(tmp_path: Path) -> None:
    rec = {"action_id": "a", "premises": []}
    with DecisionLogWriter(tmp_path / "d.jsonl") as w:
        w(rec)  # the writer is also a callable, as Gate(decision_log=callable) expects
    (out,) = read_decision_log(tmp_path / "d.jsonl")
    assert rec == {"action_id": "a", "premises": []}
    assert out["time"].endswith("Z") and out["time"][:4].isdigit()


def test_non_finite_numbers_become_null_and_numpy_scalars_encode() -> None:
    rec = {"voi": -math.inf, "x": [math.nan, 1.0], "flag": np.bool_(True), "n": np.int64(3),
           "p": np.float32(0.5), "arr": np.array([1, 2])}
    line = encode_record(rec)
    assert line.endswith(b"\n")
    assert json.loads(line) == {"voi": None, "x": [None, 1.0], "flag": True, "n": 3,
                                "p": 0.5, "arr": [1, 2]}


def test_unserialisable_field_raises_type_error() -> None:
    with pytest.raises(TypeError, match="object"):
        encode_record({"bad": object()})


def test_closed_writer_refuses(tmp_path: Path) -> None:
    w = DecisionLogWriter(tmp_path / "d.jsonl")
    w.close()
    w.close()
    with pytest.raises(OSError, match="closed"):
        w.append(_record(0))


def test_threads_never_interleave(tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    w = DecisionLogWriter(path)
    n_threads, per = 8, 300

    def work(k: int) -> None:
        for i in range(per):
            w.append(_record(k * per + i))

    threads = [threading.Thread(target=work, args=(k,)) for k in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    w.close()
    ids = sorted(int(r["action_id"][4:]) for r in read_decision_log(path))
    assert ids == list(range(n_threads * per))


def _append_many(path: str, start: int, n: int) -> None:
    with DecisionLogWriter(path) as w:
        for i in range(start, start + n):
            w.append(_record(i))


def test_processes_appending_to_one_file(tmp_path: Path) -> None:
    path = str(tmp_path / "d.jsonl")
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_append_many, args=(path, k * 400, 400)) for k in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    ids = sorted(int(r["action_id"][4:]) for r in read_decision_log(path))
    assert ids == list(range(800))


def test_torn_last_line_is_skipped_with_warning(tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    full = b"".join(encode_record(_record(i)) for i in range(3))
    path.write_bytes(full + encode_record(_record(3))[:40])
    stats = LogReadStats()
    with pytest.warns(DecisionLogWarning, match="torn last line 4"):
        out = list(read_decision_log(path, stats=stats))
    assert [r["action_id"] for r in out] == ["act-0", "act-1", "act-2"]
    assert (stats.lines, stats.records, stats.torn, stats.corrupt) == (4, 3, 1, 0)
    assert stats.corrupt_lines == [4]


def test_complete_last_line_without_newline_is_kept(tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    path.write_bytes(encode_record(_record(0)) + encode_record(_record(1)).rstrip(b"\n"))
    assert len(list(read_decision_log(path))) == 2


def test_writer_repairs_torn_tail_and_reader_flags_the_fragment(tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    path.write_bytes(encode_record(_record(0)) + b'{"time": "2026-12-01T1')
    with DecisionLogWriter(path) as w:
        w.append(_record(1))
    lines = path.read_bytes().split(b"\n")
    assert lines[1] == b'{"time": "2026-12-01T1' and json.loads(lines[2]) == _record(1)
    with pytest.raises(DataContractError, match=r"line 2 is not a JSON object.*on_corrupt"):
        list(read_decision_log(path))
    stats = LogReadStats()
    with pytest.warns(DecisionLogWarning, match="corrupt line 2"):
        out = list(read_decision_log(path, on_corrupt="skip", stats=stats))
    assert [r["action_id"] for r in out] == ["act-0", "act-1"]
    assert (stats.records, stats.corrupt, stats.corrupt_lines) == (2, 1, [2])


@pytest.mark.parametrize(
    "line",
    [b"[1, 2]\n", b"not json\n", b'"text"\n', b"\xff\xfe\n"],
    ids=["array", "garbage", "string", "bad-utf8"],
)
def test_corrupt_middle_lines_raise(tmp_path: Path, line: bytes) -> None:
    path = tmp_path / "d.jsonl"
    path.write_bytes(encode_record(_record(0)) + line + encode_record(_record(1)))
    with pytest.raises(DataContractError, match="line 2"):
        list(read_decision_log(path))


def test_blank_lines_are_counted(tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    path.write_bytes(b"\n" + encode_record(_record(0)) + b"  \n")
    stats = LogReadStats()
    assert len(list(read_decision_log(path, stats=stats))) == 1
    assert (stats.lines, stats.blank, stats.records) == (3, 2, 1)
    assert stats.lines == stats.records + stats.blank + stats.torn + stats.corrupt


def test_bad_on_corrupt_value() -> None:
    with pytest.raises(ValueError, match="on_corrupt"):
        next(read_decision_log("x", on_corrupt="ignore"))  # type: ignore[arg-type]


def test_seed_camel_case_is_normalised() -> None:
    seed = {
        "timestamp": 1764583200000,
        "actionId": "tx-9",
        "toolName": "bank_transfer",
        "impactCostTheta": 50.0,
        "abstentionCostKappa": 2.0,
        "premises": [
            {"id": "p1", "claimId": "c-1", "calibratedViolationProbability": 0.2,
             "dependencyType": "direct",
             "claim": {"id": "c-1", "statement": "IBAN is X", "sourceTrustScore": 0.7,
                       "modelConfidence": 0.6, "recencyHours": 40.0,
                       "contradictionFlag": True}},
        ],
        "selectedVerifier": {"id": "bank-api", "resolvesPremiseIds": ["p1"]},
        "maxVOI": 0.3,
        "regime": "VERIFY",
        "calibrator": "amv-guard@7",
        "verifierCalls": [{"verifierId": "bank-api", "signals": {"p1": False},
                           "executionCost": 0.1, "symmetricReliability": 0.9}],
    }
    out = normalize_decision(seed)
    assert out["time"] == 1764583200000
    assert (out["action_id"], out["tool_name"], out["theta"], out["kappa"]) == (
        "tx-9", "bank_transfer", 50.0, 2.0)
    assert out["verifier"] == "bank-api" and out["voi"] == 0.3
    assert out["calibrator"] == {"name": "amv-guard", "version": "7"}
    (p,) = out["premises"]
    assert p == {"id": "p1", "claim_id": "c-1", "p": 0.2, "recency_hours": 40.0,
                 "source_trust_score": 0.7, "model_confidence": 0.6,
                 "contradiction_flag": True, "dependencyType": "direct",
                 "statement": "IBAN is X"}
    assert out["verifier_calls"] == [{"verifier": "bank-api", "signals": {"p1": False},
                                      "cost": 0.1, "reliability": 0.9}]


@pytest.mark.parametrize("module", [log_format, dl], ids=["format", "writer"])
def test_module_imports_standard_library_only(module: Any) -> None:
    # The gate imports both, and logs on its decision path: stdlib (+ our own) only.
    tree = ast.parse(Path(module.__file__).read_text(encoding="utf-8"))
    roots: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            roots.add(node.module.split(".")[0])
    assert roots - set(sys.stdlib_module_names) - {"__future__"} == {"amv_calib"}
    if module is log_format:  # the reader's errors are the package's own
        assert "from amv_calib.exceptions import" in Path(module.__file__).read_text("utf-8")
