"""Concatenate .bin/.idx corpora into one (Megatron's tools/merge_datasets.py).

    megadata-merge --input shards/ --output_prefix out/corpus
    megadata-merge --input a_text_document,b_text_document --output_prefix ab

A directory input merges every prefix in it that has both a .bin and an .idx, in natural
order (``part_2`` before ``part_10``). Memory stays bounded; see
``megadata_core.merge_datasets``.
"""

from __future__ import annotations

import os
import re
import sys

from absl import app, flags

from megadata_cli import progress_bars, tool_main
from megadata_core import DataError, IndexedDataset, merge_datasets

FLAGS = flags.FLAGS
flags.DEFINE_multi_string(
    "input", None, "A directory of corpora, or corpus prefixes (comma-separated and/or repeated)."
)
flags.DEFINE_string("output_prefix", None, "Writes {output_prefix}.bin and .idx.")
flags.DEFINE_bool(
    "progress", True, "Show a progress bar (on a terminal only; --noprogress: never)."
)


def _natural_key(name: str) -> list:
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


def prefixes_in_directory(directory: str, exclude: str | None = None) -> list[str]:
    """Prefixes of the .bin/.idx pairs in ``directory``, natural order; ``exclude`` left out."""
    names = os.listdir(directory)
    stems = {name[: -len(".idx")] for name in names if name.endswith(".idx")}
    stems &= {name[: -len(".bin")] for name in names if name.endswith(".bin")}
    prefixes = [os.path.join(directory, stem) for stem in sorted(stems, key=_natural_key)]
    if exclude is not None:
        prefixes = [p for p in prefixes if os.path.abspath(p) != os.path.abspath(exclude)]
    return prefixes


def resolve_inputs(values: list[str], output_prefix: str) -> list[str]:
    """--input values as the ordered list of corpus prefixes to merge."""
    items = [part.strip() for value in values for part in value.split(",") if part.strip()]
    prefixes: list[str] = []
    for item in items:
        if os.path.isdir(item):
            found = prefixes_in_directory(item, exclude=output_prefix)
            if not found:
                raise DataError(f"--input: directory {item} holds no .bin/.idx pair")
            prefixes.extend(found)
        else:
            prefixes.append(item[:-4] if item.endswith((".bin", ".idx")) else item)
    if not prefixes:
        raise DataError("--input: no corpora given")
    return prefixes


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")
    try:
        if not FLAGS.input or not FLAGS.output_prefix:
            raise DataError("--input and --output_prefix are required")
        prefixes = resolve_inputs(FLAGS.input, FLAGS.output_prefix)
        with progress_bars.bar(
            FLAGS.progress, total=len(prefixes), unit="corpus", desc="merging"
        ) as bar:
            merge_datasets(prefixes, FLAGS.output_prefix, progress=bar.update)
        merged = IndexedDataset(FLAGS.output_prefix)
        print(f"merged {len(prefixes)} corpora into {FLAGS.output_prefix}: "
              f"{merged.num_documents} documents, {len(merged)} sequences, {merged.dtype}")
        for prefix in prefixes:
            print(f"  {prefix}")
    except DataError as error:
        sys.exit(f"error: {error}")


def cli() -> None:
    """The console script: parse ``sys.argv`` and run."""
    tool_main.run(main)


if __name__ == "__main__":
    cli()
