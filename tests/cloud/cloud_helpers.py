"""Helpers shared by the cloud tests (imported by name: this folder is on sys.path)."""

from __future__ import annotations

import os

import corpora
import numpy as np

BUCKET = "megadata-corpora"
EOD = 3
CORPORA = ("web", "code")


def write_corpus(prefix: str, seed: int, documents: int = 300) -> str:
    """A uint16 corpus of one-sequence documents (1..600 tokens) ending in EOD."""
    rng = np.random.default_rng(seed)
    return corpora.write_corpus(prefix, rng.integers(1, 600, documents), rng, low=10,
                                vocab=60000, eod=EOD)


def corpus_objects(local_corpora: dict[str, str]) -> dict[str, str]:
    """``{object key: local file}`` of the corpora every store holds."""
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


def configure_cache(monkeypatch, cache_dir, **options) -> None:
    from megadata_adapters.storage import tensorstore_bins

    monkeypatch.delenv(tensorstore_bins.OPTIONS_ENV, raising=False)
    tensorstore_bins.configure(cache_dir=str(cache_dir), **options)
    # configure() writes os.environ directly; have monkeypatch restore it afterwards.
    monkeypatch.setenv(tensorstore_bins.OPTIONS_ENV, os.environ[tensorstore_bins.OPTIONS_ENV])
