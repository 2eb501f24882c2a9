"""context_parallel_slice: Megatron's zig-zag split of the sequence axis."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import megadata_core as mdc
from megadata_core.datasets.context_parallel import context_parallel_positions


def _batch(b=2, s=24, seed=0):
    rng = np.random.default_rng(seed)
    return {
        "tokens": rng.integers(0, 50000, (b, s), dtype=np.int32),
        "labels": rng.integers(0, 50000, (b, s), dtype=np.int64),
        "loss_mask": rng.random((b, s), dtype=np.float32),
        "position_ids": np.tile(np.arange(s), (b, 1)),
        "attention_mask": rng.random((b, 1, s, s)) < 0.5,
    }


def _reference(batch, cp_rank, cp_size):
    """Literal numpy transcription of megatron.core.utils.get_batch_on_this_cp_rank."""
    out = dict(batch)
    for key, val in batch.items():
        if val is not None:
            seq_dim = 1 if key != "attention_mask" else 2
            val = val.reshape(
                *val.shape[0:seq_dim],
                2 * cp_size,
                val.shape[seq_dim] // (2 * cp_size),
                *val.shape[(seq_dim + 1) :],
            )
            index = np.array([cp_rank, 2 * cp_size - cp_rank - 1])
            val = np.take(val, index, axis=seq_dim)
            val = val.reshape(*val.shape[0:seq_dim], -1, *val.shape[(seq_dim + 2) :])
            out[key] = val
    return out


@pytest.mark.parametrize("cp_size", [2, 3, 4, 6, 12])
def test_matches_reference(cp_size):
    batch = _batch()
    for rank in range(cp_size):
        got = mdc.context_parallel_slice(batch, rank, cp_size)
        want = _reference(batch, rank, cp_size)
        assert got.keys() == want.keys()
        for key in want:
            assert got[key].dtype == batch[key].dtype
            np.testing.assert_array_equal(got[key], want[key])
        assert got["tokens"].shape == (2, 24 // cp_size)
        assert got["attention_mask"].shape == (2, 1, 24 // cp_size, 24)


@pytest.mark.parametrize("cp_size", [1, 2, 3, 4])
def test_reassembling_the_ranks_recovers_the_batch(cp_size):
    batch = _batch(s=48)
    chunks = 2 * cp_size
    for key, value in batch.items():
        axis = 2 if key == "attention_mask" else 1
        pieces = [None] * chunks
        for rank in range(cp_size):
            part = mdc.context_parallel_slice(batch, rank, cp_size)[key]
            first, second = np.split(part, 2, axis=axis)
            pieces[rank], pieces[chunks - 1 - rank] = first, second
        np.testing.assert_array_equal(np.concatenate(pieces, axis=axis), value)


def test_positions_zigzag():
    assert context_parallel_positions(8, 0, 2).tolist() == [0, 1, 6, 7]
    assert context_parallel_positions(8, 1, 2).tolist() == [2, 3, 4, 5]
    every = np.concatenate([context_parallel_positions(24, r, 3) for r in range(3)])
    assert sorted(every.tolist()) == list(range(24))


def test_cp_size_one_returns_batch_unchanged():
    batch = _batch()
    assert mdc.context_parallel_slice(batch, 0, 1) is batch


def test_none_passes_through_and_input_untouched():
    batch = {"tokens": np.arange(8).reshape(1, 8), "attention_mask": None}
    out = mdc.context_parallel_slice(batch, 1, 2)
    assert out["attention_mask"] is None
    assert out["tokens"].tolist() == [[2, 3, 4, 5]]
    assert batch["tokens"].shape == (1, 8)


@pytest.mark.parametrize(
    ("batch", "rank", "size", "field"),
    [
        ({"tokens": np.zeros((2, 10))}, 0, 2, "tokens"),  # 10 % 4
        ({"attention_mask": np.zeros((2, 1, 6, 8))}, 0, 2, "attention_mask"),
        ({"tokens": np.zeros(8)}, 0, 2, "tokens"),  # no sequence axis
        ({"tokens": np.zeros((2, 8))}, 2, 2, "cp_rank"),
        ({"tokens": np.zeros((2, 8))}, -1, 2, "cp_rank"),
        ({"tokens": np.zeros((2, 8))}, 0, 0, "cp_size"),
        ({"tokens": np.zeros((2, 8))}, 0, 1.0, "cp_size"),
        ([np.zeros((2, 8))], 0, 2, "batch"),
    ],
)
def test_bad_input(batch, rank, size, field):
    with pytest.raises(mdc.DataError, match=field):
        mdc.context_parallel_slice(batch, rank, size)


@pytest.mark.parametrize("cp_size", [2, 4])
def test_matches_megatron_core(monkeypatch, cp_size):
    torch = pytest.importorskip("torch")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mcore_utils = pytest.importorskip("megatron.core.utils")
    batch = _batch(s=32)
    for rank in range(cp_size):
        state = mcore_utils.parallel_state
        monkeypatch.setattr(state, "get_context_parallel_world_size", lambda: cp_size)
        monkeypatch.setattr(state, "get_context_parallel_rank", lambda r=rank: r)
        want = mcore_utils.get_batch_on_this_cp_rank(
            {k: torch.from_numpy(v.copy()) for k, v in batch.items()}
        )
        got = mdc.context_parallel_slice(batch, rank, cp_size)
        for key in batch:
            np.testing.assert_array_equal(got[key], want[key].numpy())


def test_per_sample_keys_pass_through():
    """A blend's batch carries dataset_id [B]; [B] arrays and scalars are not cut."""
    batch = _batch(b=3, s=8)
    batch["dataset_id"] = np.array([0, 2, 1], dtype=np.int16)
    batch["weight"] = np.float32(0.5)
    out = mdc.context_parallel_slice(batch, 1, 2)
    assert out["dataset_id"] is batch["dataset_id"]
    assert out["weight"] is batch["weight"]
    assert out["tokens"].shape == (3, 4)


def test_blended_batch_slices(tmp_path):
    """The case reported: a BlendedDataset batch through context_parallel_slice."""
    prefixes = []
    for k in range(2):
        prefix = str(tmp_path / f"corpus{k}")
        with mdc.IndexedDatasetWriter(prefix, np.uint16) as writer:
            writer.add_document(np.arange(200) % 50, [200])
        prefixes.append(prefix)
    config = mdc.GPTDataConfig(
        random_seed=1, sequence_length=8, eod_id=0, split="1,0,0",
        blend=(prefixes, [0.5, 0.5]),
    )
    train, _, _ = mdc.build_datasets(config, [16, None, None])
    batch = train.__getitems__([0, 1, 2, 3])
    assert batch["dataset_id"].shape == (4,)
    out = mdc.context_parallel_slice(batch, 0, 2)
    np.testing.assert_array_equal(out["dataset_id"], batch["dataset_id"])
    np.testing.assert_array_equal(out["tokens"], batch["tokens"][:, [0, 1, 6, 7]])
