"""Fixtures of the gate tests: a models folder whose versions a LiveGate follows."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from live_versions import make_versions


@pytest.fixture(scope="session")
def versions_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``models/m/v1..v6`` (:func:`live_versions.make_versions`), no alias yet. Copy it
    before changing it."""
    models = tmp_path_factory.mktemp("live") / "models"
    make_versions(models)
    return models


@pytest.fixture
def live_models(versions_template: Path, tmp_path: Path) -> Path:
    """A fresh copy of :func:`versions_template` (``models/m/v1..v6``, no alias)."""
    out = tmp_path / "models"
    shutil.copytree(versions_template, out)
    return out
