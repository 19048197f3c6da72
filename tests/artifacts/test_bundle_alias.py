"""A bundle carries its alias: extracted with tar it resolves and verifies; unbundle clobbers
nothing on a machine that already has the model."""

from __future__ import annotations

import gzip
import io
import json
import os
import subprocess
import tarfile
import time
from pathlib import Path
from typing import Any

import pytest

from amv_calib import ArtifactError
from amv_calib.artifacts import (
    bundle,
    export_artifact,
    keygen,
    promote,
    unbundle,
    verify_artifact,
)
from amv_calib.cli import main
from amv_calib.contract import read_aliases, seed_prior_calibrator
from amv_calib.gate import Gate, LiveGate


@pytest.fixture
def keys(tmp_path: Path) -> tuple[Path, Path]:
    return keygen(tmp_path / "keys")


@pytest.fixture
def source(tmp_path: Path, keys: tuple[Path, Path]) -> Path:
    """models/m with signed v1 and v2, production at v2 (promoted after v1)."""
    models = tmp_path / "source"
    for _ in range(2):
        export_artifact(calibrator=seed_prior_calibrator(), name="m", models_dir=models,
                        include_joblib=False, signing_key=keys[0])
    promote("m", "v1", alias="production", models_dir=models)
    promote("m", "v2", alias="production", models_dir=models)
    promote("m", "v1", alias="challenger", models_dir=models)
    return models


def _tar_x(archive: Path, dest: Path) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    subprocess.run(["tar", "-xzf", str(archive), "-C", str(dest)], check=True)


def test_production_bundle_resolves_and_verifies_where_extracted(
        source: Path, tmp_path: Path, keys: tuple[Path, Path]) -> None:
    first = bundle("m", "production", tmp_path / "a.tar.gz", models_dir=source)
    for f in (source / "m" / "v2").iterdir():
        os.utime(f, (time.time() + 1000, time.time() + 1000))
    promote("m", "v2", alias="staging", models_dir=source)  # another alias: same bundle
    second = bundle("m", "production", tmp_path / "b.tar.gz", models_dir=source)
    assert first.read_bytes() == second.read_bytes()
    with tarfile.open(first) as tar:
        assert tar.getnames() == ["m/aliases.json", "m/v2", "m/v2/calibrator.json",
                                  "m/v2/manifest.json", "m/v2/model.sig"]
    dest = tmp_path / "prod" / "models"
    _tar_x(first, dest)
    aliases = read_aliases(dest / "m")["aliases"]
    source_entry = read_aliases(source / "m")["aliases"]["production"]
    assert list(aliases) == ["production"]
    assert {k: aliases["production"][k] for k in ("version", "manifest_sha256")} == \
        {k: source_entry[k] for k in ("version", "manifest_sha256")}
    summary = verify_artifact(f"{dest / 'm'}@production", trusted_keys=[keys[1]])
    assert summary["version"] == "v2" and summary["aliases"] == ["production"]
    assert summary["signature"]["verified_by"] == str(keys[1])
    live = LiveGate(f"{dest / 'm'}@production", trusted_keys=[keys[1]])
    assert live.version == "v2"
    # a bundle of a version carries no alias file, as before
    with tarfile.open(bundle("m", "v2", tmp_path / "c.tar.gz", models_dir=source)) as tar:
        assert "m/aliases.json" not in tar.getnames()


