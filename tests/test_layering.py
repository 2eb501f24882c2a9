"""The core's floors: every module of megadata_core imports only numpy, the standard
library and modules of its own floor or a lower one (parsed with ``ast``, nothing run).

Floor 0: errors, checks, temp_files, handover; 1: format; 2: indices, preprocess
(preprocess may import format; indices may not); 3: datasets, samplers. Rooms of one
floor do not import each other (every room may import ``errors``). Nothing in the core
imports adapters, tools or a framework.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

CORE = Path(__file__).resolve().parents[1] / "megadata_core"
FLOORS = {
    "errors": 0, "checks": 0, "temp_files": 0, "handover": 0,
    "format": 1,
    "indices": 2, "preprocess": 2,
    "datasets": 3, "samplers": 3,
}
#: Rooms of floor 2 that may not import floor 1 (the indices see arrays, never files).
NOT_FORMAT = {"indices"}


def _room(module: str) -> str:
    """``megadata_core.indices.cache`` -> ``indices``."""
    return module.split(".")[1]


def _imports(path: Path, module: str) -> list[tuple[int, str]]:
    """``(line, absolute module name)`` of every import in the file (relative ones
    resolved against ``module``; ``from pkg import name`` also as ``pkg.name``)."""
    tree = ast.parse(path.read_text(), str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[: len(parts) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            found.append((node.lineno, base))
            found.extend((node.lineno, f"{base}.{alias.name}") for alias in node.names)
    return found


def _modules() -> list[tuple[Path, str]]:
    modules = []
    for path in sorted(CORE.rglob("*.py")):
        parts = path.relative_to(CORE.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules.append((path, ".".join(parts)))
    return modules


def violations(path: Path, module: str) -> list[str]:
    """What ``module`` imports that its floor may not."""
    if module == "megadata_core":  # the package front door re-exports every floor
        return []
    room = _room(module)
    floor = FLOORS[room]
    bad = []
    for line, name in _imports(path, module):
        top = name.split(".")[0]
        where = f"{module} (line {line}) imports {name}"
        if top == "megadata_core":
            if name.count(".") == 0:
                continue
            other = _room(name)
            if other not in FLOORS:  # ``from megadata_core import x`` of a name, not a room
                bad.append(f"{where}: not a room of any floor")
            elif FLOORS[other] > floor:
                bad.append(f"{where}: floor {FLOORS[other]} above floor {floor}")
            elif room in NOT_FORMAT and other == "format":
                bad.append(f"{where}: {room} may not import format")
            elif FLOORS[other] == floor and other not in (room, "errors"):
                bad.append(f"{where}: another room of floor {floor}")
        elif top not in sys.stdlib_module_names and top not in ("numpy", "__future__"):
            bad.append(f"{where}: neither numpy nor the standard library")
    return bad


@pytest.mark.parametrize(
    ("path", "module"), _modules(), ids=[module for _, module in _modules()]
)
def test_module_imports_only_its_floor_and_below(path, module):
    assert violations(path, module) == []


def test_every_room_has_a_floor():
    rooms = {_room(module) for _, module in _modules() if module != "megadata_core"}
    assert rooms <= FLOORS.keys(), rooms - FLOORS.keys()


def test_a_violation_is_found(tmp_path):
    """The check itself: an index module importing format and a framework is caught."""
    path = tmp_path / "bad.py"
    path.write_text("import torch\nfrom megadata_core.format import reader\n")
    found = violations(path, "megadata_core.indices.bad")
    assert "neither numpy nor the standard library" in found[0]
    assert found[1:] and all("indices may not import format" in line for line in found[1:])
