"""__getitems__, byte sources, pickling, the cache through GPTDataset, Feistel mode."""

from __future__ import annotations

import os
import pickle

import numpy as np
import pytest
from gpt_oracle import ours_dataset, write_corpus
from hypothesis import given, settings
from hypothesis import strategies as st

import megadata_core as mdc
from megadata_core.datasets import reading
from megadata_core.indices import sample_index
from megadata_core.modes import megatron_shuffle
from megadata_core.modes.concat import locate_pieces

FLAGS = dict(reset_position_ids=True, reset_attention_mask=True, eod_mask_loss=True)


@pytest.fixture(scope="module")
def prefix(tmp_path_factory):
    rng = np.random.default_rng(42)
    lengths = np.concatenate([rng.integers(0, 40, 300), rng.integers(300, 1200, 30)])
    rng.shuffle(lengths)
    return write_corpus(str(tmp_path_factory.mktemp("corpus") / "c"), lengths, rng)


def _stream_samples(dataset) -> np.ndarray:
    """Independent reference: concatenate the documents in document-index order; sample
    j is tokens [j*S, j*S + S + extra) of that stream (pad_id past its end)."""
    indexed, config = dataset.indexed, dataset.config
    stream = np.concatenate([indexed[int(doc)] for doc in dataset.document_index])
    stream = stream.astype(np.int64)
    extra = int(config.add_extra_token_to_sequence)
    width = config.sequence_length + extra
    out = np.full((len(dataset), width), dataset.pad_id, dtype=np.int64)
    for row in range(len(dataset)):
        piece = stream[row * config.sequence_length : row * config.sequence_length + width]
        out[row, : len(piece)] = piece
    return out


@pytest.mark.parametrize("shuffle", ["megatron", "feistel"])
@pytest.mark.parametrize("mmap", [True, False])
def test_samples_are_windows_of_the_document_stream(prefix, shuffle, mmap):
    dataset = ours_dataset(
        prefix,
        None,
        "valid",
        eod=3,
        mmap=mmap,
        random_seed=7,
        sequence_length=64,
        drop_last_partial_validation_sequence=False,
        shuffle=shuffle,
        create_attention_mask=False,
    )
    expected = _stream_samples(dataset)
    order = np.asarray(dataset.shuffle_index[np.arange(len(dataset))], dtype=np.int64)
    assert sorted(order.tolist()) == list(range(len(dataset)))
    batch = dataset.__getitems__(np.arange(len(dataset)))
    text = np.concatenate([batch["tokens"], batch["labels"][:, -1:]], axis=1)
    padded = expected[order] == dataset.pad_id
    np.testing.assert_array_equal(text, np.where(padded, 0, expected[order]))
    assert padded[:, -1].any()  # the partial last sample is there


def test_getitems_equals_stacked_getitem_for_any_order(prefix):
    dataset = ours_dataset(prefix, 500, "train", eod=3, random_seed=1, sequence_length=32, **FLAGS)
    picks = np.random.default_rng(0).integers(0, len(dataset), 50)
    picks[:3] = picks[3]  # duplicates
    batch = dataset.__getitems__(picks.tolist())
    for position, index in enumerate(picks):
        for key, value in dataset[int(index)].items():
            np.testing.assert_array_equal(batch[key][position], value, err_msg=key)
    assert batch["tokens"].dtype == np.int32 and not batch["tokens"].flags.writeable
    assert batch["attention_mask"].shape == (50, 1, 32, 32)


def test_pread_and_int64_give_the_same_values(prefix):
    kw = dict(eod=3, random_seed=3, sequence_length=48, **FLAGS)
    mapped = ours_dataset(prefix, 300, "train", **kw)
    pread = ours_dataset(prefix, 300, "train", mmap=False, **kw)
    wide = mdc.GPTDataset(
        mapped.indexed, np.arange(len(mapped.indexed)), 300, mapped.config, token_dtype=np.int64
    )
    picks = np.arange(len(mapped))[::-1]
    a, b, c = (ds.__getitems__(picks) for ds in (mapped, pread, wide))
    for key in a:
        np.testing.assert_array_equal(a[key], b[key])
        np.testing.assert_array_equal(a[key], c[key])
    assert c["tokens"].dtype == np.int64 and c["position_ids"].dtype == np.int64


def test_padding_sample(prefix):
    dataset = ours_dataset(prefix, 10, "train", eod=3, random_seed=3, sequence_length=16)
    padding = dataset[None]
    assert not padding["loss_mask"].any()
    np.testing.assert_array_equal(padding["tokens"], dataset[0]["tokens"])


