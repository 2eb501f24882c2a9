"""The one-file description of a built blend: a warm start opens no .idx, a damaged
record is named and bypassed, a changed corpus is found (at the warm start by its file
identity, or at the first read of the member by its bytes) before data is served."""

from __future__ import annotations

import glob
import os
import pickle

import numpy as np
import pytest
from builder_oracle import ours_config
from gpt_oracle import write_corpus

from megadata_core import DataError
from megadata_core.build.builder import build_datasets
from megadata_core.cache import blend_record as described
from megadata_core.format import reader

SIZES = [300, 30, 10]


def _corpora(directory, count=4) -> list[str]:
    rng = np.random.default_rng(7)
    return [
        write_corpus(os.path.join(directory, f"corpus{number}"),
                     rng.integers(0, 50, int(rng.integers(150, 300))), rng)
        for number in range(count)
    ]


def _config(prefixes, cache):
    return ours_config(blend=(list(prefixes), [1.0, 2.0, 3.0, 4.0]), path_to_cache=cache,
                       random_seed=5, sequence_length=16, split="90,8,2")


def _record_files(cache: str) -> list[str]:
    return sorted(glob.glob(os.path.join(cache, "*-blend-*.npy")))


def _batches(split) -> dict:
    return split.__getitems__(list(range(0, len(split), 5)))


@pytest.fixture()
def built(tmp_path):
    prefixes = _corpora(str(tmp_path))
    cache = str(tmp_path / "cache")
    cold = build_datasets(_config(prefixes, cache), SIZES)
    return prefixes, cache, cold


def test_warm_start_opens_no_idx_and_serves_the_same_data(built, monkeypatch):
    prefixes, cache, cold = built
    assert len(_record_files(cache)) == 4
    opened = []
    original = reader.IndexedDataset._open
    monkeypatch.setattr(reader.IndexedDataset, "_open",
                        lambda self, *a, **k: opened.append(self.path_prefix)
                        or original(self, *a, **k))
    warm = build_datasets(_config(prefixes, cache), SIZES)
    assert opened == []  # decided from the record alone
    corpora = {member.indexed for split in warm for member in split.datasets}
    assert all(isinstance(corpus, described.DescribedCorpus) for corpus in corpora)
    for first, second in zip(cold, warm):
        np.testing.assert_array_equal(first.dataset_index, second.dataset_index)
        for key, value in _batches(first).items():
            np.testing.assert_array_equal(value, _batches(second)[key])
    assert opened  # the members read, at their first read
    warm[0].datasets[3].__getitems__([0])
    assert prefixes[3] in opened


def test_a_damaged_record_is_named_and_bypassed(built):
    prefixes, cache, cold = built
    path = _record_files(cache)[0]
    data = bytearray(open(path, "rb").read())
    data[-1] ^= 0xFF
    with open(path, "wb") as stream:
        stream.write(data)
    with pytest.warns(UserWarning, match=os.path.basename(path)):
        warm = build_datasets(_config(prefixes, cache), SIZES)
    np.testing.assert_array_equal(warm[0].dataset_index, cold[0].dataset_index)
    again = build_datasets(_config(prefixes, cache), SIZES)  # the record was rewritten
    assert isinstance(again[0].datasets[0].indexed, described.DescribedCorpus)


def test_a_changed_corpus_takes_the_full_path(built, tmp_path):
    prefixes, cache, _ = built
    rng = np.random.default_rng(99)
    write_corpus(prefixes[1], rng.integers(0, 50, 260), rng)  # new files, new identities
    warm = build_datasets(_config(prefixes, cache), SIZES)
    assert not isinstance(warm[0].datasets[1].indexed, described.DescribedCorpus)
    fresh = build_datasets(_config(prefixes, None), SIZES)
    np.testing.assert_array_equal(warm[0].dataset_index, fresh[0].dataset_index)
    assert len(warm[0].datasets[1]) == len(fresh[0].datasets[1])


def test_idx_bytes_changed_under_the_same_identity_fail_at_first_read(built):
    """An .idx rewritten in place with its times restored (the stat check cannot see
    it): the member's first read compares its bytes with the recorded sha256."""
    prefixes, cache, _ = built
    warm = build_datasets(_config(prefixes, cache), SIZES)
    idx = prefixes[2] + ".idx"
    status = os.stat(idx)
    with open(idx, "r+b") as stream:  # move a token between two lengths: same size
        stream.seek(34)
        first, second = np.frombuffer(stream.read(8), "<i4")
        stream.seek(34)
        stream.write(np.array([first - 1, second + 1], "<i4").tobytes())
    os.utime(idx, ns=(status.st_atime_ns, status.st_mtime_ns))
    member = warm[0].datasets[2]
    with pytest.raises(DataError, match=r"corpus2\.idx.*sha256.*-bundle-description\.json"):
        member.__getitems__([0])
    # A second read is refused too: the failed check leaves no arrays behind to serve.
    with pytest.raises(DataError, match=r"corpus2\.idx"):
        member.__getitems__([0])
    with pytest.raises(DataError, match=r"corpus2\.idx"):
        len(member.indexed.sequence_lengths)


def test_descriptions_do_not_grow_with_the_prefixes(tmp_path):
    """The per-prefix lists (jobs, recipes, prefixes, identities) are digests in the
    record's and the bundle's JSON descriptions, kept as arrays: a warm start of many
    prefixes reads and hashes a few KB of JSON, not megabytes."""
    rng = np.random.default_rng(3)
    sizes = {}
    for count in (4, 60):
        directory = tmp_path / str(count)
        directory.mkdir()
        prefixes = [
            write_corpus(str(directory / f"corpus{number}"), rng.integers(0, 50, 200), rng)
            for number in range(count)
        ]
        cache = str(directory / "cache")
        config = ours_config(blend=(prefixes, [1.0] * count), path_to_cache=cache,
                             random_seed=5, sequence_length=16, split="90,8,2")
        cold = build_datasets(config, [40 * count, 4 * count, count])
        warm = build_datasets(config, [40 * count, 4 * count, count])
        np.testing.assert_array_equal(cold[0].dataset_index, warm[0].dataset_index)
        assert isinstance(warm[0].datasets[0].indexed, described.DescribedCorpus)
        sizes[count] = sum(
            os.path.getsize(path) for path in glob.glob(os.path.join(cache, "*description.json"))
        )
    # a prefix's path still appears in the large members' own entries (none here)
    assert sizes[60] < sizes[4] + 2048, sizes


def test_warm_start_makes_each_member_at_its_first_read(built):
    """A warm start makes no member dataset and opens no corpus up front (a blend of
    10,000 prefixes would make 30,000): its lengths come from the bundle's table, each
    member is made at its first read, and pickling carries none of them."""
    prefixes, cache, cold = built
    warm = build_datasets(_config(prefixes, cache), SIZES)
    for first, second in zip(cold, warm):
        assert second.datasets.made == 0
        assert second.datasets.lengths.tolist() == [len(member) for member in first.datasets]
    train = warm[0]
    reads = [int(k) for k in np.flatnonzero(train.dataset_index == 1)[:3]]
    batch = train.__getitems__(reads)
    assert train.datasets.made == 1  # member 1 only
    for key, value in cold[0].__getitems__(reads).items():
        np.testing.assert_array_equal(value, batch[key])
    shipped = pickle.loads(pickle.dumps(train))
    assert shipped.datasets.made == 0
    for key, value in _batches(cold[0]).items():
        np.testing.assert_array_equal(value, _batches(shipped)[key])
    assert train.datasets[1] is train.datasets[1]
    assert repr(train.datasets[2]) == repr(cold[0].datasets[2])
