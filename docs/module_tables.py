"""The layout page's tables, made from the code at every docs build (nothing hand-counted).

Two directives, for ``docs/layout.md``:

- ``{layout-floors}``: the core's floors as ``tests/test_layering.py`` enforces them (its
  ``FLOORS`` and ``MAY_IMPORT``), each room with the first sentence of its docstring and
  its lines.
- ``{layout-modules} FOLDER``: every module under ``FOLDER`` (a path from the repository
  root), with the first sentence of its docstring and its lines.

The functions are plain (``floor_rows``, ``module_rows``) and Sphinx is imported only by
``setup``, so a test can call them where Sphinx is not installed.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CORE = ROOT / "megadata_core"
LAYERING = ROOT / "tests" / "test_layering.py"
#: "Floor 2 (beside indices): " and the like, which the floor column already says.
FLOOR_PREFIX = re.compile(r"^Floor \d[^:]*:\s*")
SENTENCE_END = re.compile(r"(?<!e\.g)(?<!i\.e)(?<!\bvs)\.(?=\s|$)")
#: Longer summaries are cut at a word (a table cell, not the docstring).
LONGEST = 160
#: ``literal``, :role:`target` and `literal` in docstrings.
INLINE = re.compile(r"``(.+?)``|:\w+:`~?(.+?)`|`(.+?)`")


def summary(path: Path) -> str:
    """The first sentence of the module docstring of ``path`` ("" without one)."""
    doc = ast.get_docstring(ast.parse(path.read_text(), str(path))) or ""
    paragraph = " ".join(doc.split("\n\n")[0].split())
    end = SENTENCE_END.search(paragraph)
    sentence = FLOOR_PREFIX.sub("", paragraph[: end.end()] if end else paragraph)
    sentence = sentence[:1].upper() + sentence[1:]
    if len(sentence) > LONGEST:
        sentence = sentence[: sentence.rfind(" ", 0, LONGEST)] + " …"
    return sentence


def lines(path: Path) -> int:
    """Lines of one file, or of every ``.py`` file under a folder."""
    files = sorted(path.rglob("*.py")) if path.is_dir() else [path]
    return sum(len(file.read_text().splitlines()) for file in files)


def _sources(folder: Path) -> list[Path]:
    """The ``.py`` files under ``folder``, a package's ``__init__`` before its modules."""
    files = [path for path in folder.rglob("*.py") if "__pycache__" not in path.parts]
    return sorted(files, key=lambda path: (path.parent.parts, path.name != "__init__.py",
                                           path.name))


def module_rows(folder: str) -> list[tuple[str, str, int]]:
    """``(module, summary, lines)`` of every module under ``folder`` (from the repository
    root); a package is named by its folder (``datasets/``), summarized by its
    ``__init__`` and counted whole (all its files)."""
    base = ROOT / folder
    if not base.is_dir():
        raise FileNotFoundError(f"{folder}: no such folder in the repository")
    rows = []
    for path in _sources(base):
        name = path.relative_to(base).as_posix()
        if path.name == "__init__.py":
            name = name.removesuffix("__init__.py") or "__init__.py"
            if name != "__init__.py":
                rows.append((name, summary(path), lines(path.parent)))
                continue
        rows.append((name, summary(path), lines(path)))
    return rows


def _layering() -> dict[str, dict]:
    """``FLOORS`` and ``MAY_IMPORT`` of tests/test_layering.py, evaluated from its source
    (the test module itself is not imported: it needs pytest)."""
    tree = ast.parse(LAYERING.read_text(), str(LAYERING))
    wanted = {"FLOORS", "GROUND", "MAY_IMPORT"}
    assigns = [node for node in tree.body if isinstance(node, ast.Assign | ast.AnnAssign)
               and {getattr(target, "id", None) for target in
                    (node.targets if isinstance(node, ast.Assign) else [node.target])}
               & wanted]
    namespace: dict = {}
    exec(compile(ast.Module(body=assigns, type_ignores=[]), str(LAYERING), "exec"), namespace)
    return {name: namespace[name] for name in wanted}