def test_pickle_keeps_memory_maps_small(prefix, tmp_path):
    config = dict(eod=3, random_seed=5, sequence_length=16, path_to_cache=str(tmp_path))
    dataset = ours_dataset(prefix, 20_000, "train", **config)
    assert isinstance(dataset._arrays["document_index"], np.memmap)
    payload = pickle.dumps(dataset)
    assert len(payload) < dataset.document_index.nbytes
    clone = pickle.loads(payload)
    for key, value in dataset.__getitems__([0, 5, 9]).items():
        np.testing.assert_array_equal(clone.__getitems__([0, 5, 9])[key], value)


def test_cache_hit_skips_building(prefix, tmp_path, monkeypatch):
    kw = dict(eod=3, random_seed=5, sequence_length=16, path_to_cache=str(tmp_path))
    first = ours_dataset(prefix, 1000, "train", **kw)

    def refuse(*args, **kwargs):
        raise AssertionError("rebuilt on a cache hit")

    monkeypatch.setattr(megatron_shuffle, "gpt_indices", refuse)
    again = ours_dataset(prefix, 1000, "train", **kw)
    np.testing.assert_array_equal(again.shuffle_index, first.shuffle_index)
    for changed in (dict(add_extra_token_to_sequence=False), dict(sequence_length=17)):
        with pytest.raises(AssertionError, match="rebuilt"):
            ours_dataset(prefix, 1000, "train", **{**kw, **changed})
    with pytest.raises(AssertionError, match="rebuilt"):
        ours_dataset(prefix, 1000, "valid", **kw)


def test_cache_key_follows_the_data_not_the_path(tmp_path):
    """Megatron keys on the path: rewriting a corpus in place serves stale indices."""
    rng = np.random.default_rng(0)
    prefix = str(tmp_path / "corpus")
    kw = dict(eod=3, random_seed=5, sequence_length=8, path_to_cache=str(tmp_path / "cache"))
    write_corpus(prefix, rng.integers(1, 30, 50), rng)
    before = ours_dataset(prefix, 100, "train", **kw)
    before_samples = np.array(before.sample_index)
    del before
    for name in os.listdir(tmp_path):
        if name.startswith("corpus."):
            os.unlink(tmp_path / name)
    write_corpus(prefix, rng.integers(1, 30, 50), rng)
    after = ours_dataset(prefix, 100, "train", **kw)
    fresh = ours_dataset(prefix, 100, "train", **{**kw, "path_to_cache": None})
    np.testing.assert_array_equal(after.sample_index, fresh.sample_index)
    assert not np.array_equal(before_samples, fresh.sample_index)
    assert len({name.split("-")[0] for name in os.listdir(tmp_path / "cache")}) == 2


@settings(max_examples=40, deadline=None)
@given(
    lengths=st.lists(st.sampled_from([0, 1, 2, 5, 31, 32, 33, 255, 256, 257, 700]), max_size=12),
    seed=st.integers(0, 1000),
)
def test_copy_ranges_matches_slices(lengths, seed):
    rng = np.random.default_rng(seed)
    source = rng.integers(0, 60000, 5000).astype(np.uint16)
    length = np.array(lengths, dtype=np.int64)
    source_start = rng.integers(0, len(source) - 700, len(length)).astype(np.int64)
    out_start = np.cumsum(length) - length
    out = np.full(int(length.sum()) + 3, -1, dtype=np.int32)
    reading.copy_ranges(source, source_start, out, out_start, length)
    expected = np.full_like(out, -1)
    for s, o, n in zip(source_start, out_start, length):
        expected[o : o + n] = source[s : s + n]
    np.testing.assert_array_equal(out, expected)


def test_feistel_order_with_separate_final_epoch(prefix):
    kw = dict(eod=3, random_seed=11, sequence_length=64, shuffle="feistel")
    one_epoch = len(ours_dataset(prefix, None, "train", **kw))
    dataset = ours_dataset(prefix, 2 * one_epoch + 3, "train", **kw)
    order = dataset.shuffle_index
    first = order.first
    assert 2 * one_epoch <= first < len(dataset)  # the final epoch is shuffled apart
    values = order[np.arange(len(dataset))]
    assert sorted(values[:first].tolist()) == list(range(first))
    assert sorted(values[first:].tolist()) == list(range(first, len(dataset)))
    megatron_order = ours_dataset(
        prefix, 2 * one_epoch + 3, "train", **{**kw, "shuffle": "megatron"}
    )
    assert len(megatron_order) == len(dataset)


