"""The core's floors, its pure rooms and its private names (parsed with ``ast``, nothing run).

Floors of ``megadata_core`` (a room imports numpy, the standard library and the rooms
:data:`MAY_IMPORT` lists, all of them on lower floors; every room may import
``errors``; nothing imports adapters, tools or a framework):

0. ground: ``errors``, ``checks``, ``cores`` (threads a process may run), ``files``
   (identity, atomic replace, locks, temporary names), ``handover`` (batches between
   processes)
1. ``format`` (the .bin/.idx pair, byte sources)
2. ``indices`` (pure functions over arrays), ``batch_ramp`` (Megatron's step
   batch-size ramp-up: arithmetic on steps), ``cache`` (everything under
   ``path_to_cache``), ``preprocess`` (text to corpora); rooms of one floor do not
   import each other
3. ``modes`` (the choices a config names: packing, shuffle, blend order, each an object)
4. ``datasets``, ``samplers``
5. ``build`` (a config and sizes to train/valid/test)

Two more rules: ``indices`` and ``batch_ramp`` do no file I/O (no ``open``,
``os.replace``, ``fcntl``, ``mmap``, memory maps or ``.npy`` files: arrays in, arrays
out), and no module of the core, the adapters or the tools imports a ``_private`` name
from another module (a private submodule of its own package is fine: that is what it is
for).
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CORE = ROOT / "megadata_core"
#: Installed package -> its folder in the repository (pyproject's package-dir mapping).
PACKAGES = {
    "megadata_core": CORE,
    "megadata_adapters": ROOT / "adapters",
    "megadata_cli": ROOT / "tools" / "cli",
    "megadata_cli.configs": ROOT / "configs",
}
BENCH = ROOT / "tools" / "bench"
FLOORS = {
    "errors": 0, "checks": 0, "cores": 0, "files": 0, "handover": 0,
    "format": 1,
    "indices": 2, "batch_ramp": 2, "cache": 2, "preprocess": 2,
    "modes": 3,
    "datasets": 4, "samplers": 4,
    "build": 5,
}
GROUND = {"errors", "checks", "cores", "files", "handover"}
#: The rooms each room may import (besides itself and ``errors``).
MAY_IMPORT = {
    "errors": set(),
    "checks": set(),
    "cores": set(),
    "files": set(),
    "handover": set(),
    "format": GROUND,
    "indices": {"checks", "cores"},
    "batch_ramp": {"checks"},
    "cache": GROUND | {"format"},
    "preprocess": GROUND | {"format"},
    "modes": GROUND | {"format", "indices", "cache"},
    "datasets": GROUND | {"format", "indices", "cache", "preprocess", "modes"},
    "samplers": GROUND | {"batch_ramp"},
    "build": GROUND | {"format", "indices", "cache", "preprocess", "modes", "datasets"},
}
#: What ``indices`` may not touch: modules of file I/O, and calls that read or write files.
IO_MODULES = {"fcntl", "mmap", "tempfile", "shutil", "io", "pathlib", "glob"}
IO_CALLS = {
    "open", "os.open", "os.fdopen", "os.replace", "os.rename", "os.remove", "os.unlink",
    "os.makedirs", "os.mkdir", "os.stat", "os.fstat", "os.listdir", "os.scandir",
    "os.pread", "os.pwrite", "np.memmap", "np.load", "np.save", "np.fromfile", "np.tofile",
    "np.lib.format.open_memmap", "numpy.memmap", "numpy.load", "numpy.save",
}


def _room(module: str) -> str:
    """``megadata_core.indices.blending`` -> ``indices``."""
    return module.split(".")[1]


def _package(path: Path, module: str) -> str:
    return module if path.name == "__init__.py" else module.rpartition(".")[0]


def _imports(path: Path, module: str) -> list[tuple[int, str]]:
    """``(line, absolute module name)`` of every import in the file (relative ones
    resolved against ``module``; ``from pkg import name`` also as ``pkg.name``)."""
    tree = ast.parse(path.read_text(), str(path))
    package = _package(path, module)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = _resolved(node, package)
            found.append((node.lineno, base))
            found.extend((node.lineno, f"{base}.{alias.name}") for alias in node.names)
    return found


def _resolved(node: ast.ImportFrom, package: str) -> str:
    base = node.module or ""
    if node.level:
        parts = package.split(".")
        parts = parts[: len(parts) - node.level + 1]
        base = ".".join(parts + ([base] if base else []))
    return base


def _modules(package: str = "megadata_core", root: Path | None = None) -> list[tuple[Path, str]]:
    """``(path, dotted name)`` of every module of ``package`` (its folder: ``root``, or
    :data:`PACKAGES`' entry)."""
    root = PACKAGES[package] if root is None else root
    modules = []
    for path in sorted(root.rglob("*.py")):
        parts = (*package.split("."), *path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules.append((path, ".".join(parts)))
    return modules


def violations(path: Path, module: str) -> list[str]:
    """What ``module`` (of the core) imports that its room may not."""
    if module == "megadata_core":  # the package front door re-exports every floor
        return []
    room = _room(module)
    allowed = MAY_IMPORT[room] | {room, "errors"}
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
            elif other not in allowed:
                bad.append(
                    f"{where}: {room} (floor {FLOORS[room]}) may not import {other} "
                    f"(floor {FLOORS[other]})"
                )
        elif top not in sys.stdlib_module_names and top not in ("numpy", "__future__"):
            bad.append(f"{where}: neither numpy nor the standard library")
    return bad


def _dotted(node: ast.AST) -> str | None:
    """``os.replace`` of an ``ast.Attribute`` chain (None for anything else)."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return None if base is None else f"{base}.{node.attr}"
    return None


def file_io(path: Path) -> list[str]:
    """The file I/O in a module: imports of :data:`IO_MODULES`, calls of :data:`IO_CALLS`."""
    tree = ast.parse(path.read_text(), str(path))
    found = []
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name.split(".")[0] for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            names = [(node.module or "").split(".")[0]]
        found.extend(f"line {node.lineno}: imports {name}" for name in names if name in IO_MODULES)
        if isinstance(node, ast.Call):
            called = _dotted(node.func)
            if called in IO_CALLS:
                found.append(f"line {node.lineno}: calls {called}")
    return found


def private_imports(path: Path, module: str) -> list[str]:
    """``from other import _name`` where ``_name`` is not a submodule of the importing
    module's own package."""
    tree = ast.parse(path.read_text(), str(path))
    package = _package(path, module)
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom):
            continue
        base = _resolved(node, package)
        for alias in node.names:
            name = alias.name
            if not name.startswith("_") or name.startswith("__"):
                continue
            submodule = _is_module(f"{base}.{name}")
            if submodule and base == package:
                continue  # a private module of its own package
            found.append(f"{module} (line {node.lineno}): from {base} import {name}")
    return found


def _is_module(dotted: str) -> bool:
    for package in sorted(PACKAGES, key=len, reverse=True):
        if dotted == package or dotted.startswith(f"{package}."):
            rest = dotted[len(package):].lstrip(".").split(".")
            path = PACKAGES[package].joinpath(*[part for part in rest if part])
            return path.with_suffix(".py").exists() or (path / "__init__.py").exists()
    path = ROOT.joinpath("tools", *dotted.split("."))  # the benchmarks' ``bench.x``
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


@pytest.mark.parametrize(
    ("path", "module"), _modules(), ids=[module for _, module in _modules()]
)
def test_module_imports_only_its_floor_and_below(path, module):
    assert violations(path, module) == []


def docstring_floors(doc: str) -> dict[str, int]:
    """The floor a docstring's numbered list (``0. ground: ``errors``, ...``, continued
    on indented lines) gives each room of the core it names (``name`` or ``name/``)."""
    rooms = {_room(module) for _, module in _modules() if module != "megadata_core"}
    floors: dict[str, int] = {}
    floor = None
    for line in doc.splitlines():
        number = re.match(r"(\d+)\. ", line)
        floor = int(number[1]) if number else floor if line.startswith(" ") else None
        if floor is not None:
            floors.update((name, floor) for name in re.findall(r"``(\w+)/?``", line)
                          if name in rooms)
    return floors


@pytest.mark.parametrize("path", [CORE / "__init__.py", Path(__file__)], ids=["core", "here"])
def test_the_docstrings_list_the_floors_enforced(path):
    assert docstring_floors(ast.get_docstring(ast.parse(path.read_text())) or "") == FLOORS


def test_a_floor_list_that_drifts_is_found():
    doc = "0. ground: ``errors``, ``files/``\n   (``path_to_cache``) ``checks``\n1. ``format/``"
    assert docstring_floors(doc) == {"errors": 0, "files": 0, "checks": 0, "format": 1}
    assert docstring_floors("0. ``errors``\n\nThen ``format``.") == {"errors": 0}


def test_every_room_has_a_floor():
    rooms = {_room(module) for _, module in _modules() if module != "megadata_core"}
    assert rooms <= FLOORS.keys(), rooms - FLOORS.keys()
    for room, allowed in MAY_IMPORT.items():  # only ever down
        assert all(FLOORS[other] < FLOORS[room] for other in allowed), room


#: The pure rooms: arrays and numbers in, arrays and numbers out.
PURE = ("megadata_core.indices", "megadata_core.batch_ramp")
INDICES = [item for item in _modules() if item[1].startswith(PURE)]


@pytest.mark.parametrize(("path", "module"), INDICES, ids=[module for _, module in INDICES])
def test_indices_do_no_file_io(path, module):
    assert file_io(path) == []


ADAPTERS = _modules("megadata_adapters")
COMMANDS = _modules("megadata_cli") + _modules("megadata_cli.configs")
BENCHMARKS = _modules("bench", BENCH)
EVERY_MODULE = _modules() + ADAPTERS + COMMANDS + BENCHMARKS


@pytest.mark.parametrize(
    ("path", "module"), EVERY_MODULE, ids=[module for _, module in EVERY_MODULE]
)
def test_no_private_name_is_imported_from_another_module(path, module):
    assert private_imports(path, module) == []


# -- each rule finds a deliberate violation -------------------------------------------


def test_a_floor_violation_is_found(tmp_path):
    """An index module importing format and a framework; a cache module importing the
    datasets above it."""
    path = tmp_path / "bad.py"
    path.write_text("import torch\nfrom megadata_core.format import reader\n")
    found = violations(path, "megadata_core.indices.bad")
    assert "neither numpy nor the standard library" in found[0]
    assert found[1:] and all("indices (floor 2) may not import format" in f for f in found[1:])
    path.write_text("from megadata_core.datasets import gpt_dataset\n")
    assert all("cache (floor 2) may not import datasets" in f
               for f in violations(path, "megadata_core.cache.bad"))
    path.write_text("from megadata_core.build import builder\n")
    assert violations(path, "megadata_core.datasets.bad")


def test_file_io_in_indices_is_found(tmp_path):
    path = tmp_path / "bad.py"
    path.write_text(
        "import fcntl\nimport mmap\nimport os\nimport numpy as np\n"
        "def f(p):\n    with open(p) as s:\n        pass\n    os.replace(p, p)\n"
        "    return np.memmap(p), np.lib.format.open_memmap(p)\n"
    )
    found = "\n".join(file_io(path))
    for what in ("imports fcntl", "imports mmap", "calls open", "calls os.replace",
                 "calls np.memmap", "calls np.lib.format.open_memmap"):
        assert what in found
    path.write_text("import os\nimport numpy as np\ndef f(a):\n    return os.cpu_count(), a\n")
    assert file_io(path) == []


def test_a_private_import_is_found(tmp_path):
    path = tmp_path / "bad.py"
    path.write_text(
        "from megadata_core.cache.entries import _write_atomically\n"
        "from megadata_core.indices import _blend_engine\n"
        "from . import _blend_rules\n"
        "from megadata_core.indices.blending import __all__\n"
    )
    # a private name of another module: found; private submodules of its own package and
    # dunders: fine
    assert private_imports(path, "megadata_core.indices.bad") == [
        "megadata_core.indices.bad (line 1): from megadata_core.cache.entries import "
        "_write_atomically"
    ]
    # a private submodule of another package: found
    assert private_imports(path, "megadata_core.datasets.bad")[1:2] == [
        "megadata_core.datasets.bad (line 2): from megadata_core.indices import _blend_engine"
    ]


# -- what ships imports nothing that does not ----------------------------------------


def _outside_imports(path: Path, module: str, forbidden: tuple[str, ...]) -> list[str]:
    return [
        f"{module} (line {line}) imports {name}"
        for line, name in _imports(path, module)
        if name.split(".")[0] in forbidden
    ]


@pytest.mark.parametrize(("path", "module"), ADAPTERS, ids=[m for _, m in ADAPTERS])
def test_adapters_import_neither_the_commands_nor_the_benchmarks(path, module):
    assert _outside_imports(path, module, ("megadata_cli", "bench", "tools", "adapters")) == []


@pytest.mark.parametrize(("path", "module"), COMMANDS, ids=[m for _, m in COMMANDS])
def test_commands_never_import_the_benchmarks(path, module):
    """tools/bench/ imports the commands, never the reverse (the benchmarks do not ship)."""
    assert _outside_imports(path, module, ("bench", "tools", "adapters", "loopback")) == []


def import_cycles(modules: list[tuple[Path, str]]) -> list[list[str]]:
    """The import cycles among ``modules`` (each as the list of modules around it)."""
    names = {module for _, module in modules}
    edges = {
        module: sorted({name for _, name in _imports(path, module) if name in names} - {module})
        for path, module in modules
    }
    cycles, done = [], set()

    def visit(module: str, trail: list[str]) -> None:
        if module in trail:
            cycles.append(trail[trail.index(module):])
            return
        if module in done:
            return
        for other in edges[module]:
            visit(other, [*trail, module])
        done.add(module)

    for module in sorted(names):
        visit(module, [])
    return cycles


@pytest.mark.parametrize(
    "package", ["megadata_core", "megadata_adapters", "megadata_cli", "bench"]
)
def test_no_import_cycle_between_modules(package):
    modules = {
        "megadata_core": _modules(), "megadata_adapters": ADAPTERS, "megadata_cli": COMMANDS,
        "bench": BENCHMARKS,
    }[package]
    packages = {m for p, m in modules if p.name == "__init__.py"}  # a package's front door
    assert import_cycles([(p, m) for p, m in modules if m not in packages]) == []


def test_an_import_cycle_is_found(tmp_path):
    (tmp_path / "a.py").write_text("from bench import b\n")
    (tmp_path / "b.py").write_text("import bench.a\n")
    found = import_cycles([(tmp_path / "a.py", "bench.a"), (tmp_path / "b.py", "bench.b")])
    assert found == [["bench.a", "bench.b"]]
