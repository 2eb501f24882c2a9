"""Batched masks and position ids against megatron's per-sample loop."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from megadata_core.datasets import masks


@pytest.fixture(scope="module")
def ltor():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import torch
        from megatron.core.datasets.gpt_dataset import _get_ltor_masks_and_position_ids
    torch.set_num_threads(1)
    return torch, _get_ltor_masks_and_position_ids


@pytest.mark.parametrize("reset_position_ids", [False, True])
@pytest.mark.parametrize("reset_attention_mask", [False, True])
@pytest.mark.parametrize("eod_mask_loss", [False, True])
def test_against_megatron(ltor, reset_position_ids, reset_attention_mask, eod_mask_loss):
    torch, reference = ltor
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, 6, (9, 40)).astype(np.int32)  # EOD = 2, often
    tokens[0] = 2  # all EODs
    tokens[1] = 5  # none
    tokens[2, 0] = tokens[2, -1] = 2
    eod = 2
    attention = masks.attention_mask(tokens, eod, reset_attention_mask)
    position = masks.position_ids(tokens, eod, reset_position_ids)
    loss = masks.loss_mask(tokens, None, eod, -1, eod_mask_loss)
    assert attention.shape == (9, 1, 40, 40) and attention.dtype == bool
    assert loss.dtype == np.float32 and position.dtype == np.int64
    for row in range(len(tokens)):
        mask, loss_ref, position_ref = reference(
            torch.from_numpy(tokens[row]).long(),
            eod,
            reset_position_ids,
            reset_attention_mask,
            eod_mask_loss,
            True,
        )
        np.testing.assert_array_equal(attention[row], mask.numpy())
        np.testing.assert_array_equal(loss[row], loss_ref.numpy())
        np.testing.assert_array_equal(position[row], position_ref.numpy())


def test_pad_labels_and_int32_positions():
    tokens = np.array([[1, 2, 3, 2]], dtype=np.uint16)
    labels = np.array([[2, 3, -1, -1]], dtype=np.int32)
    np.testing.assert_array_equal(masks.loss_mask(tokens, labels, 2, -1, True), [[1, 0, 0, 0]])
    positions = masks.position_ids(tokens, 2, True, np.int32)
    assert positions.dtype == np.int32
    np.testing.assert_array_equal(positions, [[0, 1, 0, 1]])
    np.testing.assert_array_equal(masks.segment_ids(tokens, 2), [[0, 0, 1, 1]])


def test_length_one():
    tokens = np.array([[2], [1]])
    np.testing.assert_array_equal(masks.position_ids(tokens, 2, True), [[0], [0]])
    assert not masks.attention_mask(tokens, 2, True).any()
