"""The one PNG writer: deterministic bytes, no version chunk, the shipped frontier unchanged."""

from __future__ import annotations

import ast
import hashlib
import json
import re
import struct
from pathlib import Path
from typing import Any

import matplotlib
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from repo_paths import REPO_ROOT

import amv_calib
from amv_calib.calibration import write_figure_png
from amv_calib.tuning import frontier_figure

PACKAGE = Path(amv_calib.__file__).resolve().parent
SHIPPED = REPO_ROOT / "models" / "amv-guard" / "v1"


def _figure() -> Any:
    fig = Figure(figsize=(2.0, 1.0), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    ax.plot([0, 1, 2], [0.3, 0.1, 0.2], "o-")
    ax.set_title("drawn alike")
    return fig


def _chunks(png: bytes) -> list[tuple[bytes, bytes]]:
    """``(type, data)`` of every chunk of a PNG."""
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    out, at = [], 8
    while at < len(png):
        (length,) = struct.unpack(">I", png[at:at + 4])
        out.append((png[at + 4:at + 8], png[at + 8:at + 8 + length]))
        at += 12 + length
    return out


def test_same_figure_gives_the_same_bytes_without_a_software_chunk(tmp_path: Path) -> None:
    a = write_figure_png(_figure(), tmp_path / "a.png").read_bytes()
    b = write_figure_png(_figure(), tmp_path / "b.png").read_bytes()
    assert a == b
    texts = [data for kind, data in _chunks(a) if kind in (b"tEXt", b"iTXt", b"zTXt")]
    assert not [t for t in texts if t.startswith(b"Software")], texts


def test_dpi_sets_the_size_and_defaults_to_matplotlibs(tmp_path: Path) -> None:
    def size(path: Path) -> tuple[int, int]:
        ihdr = _chunks(path.read_bytes())[0]
        assert ihdr[0] == b"IHDR"
        width, height = struct.unpack(">II", ihdr[1][:8])
        return width, height

    assert size(write_figure_png(_figure(), tmp_path / "a.png", dpi=50)) == (100, 50)
    with matplotlib.rc_context({"savefig.dpi": "figure"}):
        assert size(write_figure_png(_figure(), tmp_path / "b.png")) == (200, 100)


def test_every_png_goes_through_the_one_writer() -> None:
    calls = [f"{path.relative_to(PACKAGE)}:{node.lineno}"
             for path in sorted(PACKAGE.rglob("*.py"))
             for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
             if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
             and node.func.attr == "savefig"]
    assert len(calls) == 1 and calls[0].startswith("calibration/_figures.py:"), calls


def _pinned_matplotlib() -> str | None:
    text = (REPO_ROOT / "constraints.txt").read_text(encoding="utf-8")
    found = re.search(r"^matplotlib==(\S+)", text, flags=re.MULTILINE)
    return found.group(1) if found else None


def test_shipped_frontier_png_is_written_byte_for_byte(tmp_path: Path) -> None:
    # The shipped version's frontier.png is hashed in its manifest; `make demo` reuses v1 only
    # when the bytes it exports are the same. Another matplotlib rasterises differently.
    if matplotlib.__version__ != _pinned_matplotlib():
        pytest.skip(f"matplotlib {matplotlib.__version__} is not the pinned "
                    f"{_pinned_matplotlib()} that drew the shipped figure")
    manifest = json.loads((SHIPPED / "manifest.json").read_text(encoding="utf-8"))
    png = write_figure_png(frontier_figure(manifest["certificate"]), tmp_path / "frontier.png")
    assert hashlib.sha256(png.read_bytes()).hexdigest() == manifest["files"]["frontier.png"]
