"""Fixtures for the preprocessing tests: tiny corpora written on the spot, the tools."""

from __future__ import annotations

import importlib.util
import sys

import pytest
from preprocess_helpers import REPO, jsonl_lines


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
    """load_tool("preprocess_data") imports tools/preprocess_data.py once per session."""

    def load(name: str):
        module_name = f"_megadata_tool_{name}"
        if module_name not in sys.modules:
            if str(REPO / "tools") not in sys.path:  # the tools import their shared tool_main
                sys.path.append(str(REPO / "tools"))
            path = REPO / "tools" / f"{name}.py"
            spec = importlib.util.spec_from_file_location(module_name, path)
            module = importlib.util.module_from_spec(spec)
            sys.modules[module_name] = module
            spec.loader.exec_module(module)
        return sys.modules[module_name]

    return load
