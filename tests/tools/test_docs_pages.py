"""The docs pages keep their shape: each guide page opens with a sentence saying what it is
for before any code block or list, its list items stay short, and docs/layout.md holds no
hand-written counts and names nothing that does not exist (its tables are made from the
code at build time by docs/module_tables.py, whose functions are checked here too).

Blocks running as written is tests/tools/test_docs_blocks.py's job.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
#: Logs and pages kept by their own tests (a benchmark log, the trainers' recipes, the
#: changelog, the list of known limits): not held to a guide page's shape.
NOT_GUIDES = {"benchmarks.md", "trainers.md", "changelog.md", "roadmap.md"}
GUIDES = sorted(
    path for path in DOCS.rglob("*.md")
    if "_build" not in path.parts and path.name not in NOT_GUIDES
)
#: A list item longer than this reads as a fact sheet: split it into sentences or a table.
LONGEST_ITEM_WORDS = 60
#: Pages whose later sections others keep: their list items are checked up to this heading.
OPENING_ONLY = {"preprocessing.md": "## Megatron-LM's command line"}
LAYOUT = DOCS / "layout.md"
#: A count: three digits or more, or thousands with commas (not a version, an address).
COUNT = re.compile(r"(?<![\d.])\d{3,}(?![\d.])|(?<![\d.])\d{1,3}(?:,\d{3})+")
#: Where a line starts something that is not prose.
NOT_PROSE = re.compile(r"^(```|:::|[-*+] |\d+[.)] |\||#|>|!\[|\{|<|\$)")
FENCE = re.compile(r"^```.*?^```$", re.MULTILINE | re.DOTALL)
DIRECTIVE = re.compile(r"^```\{(layout-[\w-]+)\}\s*(\S*)", re.MULTILINE)


def _tables():
    spec = importlib.util.spec_from_file_location("module_tables", DOCS / "module_tables.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("module_tables", module)
    spec.loader.exec_module(module)
    return module


def _body(path: Path) -> list[str]:
    """The page's lines after its ``# title``."""
    lines = path.read_text().splitlines()
    assert lines and lines[0].startswith("# "), f"{path.name}: no '# title' on line 1"
    return lines[1:]


@pytest.mark.parametrize("path", GUIDES, ids=lambda path: str(path.relative_to(DOCS)))
def test_a_page_opens_with_a_sentence_then_an_example(path):
    body = _body(path)
    opening = []
    for line in body:
        if not line.strip():
            if opening:
                break
            continue
        opening.append(line)
    assert opening, f"{path.name}: nothing after the title"
    assert not NOT_PROSE.match(opening[0]), (
        f"{path.name}: opens with {opening[0]!r}, not a sentence saying what the page is for")
    assert re.search(r"[.:](\s|$)", " ".join(opening)), (path.name, opening)
    before_sections = "\n".join(body).split("\n## ")[0]
    assert "```" in before_sections, (
        f"{path.name}: no example (a code block) before its first section")


def _items(text: str) -> list[str]:
    """Every list item of ``text`` (code blocks left out), its continuation lines joined."""
    items: list[list[str]] = []
    current: list[str] | None = None
    for line in FENCE.sub("", text).splitlines():
        if re.match(r"^\s*([-*+]|\d+[.)]) ", line):
            current = [line]
            items.append(current)
        elif current is not None and line.startswith("  ") and line.strip() \
                and not line.strip().startswith("|"):
            current.append(line)
        else:
            current = None
    return [" ".join(part.strip() for part in item) for item in items]


@pytest.mark.parametrize("path", GUIDES, ids=lambda path: str(path.relative_to(DOCS)))
def test_list_items_are_short(path):
    text = path.read_text()
    if path.name in OPENING_ONLY:
        text = text.split(OPENING_ONLY[path.name])[0]
    for item in _items(text):
        words = len(item.split())
        assert words <= LONGEST_ITEM_WORDS, (
            f"{path.name}: a list item of {words} words (at most {LONGEST_ITEM_WORDS}): "
            f"{item[:120]}...")


def test_layout_holds_no_hand_written_counts():
    text = DIRECTIVE.sub("", LAYOUT.read_text())
    found = COUNT.findall(text)
    assert not found, f"docs/layout.md: counts written by hand ({found}); the build counts"


def test_layout_names_only_what_exists():
    text = LAYOUT.read_text()
    named = re.findall(r"`([^`\s]+)`", FENCE.sub("", text))
    paths = [name for name in named if "/" in name or re.search(r"\.(py|sh|md)$", name)]
    assert len(paths) >= 10, paths
    for name in paths:  # from the repository root, or a room of the core
        found = [base for base in (ROOT, ROOT / "megadata_core")
                 if list(base.glob(name.rstrip("/")))]
        assert found, f"docs/layout.md names {name}: not found"
    modules = [name for name in named
               if re.fullmatch(r"megadata_(core|adapters|cli)(\.\w+)*", name)]
    assert modules
    for name in modules:
        assert importlib.util.find_spec(name) is not None, f"docs/layout.md names {name}"
    for name in re.findall(r"`(_?[a-z]\w*)`", text):  # a bare room or module name
        room = ROOT / "megadata_core" / name
        if name.startswith("megadata_") or room.exists() or room.with_suffix(".py").exists():
            continue
        assert name == "_private", f"docs/layout.md names {name!r}: no such room"


def test_layout_tables_cover_every_module():
    tables = _tables()
    folders = [argument for kind, argument in DIRECTIVE.findall(LAYOUT.read_text())
               if kind == "layout-modules"]
    assert {"megadata_core", "adapters", "tools/cli"} <= set(folders)
    for folder in folders:
        rows = tables.module_rows(folder)
        files = {path.relative_to(ROOT / folder).as_posix()
                 for path in (ROOT / folder).rglob("*.py") if "__pycache__" not in path.parts}
        named = {name + "__init__.py" if name.endswith("/") else name for name, _, _ in rows}
        assert named == files, folder
        assert all(count > 0 for _, _, count in rows), folder
    floors = tables.floor_rows()
    rooms = {room.rstrip("/").removesuffix(".py") for _, room, _, _, _ in floors}
    assert {"errors", "format", "indices", "datasets", "build"} <= rooms
    assert [floor for floor, *_ in floors] == sorted(floor for floor, *_ in floors)
    with pytest.raises(FileNotFoundError):
        tables.module_rows("no_such_folder")
