"""``source_ids=True`` through the skins: Grain (Megatron and MaxText key names, in
process and from workers), torch (int32 tensors, loader with workers) and JAX (global
arrays): the per-token ``dataset_ids`` / ``document_ids`` arrive equal to the core's."""

from __future__ import annotations

import numpy as np
import pytest
from adapter_helpers import write_corpus

import megadata_core as mdc

SEQ = 16


@pytest.fixture(scope="module")
def blend(tmp_path_factory):
    root = tmp_path_factory.mktemp("source_ids")
    prefixes = [write_corpus(str(root / f"c{i}"), seed=i) for i in range(2)]
    config = mdc.GPTDataConfig(
        random_seed=5, sequence_length=SEQ, blend=(prefixes, [0.6, 0.4]), split="90,10,0",
        path_to_cache=str(root / "cache"), packing="best_fit", document_masking=True,
        eod_id=3, source_ids=True,
    )
    return mdc.build_datasets(config, [200, 20, None])[0]


@pytest.fixture(scope="module")
def picked(blend):
    """16 samples: padded ones (best_fit bins with room left) and full ones, of both
    members."""
    documents = blend.__getitems__(np.arange(len(blend)))["document_ids"]
    padded = np.flatnonzero((documents < 0).any(axis=1))[:8]
    full = np.flatnonzero((documents >= 0).all(axis=1))[: 16 - len(padded)]
    return np.sort(np.concatenate([padded, full]))


def _sources(dataset, indices):
    batch = dataset.__getitems__(np.asarray(indices))
    assert (batch["document_ids"] < 0).any()  # padded samples among them
    assert len(np.unique(batch["dataset_ids"][batch["dataset_ids"] >= 0])) == 2
    return batch["dataset_ids"], batch["document_ids"]


@pytest.mark.parametrize("key_names", ["megatron", "maxtext"])
def test_grain_source_carries_source_ids(blend, picked, key_names):
    grain_source = pytest.importorskip("megadata_adapters.frameworks.grain_source")
    source = grain_source.GrainSource(blend, key_names=key_names)
    indices = picked.tolist()
    datasets, documents = _sources(blend, indices)
    batch = source.__getitems__(indices)
    np.testing.assert_array_equal(batch["dataset_ids"], datasets)
    np.testing.assert_array_equal(batch["document_ids"], documents)
    one = source[indices[2]]
    np.testing.assert_array_equal(one["document_ids"], documents[2])
    np.testing.assert_array_equal(one["dataset_ids"], datasets[2])


@pytest.mark.parametrize("workers", [0, 1])
def test_grain_batches_from_workers_carry_source_ids(blend, workers):
    grain_source = pytest.importorskip("megadata_adapters.frameworks.grain_source")
    pipeline = grain_source.batched_dataset(blend, micro_batch_size=4, worker_count=workers,
                                            key_names="maxtext")
    with iter(pipeline) as iterator:
        for step in range(3):
            batch = next(iterator)
            datasets, documents = (blend.__getitems__(np.arange(4 * step, 4 * step + 4))[key]
                                   for key in ("dataset_ids", "document_ids"))
            np.testing.assert_array_equal(batch["dataset_ids"], datasets)
            np.testing.assert_array_equal(batch["document_ids"], documents)
            assert "inputs" in batch


def test_torch_tensors_are_int32_sources(blend):
    torch_data = pytest.importorskip("megadata_adapters.frameworks.torch_data")
    import torch

    dataset = torch_data.TorchDataset(blend)
    sampler = mdc.samplers.PretrainingSampler(len(blend), 0, 4, 0, 1)
    loader = torch_data.loader(dataset, sampler, num_workers=1)
    for step, batch in zip(range(3), loader):
        datasets, documents = (blend.__getitems__(np.arange(4 * step, 4 * step + 4))[key]
                               for key in ("dataset_ids", "document_ids"))
        assert batch["dataset_ids"].dtype == torch.int32
        assert batch["document_ids"].dtype == torch.int32
        np.testing.assert_array_equal(batch["dataset_ids"].numpy(), datasets)
        np.testing.assert_array_equal(batch["document_ids"].numpy(), documents)


@pytest.mark.parametrize("key_names", ["megatron", "maxtext"])
def test_jax_global_batch_carries_source_ids(blend, picked, key_names):
    jax_sharding = pytest.importorskip("megadata_adapters.frameworks.jax_sharding")
    import jax
    from jax.sharding import Mesh

    mesh = Mesh(np.array(jax.devices()), ("data",))
    datasets, documents = _sources(blend, picked)
    batch = blend.__getitems__(picked)
    arrays = jax_sharding.global_batch(batch, mesh, key_names=key_names)
    np.testing.assert_array_equal(np.asarray(arrays["dataset_ids"]), datasets)
    np.testing.assert_array_equal(np.asarray(arrays["document_ids"]), documents)
    assert arrays["document_ids"].dtype == np.int32
