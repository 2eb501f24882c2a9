"""megatron-core 0.16.1 as the oracle for the index functions: session fixtures that the
indices and cache tests share (their conftests import them)."""

from __future__ import annotations

import types
import warnings

import numpy as np
import pytest


def _quiet_import():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from megatron.core.datasets import gpt_dataset, helpers
    return gpt_dataset, helpers


@pytest.fixture(scope="session")
def megatron_helpers():
    """megatron.core.datasets.helpers (the compiled build_sample_idx)."""
    return _quiet_import()[1]


@pytest.fixture(scope="session")
def megatron_gpt():
    """megatron.core.datasets.gpt_dataset (_build_document_index, _build_shuffle_index)."""
    return _quiet_import()[0]


@pytest.fixture(scope="session")
def megatron_sample_index(megatron_helpers):
    """helpers.build_sample_idx; where its wrapper's own sanity assert fails (a -1 offset
    for a partial sample ending on an empty document) the same C++ function, called
    directly, answers."""

    def build(sizes, doc_idx, seq, epochs, tokens, drop_last, extra):
        sizes = np.asarray(sizes, dtype=np.int32)
        doc_idx = np.asarray(doc_idx, dtype=np.int32)
        args = (sizes, doc_idx, seq, epochs, tokens, drop_last)
        try:
            return megatron_helpers.build_sample_idx(*args, bool(extra))
        except AssertionError:
            return megatron_helpers.build_sample_idx_int32(*args, int(bool(extra)))

    return build


@pytest.fixture(scope="session")
def megatron_trio(megatron_gpt):
    """GPTDataset._build_document_sample_shuffle_indices run on a stand-in ``self``:
    (sizes, ids, seq, num_samples, seed, extra, drop_last) -> (doc, sample, shuffle)."""
    gpt = megatron_gpt.GPTDataset
    from megatron.core.datasets.utils import Split

    def build(sizes, ids, seq, num_samples, seed, extra=True, drop_last=True):
        config = types.SimpleNamespace(
            defer_npy_index_mmap=False,
            path_to_cache=None,
            mock=True,
            fast_cache_load=False,
            sequence_length=seq,
            add_extra_token_to_sequence=extra,
            random_seed=seed,
            drop_last_partial_validation_sequence=drop_last,
        )
        this = types.SimpleNamespace(
            config=config,
            dataset=types.SimpleNamespace(sequence_lengths=np.asarray(sizes, np.int32)),
            indices=np.asarray(ids, np.int32),
            num_samples=num_samples,
            index_split=Split.valid,  # the split that honours drop_last
        )
        this._get_num_tokens_per_epoch = lambda: gpt._get_num_tokens_per_epoch(this)
        this._get_num_epochs = lambda tokens: gpt._get_num_epochs(this, tokens)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return gpt._build_document_sample_shuffle_indices(this)

    return build
