"""The source megadata's MaxText hook serves (``MegadataNpySource``), without MaxText: its
read-ahead (a host's indices in order, read 64 at a time, from several threads) gives
every sample exactly as the one-sample read does, for any host of any host count, in
order, out of order and at random; a blend's too. (MaxText's own values are compared in
tests/trainers/test_maxtext.py, which needs MaxText.)"""

from __future__ import annotations

import os
import random
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import megadata_core as mdc
from megadata_adapters.trainers.maxtext.source import MegadataNpySource, MmapNpyPlan

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


def _config_file(tmp_path, prefixes, **fields):
    import json

    values = {"blend": [[prefixes[0]], None], "split": "1,0,0",
              "path_to_cache": str(tmp_path / "cache"), **fields}
    path = tmp_path / "data.json"
    path.write_text(json.dumps(values))
    return str(path)


@pytest.mark.parametrize(("host_index", "host_count"), [(0, 1), (1, 2)])
def test_configured_source_reads_ahead_megadatas_own_samples(corpora, tmp_path, host_index,
                                                             host_count):
    """A data config's samples under MaxText's keys, read ahead as the one-sample reads;
    best_fit bins with segment keys; picklable for Grain workers."""
    import pickle

    from megadata_adapters.trainers.maxtext.keys import data_config, to_maxtext
    from megadata_adapters.trainers.maxtext.source import ConfiguredSource

    _, prefixes = corpora
    path = _config_file(tmp_path, prefixes, packing="best_fit", document_masking=True)
    config, extras = data_config(path, SEQ, EOD, seed=3)
    assert (config.sequence_length, config.random_seed, config.eod_id) == (SEQ, 3, EOD)
    source = ConfiguredSource(config, 300, 0, extras, host_index, host_count)
    mine = list(range(host_index, len(source), host_count))
    with ThreadPoolExecutor(3) as pool:
        got = list(pool.map(lambda i: source[i], mine))
    expected = to_maxtext(source.dataset.__getitems__(np.array(mine)))
    assert "max_seqlen" not in got[0] and got[0]["inputs"].shape == (SEQ,)
    for key in got[0]:
        np.testing.assert_array_equal(np.stack([g[key] for g in got]), expected[key], key)
    copy = pickle.loads(pickle.dumps(source))
    for i in mine[:5]:
        assert all(np.array_equal(copy[i][k], source[i][k]) for k in source[i])


@pytest.mark.parametrize(("fields", "message"), [
    ({"sequence_length": 16}, "sequence_length: .* says 16, MaxText's max_target_length is 32"),
    ({"packing_typo": "x"}, "'packing_typo' is no GPTDataConfig field"),
])
def test_data_config_errors_name_the_setting(corpora, tmp_path, fields, message):
    from megadata_adapters.trainers.maxtext.keys import data_config

    _, prefixes = corpora
    with pytest.raises(mdc.DataError, match=message):
        data_config(_config_file(tmp_path, prefixes, **fields), SEQ, EOD, seed=0)
    (tmp_path / "broken.json").write_text("{")
    with pytest.raises(mdc.DataError, match="grain_train_files: cannot read the JSON"):
        data_config(str(tmp_path / "broken.json"), SEQ, EOD, seed=0)


def test_reshard_states_keeps_the_global_position():
    from megadata_adapters.trainers.maxtext import reshard_states

    assert reshard_states([{"next_index": 6}] * 2, 3) == [{"next_index": 4}] * 3
    assert reshard_states([{"next_index": 6}] * 2, 1) == [{"next_index": 12}]
    assert reshard_states([{"next_index": 0}] * 4, 2) == [{"next_index": 0}] * 2
    with pytest.raises(mdc.DataError, match="not in step"):
        reshard_states([{"next_index": 6}, {"next_index": 5}], 1)
    with pytest.raises(mdc.DataError, match="12 samples spent on 2 hosts do not divide among 5"):
        reshard_states([{"next_index": 6}] * 2, 5)
    with pytest.raises(mdc.DataError, match="Grain worker processes"):
        reshard_states([{"workers_state": {}, "next_index": 6}], 1)
    with pytest.raises(mdc.DataError, match="new_count: 0"):
        reshard_states([{"next_index": 6}], 0)


def test_reshard_iterator_checkpoint_rewrites_the_files(tmp_path):
    import json

    from megadata_adapters.trainers.maxtext import reshard_iterator_checkpoint

    directory = tmp_path / "7" / "iter"
    directory.mkdir(parents=True)
    for index in range(2):
        (directory / f"process_{index}-of-2.json").write_text(
            json.dumps({"next_index": 6}, indent=4))
    written = reshard_iterator_checkpoint(str(directory), 3)
    assert sorted(os.path.basename(p) for p in written) == sorted(os.listdir(directory))
    assert sorted(os.listdir(directory)) == [f"process_{i}-of-3.json" for i in range(3)]
    assert all(json.loads(open(p).read()) == {"next_index": 4} for p in written)
    (directory / "process_2-of-3.json").unlink()
    with pytest.raises(mdc.DataError, match="not all there"):
        reshard_iterator_checkpoint(str(directory), 1)
    with pytest.raises(mdc.DataError, match="expected one set"):
        reshard_iterator_checkpoint(str(tmp_path), 1)
