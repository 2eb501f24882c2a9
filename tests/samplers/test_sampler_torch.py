"""The samplers drive a torch DataLoader as its batch_sampler."""

from __future__ import annotations

import pytest

from megadata_core.samplers import PretrainingSampler, RandomSampler

torch = pytest.importorskip("torch")


def test_dataloader_with_pretraining_sampler():
    dataset = list(range(1000, 1050))
    sampler = PretrainingSampler(50, 8, micro_batch_size=3, data_parallel_rank=1,
                                 data_parallel_size=2)
    loader = torch.utils.data.DataLoader(dataset, batch_sampler=sampler)
    got = [batch.tolist() for batch in loader]
    want = [[1000 + s + 3 + i for i in range(3)] for s in range(8, 50 - 5, 6)]
    assert got == want
    assert sampler.state_dict()["consumed_samples"] == 8 + 6 * len(want)


def test_dataloader_with_random_sampler_and_workers():
    dataset = list(range(40))
    sampler = RandomSampler(40, 0, 4, 0, 2, data_sharding=False, seed=3)
    expected = list(RandomSampler(40, 0, 4, 0, 2, data_sharding=False, seed=3))
    loader = torch.utils.data.DataLoader(dataset, batch_sampler=sampler, num_workers=2)
    assert [batch.tolist() for batch in loader] == expected
