"""Signed artifact versions: key pairs, ``model.sig``, and what a trusted key accepts."""

from __future__ import annotations

import base64
import json
import shutil
import stat
from collections.abc import Callable
from pathlib import Path

import pytest

from amv_calib.artifacts import keygen, sign_artifact
from amv_calib.contract import SIGNATURE_FILE, verify_signature
from amv_calib.exceptions import ArtifactError, ConfigError


@pytest.fixture
def version(tmp_path: Path, repo_root: Path) -> Path:
    out = tmp_path / "amv-guard" / "v1"
    shutil.copytree(repo_root / "models" / "amv-guard" / "v1", out)
    return out


@pytest.fixture
def keys(tmp_path: Path) -> tuple[Path, Path]:
    return keygen(tmp_path / "keys")


def test_keygen_writes_a_private_key_only_its_owner_reads(keys: tuple[Path, Path]) -> None:
    private, public = keys
    assert private.read_text().startswith("-----BEGIN PRIVATE KEY-----")
    assert public.read_text().startswith("-----BEGIN PUBLIC KEY-----")
    assert stat.S_IMODE(private.stat().st_mode) == 0o600
    with pytest.raises(ConfigError, match="exists; pass --overwrite"):
        keygen(private.parent)


def test_signed_version_verifies_with_its_key_only(version: Path, keys: tuple[Path, Path],
                                                   tmp_path: Path) -> None:
    private, public = keys
    sig = sign_artifact(version, private)
    assert sig == version / SIGNATURE_FILE
    assert json.loads(sig.read_text())["dsseEnvelope"]["payloadType"]
    assert verify_signature(version, [public]) == public
    _, other = keygen(tmp_path / "other")
    with pytest.raises(ArtifactError, match="does not verify with any trusted key"):
        verify_signature(version, [other])
    # several trusted keys: any one that verifies is enough
    assert verify_signature(version, [other, public]) == public


def test_unsigned_version_is_refused_under_a_trusted_key(version: Path,
                                                         keys: tuple[Path, Path]) -> None:
    with pytest.raises(ArtifactError, match=r"unsigned \(no model.sig\)"):
        verify_signature(version, [keys[1]])


@pytest.mark.parametrize("edit", ["manifest", "calibrator", "extra_file"],
                         ids=["manifest", "calibrator", "extra-file"])
def test_any_change_after_signing_is_refused(version: Path, keys: tuple[Path, Path],
                                             edit: str) -> None:
    private, public = keys
    sign_artifact(version, private)
    if edit == "manifest":
        m = json.loads((version / "manifest.json").read_text())
        m["gate"]["epsilon_harm_bound"] = 1.0
        (version / "manifest.json").write_text(json.dumps(m))
    elif edit == "calibrator":
        (version / "calibrator.json").write_text((version / "calibrator.json").read_text()
                                                 .replace("1", "2", 1))
    else:
        (version / "notes.txt").write_text("added later")
    with pytest.raises(ArtifactError, match="does not verify"):
        verify_signature(version, [public])


