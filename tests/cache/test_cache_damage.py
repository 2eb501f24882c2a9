"""A damaged index cache never serves wrong samples: damage anywhere in a cached array is
found before the first sample is read (rebuilt with a warning, or a DataError naming the
file where the cache cannot be written)."""

from __future__ import annotations

import glob
import os
import pickle
import warnings

import numpy as np
import pytest
from cache_helpers import dataset, flip_middle, make_corpus

import megadata_core as mdc
from megadata_core.cache import entries as cache
from megadata_core.cache import keys as hashing
from megadata_core.datasets import gpt_arrays


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> str:
    return make_corpus(tmp_path_factory.mktemp("corpus"))











def _assert_same_samples(dataset, expected) -> None:
    for name in ("document_index", "sample_index", "shuffle_index"):
        np.testing.assert_array_equal(getattr(dataset, name), getattr(expected, name))
    positions = np.arange(0, len(expected), 97)
    batch, other = dataset.__getitems__(positions), expected.__getitems__(positions)
    for key, value in other.items():
        np.testing.assert_array_equal(batch[key], value)


@pytest.mark.parametrize("name", ["document_index", "sample_index", "shuffle_index"])
def test_bytes_flipped_in_the_middle_of_a_cached_array_are_found(corpus, tmp_path, name):
    cache_dir = str(tmp_path / "cache")
    dataset(corpus, cache_dir)
    (path,) = glob.glob(os.path.join(cache_dir, f"*-train-{name}.npy"))
    assert os.path.getsize(path) > hashing.SAMPLE_CHUNKS * hashing.SAMPLE_CHUNK_BYTES
    flip_middle(path)
    with pytest.warns(UserWarning, match=f"{os.path.basename(path)}.*rebuilding"):
        repaired = dataset(corpus, cache_dir)
    _assert_same_samples(repaired, dataset(corpus, None))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # rebuilt on disk: a quiet hit
        _assert_same_samples(dataset(corpus, cache_dir), dataset(corpus, None))


@pytest.mark.parametrize("how", ["read_only", "writes_fail"])
def test_damage_in_a_read_only_cache_is_a_data_error_naming_the_file(
    corpus, tmp_path, monkeypatch, how
):
    cache_dir = str(tmp_path / "cache")
    dataset(corpus, cache_dir)
    (path,) = glob.glob(os.path.join(cache_dir, "*-train-document_index.npy"))
    flip_middle(path)

    def refuse(target, write):
        raise PermissionError(13, "Permission denied", target)

    if how == "read_only":  # seen before building: no warning, no build
        real_access = os.access
        monkeypatch.setattr(
            os, "access", lambda p, mode: mode != os.W_OK and real_access(p, mode)
        )
        monkeypatch.setattr(gpt_arrays, "build_arrays", pytest.fail)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            with pytest.raises(mdc.DataError, match=os.path.basename(path)):
                dataset(corpus, cache_dir)
    else:  # a directory that looks writable (e.g. to root) but refuses the rebuild
        monkeypatch.setattr(cache, "write_atomically", refuse)
        with pytest.warns(UserWarning, match="rebuilding"):
            with pytest.raises(mdc.DataError, match=os.path.basename(path)):
                dataset(corpus, cache_dir)


def test_a_worker_never_maps_a_cache_file_changed_after_the_check(tmp_path):
    """Pickled to a worker, a dataset reopens its cache files by name: one written since
    the sending process checked it is refused, not served."""
    prefix = make_corpus(tmp_path)
    cache = str(tmp_path / "cache")
    dataset(prefix, cache)
    checked = dataset(prefix, cache)  # a cache hit: memory-mapped, every byte checked
    shipped = pickle.dumps(checked)
    np.testing.assert_array_equal(pickle.loads(shipped)[5]["tokens"], checked[5]["tokens"])
    shuffle = next(name for name in os.listdir(cache) if name.endswith("shuffle_index.npy"))
    flip_middle(os.path.join(cache, shuffle))
    with pytest.raises(mdc.DataError, match="shuffle_index.npy: cache file changed after"):
        pickle.loads(shipped)
