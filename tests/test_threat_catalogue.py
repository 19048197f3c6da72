"""The threat catalogue: each attack of the hardening reviews, reproduced, and what it meets now.

One section per numbered item of the first review (bad input, faults and concurrency), then
one per item of the second ("round 2": what a trusted key promises, hangs, lost records).
Each test replays the attack as it was found and asserts the new outcome: nothing lost,
nothing hangs, nothing fails open. ``docs/failure-modes.md`` lists the refusals these tests
pin down.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import time
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from amv_calib.exceptions import DataContractError
from amv_calib.gate import LogReadStats, read_decision_log

# -- 3. a decision-log record lost after a failed write ---------------------------------------
_FULL_DISK = textwrap.dedent("""
    import os, resource, signal, sys
    from amv_calib.gate import DecisionLogWriter

    path = sys.argv[1]
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead of being killed
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    w = DecisionLogWriter(path)
    w.append({"action_id": "before", "regime": "PROCEED"})
    limit = os.path.getsize(path) + 40  # room for part of the next record only
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
    try:
        w.append({"action_id": "lost", "regime": "VERIFY", "reason": "x" * 200})
    except OSError as exc:
        print("failed:", exc.errno)
    resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))  # the disk has room again
    w.append({"action_id": "after", "regime": "ABSTAIN"})
    w.close()
""")


def test_failed_append_loses_only_its_own_record(tmp_path: Path) -> None:
    # Attack: a full disk (here RLIMIT_FSIZE) cut a record in the middle; the next append
    # was glued onto the fragment and lost, and the reader then refused the whole log.
    log = tmp_path / "decisions.jsonl"
    done = subprocess.run([sys.executable, "-c", _FULL_DISK, str(log)], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("failed: 27")  # EFBIG: the write really failed part-way
    lines = log.read_bytes().split(b"\n")
    assert len(lines) == 4 and lines[-1] == b""  # before, the fragment, after
    assert lines[1] and not lines[1].endswith(b"}")  # the fragment is a line of its own

    with pytest.raises(DataContractError, match=r"line 2 is not a JSON object"):
        list(read_decision_log(log))
    stats = LogReadStats()
    with pytest.warns(UserWarning, match="skipped corrupt line 2"):
        records = list(read_decision_log(log, on_corrupt="skip", stats=stats))
    assert [r["action_id"] for r in records] == ["before", "after"]
    assert (stats.records, stats.corrupt, stats.corrupt_lines) == (2, 1, [2])


def test_failed_append_before_any_byte_leaves_the_file_as_it_was(tmp_path: Path) -> None:
    log = tmp_path / "decisions.jsonl"
    script = _FULL_DISK.replace("os.path.getsize(path) + 40", "os.path.getsize(path)")
    done = subprocess.run([sys.executable, "-c", script, str(log)], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert [r["action_id"] for r in records] == ["before", "after"]


# -- 7. two pipeline runs at once corrupt the result --------------------------------------
@pytest.fixture(scope="module")
def small_pipeline(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from amv_calib.datasets import synth_claims, write_claims

    d = tmp_path_factory.mktemp("pipeline")
    claims = write_claims(synth_claims(3000, seed=5), d / "claims.csv")
    toml = d / "p.toml"
    toml.write_text(f"""
[pipeline]
name = "small"
workdir = "work"
tracking = false

[[steps]]
name = "ingest"
kind = "ingest"
input = "{claims}"

[[steps]]
name = "compare"
kind = "compare"
claims = "@ingest.claims"
folds = 3
n_boot = 50
""", encoding="utf-8")
    return toml


def _run(toml: Path, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "amv_calib", "-q", "run", str(toml),
                             "--force", *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.slow
def test_second_run_of_a_pipeline_fails_at_once_naming_the_holder(small_pipeline: Path) -> None:
    # Attack: two `amv-calib run` of one pipeline shared its folders and Optuna study.
    lock = small_pipeline.parent / "work" / ".lock"
    first = _run(small_pipeline)
    deadline = time.monotonic() + 120
    while not (lock.exists() and lock.read_text()):  # the first run holds the folder
        assert first.poll() is None and time.monotonic() < deadline, "first run never locked"
        time.sleep(0.01)
    second = _run(small_pipeline)
    outs = [(p.wait(timeout=300), p.communicate()[1]) for p in (first, second)]
    codes = sorted(code for code, _ in outs)
    assert codes == [0, 75], outs
    refused = next(err for code, err in outs if code == 75)
    assert re.search(r"pipeline 'small' .* is locked by pid \d+ on \S+ since "
                     r"\d{4}-\d\d-\d\dT", refused), refused
    assert "--wait" in refused


@pytest.mark.slow
def test_wait_takes_the_lock_when_the_holder_is_done(small_pipeline: Path) -> None:
    workdir = small_pipeline.parent / "work"
    workdir.mkdir(exist_ok=True)
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from amv_calib.locks import exclusive\n"
         "with exclusive(sys.argv[1], what='test'):\n"
         "    print('held', flush=True); time.sleep(1.5)", str(workdir / ".lock")],
        stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    short = _run(small_pipeline, "--wait", "0.2")
    assert short.wait(timeout=120) == 75
    assert "waited 0.2 s" in short.communicate()[1]
    patient = _run(small_pipeline, "--wait")
    assert patient.wait(timeout=300) == 0, patient.communicate()[1]
    holder.wait(timeout=30)


@pytest.mark.slow
def test_lock_of_a_dead_run_is_taken_over_and_its_partial_folders_swept(
        small_pipeline: Path) -> None:
    workdir = small_pipeline.parent / "work"
    workdir.mkdir(exist_ok=True)
    # what a SIGKILLed run leaves: its holder record (no live flock) and a half-written step
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()
    (workdir / ".lock").write_text(json.dumps({"pid": int(dead), "host": "h",
                                               "started_utc": "2026-01-01T00:00:00Z"}))
    left = workdir / "compare.partial-deadbeef"
    left.mkdir()
    (left / "half.json").write_text("{")
    run = _run(small_pipeline)
    assert run.wait(timeout=300) == 0, run.communicate()[1]
    assert not left.exists()
    assert not list(workdir.glob("*.partial-*"))


@pytest.mark.parametrize("value", ["[]", "3", "true", '""'],
                         ids=["list", "number", "bool", "empty"])
def test_pipeline_workdir_of_the_wrong_type_is_refused(
        small_pipeline: Path, value: str, capsys: pytest.CaptureFixture[str]) -> None:
    from amv_calib.cli import main

    before = set(small_pipeline.parent.iterdir())
    code = main(["run", str(small_pipeline), "--set", f"pipeline.workdir={value}"])
    assert code == 2
    err = capsys.readouterr().err
    assert "[pipeline] workdir=" in err and "must be a non-empty string" in err, err
    assert set(small_pipeline.parent.iterdir()) == before  # no folder named '[]' appeared


# -- 2. fail-open for anyone who can write the models folder -------------------------------
def _claim_action(theta: float = 1e6) -> Any:
    from amv_calib.gate import CandidateAction, MemoryClaim, Premise

    # old, untrusted, doubted and contradicted: the shipped calibrator says p > 0.9
    claim = MemoryClaim(id="iban", source_trust_score=0.05, model_confidence=0.1,
                        recency_hours=5000.0, contradiction_flag=True)
    return CandidateAction(action_id="tx", tool_name="bank_transfer", impact_cost_theta=theta,
                           abstention_cost_kappa=4.0, premises=(Premise(id="p", claim=claim),))


def _rehash(version: Path) -> None:
    """What an attacker with write access does after an edit: fix every listed sha256, the
    certificate's binding included (gate and certified thresholds made equal again)."""
    manifest = json.loads((version / "manifest.json").read_text())
    for rel in manifest["files"]:
        manifest["files"][rel] = hashlib.sha256((version / rel).read_bytes()).hexdigest()
    cert = manifest.get("certificate")
    if cert is not None:
        cert["calibrator_sha256"] = manifest["files"]["calibrator.json"]
        cert["thresholds"] = cert["path"][cert["chosen"]] = manifest["gate"]
    (version / "manifest.json").write_text(json.dumps(manifest))


def _neutralise_calibrator(version: Path) -> None:
    cal = json.loads((version / "calibrator.json").read_text())
    cal["intercept"], cal["coef"], cal["clamp"] = -1000.0, [0.0] * len(cal["coef"]), None
    (version / "calibrator.json").write_text(json.dumps(cal))
    _rehash(version)


def _loosen_thresholds(version: Path) -> None:
    manifest = json.loads((version / "manifest.json").read_text())
    manifest["gate"]["epsilon_harm_bound"] = 1.0
    manifest["gate"]["delta_loss_threshold"] = 1e12
    (version / "manifest.json").write_text(json.dumps(manifest))


@pytest.fixture
def signed_v1(tmp_path: Path, repo_root: Path) -> tuple[Path, Path, Path]:
    from amv_calib.artifacts import keygen, sign_artifact

    version = tmp_path / "models" / "amv-guard" / "v1"
    shutil.copytree(repo_root / "models" / "amv-guard" / "v1", version)
    private, public = keygen(tmp_path / "keys")
    sign_artifact(version, private)
    return version, private, public


def test_signed_artifact_is_accepted_under_its_key(signed_v1: tuple[Path, Path, Path]) -> None:
    from amv_calib.gate import Gate

    version, _, public = signed_v1
    gate = Gate.from_artifact(version, trusted_keys=[public], strict=True)
    assert gate.refusal is None and gate.artifact_version == "v1"
    assert gate.probabilities(_claim_action())[0] > 0.9
    assert gate.evaluate(_claim_action()).regime == "ABSTAIN"


@pytest.mark.parametrize("tamper", [_neutralise_calibrator, _loosen_thresholds],
                         ids=["calibrator-rehashed", "thresholds"])
