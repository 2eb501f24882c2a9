"""Fixtures for the preprocessing tests: tiny corpora written on the spot, the tools."""

from __future__ import annotations

import importlib

import pytest
from preprocess_helpers import jsonl_lines


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
