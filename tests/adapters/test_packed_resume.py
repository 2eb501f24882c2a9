"""A packed, document-masked blend (best_fit, 2 corpora) through Grain with 2 workers and
a torch loader with 2 workers, each resumed at another worker count: the continuation is
identical, every key; torch gives Megatron-LM's dtypes for the document-masking keys."""

from __future__ import annotations

import numpy as np
import pytest
from adapter_helpers import deadline, write_corpus

import megadata_core as mdc
from megadata_core.samplers import RandomSampler

SEQ = 16
MASKING_KEYS = {"segment_ids", "cu_seqlens", "max_seqlen"}


@pytest.fixture(scope="module")
def packed_blend(tmp_path_factory):
    root = tmp_path_factory.mktemp("packed_blend")
    prefixes = [write_corpus(str(root / f"corpus{i}"), seed=10 + i) for i in range(2)]
    config = mdc.GPTDataConfig(
        random_seed=5,
        sequence_length=SEQ,
        blend=(prefixes, [0.4, 0.6]),
        split="100,0,0",
        path_to_cache=str(root / "cache"),
        eod_id=3,
        pad_id=0,
        packing="best_fit",
        document_masking=True,
    )
    train = mdc.build_datasets(config, [120, 0, 0])[0]
    assert MASKING_KEYS <= set(train[0])
    return train


def _equal(got: dict, want: dict) -> None:
    assert set(got) == set(want)
    for key in want:
        np.testing.assert_array_equal(np.asarray(got[key]), np.asarray(want[key]), err_msg=key)


@deadline(120)
def test_grain_two_workers_resumes_with_one(packed_blend):
    grain_source = pytest.importorskip("megadata_adapters.frameworks.grain_source")
    make = grain_source.batched_dataset
    reference = iter(make(packed_blend, micro_batch_size=4))
    expected = [next(reference) for _ in range(6)]
    it = iter(make(packed_blend, micro_batch_size=4, worker_count=2))
    try:
        for want in expected[:3]:
            _equal(next(it), want)
        state = it.get_state()
    finally:
        it.close()
    resumed = iter(make(packed_blend, micro_batch_size=4, worker_count=1))
    resumed.set_state(state)
    try:
        for want in expected[3:]:
            _equal(next(resumed), want)
    finally:
        resumed.close()


@deadline(120)
def test_torch_two_workers_resumes_with_one(packed_blend):
    torch = pytest.importorskip("torch")
    torch_data = pytest.importorskip("megadata_adapters.frameworks.torch_data")
    context = {"multiprocessing_context": "forkserver"}

    def sampler():
        return RandomSampler(len(packed_blend), 0, 4, 0, 1, seed=2)

    full = list(torch_data.loader(packed_blend, sampler()))
    first = full[0]
    assert first["cu_seqlens"].dtype == torch.int32 and first["cu_seqlens"].shape == (4, SEQ + 1)
    assert first["max_seqlen"].dtype == torch.int32 and first["max_seqlen"].shape == (4,)
    assert first["segment_ids"].dtype == torch.int32 and first["segment_ids"].shape == (4, SEQ)
    assert first["position_ids"].dtype == torch.long and first["loss_mask"].dtype == torch.float32
    steps = 3
    loader = torch_data.StatefulLoader(packed_blend, sampler(), num_workers=2, **context)
    with loader:
        for step, batch in enumerate(loader):
            _equal(batch, full[step])
            if step + 1 == steps:
                state = loader.state_dict()
                break
    resumed = sampler()
    resumed.load_state_dict(state)
    rest = list(torch_data.loader(packed_blend, resumed, num_workers=1, **context))
    assert len(rest) == len(full) - steps
    for got, want in zip(rest, full[steps:]):
        _equal(got, want)
