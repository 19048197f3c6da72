"""Signed artifact versions: key pairs, ``model.sig``, and what a trusted key accepts."""

from __future__ import annotations

import json
import shutil
import stat
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
        assert main(list(argv)) == 0
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
