"""Real stores on 127.0.0.1 holding test corpora: moto's S3 server, fake-gcs-server and a
plain HTTP server with byte ranges.

Each test gets a ``store`` (parametrized over the three) with the corpora uploaded, the
environment pointing TensorStore at it, and a private .idx cache directory.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pytest

import megadata_core as mdc

pytest.importorskip("tensorstore")
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))

from object_stores import FakeGcsServer, FaultProxy, MotoS3Server, RangeFileServer  # noqa: E402

BUCKET = "megadata-corpora"
EOD = 3
CORPORA = ("web", "code")


def write_corpus(prefix: str, seed: int, documents: int = 300) -> str:
    """A uint16 corpus of one-sequence documents (1..600 tokens) ending in EOD."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 600, documents)
    tokens = rng.integers(10, 60000, int(lengths.sum())).astype(np.uint16)
    tokens[np.cumsum(lengths) - 1] = EOD
    with mdc.IndexedDatasetWriter(prefix, np.uint16) as writer:
        writer.add_documents(tokens, lengths)
    return prefix


@pytest.fixture(scope="session")
def local_corpora(tmp_path_factory) -> dict[str, str]:
    """``{name: local prefix}``; ``"replacement"`` is a different corpus for update tests."""
    folder = tmp_path_factory.mktemp("corpora")
    prefixes = {name: write_corpus(str(folder / name), seed) for seed, name in enumerate(CORPORA)}
    prefixes["replacement"] = write_corpus(str(folder / "replacement"), 99, documents=170)
    return prefixes


def _objects(local_corpora) -> dict[str, str]:
    return {
        f"corpora/{name}.{ext}": f"{local_corpora[name]}.{ext}"
        for name in CORPORA
        for ext in ("bin", "idx")
    }


class Store:
    """One running store: ``url(name)`` is a corpus prefix in it; ``put`` replaces an
    object; ``route(monkeypatch, endpoint)`` sends requests to ``endpoint`` instead (a
    proxy in front of it, or a dead port)."""

    def __init__(self, kind: str, server) -> None:
        self.kind = kind
        self.server = server
        self.endpoint = server.endpoint
        self.active = server.endpoint

    def url(self, name: str) -> str:
        if self.kind == "http":
            return f"{self.active}/corpora/{name}"
        scheme = "s3" if self.kind == "s3" else "gs"
        return f"{scheme}://{BUCKET}/corpora/{name}"

    def put(self, key: str, data: bytes) -> None:
        if self.kind == "s3":
            self.server.client().put_object(Bucket=BUCKET, Key=key, Body=data)
        elif self.kind == "gcs":
            self.server.upload(BUCKET, key, data)
        else:
            target = os.path.join(self.server.root, key)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with open(target + ".tmp", "wb") as stream:
                stream.write(data)
            os.replace(target + ".tmp", target)

    def route(self, monkeypatch, endpoint: str) -> None:
        self.active = endpoint
        if self.kind == "s3":
            monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
        elif self.kind == "gcs":
            monkeypatch.setenv("TENSORSTORE_GCS_HTTP_URL", endpoint)


@pytest.fixture(scope="session")
def s3_server(local_corpora):
    server = MotoS3Server()
    client = server.client()
    client.create_bucket(Bucket=BUCKET)
    for key, path in _objects(local_corpora).items():
        client.upload_file(path, BUCKET, key)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def gcs_server(local_corpora):
    objects = {f"{BUCKET}/{key}": path for key, path in _objects(local_corpora).items()}
    server = FakeGcsServer(objects)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def http_server(local_corpora, tmp_path_factory):
    root = tmp_path_factory.mktemp("www")
    for key, path in _objects(local_corpora).items():
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


def configure_cache(monkeypatch, cache_dir, **options) -> None:
    from adapters import tensorstore_bins

    monkeypatch.delenv(tensorstore_bins.OPTIONS_ENV, raising=False)
    tensorstore_bins.configure(cache_dir=str(cache_dir), **options)
    # configure() writes os.environ directly; have monkeypatch restore it afterwards.
    monkeypatch.setenv(tensorstore_bins.OPTIONS_ENV, os.environ[tensorstore_bins.OPTIONS_ENV])


@pytest.fixture
def faulty_proxy(store):
    """A proxy in front of ``store`` answering 20% of requests with 503."""
    proxy = FaultProxy(store.endpoint, fail_rate=0.2, seed=7)
    yield proxy
    proxy.stop()
