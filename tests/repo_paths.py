"""The checkout, for what a test module computes at import time (parametrize ids, module
constants); a test or fixture takes the ``repo_root`` fixture of ``tests/conftest.py``
instead."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

#: The checkout: ``pipelines/``, ``data/``, ``models/`` and ``bench/`` live here.
REPO_ROOT = Path(__file__).resolve().parent.parent


def load_module(path: Path, name: str) -> ModuleType:
    """The Python file ``path`` imported as module ``name`` (a script of ``bench/`` or
    ``examples/``, or a test helper: ``tests/`` has no ``__init__``), registered in
    ``sys.modules`` so that its dataclasses can look their module up."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
