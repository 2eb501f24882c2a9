"""URL -> kvstore spec, credentials choice, options and the file:// source (no server)."""

from __future__ import annotations

import os

import numpy as np
import pytest

import megadata_core as mdc
from megadata_adapters.storage import tensorstore_bins
from megadata_adapters.storage.tensorstore_bins import TensorStoreSource, kvstore_spec


@pytest.fixture
def clean_env(monkeypatch, tmp_path):
    for name in list(os.environ):
        if name.startswith("AWS_") or name == tensorstore_bins.OPTIONS_ENV:
            monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    return monkeypatch


def test_urls_map_to_driver_specs(clean_env):
    spec, key = kvstore_spec("s3://bucket-1/a/b/corpus.bin")
    assert spec == {"driver": "s3", "bucket": "bucket-1", "aws_credentials": {"type": "anonymous"}}
    assert key == "a/b/corpus.bin"
    assert kvstore_spec("gs://bkt/x/y.idx") == ({"driver": "gcs", "bucket": "bkt"}, "x/y.idx")
    assert kvstore_spec("https://host:8443/data/c.bin?sig=1") == (
        {"driver": "http", "base_url": "https://host:8443"},
        "/data/c.bin?sig=1",
    )
    assert kvstore_spec("file:///tmp/d/c.bin") == ({"driver": "file", "path": "/tmp/d/"}, "c.bin")


def test_s3_endpoint_region_and_credentials_from_the_environment(clean_env, tmp_path):
    clean_env.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:1")
    spec, _ = kvstore_spec("s3://bucket-1/k")
    assert spec["endpoint"] == "http://127.0.0.1:1" and spec["aws_region"] == "us-east-1"
    clean_env.setenv("AWS_ENDPOINT_URL_S3", "http://127.0.0.1:2")  # the S3-specific one wins
    clean_env.setenv("AWS_REGION", "eu-west-1")
    spec, _ = kvstore_spec("s3://bucket-1/k")
    assert spec["endpoint"] == "http://127.0.0.1:2" and spec["aws_region"] == "eu-west-1"
    clean_env.setenv("AWS_ACCESS_KEY_ID", "id")
    clean_env.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    assert kvstore_spec("s3://bucket-1/k")[0]["aws_credentials"] == {"type": "environment"}
    clean_env.delenv("AWS_ACCESS_KEY_ID")
    credentials = tmp_path / "credentials"
    credentials.write_text("[dev]\naws_access_key_id = a\naws_secret_access_key = b\n")
    clean_env.setenv("AWS_SHARED_CREDENTIALS_FILE", str(credentials))
    clean_env.setenv("AWS_PROFILE", "dev")
    assert kvstore_spec("s3://bucket-1/k")[0]["aws_credentials"] == {
        "type": "profile",
        "profile": "dev",
    }
    overrides = {"s3": {"aws_credentials": {"type": "imds"}, "requester_pays": True}}
    spec, _ = kvstore_spec("s3://bucket-1/k", overrides)
    assert spec["aws_credentials"] == {"type": "imds"} and spec["requester_pays"] is True


@pytest.mark.parametrize(
    "url",
    ["s3://bucket-only", "s3://bucket/dir/", "gs:///object", "https://host", "ftp://host/x"],
)
def test_malformed_urls_are_data_errors(clean_env, url):
    with pytest.raises(mdc.DataError, match="expected|reads"):
        TensorStoreSource(url)


def test_bad_options_are_data_errors(clean_env, tmp_path):
    clean_env.setenv(tensorstore_bins.OPTIONS_ENV, "{not json")
    with pytest.raises(mdc.DataError, match=tensorstore_bins.OPTIONS_ENV):
        TensorStoreSource("s3://bucket-1/k")
    clean_env.setenv(tensorstore_bins.OPTIONS_ENV, "[1, 2]")
    with pytest.raises(mdc.DataError, match="JSON object"):
        TensorStoreSource("s3://bucket-1/k")
    tensorstore_bins.configure(context={"s3_request_retries": {"max_retries": "many"}})
    source = TensorStoreSource("file://" + str(tmp_path / "x.bin"))
    (tmp_path / "x.bin").write_bytes(b"abc")
    with pytest.raises(mdc.DataError, match="cannot open the store"):
        source.read(0, 1)


def test_file_source_reads_ranges_sizes_and_caches(clean_env, tmp_path):
    data = np.random.default_rng(0).integers(0, 256, 10_000, dtype=np.uint8).tobytes()
    (tmp_path / "blob.bin").write_bytes(data)
    tensorstore_bins.configure(cache_dir=str(tmp_path / "cache"))
    source = TensorStoreSource("file://" + str(tmp_path / "blob.bin"))
    assert source.read(10, 5) == data[10:15] and source.read(3, 0) == b""
    offsets, lengths = np.array([900, 5, 5000, 70]), np.array([10, 0, 300, 1])
    got = source.read_ranges(offsets, lengths)
    assert [bytes(b) for b in got] == [data[o : o + n] for o, n in zip(offsets, lengths)]
    assert source.size() == len(data)
    assert source.check_size(len(data)) == len(data)
    with pytest.raises(mdc.DataError, match="shorter than the 10001 bytes"):
        source.check_size(len(data) + 1)
    with pytest.raises(mdc.DataError, match="byte range outside"):
        source.read(len(data) - 2, 5)
    copy = source.local_copy()
    assert open(copy, "rb").read() == data and copy.startswith(str(tmp_path / "cache"))
    assert source.local_copy() == copy
    missing = TensorStoreSource("file://" + str(tmp_path / "nope.bin"))
    with pytest.raises(mdc.DataError, match="nope.bin: not found"):
        missing.read(0, 1)
    empty = tmp_path / "empty.bin"
    empty.write_bytes(b"")
    assert TensorStoreSource("file://" + str(empty)).size() == 0


def test_describe_error_is_short_and_stable():
    describe = tensorstore_bins.describe_error
    assert "access denied (HTTP 403, InvalidAccessKeyId)" in describe(
        ValueError(
            "PERMISSION_DENIED: [http_response_code='403'] "
            "[http_response_body='<Error><Code>InvalidAccessKeyId</Code>...']"
        )
    )
    assert describe(ValueError("NOT_FOUND: gone")) == "not found"
    assert describe(TimeoutError()) == "timed out waiting for the store"
    assert describe(ValueError("ABORTED: All 6 retry attempts failed: CURL error 7")).startswith(
        "cannot reach the store"
    )
    assert describe(ValueError("INTERNAL: boom")) == "store error: INTERNAL"
