"""Every byte of a cache entry is checked before use, once per file identity: a new
process skips unchanged files it can vouch for (the entry's verified-files list), and
any change to a file, in place or by replacement, is found again."""

from __future__ import annotations

import glob
import json
import multiprocessing
import os
import tempfile
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from megadata_core.cache import entries as cache
from megadata_core.cache import keys as hashing
from megadata_core.cache import npy_files as cache_files
from megadata_core.indices import gpt_indices
from megadata_core.indices.gpt import GPT_ARRAYS

NAMES = GPT_ARRAYS


def _description(count: int = 3000, samples: int = 5000) -> dict:
    return {"kind": "test", "random_seed": 9, "documents": count, "num_samples": samples}


def _build(description: dict) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(description["random_seed"])
    lengths = rng.integers(1, 30, description["documents"]).astype(np.int32)
    arrays = gpt_indices(lengths, np.arange(len(lengths)), 8, description["num_samples"], 9)
    return dict(zip(NAMES, arrays))


def _entry(directory: str, description: dict) -> str:
    """Build the entry, with its files' mtimes an hour back (an entry built earlier: see
    cache_files.RACY_NS); returns the path prefix of its files."""
    cache.load_or_build(directory, description, "train", lambda: _build(description), names=NAMES)
    for path in glob.glob(os.path.join(directory, "*.npy")):
        then = os.stat(path).st_mtime_ns - 3600 * 10**9
        os.utime(path, ns=(then, then))
    return os.path.join(directory, f"{hashing.description_key(description)}-train")


def _flip(path: str, offset: int, mask: int = 0xFF) -> None:
    with open(path, "r+b") as stream:
        stream.seek(offset)
        value = stream.read(1)[0]
        stream.seek(offset)
        stream.write(bytes([value ^ mask]))


def _load_in_child(directory: str, description: dict) -> tuple[int, bool, dict]:
    """In a fresh process: files read whole, whether it warned, digests of the arrays."""
    hashed = []
    real = cache_files.stream_crc
    cache_files.stream_crc = lambda stream: hashed.append(1) or real(stream)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        arrays = cache.load_or_build(
            directory, description, "train", lambda: _build(description), names=NAMES
        )
    digests = {name: hashing.full_digest(np.asarray(array)) for name, array in arrays.items()}
    return len(hashed), bool(caught), digests


def _in_fresh_process(directory: str, description: dict) -> tuple[int, bool, dict]:
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        return pool.apply(_load_in_child, (directory, description))


def test_a_new_process_does_not_read_unchanged_files_again(tmp_path):
    directory, description = str(tmp_path), _description()
    base = _entry(directory, description)
    expected = {name: hashing.full_digest(a) for name, a in _build(description).items()}
    assert _in_fresh_process(directory, description) == (len(NAMES), False, expected)
    record = json.load(open(f"{base}-verified.json"))
    assert sorted(record["files"]) == sorted(NAMES)
    assert _in_fresh_process(directory, description) == (0, False, expected)  # vouched for


def test_damage_after_a_verified_load_is_found_by_a_new_process(tmp_path):
    directory, description = str(tmp_path), _description()
    base = _entry(directory, description)
    expected = {name: hashing.full_digest(a) for name, a in _build(description).items()}
    assert _in_fresh_process(directory, description)[0] == len(NAMES)  # remembered
    path = f"{base}-document_index.npy"
    _flip(path, os.path.getsize(path) // 2)  # in place: same inode, same size
    hashed, warned, digests = _in_fresh_process(directory, description)
    assert warned and digests == expected  # found, rebuilt
    assert hashed >= 1


def test_damage_after_a_verified_load_is_found_in_the_same_process(tmp_path):
    directory, description = str(tmp_path), _description()
    base = _entry(directory, description)
    cache.load_or_build(
        directory, description, "train", pytest.fail, names=NAMES
    )  # checked, remembered
    path = f"{base}-sample_index.npy"
    _flip(path, os.path.getsize(path) - 3)
    with pytest.warns(UserWarning, match="sample_index.npy: checksum"):
        arrays = cache.load_or_build(
            directory, description, "train", lambda: _build(description), names=NAMES
        )
    np.testing.assert_array_equal(arrays["sample_index"], _build(description)["sample_index"])


def test_a_file_changed_just_before_its_check_is_not_remembered(tmp_path):
    """Within RACY_NS of its last change a later write could keep the file's identity
    (same timestamp tick): such a file is checked again at every load."""
    directory, description = str(tmp_path), _description()
    cache.load_or_build(directory, description, "train", lambda: _build(description), names=NAMES)
    hashed = []
    real = cache_files.stream_crc
    try:
        cache_files.stream_crc = lambda stream: hashed.append(1) or real(stream)
        for _ in range(2):
            cache.load_or_build(directory, description, "train", pytest.fail, names=NAMES)
    finally:
        cache_files.stream_crc = real
    assert len(hashed) == 2 * len(NAMES)
    assert not glob.glob(os.path.join(directory, "*-verified.json"))


def test_a_damaged_verified_files_list_only_costs_a_check(tmp_path):
    directory, description = str(tmp_path), _description()
    base = _entry(directory, description)
    cache.load_cached(directory, description, "train", NAMES)
    path = f"{base}-verified.json"
    record = json.load(open(path))
    record["files"]["shuffle_index"][-1] = "00000000"  # vouches for another checksum
    json.dump(record, open(path, "w"))
    cache_files._CHECKED.clear()  # as a new process
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loaded = cache.load_cached(directory, description, "train", NAMES)
    np.testing.assert_array_equal(loaded["shuffle_index"], _build(description)["shuffle_index"])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    file=st.sampled_from([*NAMES, "description", "verified"]),
    where=st.floats(0, 1, exclude_max=True),
    mask=st.integers(1, 255),
    remembered=st.booleans(),
)
def test_any_single_byte_change_never_serves_wrong_arrays(file, where, mask, remembered):
    """Any byte of any file of an entry changed: an array file's change is always found
    (warned, rebuilt); a description's or verified-files list's change is found or
    harmless. The arrays handed out are always the right ones."""
    description = _description(count=300, samples=400)
    expected = _build(description)
    with tempfile.TemporaryDirectory() as directory:
        base = _entry(directory, description)
        if remembered:  # checked and remembered before the change
            cache.load_cached(directory, description, "train", NAMES)
        suffix = {"description": "-description.json", "verified": "-verified.json"}
        path = base + suffix.get(file, f"-{file}.npy")
        if not os.path.exists(path):
            return  # no verified-files list without a remembered check
        _flip(path, int(where * os.path.getsize(path)), mask)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            arrays = cache.load_or_build(
                directory, description, "train", lambda: expected, names=NAMES
            )
        if file in NAMES:
            assert any("rebuilding" in str(warning.message) for warning in caught)
        for name in NAMES:
            np.testing.assert_array_equal(arrays[name], expected[name])
            assert arrays[name].dtype == expected[name].dtype
