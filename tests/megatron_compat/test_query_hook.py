"""``GPTDataset.__getitem__`` goes through ``_query_document_sample_shuffle_indices``, as
megatron-core's does: a subclass that rewrites the text (as Megatron's FIM dataset does)
gets the samples megatron-core gives it, masks and position ids from the rewritten text,
padded samples and the batch-padding sample included; and a tokenizer without a pad
token is served."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from compat_helpers import EOD, VOCAB, assert_same_sample, build, fresh_sample, ours, theirs


def _rewriting(side):
    """A subclass of ``side``'s GPTDataset whose hook rewrites every real token (pads,
    -1, stay): EODs move, so the masks must come from the rewritten text."""
    base = side("gpt_dataset").GPTDataset

    class Rewriting(base):
        calls = 0

        def _query_document_sample_shuffle_indices(self, idx):
            type(self).calls += 1
            text, documents, *rest = super()._query_document_sample_shuffle_indices(idx)
            text = np.array(text)
            real = text != -1
            text[real] = (text[real] * 7 + 1) % VOCAB
            return (text, documents, *rest)

    return Rewriting


def _build_with(side, cls, sizes, **config):
    gpt = side("gpt_dataset")
    gpt._Rewriting = cls
    try:
        return build(side, "_Rewriting", sizes, **config)
    finally:
        delattr(gpt, "_Rewriting")


@pytest.mark.parametrize("flags", [
    dict(),
    dict(eod_mask_loss=True, reset_position_ids=True, reset_attention_mask=True),
], ids=["plain", "eod masks"])
def test_a_subclass_hook_gives_megatrons_samples(corpora, flags):
    prefixes = corpora(1, seed=11)
    kw = dict(random_seed=7, sequence_length=12, blend=(prefixes, None), split="80,20,0",
              drop_last_partial_validation_sequence=False, create_attention_mask=True,
              **flags)
    mine, reference = _rewriting(ours), _rewriting(theirs)
    us = _build_with(ours, mine, [30, None, None], **kw)
    them = _build_with(theirs, reference, [30, None, None], **kw)
    for left, right in zip(them[:2], us[:2]):
        assert type(right).__name__ == "Rewriting" and len(left) == len(right)
        for index in range(len(left)):
            assert_same_sample(fresh_sample(left, index), right[index])
        assert_same_sample(fresh_sample(left, None), right[None])
    assert mine.calls > 0


def test_the_own_hook_is_the_core_read(corpora):
    """Without a subclass, the hook answers megatron-core's values (the core's one-sample
    read) and __getitem__ does not go through it (the fast path)."""
    prefixes = corpora(1, seed=12)
    kw = dict(random_seed=3, sequence_length=10, blend=(prefixes, None), split="70,30,0",
              drop_last_partial_validation_sequence=False)
    us = build(ours, "GPTDataset", [20, None, None], **kw)
    them = build(theirs, "GPTDataset", [20, None, None], **kw)
    for left, right in zip(them[:2], us[:2]):
        for index in range(len(left)):
            text, documents = left._query_document_sample_shuffle_indices(index)[:2]
            answer = right._query_document_sample_shuffle_indices(index)
            assert np.array_equal(answer[0], text) and np.array_equal(answer[1], documents)
            if len(answer) == 3:  # megatron-core 0.19: the lengths before padding
                assert sum(answer[2]) == int((text != -1).sum())


class PadlessTokenizer:
    """A tokenizer whose pad is None (megatron-core 0.19's GPT2BPETokenizer)."""

    eod = EOD
    vocab_size = VOCAB
    pad = None
    unique_identifiers = {"class": "PadlessTokenizer"}


def test_a_tokenizer_without_a_pad_token_is_served(corpora):
    prefixes = corpora(1, seed=13)
    gpt, builder = ours("gpt_dataset"), ours("blended_megatron_dataset_builder")
    reference_gpt = theirs("gpt_dataset")
    kw = dict(random_seed=5, sequence_length=16, blend=(prefixes, None), split="100,0,0",
              reset_position_ids=False, reset_attention_mask=False, eod_mask_loss=False)
    us = builder.BlendedMegatronDatasetBuilder(
        gpt.GPTDataset, [20, None, None], lambda: True,
        gpt.GPTDatasetConfig(tokenizer=PadlessTokenizer(), **kw),
    ).build()[0]
    them = theirs("blended_megatron_dataset_builder").BlendedMegatronDatasetBuilder(
        reference_gpt.GPTDataset, [20, None, None], lambda: True,
        reference_gpt.GPTDatasetConfig(tokenizer=PadlessTokenizer(), **kw),
    ).build()[0]
    assert us._pad_token_id is None and us.core.pad_id == -1  # Megatron keeps None
    for index in range(len(us)):  # no sample is padded: megatron-core serves them too
        assert_same_sample(fresh_sample(them, index), us[index])
    assert torch.equal(us[None]["loss_mask"], torch.zeros(16))
