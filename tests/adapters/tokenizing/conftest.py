"""Fixtures for the tokenizing adapters' tests (shared with the preprocessing tests)."""

from preprocess_helpers import load_tool, write_jsonl  # noqa: F401
