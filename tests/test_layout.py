"""The package's shape: stages as subpackages, no import cycle, no reach into private names.

The import graph is read from the source (every ``import`` statement, at module level or
inside a function), so a lazy import that closes a cycle counts as much as an eager one.
"""

from __future__ import annotations

import ast
import importlib
import inspect
from collections.abc import Iterator
from pathlib import Path

import pytest

import amv_calib

PACKAGE = Path(amv_calib.__file__).resolve().parent
STAGES = ("contract", "claims", "calibration", "artifacts", "gate", "datasets", "tuning",
          "monitoring", "tracking",
          "pipeline", "spark", "integrations", "stages", "commands")


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES: dict[str, Path] = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _imports(name: str) -> Iterator[tuple[str, int]]:
    """``(imported amv_calib module, line)`` for every import statement of module ``name``."""
    path = MODULES[name]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in MODULES:
                    yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                if sub in MODULES:
                    yield sub, node.lineno
                elif base in MODULES:
                    yield base, node.lineno


def _stage(name: str) -> str:
    parts = name.split(".")
    return parts[1] if len(parts) > 2 or (len(parts) == 2 and parts[1] in STAGES) else name


def _graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for name in MODULES:
        own = name if MODULES[name].name == "__init__.py" else None
        # A module's own package __init__ runs first anyway; an edge to it is no cycle.
        parents = {".".join(name.split(".")[:i]) for i in range(1, name.count(".") + 1)}
        graph[name] = {t for t, _ in _imports(name) if t != own and t not in parents}
    return graph


def test_top_level_holds_at_most_six_modules_and_five_stage_subpackages() -> None:
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(top) <= 6, top
    subpackages = sorted(p.parent.name for p in PACKAGE.glob("*/__init__.py"))
    assert set(STAGES) <= set(subpackages), subpackages
    assert len(subpackages) >= 5


def test_claims_reads_decision_logs_without_the_gate() -> None:
    # The log format is the contract's (issue 27), so training reads logs without loading the
    # runtime gate; simulated production, which runs the gate, is datasets'.
    bad = [f"{name}:{line}: {target}" for name in MODULES if _stage(name) == "claims"
           for target, line in _imports(name) if _stage(target) == "gate"]
    assert not bad, bad


def test_import_graph_has_no_cycle() -> None:
    graph = _graph()
    state: dict[str, int] = {}  # 1 = on the stack, 2 = done
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycle = stack[stack.index(nxt):] + [nxt]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)


def test_no_module_imports_another_stages_private_names() -> None:
    bad = []
    for name, path in MODULES.items():
        mine = _stage(name)
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if not isinstance(node, ast.ImportFrom) or not (node.module or "").startswith(
                    "amv_calib"):
                continue
            target = node.module or ""
            if _stage(target) == mine:
                continue
            private_module = any(p.startswith("_") for p in target.split(".")[1:])
            private_names = [a.name for a in node.names if a.name.startswith("_")
                             and a.name != "__version__"]
            if private_module or private_names:
                bad.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}: from {target} "
                           f"import {', '.join(a.name for a in node.names)}")
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("stage", STAGES)
def test_each_stage_exports_exactly_its_all(stage: str) -> None:
    module = importlib.import_module(f"amv_calib.{stage}")
    for name in module.__all__:  # a stage's lazy names (PEP 562) resolve into its globals
        getattr(module, name)
    exported = set(module.__all__)
    assert len(exported) == len(module.__all__), "duplicates in __all__"
    public = {n for n in vars(module) if not n.startswith("_")
              and not isinstance(vars(module)[n], type(module))} - {"annotations"}
    assert public == exported, (sorted(public - exported), sorted(exported - public))
    for name in exported:
        value = getattr(module, name)
        if inspect.isclass(value) or inspect.isfunction(value):
            # the package's own, under its own name (no third-party or renamed re-export)
            assert value.__module__.startswith("amv_calib."), (name, value.__module__)
            assert value.__name__ == name, (name, value.__name__)
        else:
            assert value is not None, name  # a constant, defined


def test_top_level_lazy_names_resolve() -> None:
    for name in amv_calib.__all__:
        if name == "__version__":
            continue
        # each lazy name is the very object its stage exports, and listed in its __all__
        stage = importlib.import_module(amv_calib._EXPORTS[name])
        assert name in stage.__all__, (name, stage.__name__)
        assert getattr(amv_calib, name) is getattr(stage, name), name