def test_tampered_artifact_fails_open_without_keys_and_closed_with_them(
        signed_v1: tuple[Path, Path, Path], tamper: Any,
        monkeypatch: pytest.MonkeyPatch) -> None:
    from amv_calib.gate import Gate

    version, _, public = signed_v1
    if tamper is _loosen_thresholds:
        _neutralise_calibrator(version)  # the edited thresholds ride on a doctored p too
    tamper(version)
    if tamper is _loosen_thresholds:
        _rehash(version)
    # The attack as found: with nothing to authenticate the manifest, the gate PROCEEDs at
    # theta = 1e6 on a claim whose true violation probability is above 0.9.
    assert Gate.from_artifact(version).evaluate(_claim_action()).regime == "PROCEED"
    # Now: under a trusted key (argument or environment) it refuses and ABSTAINs, saying why.
    for gate in (Gate.from_artifact(version, trusted_keys=[public]),
                 _with_env(monkeypatch, public, lambda: Gate.from_artifact(version))):
        d = gate.evaluate(_claim_action())
        assert d.regime == "ABSTAIN"
        assert "artifact refused" in d.reason and "signature does not verify" in d.reason


def _with_env(monkeypatch: pytest.MonkeyPatch, key: Path, build: Any) -> Any:
    monkeypatch.setenv("AMV_CALIB_TRUSTED_KEYS", str(key))
    try:
        return build()
    finally:
        monkeypatch.delenv("AMV_CALIB_TRUSTED_KEYS")


def test_unsigned_artifact_is_refused_under_a_trusted_key(
        signed_v1: tuple[Path, Path, Path]) -> None:
    from amv_calib.gate import Gate

    version, _, public = signed_v1
    (version / "model.sig").unlink()
    d = Gate.from_artifact(version, trusted_keys=[public]).evaluate(_claim_action())
    assert d.regime == "ABSTAIN" and "unsigned" in d.reason


def _claim_action_dict() -> dict[str, Any]:
    """:func:`_claim_action` as the JSON of an action file."""
    return {"action_id": "tx", "tool_name": "t", "impact_cost_theta": 1e6,
            "abstention_cost_kappa": 4.0,
            "premises": [{"id": "p", "claim": {"id": "iban", "source_trust_score": 0.05,
                                                "model_confidence": 0.1,
                                                "recency_hours": 5000.0,
                                                "contradiction_flag": True}}]}


def test_cli_gate_with_trusted_key_abstains_on_a_tampered_artifact(
        signed_v1: tuple[Path, Path, Path], tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    from amv_calib.cli import main

    version, _, public = signed_v1
    _neutralise_calibrator(version)
    action = tmp_path / "action.json"
    action.write_text(json.dumps({"action": _claim_action_dict()}))
    assert main(["gate", "--action", str(action), "--artifact", str(version),
                 "--trusted-key", str(public)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["regime"] == "ABSTAIN" and "signature does not verify" in out["reason"]
    # a bare calibrator file cannot be vouched for under a trusted key
    assert main(["gate", "--action", str(action), "--calibrator",
                 str(version / "calibrator.json"), "--trusted-key", str(public)]) == 2


# -- 6. the loader hangs or crashes instead of answering ABSTAIN ------------------------------
_LOAD = textwrap.dedent("""
    import json, sys
    from amv_calib.gate import Gate
    d = Gate.from_artifact(sys.argv[1]).evaluate(
        __import__("test_threat_catalogue")._claim_action())
    print(json.dumps({"regime": d.regime, "reason": d.reason}))
""")


def _load_in_child(ref: Path) -> dict[str, Any]:
    """Load ``ref`` in a child process that must answer within 30 s (a hang fails)."""
    done = subprocess.run([sys.executable, "-c", _LOAD, str(ref)], capture_output=True,
                          text=True, timeout=30, cwd=Path(__file__).parent,
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).parent)})
    assert done.returncode == 0, done.stderr[-2000:]
    out: dict[str, Any] = json.loads(done.stdout)
    return out


@pytest.fixture
def v1(tmp_path: Path, shipped_models: Callable[[Path], Path]) -> Path:
    return shipped_models(tmp_path / "models") / "amv-guard" / "v1"


@pytest.mark.parametrize("name", ["calibrator.json", "manifest.json"])
def test_fifo_in_place_of_a_file_is_refused_not_waited_on(v1: Path, name: str) -> None:
    (v1 / name).unlink()
    os.mkfifo(v1 / name)
    out = _load_in_child(v1)
    assert out["regime"] == "ABSTAIN"
    assert f"{name}: " in out["reason"] and "is a FIFO, not a regular file" in out["reason"]


@pytest.mark.parametrize("name", ["manifest.json", "aliases.json"])
def test_file_linked_to_dev_zero_is_refused_not_read(v1: Path, name: str) -> None:
    path = v1 / name if name == "manifest.json" else v1.parent / name
    path.unlink()
    path.symlink_to("/dev/zero")
    ref = v1 if name == "manifest.json" else Path(f"{v1.parent}@production")
    out = _load_in_child(ref)
    assert out["regime"] == "ABSTAIN"
    assert f"{name}: " in out["reason"]
    assert "is a link that leaves" in out["reason"]  # before it could be opened


@pytest.mark.parametrize("n", [100, 100_000], ids=["parses-then-too-deep", "parser-recursion"])
def test_deeply_nested_calibrator_with_correct_hashes_is_refused(v1: Path, n: int) -> None:
    from amv_calib.gate import Gate

    text = (v1 / "calibrator.json").read_text().rstrip().removesuffix("}")
    (v1 / "calibrator.json").write_text(text + ', "note": ' + "[" * n + "0" + "]" * n + "}")
    _rehash(v1)
    d = Gate.from_artifact(v1).evaluate(_claim_action())
    assert d.regime == "ABSTAIN" and "nested deeper than 32 levels" in d.reason


def test_symlink_leaving_the_version_folder_is_refused(v1: Path, tmp_path: Path) -> None:
    from amv_calib.gate import Gate

    outside = tmp_path / "elsewhere.json"
    shutil.move(v1 / "calibrator.json", outside)
    (v1 / "calibrator.json").symlink_to(outside)  # same bytes, same sha256: only the place
    d = Gate.from_artifact(v1).evaluate(_claim_action())
    assert d.regime == "ABSTAIN" and "is a link that leaves" in d.reason


# -- 8. crashes instead of clear errors (the gate's side; ingest's are with item 1) -----------
@pytest.mark.parametrize("content,message", [
    (b'{"action": {"action_id": "\xff\xfe"}}', r"line 1: not UTF-8 text"),
    (b'{"action": {"action_id": "a", "tool_name": "t", "impact_cost_theta": '
     + b"9" * 400 + b', "abstention_cost_kappa": 1, "premises": []}}',
     r"impact_cost_theta=9{20}\.\.\.\(400 digits\) .* is too large for a float"),
    (b"[" * 100_000 + b"]" * 100_000, r"JSON nested too deeply"),
], ids=["bad-utf8", "400-digit-integer", "deep-nesting"])
def test_gate_command_answers_bad_action_files_with_exit_2(
        tmp_path: Path, content: bytes, message: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    from amv_calib.cli import main

    action = tmp_path / "action.json"
    action.write_bytes(content)
    assert main(["gate", "--action", str(action)]) == 2
    err = capsys.readouterr().err
    assert str(action) in err and re.search(message, err), err


def test_served_model_answers_bad_requests_with_http_400() -> None:
    from mlflow.exceptions import MlflowException
    from mlflow.protos.databricks_pb2 import INVALID_PARAMETER_VALUE, ErrorCode

    from amv_calib.tracking import GateModel

    model = GateModel()
    model._gate = __import__("amv_calib.gate", fromlist=["Gate"]).Gate()
    model._refusal, model._version = None, "v1"
    big = ('{"action_id": "a", "tool_name": "t", "impact_cost_theta": ' + "9" * 400
           + ', "abstention_cost_kappa": 1, "premises": []}')
    for cell in (big, "[" * 100_000 + "]" * 100_000):
        with pytest.raises(MlflowException) as err:
            model.predict(None, pd.DataFrame({"action": [cell]}))  # type: ignore[arg-type]
        assert err.value.error_code == ErrorCode.Name(INVALID_PARAMETER_VALUE)
        assert err.value.get_http_status_code() == 400


# -- 1. silent data loss at ingest when columns appear late ---------------------------------
_BASE = {"claim_id": "c", "timestamp": "2026-01-01T00:00:00Z", "recency_hours": 5.0,
         "source_trust_score": 0.5, "model_confidence": 0.5, "contradiction_flag": False,
         "violated": False}


def _late_column_records(n_early: int) -> list[dict[str, Any]]:
    """``n_early`` plain rows, then the rows the attack used: late optional columns with bad
    values, a soft-label pair, and a claimId spelling after claim_id."""
    out = [{**_BASE, "claim_id": f"e{i}", "timestamp": f"2026-01-01T00:{i % 60:02d}:00Z"}
           for i in range(n_early)]
    out += [
        {**_BASE, "claim_id": "bad-p", "p_true": 7, "label_weight": -1},
        {**_BASE, "claim_id": "soft", "violated": True, "label_weight": 0.3},
        {**_BASE, "claim_id": "soft", "violated": False, "label_weight": 0.7},
        {**{k: v for k, v in _BASE.items() if k != "claim_id"}, "claimId": "camel",
         "statement": "late text"},
    ]
    return out


def _ingest_outputs(src: Path, out: Path, chunksize: int | None) -> tuple[bytes, bytes, Any]:
    from amv_calib.claims import DEFAULT_CHUNKSIZE, ingest_file

    s = ingest_file(src, out, chunksize=chunksize or DEFAULT_CHUNKSIZE)
    claims = pd.read_parquet(out / "claims.parquet")
    return (claims.to_csv(index=False).encode(), (out / "rejects.csv").read_bytes(),
            (s.read, s.accepted, s.rejected, s.ignored_columns))


def test_late_jsonl_columns_are_validated_in_every_row(tmp_path: Path) -> None:
    from amv_calib.claims import load_claims

    src = tmp_path / "late.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in _late_column_records(5)))
    claims, rejects = load_claims(src, chunksize=2)  # the late columns start in chunk 3
    assert rejects["row"].tolist() == [6]  # p_true=7 and label_weight=-1 are refused
    assert "p_true=7" in rejects["reason"].iloc[0] and "label_weight" in rejects["reason"].iloc[0]
    soft = claims[claims["claim_id"] == "soft"]
    assert sorted(soft["label_weight"].tolist()) == [0.3, 0.7]  # a pair, not a "duplicate"
    camel = claims[claims["claim_id"] == "camel"]
    assert len(camel) == 1 and camel["statement"].iloc[0] == "late text"


def test_parquet_folder_reads_the_union_of_its_files_columns(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from amv_calib.claims import load_claims

    folder = tmp_path / "claims"
    folder.mkdir()
    records = _late_column_records(3)
    first = [{k: v for k, v in r.items() if k in _BASE} for r in records[:3]]
    pq.write_table(pa.Table.from_pylist(first), folder / "part-0.parquet")
    pq.write_table(pa.Table.from_pylist(records[3:6]), folder / "part-1.parquet")
    claims, rejects = load_claims(folder)
    assert "p_true" in claims.columns and "label_weight" in claims.columns
    assert rejects["row"].tolist() == [4]
    assert sorted(claims.loc[claims["claim_id"] == "soft", "label_weight"]) == [0.3, 0.7]


#: Round 2, item 5: values of another JSON type than their neighbours', and (as raw JSON
#: lines, JSONL only) a line giving a key twice.
_MIXED_ROWS: list[dict[str, Any] | str] = [
    {**_BASE, "claim_id": "m-v1", "violated": 1.0},
    {**_BASE, "claim_id": "m-v2", "violated": 2},
    {**_BASE, "claim_id": "m-vs", "violated": "yes"},
    {**_BASE, "claim_id": "m-t", "source_trust_score": True},
    {**_BASE, "claim_id": "m-ts", "source_trust_score": "0.25"},
    {**_BASE, "claim_id": "m-cf", "contradiction_flag": 0},
    {**_BASE, "claim_id": "m-big", "recency_hours": 10**30},
    {**_BASE, "claim_id": "m-list", "statement": ["a", 1]},
    {**_BASE, "claim_id": 7},
    json.dumps({**_BASE, "claim_id": "m-dup"})[:-1] + ', "violated": true}',
]

records_st = st.lists(st.sampled_from([*_late_column_records(4), *_MIXED_ROWS]), min_size=1,
                      max_size=25)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                   HealthCheck.function_scoped_fixture])
