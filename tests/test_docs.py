"""The pages of ``docs/``: every repository path they name exists, no development history."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from repo_paths import REPO_ROOT

#: The folders whose files the docs name as they are in the repository. ``data/`` and
#: ``models/`` are left out: the docs name folders there that a user's commands create.
SOURCE = ("amv_calib", "tests", "bench", "docs", "examples", "clients", "pipelines")
PATH = re.compile(r"(?<![\w./-])((?:%s)/[\w./-]*[\w/])" % "|".join(SOURCE))
DOCS = sorted((REPO_ROOT / "docs").glob("*.md"))


@pytest.mark.parametrize("page", DOCS, ids=lambda p: p.name)
def test_every_repository_path_a_page_names_exists(page: Path, repo_root: Path) -> None:
    missing = []
    for n, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
        for found in PATH.finditer(line):
            # a test id (path::name) or a folder's trailing slash names the file or folder
            path = found.group(1).split("::")[0].rstrip("/.")
            if not (repo_root / path).exists():
                missing.append(f"{page.name}:{n}: {path}")
    assert not missing


@pytest.mark.parametrize("page", DOCS, ids=lambda p: p.name)
def test_no_page_cites_an_issue_number(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    assert not re.findall(r".{0,30}\bissues? #?[0-9]+.{0,30}", text, flags=re.IGNORECASE)
