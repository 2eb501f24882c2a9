"""Elasticity: the global sequence does not depend on the DP size (fixed global batch)."""

from __future__ import annotations

import pytest
from sampler_reference import global_steps, megatron_random, numpy_perm

from megadata_core.samplers import PretrainingSampler, RandomSampler

G = 8
TOTAL = 100  # active 96: 12 steps per epoch for the random sampler


def _make(kind, consumed, mbs, dp):
    if kind == "pretraining":
        return lambda r: PretrainingSampler(TOTAL, consumed, mbs, r, dp)
    sharding = kind == "random_sharded"
    return lambda r: RandomSampler(TOTAL, consumed, mbs, r, dp, data_sharding=sharding, seed=9)


def _elastic_run(kind, n):
    """dp=2 for 5 steps, then dp=4 resumed from consumed samples (same G)."""
    head = global_steps(_make(kind, 0, G // 2, 2), 2, 5)
    tail = global_steps(_make(kind, 5 * G, G // 4, 4), 4, n - 5)
    return head + tail


@pytest.mark.parametrize("kind", ["pretraining", "random_unsharded"])
def test_resume_with_another_dp_size_continues_the_sequence(kind):
    n = 12 if kind == "pretraining" else 30  # the random one crosses two epochs
    reference = global_steps(_make(kind, 0, G, 1), 1, n)  # dp=1 all along
    assert len(reference) == n
    assert _elastic_run(kind, n) == reference
    for dp in (2, 4, 8):  # and every dp size alone gives the same sequence
        assert global_steps(_make(kind, 0, G // dp, dp), dp, n) == reference


def test_sharded_random_sampler_is_not_elastic():
    reference = global_steps(_make("random_sharded", 0, G, 1), 1, 12)
    assert _elastic_run("random_sharded", 12) != reference


def test_megatron_unsharded_layout_is_not_elastic():
    """Why RandomSampler(data_sharding=False) deviates from Megatron: Megatron's strided
    layout orders a global batch differently per dp size (and its permutation length
    depends on mbs), and with total // mbs * mbs not a multiple of G its ranks yield
    different numbers of batches per epoch."""
    perm = numpy_perm(0)

    def megatron_rows(mbs, dp):
        per_rank = [megatron_random(TOTAL, 0, mbs, r, dp, False, perm)[0] for r in range(dp)]
        return [sum((per_rank[r][t] for r in range(dp)), []) for t in range(12)]

    assert megatron_rows(4, 2) != megatron_rows(2, 4)
    counts = [len(megatron_random(14, 0, 2, r, 4, False, perm)[0]) for r in range(4)]
    assert counts == [2, 2, 1, 1]
    ours = [len(list(RandomSampler(14, 0, 2, r, 4, data_sharding=False))) for r in range(4)]
    assert ours == [1, 1, 1, 1]
