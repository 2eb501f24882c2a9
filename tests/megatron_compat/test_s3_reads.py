"""``IndexedDataset("s3://...", object_storage_config=...)`` and a GPT build over s3://
against moto's S3 server on 127.0.0.1: the reads equal the local corpus's."""

from __future__ import annotations

import os

import numpy as np
import pytest
from compat_helpers import build, make_corpora, ours

pytest.importorskip("tensorstore")
pytest.importorskip("moto")

from loopback.object_stores import MotoS3Server  # noqa: E402

BUCKET = "megatron-corpora"


@pytest.fixture(scope="module")
def s3_corpus(tmp_path_factory):
    """``(s3 prefix, local prefix)`` of one corpus uploaded to a moto server."""
    local = make_corpora(tmp_path_factory.mktemp("corpora"), 1, (80, 120), seed=9)[0]
    server = MotoS3Server()
    try:
        client = server.client()
        client.create_bucket(Bucket=BUCKET)
        for ext in ("bin", "idx"):
            client.upload_file(f"{local}.{ext}", BUCKET, f"data/corpus.{ext}")
        yield server, f"s3://{BUCKET}/data/corpus", local
    finally:
        server.stop()


@pytest.fixture(params=["default", "tensorstore"])
def s3(s3_corpus, monkeypatch, tmp_path, request):
    """The corpus prefixes with the drop-in's default client (boto3, MEGADATA_S3_CLIENT
    unset) or TensorStore (MEGADATA_S3_CLIENT=tensorstore) sent to the moto server (no
    host credentials, a private .idx cache)."""
    from megadata_adapters.storage import tensorstore_bins

    server, remote, local = s3_corpus
    for name, value in dict(
        AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing", AWS_REGION="us-east-1",
        AWS_ENDPOINT_URL=server.endpoint,
        AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "no-aws-credentials"),
        AWS_CONFIG_FILE=str(tmp_path / "no-aws-config"),
    ).items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv(tensorstore_bins.OPTIONS_ENV, raising=False)
    tensorstore_bins.configure(cache_dir=str(tmp_path / "megadata_idx"))
    # configure() writes os.environ directly; have monkeypatch restore it afterwards
    monkeypatch.setenv(tensorstore_bins.OPTIONS_ENV, os.environ[tensorstore_bins.OPTIONS_ENV])
    if request.param == "default":
        monkeypatch.delenv("MEGADATA_S3_CLIENT", raising=False)
    else:
        monkeypatch.setenv("MEGADATA_S3_CLIENT", request.param)
    return remote, local


def test_indexed_dataset_reads_equal_local(s3, tmp_path):
    remote, local = s3
    module = ours("indexed_dataset")
    config = module.ObjectStorageConfig(path_to_idx_cache=str(tmp_path / "idx_cache"))
    theirs = module.IndexedDataset(remote, multimodal=False, mmap=False,
                                   object_storage_config=config)
    mine = module.IndexedDataset(local, multimodal=False, mmap=True)
    assert isinstance(theirs.bin_reader, module._S3BinReader)
    boto3_read = type(theirs.corpus._bin_source).__name__ == "Boto3Source"
    assert boto3_read == ("MEGADATA_S3_CLIENT" not in os.environ)
    # boto3: the .idx cached where megatron-core caches it (path_to_idx_cache + bucket/key)
    cached = tmp_path / "idx_cache" / BUCKET / "data" / "corpus.idx"
    assert cached.is_file() == boto3_read
    assert module.IndexedDataset.exists(remote)
    assert not module.IndexedDataset.exists(remote + "_missing")
    assert len(theirs) == len(mine) > 0
    for name in ("sequence_lengths", "document_indices"):
        assert np.array_equal(getattr(theirs, name), getattr(mine, name)), name
    assert np.array_equal(theirs.index.sequence_pointers, mine.index.sequence_pointers)
    for i in range(len(mine)):
        assert np.array_equal(theirs[i], mine[i]), i
    rng = np.random.default_rng(0)
    for i in rng.integers(0, len(mine), 20).tolist():
        length = int(mine.sequence_lengths[i])
        offset = int(rng.integers(0, length))
        size = int(rng.integers(0, length - offset + 1))
        assert np.array_equal(theirs.get(i, offset, size), mine.get(i, offset, size))
    assert np.array_equal(theirs[2:7][3], mine[2:7][3])
    with pytest.raises(ValueError, match="mmap"):
        module.IndexedDataset(remote, mmap=True, object_storage_config=config)


def test_gpt_build_over_s3_equals_local(s3, tmp_path):
    remote, local = s3
    kw = dict(random_seed=4, sequence_length=16, split="80,20,0",
              object_storage_cache_path=str(tmp_path / "idx_cache"))
    them = build(ours, "GPTDataset", [50, 10, 0], blend=([remote], None), **kw)
    us = build(ours, "GPTDataset", [50, 10, 0], blend=([local], None), **kw)
    for left, right in zip(them, us):
        assert (left is None) == (right is None)
        if left is None:
            continue
        assert len(left) == len(right)
        for index in range(len(left)):
            a, b = left[index], right[index]
            assert list(a) == list(b)
            for key in a:
                assert np.array_equal(np.asarray(a[key]), np.asarray(b[key])), (index, key)
