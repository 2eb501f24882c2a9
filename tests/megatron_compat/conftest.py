"""Fixtures of the compat tests."""

import pytest
from compat_helpers import make_corpora


@pytest.fixture
def corpora(tmp_path):
    """``make(count, documents=(20, 60), seed=0)`` -> prefixes of fresh small corpora."""
    return lambda count, documents=(20, 60), seed=0: make_corpora(tmp_path, count, documents, seed)

# Megatron-LM's own test files, run in a child process by test_megatron_lm_bin_reader.py
# (their ``tests`` package is Megatron-LM's, not this repository's)
collect_ignore = ["megatron_lm"]
