"""Raw shards tokenized on a real local Ray cluster (127.0.0.1, 2 CPUs): the samples and
the corpus bytes of the in-process producer."""

from __future__ import annotations

import filecmp
import os
import sys
import time

import numpy as np
import pytest

ray = pytest.importorskip("ray")

from raw_shards_helpers import write_shards  # noqa: E402

import megadata_core as mdc  # noqa: E402
from megadata_core.datasets import raw_member  # noqa: E402
from megadata_core.preprocess import ByteTokenizer  # noqa: E402


@pytest.fixture(scope="module")
def cluster():
    paths = [p for p in sys.path if p and os.path.isdir(p)]
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": os.pathsep.join(paths)}})
    yield
    ray.shutdown()


def _train(shards, cache, engine=None):
    raw = mdc.RawShards(shards, ByteTokenizer, window=2, piece_size=4096, engine=engine)
    config = mdc.GPTDataConfig(random_seed=9, sequence_length=32, blend=([raw], None),
                               split="100,0,0", path_to_cache=str(cache), eod_id=256)
    return mdc.build_datasets(config, [300, None, None])[0]


def test_a_ray_engine_makes_the_same_corpus_and_samples(cluster, tmp_path):
    shards = write_shards(tmp_path, counts=(200, 150))
    here = _train(shards, tmp_path / "here")
    expected = here.__getitems__(np.arange(300))["tokens"]
    on_ray = _train(shards, tmp_path / "ray", engine="ray")
    assert np.array_equal(on_ray.__getitems__(np.arange(300))["tokens"], expected)
    for dataset in (here, on_ray):
        ends = time.monotonic() + 120
        while not dataset.corpus.complete():
            assert time.monotonic() < ends
            dataset.corpus._raise_error()
            time.sleep(0.05)
    for k in range(len(shards)):
        for suffix in (".bin", ".idx"):
            assert filecmp.cmp(here.corpus.shard_prefix(k) + suffix,
                               on_ray.corpus.shard_prefix(k) + suffix, shallow=False)
    raw_member.stop_raw_corpora()


def test_hosts_sharing_a_store_on_ray_tokenize_each_piece_once(cluster, tmp_path):
    """Two hosts (a cache each, one shared store) whose pieces go to the same cluster:
    each piece is made once, by the host that claimed its shard, and both read the same
    samples as the in-process producer."""
    shards = write_shards(tmp_path, counts=(120, 90, 140, 60), seed=5)
    expected = _train(shards, tmp_path / "here").__getitems__(np.arange(300))["tokens"]
    raw_member.stop_raw_corpora()
    hosts = []
    for name in ("a", "b"):
        raw = mdc.RawShards(shards, ByteTokenizer, window=2, piece_size=4096, engine="ray",
                            shared=str(tmp_path / "shared"))
        config = mdc.GPTDataConfig(random_seed=9, sequence_length=32, blend=([raw], None),
                                   split="100,0,0", path_to_cache=str(tmp_path / name),
                                   eod_id=256)
        hosts.append(mdc.build_datasets(config, [300, None, None])[0])
    for dataset in hosts:
        assert np.array_equal(dataset.__getitems__(np.arange(300))["tokens"], expected)
    ends = time.monotonic() + 120
    while not all(dataset.corpus.complete() for dataset in hosts):
        assert time.monotonic() < ends
        for dataset in hosts:
            dataset.corpus._raise_error()
        time.sleep(0.05)
    made = sorted(index for dataset in hosts for index in dataset.corpus.made_here)
    assert made == list(range(hosts[0].corpus.pieces))
    raw_member.stop_raw_corpora()
