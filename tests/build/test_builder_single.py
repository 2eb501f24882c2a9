"""build_datasets without blending (a single prefix, per-split single prefixes, mock data)
against megatron-core's BlendedMegatronDatasetBuilder."""

from __future__ import annotations

import os

import numpy as np
import pytest
from builder_oracle import assert_same_split, megatron_build, ours_build, ours_config
from cache_helpers import entry_files
from gpt_oracle import write_corpus

import megadata_core as mdc
from megadata_core.build.builder import build_datasets
from megadata_core.datasets.mock import MockGPTLowLevelDataset


def _corpus(directory, name, rng, documents=120, longest=60):
    return write_corpus(os.path.join(directory, name), rng.integers(0, longest, documents), rng)


@pytest.mark.parametrize("case", range(12))
def test_single_prefix_matches_megatron(tmp_path, case):
    rng = np.random.default_rng(100 + case)
    split = ["969,30,1", "98,2", "0.9,0.1,0", "80,10,10", "1,1,1", "70/20/10"][case % 6]
    documents = 3500 if split == "969,30,1" else int(rng.integers(150, 300))
    prefix = _corpus(str(tmp_path), "c", rng, documents=documents, longest=40)
    sizes = [
        None if rng.random() < 0.3 else int(rng.integers(0, 400)) for _ in range(3)
    ]
    kw = dict(
        random_seed=int(rng.integers(0, 2**31)),
        sequence_length=int(rng.choice([8, 16, 31])),
        blend=([prefix], None),
        split=split,
        drop_last_partial_validation_sequence=bool(case % 2),
        add_extra_token_to_sequence=bool(case % 3),
    )
    theirs = megatron_build(sizes, **kw)
    ours = ours_build(sizes, **kw)
    for mine, reference in zip(ours, theirs):
        assert_same_split(reference, mine, rng)
    built = [dataset for dataset in ours if dataset is not None]
    assert all(dataset.indexed is built[0].indexed for dataset in built)  # opened once


def test_blend_per_split_single_prefixes(tmp_path):
    rng = np.random.default_rng(5)
    a, b = (_corpus(str(tmp_path), name, rng) for name in "ab")
    kw = dict(
        random_seed=9,
        sequence_length=16,
        blend_per_split=[([a], None), ([b], [3.0]), ([a], None)],
    )
    sizes = [300, 40, None]
    theirs = megatron_build(sizes, **kw)
    ours = ours_build(sizes, **kw)
    for mine, reference in zip(ours, theirs):
        assert_same_split(reference, mine, rng)
    assert ours[0].indexed is ours[2].indexed  # a prefix in two splits: opened once
    assert ours[0].split == "train" and ours[2].split == "test"
    # a missing split is None
    kw["blend_per_split"] = [([a], None), None, None]
    ours = ours_build([10, None, None], **kw)
    assert ours[1] is None and ours[2] is None and len(ours[0]) == len(
        megatron_build([10, None, None], **kw)[0])


def test_mock_matches_megatron():
    rng = np.random.default_rng(0)
    kw = dict(random_seed=3, sequence_length=512)
    sizes = [700, None, 50]
    theirs = megatron_build(sizes, mock=True, vocab_size=1000, **kw)
    ours = ours_build(sizes, mock=True, vocab_size=1000, **kw)
    for mine, reference in zip(ours, theirs):
        assert_same_split(reference, mine, rng, samples=4)


def test_mock_corpus_documents():
    corpus = MockGPTLowLevelDataset(vocab_size=7, eod_id=6, documents=50)
    assert len(corpus) == 50
    assert corpus.sequence_lengths.dtype == np.int32
    length = int(corpus.sequence_lengths[3])
    expected = np.append((np.arange(length - 1) + 1) % 7, 6)
    np.testing.assert_array_equal(corpus[3], expected)
    np.testing.assert_array_equal(corpus.get(3, 2, 4), expected[2:6])
    stream = corpus.read_bytes(int(corpus.sequence_pointers[2]), int(corpus.sequence_lengths[2:4]
                                                                     .sum()))
    np.testing.assert_array_equal(stream, np.concatenate([corpus[2], corpus[3]]))
    import pickle

    again = pickle.loads(pickle.dumps(corpus))
    np.testing.assert_array_equal(again.sequence_lengths, corpus.sequence_lengths)


