"""Fixtures of the artifact tests."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest


@pytest.fixture
def v1(tmp_path: Path, shipped_models: Callable[[Path], Path]) -> Path:
    """``amv-guard/v1`` in a fresh copy of the shipped ``models/`` (production -> v1)."""
    return shipped_models(tmp_path / "models") / "amv-guard" / "v1"
