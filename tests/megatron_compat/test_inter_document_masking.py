"""``GPTDatasetConfig(inter_document_masking=True)`` of the drop-in: megatron-core 0.19's
sample keys and dtypes, tokens, labels and loss mask as megatron-core's, document masks as
megadata's document_masking (checked against 0.19's definition in the core's tests);
``mask_cross_document_labels`` zeroes exactly the labels that cross a boundary, and the
reset flags change nothing beside it, as in 0.19."""

from __future__ import annotations

import numpy as np
import torch
from compat_helpers import assert_same_sample, build, fresh_sample, ours, theirs

MAIN_KEYS = ["tokens", "labels", "loss_mask", "position_ids", "cu_seqlens", "max_seqlen"]


def test_keys_dtypes_and_values(corpora):
    prefixes = corpora(2, seed=5)
    kw = dict(random_seed=4, sequence_length=24, blend=(prefixes, [0.5, 0.5]),
              split="90,10,0", create_attention_mask=True)
    them = build(theirs, "GPTDataset", [60, 8, 0], **kw)[0]
    us = build(ours, "GPTDataset", [60, 8, 0], inter_document_masking=True, **kw)[0]
    masking = build(ours, "GPTDataset", [60, 8, 0], inter_document_masking=True,
                    mask_cross_document_labels=True, **kw)[0]
    resets = build(ours, "GPTDataset", [60, 8, 0], inter_document_masking=True,
                   **{**kw, "reset_position_ids": True, "reset_attention_mask": True})[0]
    assert len(us) == len(them)
    zeroed = 0
    for index in range(len(us)):
        sample, reference = us[index], fresh_sample(them, index)
        assert list(sample) == ["dataset_id", *MAIN_KEYS]  # a blend adds dataset_id
        assert [sample[key].dtype for key in MAIN_KEYS] == [
            torch.long, torch.long, torch.float, torch.long, torch.int32, torch.int32]
        assert sample["cu_seqlens"].shape == (25,) and sample["max_seqlen"].shape == ()
        assert torch.equal(sample["tokens"], reference["tokens"])
        assert torch.equal(sample["labels"], reference["labels"])
        member, row = us.datasets[int(us.dataset_index[index])], int(us.dataset_sample_index[index])
        core = member.core.__getitems__([row])
        for key in ("cu_seqlens", "position_ids", "loss_mask"):
            assert np.array_equal(sample[key].numpy(), core[key][0]), key
        assert int(sample["max_seqlen"]) == int(core["max_seqlen"][0])
        cu = sample["cu_seqlens"].tolist()
        positions = np.concatenate([np.arange(b - a) for a, b in zip(cu[:-1], cu[1:])])
        assert sample["position_ids"].tolist() == positions.tolist()
        assert torch.equal(sample["loss_mask"], reference["loss_mask"])  # Megatron's
        masked = masking[index]
        dropped = (reference["loss_mask"] > 0) & (masked["loss_mask"] == 0)
        assert (masked["loss_mask"] <= reference["loss_mask"]).all()
        ends = [end - 1 for end in cu[1:] if end > 0]  # 23: the extra token's document
        assert set(torch.nonzero(dropped).flatten().tolist()) <= set(ends)
        zeroed += int(dropped.sum())
        for key in MAIN_KEYS:
            assert torch.equal(resets[index][key], sample[key]), key
    assert zeroed > 0  # the opt-in did zero some
    assert list(us.datasets[0][0]) == MAIN_KEYS
    batch = torch.utils.data.default_collate([us[0], us[1]])
    assert batch["cu_seqlens"].shape == (2, 25) and batch["max_seqlen"].shape == (2,)
    plain = build(ours, "GPTDataset", [60, 8, 0], **kw)[0]
    assert "cu_seqlens" not in plain[0] and "attention_mask" in plain[0]


def test_equals_megatron_core_0_19s_own(corpora, tmp_path):
    """With a megatron-core that has inter_document_masking (0.19), every key of every
    sample equals its own, the padded last validation samples included."""
    import dataclasses

    reference = theirs("gpt_dataset").GPTDatasetConfig
    if "inter_document_masking" not in {f.name for f in dataclasses.fields(reference)}:
        import pytest

        pytest.skip("the installed megatron-core has no inter_document_masking (0.16.1)")
    prefixes = corpora(2, seed=6)
    for extra in (True, False):
        # caches of their own: megatron-core's cache key misses add_extra_token_to_sequence
        kw = dict(path_to_cache=str(tmp_path / f"cache-{extra}"), random_seed=9,
                  sequence_length=20, blend=(prefixes, [0.3, 0.7]), split="80,20,0",
                  create_attention_mask=False, inter_document_masking=True,
                  drop_last_partial_validation_sequence=False,
                  add_extra_token_to_sequence=extra, eod_mask_loss=True)
        them = build(theirs, "GPTDataset", [40, 20, 0], **kw)
        us = build(ours, "GPTDataset", [40, 20, 0], **kw)
        for left, right in zip(them[:2], us[:2]):
            assert len(left) == len(right)
            for index in range(len(left)):
                assert_same_sample(fresh_sample(left, index), right[index])