def test_cli_bundle_by_alias_then_verify(source: Path, tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "m.tar.gz"
    assert main(["bundle", "m", "production", "--out", str(out),
                 "--models-dir", str(source), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["bundle"] == str(out)
    _tar_x(out, tmp_path / "box")
    assert main(["verify-artifact", f"{tmp_path / 'box' / 'm'}@production", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["version"] == "v2"
    assert main(["bundle", "m", "nightly", "--models-dir", str(source)]) == 2
    assert "no alias 'nightly'" in capsys.readouterr().err


def test_tar_replaces_an_alias_file_unbundle_does_not(source: Path, tmp_path: Path) -> None:
    archive = bundle("m", "production", tmp_path / "m.tar.gz", models_dir=source)
    box = tmp_path / "box"
    export_artifact(calibrator=seed_prior_calibrator(), name="m", models_dir=box,
                    include_joblib=False)
    promote("m", "v1", alias="production", models_dir=box)
    promote("m", "v1", alias="canary", models_dir=box)
    before = (box / "m" / "aliases.json").read_bytes()
    # v1 of the box is another export than the source's v1; v2 is new to the box
    with pytest.raises(ArtifactError, match="alias 'production' points at v1 here; v2 was "
                                            "installed but not made production: amv-calib "
                                            "promote m v2 --alias production"):
        unbundle(archive, models_dir=box)
    assert (box / "m" / "aliases.json").read_bytes() == before
    assert verify_artifact(box / "m" / "v2")["version"] == "v2"
    # what plain tar does instead: the box's aliases.json (canary, history) is replaced
    copy = tmp_path / "copy"
    _tar_x(archive, copy / "models")
    assert list(read_aliases(copy / "models" / "m")["aliases"]) == ["production"]


def test_unbundle_into_an_empty_folder_then_again(source: Path, tmp_path: Path,
                                                  keys: tuple[Path, Path]) -> None:
    archive = bundle("m", "production", tmp_path / "m.tar.gz", models_dir=source)
    box = tmp_path / "box"
    got = unbundle(archive, models_dir=box, trusted_keys=[keys[1]])
    assert got == {"name": "m", "version": "v2", "path": str(box / "m" / "v2"),
                   "installed": True, "alias": "production", "alias_set": True}
    assert Gate.from_artifact(f"{box / 'm'}@production", strict=True,
                              trusted_keys=[keys[1]]).artifact_version == "v2"
    again = unbundle(archive, models_dir=box)
    assert (again["installed"], again["alias_set"]) == (False, False)
    assert sorted(p.name for p in box.iterdir()) == ["m"]  # no temporary folder left


def _rewrite(archive: Path, out: Path, edit: dict[str, bytes]) -> Path:
    """The bundle with some members' bytes replaced."""
    buf = io.BytesIO()
    with tarfile.open(archive) as src, tarfile.open(fileobj=buf, mode="w") as dst:
        for m in src.getmembers():
            data = src.extractfile(m).read() if m.isfile() else None  # type: ignore[union-attr]
            if m.name in edit:
                data = edit[m.name]
                m.size = len(data)
            dst.addfile(m, None if data is None else io.BytesIO(data))
    out.write_bytes(gzip.compress(buf.getvalue()))
    return out


@pytest.mark.parametrize(("edit", "trusted", "match"), [
    ({"m/v2/calibrator.json": b"{}\n"}, False, "sha256 mismatch"),
    ({}, True, "does not verify with any trusted key"),
], ids=["tampered", "other-signer"])
def test_unbundle_refuses_what_does_not_verify(source: Path, tmp_path: Path,
                                               edit: dict[str, bytes], trusted: bool,
                                               match: str) -> None:
    archive = _rewrite(bundle("m", "production", tmp_path / "m.tar.gz", models_dir=source),
                       tmp_path / "edited.tar.gz", edit)
    other = keygen(tmp_path / "other")[1]
    box = tmp_path / "box"
    kwargs: dict[str, Any] = {"trusted_keys": [other]} if trusted else {}
    with pytest.raises(ArtifactError, match=match):
        unbundle(archive, models_dir=box, **kwargs)
    assert sorted(p.name for p in box.iterdir()) == []


def test_unbundle_refuses_a_version_number_taken_by_other_files(source: Path,
                                                                 tmp_path: Path) -> None:
    archive = bundle("m", "v2", tmp_path / "m.tar.gz", models_dir=source)
    box = tmp_path / "box"
    for _ in range(2):
        export_artifact(calibrator=seed_prior_calibrator(), name="m", models_dir=box,
                        include_joblib=False)
    with pytest.raises(ArtifactError, match="already exists with other files"):
        unbundle(archive, models_dir=box)


@pytest.mark.parametrize(("name", "kind"), [
    ("m/v2/../../evil.json", tarfile.REGTYPE), ("m/v2/link", tarfile.SYMTYPE),
    ("n/v1/manifest.json", tarfile.REGTYPE)],
    ids=["dot-dot", "symlink", "second-model"])
def test_unbundle_refuses_members_outside_one_version(source: Path, tmp_path: Path,
                                                      name: str, kind: bytes) -> None:
    archive = bundle("m", "production", tmp_path / "m.tar.gz", models_dir=source)
    buf = io.BytesIO()
    with tarfile.open(archive) as src, tarfile.open(fileobj=buf, mode="w") as dst:
        for m in src.getmembers():
            dst.addfile(m, src.extractfile(m) if m.isfile() else None)
        extra = tarfile.TarInfo(name)
        extra.type = kind
        extra.linkname = "/etc/passwd" if kind == tarfile.SYMTYPE else ""
        dst.addfile(extra, io.BytesIO(b"") if kind == tarfile.REGTYPE else None)
    bad = tmp_path / "bad.tar.gz"
    bad.write_bytes(gzip.compress(buf.getvalue()))
    box = tmp_path / "box"
    with pytest.raises(ArtifactError, match="not a plain file or folder|not a bundle of one"):
        unbundle(bad, models_dir=box)
    assert list(box.iterdir()) == []
