"""Epoch arithmetic against megatron-core's GPTDataset methods."""

from __future__ import annotations

import types

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import megadata_core as mdc
from megadata_core.indices import (
    num_epochs,
    samples_in_epochs,
    separate_final_epoch,
    tokens_per_epoch,
)


def _megatron_num_epochs(gpt, tokens, seq, num_samples, extra):
    config = types.SimpleNamespace(sequence_length=seq, add_extra_token_to_sequence=extra)
    this = types.SimpleNamespace(config=config, num_samples=num_samples)
    return gpt.GPTDataset._get_num_epochs(this, tokens)


def _megatron_separate(epochs, tokens, seq, num_samples, extra):
    """The decision inlined in _build_document_sample_shuffle_indices, transcribed."""
    if epochs == 1:
        return False
    sans_final = ((epochs - 1) * tokens - extra) // seq
    from_final = num_samples - sans_final
    per_epoch = (tokens - extra) // seq
    return from_final < int(0.80 * per_epoch)


@settings(max_examples=300, deadline=None)
@given(
    tokens=st.integers(1, 10**6),
    seq=st.integers(1, 5000),
    num_samples=st.none() | st.integers(0, 10**5),
    extra=st.booleans(),
)
def test_num_epochs_matches_megatron_loop(megatron_gpt, tokens, seq, num_samples, extra):
    expected = _megatron_num_epochs(megatron_gpt, tokens, seq, num_samples, extra)
    assert num_epochs(tokens, seq, num_samples, extra) == expected


def test_num_epochs_is_exact_for_huge_requests():
    tokens, seq = 3, 8192
    samples = 10**15
    epochs = num_epochs(tokens, seq, samples, True)
    assert epochs * tokens >= samples * seq + 1 > (epochs - 1) * tokens


@settings(max_examples=300, deadline=None)
@given(
    tokens=st.integers(2, 10**6),
    seq=st.integers(1, 5000),
    num_samples=st.integers(0, 10**5),
    extra=st.booleans(),
)
def test_separate_final_epoch_matches_megatron(tokens, seq, num_samples, extra):
    epochs = num_epochs(tokens, seq, num_samples, extra)
    expected = _megatron_separate(epochs, tokens, seq, num_samples, int(extra))
    assert separate_final_epoch(epochs, tokens, seq, num_samples, extra) == expected


def test_separate_final_epoch_threshold_edges():
    # T=1001, S=10, extra=1: 100 samples per epoch, threshold int(0.8 * 100) = 80.
    # Epoch 1 gives 100 samples; E=2 gives (2002 - 1) // 10 = 200.
    assert samples_in_epochs(1, 1001, 10, True) == 100
    assert separate_final_epoch(2, 1001, 10, 179, True)  # 79 from the final epoch
    assert not separate_final_epoch(2, 1001, 10, 180, True)  # 80: not below threshold
    assert not separate_final_epoch(1, 1001, 10, 50, True)
    assert not separate_final_epoch(1, 1001, 10, None, True)


def test_tokens_per_epoch_sums_in_int64_and_matches_megatron(megatron_gpt):
    sizes = np.full(5, 2**31 - 1, dtype=np.int32)
    ids = np.array([0, 1, 2, 4], dtype=np.int32)
    this = types.SimpleNamespace(dataset=types.SimpleNamespace(sequence_lengths=sizes), indices=ids)
    expected = megatron_gpt.GPTDataset._get_num_tokens_per_epoch(this)
    assert tokens_per_epoch(sizes, ids) == expected == 4 * (2**31 - 1)


def test_samples_in_epochs_exact_ceiling():
    assert samples_in_epochs(1, 2**24 + 1, 4096, False, False) == 4097
    assert samples_in_epochs(1, 2**24 + 1, 4096, False, True) == 4096
    assert samples_in_epochs(1, 2**24 + 2, 4096, True, False) == 4097
    assert samples_in_epochs(1, 1, 5, True, False) == 0


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda: num_epochs(0, 10, 5), "tokens_per_epoch"),
        (lambda: num_epochs(10, 0, 5), "sequence_length"),
        (lambda: num_epochs(10, -3, 5), "sequence_length"),
        (lambda: num_epochs(10, 10, -1), "num_samples"),
        (lambda: num_epochs(10, 2.5, 1), "sequence_length"),
        (lambda: separate_final_epoch(0, 10, 2, 5), "num_epochs"),
        (lambda: separate_final_epoch(3, 10, 2, 5), "num_epochs"),
        (lambda: separate_final_epoch(3, 10, 2, None), "num_epochs"),
        (lambda: samples_in_epochs(1, 0, 2), "tokens_per_epoch"),
        (lambda: tokens_per_epoch(np.array([1, -2]), np.array([0])), "sequence_lengths"),
        (lambda: tokens_per_epoch(np.array([1, 2]), np.array([2])), "document_ids"),
        (lambda: tokens_per_epoch(np.array([1, 2]), np.array([-1])), "document_ids"),
        (lambda: tokens_per_epoch(np.ones((2, 2), int), np.array([0])), "sequence_lengths"),
        (lambda: tokens_per_epoch(np.array([1.0]), np.array([0])), "sequence_lengths"),
    ],
)
def test_bad_input_names_the_field(call, field):
    with pytest.raises(mdc.DataError, match=field):
        call()
