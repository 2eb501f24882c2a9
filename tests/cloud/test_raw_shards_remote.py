"""Raw shards by URL (s3://, gs://, http(s):// on stores at 127.0.0.1) stream the samples
their local copies give, and a replaced object is refused by name."""

from __future__ import annotations

import numpy as np
import pytest
from test_preprocess_remote_inputs import _local, _upload, _write_inputs

import megadata_core as mdc
from megadata_core.datasets import raw_member
from megadata_core.preprocess import ByteTokenizer


@pytest.fixture(autouse=True)
def _fresh_corpora():
    """Each test opens its corpora anew (a process keeps one per cache directory)."""
    yield
    raw_member.stop_raw_corpora()


def _samples(shards, cache, count: int = 40) -> np.ndarray:
    raw = mdc.RawShards(shards, ByteTokenizer, window=2, piece_size=300)
    config = mdc.GPTDataConfig(random_seed=4, sequence_length=16, blend=([raw], None),
                               split="100,0,0", path_to_cache=str(cache), eod_id=256)
    train = mdc.build_datasets(config, [count, None, None])[0]
    return train.__getitems__(np.arange(count))["tokens"]


def test_remote_shards_stream_the_samples_of_local_ones(store, tmp_path):
    inputs = _write_inputs(tmp_path)
    order = ["jsonl", "jsonl.gz", "parquet"]
    local = _local(tmp_path, inputs)
    urls = _upload(store, tmp_path, inputs)
    expected = _samples([local[s] for s in order], tmp_path / "local")
    assert np.array_equal(_samples([urls[s] for s in order], tmp_path / "remote"), expected)


def test_a_replaced_object_is_refused_by_name(store, tmp_path):
    inputs = _write_inputs(tmp_path)
    urls = _upload(store, tmp_path, {"jsonl": inputs["jsonl"]})
    _samples([urls["jsonl"]], tmp_path / "cache")
    raw_member.stop_raw_corpora()
    store.put(f"inputs/{tmp_path.name}/in.jsonl", inputs["jsonl"].replace(b"document", b"Doc"))
    with pytest.raises(mdc.DataError, match=f"{urls['jsonl']}: raw shard changed"):
        _samples([urls["jsonl"]], tmp_path / "cache")
