"""One ``dataset_id`` dtype, int32, from the core's BlendedDataset through Grain, torch and
JAX, for a blend of 40,000 datasets (ids past int16, Megatron's index dtype)."""

from __future__ import annotations

import numpy as np
import pytest

import megadata_core as mdc
from megadata_core.datasets.blended_dataset import DATASET_ID_DTYPE

MANY = 40_000  # > 32,767: int16 cannot name them
HEAVY = 100  # the last HEAVY members weigh most, so the blend's samples read ids past int16


class Member:
    """A member dataset: sample k of member ``tag`` is ``{"tokens": [tag, k] ...}``."""

    split = "train"

    def __init__(self, tag: int) -> None:
        self.tag = tag

    def __len__(self) -> int:
        return 4

    def __getitem__(self, k: int) -> dict:
        return {"tokens": np.array([self.tag, k], np.int32)}

    def __getitems__(self, ks) -> dict:
        ks = np.asarray(ks, np.int32)
        return {"tokens": np.stack([np.full_like(ks, self.tag), ks], axis=1)}


@pytest.fixture(scope="module")
def blend():
    weights = np.ones(MANY)
    weights[-HEAVY:] = 1e4
    config = mdc.GPTDataConfig(random_seed=1, sequence_length=8, blend_order="balanced")
    blended = mdc.BlendedDataset([Member(t) for t in range(MANY)], weights.tolist(), 64, config)
    assert blended.dataset_index.dtype == np.int32  # past int16
    return blended


def _check(ids, tokens) -> None:
    ids = np.asarray(ids)
    assert ids.dtype == np.int32
    assert (ids >= MANY - HEAVY).all()
    np.testing.assert_array_equal(ids, np.asarray(tokens)[..., 0])


def test_core(blend):
    assert DATASET_ID_DTYPE == np.int32
    batch = blend.__getitems__(np.arange(8))
    _check(batch["dataset_id"], batch["tokens"])
    sample = blend[3]
    assert type(sample["dataset_id"]) is np.int32
    _check(sample["dataset_id"], sample["tokens"])


def test_core_small_blends_too():
    """int32 whatever the number of members (their index is int16 here, as Megatron's)."""
    config = mdc.GPTDataConfig(random_seed=1, sequence_length=8)
    blended = mdc.BlendedDataset([Member(0), Member(1)], [0.5, 0.5], 8, config)
    assert blended.dataset_index.dtype == np.int16
    assert blended.__getitems__([0, 1])["dataset_id"].dtype == np.int32
    assert type(blended[0]["dataset_id"]) is np.int32


def test_grain(blend):
    grain_source = pytest.importorskip("megadata_adapters.frameworks.grain_source")
    batch = next(iter(grain_source.batched_dataset(blend, micro_batch_size=8)))
    _check(batch["dataset_id"], batch["tokens"])
    source = grain_source.GrainSource(blend)
    _check(source.__getitems__([0, 1])["dataset_id"], source.__getitems__([0, 1])["tokens"])
    # the worker hand-over (packed, shipped, laid out again) keeps it
    micro = grain_source.MicroBatchDataset(blend, micro_batch_size=8, packed=True)
    for writable in (False, True):
        batch = grain_source._Unpack(writable)(micro[0])  # noqa: SLF001 - the hand-over
        _check(batch["dataset_id"], batch["tokens"])


def test_torch(blend):
    torch = pytest.importorskip("torch")
    torch_data = pytest.importorskip("megadata_adapters.frameworks.torch_data")
    dataset = torch_data.TorchDataset(blend)
    batch = torch.utils.data.default_collate(dataset.__getitems__(list(range(8))))
    assert batch["dataset_id"].dtype == torch.int32
    _check(batch["dataset_id"].numpy(), batch["tokens"].numpy())
    assert dataset[0]["dataset_id"].dtype == torch.int32
    packed = torch_data.PackedBatch  # the workers' hand-over
    unpacked = dataset._packer(blend.__getitems__(np.arange(8))).unpack()  # noqa: SLF001
    assert isinstance(dataset._packer(blend.__getitems__([0])), packed)  # noqa: SLF001
    _check(unpacked["dataset_id"].numpy(), unpacked["tokens"].numpy())


def test_jax(blend):
    jax_sharding = pytest.importorskip("megadata_adapters.frameworks.jax_sharding")
    mesh = jax_sharding.data_mesh(("data",))
    arrays = jax_sharding.global_batch(blend.__getitems__(np.arange(8)), mesh)
    _check(np.asarray(arrays["dataset_id"]), np.asarray(arrays["tokens"]))
