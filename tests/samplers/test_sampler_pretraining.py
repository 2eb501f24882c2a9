"""PretrainingSampler: Megatron's MegatronPretrainingSampler, index for index."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sampler_reference import global_steps, megatron_pretraining

from megadata_core.samplers import PretrainingSampler


@st.composite
def configs(draw):
    total = draw(st.integers(1, 300))
    consumed = draw(st.integers(0, total - 1))
    mbs = draw(st.integers(1, 9))
    dp = draw(st.integers(1, 8))
    rank = draw(st.integers(0, dp - 1))
    drop_last = draw(st.booleans())
    return total, consumed, mbs, rank, dp, drop_last


@settings(max_examples=300, deadline=None)
@given(configs())
def test_matches_megatron_reference(config):
    total, consumed, mbs, rank, dp, drop_last = config
    sampler = PretrainingSampler(total, consumed, mbs, rank, dp, drop_last=drop_last)
    got = list(sampler)
    assert got == megatron_pretraining(total, consumed, mbs, rank, dp, drop_last)
    assert all(type(i) is int for batch in got for i in batch)
    assert len(sampler) == total


def test_partial_batch_short_and_empty_as_megatron():
    # 10 samples, G = 4: two full batches, then [8, 9] sliced per rank.
    assert list(PretrainingSampler(10, 0, 2, 0, 2, drop_last=False))[-1] == [8, 9]
    assert list(PretrainingSampler(10, 0, 2, 1, 2, drop_last=False))[-1] == []
    assert list(PretrainingSampler(11, 0, 2, 1, 2, drop_last=False))[-1] == [10]
    assert list(PretrainingSampler(10, 0, 2, 1, 2))[-1] == [6, 7]


@pytest.mark.parametrize("dp", range(1, 9))
@pytest.mark.parametrize("fixed", ["mbs", "global_batch"])
def test_ranks_partition_each_global_batch(dp, fixed):
    if fixed == "global_batch":
        mbs = 840 // dp  # 840 = lcm(1..8): the same global batch for every dp size
    else:
        mbs = 3
    g = mbs * dp
    total, consumed = 4 * 840 + 7, 2 * g
    rows = global_steps(lambda r: PretrainingSampler(total, consumed, mbs, r, dp), dp, 10**6)
    assert len(rows) == (total - consumed) // g
    for t, row in enumerate(rows):
        start = consumed + t * g
        assert row == list(range(start, start + g))  # union is the step, no overlap


def test_resume_from_consumed_samples():
    full = list(PretrainingSampler(100, 0, 3, 1, 2))
    for k in range(len(full)):
        assert list(PretrainingSampler(100, k * 6, 3, 1, 2)) == full[k:]


def test_state_dict_counts_handed_out_batches():
    sampler = PretrainingSampler(100, 12, 3, 1, 2)
    it = iter(sampler)
    assert sampler.state_dict()["consumed_samples"] == 12
    seen = [next(it) for _ in range(4)]
    state = json.loads(json.dumps(sampler.state_dict()))
    assert state["consumed_samples"] == 12 + 4 * 6
    assert sampler.samples_handed_out == 24
    rest = list(it)

    # A fresh sampler (another dp size even: the sampler is elastic) loads the state.
    fresh = PretrainingSampler(100, 0, 3, 1, 2)
    fresh.load_state_dict(state)
    assert list(fresh) == rest
    rebuilt = PretrainingSampler(100, state["consumed_samples"], 3, 1, 2)
    assert list(rebuilt) == rest
    assert seen + rest == list(PretrainingSampler(100, 12, 3, 1, 2))


def test_each_iter_restarts_at_consumed_samples_like_megatron():
    sampler = PretrainingSampler(20, 4, 2, 0, 2)
    assert list(sampler) == list(sampler)


def test_finished_state_loads_and_yields_nothing():
    sampler = PretrainingSampler(12, 0, 2, 0, 2, drop_last=False)
    list(sampler)
    state = sampler.state_dict()
    assert state["consumed_samples"] == 12
    other = PretrainingSampler(12, 0, 2, 0, 2)
    other.load_state_dict(state)
    assert list(other) == []


def test_huge_totals_are_not_walked_sample_by_sample():
    total = 10**15
    sampler = PretrainingSampler(total, total - 13, 4, 1, 2, drop_last=False)
    assert list(iter(sampler)) == [[total - 9, total - 8, total - 7, total - 6], [total - 1]]
    first = next(iter(PretrainingSampler(total, 10**14, 4, 1, 2)))
    assert first == [10**14 + 4 + i for i in range(4)]
