"""LiveGate: follows an alias through promotions, rollbacks and tampered targets, across threads."""

from __future__ import annotations

import bisect
import json
import logging
import math
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from live_versions import HARM_PRICES, TAMPERED, manifest_sha, point_alias_by_hand

from amv_calib.artifacts import keygen, promote, rollback, sign_artifact
from amv_calib.claims import label_claims
from amv_calib.gate import (
    CandidateAction,
    Decision,
    Gate,
    LiveGate,
    MemoryClaim,
    Premise,
    Verifier,
    _live,
    read_decision_log,
)

ACTION = CandidateAction(action_id="tx-1", tool_name="bank_transfer", impact_cost_theta=100.0,
                         abstention_cost_kappa=5.0,
                         premises=(Premise(id="p1", calibrated_violation_probability=0.01),))
POLL = 0.005


def _expected(models: Path) -> dict[str, Decision]:
    """What each valid version's own gate decides for ACTION: the reference."""
    return {v: Gate.from_artifact(models / "m" / v, strict=True).evaluate(ACTION)
            for v in HARM_PRICES}


@dataclass
class _Call:
    t0: float
    t1: float
    version: str | None
    decision: Decision


@dataclass
class _Phase:
    before: float  # just before the alias file was changed
    after: float   # just after
    serves: str    # the version that must serve once the change is seen


def _wait(live: LiveGate, ok: Callable[[dict[str, Any]], bool], what: str) -> None:
    deadline = time.monotonic() + 5.0
    while not ok(live.status()):
        assert time.monotonic() < deadline, f"{what} not seen within 5 s: {live.status()}"
        time.sleep(0.0005)


def _one_round(models: Path, expected: dict[str, Decision]) -> tuple[list[_Call], list[_Phase]]:
    mdir = models / "m"
    promote("m", "v1", alias="production", models_dir=models)
    local = threading.local()
    refused_seen: list[dict[str, Any]] = []

    def sink(record: dict[str, Any]) -> None:
        local.version = record["calibrator"]["version"]
        if "refused" in record:
            refused_seen.append(record["refused"])

    live = LiveGate(f"{mdir}@production", poll_seconds=POLL, decision_log=sink)
    stop = threading.Event()
    results: list[list[_Call]] = []

    def worker() -> None:
        out: list[_Call] = []
        results.append(out)
        while not stop.is_set():
            t0 = time.monotonic()
            d = live.evaluate(ACTION)
            out.append(_Call(t0, time.monotonic(), local.version, d))
            time.sleep(0.0002)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    phases = [_Phase(0.0, 0.0, "v1")]
    steps: list[tuple[Callable[[], object], str, str | None]] = [
        (lambda: promote("m", "v2", alias="production", models_dir=models), "v2", None),
        (lambda: point_alias_by_hand(mdir, "v5"), "v2", "v5"),
        (lambda: rollback("m", alias="production", models_dir=models), "v2", None),
        (lambda: promote("m", "v3", alias="production", models_dir=models), "v3", None),
        (lambda: point_alias_by_hand(mdir, "v6"), "v3", "v6"),
        (lambda: promote("m", "v4", alias="production", models_dir=models), "v4", None),
        (lambda: promote("m", "v1", alias="production", models_dir=models), "v1", None),
        (lambda: rollback("m", alias="production", models_dir=models), "v4", None),
    ]
    try:
        for change, serves, refused in steps:
            time.sleep(0.004)
            before = time.monotonic()
            change()
            phases.append(_Phase(before, time.monotonic(), serves))
            if refused is None:
                _wait(live, lambda s, v=serves: s["version"] == v and s["refused"] is None,
                      f"version {serves}")
            else:
                _wait(live, lambda s, v=refused: (s["refused"] or {}).get("version") == v,
                      f"refusal of {refused}")
        time.sleep(0.004)
    finally:
        stop.set()
        for t in threads:
            t.join()
    status = live.status()
    assert status["refusals"] == 2 and status["version"] == "v4", status
    assert {r["version"] for r in refused_seen} == set(TAMPERED)
    return [c for out in results for c in out], phases


