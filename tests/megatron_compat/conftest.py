"""Fixtures of the compat tests."""

import pytest
from compat_helpers import make_corpora


@pytest.fixture
def corpora(tmp_path):
    """``make(count, documents=(20, 60), seed=0)`` -> prefixes of fresh small corpora."""
    return lambda count, documents=(20, 60), seed=0: make_corpora(tmp_path, count, documents, seed)
