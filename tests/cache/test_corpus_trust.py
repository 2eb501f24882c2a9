"""A warm start vouches for the .idx through the index cache: one full validation per file
identity (recorded in the cache directory), a deferred open after it, and every change
of the .idx or .bin still caught before a sample is served."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from corpora import write_corpus

import megadata_core as mdc
from megadata_core.cache import corpus_trust
from megadata_core.files import identity
from megadata_core.format import idx_layout

DOCUMENTS = 5000  # 100 KB of .idx: past READ_IDX_BELOW, so it is memory-mapped


@pytest.fixture()
def settled(monkeypatch):
    """Files of this test count as settled at once (the 2 s racy window is covered by
    its own test)."""
    monkeypatch.setattr(identity, "RACY_NS", 0)


@pytest.fixture()
def validations(monkeypatch):
    """The number of full .idx validations run (the real one runs each time)."""
    calls = []
    real = idx_layout.validate_arrays

    def counted(*args, **kwargs):
        calls.append(args[5])
        return real(*args, **kwargs)

    monkeypatch.setattr(idx_layout, "validate_arrays", counted)
    return calls


def _corpus(tmp_path, name: str = "corpus") -> str:
    prefix = str(tmp_path / name)
    rng = np.random.default_rng(0)
    return write_corpus(prefix, rng.integers(1, 40, DOCUMENTS), rng, low=1, vocab=50_000)


def _config(cache: str, **overrides) -> mdc.GPTDataConfig:
    fields = dict(random_seed=3, sequence_length=64, eod_id=0, path_to_cache=cache)
    fields.update(overrides)
    return mdc.GPTDataConfig(**fields)


def _open(prefix: str, cache: str):
    indexed = mdc.IndexedDataset.open_deferred(prefix)
    return indexed, corpus_trust.ensure_validated(indexed, cache)


def test_validated_once_then_vouched(tmp_path, settled, validations):
    prefix, cache = _corpus(tmp_path), str(tmp_path / "cache")
    first, how = _open(prefix, cache)
    assert how == corpus_trust.VALIDATED and first.validated and len(validations) == 1
    record, _ = corpus_trust.record_paths(cache, prefix + ".idx")
    assert os.path.exists(record)
    second, how = _open(prefix, cache)
    assert how == corpus_trust.VOUCHED and second.validated
    assert len(validations) == 1  # the warm open read no array whole
    np.testing.assert_array_equal(second[7], mdc.IndexedDataset(prefix)[7])
    assert corpus_trust.ensure_validated(second, cache) == corpus_trust.ALREADY


def test_without_a_cache_every_open_validates(tmp_path, settled, validations):
    prefix = _corpus(tmp_path)
    for _ in range(2):
        indexed = mdc.open_corpus(prefix)
        assert indexed.validated
    assert len(validations) == 2


def test_a_fresh_file_is_not_recorded(tmp_path, validations):
    """Changed less than RACY_NS before the validation: a later write in the same
    timestamp tick could keep its identity, so nothing is remembered."""
    prefix, cache = _corpus(tmp_path), str(tmp_path / "cache")
    assert _open(prefix, cache)[1] == corpus_trust.VALIDATED
    assert _open(prefix, cache)[1] == corpus_trust.VALIDATED
    record, _ = corpus_trust.record_paths(cache, prefix + ".idx")
    assert not os.path.exists(record) and len(validations) == 2


def _corrupt_pointer(prefix: str) -> None:
    """Sequence 10's pointer moves by one token, in place (same size, new mtime)."""
    pointers_at = idx_layout.HEADER_SIZE + 4 * DOCUMENTS
    with open(prefix + ".idx", "r+b") as stream:
        stream.seek(pointers_at + 8 * 10)
        value = int.from_bytes(stream.read(8), "little")
        stream.seek(pointers_at + 8 * 10)
        stream.write((value + 2).to_bytes(8, "little"))


def test_changed_idx_is_validated_again(tmp_path, settled, validations):
    prefix, cache = _corpus(tmp_path), str(tmp_path / "cache")
    _open(prefix, cache)
    _corrupt_pointer(prefix)
    with pytest.raises(mdc.DataError, match=r"corpus\.idx: sequence_pointers\[10\]"):
        _open(prefix, cache)
    assert len(validations) == 2


