"""Small pieces of the summaries several stages print."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["compare_command", "where"]


def where(path: str | os.PathLike[str] | None) -> str:
    """An output path as the user can open it from anywhere (absolute)."""
    return "-" if path is None else str(Path(path).resolve())


def compare_command(claims: Path) -> str:
    """The ``compare`` command for ``claims``, its output beside the claims' folder."""
    out = claims.resolve().parent.parent / "compare"
    return f"amv-calib compare {claims.resolve()} --out {out}"
