"""Fixtures of the compat tests."""

import os

import numpy as np
import pytest
from compat_helpers import write_corpus


def make_corpora(directory, count: int, documents=(20, 60), seed: int = 0) -> list[str]:
    """Prefixes of ``count`` fresh small corpora in ``directory``."""
    rng = np.random.default_rng(seed)
    prefixes = []
    for i in range(count):
        n = int(rng.integers(*documents))
        prefix = os.path.join(str(directory), f"corpus_{i}")
        prefixes.append(write_corpus(prefix, rng.integers(1, 40, n), rng))
    return prefixes


@pytest.fixture
def corpora(tmp_path):
    """``make(count, documents=(20, 60), seed=0)`` -> prefixes of fresh small corpora."""
    return lambda count, documents=(20, 60), seed=0: make_corpora(tmp_path, count, documents, seed)