@pytest.mark.parametrize("change", ["touch idx", "touch bin", "replace idx", "grow bin"])
def test_any_identity_change_validates_again(tmp_path, settled, validations, change):
    prefix, cache = _corpus(tmp_path), str(tmp_path / "cache")
    _open(prefix, cache)
    kind, suffix = change.split()
    path = f"{prefix}.{suffix}"
    if kind == "touch":
        info = os.stat(path)
        os.utime(path, ns=(info.st_atime_ns, info.st_mtime_ns - 1_000_000_000))
    elif kind == "replace":  # same bytes, another inode
        shutil.copyfile(path, path + ".new")
        os.replace(path + ".new", path)
    else:
        with open(path, "ab") as stream:
            stream.write(b"\0\0")
    assert _open(prefix, cache)[1] == corpus_trust.VALIDATED
    assert _open(prefix, cache)[1] == corpus_trust.VOUCHED  # recorded again
    assert len(validations) == 2


def test_truncated_bin_is_validated_again(tmp_path, settled):
    prefix, cache = _corpus(tmp_path), str(tmp_path / "cache")
    _open(prefix, cache)
    os.truncate(prefix + ".bin", 1000)
    with pytest.raises(mdc.DataError, match=r"corpus\.bin: \.bin has 1000 bytes"):
        _open(prefix, cache)


def test_foreign_or_damaged_record_vouches_for_nothing(tmp_path, settled, validations):
    prefix, cache = _corpus(tmp_path), str(tmp_path / "cache")
    _open(prefix, cache)
    record, _ = corpus_trust.record_paths(cache, prefix + ".idx")
    with open(record, "w") as stream:
        stream.write("{not json")
    assert _open(prefix, cache)[1] == corpus_trust.VALIDATED
    other = _corpus(tmp_path, "other")  # another corpus's record under this one's name
    _open(other, cache)
    shutil.copyfile(corpus_trust.record_paths(cache, other + ".idx")[0], record)
    assert _open(prefix, cache)[1] == corpus_trust.VALIDATED
    assert len(validations) == 4


def _warm_dataset(tmp_path, prefix: str, cache: str) -> mdc.GPTDataset:
    config = _config(cache)
    mdc.GPTDataset(mdc.open_corpus(prefix, cache), range(DOCUMENTS), 40, config)
    indexed, how = _open(prefix, cache)
    assert how == corpus_trust.VOUCHED
    return mdc.GPTDataset(indexed, range(DOCUMENTS), 40, config)


def test_idx_written_in_place_after_a_warm_start(tmp_path, settled):
    prefix, cache = _corpus(tmp_path), str(tmp_path / "cache")
    train = _warm_dataset(tmp_path, prefix, cache)
    train.__getitems__([0, 1])
    _corrupt_pointer(prefix)
    with pytest.raises(mdc.DataError, match=r"corpus\.idx: the \.idx changed since"):
        train.__getitems__([2, 3])


def test_idx_written_in_place_under_a_validated_open(tmp_path):
    """The same check guards an eagerly validated corpus: its mapped arrays would
    change under the reader just the same."""
    prefix = _corpus(tmp_path)
    train = mdc.GPTDataset(mdc.IndexedDataset(prefix), np.arange(DOCUMENTS), 40,
                           _config(None))
    train.__getitems__([0])
    _corrupt_pointer(prefix)
    with pytest.raises(mdc.DataError, match=r"corpus\.idx: the \.idx changed since"):
        train[1]


def test_bin_truncated_after_a_warm_start(tmp_path, settled):
    prefix, cache = _corpus(tmp_path), str(tmp_path / "cache")
    train = _warm_dataset(tmp_path, prefix, cache)
    train.__getitems__([0, 1])
    os.truncate(prefix + ".bin", 2000)
    with pytest.raises(mdc.DataError, match=r"corpus\.bin: the \.bin is now 2000 bytes"):
        train.__getitems__(np.arange(len(train)))