def test_cli_recipe_keygen_export_signed_verify_and_gate(
        tmp_path: Path, repo_root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from amv_calib.cli import main

    def run(*argv: str) -> dict[str, object]:
        assert main([*argv, "--json"]) == 0
        out: dict[str, object] = json.loads(capsys.readouterr().out)
        return out

    keys = run("keygen", "--out", str(tmp_path / "keys"))
    private, public = str(keys["private_key"]), str(keys["public_key"])
    models = tmp_path / "models"
    v1 = repo_root / "models" / "amv-guard" / "v1"
    exported = run("export", "--calibrator", str(v1 / "calibrator.json"), "--name", "g",
                   "--models-dir", str(models), "--signing-key", private)
    version = Path(str(exported["path"]))
    summary = run("verify-artifact", str(version), "--trusted-key", public)
    assert summary["signature"] == {"file": "model.sig", "verified_by": public}
    # an unsigned version, signed afterwards with `amv-calib sign`
    plain = run("export", "--calibrator", str(v1 / "calibrator.json"), "--name", "g",
                "--models-dir", str(models))
    assert main(["verify-artifact", str(plain["path"]), "--trusted-key", public]) == 1
    assert "unsigned" in capsys.readouterr().err
    run("sign", str(plain["path"]), "--key", private)
    assert run("verify-artifact", str(plain["path"]), "--trusted-key", public)["signature"] \
        == {"file": "model.sig", "verified_by": public}
    # the bundle carries the signature, and the unpacked copy still verifies
    bundle = run("bundle", "g", "v1", "--models-dir", str(models),
                 "--out", str(tmp_path / "g.tar.gz"))
    import tarfile

    with tarfile.open(str(bundle["bundle"])) as tar:
        tar.extractall(tmp_path / "unpacked", filter="data")
    assert verify_signature(tmp_path / "unpacked" / "g" / "v1", [Path(public)])


def test_sign_refuses_a_broken_version(version: Path, keys: tuple[Path, Path],
                                       capsys: pytest.CaptureFixture[str]) -> None:
    from amv_calib.cli import main

    (version / "calibrator.json").write_text("{}")
    assert main(["sign", str(version), "--key", str(keys[0])]) == 1
    assert "sha256 mismatch" in capsys.readouterr().err
    assert not (version / SIGNATURE_FILE).exists()


# -- the loader's own verifier against model_signing's ----------------------------------------
def _model_signing_accepts(version: Path, public: Path) -> bool:
    """The reference: OpenSSF model_signing's verifier, which reads the folder from disk."""
    import model_signing

    try:
        model_signing.verifying.Config().use_elliptic_key_verifier(  # type: ignore[no-untyped-call]
            public_key=public).verify(version, version / SIGNATURE_FILE)
    except Exception:  # noqa: BLE001 - any failure is a refusal
        return False
    return True


def _ours_accepts(version: Path, public: Path) -> bool:
    try:
        verify_signature(version, [public])
    except ArtifactError:
        return False
    return True


def _edit_bundle(version: Path, change: Callable[[dict[str, object]], None]) -> None:
    sig = version / SIGNATURE_FILE
    bundle = json.loads(sig.read_text())
    change(bundle)
    sig.write_text(json.dumps(bundle))


def _edit_statement(version: Path, change: Callable[[dict[str, object]], None]) -> None:
    def edit(bundle: dict[str, object]) -> None:
        env = bundle["dsseEnvelope"]
        assert isinstance(env, dict)
        stmt = json.loads(base64.b64decode(env["payload"]))
        change(stmt)
        env["payload"] = base64.b64encode(json.dumps(stmt).encode()).decode()

    _edit_bundle(version, edit)


def _flip_signature_byte(bundle: dict[str, object]) -> None:
    env = bundle["dsseEnvelope"]
    assert isinstance(env, dict)
    raw = bytearray(base64.b64decode(env["signatures"][0]["sig"]))
    raw[-1] ^= 1
    env["signatures"][0]["sig"] = base64.b64encode(bytes(raw)).decode()


def _drop_resource(stmt: dict[str, object]) -> None:
    predicate = stmt["predicate"]
    assert isinstance(predicate, dict)
    predicate["resources"] = [r for r in predicate["resources"] if r["name"] != "comparison.md"]


_CASES: dict[str, Callable[[Path, Path, Path], None]] = {
    "genuine": lambda v, k, o: None,
    "calibrator-edited": lambda v, k, o: (v / "calibrator.json").write_text(
        (v / "calibrator.json").read_text().replace("1", "2", 1)),
    "file-added": lambda v, k, o: (v / "notes.txt").write_text("added later"),
    "signed-file-removed": lambda v, k, o: (v / "comparison.md").unlink(),
    "other-key": lambda v, k, o: sign_artifact(v, o),
    "statement-edited": lambda v, k, o: _edit_statement(v, _drop_resource),
    "signature-byte-flipped": lambda v, k, o: _edit_bundle(v, _flip_signature_byte),
    "key-hint-edited": lambda v, k, o: _edit_bundle(
        v, lambda b: b["verificationMaterial"]["publicKey"].update(hint="0" * 64)),  # type: ignore[index]
    "payload-type-edited": lambda v, k, o: _edit_bundle(
        v, lambda b: b["dsseEnvelope"].update(payloadType="text/plain")),  # type: ignore[attr-defined]
    "signature-of-another-version": lambda v, k, o: _signature_of_edited_copy(v, k),
}


def _signature_of_edited_copy(version: Path, private: Path) -> None:
    other = version.with_name("v2")
    shutil.copytree(version, other)
    (other / "comparison.md").write_text("another version")
    sign_artifact(other, private)
    shutil.copy(other / SIGNATURE_FILE, version / SIGNATURE_FILE)


@pytest.mark.parametrize("case", list(_CASES), ids=list(_CASES))
def test_own_verifier_agrees_with_model_signing(version: Path, keys: tuple[Path, Path],
                                                tmp_path: Path, case: str) -> None:
    # The loader verifies the bundle itself, on the bytes it read; model_signing's verifier
    # is the reference: the same verdict on the genuine folder and on every tampered one.
    private, public = keys
    other_private, _ = keygen(tmp_path / "other")
    sign_artifact(version, private)
    _CASES[case](version, private, other_private)
    reference = _model_signing_accepts(version, public)
    assert reference == (case == "genuine")
    assert _ours_accepts(version, public) == reference


def test_own_verifier_refuses_a_bundle_with_a_repeated_key(version: Path,
                                                          keys: tuple[Path, Path]) -> None:
    # Stricter than the reference: a bundle whose JSON gives a key twice (two parsers could
    # read two different envelopes) is refused, not read last-wins.
    private, public = keys
    sign_artifact(version, private)
    sig = version / SIGNATURE_FILE
    text = sig.read_text()
    sig.write_text(text.replace('"mediaType"', '"mediaType": "x", "mediaType"', 1))
    assert _model_signing_accepts(version, public)
    with pytest.raises(ArtifactError, match=r"key 'mediaType' appears twice"):
        verify_signature(version, [public])


def test_keygen_refuses_a_private_key_git_would_commit(tmp_path: Path) -> None:
    import subprocess

    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    with pytest.raises(ConfigError, match=r"not ignored there.*add 'secrets/' to"):
        keygen(repo / "secrets")
    assert not (repo / "secrets").exists()  # nothing written
    (repo / ".gitignore").write_text("secrets/\n")
    private, public = keygen(repo / "secrets")
    assert private.stat().st_mode & 0o777 == 0o600 and public.is_file()
    # outside any work tree, as before
    assert keygen(tmp_path / "elsewhere")[0].is_file()
