"""``msc://`` corpora through the real Multi-Storage Client: a ``file`` profile and an
``s3`` profile against moto's S3 server on 127.0.0.1 (MSC_CONFIG, as Megatron users
configure it). Reads, GPT samples and the Megatron drop-in equal the local corpus's;
what is missing or misconfigured is a DataError naming the URL."""

from __future__ import annotations

import os

import numpy as np
import pytest
from cloud_helpers import BUCKET, EOD

import megadata_core as mdc

pytest.importorskip("multistorageclient")
pytest.importorskip("moto")


@pytest.fixture
def msc(monkeypatch, tmp_path, s3_server, local_corpora):
    """``{profile: prefix of the "web" corpus}`` with MSC_CONFIG naming both profiles."""
    folder = os.path.dirname(local_corpora["web"])
    config = tmp_path / "msc.yaml"
    config.write_text(
        "profiles:\n"
        "  disk:\n"
        "    storage_provider:\n"
        "      type: file\n"
        "      options:\n"
        f"        base_path: {folder}\n"
        "  bucket:\n"
        "    storage_provider:\n"
        "      type: s3\n"
        "      options:\n"
        f"        base_path: {BUCKET}\n"
        f"        endpoint_url: {s3_server.endpoint}\n"
        "        region_name: us-east-1\n"
        "    credentials_provider:\n"
        "      type: S3Credentials\n"
        "      options:\n"
        "        access_key: testing\n"
        "        secret_key: testing\n"
    )
    monkeypatch.setenv("MSC_CONFIG", str(config))
    monkeypatch.setenv("MEGADATA_MSC_CACHE", str(tmp_path / "msc_cache"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    return {"disk": "msc://disk/web", "bucket": "msc://bucket/corpora/web"}


@pytest.mark.parametrize("profile", ["disk", "bucket"])
def test_reads_and_samples_equal_the_local_corpus(msc, local_corpora, profile):
    local = mdc.IndexedDataset(local_corpora["web"])
    remote = mdc.IndexedDataset(msc[profile], mmap=False)
    assert len(remote) == len(local) and remote.dtype == local.dtype
    np.testing.assert_array_equal(remote.sequence_lengths, local.sequence_lengths)
    for index in (0, 17, len(local) - 1):
        np.testing.assert_array_equal(remote[index], local[index])
    np.testing.assert_array_equal(remote.get(9, 3, 40), local.get(9, 3, 40))
    config = mdc.GPTDataConfig(random_seed=2, sequence_length=128, eod_id=EOD)
    mine = mdc.GPTDataset(remote, range(len(remote)), 64, config)
    reference = mdc.GPTDataset(local, range(len(local)), 64, config)
    positions = np.arange(len(reference))[::-1]
    batch, expected = mine.__getitems__(positions), reference.__getitems__(positions)
    for key in expected:
        np.testing.assert_array_equal(batch[key], expected[key], err_msg=key)


def test_the_megatron_drop_in_reads_msc(msc, local_corpora, tmp_path):
    from megadata_adapters.trainers.megatron_datasets import indexed_dataset

    config = indexed_dataset.ObjectStorageConfig(path_to_idx_cache=str(tmp_path / "idx"))
    remote = indexed_dataset.IndexedDataset(msc["bucket"], multimodal=False, mmap=False,
                                            object_storage_config=config)
    local = indexed_dataset.IndexedDataset(local_corpora["web"])
    assert type(remote.bin_reader).__name__ == "_MultiStorageClientBinReader"
    assert len(remote) == len(local)
    for index in (0, 5, len(local) - 1):
        np.testing.assert_array_equal(remote[index], local[index])
    np.testing.assert_array_equal(remote.get(3, 2, 11), local.get(3, 2, 11))


@pytest.mark.parametrize(
    ("url", "match"),
    [
        ("msc://bucket/corpora/missing", r"msc://bucket/corpora/missing.idx: not found"),
        ("msc://nobody/corpora/web", r"msc://nobody/corpora/web.idx: .*nobody"),
    ],
)
def test_missing_objects_and_profiles_name_the_url(msc, url, match):
    with pytest.raises(mdc.DataError, match=match):
        mdc.IndexedDataset(url, mmap=False)


def test_the_drop_ins_object_storage_utils_speak_msc(msc, local_corpora, tmp_path):
    pytest.importorskip("torch", reason="the Megatron drop-in's cache_index_file uses "
                        "torch.distributed")
    from megadata_adapters.trainers.megatron_datasets import object_storage_utils as utils

    prefix = msc["bucket"]
    assert utils.dataset_exists(prefix, prefix + ".idx", prefix + ".bin")
    assert not utils.dataset_exists("msc://bucket/none", "msc://bucket/none.idx",
                                    "msc://bucket/none.bin")
    target = str(tmp_path / "copy" / "web.idx")
    utils.cache_index_file(prefix + ".idx", target)
    with open(target, "rb") as copy, open(local_corpora["web"] + ".idx", "rb") as original:
        assert copy.read() == original.read()
