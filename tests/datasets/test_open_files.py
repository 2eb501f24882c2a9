"""Open files bounded: a blend of 1,000 corpora builds and serves shuffled batches from
every member in a process whose descriptor limit is far below the member count, and the
samples equal those of an unbounded process; the LRU itself drops the least recently used
and never a map a reader still holds."""

from __future__ import annotations

import hashlib
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

MEMBERS = 1000
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Writes nothing: builds the blend over the corpora in argv[1] (cache argv[2] or none),
# reads shuffled batches that touch every member, prints the digest of every batch.
READER = textwrap.dedent(
    """
    import hashlib, json, os, resource, sys
    import numpy as np
    import megadata_core as mdc

    directory, cache, limit, budget, mmap = sys.argv[1:6]
    if int(limit):
        resource.setrlimit(resource.RLIMIT_NOFILE, (int(limit), int(limit)))
    prefixes = sorted(
        os.path.join(directory, name[:-4]) for name in os.listdir(directory)
        if name.endswith(".idx")
    )
    config = mdc.GPTDataConfig(
        random_seed=3, sequence_length=8, blend=(prefixes, [1.0] * len(prefixes)),
        split="90,10,0", path_to_cache=None if cache == "-" else cache, eod_id=0,
        max_open_files=int(budget), mmap_bin_files=mmap == "1",
        mid_level_dataset_surplus=0.05,
    )
    digests = []
    for attempt in range(2):  # the second build is a warm start when cached
        train = mdc.build_datasets(config, [4000, 400, 0])[0]
        order = np.random.default_rng(attempt).permutation(len(train))
        seen = set()
        for start in range(0, len(order), 256):
            batch = train.__getitems__(order[start : start + 256])
            seen.update(batch["dataset_id"].tolist())
            digests.append(hashlib.sha256(batch["tokens"].tobytes()).hexdigest())
        assert len(seen) == len(prefixes), len(seen)
    print(json.dumps(digests))
    """
)


@pytest.fixture(scope="module")
def corpora(tmp_path_factory) -> str:
    directory = tmp_path_factory.mktemp("members")
    rng = np.random.default_rng(11)
    for number in range(MEMBERS):
        write_corpus(str(directory / f"c{number:04d}"), rng.integers(2, 40, 12), rng, low=1,
                     vocab=1000, one_document=True)
    return str(directory)


def _read(corpora: str, cache: str, limit: int, budget: int, mmap: bool) -> list[str]:
    command = [sys.executable, "-c", READER, corpora, cache, str(limit), str(budget),
               "1" if mmap else "0"]
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


@pytest.mark.parametrize("mmap", [True, False], ids=["mmap", "pread"])
def test_a_thousand_members_read_under_a_limit_of_64_descriptors(corpora, tmp_path, mmap):
    unbounded = _read(corpora, "-", 0, 4096, mmap)
    assert _read(corpora, "-", 64, 24, mmap) == unbounded
    cache = str(tmp_path / "cache")
    assert _read(corpora, cache, 64, 24, mmap) == unbounded  # cold, then warm


def _map(tmp_path, name: str) -> mdc.IndexedDataset:
    prefix = str(tmp_path / name)
    with mdc.IndexedDatasetWriter(prefix, np.uint16) as out:
        out.add_document(np.arange(1, 7, dtype=np.uint16), [3, 3])
    return mdc.IndexedDataset(prefix)


def test_the_least_recently_used_map_is_dropped_and_reopened(tmp_path):
    budget = OpenFiles(4)  # two corpora's .idx and .bin maps
    corpora = [_map(tmp_path, f"c{n}") for n in range(3)]
    for corpus in corpora:
        corpus.share_open_files(budget)  # each holds its .idx map
    corpora[0][0], corpora[1][0]  # maps 0's and 1's .bin: 2 is released
    assert "sequence_lengths" not in corpora[2].__dict__ and len(budget) == 4
    corpora[0][1]  # 0 is now the most recently used
    held = corpora[1][1]  # a reader still holds tokens of 1 (a view of its map)
    corpora[1][0]
    corpora[0][0]
    corpora[2][0]  # re-maps 2's .idx and .bin: releases 1, the least recently used
    assert corpora[1]._bin_map is None and corpora[0]._bin_map is not None
    assert "sequence_lengths" not in corpora[1].__dict__
    assert len(budget) == 4
    np.testing.assert_array_equal(held, [4, 5, 6])  # still readable: the view keeps its map
    np.testing.assert_array_equal(corpora[1][0], [1, 2, 3])  # mapped again


def test_max_open_files_must_be_a_positive_int():
    with pytest.raises(mdc.DataError, match="max_open_files"):
        mdc.GPTDataConfig(random_seed=1, sequence_length=4, max_open_files=0)
    with pytest.raises(mdc.DataError, match="max_open_files"):
        OpenFiles(-1)


def test_budget_travels_with_a_pickled_blend(tmp_path):
    import pickle

    budget = OpenFiles(5)
    corpora = [_map(tmp_path, f"p{n}") for n in range(2)]
    for corpus in corpora:
        corpus.share_open_files(budget)
    copies = pickle.loads(pickle.dumps(corpora))
    assert copies[0]._open_files is copies[1]._open_files
    assert copies[0]._open_files.limit == 5
    assert hashlib.sha256(copies[1][0].tobytes()).digest() == hashlib.sha256(
        corpora[1][0].tobytes()
    ).digest()
