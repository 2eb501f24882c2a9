"""Real stores on 127.0.0.1 holding test corpora: moto's S3 server, fake-gcs-server and a
plain HTTP server with byte ranges.

Each test gets a ``store`` (parametrized over the three) with the corpora uploaded, the
environment pointing TensorStore at it, and a private .idx cache directory.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

pytest.importorskip("tensorstore")
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # loopback/

from cloud_helpers import (  # noqa: E402
    BUCKET,
    CORPORA,
    Store,
    configure_cache,
    corpus_objects,
    write_corpus,
)

from loopback.object_stores import (  # noqa: E402
    FakeGcsServer,
    FaultProxy,
    MotoS3Server,
    RangeFileServer,
)


@pytest.fixture(scope="session")
def local_corpora(tmp_path_factory) -> dict[str, str]:
    """``{name: local prefix}``; ``"replacement"`` is a different corpus for update tests."""
    folder = tmp_path_factory.mktemp("corpora")
    prefixes = {name: write_corpus(str(folder / name), seed) for seed, name in enumerate(CORPORA)}
    prefixes["replacement"] = write_corpus(str(folder / "replacement"), 99, documents=170)
    return prefixes


@pytest.fixture(scope="session")
def s3_server(local_corpora):
    server = MotoS3Server()
    client = server.client()
    client.create_bucket(Bucket=BUCKET)
    for key, path in corpus_objects(local_corpora).items():
        client.upload_file(path, BUCKET, key)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def gcs_server(local_corpora):
    objects = {f"{BUCKET}/{key}": path for key, path in corpus_objects(local_corpora).items()}
    server = FakeGcsServer(objects)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def http_server(local_corpora, tmp_path_factory):
    root = tmp_path_factory.mktemp("www")
    for key, path in corpus_objects(local_corpora).items():
        os.makedirs(root / os.path.dirname(key), exist_ok=True)
        with open(path, "rb") as source, open(root / key, "wb") as target:
            target.write(source.read())
    server = RangeFileServer(str(root))
    yield server
    server.stop()


@pytest.fixture(params=["s3", "gcs", "http"])
def store(request, monkeypatch, tmp_path, local_corpora) -> Store:
    server = request.getfixturevalue(f"{request.param}_server")
    store = Store(request.param, server)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    monkeypatch.setenv("GOOGLE_AUTH_TOKEN_FOR_TESTING", "test")
    store.route(monkeypatch, store.endpoint)
    # No host credentials or metadata servers are consulted, only the loopback store.
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("GCE_METADATA_ROOT", "127.0.0.1:9")
    configure_cache(monkeypatch, tmp_path / "idx_cache")
    return store


@pytest.fixture
def faulty_proxy(store):
    """A proxy in front of ``store`` answering 20% of requests with 503."""
    proxy = FaultProxy(store.endpoint, fail_rate=0.2, seed=7)
    yield proxy
    proxy.stop()
