"""The checkout, for what a test module computes at import time (parametrize ids, module
constants); a test or fixture takes the ``repo_root`` fixture of ``tests/conftest.py``
instead."""

from __future__ import annotations

from pathlib import Path

#: The checkout: ``pipelines/``, ``data/``, ``models/`` and ``bench/`` live here.
REPO_ROOT = Path(__file__).resolve().parent.parent