def test_cache_round_trip(tmp_path):
    rng = np.random.default_rng(8)
    prefix = _corpus(str(tmp_path), "c", rng)
    cache = str(tmp_path / "cache")
    config = ours_config(random_seed=1, sequence_length=16, blend=([prefix], None),
                         split="90,10", path_to_cache=cache)
    build_datasets(config, [100, None, None])
    assert not os.path.exists(cache)  # small indices are rebuilt in memory, never cached
    first = build_datasets(config, [100, None, None], in_memory_below=0)
    assert os.listdir(cache)
    files = entry_files(cache)
    second = build_datasets(config, [100, None, None], in_memory_below=0)
    assert entry_files(cache) == files  # nothing rebuilt
    assert second[2] is None
    in_memory = build_datasets(config, [100, None, None])
    for mine, reference, fresh in zip(second[:2], first[:2], in_memory):
        assert fresh.config.path_to_cache is None and mine.config.path_to_cache == cache
        np.testing.assert_array_equal(fresh.shuffle_index, reference.shuffle_index)
        np.testing.assert_array_equal(mine.shuffle_index, reference.shuffle_index)
        np.testing.assert_array_equal(mine.sample_index, reference.sample_index)


def test_serial_and_threaded_agree(tmp_path):
    rng = np.random.default_rng(4)
    prefixes = [_corpus(str(tmp_path), name, rng) for name in "abcd"]
    config = ours_config(random_seed=1, sequence_length=16, blend=(prefixes, None),
                         split="8,1,1", path_to_cache=str(tmp_path / "cache"))
    serial = build_datasets(config, [50, 5, 5], max_workers=1)  # small: in memory
    threaded = build_datasets(config, [50, 5, 5], max_workers=4, in_memory_below=0)
    cached = build_datasets(config, [50, 5, 5], in_memory_below=0)  # cache hits
    for one, other, again in zip(serial, threaded, cached):
        for a, b, c in zip(one.datasets, other.datasets, again.datasets):
            assert a.config.path_to_cache is None and b.config.path_to_cache is not None
            np.testing.assert_array_equal(a.shuffle_index, b.shuffle_index)
            np.testing.assert_array_equal(a.sample_index, c.sample_index)
        np.testing.assert_array_equal(one.dataset_index, other.dataset_index)


def test_split_string_is_ignored_for_mock_with_a_warning():
    config = mdc.GPTDataConfig(random_seed=1, sequence_length=64, eod_id=0, split="98,2")
    with pytest.warns(UserWarning, match="ignored for mock"):
        ours = build_datasets(config, [0, 0, 0], mock=True, vocab_size=100)
    assert [len(d.indices) for d in ours] == [33333, 33334, 33333]


def test_built_datasets_pickle(tmp_path):
    """Loader workers get pickled datasets: blends, members and the mock corpus travel."""
    import pickle

    rng = np.random.default_rng(12)
    prefixes = [_corpus(str(tmp_path), name, rng) for name in "ab"]
    config = ours_config(random_seed=1, sequence_length=16, blend=(prefixes, [1, 3]),
                         split="9,1", path_to_cache=str(tmp_path / "cache"))
    train = build_datasets(config, [80, 8, None])[0]
    mock = build_datasets(mdc.GPTDataConfig(random_seed=1, sequence_length=64, eod_id=0),
                          [10, 0, 0], mock=True, vocab_size=100)[0]
    for dataset in (train, mock):
        again = pickle.loads(pickle.dumps(dataset))
        assert len(again) == len(dataset)
        for key, value in dataset[3].items():
            np.testing.assert_array_equal(again[3][key], value)