def floor_rows() -> list[tuple[int, str, str, str, int]]:
    """``(floor, room, may import, summary, lines)`` of every room of the core, as
    tests/test_layering.py enforces the floors."""
    layering = _layering()
    rows = []
    for room, floor in sorted(layering["FLOORS"].items(), key=lambda item: (item[1], item[0])):
        folder = CORE / room
        path = folder / "__init__.py" if folder.is_dir() else CORE / f"{room}.py"
        if not path.exists():
            raise FileNotFoundError(f"tests/test_layering.py names room {room!r}: no {path}")
        may = ", ".join(sorted(layering["MAY_IMPORT"].get(room, ()))) or "-"
        name = f"{room}/" if folder.is_dir() else f"{room}.py"
        rows.append((floor, name, may, summary(path), lines(folder if folder.is_dir() else path)))
    return rows


def setup(app) -> dict[str, object]:
    floors, modules = _directives()
    app.add_directive("layout-floors", floors)
    app.add_directive("layout-modules", modules)
    return {"parallel_read_safe": True, "parallel_write_safe": True}


def _directives() -> tuple[type, type]:
    """The two directive classes (docutils and Sphinx imported here, at build time)."""
    from docutils import nodes
    from sphinx.util.docutils import SphinxDirective

    def _inline(text: str) -> list[nodes.Node]:
        """Docstring text with its literals as literal nodes."""
        parts: list[nodes.Node] = []
        position = 0
        for match in INLINE.finditer(text):
            parts.append(nodes.Text(text[position:match.start()]))
            literal = next(group for group in match.groups() if group is not None)
            parts.append(nodes.literal(literal, literal))
            position = match.end()
        parts.append(nodes.Text(text[position:]))
        return parts

    def _table(header: list[str], rows: list[list[list[nodes.Node]]],
               widths: list[int]) -> nodes.table:
        table = nodes.table()
        group = nodes.tgroup(cols=len(header))
        table += group
        for width in widths:
            group += nodes.colspec(colwidth=width)

        def row(cells: list[list[nodes.Node]]) -> nodes.row:
            line = nodes.row()
            for cell in cells:
                entry = nodes.entry()
                entry += nodes.paragraph("", "", *cell)
                line += entry
            return line

        head = nodes.thead()
        head += row([[nodes.Text(title)] for title in header])
        body = nodes.tbody()
        for cells in rows:
            body += row(cells)
        group += head
        group += body
        return table

    class FloorsTable(SphinxDirective):
        """``{layout-floors}``: the floors of the core, from tests/test_layering.py."""

        def run(self) -> list[nodes.Node]:
            self.env.note_dependency(str(LAYERING))
            try:
                found = floor_rows()
            except FileNotFoundError as error:
                raise self.error(str(error)) from None
            rows = [[[nodes.Text(str(floor))], [nodes.literal(room, room)], _inline(may),
                     _inline(text), [nodes.Text(f"{count:,}")]]
                    for floor, room, may, text, count in found]
            header = ["floor", "room", "may import", "what it holds", "lines"]
            return [_table(header, rows, [1, 3, 5, 12, 2])]

    class ModulesTable(SphinxDirective):
        """``{layout-modules} FOLDER``: every module under FOLDER with its summary and lines."""

        required_arguments = 1

        def run(self) -> list[nodes.Node]:
            try:
                found = module_rows(self.arguments[0])
            except FileNotFoundError as error:
                raise self.error(str(error)) from None
            for path in _sources(ROOT / self.arguments[0]):
                self.env.note_dependency(str(path))
            rows = [[[nodes.literal(name, name)], _inline(text), [nodes.Text(f"{count:,}")]]
                    for name, text, count in found]
            header = ["module", "what it holds", "lines (a package: all its files)"]
            return [_table(header, rows, [4, 12, 2])]

    return FloorsTable, ModulesTable
