"""The on-disk index cache: round trips, keys, corruption, read-only, concurrency."""

from __future__ import annotations

import glob
import io
import json
import multiprocessing
import os
import time
import warnings
import zlib

import numpy as np
import pytest

import megadata_core as mdc
from megadata_core.cache import entries as cache
from megadata_core.cache import keys as hashing
from megadata_core.cache import npy_files
from megadata_core.files import atomic as locks
from megadata_core.indices import gpt_indices
from megadata_core.indices.gpt import GPT_ARRAYS

NAMES = GPT_ARRAYS


def _description(**changes) -> dict:
    description = {
        "kind": "test",
        "random_seed": 1234,
        "sequence_length": 8,
        "add_extra_token_to_sequence": True,
        "drop_last_partial_sequence": True,
        "num_samples": 100,
        "documents": {"count": 50, "range": [0, 50]},
        "data": {"idx_size": 1234, "idx_arrays_sampled_sha256": ["ab", "cd"]},
    }
    description.update(changes)
    return description


def _build(description: dict) -> dict[str, np.ndarray]:
    """A pure function of the description (as the cache requires)."""
    rng = np.random.default_rng(description["random_seed"])
    lengths = rng.integers(1, 30, description["documents"]["count"]).astype(np.int32)
    ids = np.arange(len(lengths))
    arrays = gpt_indices(
        lengths,
        ids,
        description["sequence_length"],
        description["num_samples"],
        description["random_seed"],
    )
    return dict(zip(NAMES, arrays))


def _files(directory) -> list[str]:
    return sorted(os.listdir(directory))


def test_round_trip_is_memory_mapped(tmp_path):
    description = _description()
    built = _build(description)
    first = cache.load_or_build(str(tmp_path), description, "train", lambda: built, names=NAMES)
    key = hashing.description_key(description)
    assert _files(tmp_path) == sorted(
        [f"{key}-train.lock", f"{key}-train-description.json"]
        + [f"{key}-train-{name}.npy" for name in NAMES]
    )
    second = cache.load_or_build(str(tmp_path), description, "train", pytest.fail, names=NAMES)
    for name in NAMES:
        assert isinstance(second[name], np.memmap) and not second[name].flags.writeable
        np.testing.assert_array_equal(second[name], built[name])
        assert second[name].dtype == built[name].dtype
        np.testing.assert_array_equal(first[name], built[name])
    record = json.loads((tmp_path / f"{key}-train-description.json").read_text())
    assert record["key"] == key and record["description"] == description
    meta = record["arrays"]["sample_index"]
    assert meta["shape"] == list(built["sample_index"].shape)
    assert meta["file_crc32"] == npy_files.file_checksum(built["sample_index"])
    data = (tmp_path / f"{key}-train-sample_index.npy").read_bytes()
    assert meta["file_crc32"] == f"{zlib.crc32(data):08x}"  # the whole file, header too


def test_files_are_npy_bytes_with_a_chunked_crc(tmp_path, monkeypatch):
    """The files are exactly what np.save writes, and the recorded CRC-32 (computed on a
    second thread, chunk by chunk) is that of the whole file, whatever the chunk size."""
    # many chunks, a ragged last one
    monkeypatch.setattr(npy_files, "CHECKSUM_CHUNK_BYTES", 1000)
    description = _description(documents={"count": 3000, "range": [0, 3000]}, num_samples=5000)
    built = _build(description)
    cache.load_or_build(str(tmp_path), description, "train", lambda: built, names=NAMES)
    key = hashing.description_key(description)
    record = json.loads((tmp_path / f"{key}-train-description.json").read_text())
    for name, array in built.items():
        expected = io.BytesIO()
        np.save(expected, array)
        assert (tmp_path / f"{key}-train-{name}.npy").read_bytes() == expected.getvalue()
        assert record["arrays"][name]["file_crc32"] == f"{zlib.crc32(expected.getvalue()):08x}"
    loaded = cache.load_cached(str(tmp_path), description, "train", NAMES, verify="full")
    for name, array in built.items():
        np.testing.assert_array_equal(loaded[name], array)


def test_no_fsync_on_write(tmp_path, monkeypatch):
    """Cache files are not fsync'ed (an entry can always be rebuilt; renames are atomic)."""

    def fail(*args):
        raise AssertionError("fsync called")

    monkeypatch.setattr(os, "fsync", fail)
    description = _description()
    cache.load_or_build(
        str(tmp_path), description, "train", lambda: _build(description), names=NAMES
    )
    assert cache.load_cached(str(tmp_path), description, "train", NAMES) is not None


