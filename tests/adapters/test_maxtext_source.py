"""The source megadata's MaxText hook serves (``MegadataNpySource``), without MaxText: its
read-ahead (a host's indices in order, read 64 at a time, from several threads) gives
every sample exactly as the one-sample read does, for any host of any host count, in
order, out of order and at random; a blend's too. (MaxText's own values are compared in
tests/trainers/test_maxtext.py, which needs MaxText.)"""

from __future__ import annotations

import random
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import megadata_core as mdc
from megadata_adapters.trainers.maxtext.samples import MegadataNpySource, MmapNpyPlan

EOD = 1
SEQ = 32


@pytest.fixture(scope="module")
def corpora(tmp_path_factory):
    root = tmp_path_factory.mktemp("maxtext-source")
    prefixes = []
    for name, documents, seed in (("a", 400, 0), ("b", 150, 1)):
        rng = np.random.default_rng(seed)
        prefix = str(root / name)
        with mdc.IndexedDatasetWriter(prefix, np.uint16) as writer:
            for _ in range(documents):
                n = int(rng.integers(3, 60))
                writer.add_item(np.append(rng.integers(2, 1000, n), EOD).astype(np.uint16))
                writer.end_document()
        prefixes.append(prefix)
    return root, prefixes


def _plan(root, prefixes, blend: bool) -> MmapNpyPlan:
    common = dict(seq_length=SEQ, eod_id=EOD, seed=7, split=None, split_index=0, num_epoch=1)
    if not blend:
        return MmapNpyPlan([(str(root / "i"), prefixes[0], 700)], None, None,
                     path_to_cache=str(root / "i"), **common)
    return MmapNpyPlan([(str(root / "ia"), prefixes[0], 500), (str(root / "ib"), prefixes[1], 300)],
                 [0.6, 0.4], 760, path_to_cache=str(root / "blend"), **common)


@pytest.mark.parametrize("blend", [False, True], ids=["one corpus", "blend"])
@pytest.mark.parametrize(("host_index", "host_count"), [(0, 1), (1, 3), (2, 3)])
def test_read_ahead_equals_one_sample_reads(corpora, blend, host_index, host_count):
    root, prefixes = corpora
    source = MegadataNpySource(_plan(root, prefixes, blend), host_index, host_count)
    expected = {i: source._read_one(i) for i in range(len(source))}
    assert all(e.dtype == np.int32 and e.shape == (SEQ + 1,) for e in expected.values())
    mine = list(range(host_index, len(source), host_count))
    # in order from 4 threads (Grain's prefetch), twice; out of order; at random
    with ThreadPoolExecutor(4) as pool:
        for _ in range(2):
            got = list(pool.map(lambda i: source[i]["text"], mine))
            assert all(np.array_equal(g, expected[i]) for g, i in zip(got, mine))
    rng = random.Random(host_index * 10 + host_count)
    shuffled = mine[:]
    rng.shuffle(shuffled)
    for i in shuffled + [rng.randrange(len(source)) for _ in range(50)]:
        assert np.array_equal(source[i]["text"], expected[i])
    assert np.array_equal(source[-1]["text"], expected[len(source) - 1])
    with pytest.raises(IndexError):
        source[len(source)]


def test_read_ahead_keeps_a_few_blocks(corpora):
    root, prefixes = corpora
    source = MegadataNpySource(_plan(root, prefixes, False))
    for i in range(len(source)):
        source[i]
    assert 0 < len(source._blocks) <= MegadataNpySource.BLOCKS_KEPT


def test_pickled_source_keeps_its_host(corpora):
    import pickle

    root, prefixes = corpora
    source = MegadataNpySource(_plan(root, prefixes, True), 1, 2)
    copy = pickle.loads(pickle.dumps(source))
    assert copy._host == (1, 2) and len(copy) == len(source)
    assert all(np.array_equal(copy[i]["text"], source[i]["text"]) for i in range(1, 200, 2))
