"""``MEGADATA_S3_CLIENT=boto3``: ``s3://`` read through boto3 as megatron-core reads it
(adapters/storage/s3_boto3.py), against moto's S3 server on 127.0.0.1 and against
megatron-core's own test double (Megatron-LM's ``test_bin_reader`` patches
``boto3.client`` with a client whose ``head_object`` answers ``{}`` and whose
``get_object`` reads its Range end as exclusive)."""

from __future__ import annotations

import os
import pickle
import shutil
from types import SimpleNamespace

import numpy as np
import pytest
from cloud_helpers import BUCKET

import megadata_core as mdc
from megadata_adapters.storage import s3_boto3

boto3 = pytest.importorskip("boto3")


@pytest.fixture
def via_boto3(monkeypatch, tmp_path, s3_server):
    """boto3 pointed at the moto server (no host credentials), a private .idx cache."""
    for name, value in dict(
        MEGADATA_S3_CLIENT="boto3", MEGADATA_S3_CACHE=str(tmp_path / "s3-cache"),
        AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing",
        AWS_DEFAULT_REGION="us-east-1", AWS_ENDPOINT_URL=s3_server.endpoint,
        AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "none"),
        AWS_CONFIG_FILE=str(tmp_path / "none"),
    ).items():
        monkeypatch.setenv(name, value)
    return s3_server


@pytest.mark.parametrize("block", [None, "1000"], ids=["256MiB-blocks", "1000-byte-blocks"])
def test_reads_equal_the_local_corpus(via_boto3, local_corpora, monkeypatch, block):
    if block:
        monkeypatch.setenv(s3_boto3.BLOCK_ENV, block)
    local = mdc.IndexedDataset(local_corpora["web"])
    remote = mdc.IndexedDataset(f"s3://{BUCKET}/corpora/web", mmap=False)
    assert type(remote._bin_source).__name__ == "Boto3Source"
    assert len(remote) == len(local)
    order = np.random.default_rng(0).permutation(len(local))
    for index in order.tolist():
        np.testing.assert_array_equal(remote[index], local[index])
    copy = pickle.loads(pickle.dumps(remote._bin_source))
    assert copy.path == remote._bin_source.path and copy.read(0, 4) == remote._bin_source.read(0, 4)


def test_idx_copy_is_kept_per_object_version(via_boto3, tmp_path):
    source = s3_boto3.open_source(f"s3://{BUCKET}/corpora/web.idx")
    first = source.local_copy()
    assert os.path.dirname(first) == str(tmp_path / "s3-cache")
    assert source.local_copy() == first  # size and ETag unchanged: no second download
    assert [n for n in os.listdir(tmp_path / "s3-cache") if n.endswith(".tmp")] == []


