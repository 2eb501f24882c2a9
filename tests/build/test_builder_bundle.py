"""The build bundle: one cache entry for a whole build with a blend (every small member's
indices and every blend's), loaded on a hit without building or validating anything.

Cold and warm builds equal megatron-core's and the in-memory build; the key follows the
corpus content (not the path), damaged bundles are rebuilt with a warning, a read-only
cache directory still builds, bad corpora still raise DataError naming the field."""

from __future__ import annotations

import glob
import multiprocessing
import os
import shutil
import warnings

import numpy as np
import pytest
from builder_oracle import assert_same_split, megatron_build, ours_config
from gpt_oracle import write_corpus

import megadata_core as mdc
from megadata_core.build import builder, bundle
from megadata_core.build.builder import build_datasets
from megadata_core.cache import npy_files as packed_arrays
from megadata_core.datasets import gpt_arrays
from megadata_core.format import reader


def _bundle_files(cache: str) -> list[str]:
    return [name for name in _cache_files(cache) if "-bundle-" in name]


def _cache_files(cache: str) -> list[str]:
    """The entries' files (not the verified-files lists a later hit may write)."""
    return sorted(name for name in glob.glob(os.path.join(cache, "*"))
                  if not name.endswith("-verified.json"))


def _corpora(directory, rng, count=4) -> list[str]:
    return [
        write_corpus(os.path.join(directory, f"corpus{number}"),
                     rng.integers(0, 50, int(rng.integers(150, 300))), rng)
        for number in range(count)
    ]


def _config(prefixes, cache, weights=(1.0, 2.0, 3.0, 4.0), **kw):
    kw.setdefault("random_seed", 5)
    kw.setdefault("sequence_length", 16)
    kw.setdefault("split", "90,8,2")
    return ours_config(blend=(list(prefixes), None if weights is None else list(weights)),
                       path_to_cache=cache, **kw)


def _assert_same(first, second) -> None:
    """Two builds: same kinds, lengths, member and blend indices."""
    for one, other in zip(first, second):
        assert (one is None) == (other is None)
        if one is None:
            continue
        assert type(one) is type(other) and len(one) == len(other)
        if isinstance(one, mdc.BlendedDataset):
            np.testing.assert_array_equal(one.dataset_index, other.dataset_index)
            np.testing.assert_array_equal(one.dataset_sample_index, other.dataset_sample_index)
            members = zip(one.datasets, other.datasets)
        else:
            members = [(one, other)]
        for a, b in members:
            assert len(a) == len(b) and a.split == b.split
            for name in ("document_index", "sample_index", "shuffle_index"):
                x, y = getattr(a, name), getattr(b, name)
                if isinstance(x, np.ndarray):
                    assert x.dtype == y.dtype
                    np.testing.assert_array_equal(x, y)
            if len(a):
                for key, value in a.__getitems__([0, len(a) - 1]).items():
                    np.testing.assert_array_equal(value, b.__getitems__([0, len(b) - 1])[key])


@pytest.fixture()
def corpora(tmp_path):
    return _corpora(str(tmp_path), np.random.default_rng(31))


def test_warm_build_loads_the_bundle_and_builds_nothing(corpora, tmp_path, monkeypatch):
    cache = str(tmp_path / "cache")
    config = _config(corpora, cache)
    cold = build_datasets(config, [400, 40, 10])
    files = {name: os.stat(name).st_mtime_ns for name in _cache_files(cache)}
    assert _bundle_files(cache)
    in_memory = build_datasets(_config(corpora, None), [400, 40, 10])

    def no_build(*args, **kwargs):
        raise AssertionError("a cache hit built an index")

    monkeypatch.setattr(gpt_arrays, "build_arrays", no_build)
    monkeypatch.setattr(mdc.BlendedDataset, "_build", no_build)
    monkeypatch.setattr(mdc.format.idx_layout, "validate_arrays", no_build)
    calls = []
    warm = build_datasets(config, [400, 40, 10], progress=calls.append)
    assert len(calls) == sum(len(split.datasets) for split in warm if split is not None)
    assert {name: os.stat(name).st_mtime_ns for name in _cache_files(cache)} \
        == files  # nothing rewritten
    _assert_same(cold, warm)
    _assert_same(in_memory, warm)
    for split in warm:
        assert split.config.path_to_cache == cache
        for member in split.datasets:  # small members: built in memory, as on a miss
            assert member.config.path_to_cache is None
            assert not member.indexed.validated  # the bundle vouches for the bytes


