"""unbundle refuses a bundle it cannot install safely before writing a byte: version folders
not named vN, gzip bombs, files that are not a .tar.gz."""

from __future__ import annotations

import gzip
import io
import os
import tarfile
import threading
import time
import zlib
from pathlib import Path

import pytest

from amv_calib import ArtifactError
from amv_calib.artifacts import _unbundle as unbundle_module
from amv_calib.artifacts import bundle, export_artifact, unbundle
from amv_calib.cli import main
from amv_calib.contract import seed_prior_calibrator


@pytest.fixture(scope="module")
def good(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A genuine bundle of ``m/v1`` (unsigned, no alias)."""
    tmp = tmp_path_factory.mktemp("bundle")
    export_artifact(calibrator=seed_prior_calibrator(), name="m", models_dir=tmp / "src",
                    include_joblib=False)
    return bundle("m", "v1", tmp / "m-v1.tar.gz", models_dir=tmp / "src")


def _renamed(good: Path, out: Path, old: str, new: str) -> Path:
    """``good`` with every member name's ``old`` prefix replaced by ``new``."""
    buf = io.BytesIO()
    with tarfile.open(good, "r:gz") as src, tarfile.open(fileobj=buf, mode="w") as dst:
        for m in src.getmembers():
            data = src.extractfile(m) if m.isfile() else None
            if m.name.startswith(old):
                m.name = new + m.name[len(old):]
            dst.addfile(m, data)
    out.write_bytes(gzip.compress(buf.getvalue(), mtime=0))
    return out


def _installed(models: Path) -> list[str]:
    return sorted(p.relative_to(models).as_posix() for p in models.rglob("*")) \
        if models.exists() else []


@pytest.mark.parametrize("folder", ["latest", ".hidden", "v0", "V1", "v01"])
def test_a_version_folder_not_named_vn_is_refused_nothing_installed(
        good: Path, tmp_path: Path, folder: str, capsys: pytest.CaptureFixture[str]) -> None:
    # Attack: m/latest (or m/.hidden) in place of m/v1 was installed with exit 0 as
    # models/m/latest, a folder no reference names and every listing skips.
    doctored = _renamed(good, tmp_path / "b.tar.gz", "m/v1", f"m/{folder}")
    models = tmp_path / "models"
    assert main(["unbundle", str(doctored), "--models-dir", str(models)]) == 1
    err = capsys.readouterr().err
    assert f"{folder!r} is not a version folder (vN" in err, err
    assert _installed(models) == []
    # the genuine bundle installs (the check refuses the name, not the bundle)
    assert unbundle(good, models_dir=models)["installed"]
    assert (models / "m" / "v1" / "manifest.json").is_file()


def _gzip_member(data: bytes) -> bytes:
    z = zlib.compressobj(9, zlib.DEFLATED, 31)  # gzip framing
    return z.compress(data) + z.flush()


def _bomb(path: Path, declared: int) -> Path:
    """A .tar.gz of one file ``m/v1/big.bin`` of ``declared`` zero bytes, built without
    compressing them: gzip members concatenated, one per MiB of zeros (each ~1 KiB)."""
    head = tarfile.TarInfo("m/v1")
    head.type = tarfile.DIRTYPE
    big = tarfile.TarInfo("m/v1/big.bin")
    big.size = declared
    mib = _gzip_member(bytes(1 << 20))
    with open(path, "wb") as fh:
        fh.write(_gzip_member(head.tobuf(format=tarfile.USTAR_FORMAT)
                              + big.tobuf(format=tarfile.USTAR_FORMAT)))
        for _ in range(declared >> 20):
            fh.write(mib)
        fh.write(_gzip_member(bytes(declared % (1 << 20)) + bytes(2 * tarfile.BLOCKSIZE)))
    return path


def _written_by_this_process() -> int | None:
    """Bytes this process has passed to write() so far (Linux), else None."""
    try:
        text = Path("/proc/self/io").read_text(encoding="ascii")
    except OSError:
        return None
    return int(next(line.split()[1] for line in text.splitlines()
                    if line.startswith("wchar:")))


def test_a_gzip_bomb_is_refused_from_its_header_before_a_byte_is_written(
        tmp_path: Path) -> None:
    # Attack: a 2.3 MB bundle wrote 1.97 GiB into the models folder before the size cap
    # (applied after extraction) refused it.
    bomb = _bomb(tmp_path / "bomb.tar.gz", 2 << 30)  # 2 GiB of zeros declared
    assert bomb.stat().st_size < 4 << 20
    with gzip.open(bomb) as fh:  # it is a real archive: the header declares 2 GiB
        assert tarfile.TarInfo.frombuf(fh.read(1024)[512:], "utf-8", "strict").size == 2 << 30
    models = tmp_path / "models"
    before, t0 = _written_by_this_process(), time.monotonic()
    with pytest.raises(ArtifactError, match=r"member 'm/v1/big.bin': the bundle unpacks to "
                                            r"more than 1073741824 bytes; nothing installed"):
        unbundle(bomb, models_dir=models)
    elapsed, after = time.monotonic() - t0, _written_by_this_process()
    assert elapsed < 10, f"refusing the bomb took {elapsed:.1f} s: its contents were read"
    if before is not None and after is not None:
        assert after - before < 1 << 20, f"{after - before} bytes written"
    assert [p for p in models.iterdir()] == []  # no staging folder left either


def test_the_byte_cap_counts_every_member_and_applies_to_a_real_bundle(
        good: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Each file under the cap, all of them over it: refused, nothing written.
    with tarfile.open(good, "r:gz") as tar:
        total = sum(m.size for m in tar.getmembers())
        largest = max(m.size for m in tar.getmembers())
    monkeypatch.setattr(unbundle_module, "MAX_BUNDLE_BYTES", (largest + total) // 2)
    models = tmp_path / "models"
    with pytest.raises(ArtifactError, match="unpacks to more than"):
        unbundle(good, models_dir=models)
    assert _installed(models) == []
    monkeypatch.setattr(unbundle_module, "MAX_BUNDLE_BYTES", total + 64 * 1024)
    assert unbundle(good, models_dir=models)["installed"]


@pytest.mark.parametrize("kind", ["not gzip", "truncated", "fifo", "folder"])
def test_a_file_that_is_not_a_tar_gz_is_refused_with_its_name(
        good: Path, tmp_path: Path, kind: str, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "x.tar.gz"
    if kind == "not gzip":
        path.write_bytes(b"PK\x03\x04 a zip, not a tar.gz")
    elif kind == "truncated":
        path.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    elif kind == "fifo":
        os.mkfifo(path)  # nobody writes to it: a read would wait forever
    else:
        path.mkdir()
    models = tmp_path / "models"
    code: list[int] = []
    # in a thread: a FIFO once made unbundle wait forever for a writer
    thread = threading.Thread(target=lambda: code.append(main(
        ["unbundle", str(path), "--models-dir", str(models)])), daemon=True)
    thread.start()
    thread.join(60)
    assert not thread.is_alive(), f"unbundle of a {kind} hung"
    assert code == [1]
    err = capsys.readouterr().err
    assert f"{path}: " in err and "Traceback" not in err, err
    expected = {"not gzip": "not a readable .tar.gz", "truncated": "not a readable .tar.gz",
                "fifo": "is a FIFO, not a regular file", "folder": "not a regular file"}[kind]
    assert expected in err, err
    assert [p for p in models.iterdir()] == []
