"""megatron-core 0.16.1's GPTDataset as the oracle for megadata's GPTDataset."""

from __future__ import annotations

import os
import tempfile
import warnings

import numpy as np
import pytest
from gpt_oracle import OracleTokenizer


def _quiet_megatron():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig
        from megatron.core.datasets.indexed_dataset import IndexedDataset
        from megatron.core.datasets.utils import Split
    import torch

    torch.set_num_threads(1)  # small tensors: threads only add overhead (1000x on tril)
    return GPTDataset, GPTDatasetConfig, IndexedDataset, Split


@pytest.fixture(scope="session")
def megatron_gpt_dataset():
    """Build megatron's GPTDataset: (prefix, num_samples, split, cache_root, **kw).

    ``kw``: random_seed, sequence_length, eod, pad (None: no tokenizer pad), the mask
    flags, create_attention_mask, drop_last_partial_validation_sequence,
    add_extra_token_to_sequence, indices (default: every document). Every call gets its
    own cache directory: megatron's cache key misses add_extra_token_to_sequence and the
    data, so a shared directory would hand back stale indices.
    """
    gpt_dataset, config_class, indexed_class, split_enum = _quiet_megatron()

    def build(prefix, num_samples, split, cache_root, *, eod, pad=None, indices=None, **kw):
        indexed = indexed_class(prefix)
        if indices is None:
            indices = np.arange(len(indexed.sequence_lengths), dtype=np.int32)
        config = config_class(
            blend=([prefix], None),
            split="1,1,1",
            path_to_cache=tempfile.mkdtemp(dir=cache_root),
            tokenizer=OracleTokenizer(eod, pad),
            **kw,
        )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return gpt_dataset(
                indexed, prefix, indices, num_samples, getattr(split_enum, split), config
            )

    return build


@pytest.fixture
def workdir():
    with tempfile.TemporaryDirectory() as directory:
        os.makedirs(os.path.join(directory, "megatron_cache"))
        yield directory
