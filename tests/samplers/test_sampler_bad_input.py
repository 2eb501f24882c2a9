"""Every bad sampler argument is a DataError naming the field."""

from __future__ import annotations

import pytest

import megadata_core as mdc
from megadata_core.samplers import PretrainingSampler, RandomSampler

GOOD_P = {"total_samples": 100, "consumed_samples": 0, "micro_batch_size": 2,
          "data_parallel_rank": 0, "data_parallel_size": 2}
GOOD_R = {**GOOD_P, "data_sharding": True, "seed": 0}


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"total_samples": 0}, "total_samples"),
        ({"total_samples": -5}, "total_samples"),
        ({"total_samples": 10.0}, "total_samples"),
        ({"consumed_samples": 100}, "beyond the total"),
        ({"consumed_samples": 150}, "beyond the total"),
        ({"consumed_samples": -1}, "consumed_samples"),
        ({"micro_batch_size": 0}, "micro_batch_size"),
        ({"micro_batch_size": "2"}, "micro_batch_size"),
        ({"data_parallel_size": 0}, "data_parallel_size"),
        ({"data_parallel_rank": 2}, "data_parallel_rank"),
        ({"data_parallel_rank": -1}, "data_parallel_rank"),
    ],
)
def test_pretraining_sampler(changes, field):
    with pytest.raises(mdc.DataError, match=field):
        PretrainingSampler(**{**GOOD_P, **changes})


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"total_samples": 0}, "total_samples"),
        ({"total_samples": 3}, "total_samples"),  # smaller than one global batch (4)
        ({"consumed_samples": -4}, "consumed_samples"),
        ({"consumed_samples": 6}, "consumed_samples"),  # not a multiple of 4
        ({"micro_batch_size": -1}, "micro_batch_size"),
        ({"data_parallel_size": -2}, "data_parallel_size"),
        ({"data_parallel_rank": 5}, "data_parallel_rank"),
        ({"data_parallel_rank": -1}, "data_parallel_rank"),
        ({"seed": -1}, "seed"),
        ({"seed": 1.5}, "seed"),
    ],
)
def test_random_sampler(changes, field):
    with pytest.raises(mdc.DataError, match=field):
        RandomSampler(**{**GOOD_R, **changes})


def test_random_sampler_allows_consumed_past_total():
    sampler = RandomSampler(**{**GOOD_R, "consumed_samples": 400})  # epoch 4
    assert sampler.epoch == 4


@pytest.mark.parametrize(
    ("state", "field"),
    [
        ({}, "state"),
        ("consumed", "state"),
        ({"consumed_samples": 101}, "beyond the total"),
        ({"consumed_samples": -1}, "consumed_samples"),
        ({"consumed_samples": 4, "total_samples": 99}, "total_samples"),
    ],
)
def test_pretraining_load_state(state, field):
    with pytest.raises(mdc.DataError, match=field):
        PretrainingSampler(**GOOD_P).load_state_dict(state)


@pytest.mark.parametrize(
    ("state", "field"),
    [
        ({}, "state"),
        ({"consumed_samples": 6}, "consumed_samples"),
        ({"consumed_samples": 4, "data_sharding": False}, "data_sharding"),
        ({"consumed_samples": 4, "micro_batch_size": 1}, "micro_batch_size"),
    ],
)
def test_random_load_state(state, field):
    with pytest.raises(mdc.DataError, match=field):
        RandomSampler(**GOOD_R).load_state_dict(state)
