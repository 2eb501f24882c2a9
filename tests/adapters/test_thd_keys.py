"""The THD keys of ``packing_alignment`` through the adapters: Grain (Megatron and
MaxText key names), torch (int32 tensors) and JAX global arrays carry
``cu_seqlens_padded`` beside ``cu_seqlens``, value for value the core's."""

from __future__ import annotations

import numpy as np
import pytest
from adapter_helpers import deadline, write_corpus

import megadata_core as mdc

SEQ, CP = 16, 2
THD_KEYS = ("cu_seqlens", "cu_seqlens_padded", "max_seqlen", "segment_ids")


@pytest.fixture(scope="module")
def thd_dataset(tmp_path_factory):
    root = tmp_path_factory.mktemp("thd")
    prefix = write_corpus(str(root / "corpus"), seed=4)
    config = mdc.GPTDataConfig(
        random_seed=5, sequence_length=SEQ, blend=([prefix], None), split="100,0,0",
        path_to_cache=str(root / "cache"), eod_id=3, pad_id=0, packing="best_fit",
        document_masking=True, packing_alignment=2 * CP,
    )
    return mdc.build_datasets(config, [40, 0, 0])[0]


def _core(dataset, indices):
    return dataset.__getitems__(list(indices))


@deadline(120)
@pytest.mark.parametrize("key_names", ["megatron", "maxtext"])
def test_grain_batches_carry_cu_seqlens_padded(thd_dataset, key_names):
    grain_source = pytest.importorskip("megadata_adapters.frameworks.grain_source")
    batches = grain_source.batched_dataset(thd_dataset, micro_batch_size=4,
                                           key_names=key_names)
    batch = next(iter(batches))
    padded = np.asarray(batch["cu_seqlens_padded"])
    assert padded.dtype == np.int32 and padded.shape == (4, SEQ + 1)
    assert (np.diff(padded, axis=1) % (2 * CP) == 0).all()
    # the same samples as the core's, in the sampler's order: find them by their tokens
    core = _core(thd_dataset, range(len(thd_dataset)))
    tokens_key = "inputs" if key_names == "maxtext" else "tokens"
    for row in range(4):
        match = np.flatnonzero((core["tokens"] == np.asarray(batch[tokens_key])[row]).all(1))
        assert match.size
        for key in ("cu_seqlens", "cu_seqlens_padded", "max_seqlen"):
            np.testing.assert_array_equal(np.asarray(batch[key])[row], core[key][match[0]])


@deadline(120)
def test_torch_gives_int32_cu_seqlens_padded(thd_dataset):
    torch = pytest.importorskip("torch")
    torch_data = pytest.importorskip("megadata_adapters.frameworks.torch_data")
    sample = torch_data.TorchDataset(thd_dataset)[0]
    assert sample["cu_seqlens_padded"].dtype == torch.int32
    core = thd_dataset[0]
    for key in THD_KEYS:
        np.testing.assert_array_equal(sample[key].numpy(), core[key])
    from megadata_core.samplers import PretrainingSampler

    first = next(iter(torch_data.loader(thd_dataset, PretrainingSampler(len(thd_dataset), 0, 4,
                                                                        0, 1))))
    want = _core(thd_dataset, range(4))
    assert first["cu_seqlens_padded"].dtype == torch.int32
    assert first["cu_seqlens_padded"].shape == (4, SEQ + 1)
    for key in THD_KEYS:
        np.testing.assert_array_equal(first[key].numpy(), want[key])


@deadline(120)
def test_jax_global_batch_and_thd_slice(thd_dataset):
    pytest.importorskip("jax")
    from megadata_adapters.frameworks import jax_sharding

    batch = _core(thd_dataset, range(8))
    mesh = jax_sharding.data_mesh()
    out = jax_sharding.global_batch(batch, mesh)
    for key in THD_KEYS:
        np.testing.assert_array_equal(np.asarray(out[key]), batch[key])
    # each context-parallel rank's THD share, through JAX too
    for rank in range(CP):
        share = mdc.context_parallel_slice(batch, rank, CP, layout="thd")
        placed = jax_sharding.global_batch(share, mesh)
        assert placed["tokens"].shape == (8, SEQ // CP)
        np.testing.assert_array_equal(np.asarray(placed["cu_seqlens_padded"]),
                                      batch["cu_seqlens_padded"])
