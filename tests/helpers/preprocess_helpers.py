"""Helpers shared by the preprocessing and tokenizing tests (imported by name: this folder is
on sys.path), and their fixtures, which each folder's conftest imports."""

from __future__ import annotations

import importlib
import json
import pathlib

import pytest

from megadata_core import IndexedDataset

REPO = pathlib.Path(__file__).resolve().parents[2]

# Texts with multi-byte UTF-8, an empty text and a long one; a fixed order.
TEXTS = [
    "Hello, world.",
    "Megatron stores tokens in .bin files.",
    "",
    "Zürich, 東京, Привет, 😀 — unicode.",
    "line one\nline two\n\ttabbed",
    "a",
    "The quick brown fox jumps over the lazy dog. " * 20,
    "quotes \" and backslashes \\ survive JSON",
]


def jsonl_lines(records) -> list[bytes]:
    """One JSON line (bytes, newline-terminated) per record (dict) or raw bytes as given."""
    return [
        r if isinstance(r, bytes) else (json.dumps(r, ensure_ascii=False) + "\n").encode("utf-8")
        for r in records
    ]


def expected_sequences(texts, append_eod=True, encode=None, eod=256):
    """Documents as lists of sequences, one sequence per non-empty encoding."""
    encode = encode or (lambda text: list(text.encode("utf-8")))
    documents = []
    for text in texts:
        ids = [int(i) for i in encode(text)]
        documents.append([ids + [eod] if append_eod else ids] if ids else [])
    return documents


def read_documents(prefix, dataset=None):
    """A corpus as a list of documents, each a list of token lists (our reader by default)."""
    dataset = dataset if dataset is not None else IndexedDataset(prefix)
    bounds = [int(b) for b in dataset.document_indices]
    return [
        [dataset[i].tolist() for i in range(bounds[d], bounds[d + 1])]
        for d in range(len(bounds) - 1)
    ]


def files_of(prefix):
    """(.bin bytes, .idx bytes) of a corpus."""
    with open(prefix + ".bin", "rb") as bin_file, open(prefix + ".idx", "rb") as idx_file:
        return bin_file.read(), idx_file.read()


class StallingTokenizer:
    """ByteTokenizer that, on the text "STALL", touches ``$STALL_MARKER`` and sleeps forever:
    a run stopped at a known line, to be killed there."""

    vocab_size = 257
    eod_id = 256

    def encode(self, text):
        if text == "STALL":
            import os
            import time

            open(os.environ["STALL_MARKER"], "w").close()
            while True:
                time.sleep(1)
        return list(text.encode("utf-8"))


@pytest.fixture
def write_jsonl(tmp_path):
    """write_jsonl(name, records) -> path; records are dicts or raw byte lines."""

    def write(name: str, records) -> str:
        path = tmp_path / name
        data = b"".join(jsonl_lines(records))
        if name.endswith(".gz"):
            import gzip

            data = gzip.compress(data)
        elif name.endswith(".zst"):
            import zstandard

            data = zstandard.ZstdCompressor().compress(data)
        path.write_bytes(data)
        return str(path)

    return write


@pytest.fixture(scope="session")
def load_tool():
    """load_tool("preprocess_data") imports the command megadata_cli.preprocess_data."""

    def load(name: str):
        return importlib.import_module(f"megadata_cli.{name}")

    return load