def test_warm_corpora_still_read_and_pickle(corpora, tmp_path):
    import pickle

    cache = str(tmp_path / "cache")
    build_datasets(_config(corpora, cache), [300, 30, 10])
    train = build_datasets(_config(corpora, cache), [300, 30, 10])[0]
    again = pickle.loads(pickle.dumps(train))
    batch, other = train.__getitems__(range(0, len(train), 7)), again.__getitems__(
        range(0, len(train), 7))
    for key, value in batch.items():
        np.testing.assert_array_equal(value, other[key])
    corpus = train.datasets[0].indexed
    np.testing.assert_array_equal(corpus[1], mdc.IndexedDataset(corpus.path_prefix)[1])


@pytest.mark.parametrize("case", range(8))
def test_cold_and_warm_bundles_match_megatron(tmp_path, case, monkeypatch):
    if case % 3 == 1:  # blends through their own cache entries, beside the bundle
        monkeypatch.setattr(bundle, "BUNDLE_BLEND_BELOW", 50)
    rng = np.random.default_rng(900 + case)
    prefixes = _corpora(str(tmp_path), rng, count=int(rng.integers(2, 5)))
    if case % 4 == 3:
        blends = [(prefixes, None), (prefixes[:2], [0.4, 0.6]), None]
        kw = {"blend_per_split": blends}
        sizes = [None, 60, None]
    else:
        weights = None if case % 4 == 2 else (rng.random(len(prefixes)) + 0.1).tolist()
        kw = {"blend": (prefixes, weights), "split": ["90,8,2", "98,2", "80,20"][case % 3]}
        sizes = [int(rng.integers(50, 500)), int(rng.integers(0, 40)), 5]
        if weights is None and case % 2:
            sizes = [None, None, None]
    kw.update(
        random_seed=int(rng.integers(0, 2**31)),
        sequence_length=int(rng.choice([8, 16])),
        mid_level_dataset_surplus=0.5,
        drop_last_partial_validation_sequence=bool(case % 2),
        add_extra_token_to_sequence=bool(case % 3),
    )
    theirs = megatron_build(sizes, **kw)
    cache = str(tmp_path / "cache")
    below = [builder.IN_MEMORY_BELOW, 40][case % 2]  # some members through their own entries
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cold = build_datasets(ours_config(path_to_cache=cache, **kw), sizes,
                              in_memory_below=below)
        warm = build_datasets(ours_config(path_to_cache=cache, **kw), sizes,
                              in_memory_below=below)
    assert _bundle_files(cache)
    for mine, again, reference in zip(cold, warm, theirs):
        assert_same_split(reference, mine, rng)
        assert_same_split(reference, again, rng)
    _assert_same(cold, warm)


def test_feistel_bundle_round_trip(corpora, tmp_path):
    cache = str(tmp_path / "cache")
    config = _config(corpora, cache, shuffle="feistel")
    cold = build_datasets(config, [300, 30, 10])
    warm = build_datasets(config, [300, 30, 10])
    _assert_same(cold, warm)
    for a, b in zip(cold[0].datasets, warm[0].datasets):
        positions = np.arange(len(a))
        np.testing.assert_array_equal(a.shuffle_index[positions], b.shuffle_index[positions])


def test_the_key_follows_the_content_not_the_path(corpora, tmp_path):
    cache = str(tmp_path / "cache")
    build_datasets(_config(corpora, cache), [300, 30, 10])
    moved = str(tmp_path / "moved")
    os.makedirs(moved)
    copies = []
    for prefix in corpora:
        for suffix in (".bin", ".idx"):
            shutil.copy(prefix + suffix, os.path.join(moved, os.path.basename(prefix) + suffix))
        copies.append(os.path.join(moved, os.path.basename(prefix)))
    files = _bundle_files(cache)
    build_datasets(_config(copies, cache), [300, 30, 10])  # same content elsewhere: a hit
    assert _bundle_files(cache) == files
    for change in (
        {"random_seed": 6},
        {"sequence_length": 17},
        {"add_extra_token_to_sequence": False},
        {"drop_last_partial_validation_sequence": False},
        {"weights": (1.0, 2.0, 3.0, 4.5)},
        {"split": "90,9,1"},
        {"blend_order": "balanced"},
        {"shuffle": "feistel"},
    ):
        build_datasets(_config(corpora, cache, **change), [300, 30, 10])
        now = _bundle_files(cache)
        assert len(now) > len(files), change
        files = now
    build_datasets(_config(corpora, cache), [301, 30, 10])
    assert len(_bundle_files(cache)) > len(files)