@given(records=records_st, fmt=st.sampled_from(["jsonl", "csv"]))
def test_outputs_do_not_depend_on_the_chunk_size(
        tmp_path: Path, records: list[dict[str, Any] | str], fmt: str) -> None:
    # every record set, written once, must give the same two files for any chunk size
    if fmt == "csv":  # a CSV row cannot give a key twice
        records = [r for r in records if isinstance(r, dict)] or [_BASE]
    rows = [{**r, "timestamp": f"2026-01-0{1 + i % 9}T00:00:{i % 60:02d}Z"}
            if i % 3 and isinstance(r, dict) else r for i, r in enumerate(records)]
    src = tmp_path / f"in-{uuid.uuid4().hex}.{fmt}"
    if fmt == "jsonl":
        src.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n"
                               for r in rows))
    else:
        pd.DataFrame(rows).to_csv(src, index=False)
    outs = [_ingest_outputs(src, tmp_path / f"o-{uuid.uuid4().hex}", size)
            for size in (1, 2, 7, None)]
    assert all(o == outs[0] for o in outs[1:])
    assert outs[0][2][0] == outs[0][2][1] + outs[0][2][2] == len(rows)


# -- 4. impossible timestamps accepted -------------------------------------------------------
@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
@pytest.mark.parametrize("stamp", ["0000-06-01T00:00:00Z", "10000-01-01T00:00:00Z",
                                   -62_200_000_000, 260_000_000_000],
                         ids=["year-0", "year-10000", "epoch-before-year-1", "epoch-ms-2"])
def test_times_outside_years_1_to_9999_are_rejected(tmp_path: Path, fmt: str,
                                                    stamp: Any) -> None:
    from amv_calib.claims import load_claims

    row = {**_BASE, "timestamp": stamp}
    src = tmp_path / f"t.{fmt}"
    if fmt == "csv":
        pd.DataFrame([row]).to_csv(src, index=False)
    else:
        src.write_text(json.dumps(row) + "\n")
    claims, rejects = load_claims(src)
    if stamp == 260_000_000_000:  # milliseconds: 1978, a valid time
        assert len(claims) == 1
        return
    assert claims.empty and "out of range (years 1 to 9999)" in rejects["reason"].iloc[0]


