"""Fixtures for the preprocessing tests: tiny corpora written on the spot, the tools."""

from preprocess_helpers import load_tool, write_jsonl  # noqa: F401
