"""Attacks on the artifact loader replayed: whoever can write the models folder, without the
private key, gets an ABSTAIN naming the refusal, never a PROCEED on a doctored artifact, and
nothing the loader opens makes it hang.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import textwrap
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import threat_helpers
from threat_helpers import claim_action


# -- fail-open for anyone who can write the models folder ------------------------------------------
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
    assert gate.probabilities(claim_action())[0] > 0.9
    assert gate.evaluate(claim_action()).regime == "ABSTAIN"


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
    assert Gate.from_artifact(version).evaluate(claim_action()).regime == "PROCEED"
    # Now: under a trusted key (argument or environment) it refuses and ABSTAINs, saying why.
    for gate in (Gate.from_artifact(version, trusted_keys=[public]),
                 _with_env(monkeypatch, public, lambda: Gate.from_artifact(version))):
        d = gate.evaluate(claim_action())
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
    d = Gate.from_artifact(version, trusted_keys=[public]).evaluate(claim_action())
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


# -- the loader hangs or crashes instead of answering ABSTAIN --------------------------------------
_LOAD = textwrap.dedent("""
    import json, sys
    from amv_calib.gate import Gate
    from threat_helpers import claim_action
    d = Gate.from_artifact(sys.argv[1]).evaluate(claim_action())
    print(json.dumps({"regime": d.regime, "reason": d.reason}))
""")


def _load_in_child(ref: Path) -> dict[str, Any]:
    """Load ``ref`` in a child process that must answer within 30 s (a hang fails)."""
    # the child imports the helper from its folder, and amv_calib as this process does
    here = Path(threat_helpers.__file__).parent
    path = os.pathsep.join(filter(None, [str(here), os.environ.get("PYTHONPATH")]))
    done = subprocess.run([sys.executable, "-c", _LOAD, str(ref)], capture_output=True,
                          text=True, timeout=30, cwd=here, env={**os.environ, "PYTHONPATH": path})
    assert done.returncode == 0, done.stderr[-2000:]
    out: dict[str, Any] = json.loads(done.stdout)
    return out



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
    d = Gate.from_artifact(v1).evaluate(claim_action())
    assert d.regime == "ABSTAIN" and "nested deeper than 32 levels" in d.reason


def test_symlink_leaving_the_version_folder_is_refused(v1: Path, tmp_path: Path) -> None:
    from amv_calib.gate import Gate

    outside = tmp_path / "elsewhere.json"
    shutil.move(v1 / "calibrator.json", outside)
    (v1 / "calibrator.json").symlink_to(outside)  # same bytes, same sha256: only the place
    d = Gate.from_artifact(v1).evaluate(claim_action())
    assert d.regime == "ABSTAIN" and "is a link that leaves" in d.reason


# -- the signature checked on other bytes than the gate loads --------------------------------------
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
    assert Gate.from_artifact(doctored).evaluate(claim_action()).regime == "PROCEED"
    assert Gate.from_artifact(doctored, trusted_keys=[public]).refusal is not None
    stop = tmp_path / "stop"
    swapper = subprocess.Popen([sys.executable, "-c", _SWAPPER, str(version), str(doctored),
                                str(stop)], stdout=subprocess.PIPE, text=True)
    assert swapper.stdout is not None and swapper.stdout.readline().strip() == "ready"
    seen: Counter[str] = Counter()
    try:
        for _ in range(500):
            gate = Gate.from_artifact(version, trusted_keys=[public])
            decision = gate.evaluate(claim_action())
            if gate.refusal is None:  # accepted: must be the genuine calibrator
                seen["accepted"] += 1
                assert gate.probabilities(claim_action())[0] > 0.9
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


# -- a blank trusted-keys variable switched signing off --------------------------------------------
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
        d = gate.evaluate(claim_action())
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
    d = Gate.from_artifact(version, trusted_keys=[]).evaluate(claim_action())
    assert d.regime == "ABSTAIN" and "trusted_keys names no key (an empty list)" in d.reason
    for key in (public, str(public)):
        d = Gate.from_artifact(version, trusted_keys=key).evaluate(claim_action())
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


# -- a version folder linked out of the models folder ----------------------------------------------
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
        d = Gate.from_artifact(ref).evaluate(claim_action())
        assert d.regime == "ABSTAIN"
        assert "version folder is a link that leaves" in d.reason, d.reason
