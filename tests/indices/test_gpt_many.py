"""gpt_indices_many: every member equals its own gpt_indices (and so megatron-core's)."""

from __future__ import annotations

import numpy as np
import pytest

import megadata_core as mdc
from megadata_core.indices import gpt_indices
from megadata_core.indices.gpt_many import gpt_indices_many


def _members(draw: np.random.Generator, count: int, seq: int, extra: int):
    corpora = [
        (draw.integers(0, 300, int(draw.integers(1, 60))) * (draw.random(1) < 0.9)).astype(
            draw.choice([np.int32, np.int64])
        )
        for _ in range(max(1, count // 2))
    ]
    lengths, ids, wanted, drops = [], [], [], []
    for _ in range(count):
        corpus = corpora[int(draw.integers(len(corpora)))]  # members share corpora
        lo = int(draw.integers(0, len(corpus)))
        hi = int(draw.integers(lo + 1, len(corpus) + 1))
        tokens = int(corpus[lo:hi].sum())
        if tokens == 0:
            corpus = corpus.copy()
            corpus[lo] = 7
            tokens = 7
        per_epoch = max(0, (tokens - extra) // seq)
        lengths.append(corpus)
        ids.append(range(lo, hi))
        wanted.append(draw.choice([None, 0, per_epoch, per_epoch + 1, 3 * per_epoch + 2, 7]))
        drops.append(bool(draw.integers(2)))
    return lengths, ids, wanted, drops


@pytest.mark.parametrize("seed", range(12))
def test_each_member_equals_its_own_build(seed):
    draw = np.random.default_rng(seed)
    seq = int(draw.choice([1, 3, 16, 64, 333]))
    extra = int(draw.integers(2))
    lengths, ids, wanted, drops = _members(draw, int(draw.integers(1, 40)), seq, extra)
    many = gpt_indices_many(lengths, ids, seq, wanted, seed, add_extra_token=bool(extra),
                            drop_last_partial_sequence=drops)  # fmt: skip
    assert len(many) == len(ids)
    for member, got in enumerate(many):
        want = gpt_indices(lengths[member], ids[member], seq, wanted[member], seed,
                           add_extra_token=bool(extra),
                           drop_last_partial_sequence=drops[member])  # fmt: skip
        for name, mine, ref in zip(("document", "sample", "shuffle"), got, want):
            assert mine.dtype == ref.dtype, (member, name)
            np.testing.assert_array_equal(mine, ref, err_msg=f"member {member} {name}")


def test_empty_last_documents_and_trailing_partial_sample():
    # zero-length documents at a segment's end, and a kept partial sample
    lengths = [np.array([5, 0, 0], np.int32), np.array([0, 4, 9, 0], np.int32)]
    ids, wanted = [range(0, 3), range(0, 4)], [None, 5]
    many = gpt_indices_many(lengths, ids, 2, wanted, 3, drop_last_partial_sequence=[False, False])
    for member, got in enumerate(many):
        want = gpt_indices(lengths[member], ids[member], 2, wanted[member], 3,
                           drop_last_partial_sequence=False)  # fmt: skip
        for mine, ref in zip(got, want):
            np.testing.assert_array_equal(mine, ref)


def test_bad_members_are_named():
    lengths = [np.array([3, 4], np.int32), np.array([0, 0], np.int32)]
    with pytest.raises(mdc.DataError, match=r"document_ids\[1\]: the documents hold no tokens"):
        gpt_indices_many(lengths, [range(0, 2), range(0, 2)], 2, [None, None], 1,
                         drop_last_partial_sequence=[True, True])  # fmt: skip
    with pytest.raises(mdc.DataError, match=r"document_ids\[0\]: id 2 is out of range"):
        gpt_indices_many(lengths[:1], [range(0, 3)], 2, [None], 1,
                         drop_last_partial_sequence=[True])  # fmt: skip
    with pytest.raises(mdc.DataError, match="random_seed"):
        gpt_indices_many(lengths[:1], [range(0, 2)], 2, [None], -1,
                         drop_last_partial_sequence=[True])  # fmt: skip


def test_a_seed_per_member():
    """One seed per member equals each member built alone with its own seed."""
    rng = np.random.default_rng(5)
    lengths = [rng.integers(1, 30, 40) for _ in range(4)]
    ids = [range(0, 40), range(3, 30), range(0, 40), range(10, 40)]
    seeds = [1, 2, 3, 2**32 - 1]
    many = gpt_indices_many(lengths, ids, 8, [None, 50, 7, None], seeds,
                            drop_last_partial_sequence=[True] * 4)
    for member, seed in enumerate(seeds):
        alone = gpt_indices_many(lengths[member : member + 1], ids[member : member + 1], 8,
                                 [[None, 50, 7, None][member]], seed,
                                 drop_last_partial_sequence=[True])[0]
        for got, want in zip(many[member], alone):
            assert np.array_equal(got, want)
    with pytest.raises(mdc.DataError, match="other arguments differ in length"):
        gpt_indices_many(lengths, ids, 8, [None] * 4, seeds[:3],
                         drop_last_partial_sequence=[True] * 4)
    with pytest.raises(mdc.DataError, match="random_seed: 4294967296 must be < 2\\*\\*32"):
        gpt_indices_many(lengths, ids, 8, [None] * 4, [1, 2, 3, 2**32],
                         drop_last_partial_sequence=[True] * 4)