def test_entry_of_an_older_cache_version_is_rebuilt(tmp_path):
    description, base = _entry(tmp_path)
    path = f"{base}-description.json"
    record = json.load(open(path))
    record["version"] = 1
    json.dump(record, open(path, "w"))
    with pytest.raises(mdc.DataError, match="cache format version 1"):
        cache.load_cached(str(tmp_path), description, "train", NAMES)
    with pytest.warns(UserWarning, match="rebuilding"):
        cache.load_or_build(
            str(tmp_path), description, "train", lambda: _build(description), names=NAMES
        )
    assert json.load(open(path))["version"] == cache.CACHE_VERSION


def test_key_covers_every_field():
    base = hashing.description_key(_description())
    changes = [
        {"add_extra_token_to_sequence": False},
        {"drop_last_partial_sequence": False},
        {"num_samples": 101},
        {"num_samples": None},
        {"documents": {"count": 50, "range": [1, 51]}},
        {"data": {"idx_size": 1235, "idx_arrays_sampled_sha256": ["ab", "cd"]}},
        {"random_seed": 1},
        {"shuffle": "feistel"},
    ]
    keys = {hashing.description_key(_description(**change)) for change in changes}
    assert base not in keys and len(keys) == len(changes)
    assert hashing.description_key(dict(reversed(list(_description().items())))) == base


def test_splits_do_not_collide(tmp_path):
    description = _description()
    cache.load_or_build(
        str(tmp_path), description, "train", lambda: _build(description), names=NAMES
    )

    def must_build():
        raise LookupError("built")

    with pytest.raises(LookupError):  # the valid split is not cached yet: it builds
        cache.load_or_build(str(tmp_path), description, "valid", must_build, names=NAMES)


def _entry(tmp_path, description=None):
    description = description or _description()
    cache.load_or_build(
        str(tmp_path), description, "train", lambda: _build(description), names=NAMES
    )
    key = hashing.description_key(description)
    return description, str(tmp_path / f"{key}-train")


@pytest.mark.parametrize("damage", ["truncate", "flip_sampled_byte", "bad_json", "wrong_key"])
def test_damaged_entry_is_rebuilt_with_a_warning(tmp_path, damage):
    description, base = _entry(tmp_path)
    if damage == "truncate":
        with open(f"{base}-sample_index.npy", "r+b") as stream:
            stream.truncate(os.path.getsize(f"{base}-sample_index.npy") - 4)
    elif damage == "flip_sampled_byte":  # small arrays are hashed whole on every load
        with open(f"{base}-shuffle_index.npy", "r+b") as stream:
            stream.seek(-1, os.SEEK_END)
            last = stream.read(1)
            stream.seek(-1, os.SEEK_END)
            stream.write(bytes([last[0] ^ 0xFF]))
    elif damage == "bad_json":
        with open(f"{base}-description.json", "w") as stream:
            stream.write("{not json")
    else:  # the description inside no longer matches the key in the file name
        path = f"{base}-description.json"
        record = json.load(open(path))
        record["description"]["num_samples"] = 7
        json.dump(record, open(path, "w"))
    with pytest.raises(mdc.DataError, match=os.path.basename(base)):
        cache.load_cached(str(tmp_path), description, "train", NAMES)
    calls = []

    def build():
        calls.append(1)
        return _build(description)

    with pytest.warns(UserWarning, match="rebuilding"):
        arrays = cache.load_or_build(str(tmp_path), description, "train", build, names=NAMES)
    assert calls == [1]
    for name, expected in _build(description).items():
        np.testing.assert_array_equal(arrays[name], expected)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # repaired: a clean hit
        cache.load_or_build(str(tmp_path), description, "train", pytest.fail, names=NAMES)


def test_every_byte_is_checked_on_load(tmp_path):
    """Corruption outside what a sampled digest would read is found by a default load
    (``verify="none"`` checks sizes, shapes and dtypes only)."""
    description = _description(documents={"count": 200_000, "range": [0, 200_000]})
    description["num_samples"] = 300_000
    _, base = _entry(tmp_path, description)
    path = f"{base}-document_index.npy"
    array = np.load(path, mmap_mode="r")
    header = os.path.getsize(path) - array.nbytes
    chunk = (array.nbytes - hashing.SAMPLE_CHUNK_BYTES) // (hashing.SAMPLE_CHUNKS - 1)
    offset = header + chunk // 2 + hashing.SAMPLE_CHUNK_BYTES  # between two sampled chunks
    with open(path, "r+b") as stream:
        stream.seek(offset)
        value = stream.read(1)
        stream.seek(offset)
        stream.write(bytes([value[0] ^ 0x01]))
    cache.load_cached(str(tmp_path), description, "train", NAMES, verify="none")
    with pytest.raises(mdc.DataError, match="checksum"):
        cache.load_cached(str(tmp_path), description, "train", NAMES)


