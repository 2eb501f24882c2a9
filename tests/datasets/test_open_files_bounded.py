"""Every descriptor of a blend under ``max_open_files``: the .bin maps, the memory-mapped
.idx of each member (over 64 KiB) and each member's memory-mapped cache files. A blend of
200 such members is built (cold, then warm) and read in a process whose descriptor limit
is 64, with ``max_open_files`` = 8; the descriptors open after each batch (counted in
/proc/self/fd) never pass 8 plus a fixed allowance, and the samples equal those of an
unbounded process. Also a member whose released .idx or cache file changed is a
DataError naming the file, never stale data."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from corpora import write_corpus

import megadata_core as mdc
from megadata_core.format.reader import OpenFiles

MEMBERS = 200
DOCUMENTS = 4600  # .idx of ~101 KiB (memory-mapped); train split 4554 documents, above
# IN_MEMORY_BELOW: its index arrays go through the cache and are memory-mapped
BUDGET = 8
ALLOWANCE = 12  # the blend's own entry, the bundle blob, stdio, the cache lock, ...
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
pytestmark = pytest.mark.skipif(
    not os.path.isdir("/proc/self/fd"), reason="needs /proc/self/fd to count descriptors"
)

READER = textwrap.dedent(
    """
    import hashlib, json, os, resource, sys
    import numpy as np

    directory, cache, limit, budget = sys.argv[1:5]
    if int(limit):
        resource.setrlimit(resource.RLIMIT_NOFILE, (int(limit), int(limit)))
    import megadata_core as mdc

    def open_descriptors():
        return len(os.listdir("/proc/self/fd")) - 1  # less the listing's own

    prefixes = sorted(
        os.path.join(directory, name[:-4]) for name in os.listdir(directory)
        if name.endswith(".idx")
    )
    config = mdc.GPTDataConfig(
        random_seed=5, sequence_length=16, blend=(prefixes, [1.0] * len(prefixes)),
        split="99,1,0", path_to_cache=cache, eod_id=0, max_open_files=int(budget),
        mid_level_dataset_surplus=0.005,
    )
    baseline = open_descriptors()
    digests, peak = [], 0
    for attempt in range(2):  # cold build, then a warm start
        train = mdc.build_datasets(config, [20000, 200, 0])[0]
        peak = max(peak, open_descriptors() - baseline)
        order = np.random.default_rng(attempt).permutation(len(train))[:12800]
        seen = set()
        for start in range(0, len(order), 256):
            batch = train.__getitems__(order[start : start + 256])
            seen.update(batch["dataset_id"].tolist())
            digests.append(hashlib.sha256(batch["tokens"].tobytes()).hexdigest())
            peak = max(peak, open_descriptors() - baseline)
        assert len(seen) == len(prefixes), len(seen)
        del train, batch
    print(json.dumps({"digests": digests, "peak": peak}))
    """
)


@pytest.fixture(scope="module")
def corpora(tmp_path_factory) -> str:
    directory = tmp_path_factory.mktemp("large_idx")
    rng = np.random.default_rng(21)
    for number in range(MEMBERS):
        write_corpus(str(directory / f"c{number:03d}"), rng.integers(1, 9, DOCUMENTS), rng,
                     low=1, vocab=1000)
    assert os.path.getsize(directory / "c000.idx") > 1 << 16
    return str(directory)


def _read(corpora: str, cache: str, limit: int, budget: int) -> dict:
    command = [sys.executable, "-c", READER, corpora, cache, str(limit), str(budget)]
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def test_large_members_read_under_a_limit_of_64_descriptors(corpora, tmp_path):
    unbounded = _read(corpora, str(tmp_path / "free"), 0, 4096)
    assert unbounded["peak"] > 3 * MEMBERS  # what the bound holds back
    bounded = _read(corpora, str(tmp_path / "bounded"), 64, BUDGET)
    assert bounded["digests"] == unbounded["digests"]
    assert bounded["peak"] <= BUDGET + ALLOWANCE, bounded["peak"]


def _mapped(path: str) -> bool:
    """Whether ``path`` is memory-mapped in this process (/proc/self/maps)."""
    with open("/proc/self/maps") as maps:
        return any(line.rstrip().endswith(" " + path) for line in maps)


def _corpus(prefix: str, documents: int = 50) -> mdc.IndexedDataset:
    tokens = np.arange(1, 3 * documents + 1)
    return mdc.IndexedDataset(write_corpus(prefix, [3] * documents, tokens=tokens))


def test_a_released_idx_is_unmapped_and_a_changed_one_is_refused(tmp_path):
    budget = OpenFiles(1)
    first, second = (_corpus(str(tmp_path / name)) for name in ("a", "b"))
    first.share_open_files(budget)
    expected = first[7].copy()
    second.share_open_files(budget)  # releases the first's .idx map
    assert not _mapped(first.idx_path) and _mapped(second.idx_path)
    np.testing.assert_array_equal(first[7], expected)  # mapped again
    assert _mapped(first.idx_path) and not _mapped(second.idx_path)
    second[0]
    info = os.stat(first.idx_path)
    os.utime(first.idx_path, ns=(info.st_atime_ns, info.st_mtime_ns + 10**9))  # "rewritten"
    with pytest.raises(mdc.DataError, match=r"a\.idx: the \.idx changed"):
        first[7]


def test_released_cache_maps_are_unmapped_and_a_changed_file_is_refused(tmp_path):
    corpus = _corpus(str(tmp_path / "c"), 500)
    budget = OpenFiles(5)
    corpus.share_open_files(budget)
    config = mdc.GPTDataConfig(
        random_seed=1, sequence_length=4, path_to_cache=str(tmp_path / "cache"), eod_id=0
    )
    dataset = mdc.GPTDataset(corpus, np.arange(500), 2000, config)
    files = [array.filename for array in dataset._arrays.values()]
    assert len(files) == 3 and all(_mapped(name) for name in files)
    expected = dataset.__getitems__([0, 5, 9])["tokens"].copy()
    assert len(budget) == 5  # 3 cache maps, the .idx and the .bin
    dataset.release_open_files()
    assert not any(_mapped(name) for name in files)
    np.testing.assert_array_equal(dataset.__getitems__([0, 5, 9])["tokens"], expected)
    assert all(_mapped(name) for name in files)
    dataset.release_open_files()
    info = os.stat(files[1])
    os.utime(files[1], ns=(info.st_atime_ns, info.st_mtime_ns + 10**9))
    with pytest.raises(mdc.DataError, match=os.path.basename(files[1]) + ".*changed"):
        dataset.__getitems__([0])
