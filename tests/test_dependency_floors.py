"""Every runtime dependency has a floor that is tested: ``constraints-floor.txt`` pins each
at the floor ``pyproject.toml`` declares (``make test-floors`` installs them and runs the
fast tests), and no dependency has a ceiling."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest


def _name(text: str) -> str:
    return re.sub(r"[-_.]+", "-", text).lower()


@pytest.fixture(scope="module")
def declared(repo_root: Path) -> dict[str, str]:
    """``{name: the requirement's specifier}`` of ``[project] dependencies``."""
    doc = tomllib.loads((repo_root / "pyproject.toml").read_text(encoding="utf-8"))
    out = {}
    for req in doc["project"]["dependencies"]:
        name, spec = re.fullmatch(r"([A-Za-z0-9_.-]+)\s*(.*)", req).groups()
        out[_name(name)] = spec
    return out


def test_every_dependency_has_one_floor_and_no_ceiling(declared: dict[str, str]) -> None:
    bad = {n: s for n, s in declared.items() if not re.fullmatch(r">=[0-9][0-9.]*", s)}
    assert bad == {}


def test_the_floor_constraints_pin_each_floor(declared: dict[str, str],
                                              repo_root: Path) -> None:
    from packaging.version import Version

    lines = (repo_root / "constraints-floor.txt").read_text(encoding="utf-8").splitlines()
    pins = {_name(k): Version(v) for k, v in (
        line.split("==") for line in lines if line and not line.startswith("#"))}
    assert pins == {n: Version(s.removeprefix(">=")) for n, s in declared.items()}
