"""RandomSampler: Megatron's MegatronPretrainingRandomSampler with numpy seeding."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sampler_reference import global_steps, megatron_random, numpy_perm, steps

from megadata_core.errors import DataError
from megadata_core.samplers import RandomSampler


@st.composite
def configs(draw):
    mbs = draw(st.integers(1, 6))
    dp = draw(st.integers(1, 6))
    g = mbs * dp
    total = draw(st.integers(g, 200))
    active = total - total % g
    consumed = g * draw(st.integers(0, 3 * active // g))
    rank = draw(st.integers(0, dp - 1))
    seed = draw(st.integers(0, 2**32))
    return total, consumed, mbs, rank, dp, seed


@settings(max_examples=300, deadline=None)
@given(configs())
def test_sharded_matches_megatron_reference(config):
    total, consumed, mbs, rank, dp, seed = config
    sampler = RandomSampler(total, consumed, mbs, rank, dp, data_sharding=True, seed=seed)
    perm = numpy_perm(seed)
    for _ in range(3):  # three successive iter() calls: rest of epoch, then whole epochs
        want, after = megatron_random(total, consumed, mbs, rank, dp, True, perm)
        got = list(sampler)
        assert got == want
        assert all(type(i) is int for batch in got for i in batch)
        assert sampler.consumed_samples == after
        consumed = after
    assert len(sampler) == total


@settings(max_examples=200, deadline=None)
@given(configs())
def test_unsharded_layout(config):
    """Step t of an epoch is perm[t*G:(t+1)*G]; rank r takes a contiguous slice."""
    total, consumed, mbs, rank, dp, seed = config
    g = mbs * dp
    active = total - total % g
    sampler = RandomSampler(total, consumed, mbs, rank, dp, data_sharding=False, seed=seed)
    got = list(sampler)
    epoch, offset = divmod(consumed, active)
    perm = np.random.default_rng((seed, epoch)).permutation(total)
    want = [
        perm[start + rank * mbs : start + (rank + 1) * mbs].tolist()
        for start in range(offset, active, g)
    ]
    assert got == want
    assert sampler.epoch == epoch
    assert sampler.consumed_samples == consumed + len(want) * g == (epoch + 1) * active


@pytest.mark.parametrize("data_sharding", [True, False])
@pytest.mark.parametrize("dp", range(1, 9))
@pytest.mark.parametrize("fixed", ["mbs", "global_batch"])
def test_ranks_partition_each_global_batch(dp, fixed, data_sharding):
    if fixed == "global_batch":
        mbs = 840 // dp  # 840 = lcm(1..8): the same global batch for every dp size
    else:
        mbs = 3
    g = mbs * dp
    total, seed = 3 * 840 + 11, 7
    active = total - total % g
    n = 2 * active // g + 3  # over two epoch boundaries
    rows = global_steps(
        lambda r: RandomSampler(total, 0, mbs, r, dp, data_sharding=data_sharding, seed=seed),
        dp,
        n,
    )
    assert len(rows) == n
    for t, row in enumerate(rows):
        assert len(row) == len(set(row)) == g  # ranks never overlap
        epoch, step = divmod(t, active // g)
        if data_sharding:
            perm = numpy_perm(seed)(active // dp, epoch)
            bucket = active // dp
            want = [r * bucket + x for r in range(dp) for x in perm[step * mbs : step * mbs + mbs]]
        else:
            perm = np.random.default_rng((seed, epoch)).permutation(total)
            want = perm[step * g : (step + 1) * g].tolist()
        assert row == want
    # every epoch reads each active sample once
    per_epoch = active // g
    for epoch in range(2):
        flat = sum(rows[epoch * per_epoch : (epoch + 1) * per_epoch], [])
        assert len(set(flat)) == active
        if data_sharding:
            assert set(flat) == set(range(active))


@pytest.mark.parametrize("data_sharding", [True, False])
def test_resume_from_consumed_samples(data_sharding):
    total, mbs, dp, rank, seed = 57, 2, 3, 1, 11
    g = mbs * dp
    full = steps(RandomSampler(total, 0, mbs, rank, dp, data_sharding, seed), 40)
    for k in [0, 1, 5, 8, 9, 10, 17, 30]:  # 9 steps per epoch: crosses boundaries
        resumed = steps(RandomSampler(total, k * g, mbs, rank, dp, data_sharding, seed), 40 - k)
        assert resumed == full[k:]


@pytest.mark.parametrize("data_sharding", [True, False])
def test_state_dict_round_trip(data_sharding):
    args = (57, 0, 2, 1, 3, data_sharding, 11)
    sampler = RandomSampler(*args)
    it = iter(sampler)
    head = [next(it) for _ in range(4)]
    state = json.loads(json.dumps(sampler.state_dict()))
    assert state["consumed_samples"] == 4 * 6 == sampler.samples_handed_out
    fresh = RandomSampler(*args)
    fresh.load_state_dict(state)
    assert fresh.samples_handed_out == 0
    assert head + steps(fresh, 20) == steps(RandomSampler(*args), 24)


def test_iter_yields_rest_of_epoch_then_next_epoch():
    sampler = RandomSampler(50, 16, 2, 0, 2, data_sharding=True, seed=3)  # active 48
    first = list(sampler)
    assert len(first) == (48 - 16) // 4 and sampler.consumed_samples == 48
    second = list(sampler)
    assert len(second) == 12 and sampler.epoch == 1 and sampler.consumed_samples == 96


@pytest.mark.parametrize("data_sharding", [True, False])
def test_deterministic_and_seeded(data_sharding):
    def order(seed, rank=0):
        return steps(RandomSampler(64, 0, 4, rank, 2, data_sharding, seed), 16)

    assert order(5) == order(5)
    assert order(5) != order(6)
    assert order(5, rank=1) != order(5, rank=0)


@pytest.mark.parametrize("data_sharding", [True, False])
def test_each_epoch_reshuffles(data_sharding):
    batches = global_steps(  # 8 steps per epoch
        lambda r: RandomSampler(64, 0, 4, r, 2, data_sharding, 1), 2, 24
    )
    epochs = [sum(batches[e * 8 : (e + 1) * 8], []) for e in range(3)]
    assert sorted(epochs[0]) == sorted(epochs[1]) == sorted(epochs[2])
    assert epochs[0] != epochs[1] != epochs[2] != epochs[0]


def test_state_checks_config():
    sampler = RandomSampler(64, 0, 4, 0, 2, data_sharding=True, seed=1)
    elastic = RandomSampler(64, 0, 2, 0, 4, data_sharding=False, seed=1)
    elastic.load_state_dict(RandomSampler(64, 8, 4, 1, 2, data_sharding=False, seed=1).state_dict())
    assert elastic.consumed_samples == 8
    with pytest.raises(DataError, match="micro_batch_size"):
        sampler.load_state_dict(RandomSampler(64, 8, 2, 0, 4, True, 1).state_dict())
    with pytest.raises(DataError, match="seed"):
        sampler.load_state_dict(RandomSampler(64, 8, 4, 0, 2, True, 2).state_dict())
    with pytest.raises(DataError, match="global_batch_size"):
        elastic.load_state_dict(RandomSampler(64, 16, 4, 0, 4, False, 1).state_dict())