def test_replaced_idx_keeps_serving_the_mapped_file(tmp_path, settled):
    prefix, cache = _corpus(tmp_path), str(tmp_path / "cache")
    train = _warm_dataset(tmp_path, prefix, cache)
    before = train.__getitems__([0, 5])["tokens"].copy()
    shutil.copyfile(prefix + ".idx", str(tmp_path / "copy.idx"))
    os.replace(str(tmp_path / "copy.idx"), prefix + ".idx")
    np.testing.assert_array_equal(train.__getitems__([0, 5])["tokens"], before)


def test_idx_truncated_after_a_warm_start_raises_not_sigbus(tmp_path, settled):
    """Truncating the mapped .idx under a reader: reading its arrays would fault; the
    per-batch check comes first. In a child, so a regression shows as a signal."""
    prefix, cache = _corpus(tmp_path), str(tmp_path / "cache")
    _warm_dataset(tmp_path, prefix, cache)
    script = textwrap.dedent(f"""
        import os, megadata_core as mdc
        from megadata_core.cache import corpus_trust
        config = mdc.GPTDataConfig(random_seed=3, sequence_length=64, eod_id=0,
                                   path_to_cache={cache!r})
        indexed = mdc.IndexedDataset.open_deferred({prefix!r})
        assert corpus_trust.ensure_validated(indexed, {cache!r}) == "vouched"
        train = mdc.GPTDataset(indexed, range({DOCUMENTS}), 40, config)
        train.__getitems__([0])
        os.truncate({prefix!r} + ".idx", 64)
        try:
            train.__getitems__(list(range(len(train))))
        except mdc.DataError as error:
            print("DataError", error)
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            timeout=120, env={**os.environ, "PYTHONPATH": os.getcwd()})
    assert result.returncode == 0, (result.returncode, result.stderr)
    assert "DataError" in result.stdout and "corpus.idx: the .idx changed" in result.stdout


def test_build_datasets_warm_start_vouches(tmp_path, settled, validations):
    prefix, cache = _corpus(tmp_path), str(tmp_path / "cache")
    config = _config(cache, blend=([prefix], None), split="98,2,0")
    cold = mdc.build_datasets(config, [200, 10, None])
    assert len(validations) == 1
    warm = mdc.build_datasets(config, [200, 10, None])
    assert len(validations) == 1 and warm[0].indexed.validated
    for split in (0, 1):
        np.testing.assert_array_equal(
            warm[split].__getitems__([0, 3])["tokens"], cold[split].__getitems__([0, 3])["tokens"]
        )
    _corrupt_pointer(prefix)
    with pytest.raises(mdc.DataError, match=r"corpus\.idx: sequence_pointers\[10\]"):
        mdc.build_datasets(config, [200, 10, None])


def test_bundled_blend_warm_start_vouches(tmp_path, settled, validations):
    """A blend with a cache (the build bundle): the large member's .idx is vouched for
    by its record on the warm start, as a single corpus's is."""
    first, second = _corpus(tmp_path, "first"), _corpus(tmp_path, "second")
    config = _config(str(tmp_path / "cache"), blend=([first, second], [0.5, 0.5]),
                     split="1,0,0")
    mdc.build_datasets(config, [100, None, None], in_memory_below=0)
    assert len(validations) == 2
    warm = mdc.build_datasets(config, [100, None, None], in_memory_below=0)
    assert len(validations) == 2
    assert all(member.indexed.validated for member in warm[0].datasets)


def test_unpickled_in_a_worker_only_onto_the_same_files(tmp_path, settled):
    """A dataset travels to a worker as file names: the worker maps the files again and
    must find the very files the sender validated (or vouched for)."""
    import pickle

    prefix, cache = _corpus(tmp_path), str(tmp_path / "cache")
    train = _warm_dataset(tmp_path, prefix, cache)
    sent = pickle.dumps(train)
    again = pickle.loads(sent)
    assert again.indexed.validated
    np.testing.assert_array_equal(
        again.__getitems__([1, 2])["tokens"], train.__getitems__([1, 2])["tokens"]
    )
    _corrupt_pointer(prefix)
    with pytest.raises(mdc.DataError, match=r"corpus\.idx: the \.idx changed since the sending"):
        pickle.loads(sent)