def test_typed_parquet_timestamp_beyond_year_9999_does_not_wrap(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from amv_calib.claims import load_claims

    table = pa.Table.from_pylist([{**_BASE, "claim_id": "a"}, {**_BASE, "claim_id": "b"}])
    ts = pa.array([1_700_000_000, 100_000_000_000_000], type=pa.timestamp("s", tz="UTC"))
    table = table.set_column(table.schema.get_field_index("timestamp"), "timestamp", ts)
    pq.write_table(table, tmp_path / "t.parquet")
    claims, rejects = load_claims(tmp_path / "t.parquet")
    assert claims["claim_id"].tolist() == ["a"]
    assert rejects["row"].tolist() == [2] and "out of range" in rejects["reason"].iloc[0]


# -- 8. crashes instead of clear errors (ingest) -----------------------------------------------
_HEADER = ("claim_id,timestamp,recency_hours,source_trust_score,model_confidence,"
           "contradiction_flag,violated")
_ROW = "c1,2026-01-01T00:00:00Z,5,0.5,0.5,false,false"


def test_header_cell_over_128_kib_is_a_clear_error(tmp_path: Path) -> None:
    from amv_calib.claims import load_claims

    src = tmp_path / "h.csv"
    src.write_text(f"{_HEADER},{'x' * 200_000}\n{_ROW},1\n")
    with pytest.raises(DataContractError, match=r"h\.csv as CSV: line 1 \(the header\)"):
        load_claims(src)


def test_one_20_mb_field_does_not_sink_the_file(tmp_path: Path) -> None:
    from amv_calib.claims import load_claims

    src = tmp_path / "big.csv"
    src.write_text(f"{_HEADER},statement\n{_ROW},{'y' * 20_000_000}\n"
                   f"{_ROW.replace('c1', 'c2')},short\n")
    claims, rejects = load_claims(src)
    assert rejects.empty and claims["claim_id"].tolist() == ["c1", "c2"]
    assert len(claims["statement"].iloc[0]) == 20_000_000


def test_deeply_nested_jsonl_line_is_a_rejected_row(tmp_path: Path) -> None:
    from amv_calib.claims import load_claims

    src = tmp_path / "deep.jsonl"
    src.write_text(json.dumps(_BASE) + "\n" + "[" * 100_000 + "]" * 100_000 + "\n")
    claims, rejects = load_claims(src)
    assert len(claims) == 1 and rejects["row"].tolist() == [2]
    assert "nested too deeply" in rejects["reason"].iloc[0]


def test_bad_utf8_error_names_the_line_and_the_data_row(tmp_path: Path) -> None:
    from amv_calib.claims import load_claims

    src = tmp_path / "u.csv"
    src.write_bytes(f"{_HEADER}\n".encode() + b"c\xff1" + _ROW[2:].encode() + b"\n")
    with pytest.raises(DataContractError,
                       match=r"u\.csv as CSV: line 2 \(data row 1\): a field is not valid UTF-8"):
        load_claims(src)


# -- 9. rejects.csv unsafe in a spreadsheet, and lossy ---------------------------------------
def test_rejects_csv_is_spreadsheet_safe_and_rejects_jsonl_lossless(tmp_path: Path) -> None:
    import csv as csv_module

    from amv_calib.claims import ingest_file

    long_line = json.dumps({**_BASE, "claim_id": "x" * 500, "source_trust_score": 2})
    rows = [
        json.dumps({**_BASE, "claim_id": '=HYPERLINK("http://evil","click")',
                    "source_trust_score": 1.5}),
        json.dumps({**_BASE, "claim_id": "@SUM(A1)", "label_weight": -1}),
        json.dumps({**_BASE, "claim_id": "\tTAB", "recency_hours": -3}),
        "{not json " + "z" * 300,
        long_line,
    ]
    src = tmp_path / "in.jsonl"
    src.write_text("\n".join(rows) + "\n")
    s = ingest_file(src, tmp_path / "out")
    assert s.rejected == 5
    with open(tmp_path / "out" / "rejects.csv", newline="", encoding="utf-8") as fh:
        table = list(csv_module.DictReader(fh))
    for rec in table:
        for value in rec.values():
            assert not value.startswith(("=", "+", "-", "@", "\t", "\r")), value
    assert table[0]["claim_id"] == "'=HYPERLINK(\"http://evil\",\"click\")"
    lossless = [json.loads(line) for line in
                (tmp_path / "out" / "rejects.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [r["row"] for r in lossless] == [1, 2, 3, 4, 5]
    assert [r["line"] for r in lossless] == rows  # every rejected line, byte for byte
    assert lossless[0]["fields"]["claim_id"] == '=HYPERLINK("http://evil","click")'
    assert lossless[1]["fields"]["label_weight"] == "-1"


# -- 5. one verifier over many premises exhausts time and memory -------------------------------
def _action_over(m: int, p: float) -> Any:
    from amv_calib.gate import CandidateAction, Premise

    return CandidateAction(
        action_id="a", tool_name="t", impact_cost_theta=100.0, abstention_cost_kappa=5.0,
        premises=tuple(Premise(id=f"p{i}", calibrated_violation_probability=p)
                       for i in range(m)))


def _verifiers_over(n: int, m: int) -> list[Any]:
    from amv_calib.gate import Verifier

    return [Verifier(id=f"v{j}", resolves_premise_ids=tuple(f"p{i}" for i in range(m)),
                     execution_cost=0.01, symmetric_reliability=0.9) for j in range(n)]


_ENUMERATION_ATTACKS = {
    # what the review measured: the lookahead took 4.6 s and 2 GB, then MemoryError at 26
    # premises; the myopic rule ran past 60 s at 40; 30 verifiers x 20 premises took 18 s
    "1v-24p-lookahead": ("lookahead", 1, 24), "1v-26p-lookahead": ("lookahead", 1, 26),
    "1v-40p-myopic": ("myopic", 1, 40), "30v-20p-myopic": ("myopic", 30, 20),
    "30v-20p-lookahead": ("lookahead", 30, 20), "64v-64p-lookahead": ("lookahead", 64, 64),
}


@pytest.mark.parametrize("attack", list(_ENUMERATION_ATTACKS), ids=list(_ENUMERATION_ATTACKS))
def test_verifier_over_many_premises_answers_at_once_and_does_not_proceed(attack: str) -> None:
    # Attack: 2^k joint outcomes per verifier, enumerated without a cap. Now at most
    # MAX_OUTCOMES are enumerated per decision; the rest are left out, by name, and the
    # admissible action (P_any about 2%, R about 2 <= 5) is not PROCEEDed on a VOI nobody
    # computed.
    import tracemalloc

    from amv_calib.gate import MAX_OUTCOMES, Gate

    planner, n, m = _ENUMERATION_ATTACKS[attack]
    p = 0.02 / m
    gate, action, verifiers = Gate(planner=planner), _action_over(m, p), _verifiers_over(n, m)
    assert gate.stopping_value(action).admissible
    t0 = time.process_time()
    d = gate.evaluate(action, verifiers)
    spent = time.process_time() - t0
    assert spent < 0.1, f"{spent:.3f} s of CPU"  # the acceptance bound: 100 ms
    tracemalloc.start()
    try:
        gate.evaluate(action, verifiers)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 200 * 2**20
    assert d.regime == "ABSTAIN" and d.outcomes <= MAX_OUTCOMES
    assert d.left_out == tuple(v.id for v in verifiers)
    assert "work bound" in d.reason and "v0" in d.reason and "could be worth calling" in d.reason
    # the batch answers the row the same way, as fast
    row = {"p": np.full((1, m), p), "premise_mask": np.ones((1, m), dtype=bool),
           "theta": [100.0], "kappa": [5.0], "resolves": np.ones((1, n, m), dtype=bool),
           "cost": np.full((1, n), 0.01), "reliability": np.full((1, n), 0.9)}
    gate.evaluate_batch(**row)  # the compiled engine loaded (compiled on a cold cache)
    t0 = time.process_time()
    bd = gate.evaluate_batch(**row)
    spent = time.process_time() - t0
    assert spent < 0.1 and (int(bd.regime[0]), int(bd.left_out[0])) == (2, n)


def test_slowest_plan_within_the_work_bound_answers_within_100_ms() -> None:
    # The bound's other side: the largest exact plan it allows (8 one-premise verifiers,
    # every one of the 3^8 beliefs valued, MAX_WORK) on the inputs a hill climb on CPU time
    # found slowest (bench/bench_gate.py, CLIMBED), by evaluate and by a run.
    from amv_calib.gate import MAX_WORK, CandidateAction, Gate, Premise, Verifier

    ps = [0.485, 0.233, 0.0027, 0.0706, 0.399, 0.360, 0.920, 0.0618]
    rs = [0.778, 0.643, 0.555, 0.687, 0.893, 0.615, 0.683, 0.808]
    cs = [0.0, 0.0, 0.0, 0.0, 0.0060, 0.00041, 0.0, 0.0098]
    action = CandidateAction(
        action_id="a", tool_name="t", impact_cost_theta=28.39, abstention_cost_kappa=26.88,
        premises=tuple(Premise(id=f"p{i}", calibrated_violation_probability=p)
                       for i, p in enumerate(ps)))
    verifiers = [Verifier(id=f"v{j}", resolves_premise_ids=(f"p{j}",), execution_cost=cs[j],
                          symmetric_reliability=rs[j]) for j in range(8)]
    gate = Gate(lambda_cost_scale=1.0, delta_loss_threshold=0.108, epsilon_harm_bound=0.325)
    t0 = time.process_time()
    d = gate.evaluate(action, verifiers)
    spent = time.process_time() - t0
    assert d.planner_states == 3**8 - 1 and d.planner_states <= MAX_WORK
    assert spent < 0.1, f"{spent:.3f} s of CPU"
    t0 = time.process_time()
    gate.run(action, verifiers, lambda v, a: dict.fromkeys(v.resolves_premise_ids, True))
    spent = time.process_time() - t0
    assert spent < 0.1, f"{spent:.3f} s of CPU"


# -- 11. a certificate moved onto what it never certified (certificate issue) ---------------
def _certificate_parts(v1: Path, tmp_path: Path) -> tuple[Path, Path, Path]:
    """What a user (or an attacker) copies out of v1: its certificate and gate thresholds,
    and a doctored calibrator (intercept -40: p about 1e-18 for every claim)."""
    manifest = json.loads((v1 / "manifest.json").read_text())
    cert, thr, evil = (tmp_path / n for n in ("cert_v1.json", "thr_v1.json", "evil.json"))
    cert.write_text(json.dumps(manifest["certificate"]))
    thr.write_text(json.dumps(manifest["gate"]))
    cal = json.loads((v1 / "calibrator.json").read_text())
    cal["intercept"] = -40.0
    evil.write_text(json.dumps(cal))
    return cert, thr, evil


def test_export_refuses_a_certificate_made_for_another_calibrator_or_thresholds(
        v1: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from amv_calib.cli import main

    cert, thr, evil = _certificate_parts(v1, tmp_path)
    models = str(v1.parent.parent)
    assert main(["export", "--calibrator", str(evil), "--thresholds", str(thr),
                 "--certificate", str(cert), "--name", "amv-guard", "--models-dir",
                 models]) == 2
    err = capsys.readouterr().err
    want = json.loads((v1 / "manifest.json").read_text())["certificate"]["calibrator_sha256"]
    assert f"certificate was made for calibrator sha256 {want}" in err
    assert re.search(r"but this calibrator\.json has sha256 [0-9a-f]{64}", err)
    looser = tmp_path / "looser.json"
    looser.write_text(json.dumps({**json.loads(thr.read_text()), "epsilon_harm_bound": 0.5}))
    assert main(["export", "--calibrator", str(v1 / "calibrator.json"), "--thresholds",
                 str(looser), "--certificate", str(cert), "--name", "amv-guard",
                 "--models-dir", models]) == 2
    assert re.search(r"certificate certified thresholds sha256 [0-9a-f]{64}, but this gate "
                     r"has sha256 [0-9a-f]{64} \(they differ in \['epsilon_harm_bound'\]\)",
                     capsys.readouterr().err)
    assert sorted(p.name for p in v1.parent.iterdir() if p.is_dir()) == ["v1"]


def test_a_version_carrying_a_moved_certificate_is_refused_by_promote_and_the_gate(
        v1: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # The same doctored calibrator exported without a certificate, then v1's certificate
    # pasted into its manifest by hand: the files' hashes are right, the binding is not.
    from amv_calib.artifacts import export_artifact
    from amv_calib.cli import main
    from amv_calib.gate import Gate

    cert, thr, evil = _certificate_parts(v1, tmp_path)
    v2 = export_artifact(calibrator=evil, thresholds=thr, name="amv-guard",
                         models_dir=v1.parent.parent, include_joblib=False).path
    manifest = json.loads((v2 / "manifest.json").read_text())
    manifest["certificate"] = json.loads(cert.read_text())
    (v2 / "manifest.json").write_text(json.dumps(manifest))
    for force in ([], ["--force"]):  # a person's decision cannot bind it either
        assert main(["promote", "amv-guard", "v2", "--alias", "production", "--models-dir",
                     str(v1.parent.parent), *force]) == 2
        assert "certificate was made for calibrator sha256" in capsys.readouterr().err
    assert json.loads((v1.parent / "aliases.json").read_text())["aliases"]["production"][
        "version"] == "v1"
    d = Gate.from_artifact(v2).evaluate(_claim_action())
    assert d.regime == "ABSTAIN" and "certificate was made for calibrator" in d.reason
    assert main(["verify-artifact", str(v2)]) == 2
    # the genuine v1 under the same gate decides as before: the claim is doubtful
    assert Gate.from_artifact(v1).evaluate(_claim_action()).regime == "ABSTAIN"


# == Round 2 ===================================================================================
# -- R2-1. the signature checked on other bytes than the gate loads --------------------------
_SWAPPER = textwrap.dedent("""
    import ctypes, os, sys
    a, b, stop = (os.fsencode(p) for p in sys.argv[1:4])
    libc = ctypes.CDLL(None, use_errno=True)
    swaps = 0
    print("ready", flush=True)
    while not os.path.exists(stop):
        # AT_FDCWD = -100, RENAME_EXCHANGE = 2: the two folders trade places atomically
        if libc.renameat2(-100, a, -100, b, 2) != 0:
            raise OSError(ctypes.get_errno(), "renameat2")
        swaps += 1
    print(swaps, flush=True)
""")


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="renameat2 is Linux's")
def test_folder_swapped_during_loads_never_yields_a_doctored_artifact(
        signed_v1: tuple[Path, Path, Path], tmp_path: Path) -> None:
    # Attack: someone who can write models/ but holds no private key swaps a doctored copy
    # (calibrator neutralised, every sha256 fixed, the genuine model.sig kept) and the
    # genuine signed folder in and out while the gate loads. The loader hashed the files by
    # path, then model_signing re-read the folder by path: 53 of 400 gates PROCEEDed on the
    # doctored calibrator. Now one handle pins one folder and every check reads through it.
    from amv_calib.gate import Gate

    version, _, public = signed_v1
    doctored = version.with_name("v1-doctored")
    shutil.copytree(version, doctored)
    _neutralise_calibrator(doctored)
    assert Gate.from_artifact(doctored).evaluate(_claim_action()).regime == "PROCEED"
    assert Gate.from_artifact(doctored, trusted_keys=[public]).refusal is not None
    stop = tmp_path / "stop"
    swapper = subprocess.Popen([sys.executable, "-c", _SWAPPER, str(version), str(doctored),
                                str(stop)], stdout=subprocess.PIPE, text=True)
    assert swapper.stdout is not None and swapper.stdout.readline().strip() == "ready"
    seen: Counter[str] = Counter()
    try:
        for _ in range(500):
            gate = Gate.from_artifact(version, trusted_keys=[public])
            decision = gate.evaluate(_claim_action())
            if gate.refusal is None:  # accepted: must be the genuine calibrator
                seen["accepted"] += 1
                assert gate.probabilities(_claim_action())[0] > 0.9
            else:
                seen["refused"] += 1
                assert "signature does not verify" in gate.refusal, gate.refusal
            assert decision.regime == "ABSTAIN", (seen, decision.reason)
    finally:
        stop.touch()
        out = swapper.communicate(timeout=60)[0]
    assert swapper.returncode == 0
    assert int(out.split()[-1]) >= 500  # the folders really traded places throughout
    # both folders were loaded: the race was run, and every doctored load was refused
    assert seen["accepted"] > 0 and seen["refused"] > 0, seen


# -- R2-3. a blank trusted-keys variable switched signing off ---------------------------------
@pytest.mark.parametrize("blank", [" ", ":", ""], ids=["space", "separator", "empty"])
def test_blank_trusted_keys_variable_refuses_everything(
        signed_v1: tuple[Path, Path, Path], monkeypatch: pytest.MonkeyPatch,
        blank: str) -> None:
    # Attack: AMV_CALIB_TRUSTED_KEYS=" " (or ":") read as "no keys", so a tampered, rehashed
    # production PROCEEDed. Now a variable that is set but names no key refuses every load,
    # even with keys given in code, and the genuine version alike.
    from amv_calib.gate import Gate

    version, _, public = signed_v1
    genuine = version.with_name("v2")
    shutil.copytree(version, genuine)
    _neutralise_calibrator(version)
    monkeypatch.setenv("AMV_CALIB_TRUSTED_KEYS", blank)
    for gate in (Gate.from_artifact(version), Gate.from_artifact(genuine),
                 Gate.from_artifact(version, trusted_keys=[public])):
        d = gate.evaluate(_claim_action())
        assert d.regime == "ABSTAIN"
        assert f"AMV_CALIB_TRUSTED_KEYS={blank!r} is set but names no key file" in d.reason


def test_empty_trusted_keys_list_refuses_and_one_path_is_a_key(
        signed_v1: tuple[Path, Path, Path]) -> None:
    # Attack: trusted_keys=[] fell back to "no keys"; a Path raised TypeError and a str was
    # read character by character. Now [] refuses, and one str or Path is one key.
    from amv_calib.contract import load_artifact
    from amv_calib.gate import Gate

    version, _, public = signed_v1
    for key in (public, str(public)):
        assert load_artifact(version, trusted_keys=key).signed_by == Path(public)
    _neutralise_calibrator(version)
    d = Gate.from_artifact(version, trusted_keys=[]).evaluate(_claim_action())
    assert d.regime == "ABSTAIN" and "trusted_keys names no key (an empty list)" in d.reason
    for key in (public, str(public)):
        d = Gate.from_artifact(version, trusted_keys=key).evaluate(_claim_action())
        assert d.regime == "ABSTAIN" and "signature does not verify" in d.reason


def test_cli_gate_under_a_blank_trusted_keys_variable_abstains(
        signed_v1: tuple[Path, Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    from amv_calib.cli import main

    version, _, _ = signed_v1
    _neutralise_calibrator(version)
    action = tmp_path / "action.json"
    action.write_text(json.dumps({"action": _claim_action_dict()}))
    monkeypatch.setenv("AMV_CALIB_TRUSTED_KEYS", ":")
    assert main(["gate", "--action", str(action), "--artifact", str(version)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["regime"] == "ABSTAIN" and "names no key file" in out["reason"]
    # a bare calibrator is refused too (exit 2), rather than read unsigned
    assert main(["gate", "--action", str(action), "--calibrator",
                 str(version / "calibrator.json")]) == 2
    assert "names no key file" in capsys.readouterr().err


# -- R2-2. a key given twice read last-wins --------------------------------------------------
def _transfer(theta: float) -> dict[str, Any]:
    """An action the gate lets through at a small theta only (p = 0.02, kappa = 1)."""
    return {"action_id": "tx", "tool_name": "bank_transfer", "impact_cost_theta": theta,
            "abstention_cost_kappa": 1.0,
            "premises": [{"id": "p", "calibrated_violation_probability": 0.02}]}


def _twice(first: float, last: float) -> str:
    """The attack's action file: ``impact_cost_theta`` given twice."""
    body = json.dumps(_transfer(first))
    return '{"action": ' + body[:-1] + f', "impact_cost_theta": {last}}}' + "}"


def test_action_giving_a_key_twice_is_refused_naming_it(
        tmp_path: Path, repo_root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Attack: "impact_cost_theta": 120.0, ..., "impact_cost_theta": 0.001 was read last-wins
    # and the gate answered PROCEED, where the first value alone gives ABSTAIN.
    from amv_calib.cli import main

    art = str(repo_root / "models" / "amv-guard" / "v1")
    regimes = {}
    for name, theta in (("first", 120.0), ("last", 0.001)):
        one = tmp_path / f"{name}.json"
        one.write_text(json.dumps({"action": _transfer(theta)}))
        assert main(["gate", "--action", str(one), "--artifact", art]) == 0
        regimes[name] = json.loads(capsys.readouterr().out)["regime"]
    assert regimes == {"first": "ABSTAIN", "last": "PROCEED"}  # what is at stake
    action = tmp_path / "twice.json"
    action.write_text(_twice(120.0, 0.001))
    assert json.loads(action.read_text())["action"]["impact_cost_theta"] == 0.001  # last-wins
    assert main(["gate", "--action", str(action), "--artifact", art]) == 2
    err = capsys.readouterr().err
    assert str(action) in err and "key 'impact_cost_theta' appears twice" in err, err


def test_served_model_answers_a_request_giving_a_key_twice_with_http_400() -> None:
    from mlflow.exceptions import MlflowException

    from amv_calib.gate import Gate
    from amv_calib.tracking import GateModel

    model = GateModel()
    model._gate, model._refusal, model._version = Gate(), None, "v1"
    with pytest.raises(MlflowException, match="key 'impact_cost_theta' appears twice") as err:
        model.predict(None, pd.DataFrame({"action": [_twice(120.0, 0.001)]}))  # type: ignore[arg-type]
    assert err.value.get_http_status_code() == 400


def test_jsonl_claim_giving_a_key_twice_is_rejected_with_the_reason(tmp_path: Path) -> None:
    from amv_calib.claims import ingest_file

    src = tmp_path / "twice.jsonl"
    good = json.dumps(_BASE)
    twice = good[:-1] + ', "violated": true}'
    src.write_text(f"{good}\n{twice}\n")
    s = ingest_file(src, tmp_path / "out")
    assert (s.read, s.accepted, s.rejected) == (2, 1, 1)
    assert s.rejected_by_reason == {"key given twice": 1}
    reason = pd.read_csv(tmp_path / "out" / "rejects.csv")["reason"].iloc[0]
    assert "key 'violated' appears twice" in reason


def test_decision_log_and_outcome_records_giving_a_key_twice_are_refused(
        tmp_path: Path) -> None:
    from amv_calib.claims import load_outcomes, read_uses

    record = {"time": "2026-01-01T00:00:00Z", "action_id": "a", "theta": 5.0, "kappa": 1.0,
              "premises": [{"id": "p", "claim_id": "c", "recency_hours": 1.0,
                            "source_trust_score": 0.5, "model_confidence": 0.5,
                            "contradiction_flag": False, "p": 0.1}], "regime": "PROCEED"}
    line = json.dumps(record)
    for twice in (line[:-1] + ', "regime": "ABSTAIN"}',  # a key the join reads
                  line[:-1] + ', "reason": "x", "reason": "y"}'):  # and one it does not
        log = tmp_path / "decisions.jsonl"
        log.write_text(line + "\n" + twice + "\n" + line.replace('"a"', '"b"') + "\n")
        with pytest.raises(DataContractError, match=r"line 2 is not a JSON object \(key "):
            list(read_decision_log(log))
        for columnar in (True, False):  # the fast reader and the line reader agree
            with pytest.raises(DataContractError, match=r"line 2 is not a JSON object"):
                read_uses(log, columnar=columnar)
            with pytest.warns(UserWarning, match="skipped corrupt line 2"):
                entries = read_uses(log, columnar=columnar, on_corrupt="skip")
            assert sorted(entries.wide()["action_id"].astype(str)) == ["a", "b"]
    outcomes = tmp_path / "outcomes.jsonl"
    outcomes.write_text('{"claim_id": "c", "time": "2026-01-02T00:00:00Z", "violated": false}\n'
                        '{"claim_id": "c", "time": "2026-01-02T00:00:00Z", "violated": false,'
                        ' "violated": true}\n')
    valid, invalid = load_outcomes(outcomes)
    assert len(valid) == 1 and invalid["row"].tolist() == [2]
    assert "key 'violated' appears twice" in invalid["reason"].iloc[0]


def test_episodes_thresholds_and_certificates_giving_a_key_twice_are_refused(
        tmp_path: Path, sample_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from amv_calib.artifacts import export_artifact
    from amv_calib.contract import seed_prior_calibrator
    from amv_calib.exceptions import ConfigError
    from amv_calib.tuning import load_episodes

    first = (sample_dir / "episodes.jsonl").read_text().splitlines()[0]
    episodes = tmp_path / "episodes.jsonl"
    episodes.write_text(first + "\n" + first[:-1] + ', "family": "x"}\n')
    with pytest.raises(DataContractError, match=r"row 2.*key 'family' appears twice"):
        load_episodes(episodes)
    thresholds = tmp_path / "thresholds.json"
    thresholds.write_text('{"lambda_cost_scale": 1.0, "delta_loss_threshold": 1.0, '
                          '"epsilon_harm_bound": 0.05, "epsilon_harm_bound": 1.0, '
                          '"planner": "lookahead", "max_verifications": 2, "clamp": null}')
    with pytest.raises(ConfigError, match="key 'epsilon_harm_bound' appears twice"):
        export_artifact(calibrator=seed_prior_calibrator(), thresholds=thresholds, name="m",
                        models_dir=tmp_path / "models")
    certificate = tmp_path / "certificate.json"
    certificate.write_text('{"alpha": 0.05, "delta": 0.1, "n": 500, "alpha": 0.9}')
    with pytest.raises(ConfigError, match="key 'alpha' appears twice"):
        export_artifact(calibrator=seed_prior_calibrator(), certificate=certificate,
                        name="m", models_dir=tmp_path / "models")


# -- R2-5. JSONL values judged by their neighbours' type --------------------------------------
def test_jsonl_value_is_judged_by_its_own_type_whatever_the_chunk(tmp_path: Path) -> None:
    # Attack: one row with "violated": 1.0, another with "source_trust_score": true. With
    # the default chunk the first was rejected and the second accepted as trust 1.0; with
    # --chunksize 1 the other way round. Now each value by its own JSON type, one rule: a
    # number is a boolean if it is 0 or 1 (as in a typed Parquet column); true is no score.
    from amv_calib.claims import load_claims

    src = tmp_path / "mixed.jsonl"
    rows = [{**_BASE, "claim_id": "v", "violated": 1.0},
            {**_BASE, "claim_id": "t", "source_trust_score": True},
            {**_BASE, "claim_id": "plain"}]
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    for size in (1, 2, 3, 250_000):
        claims, rejects = load_claims(src, chunksize=size)
        assert claims["claim_id"].tolist() == ["v", "plain"], size
        assert claims["violated"].tolist() == [True, False]
        assert rejects["row"].tolist() == [2]
        assert rejects["reason"].iloc[0] == "source_trust_score='true' is not a number"


# -- R2-4. one writer's failed append swallows another process's record ------------------------
_OTHER_WRITER = textwrap.dedent("""
    import sys
    from amv_calib.gate import DecisionLogWriter

    w = DecisionLogWriter(sys.argv[1])  # opened before the other writer fails
    w.append({"action_id": "b-first", "regime": "PROCEED"})
    print("ready", flush=True)
    sys.stdin.readline()
    w.append({"action_id": "b-second", "regime": "ABSTAIN"})
    w.close()
""")


def test_failed_append_of_one_process_loses_no_record_of_another(tmp_path: Path) -> None:
    # Attack: writer A's write failed part-way (ulimit -f), leaving a fragment; writer B (its
    # own process, its file already open) appended next, glued onto the fragment, and the
    # reader skipped the whole line: B lost a record it was told was written. Now every
    # record starts on a fresh line, under a lock all writers take.
    log = tmp_path / "decisions.jsonl"
    other = subprocess.Popen([sys.executable, "-c", _OTHER_WRITER, str(log)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert other.stdout is not None and other.stdout.readline().strip() == "ready"
    # writer A fails part-way and writes nothing more (it gave up, or it exited)
    script = _FULL_DISK.replace('w.append({"action_id": "after", "regime": "ABSTAIN"})', "")
    failed = subprocess.run([sys.executable, "-c", script, str(log)], capture_output=True,
                            text=True, timeout=60)
    assert failed.returncode == 0 and failed.stdout.startswith("failed: 27"), failed.stderr
    assert not log.read_bytes().endswith(b"\n")  # A's fragment ends the file
    assert other.communicate("go\n", timeout=60)[1] is None and other.returncode == 0
    lines = log.read_bytes().split(b"\n")
    assert len(lines) == 5 and lines[2] and not lines[2].endswith(b"}")  # the fragment alone
    stats = LogReadStats()
    with pytest.warns(UserWarning, match="skipped corrupt line 3"):
        records = list(read_decision_log(log, on_corrupt="skip", stats=stats))
    assert [r["action_id"] for r in records] == ["b-first", "before", "b-second"]
    assert (stats.records, stats.corrupt, stats.fragments) == (3, 1, 0)


def _glued_log(tmp_path: Path) -> Path:
    """A log an older writer left: a fragment with the next record glued onto it."""
    from amv_calib.gate import encode_record

    rec = {"time": "2026-01-01T00:00:00Z", "action_id": "a", "theta": 5.0, "kappa": 1.0,
           "premises": [{"id": "p", "claim_id": "c", "recency_hours": 1.0,
                         "source_trust_score": 0.5, "model_confidence": 0.5,
                         "contradiction_flag": False, "p": 0.1}], "regime": "PROCEED"}
    fragment = encode_record({**rec, "action_id": "lost"})[:70]
    log = tmp_path / "glued.jsonl"
    log.write_bytes(encode_record(rec) + fragment + encode_record({**rec, "action_id": "b"})
                    + encode_record({**rec, "action_id": "c"}))
    return log


def test_reader_resynchronises_at_the_record_inside_a_corrupt_line(tmp_path: Path) -> None:
    from amv_calib.claims import read_uses

    log = _glued_log(tmp_path)
    assert log.read_bytes().count(b"\n") == 3  # the fragment and b share line 2
    with pytest.raises(DataContractError, match=r"line 2 starts with 70 bytes that are not a "
                                                r"record .* before a whole record"):
        list(read_decision_log(log))
    stats = LogReadStats()
    with pytest.warns(UserWarning, match="line 2: skipped a 70-byte fragment"):
        records = list(read_decision_log(log, on_corrupt="skip", stats=stats))
    assert [r["action_id"] for r in records] == ["a", "b", "c"]
    assert (stats.lines, stats.records, stats.corrupt, stats.fragments) == (3, 3, 0, 1)
    for columnar in (True, False):  # label reads it the same way
        with pytest.warns(UserWarning, match="70-byte fragment"):
            log_entries = read_uses(log, on_corrupt="skip", columnar=columnar)
        assert log_entries.wide()["action_id"].astype(str).tolist() == ["a", "b", "c"]
        assert log_entries.stats[0].fragments == 1


# -- R2-7. readers hang on a FIFO or a device ---------------------------------------------------
def _answers_within(argv: list[str], seconds: float = 60.0) -> int:
    """``main(argv)`` run in a thread that must return within ``seconds`` (a hang fails)."""
    import threading

    from amv_calib.cli import main

    result: dict[str, int] = {}
    thread = threading.Thread(target=lambda: result.update(code=main(argv)), daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"amv-calib {argv[0]} hung"
    return result["code"]


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
    pd.DataFrame([_BASE]).to_parquet(folder / "a.parquet")
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
    assert _answers_within(argv) == 2
    err = capsys.readouterr().err
    assert "is a FIFO, not a regular file" in err, err


def test_pipeline_input_of_dev_zero_is_refused_at_once(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Attack: a pipeline input of /dev/zero hung in the step's cache-key hashing.
    toml = tmp_path / "p.toml"
    toml.write_text("""
[pipeline]
name = "zero"
workdir = "work"
tracking = false

[[steps]]
name = "ingest"
kind = "ingest"
input = "/dev/zero"
""", encoding="utf-8")
    assert _answers_within(["run", str(toml)]) == 2
    err = capsys.readouterr().err
    assert "/dev/zero: pipeline input is a device, not a regular file" in err, err


# -- R2-8. CSV injection in label's outputs ---------------------------------------------------
_FORMULAS = ('=HYPERLINK("http://evil","click")', "@SUM(1+1)", "+cmd|' /C calc'!A0",
             "-2+3")


def _formula_log(tmp_path: Path) -> tuple[Path, Path]:
    """A decision log and outcomes whose ids are spreadsheet formulas."""
    from amv_calib.gate import encode_record

    lines = []
    for i, text in enumerate(_FORMULAS):
        lines.append(encode_record({
            "time": f"2026-01-0{i + 1}T00:00:00Z", "action_id": f"{text}-a", "theta": 5.0,
            "kappa": 1.0, "regime": "PROCEED",
            "premises": [{"id": "p", "claim_id": text, "recency_hours": 1.0,
                          "source_trust_score": 0.5, "model_confidence": 0.5,
                          "contradiction_flag": False, "p": 0.1},
                         {"id": "q", "claim_id": f"{text}-unjoined", "recency_hours": 1.0,
                          "source_trust_score": 0.5, "model_confidence": 0.5,
                          "contradiction_flag": False, "p": 0.1}]}))
    log = tmp_path / "decisions.jsonl"
    log.write_bytes(b"".join(lines))
    outcomes = tmp_path / "outcomes.csv"
    pd.DataFrame({"claim_id": [*_FORMULAS, "=never-used"], "action_id": None,
                  "time": "2026-02-01T00:00:00Z", "violated": "true"}
                 ).to_csv(outcomes, index=False)
    return log, outcomes


def _csv_cells(path: Path) -> list[dict[str, str]]:
    import csv as csv_module

    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv_module.DictReader(fh))


@pytest.mark.parametrize("out", ["claims.csv", "folder"], ids=["label-out-csv", "label-folder"])
def test_label_csv_files_are_spreadsheet_safe(tmp_path: Path, out: str) -> None:
    # Attack: a claim_id of =HYPERLINK(...) or @SUM(1+1) appeared raw in claims.unjoined.csv
    # and in `label --out x.csv`, to run as a formula when opened. Now every CSV the product
    # writes for people escapes such a cell as rejects.csv does (a leading ').
    from amv_calib.cli import main

    log, outcomes = _formula_log(tmp_path)
    target = tmp_path / "out" / out
    assert main(["label", "--decisions", str(log), "--outcomes", str(outcomes), "--out",
                 str(target)]) == 0
    unjoined = target.with_name("claims.unjoined.csv") if out.endswith(".csv") \
        else target / "claims.unjoined.csv"
    files = [unjoined, target] if out.endswith(".csv") else [unjoined]
    for path in files:
        cells = _csv_cells(path)
        assert cells
        numbers = {"line", "recency_hours", "source_trust_score", "model_confidence", "p_true",
                   "label_weight", "p_logged", "theta", "kappa"}
        for row in cells:
            for key, value in row.items():
                if key not in numbers:
                    assert not value.startswith(("=", "+", "-", "@", "\t", "\r")), (path, value)
    ids = {row["claim_id"] for row in _csv_cells(unjoined)}
    assert "'=never-used" in ids and "'@SUM(1+1)-unjoined" in ids
    if out.endswith(".csv"):
        assert {row["claim_id"] for row in _csv_cells(target)} == {"'" + t for t in _FORMULAS}
        # the lossless table keeps the ids as they are
        lossless = tmp_path / "out" / "claims.parquet"
        assert main(["label", "--decisions", str(log), "--outcomes", str(outcomes), "--out",
                     str(lossless), "--overwrite"]) == 0
        assert set(pd.read_parquet(lossless)["claim_id"]) == set(_FORMULAS)


# -- R2-9. tracebacks instead of clear errors ------------------------------------------------
_OUTCOMES_HEAD = b"claim_id,action_id,time,violated\n"


def _label(tmp_path: Path, log: Path, *outcomes: Path,
           extra: tuple[str, ...] = ()) -> tuple[int, Path]:
    from amv_calib.cli import main

    out = tmp_path / "out" / "claims.parquet"
    argv = ["label", "--decisions", str(log), "--out", str(out), *extra]
    if outcomes:
        argv += ["--outcomes", *map(str, outcomes)]
    return main(argv), out


def _join_report(out: Path) -> dict[str, Any]:
    report: dict[str, Any] = json.loads(out.with_name("claims.join_report.json").read_text())
    return report


@pytest.mark.parametrize("outcome", ["extra-field", "missing-field", "bad-utf8-csv",
                                     "bad-utf8-jsonl"])
def test_malformed_outcome_rows_are_rejected_with_their_line(
        tmp_path: Path, examples_dir: Path, outcome: str) -> None:
    # Attack: an outcomes CSV row with an extra field, or bad UTF-8 in the outcomes, gave a
    # traceback (exit 1); pandas also shifted the columns of a lone row with one field too
    # many without a word. Now the row is an invalid outcome with its line and reason.
    good = b"mem-iban-alice,,2026-11-04T00:00:00Z,false\n"
    bad, reason = {
        "extra-field": (b"c2,,2026-11-04T00:00:00Z,true,EXTRA\n",
                        "line 3: the row has 5 fields, the header 4"),
        "missing-field": (b"c2,,2026-11-04T00:00:00Z\n",
                          "line 3: the row has 3 fields, the header 4"),
        "bad-utf8-csv": (b"c\xff2,,2026-11-04T00:00:00Z,true\n", "line 3: not UTF-8 text"),
        "bad-utf8-jsonl": (b'{"claim_id": "c\xff2", "time": "2026-11-04T00:00:00Z", '
                           b'"violated": true}\n', "utf-8"),
    }[outcome]
    if outcome.endswith("jsonl"):
        outcomes = tmp_path / "outcomes.jsonl"
        outcomes.write_bytes(b'{"claim_id": "mem-iban-alice", "time": "2026-11-04T00:00:00Z",'
                             b' "violated": false}\n' + bad)
    else:
        outcomes = tmp_path / "outcomes.csv"
        outcomes.write_bytes(_OUTCOMES_HEAD + good + bad)
    code, out = _label(tmp_path, examples_dir / "decisions.jsonl", outcomes)
    assert code == 0
    report = _join_report(out)
    assert report["outcomes_read"] == 2 and report["outcomes"]["invalid"] == 1
    assert report["outcomes"]["used"] == 1  # the good row was read as it is
    details = pd.read_csv(out.with_name("claims.unjoined.csv"))
    invalid = details[(details["kind"] == "outcome") & (details["reason"] == "invalid")]
    assert invalid["line"].tolist() == [2] and reason in invalid["detail"].iloc[0]


def test_empty_inputs_and_bad_utf8_logs_answer_clearly(
        tmp_path: Path, examples_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Attack: label with an empty decision log, an empty outcomes file, or bad UTF-8 in the
    # log (even with --skip-corrupt) gave tracebacks. Now: exit 2 naming the file (and the
    # line) with nothing written, or the input read for what it holds.
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    code, out = _label(tmp_path, empty)
    assert code == 2 and not out.parent.exists()
    assert f"no decision record to label in {empty} (0 lines" in capsys.readouterr().err
    log = examples_dir / "decisions.jsonl"
    for name in ("none.csv", "none.jsonl"):
        (tmp_path / name).write_bytes(b"")
        code, out = _label(tmp_path, log, tmp_path / name, extra=("--overwrite",))
        assert code == 0 and _join_report(out)["outcomes_read"] == 0
    capsys.readouterr()
    lines = log.read_bytes().split(b"\n")
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b"\n".join([lines[0], b'{"action_id": "x\xff"}', *lines[1:]]))
    code, out = _label(tmp_path / "b", bad)
    assert code == 2 and not out.parent.exists()
    assert f"{bad}: line 2 is not a JSON object ('utf-8' codec" in capsys.readouterr().err
    code, out = _label(tmp_path / "c", bad, extra=("--skip-corrupt",))
    assert code == 0 and _join_report(out)["skipped_lines"]["corrupt"] == 1


def test_jsonl_claim_of_bad_utf8_is_a_rejected_row(tmp_path: Path) -> None:
    # Attack: ingest of JSONL with bad UTF-8 gave a traceback. Now the line is rejected.
    from amv_calib.claims import ingest_file

    src = tmp_path / "claims.jsonl"
    src.write_bytes(json.dumps(_BASE).encode() + b"\n" + b'{"claim_id": "c\xff"}\n'
                    + json.dumps({**_BASE, "claim_id": "d"}).encode() + b"\n")
    s = ingest_file(src, tmp_path / "out")
    assert (s.read, s.accepted, s.rejected) == (3, 2, 1)
    assert s.rejected_by_reason == {"not UTF-8": 1}
    rejects = pd.read_csv(tmp_path / "out" / "rejects.csv")
    assert rejects["row"].tolist() == [2]
    assert rejects["reason"].iloc[0].startswith("line is not valid UTF-8 text (invalid start "
                                                "byte at byte 15)")


# -- R2-6. monitor's work and memory unbounded -----------------------------------------------
def _log_with(tmp_path: Path, examples_dir: Path, stamp: str | None, lines: int = 400,
              after: str | None = None) -> Path:
    """The first ``lines`` records of the example log, moved to start a day after ``after``
    (an ISO time: the monitored version's go-live), after one record dated ``stamp``."""
    head = (examples_dir / "logs" / "decisions.jsonl").read_bytes().split(b"\n")[:lines]
    out = tmp_path / f"decisions-{stamp or 'plain'}.jsonl"
    records = [json.loads(line) for line in head]
    if after is not None:
        shift = (pd.Timestamp(after) + pd.Timedelta(days=1)).floor("D") \
            - pd.Timestamp(records[0]["time"])
        for r in records:
            r["time"] = (pd.Timestamp(r["time"]) + shift).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    extra = [{**records[0], "time": stamp, "action_id": "outlier"}] if stamp else []
    out.write_bytes(b"".join(json.dumps(r).encode() + b"\n" for r in [*extra, *records]))
    return out


@pytest.mark.parametrize("stamp,window,capped", [
    ("9999-12-31T00:00:00Z", "7d", True), ("1700-01-01T00:00:00Z", "7d", False),
    ("0001-01-01T00:00:00Z", "7d", False), (None, "1m", True)],
    ids=["year-9999-7d", "year-1700-7d", "year-1-7d", "26-days-1m"])
def test_monitor_answers_at_once_whatever_the_span(
        tmp_path: Path, examples_dir: Path, repo_root: Path, stamp: str | None,
        window: str, capped: bool) -> None:
    # Attack: one record dated 1700 made --window 7d run past 120 s at 1.6 GB (17,049
    # windows, each a pass over every use, and a figure with a patch and a label per
    # window); --window 1m over 26 days past 180 s; year 1 gave a traceback. Now windows
    # start at go-live (older uses are left out, counted and said) and at most MAX_WINDOWS
    # (the newest) are made, the rest counted and said; every step bounded.
    from amv_calib.contract import load_artifact
    from amv_calib.monitoring import monitor, write_monitor_outputs
    from amv_calib.monitoring._monitor import MAX_WINDOWS

    art = repo_root / "models" / "amv-guard" / "v1"
    live = load_artifact(art).manifest["created_utc"]
    log = _log_with(tmp_path, examples_dir, stamp, after=live)
    t0 = time.process_time()
    report, claims = monitor(art, [log], window=window)
    write_monitor_outputs(report, claims, tmp_path / "out")
    spent = time.process_time() - t0
    assert spent < 30, f"{spent:.1f} s of CPU"
    table = (tmp_path / "out" / "monitor.txt").read_text()
    if capped:
        assert len(report.windows) == MAX_WINDOWS
        assert report.counts["windows_dropped"] > 0
        assert f"{report.counts['windows_dropped']} older windows were not made" in table
    else:  # the outlier is older than go-live: its uses are left out, no window made for it
        outlier = json.loads(log.read_text().splitlines()[0])
        assert report.uses_outside == len(outlier["premises"])
        assert f"{report.uses_outside} uses dated before" in table
        assert len(report.windows) <= 5  # 26 days of 7-day windows
    assert report.uses_read - report.uses_outside > 0
    assert json.loads((tmp_path / "out" / "monitor.json").read_text())["counts"] \
        == report.counts


@pytest.mark.parametrize("argv,message", [
    (["--window", "99999999999d"], "is wider than 36525 days"),
    (["--since", "10000-01-01"], "out of range (years 1 to 9999)"),
], ids=["huge-window", "since-year-10000"])
def test_monitor_refuses_impossible_windows_with_exit_2(
        tmp_path: Path, examples_dir: Path, repo_root: Path, argv: list[str], message: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    from amv_calib.cli import main

    log = _log_with(tmp_path, examples_dir, None, lines=50)
    assert main(["monitor", "--artifact", str(repo_root / "models" / "amv-guard" / "v1"),
                 "--decisions", str(log), "--no-tracking", *argv]) == 2
    assert message in capsys.readouterr().err


# -- R2-10. smaller ones -------------------------------------------------------------------------
def test_version_folder_linked_out_of_models_is_refused(
        tmp_path: Path, repo_root: Path, shipped_models: Callable[[Path], Path]) -> None:
    # Attack: models/amv-guard/v1 a symlink to a folder elsewhere loaded when no key was set
    # (a link out of the version folder was already refused). Now the version folder is
    # opened without following links, by path or through an alias.
    from amv_calib.gate import Gate

    elsewhere = tmp_path / "elsewhere" / "v1"
    shutil.copytree(repo_root / "models" / "amv-guard" / "v1", elsewhere)
    model = shipped_models(tmp_path / "models") / "amv-guard"
    shutil.rmtree(model / "v1")
    (model / "v1").symlink_to(elsewhere, target_is_directory=True)
    assert Gate.from_artifact(elsewhere).refusal is None  # the folder itself is sound
    for ref in (model / "v1", f"{model}@production"):
        d = Gate.from_artifact(ref).evaluate(_claim_action())
        assert d.regime == "ABSTAIN"
        assert "version folder is a link that leaves" in d.reason, d.reason


def test_logged_action_repeating_a_premise_id_is_refused_not_merged(tmp_path: Path) -> None:
    # Attack: a logged action with two premises of id "p" kept only the second premise's
    # use, silently. Now the record's uses are invalid, with the reason.
    from amv_calib.claims import label_claims
    from amv_calib.gate import encode_record

    prem = {"recency_hours": 1.0, "source_trust_score": 0.5, "model_confidence": 0.5,
            "contradiction_flag": False, "p": 0.1}
    log = tmp_path / "decisions.jsonl"
    log.write_bytes(b"".join(encode_record({
        "time": "2026-01-01T00:00:00Z", "action_id": a, "theta": 5.0, "kappa": 1.0,
        "regime": "PROCEED",
        "premises": [{"id": "p", "claim_id": "c1", **prem}, {"id": second, "claim_id": "c2",
                                                              **prem},
                     {"id": "r", "claim_id": "c3", **prem}]})
        for a, second in (("twice", "p"), ("fine", "q"))))
    outcomes = pd.DataFrame({"claim_id": ["c1", "c2", "c3"], "action_id": None,
                             "time": "2026-02-01T00:00:00Z", "violated": [True, False, False]})
    for columnar in (True, False):
        claims, report = label_claims(log, outcomes, columnar=columnar)
        assert sorted(claims["action_id"].astype(str)) == ["fine"] * 3
        assert report.unjoined["invalid_use"] == 2  # p (once, the other merged) and r
        bad = report.unjoined_uses
        assert set(bad["action_id"].astype(str)) == {"twice"}
        assert set(bad["detail"].astype(str)) == {
            "the record gives premise id 'p' to two premises (which one a label would be for "
            "is ambiguous)"}


@pytest.mark.parametrize("fmt", ["csv", "jsonl", "parquet"])
def test_claim_ids_differing_by_surrounding_space_are_one_claim(tmp_path: Path,
                                                                fmt: str) -> None:
    # Attack: "c1" and " c1" became two claims. The rule (docs/data.md): every reader strips
    # a claim id's surrounding white space; the second row is then a duplicate of the first.
    from amv_calib.claims import load_claims

    rows = [{**_BASE, "claim_id": "c1"}, {**_BASE, "claim_id": " c1"},
            {**_BASE, "claim_id": "\tc2 "}, {**_BASE, "claim_id": "  "}]
    src = tmp_path / f"ids.{fmt}"
    if fmt == "jsonl":
        src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    elif fmt == "csv":
        pd.DataFrame(rows).to_csv(src, index=False)
    else:
        pd.DataFrame(rows).to_parquet(src)
    claims, rejects = load_claims(src)
    assert claims["claim_id"].tolist() == ["c1", "c2"]
    assert rejects["row"].tolist() == [2, 4]
    assert rejects["reason"].tolist() == ["duplicate (claim_id, timestamp) of row 1",
                                          "claim_id is empty"]


def test_label_strips_claim_ids_of_logs_and_outcomes_alike(tmp_path: Path) -> None:
    from amv_calib.claims import label_claims
    from amv_calib.gate import encode_record

    log = tmp_path / "decisions.jsonl"
    log.write_bytes(encode_record({
        "time": "2026-01-01T00:00:00Z", "action_id": "a", "theta": 5.0, "kappa": 1.0,
        "regime": "PROCEED", "premises": [{"id": "p", "claim_id": " c1 ", "recency_hours": 1.0,
                                           "source_trust_score": 0.5, "model_confidence": 0.5,
                                           "contradiction_flag": False, "p": 0.1}]}))
    outcomes = pd.DataFrame({"claim_id": ["c1\t"], "action_id": None,
                             "time": "2026-02-01T00:00:00Z", "violated": [True]})
    for columnar in (True, False):
        claims, report = label_claims(log, outcomes, columnar=columnar)
        assert claims["claim_id"].tolist() == ["c1"] and report.joined == 1


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_claim_id_that_is_a_list_is_rejected(tmp_path: Path, fmt: str) -> None:
    # Attack: a JSONL claim_id given as a list was accepted as its text.
    from amv_calib.claims import load_claims

    src = tmp_path / f"list.{fmt}"
    rows = [{**_BASE, "claim_id": ["a", "b"]}, {**_BASE, "claim_id": ["c"]}]
    if fmt == "jsonl":  # alone, and beside a string id
        src.write_text("".join(json.dumps(r) + "\n" for r in rows)
                       + json.dumps({**_BASE, "claim_id": "ok"}) + "\n")
    else:
        pd.DataFrame(rows).to_parquet(src)
    for size in (1, 250_000):
        claims, rejects = load_claims(src, chunksize=size)
        assert rejects["row"].tolist() == [1, 2]
        assert all("is a list or an object, not a string or number" in r
                   for r in rejects["reason"])
        assert claims["claim_id"].tolist() == (["ok"] if fmt == "jsonl" else [])


def test_monitor_says_when_another_artifact_decided(
        tmp_path: Path, examples_dir: Path, repo_root: Path,
        capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture) -> None:
    # Attack: monitor judged logs written by another model or version against this
    # artifact's profile without a word. Now their uses are left out of every statistic,
    # counted, warned about and said in the report and the table, or (--other-artifacts
    # refuse) the run exits 2 naming them.
    from amv_calib.cli import main
    from amv_calib.contract import load_artifact
    from amv_calib.monitoring import monitor

    art = repo_root / "models" / "amv-guard" / "v1"
    log = _log_with(tmp_path, examples_dir, None, lines=300,
                    after=load_artifact(art).manifest["created_utc"])
    lines = log.read_text().splitlines()
    other = [line.replace('"version": "v1"', '"version": "v2"') for line in lines[:100]]
    assert all('"version": "v2"' in line for line in other)
    log.write_text("\n".join([*other, *lines[100:]]) + "\n")
    n_other = sum(len(json.loads(line)["premises"]) for line in other)
    report, _ = monitor(art, [log], window="7d")
    assert report.counts["uses_other_versions"] == n_other
    assert sum(w.uses for w in report.windows) == report.uses_read - n_other
    note = f"{n_other} uses decided by other artifacts than amv-guard@v1"
    assert any(r.startswith(note) for r in report.reasons)
    assert note in report.table() and note in caplog.text
    assert main(["monitor", "--artifact", str(art), "--decisions", str(log), "--no-tracking",
                 "--other-artifacts", "refuse"]) == 2
    err = capsys.readouterr().err
    assert f"the decision logs hold {n_other} uses decided by other artifacts than " \
           f"amv-guard@v1" in err