def test_a_corpus_rewritten_in_place_misses(corpora, tmp_path):
    """Same path, same .idx and .bin sizes, other lengths: a new key, right values."""
    cache = str(tmp_path / "cache")
    config = _config(corpora, cache)
    build_datasets(config, [300, 30, 10])
    files = _bundle_files(cache)
    sizes = [os.path.getsize(corpora[1] + suffix) for suffix in (".idx", ".bin")]
    lengths = np.asarray(mdc.IndexedDataset(corpora[1]).sequence_lengths).copy()
    position = int(np.argmax(lengths > 0))
    lengths[position] -= 1  # same total, same counts: same file sizes
    lengths[position + 1] += 1
    write_corpus(corpora[1], lengths, np.random.default_rng(0))
    assert [os.path.getsize(corpora[1] + suffix) for suffix in (".idx", ".bin")] == sizes
    rebuilt = build_datasets(config, [300, 30, 10])
    assert len(_bundle_files(cache)) > len(files)
    _assert_same(build_datasets(_config(corpora, None), [300, 30, 10]), rebuilt)


def test_a_damaged_bundle_is_rebuilt_with_a_warning(corpora, tmp_path):
    cache = str(tmp_path / "cache")
    config = _config(corpora, cache)
    expected = build_datasets(config, [300, 30, 10])
    (blob,) = glob.glob(os.path.join(cache, "*-bundle-blob.npy"))
    (table,) = glob.glob(os.path.join(cache, "*-bundle-table.npy"))
    with open(blob, "r+b") as stream:
        stream.truncate(os.path.getsize(blob) - 8)
    with pytest.warns(UserWarning, match="rebuilding"):
        again = build_datasets(config, [300, 30, 10])
    _assert_same(expected, again)
    build_datasets(config, [300, 30, 10])  # repaired: a quiet hit
    entries = np.load(table)
    entries[-1, 0] = 1 << 40  # an offset past the blob, file size unchanged
    np.save(table, entries)
    with pytest.warns(UserWarning, match="rebuilding"):
        again = build_datasets(config, [300, 30, 10])
    _assert_same(expected, again)


