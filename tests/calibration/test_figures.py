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


def _frontier_data(certificate: dict[str, Any]) -> tuple[Any, list[tuple[float, float]]]:
    """The frontier figure's axes and the (loss, harm %) of every configuration."""
    ax = frontier_figure(certificate).axes[0]
    harm = [h / certificate["n"] * 100 for h in certificate["harms"]]
    return ax, list(zip(certificate["losses"], harm, strict=True))


@pytest.mark.parametrize("source", ["shipped", "doubling back"])
def test_frontier_line_joins_only_the_pareto_efficient_points_in_order(source: str) -> None:
    if source == "shipped":
        cert = json.loads((SHIPPED / "manifest.json").read_text(encoding="utf-8"))["certificate"]
    else:  # a path whose loss rises again as the harm price falls: it doubles back
        cert = {"n": 100, "harms": [0, 0, 1, 1, 2, 3], "losses": [3.0, 2.0, 2.5, 1.5, 1.6, 1.0],
                "path": [{"harm_price": mu} for mu in (50, 20, 10, 5, 2, 0)],
                "certified": [0, 1, 2], "alpha": 0.02, "delta": 0.05, "chosen": 1,
                "observed_upper_bound": 0.015}
    ax, points = _frontier_data(cert)
    (line,) = [ln for ln in ax.get_lines() if ln.get_label().startswith("Pareto-efficient")]
    drawn = list(zip(map(float, line.get_xdata()), map(float, line.get_ydata()), strict=True))
    assert len(drawn) >= 2
    # in order of loss, each step buys less harm: the line never turns back
    assert all(a[0] < b[0] and a[1] > b[1] for a, b in zip(drawn, drawn[1:], strict=False))
    # every drawn point is a configuration that no other one dominates, and every such
    # configuration is drawn
    def dominated(p: tuple[float, float]) -> bool:
        return any(q[0] <= p[0] and q[1] <= p[1] and q != p for q in points)
    assert set(drawn) == {p for p in points if not dominated(p)}
    if source == "doubling back":
        assert drawn == [(1.0, 3.0), (1.5, 1.0), (2.0, 0.0)]


def test_frontier_names_mu_as_the_harm_price() -> None:
    cert = json.loads((SHIPPED / "manifest.json").read_text(encoding="utf-8"))["certificate"]
    ax, _ = _frontier_data(cert)
    notes = [t.get_text() for t in ax.texts]
    assert notes and all(n.startswith("harm price mu = ") for n in notes)
    assert "harm price mu" in ax.get_title()