def _check_round(calls: list[_Call], phases: list[_Phase], expected: dict[str, Decision]
                 ) -> None:
    """Every decision by a version verified when it was the alias's target, and none later
    than ``POLL`` plus one call after the alias moved on.

    The call that checks the alias is the first to start once ``POLL`` has passed since the
    last check, which began at the latest when the alias file changed (``after``): it starts
    no later than the first call after ``after + POLL`` and serves the new version when it
    ends. So a call that starts one call's time (the longest observed: a loading one) after
    that first call decides by the new version.
    """
    assert len(calls) > 100
    starts = sorted(c.t0 for c in calls)
    slack = max(c.t1 - c.t0 for c in calls)

    def switched(p: _Phase) -> float:  # from when on a call must see phase p's version
        i = bisect.bisect_left(starts, p.after + POLL)
        return (starts[i] if i < len(starts) else math.inf) + slack

    for c in calls:
        assert c.version in HARM_PRICES, c  # never a tampered (or no) version
        assert c.decision == expected[c.version], c  # decided by the version it names
        ok = [i for i, p in enumerate(phases) if p.serves == c.version and p.before <= c.t1
              and (i + 1 == len(phases) or c.t0 < switched(phases[i + 1]))]
        assert ok, (c, phases, slack)


def test_follows_promotion_rollback_and_refuses_tampered_targets(live_models: Path) -> None:
    expected = _expected(live_models)
    assert len({d.r_expected for d in expected.values()}) == len(expected)  # distinguishable
    calls, phases = _one_round(live_models, expected)
    _check_round(calls, phases, expected)
    # every version that served a while made decisions: the switches happened
    assert {c.version for c in calls} == {"v1", "v2", "v3", "v4"}


@pytest.mark.slow
def test_fifty_rounds_never_decide_by_an_unverified_version(
        versions_template: Path, tmp_path: Path) -> None:
    import shutil

    expected = _expected(versions_template)
    for i in range(50):
        models = tmp_path / f"round-{i}"
        shutil.copytree(versions_template, models)
        calls, phases = _one_round(models, expected)
        _check_round(calls, phases, expected)
        shutil.rmtree(models)


# -- one thread ------------------------------------------------------------------------------
def test_no_verified_version_abstains_with_the_reason_then_recovers(live_models: Path) -> None:
    records: list[dict[str, Any]] = []
    live = LiveGate(f"{live_models / 'm'}@production", poll_seconds=3600,
                    decision_log=records.append)
    d = live.evaluate(ACTION)
    assert live.version is None and not live.status()["verified"]
    assert d.regime == "ABSTAIN" and "no alias 'production'" in d.reason
    assert records[-1]["calibrator"] == {"name": None, "version": None}
    assert records[-1]["refused"]["version"] is None
    promote("m", "v2", alias="production", models_dir=live_models)
    assert live.evaluate(ACTION).regime == "ABSTAIN"  # not checked again before poll_seconds
    assert live.refresh() == "v2"
    assert live.evaluate(ACTION) == Gate.from_artifact(live_models / "m" / "v2").evaluate(ACTION)
    assert records[-1]["calibrator"] == {"name": "m", "version": "v2"}
    assert "refused" not in records[-1]
    status = live.status()
    assert status["verified"] and status["swaps"] == 0 and status["refusals"] == 1
    assert status["manifest_sha256"] == manifest_sha(live_models / "m" / "v2")


def test_an_unsigned_target_is_refused_until_it_is_signed(live_models: Path, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch,
                                                          caplog: pytest.LogCaptureFixture
                                                          ) -> None:
    private, public = keygen(tmp_path / "keys")
    mdir = live_models / "m"
    sign_artifact(mdir / "v1", private)
    promote("m", "v1", alias="production", models_dir=live_models)
    live = LiveGate(f"{mdir}@production", trusted_keys=[public], poll_seconds=0)
    assert live.version == "v1" and live.status()["refusals"] == 0
    promote("m", "v2", alias="production", models_dir=live_models)  # unsigned
    with caplog.at_level(logging.WARNING, logger=_live.__name__):
        live.evaluate(ACTION)
        live.evaluate(ACTION)  # tried again, refused again for the same reason: counted once
    assert live.version == "v1"
    status = live.status()
    assert status["refusals"] == 1 and status["refused"]["version"] == "v2"
    assert "unsigned (no model.sig)" in status["refused"]["reason"]
    assert [r.getMessage() for r in caplog.records].count(caplog.records[0].getMessage()) == 1
    assert "version v1 keeps serving" in caplog.records[0].getMessage()
    # signing it does not change aliases.json (promote again is a no-op), yet it is picked up
    sign_artifact(mdir / "v2", private)
    live.evaluate(ACTION)
    assert live.version == "v2" and live.status()["refused"] is None
    assert live.status()["swaps"] == 1