def test_a_read_only_cache_builds_in_memory_with_a_warning(corpora, tmp_path, monkeypatch):
    cache = str(tmp_path / "cache")

    def refuse(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(os, "makedirs", refuse)
    with pytest.warns(UserWarning, match="cannot write the index cache"):
        built = build_datasets(_config(corpora, cache), [300, 30, 10])
    assert not os.path.exists(cache)
    _assert_same(build_datasets(_config(corpora, None), [300, 30, 10]), built)


@pytest.mark.parametrize("damage", ["pointers", "bin", "missing"])
def test_bad_corpora_still_raise_after_a_bundle(corpora, tmp_path, damage):
    cache = str(tmp_path / "cache")
    config = _config(corpora, cache)
    build_datasets(config, [300, 30, 10])
    idx = corpora[2] + ".idx"
    if damage == "pointers":  # second pointer off by 2 bytes, sizes unchanged
        header = mdc.IndexedDataset(corpora[2])
        count = len(header)
        with open(idx, "r+b") as stream:
            stream.seek(34 + 4 * count + 8)
            value = int(np.frombuffer(stream.read(8), "<i8")[0])
            stream.seek(34 + 4 * count + 8)
            stream.write(np.array([value + 2], "<i8").tobytes())
    elif damage == "bin":
        with open(corpora[2] + ".bin", "r+b") as stream:
            stream.truncate(os.path.getsize(corpora[2] + ".bin") - 2)
    else:
        os.unlink(idx)
    with pytest.raises(mdc.DataError, match=r"blend: dataset prefix .*corpus2"):
        build_datasets(config, [300, 30, 10])


def test_large_corpora_are_validated_on_a_hit(tmp_path, monkeypatch):
    """A .idx over the read-into-memory size is identified by sampled digests, so a hit
    still validates it (and reads it through a memory map)."""
    rng = np.random.default_rng(3)
    prefixes = _corpora(str(tmp_path), rng, count=3)
    cache = str(tmp_path / "cache")
    real = reader.IndexedDataset.open_deferred

    def mapped(cls, prefix, **kw):
        kw["read_below"] = 0
        return real(prefix, **kw)

    monkeypatch.setattr(reader.IndexedDataset, "open_deferred", classmethod(mapped))
    config = _config(prefixes, cache, weights=(1.0, 1.0, 1.0))
    cold = build_datasets(config, [200, 20, 5])
    warm = build_datasets(config, [200, 20, 5])
    _assert_same(cold, warm)
    assert all(member.indexed.validated for member in warm[0].datasets)
    assert all(member.indexed.idx_sha256() is None for member in warm[0].datasets)


def _build_in_child(prefixes: list[str], cache: str) -> list[int]:
    """Worker of the concurrency test: the train blend's indices, as lists."""
    train = build_datasets(_config(prefixes, cache), [300, 30, 10])[0]
    return train.dataset_index.tolist() + train.datasets[0].shuffle_index.tolist()


def test_concurrent_builders_agree(corpora, tmp_path):
    cache = str(tmp_path / "cache")
    expected = _build_in_child(corpora, str(tmp_path / "alone"))
    context = multiprocessing.get_context("spawn")
    with context.Pool(4) as pool:
        results = pool.starmap(_build_in_child, [(corpora, cache)] * 4)
    assert all(result == expected for result in results)
    assert not [name for name in os.listdir(cache) if name.endswith(".tmp")]
    assert _build_in_child(corpora, cache) == expected


def test_a_single_small_prefix_makes_no_bundle(corpora, tmp_path):
    cache = str(tmp_path / "cache")
    build_datasets(_config(corpora[:1], cache, weights=None), [100, None, None])
    assert not os.path.exists(cache)


def test_input_errors_on_a_hit_are_not_taken_for_damage(corpora, tmp_path):
    """eod_id is no part of the key: a hit with a bad one raises as a miss would,
    without calling the bundle damaged."""
    import dataclasses

    config = _config(corpora, str(tmp_path / "cache"))
    build_datasets(config, [300, 30, 10])
    bad = dataclasses.replace(config, eod_id=70_000)  # outside the uint16 corpus
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(mdc.DataError, match="eod_id"):
            build_datasets(bad, [300, 30, 10])


def test_an_index_out_of_range_in_a_bundle_names_the_bundle(corpora, tmp_path):
    """A bundle written with a bad blend index (its checksums match: not damage on disk)
    is a DataError naming the array and the bundle at read time, not an IndexError."""
    import json

    from megadata_core.cache import entries as index_cache

    cache = str(tmp_path / "cache")
    config = _config(corpora, cache)
    build_datasets(config, [300, 30, 10])
    (record,) = glob.glob(os.path.join(cache, "*-bundle-description.json"))
    saved = {name: np.array(np.load(glob.glob(os.path.join(cache, f"*-bundle-{name}.npy"))[0]))
             for name in bundle.BUNDLE_ARRAYS}
    arrays = packed_arrays.unpack_arrays(saved["table"], saved["blob"])  # views of the copy
    arrays[int(saved["blends"][0])][3] = 99  # the train blend's dataset_index
    description = json.load(open(record))["description"]
    index_cache.save_cached(cache, description, bundle.BUNDLE_SPLIT, saved)
    train = build_datasets(config, [300, 30, 10])[0]
    with pytest.raises(mdc.DataError, match=r"dataset_index: .*99.*build bundle .*bundle-blob"):
        train.__getitems__([0, 3])
    train.__getitems__([0, 4])


def test_bytes_flipped_in_the_middle_of_a_large_bundle_blob_are_found(tmp_path):
    """A bundle blob over 256 KiB (where only sampled bytes used to be checked) with 16
    bytes inverted in its middle: warned, rebuilt, the same datasets as a fresh build."""
    rng = np.random.default_rng(11)
    prefixes = [
        write_corpus(str(tmp_path / f"big{number}"), rng.integers(1, 12, 8000), rng)
        for number in range(2)
    ]
    cache = str(tmp_path / "cache")
    config = _config(prefixes, cache, weights=(1.0, 3.0))
    sizes = [60_000, 600, 60]
    build_datasets(config, sizes, in_memory_below=1 << 30)
    (blob,) = glob.glob(os.path.join(cache, "*-bundle-blob.npy"))
    assert os.path.getsize(blob) > 1 << 20
    middle = os.path.getsize(blob) // 2
    with open(blob, "r+b") as stream:
        stream.seek(middle)
        data = stream.read(16)
        stream.seek(middle)
        stream.write(bytes(value ^ 0xFF for value in data))
    with pytest.warns(UserWarning, match="bundle-blob.npy.*rebuilding"):
        again = build_datasets(config, sizes, in_memory_below=1 << 30)
    _assert_same(build_datasets(_config(prefixes, None, weights=(1.0, 3.0)), sizes), again)