class _UnalignedCorpus:
    """A byte source whose documents start at odd byte offsets (no writer makes one)."""

    dtype = np.dtype(np.uint16)

    def __init__(self, documents):
        self.raw = b"\x00" + b"".join(doc.astype("<u2").tobytes() for doc in documents)
        lengths = [len(doc) for doc in documents]
        self.sequence_lengths = np.array(lengths, dtype=np.int32)
        self.sequence_pointers = 1 + 2 * (np.cumsum(lengths) - lengths)

    def read_bytes(self, offset, count):
        return np.frombuffer(self.raw, dtype=self.dtype, count=count, offset=offset)


def test_unaligned_pointers_read_piece_by_piece():
    documents = [np.arange(n, dtype=np.uint16) + 100 * i for i, n in enumerate([5, 1, 7, 3])]
    corpus = _UnalignedCorpus(documents)
    document_index = np.array([2, 0, 3, 1], dtype=np.int32)
    samples = sample_index(corpus.sequence_lengths, document_index, 4, 1, 16)
    np.testing.assert_array_equal(samples, [[0, 0], [0, 4], [1, 1], [2, 0]])
    pieces = locate_pieces(
        samples, document_index, corpus.sequence_lengths, np.array([2, 0, 1]), 1
    )
    text, padded = reading.gather_tokens(corpus, pieces, 5, -1, np.int32)
    stream = np.concatenate([documents[i] for i in document_index])
    assert not padded
    np.testing.assert_array_equal(text, [stream[4 * j : 4 * j + 5] for j in (2, 0, 1)])


def test_held_batches_are_never_overwritten(prefix):
    dataset = ours_dataset(prefix, None, "train", eod=3, random_seed=1, sequence_length=32)
    rng = np.random.default_rng(0)
    held = []
    for _ in range(12):  # more batches than the pool keeps per shape
        indices = rng.integers(0, len(dataset), 8)
        batch = dataset.__getitems__(indices)
        held.append((indices, {key: value.copy() for key, value in batch.items()}, batch))
    for indices, snapshot, batch in held:
        for key, value in batch.items():
            np.testing.assert_array_equal(value, snapshot[key], err_msg=key)
        fresh = dataset.__getitems__(indices)
        for key in snapshot:
            np.testing.assert_array_equal(fresh[key], snapshot[key], err_msg=key)


def test_dropped_batches_are_reused(prefix):
    dataset = ours_dataset(prefix, None, "train", eod=3, random_seed=1, sequence_length=32)
    first = dataset.__getitems__([0, 1, 2])["tokens"]
    address = first.__array_interface__["data"][0]
    del first
    again = dataset.__getitems__([3, 4, 5])["tokens"]
    assert again.__array_interface__["data"][0] == address
    view = again[1:]
    del again
    other = dataset.__getitems__([0, 1, 2])["tokens"]
    assert other.__array_interface__["data"][0] != address  # a view still holds it
    del view, other


def test_constant_arrays_are_shared_and_read_only(prefix):
    dataset = ours_dataset(
        prefix,
        None,
        "train",
        eod=3,
        random_seed=1,
        sequence_length=16,
        reset_position_ids=False,
        reset_attention_mask=False,
        eod_mask_loss=False,
        create_attention_mask=False,
    )
    one, two = dataset.__getitems__([0, 1]), dataset.__getitems__([2, 3])
    assert one["position_ids"] is two["position_ids"]
    assert not one["position_ids"].flags.writeable and not one["loss_mask"].flags.writeable
    np.testing.assert_array_equal(one["position_ids"], np.tile(np.arange(16), (2, 1)))
    np.testing.assert_array_equal(one["loss_mask"], np.ones((2, 16)))
    np.testing.assert_array_equal(one["tokens"][:, 1:], one["labels"][:, :-1])
    single = dataset[0]
    assert all(value.flags.writeable for value in single.values())


def test_feistel_mode_stores_no_document_or_shuffle_index(prefix, tmp_path):
    dataset = ours_dataset(
        prefix,
        300,
        "train",
        eod=3,
        random_seed=2,
        sequence_length=16,
        shuffle="feistel",
        path_to_cache=str(tmp_path),
    )
    stored = sorted(name for name in os.listdir(tmp_path) if name.endswith(".npy"))
    assert stored and all("sample_index" in name or "feistel_split" in name for name in stored)
    clone = pickle.loads(pickle.dumps(dataset))
    batch = clone.__getitems__(np.arange(len(clone)))
    for position in (0, len(dataset) // 2, len(dataset) - 1):
        np.testing.assert_array_equal(batch["tokens"][position], dataset[position]["tokens"])
