"""A mode's name is compared nowhere but in its own module and the config parser.

Every registered mode name (``concat``, ``best_fit``, ``megatron``, ``feistel``,
``balanced``, ...) is looked for in the comparisons (``==``, ``!=``, ``in``, ``not in``,
``is``) of every module of the core, the adapters and the command line, parsed with
``ast``: the code asks the mode object instead (``config.packing_mode``, ...).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import megadata_core as mdc

ROOT = Path(__file__).resolve().parents[2]
TREES = (ROOT / "megadata_core", ROOT / "adapters", ROOT / "tools" / "cli")
#: The mode modules themselves, and the config parser that turns names into modes.
ALLOWED = {ROOT / "megadata_core" / "modes", ROOT / "megadata_core" / "datasets" / "config.py"}
NAMES = {name for kind in ("packing", "shuffle", "blend_order") for name in mdc.modes.names(kind)}


def _sources() -> list[Path]:
    files = []
    for tree in TREES:
        for path in sorted(tree.rglob("*.py")):
            if not any(path == allowed or allowed in path.parents for allowed in ALLOWED):
                files.append(path)
    return files


def _names_in(node: ast.AST) -> set[str]:
    """The mode names a comparison operand spells: a string, or a tuple, list or set of
    them."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value} & NAMES
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return set().union(*(_names_in(item) for item in node.elts)) if node.elts else set()
    return set()


def mode_comparisons(source: str, filename: str = "<string>") -> list[tuple[int, str]]:
    """``(line, name)`` of every comparison with a mode's name in ``source``."""
    found = []
    for node in ast.walk(ast.parse(source, filename)):
        if isinstance(node, ast.Compare):
            for operand in (node.left, *node.comparators):
                found.extend((node.lineno, name) for name in sorted(_names_in(operand)))
        elif isinstance(node, ast.match_case) and isinstance(node.pattern, ast.MatchValue):
            found.extend((node.pattern.lineno, name)
                         for name in sorted(_names_in(node.pattern.value)))
    return found


def test_the_shipped_modes_are_registered():
    assert {"concat", "best_fit", "megatron", "feistel", "balanced"} <= NAMES


@pytest.mark.parametrize("path", _sources(), ids=lambda path: str(path.relative_to(ROOT)))
def test_no_comparison_with_a_mode_name(path):
    found = mode_comparisons(path.read_text(), str(path))
    assert not found, (
        f"{path.relative_to(ROOT)} compares mode names {found}: ask the mode object "
        "(config.packing_mode, config.shuffle_mode, config.blend_order_mode) instead"
    )


@pytest.mark.parametrize(
    "source",
    [
        'if config.packing == "best_fit": pass',
        'ok = "concat" != config.packing',
        'ok = config.shuffle in ("megatron", "feistel")',
        'ok = order not in ["balanced"]',
        'match packing:\n    case "best_fit":\n        pass',
    ],
)
def test_a_comparison_is_found(source):
    assert mode_comparisons(source)


def test_other_strings_and_spellings_are_not_comparisons():
    assert not mode_comparisons('config = make(packing="best_fit"); x = {"concat": 1}')
    assert not mode_comparisons('ok = name == "other"')
