"""A JSON-lines demo corpus of real text, made offline from the Python standard library.

    python -m megadata_cli.make_demo_corpus --output demo.jsonl --max_documents 2000

One line ``{"text": ...}`` per module of the installed standard library, in sorted path
order: its source (``--kind source``, the default) or its docstrings joined by blank lines
(``--kind docstrings``). The result depends only on the Python installation. Importable:
``build_demo_corpus(path, max_documents=...)``. A ``.gz`` output name writes gzip.
"""

from __future__ import annotations

import ast
import contextlib
import gzip
import json
import os
import sysconfig
from collections.abc import Iterator

from megadata_core import DataError

_SKIPPED_DIRECTORIES = {"site-packages", "dist-packages", "__pycache__", "idlelib", "turtledemo"}


def stdlib_sources(root: str | None = None) -> Iterator[str]:
    """Paths of the standard library's .py files under ``root``, sorted, recursively."""
    root = root or sysconfig.get_paths()["stdlib"]
    for directory, subdirectories, files in os.walk(root):
        subdirectories[:] = sorted(d for d in subdirectories if d not in _SKIPPED_DIRECTORIES)
        for name in sorted(files):
            if name.endswith(".py"):
                yield os.path.join(directory, name)


def docstrings(source: str) -> str:
    """The module's docstrings (module, classes, functions) joined by blank lines, or ""."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return ""
    nodes = [tree] + [
        node
        for node in ast.walk(tree)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
    ]
    texts = (ast.get_docstring(node) for node in nodes)
    return "\n\n".join(text for text in texts if text and text.strip())


def build_demo_corpus(
    output_path: str,
    max_documents: int | None = None,
    *,
    max_bytes: int | None = None,
    kind: str = "source",
    root: str | None = None,
) -> int:
    """Write the corpus; returns the number of documents (non-empty texts) written.

    Stops before ``max_documents`` lines or ``max_bytes`` bytes of jsonl are exceeded.
    """
    if kind not in ("source", "docstrings"):
        raise DataError(f"kind: {kind!r} is not 'source' or 'docstrings'")
    for name, limit in (("max_documents", max_documents), ("max_bytes", max_bytes)):
        if limit is not None and limit < 0:
            raise DataError(f"{name}: {limit} must be >= 0")
    opener = gzip.open if str(output_path).endswith(".gz") else open
    documents = written = 0
    temp_path = f"{output_path}.tmp"
    try:
        with opener(temp_path, "wt", encoding="utf-8", newline="\n") as stream:
            for text in _texts(root, kind):
                if max_documents is not None and documents >= max_documents:
                    break
                line = json.dumps({"text": text}, ensure_ascii=False) + "\n"
                size = len(line.encode("utf-8"))
                if max_bytes is not None and written + size > max_bytes:
                    break
                stream.write(line)
                documents += 1
                written += size
        os.replace(temp_path, output_path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.remove(temp_path)
        raise
    return documents


def _texts(root: str | None, kind: str) -> Iterator[str]:
    """Non-empty document texts, one per readable UTF-8 module."""
    for path in stdlib_sources(root):
        try:
            with open(path, encoding="utf-8") as source_file:
                text = source_file.read()
        except (UnicodeDecodeError, OSError):
            continue
        if kind == "docstrings":
            text = docstrings(text)
        if text.strip():
            yield text


def main(argv: list[str]) -> None:
    from absl import flags

    options = flags.FLAGS
    count = build_demo_corpus(
        options.output, options.max_documents, max_bytes=options.max_bytes, kind=options.kind
    )
    print(f"wrote {count} documents to {options.output}")


def _define_flags() -> None:
    from absl import flags

    flags.DEFINE_string("output", None, "Output .jsonl (or .jsonl.gz) path.", required=True)
    flags.DEFINE_integer("max_documents", None, "Stop after this many documents.", lower_bound=0)
    flags.DEFINE_integer("max_bytes", None, "Stop before this many bytes.", lower_bound=0)
    flags.DEFINE_enum("kind", "source", ["source", "docstrings"], "Text of each document.")


def cli() -> None:
    """The console script: parse ``sys.argv`` and run."""
    from megadata_cli import tool_main

    _define_flags()  # defined here only, so importing this module defines no flags
    tool_main.run(main)


if __name__ == "__main__":
    cli()