def _spy(monkeypatch: pytest.MonkeyPatch, owner: object, name: str) -> list[Any]:
    """The calls of ``owner.name`` from now on (each still runs)."""
    calls: list[Any] = []
    real = getattr(owner, name)
    monkeypatch.setattr(owner, name, lambda *a, **k: calls.append(a) or real(*a, **k))
    return calls


def test_between_polls_a_call_reads_no_file(live_models: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    promote("m", "v1", alias="production", models_dir=live_models)
    live = LiveGate(f"{live_models / 'm'}@production", poll_seconds=3600)
    stats = _spy(monkeypatch, os, "stat")
    for _ in range(100):
        live.evaluate(ACTION)
    assert stats == [] and live.status()["checks"] == 1
    live.refresh()
    assert len(stats) == 1 and live.status()["checks"] == 2


def test_another_alias_changing_reloads_nothing(live_models: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    promote("m", "v1", alias="production", models_dir=live_models)
    live = LiveGate(f"{live_models / 'm'}@production", poll_seconds=0)
    loads = _spy(monkeypatch, _live, "gate_from_artifact")
    promote("m", "v3", alias="challenger", models_dir=live_models)
    live.evaluate(ACTION)
    assert loads == [] and live.version == "v1"
    promote("m", "v3", alias="production", models_dir=live_models)
    live.evaluate(ACTION)
    assert len(loads) == 1 and live.version == "v3"


def test_an_edit_in_place_within_one_timestamp_tick_is_seen(live_models: Path) -> None:
    """Same inode, same size, mtime put back: the file changed within the racy window, so it
    is read again (its ctime changed too, which no one can put back)."""
    promote("m", "v1", alias="production", models_dir=live_models)
    promote("m", "v2", alias="production", models_dir=live_models)
    path = live_models / "m" / "aliases.json"
    live = LiveGate(f"{live_models / 'm'}@production", poll_seconds=0)
    assert live.version == "v2"
    st = path.stat()
    data = json.loads(path.read_text())
    entry = data["aliases"]["production"]
    entry.update(version="v3", manifest_sha256=manifest_sha(live_models / "m" / "v3"))
    entry["history"][-1] = {**entry["history"][-1], "version": "v3",
                            "manifest_sha256": entry["manifest_sha256"]}
    raw = json.dumps(data, indent=2, sort_keys=True).encode()
    raw = raw + b" " * (st.st_size - len(raw) - 1) + b"\n"
    assert len(raw) == st.st_size
    with open(path, "r+b") as fh:  # in place: the same inode
        fh.write(raw)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert path.stat().st_ino == st.st_ino and path.stat().st_mtime_ns == st.st_mtime_ns
    live.evaluate(ACTION)
    assert live.version == "v3"


def test_run_uses_one_version_for_every_step(live_models: Path) -> None:
    promote("m", "v1", alias="production", models_dir=live_models)
    live = LiveGate(f"{live_models / 'm'}@production", poll_seconds=0)
    claim = MemoryClaim(id="iban-42", source_trust_score=0.8, model_confidence=0.93,
                        recency_hours=310.0, contradiction_flag=False)
    action = CandidateAction(action_id="tx-2", tool_name="bank_transfer",
                             impact_cost_theta=120.0, abstention_cost_kappa=4.0,
                             premises=(Premise(id="p1", claim=claim),))
    bank = Verifier(id="bank-api", resolves_premise_ids=("p1",), execution_cost=0.2,
                    symmetric_reliability=0.95)

    def verify(v: Verifier, a: CandidateAction) -> bool:
        promote("m", "v3", alias="production", models_dir=live_models)  # mid-run
        return True

    trace = live.run(action, [bank], verify)
    want = Gate.from_artifact(live_models / "m" / "v1").run(action, [bank], lambda *_: True)
    assert trace == want and live.version == "v1"
    live.evaluate(action)
    assert live.version == "v3"


def test_decision_records_name_the_version_and_label_reads_them(live_models: Path,
                                                                tmp_path: Path) -> None:
    mdir = live_models / "m"
    promote("m", "v1", alias="production", models_dir=live_models)
    log = tmp_path / "decisions.jsonl"
    claim = MemoryClaim(id="iban-42", source_trust_score=0.8, model_confidence=0.93,
                        recency_hours=310.0, contradiction_flag=False)
    with LiveGate(f"{mdir}@production", poll_seconds=0, decision_log=log) as live:
        for i, target in enumerate(["v1", "v5", "v2"]):
            if target == "v5":
                point_alias_by_hand(mdir, "v5")
            elif target != "v1":
                promote("m", target, alias="production", models_dir=live_models)
            live.evaluate(CandidateAction(action_id=f"tx-{i}", tool_name="t",
                                          impact_cost_theta=50.0, abstention_cost_kappa=5.0,
                                          premises=(Premise(id="p1", claim=claim),)))
    records = list(read_decision_log(log))
    assert [r["calibrator"]["version"] for r in records] == ["v1", "v1", "v2"]
    assert [r.get("refused", {}).get("version") for r in records] == [None, "v5", None]
    assert "sha256 mismatch" in records[1]["refused"]["reason"]
    outcomes = tmp_path / "outcomes.csv"
    outcomes.write_text("action_id,time,violated\n" + "".join(
        f"tx-{i},2100-01-01T00:00:00Z,false\n" for i in range(3)))
    claims, report = label_claims([log], outcomes)
    report.check()
    assert report.joined == 3 and list(claims["violated"]) == [False] * 3


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"ref": "models/m"}, r"must name an alias, MODEL_DIR@ALIAS"),
    ({"ref": "models/m@"}, r"must name an alias"),
    ({"ref": "m@production", "poll_seconds": -1.0}, r"poll_seconds=-1.0 must be"),
    ({"ref": "m@production", "poll_seconds": float("nan")}, r"poll_seconds=nan must be"),
    ({"ref": "m@production", "decision_log": 3}, r"decision_log=3 must be"),
], ids=["no-alias", "empty-alias", "negative-poll", "nan-poll", "bad-log"])
def test_bad_arguments(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        LiveGate(**kwargs)


@pytest.mark.slow
def test_bench_live_gate_runs(run_bench: Callable[..., dict[str, Any]]) -> None:
    """bench/bench_live_gate.py --quick runs (it checks that both gates decide alike);
    timings are not asserted here (`--check` does, on a quiet machine)."""
    report = run_bench("bench_live_gate")
    for workload in ("typical", "cheapest"):
        assert report[workload]["ratio_live_vs_gate"] > 0
    assert report["alias_checks"]["live_poll_every_call"] > report["alias_checks"]["live"]


def test_an_unforeseen_failure_of_a_check_keeps_what_serves(
        live_models: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    promote("m", "v1", alias="production", models_dir=live_models)
    live = LiveGate(f"{live_models / 'm'}@production", poll_seconds=0)

    def broken(*_: Any) -> Any:
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(_live, "read_aliases", broken)
    promote("m", "v2", alias="production", models_dir=live_models)
    with caplog.at_level(logging.ERROR, logger=_live.__name__):
        assert live.evaluate(ACTION) == _expected(live_models)["v1"]
    assert "checking alias" in caplog.text and "disk on fire" in caplog.text
    assert live.status()["refused"]["reason"] == "disk on fire"
    monkeypatch.undo()
    live.evaluate(ACTION)
    assert live.version == "v2" and live.status()["refused"] is None


def test_a_live_gate_at_work_loads_numpy_and_the_standard_library_only(
        live_models: Path) -> None:
    promote("m", "v1", alias="production", models_dir=live_models)
    probe = (
        "import json, sys\n"
        "from amv_calib.gate import CandidateAction, LiveGate, OutcomeLog, Premise\n"
        f"live = LiveGate({str(live_models / 'm')!r} + '@production', poll_seconds=0)\n"
        "a = CandidateAction(action_id='a', tool_name='t', impact_cost_theta=10.0,\n"
        "                    abstention_cost_kappa=5.0,\n"
        "                    premises=(Premise(id='p', calibrated_violation_probability=0.01),))\n"
        "assert live.evaluate(a).regime == 'PROCEED' and live.version == 'v1'\n"
        f"OutcomeLog({str(live_models / 'o.jsonl')!r}).record(action_id='a', violated=False)\n"
        "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))\n")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=True).stdout
    third_party = {m for m in json.loads(out) if m not in sys.stdlib_module_names
                   and not m.startswith("_")} - {"amv_calib", "numpy"}
    assert not third_party, sorted(third_party)