def test_unwritable_directory_builds_in_memory(tmp_path, monkeypatch):
    def refuse(path, write):
        raise PermissionError(13, "Permission denied", path)

    monkeypatch.setattr(cache, "write_atomically", refuse)
    description = _description()
    with pytest.warns(UserWarning, match="path_to_cache"):
        arrays = cache.load_or_build(
            str(tmp_path), description, "train", lambda: _build(description), names=NAMES)
    for name, expected in _build(description).items():
        np.testing.assert_array_equal(arrays[name], expected)
    assert not glob.glob(str(tmp_path / "*.npy")) and not glob.glob(str(tmp_path / ".*tmp"))


def test_read_only_directory_still_loads(tmp_path, monkeypatch):
    description, _ = _entry(tmp_path)

    def no_lock(path):
        raise PermissionError(13, "Permission denied", path)

    monkeypatch.setattr(os, "open", no_lock)  # the lock file cannot be created
    arrays = cache.load_or_build(str(tmp_path), description, "train", pytest.fail, names=NAMES)
    np.testing.assert_array_equal(arrays["sample_index"], _build(description)["sample_index"])


def _build_in_child(directory: str, description: dict, log: str) -> dict[str, str]:
    """Worker of the concurrency test (module level: spawn pickles it by name)."""

    def build():
        with open(log, "a") as stream:
            stream.write(f"{os.getpid()}\n")
        time.sleep(0.2)  # widen the race window
        return _build(description)

    arrays = cache.load_or_build(directory, description, "train", build, names=NAMES)
    return {name: hashing.full_digest(np.asarray(array)) for name, array in arrays.items()}


@pytest.mark.parametrize("lock", [True, False])
def test_concurrent_builders_agree(tmp_path, lock, monkeypatch):
    description = _description(num_samples=5000, documents={"count": 3000, "range": [0, 3000]})
    expected = {name: hashing.full_digest(a) for name, a in _build(description).items()}
    directory = str(tmp_path / "cache")
    log = str(tmp_path / "builds.log")
    if not lock:  # every process builds and renames identical files over each other
        monkeypatch.setattr(locks, "fcntl", None)
    context = multiprocessing.get_context("spawn")
    with context.Pool(8) as pool:
        results = pool.starmap(_build_in_child, [(directory, description, log)] * 8)
    assert all(result == expected for result in results)
    assert not [name for name in os.listdir(directory) if name.endswith(".tmp")]
    listing = [name for name in os.listdir(directory) if not name.endswith("-verified.json")]
    assert len(listing) == 5  # description, lock, three arrays (+ the verified-files list)
    builds = open(log).read().split()
    if lock:
        assert len(builds) == 1  # one builder; the other seven waited and loaded
    assert cache.load_cached(directory, description, "train", NAMES) is not None


def _backdate(paths, seconds: int = 3600) -> None:
    """Set the files' mtime into the past (an entry built earlier, not in the same
    timestamp tick as a later write; see cache_files.RACY_NS)."""
    for path in paths:
        then = os.stat(path).st_mtime_ns - seconds * 10**9
        os.utime(path, ns=(then, then))


def test_cache_hit_of_ten_million_documents_reads_it_once(tmp_path, monkeypatch):
    """The first hit checks every byte; later hits of the unchanged files read nothing
    but their headers (the verified identities are remembered)."""
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 2000, 10_000_000).astype(np.int32)
    description = _description(documents={"count": 10_000_000, "range": [0, 10_000_000]})
    arrays = gpt_indices(lengths, np.arange(len(lengths)), 4096, None, 1234)
    arrays = dict(zip(NAMES, arrays))
    assert arrays["document_index"][:5].tolist() == [6539158, 5257737, 8780719, 3021630, 5042346]
    cache.load_or_build(str(tmp_path), description, "train", lambda: arrays, names=NAMES)
    _backdate(glob.glob(str(tmp_path / "*.npy")))
    hashed = []
    real = npy_files.stream_crc
    monkeypatch.setattr(npy_files, "stream_crc", lambda s: hashed.append(1) or real(s))
    timings = []
    for _ in range(5):
        start = time.perf_counter()
        loaded = cache.load_or_build(str(tmp_path), description, "train", pytest.fail, names=NAMES)
        timings.append(time.perf_counter() - start)
    assert len(hashed) == len(NAMES)  # the first hit only
    assert loaded["document_index"].shape == (10_000_000,)
    print(
        f"\ncache hit, 10M documents ({sum(a.nbytes for a in loaded.values()) >> 20} MiB of "
        f"indices): first (every byte checked) {timings[0] * 1e3:.1f} ms, then median "
        f"{sorted(timings[1:])[1] * 1e3:.2f} ms"
    )
