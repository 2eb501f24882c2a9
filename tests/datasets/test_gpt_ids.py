"""GPTDataset's document ids: ranges in O(1), arrays checked for consecutiveness in one
cheap pass; either way the same cache key and the same indices."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from gpt_oracle import ours_dataset, write_corpus

import megadata_core as mdc
from megadata_core.cache import keys as cache_keys


@pytest.fixture(scope="module")
def prefix(tmp_path_factory):
    rng = np.random.default_rng(7)
    lengths = rng.integers(0, 60, 400)
    return write_corpus(str(tmp_path_factory.mktemp("corpus") / "c"), lengths, rng)


class _Sized:
    def __init__(self, count: int) -> None:
        self.count = count

    def __len__(self) -> int:
        return self.count


@pytest.mark.parametrize("chunk", [1, 3, 1 << 16])
def test_consecutive_ids_are_found_across_chunks(monkeypatch, chunk):
    monkeypatch.setattr(cache_keys, "_CHUNK", chunk)
    indexed = _Sized(100)
    for dtype in (np.int32, np.int64, np.uint32):
        ids, described = cache_keys.document_ids(indexed, np.arange(10, 90, dtype=dtype))
        assert described == {"count": 80, "range": [10, 90]} and ids.dtype == dtype
    # the right span but not consecutive: a swap, a repeat, a step back
    for ids in ([0, 2, 1, 3], [0, 1, 1, 3], [5, 4, 6, 8], [0, 3, 2, 3]):
        _, described = cache_keys.document_ids(indexed, np.array(ids))
        assert "range" not in described and "sha256" in described, ids
    _, described = cache_keys.document_ids(indexed, np.array([42]))
    assert described == {"count": 1, "range": [42, 43]}


def test_ranges_are_described_in_constant_time():
    indexed = _Sized(10**12)
    ids, described = cache_keys.document_ids(indexed, range(5, 10**12))
    assert ids == range(5, 10**12)
    assert described == {"count": 10**12 - 5, "range": [5, 10**12]}
    assert cache_keys.document_ids(indexed, range(3, 3)) == (range(3, 3), {"count": 0})
    ids, described = cache_keys.document_ids(_Sized(50), range(0, 20, 5))  # not step 1
    assert ids.tolist() == [0, 5, 10, 15] and "sha256" in described
    with pytest.raises(mdc.DataError, match=r"indices: document 100 is out of range"):
        cache_keys.document_ids(_Sized(100), range(50, 101))
    with pytest.raises(mdc.DataError, match=r"indices: document -1 is out of range"):
        cache_keys.document_ids(_Sized(100), range(-1, 10))


@pytest.mark.parametrize("shuffle", ["megatron", "feistel"])
def test_range_array_and_int64_ids_give_one_dataset(prefix, tmp_path, shuffle):
    kw = dict(eod=3, random_seed=9, sequence_length=16, shuffle=shuffle)
    built = {}
    for name, ids in {
        "range": range(20, 380),
        "int32": np.arange(20, 380, dtype=np.int32),
        "int64": np.arange(20, 380, dtype=np.int64),
    }.items():
        dataset = ours_dataset(prefix, 900, "train", indices=ids, **kw)
        built[name] = dataset
        assert dataset.description() == built["range"].description()
    reference = built["range"]
    for dataset in built.values():
        for name in ("document_index", "sample_index"):
            np.testing.assert_array_equal(getattr(dataset, name), getattr(reference, name))
        np.testing.assert_array_equal(
            dataset.__getitems__(np.arange(20))["tokens"],
            reference.__getitems__(np.arange(20))["tokens"],
        )
    cached = ours_dataset(
        prefix, 900, "train", indices=range(20, 380), path_to_cache=str(tmp_path), **kw
    )
    clone = pickle.loads(pickle.dumps(cached))
    assert clone.indices == range(20, 380) and len(clone) == len(reference)
    np.testing.assert_array_equal(
        clone.__getitems__([0, 7])["tokens"], reference.__getitems__([0, 7])["tokens"]
    )


def test_empty_range_with_zero_samples(prefix):
    dataset = ours_dataset(
        prefix, 0, "valid", eod=3, random_seed=1, sequence_length=8, indices=range(0)
    )
    assert len(dataset) == 0
