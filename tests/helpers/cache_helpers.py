"""Shared by the cache damage and index range tests: a corpus whose cached index arrays
are each over 256 KiB, its GPTDataset, and in-place byte damage."""

from __future__ import annotations

import os

import numpy as np
from gpt_oracle import write_corpus

import megadata_core as mdc

DOCUMENTS = 20_000
SAMPLES = 80_000  # ~7 epochs of ~100k tokens: every cached array is over 256 KiB


def make_corpus(directory) -> str:
    rng = np.random.default_rng(7)
    return write_corpus(os.path.join(str(directory), "corpus"), rng.integers(1, 10, DOCUMENTS),
                        rng)


def config(cache_dir, **changes) -> mdc.GPTDataConfig:
    return mdc.GPTDataConfig(
        **{"random_seed": 3, "sequence_length": 8, "eod_id": 3, "path_to_cache": cache_dir,
           **changes}
    )


def dataset(prefix: str, cache_dir, **changes) -> mdc.GPTDataset:
    indexed = mdc.IndexedDataset(prefix)
    return mdc.GPTDataset(indexed, np.arange(DOCUMENTS), SAMPLES, config(cache_dir, **changes))


def flip_middle(path: str, count: int = 16) -> None:
    """Invert ``count`` bytes in the middle of a file, in place."""
    middle = os.path.getsize(path) // 2
    with open(path, "r+b") as stream:
        stream.seek(middle)
        data = stream.read(count)
        stream.seek(middle)
        stream.write(bytes(value ^ 0xFF for value in data))


def entry_files(cache_dir) -> list[str]:
    """Sorted names of a cache directory's entry files, without the verified-files lists
    (``*-verified.json``) that a later cache hit may add."""
    return sorted(name for name in os.listdir(cache_dir) if not name.endswith("-verified.json"))
