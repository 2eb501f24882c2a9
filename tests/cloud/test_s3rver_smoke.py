"""A corpus read through s3rver (ranges streamed from its files) behind the shaping proxy
equals the local copy. Needs node and npm (s3rver is installed once into a cache folder);
skipped with the reason otherwise."""

from __future__ import annotations

import numpy as np
import pytest
from cloud_helpers import BUCKET, CORPORA, EOD, configure_cache, corpus_objects

import megadata_core as mdc
from loopback import s3rver
from loopback.shaping_proxy import ShapingProxy


def _use_s3rver(monkeypatch, tmp_path, endpoint: str) -> None:
    """S3 clients of this process go to ``endpoint`` with s3rver's keys, no config files."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", s3rver.ACCESS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", s3rver.SECRET_KEY)
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))


@pytest.fixture(scope="module")
def s3rver_store(local_corpora):
    try:
        s3rver.s3rver_script()
    except s3rver.S3rverUnavailableError as error:
        pytest.skip(f"s3rver is not available: {error}")
    objects = {f"{BUCKET}/{key}": path for key, path in corpus_objects(local_corpora).items()}
    server = s3rver.S3rverServer(objects, processes=2)
    proxy = ShapingProxy(server.endpoints, latency_s=0.005, bandwidth=50e6)
    yield proxy
    proxy.stop()
    server.stop()


def test_corpora_and_gpt_batches_through_s3rver_equal_local(
    s3rver_store, local_corpora, monkeypatch, tmp_path
):
    _use_s3rver(monkeypatch, tmp_path, s3rver_store.endpoint)
    configure_cache(monkeypatch, tmp_path / "idx_cache")
    s3rver_store.reset_counts()
    for name in CORPORA:
        remote = mdc.IndexedDataset(f"s3://{BUCKET}/corpora/{name}")
        local = mdc.IndexedDataset(local_corpora[name])
        assert len(remote) == len(local)
        for index in (0, 7, len(local) - 1):
            np.testing.assert_array_equal(remote[index], local[index])
    config = {"random_seed": 5, "sequence_length": 128, "eod_id": EOD, "split": "100,0,0"}
    remote_train = mdc.build_datasets(
        mdc.GPTDataConfig(blend=f"s3://{BUCKET}/corpora/web", path_to_cache=str(tmp_path / "r"),
                          **config), [200, 0, 0])[0]  # fmt: skip
    local_train = mdc.build_datasets(
        mdc.GPTDataConfig(blend=local_corpora["web"], path_to_cache=str(tmp_path / "l"),
                          **config), [200, 0, 0])[0]  # fmt: skip
    indices = np.random.default_rng(0).integers(0, len(local_train), 16)
    np.testing.assert_array_equal(
        remote_train.__getitems__(indices)["tokens"], local_train.__getitems__(indices)["tokens"]
    )
    assert s3rver_store.requests > 0  # the reads went through the proxy, not around it


def test_object_sizes_and_preprocessing_through_s3rver(tmp_path, monkeypatch):
    """s3rver answers the range bytes=0-0 as outside any object: sizes are still exact
    (every input was once read as empty, silently), and a jsonl object preprocesses to
    the local file's corpus."""
    import json

    from megadata_core.format.sources import open_source
    from megadata_core.preprocess import ByteTokenizer, local_engine, preprocess_tasks

    try:
        s3rver.s3rver_script()
    except s3rver.S3rverUnavailableError as error:
        pytest.skip(f"s3rver is not available: {error}")
    files = {}
    for size in (2, 3, 1000):  # (s3rver garbles ranges of 0- and 1-byte objects)
        path = tmp_path / f"object-{size}"
        path.write_bytes(b"x" * size)
        files[size] = str(path)
    lines = tmp_path / "input.jsonl"
    lines.write_text("".join(json.dumps({"text": f"doc {i} " * i}) + "\n" for i in range(200)))
    objects = {f"{BUCKET}/sizes/{size}": path for size, path in files.items()}
    objects[f"{BUCKET}/input.jsonl"] = str(lines)
    server = s3rver.S3rverServer(objects)
    try:
        _use_s3rver(monkeypatch, tmp_path, server.endpoint)
        for size in files:
            assert open_source(f"s3://{BUCKET}/sizes/{size}").size() == size
        corpora = []
        for number, url in enumerate([str(lines), f"s3://{BUCKET}/input.jsonl"]):
            summary = preprocess_tasks([url], str(tmp_path / f"out{number}"), ByteTokenizer,
                                       append_eod=True, engine=local_engine(1),
                                       task_size=2000)
            assert summary.documents == 200
            prefix = summary.output_prefixes["text"]
            corpora.append([open(prefix + ext, "rb").read() for ext in (".bin", ".idx")])
        assert corpora[0] == corpora[1]
    finally:
        server.stop()