def test_short_and_missing_objects_are_data_errors(via_boto3, local_corpora):
    client = via_boto3.client()
    with open(local_corpora["web"] + ".bin", "rb") as stream:
        data = stream.read()
    client.put_object(Bucket=BUCKET, Key="short/web.bin", Body=data[: len(data) // 2])
    client.upload_file(local_corpora["web"] + ".idx", BUCKET, "short/web.idx")
    with pytest.raises(mdc.DataError, match=r"s3://.*short/web\.bin: .*shorter than"):
        mdc.IndexedDataset(f"s3://{BUCKET}/short/web", mmap=False)
    with pytest.raises(mdc.DataError, match=r"s3://.*nothing/here\.idx: head_object failed"):
        mdc.IndexedDataset(f"s3://{BUCKET}/nothing/here", mmap=False)


def test_the_choice_is_named(monkeypatch):
    monkeypatch.setenv(s3_boto3.CLIENT_ENV, "botocore")
    with pytest.raises(mdc.DataError, match="MEGADATA_S3_CLIENT: 'botocore' is not"):
        s3_boto3.open_source("s3://b/k")
    monkeypatch.setenv(s3_boto3.CLIENT_ENV, "boto3")
    monkeypatch.setenv(s3_boto3.BLOCK_ENV, "0")
    with pytest.raises(mdc.DataError, match="MEGADATA_S3_BLOCK_BYTES: 0 must be > 0"):
        s3_boto3.open_source("s3://b/k")


class _MegatronsTestClient:
    """megatron-core's test double (tests/unit_tests/data/test_bin_reader.py's
    ``_LocalClient``): objects are the files ``/BUCKET/KEY``, ``head_object`` says nothing,
    ``get_object`` reads ``end - start`` bytes of ``Range="bytes=start-end"``."""

    def __init__(self, *args) -> None:
        pass

    def download_file(self, Bucket, Key, Filename):  # noqa: N803 (boto3's names)
        shutil.copyfile(os.path.join("/", Bucket, Key), Filename)

    def head_object(self, Bucket, Key):  # noqa: N803
        if not os.path.exists(os.path.join("/", Bucket, Key)):
            raise FileNotFoundError(os.path.join("/", Bucket, Key))
        return {}

    def get_object(self, Bucket, Key, Range):  # noqa: N803
        begin, end = map(int, Range.split("=")[1].split("-"))
        with open(os.path.join("/", Bucket, Key), "rb") as stream:
            stream.seek(begin)
            data = stream.read(end - begin)
        return {"Body": SimpleNamespace(read=lambda: data)}


def test_megatron_drop_in_reads_through_megatrons_own_test_client(
    local_corpora, monkeypatch, tmp_path
):
    """Megatron's test_bin_reader, s3 half: ``s3://`` + an absolute local prefix, with
    boto3.client patched to its double, reads as the local corpus through the drop-in."""
    pytest.importorskip("torch", reason="the Megatron drop-in serves torch tensors")
    from megadata_adapters.trainers.megatron_datasets import indexed_dataset

    monkeypatch.delenv(s3_boto3.CLIENT_ENV, raising=False)  # boto3 is the drop-in's default
    monkeypatch.setenv(s3_boto3.CACHE_ENV, str(tmp_path / "s3-cache"))
    monkeypatch.setattr(boto3, "client", _MegatronsTestClient)
    prefix = local_corpora["code"]
    config = indexed_dataset.ObjectStorageConfig(path_to_idx_cache=str(tmp_path / "idx"))
    remote = indexed_dataset.IndexedDataset("s3://" + prefix, multimodal=False, mmap=False,
                                            object_storage_config=config)
    local = indexed_dataset.IndexedDataset(prefix, multimodal=False, mmap=True)
    assert isinstance(remote.bin_reader, indexed_dataset._S3BinReader)
    assert type(remote.corpus._bin_source).__name__ == "Boto3Source"
    assert len(remote) == len(local)
    for index in range(len(local)):
        assert (remote[index] == local[index]).all()
    # megatron-core's cache path, os.path.join(path_to_idx_cache, URL path): with an
    # absolute key that is the .idx itself, which exists, so nothing is downloaded
    cached = indexed_dataset.get_index_cache_path("s3://" + prefix + ".idx", config)
    assert cached == prefix + ".idx"
    assert not os.path.exists(tmp_path / "s3-cache")  # not megadata's own cache
    assert not os.path.exists(tmp_path / "idx")



def test_drop_in_defaults_to_boto3_and_megadata_to_tensorstore(via_boto3, monkeypatch, tmp_path):
    """Unset: the drop-in reads through boto3 and caches the .idx at path_to_idx_cache;
    megadata's own API keeps TensorStore. MEGADATA_S3_CLIENT=tensorstore overrides the
    drop-in's choice."""
    pytest.importorskip("torch", reason="the Megatron drop-in serves torch tensors")
    from megadata_adapters.trainers.megatron_datasets import indexed_dataset

    monkeypatch.delenv(s3_boto3.CLIENT_ENV)
    url = f"s3://{BUCKET}/corpora/web"
    config = indexed_dataset.ObjectStorageConfig(path_to_idx_cache=str(tmp_path / "idx"))
    ds = indexed_dataset.IndexedDataset(url, mmap=False, object_storage_config=config)
    assert type(ds.corpus._bin_source).__name__ == "Boto3Source"
    cached = tmp_path / "idx" / BUCKET / "corpora" / "web.idx"
    assert cached.is_file()
    assert [n for n in os.listdir(cached.parent) if n.endswith(".tmp")] == []
    again = indexed_dataset.IndexedDataset(url, mmap=False, object_storage_config=config)
    assert len(again) == len(ds) and (again[0] == ds[0]).all()
    assert indexed_dataset.IndexedDataset.exists(url)
    assert not indexed_dataset.IndexedDataset.exists(f"s3://{BUCKET}/nothing/here")
    pytest.importorskip("tensorstore")
    assert type(s3_boto3.open_source(url + ".bin")).__name__ != "Boto3Source"
    monkeypatch.setenv(s3_boto3.CLIENT_ENV, "tensorstore")
    other = indexed_dataset.IndexedDataset(url, mmap=False, object_storage_config=config)
    assert type(other.corpus._bin_source).__name__ != "Boto3Source"


def test_a_cached_idx_of_the_wrong_size_is_fetched_again(via_boto3, monkeypatch, tmp_path):
    pytest.importorskip("torch", reason="the Megatron drop-in serves torch tensors")
    from megadata_adapters.trainers.megatron_datasets import indexed_dataset

    monkeypatch.delenv(s3_boto3.CLIENT_ENV)
    cached = tmp_path / "idx" / BUCKET / "corpora" / "web.idx"
    cached.parent.mkdir(parents=True)
    cached.write_bytes(b"MMIDIDX\x00\x00 truncated")
    config = indexed_dataset.ObjectStorageConfig(path_to_idx_cache=str(tmp_path / "idx"))
    ds = indexed_dataset.IndexedDataset(f"s3://{BUCKET}/corpora/web", mmap=False,
                                        object_storage_config=config)
    assert len(ds) > 0 and cached.stat().st_size > 20


def test_client_default_names_a_bad_choice():
    with pytest.raises(mdc.DataError, match="client_default: 'botocore' is not"):
        with s3_boto3.client_default("botocore"):
            pass


class _ShortDownloadClient(_MegatronsTestClient):
    """Megatron's double whose head_object gives a size that download_file falls short of."""

    def head_object(self, Bucket, Key):  # noqa: N803
        super().head_object(Bucket, Key)
        return {"ContentLength": os.path.getsize(os.path.join("/", Bucket, Key)) + 8}


def test_a_short_idx_download_is_a_data_error_and_leaves_no_copy(
    local_corpora, monkeypatch, tmp_path
):
    monkeypatch.delenv(s3_boto3.CLIENT_ENV, raising=False)
    monkeypatch.setattr(boto3, "client", _ShortDownloadClient)
    url = "s3://" + local_corpora["code"] + ".idx"
    target = tmp_path / "idx" / "code.idx"
    with s3_boto3.client_default("boto3", {url: str(target)}):
        source = s3_boto3.open_source(url)
    assert source.idx_copy == str(target)
    with pytest.raises(mdc.DataError, match=r"download_file wrote \d+ bytes, head_object says"):
        source.local_copy()
    assert os.listdir(target.parent) == []
