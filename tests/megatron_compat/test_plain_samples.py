"""The per-sample fast path of GPTDataset.__getitem__ (no masks to compute): every sample
equals megatron-core's, memory-mapped or read with pread, before and after pickling."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from compat_helpers import assert_same_sample, build, fresh_sample, ours, theirs


@pytest.mark.parametrize("mmap", [True, False])
@pytest.mark.parametrize("sequence_length", [3, 40])  # within one document / across many
def test_every_sample_equals_megatron_core(corpora, mmap, sequence_length):
    prefixes = corpora(2, seed=8)
    kw = dict(random_seed=2, sequence_length=sequence_length, blend=(prefixes, [0.4, 0.6]),
              split="90,10,0", create_attention_mask=False, mmap_bin_files=mmap)
    them = build(theirs, "GPTDataset", [120, 10, 0], **kw)
    us = build(ours, "GPTDataset", [120, 10, 0], **kw)
    for left, right in zip(them[0].datasets, us[0].datasets):
        assert right._plain_samples()
        for index in range(len(right)):
            assert_same_sample(fresh_sample(left, index), right[index])
        copy = pickle.loads(pickle.dumps(right))
        for index in range(len(right)):
            assert_same_sample(right[index], copy[index])


def test_damaged_sample_index_is_refused(corpora):
    prefixes = corpora(1, seed=3)
    kw = dict(random_seed=1, sequence_length=8, blend=(prefixes, None), split="100,0,0",
              create_attention_mask=False)
    dataset = build(ours, "GPTDataset", [20, None, None], **kw)[0]
    dataset[0]
    samples = np.array(dataset.sample_index)
    row = int(dataset.shuffle_index[0])
    samples[row + 1, 1] = 10**6  # past the end of its document
    dataset.core.__dict__["sample_index"] = samples
    with pytest.raises(ValueError, match="sample_index: an offset lies past the end"):
        dataset[0]
