"""Helpers of the builder tests: megatron-core's BlendedMegatronDatasetBuilder beside ours."""

from __future__ import annotations

import logging
import warnings

import numpy as np
from gpt_oracle import OracleTokenizer, megatron_sample

import megadata_core as mdc
from megadata_core.build.builder import build_datasets

EOD = 3
VOCAB = 50
FLAGS = dict(reset_position_ids=False, reset_attention_mask=False, eod_mask_loss=False)
SHARED = (
    "random_seed",
    "sequence_length",
    "blend",
    "blend_per_split",
    "split",
    "mid_level_dataset_surplus",
    "multiple_validation_sets",
    "full_validation",
    "drop_last_partial_validation_sequence",
    "add_extra_token_to_sequence",
    "create_attention_mask",
    "reset_position_ids",
    "reset_attention_mask",
    "eod_mask_loss",
)


def _megatron():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from megatron.core.datasets.blended_dataset import BlendedDataset
        from megatron.core.datasets.blended_megatron_dataset_builder import (
            BlendedMegatronDatasetBuilder,
        )
        from megatron.core.datasets.gpt_dataset import (
            GPTDataset,
            GPTDatasetConfig,
            MockGPTDataset,
        )
    logging.getLogger("megatron").setLevel(logging.ERROR)
    return (BlendedMegatronDatasetBuilder, GPTDataset, GPTDatasetConfig, MockGPTDataset,
            BlendedDataset)


def megatron_build(sizes, *, mock=False, vocab_size=VOCAB, path_to_cache=None, **kw):
    """megatron's ``BlendedMegatronDatasetBuilder(...).build()`` (no cache by default: its
    BlendedDataset cache needs torch.distributed)."""
    builder, gpt, config_class, mock_class, _ = _megatron()
    kw = {**FLAGS, **kw}
    config = config_class(
        tokenizer=OracleTokenizer(EOD, vocab_size=vocab_size), path_to_cache=path_to_cache, **kw
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return builder(mock_class if mock else gpt, list(sizes), lambda: True, config).build()


def ours_config(**kw) -> mdc.GPTDataConfig:
    kw = {**FLAGS, **kw}
    kw.setdefault("blend_order", "megatron")
    return mdc.GPTDataConfig(eod_id=EOD, **kw)


def ours_build(sizes, *, mock=False, vocab_size=VOCAB, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return build_datasets(ours_config(**kw), sizes, mock=mock, vocab_size=vocab_size)


def is_megatron_blend(dataset) -> bool:
    return isinstance(dataset, _megatron()[4])


def same_samples(theirs, ours, positions) -> None:
    """Tokens, labels, loss mask and position ids of the samples at ``positions``."""
    positions = [int(p) for p in positions]
    if not positions:
        return
    batch = ours.__getitems__(np.asarray(positions))
    for row, position in enumerate(positions):
        reference = megatron_sample(theirs, position)
        for key in ("tokens", "labels", "loss_mask", "position_ids"):
            np.testing.assert_array_equal(
                batch[key][row], reference[key].numpy(), err_msg=f"{key} of sample {position}"
            )


def assert_same_split(theirs, ours, rng: np.random.Generator, samples: int = 3) -> None:
    """Same kind, lengths, blend indices (for blends) and a few samples."""
    if theirs is None:
        assert ours is None
        return
    if isinstance(theirs, list):
        assert isinstance(ours, list) and len(ours) == len(theirs)
        for mine, reference in zip(ours, theirs):
            assert_same_split(reference, mine, rng, samples)
        return
    assert len(ours) == len(theirs)
    if is_megatron_blend(theirs):
        assert isinstance(ours, mdc.BlendedDataset), type(ours)
        assert len(ours.datasets) == len(theirs.datasets)
        for mine, reference in zip(ours.datasets, theirs.datasets):
            assert len(mine) == len(reference)
            assert mine.num_samples == reference.num_samples
        np.testing.assert_array_equal(ours.dataset_index, theirs.dataset_index)
        np.testing.assert_array_equal(ours.dataset_sample_index, theirs.dataset_sample_index)
    else:
        assert isinstance(ours, mdc.GPTDataset), type(ours)
        assert ours.num_samples == theirs.num_samples
        np.testing.assert_array_equal(np.asarray(ours.indices), theirs.indices)
    if len(ours):
        same_samples(theirs, ours, rng.integers(0, len(ours), min(samples, len(ours))))
