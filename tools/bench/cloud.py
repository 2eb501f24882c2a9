"""The ``cloud`` suite of tools/bench.py: shuffled GPT batches from object storage.

Usage::

    python tools/bench.py cloud                            # full run (~3-5 min, 2 cores)
    python tools/bench.py cloud --scale 0.1 --repeats 1    # smoke run

Both stores run on 127.0.0.1 (loopback/object_stores.py). One uint16 corpus per store is
written locally, uploaded, and a train ``GPTDataset`` (S = 4096 + 1 extra token) is built
over the local copy; its index cache then serves the remote datasets too (the cache key is
the data's identity, not its path), so only reads are timed. Every batch is 32 random
sample indices, the same for every reader of a store; a sample's pieces (document,
offset, length) come from that index, so all readers fetch the same bytes:

* ``gcs``: fake-gcs-server holding a ~128 MiB .bin (x scale). Ours:
  ``GPTDataset.__getitems__`` on ``gs://`` (TensorStore, all ranges of the batch in one
  ``ts.Batch``). Peer: ``google-cloud-storage`` ranged downloads
  (``blob.download_as_bytes(start, end)``), one per piece, in a 16-thread pool.
* ``s3``: moto's S3 server holding a ~288 MiB .bin (x scale): just over one 256 MiB chunk.
  Ours as above on ``s3://``. Peer: megatron-core's ``IndexedDataset`` on ``s3://``
  (``ObjectStorageConfig``, ``_S3BinReader`` with its default 256 MiB chunks), one
  ``get(document, offset, length)`` per piece, as its ``GPTDataset.__getitem__`` does.
  moto answers a range request by reading the whole object (~0.15 s for 300 MiB), which
  charges every request by object size instead of bytes sent: ratios only.
* ``first-batch``: time from nothing (cold .idx cache) to the first batch, ours vs
  Megatron on the S3 store (ours: open + index cache hit + batch; Megatron: open, which
  downloads the .idx, + the batch's reads), and ours alone on the GCS store.

Requests per batch are counted by a pass through a counting proxy (not timed). The first
batch of every reader is compared with the local corpus's tokens (a failing check).
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from bench.gpt import (
    EOD,
    INDEX_SEED,
    MEAN_LENGTH,
    SEQUENCE,
    lognormal_lengths,
    write_token_corpus,
)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BATCH = 32
THREADS = 16
BUCKET = "megadata-bench"
GCS_TOKENS = 64 << 20  # 128 MiB of uint16
S3_TOKENS = 144 << 20  # ~288 MiB: just over one of Megatron's 256 MiB chunks


def progress(message: str) -> None:
    print(f"  .. {message}", file=sys.stderr, flush=True)


def _dataset(prefix: str, cache: str):
    import megadata_core as mdc

    config = mdc.GPTDataConfig(
        random_seed=INDEX_SEED,
        sequence_length=SEQUENCE,
        eod_id=EOD,
        blend=prefix,
        split="100,0,0",
        path_to_cache=cache,
        create_attention_mask=False,
    )
    return mdc.build_datasets(config, [None, 0, 0])[0]  # one prefix: a GPTDataset


def _pieces(dataset, indices: np.ndarray) -> list[list[tuple[int, int, int]]]:
    """Per sample, its (sequence, first token, tokens) pieces (the bytes every reader gets)."""
    from megadata_core.datasets import reading

    rows = np.asarray(dataset.shuffle_index[np.asarray(indices)], dtype=np.int64)
    pieces = reading.locate_pieces(
        dataset.sample_index, dataset.document_index, dataset.indexed.sequence_lengths, rows, 1
    )
    bounds = list(pieces.first) + [len(pieces.document)]
    return [
        list(
            zip(
                pieces.document[begin:end].tolist(),
                pieces.start[begin:end].tolist(),
                pieces.length[begin:end].tolist(),
            )
        )
        for begin, end in zip(bounds[:-1], bounds[1:])
    ]


def _assemble(parts: list[list[np.ndarray]]) -> np.ndarray:
    return np.stack([np.concatenate(sample) for sample in parts])


def _same(batch, expected: np.ndarray) -> bool:
    batch = np.asarray(batch)[:, : expected.shape[1]]
    return bool(batch.shape == expected.shape and (batch == expected).all())


def _median_rate(times: list[float]) -> float:
    return BATCH * SEQUENCE / statistics.median(times)


def _upload_corpus(bench, name: str, tokens: int, rng) -> str:
    prefix = bench.path("cloud", name, "corpus")
    lengths = lognormal_lengths(rng, max(1, tokens // MEAN_LENGTH))
    progress(f"{name}: writing a {int(lengths.sum()) * 2 >> 20} MiB corpus")
    write_token_corpus(prefix, lengths, rng)
    return prefix


def suite_cloud(bench) -> None:
    sys.path.insert(0, ROOT)  # loopback/ is not installed: it lives beside tools/
    from adapters import tensorstore_bins
    from bench.peers import quiet_import
    from loopback.object_stores import FakeGcsServer, FaultProxy, MotoS3Server

    rng = np.random.default_rng(bench.seed)
    batches = max(2, bench.repeats)
    os.environ.update(
        AWS_ACCESS_KEY_ID="bench",
        AWS_SECRET_ACCESS_KEY="bench",
        AWS_REGION="us-east-1",
        GOOGLE_AUTH_TOKEN_FOR_TESTING="bench",
        GCE_METADATA_ROOT="127.0.0.1:9",
        AWS_SHARED_CREDENTIALS_FILE=bench.path("no-aws-credentials"),
        AWS_CONFIG_FILE=bench.path("no-aws-config"),
    )

    if bench.wants("gcs"):
        prefix = _upload_corpus(bench, "gcs", bench.scaled(GCS_TOKENS, 1 << 20), rng)
        local = _dataset(prefix, bench.path("cloud", "gcs", "index_cache"))
        objects = {f"{BUCKET}/gcs/corpus.{ext}": f"{prefix}.{ext}" for ext in ("bin", "idx")}
        server = FakeGcsServer(objects)
        try:
            os.environ["TENSORSTORE_GCS_HTTP_URL"] = server.endpoint
            os.environ["STORAGE_EMULATOR_HOST"] = server.endpoint
            tensorstore_bins.configure(cache_dir=bench.path("cloud", "gcs", "idx_cache"))
            index_cache = bench.path("cloud", "gcs", "index_cache")
            start = time.perf_counter()  # cold .idx cache: fetch, index cache hit, one batch
            remote = _dataset(f"gs://{BUCKET}/gcs/corpus", index_cache)
            remote.__getitems__(rng.integers(0, len(remote), BATCH))
            first = time.perf_counter() - start
            bench.row("first batch, cold .idx cache (gcs; no peer)", "s", "lower", first, None, 1)
            _gcs_rows(bench, server, remote, local, rng, batches, progress, FaultProxy)
        finally:
            server.stop()

    if bench.wants("s3") or bench.wants("first-batch"):
        prefix = _upload_corpus(bench, "s3", bench.scaled(S3_TOKENS, 1 << 20), rng)
        local = _dataset(prefix, bench.path("cloud", "s3", "index_cache"))
        server = MotoS3Server()
        try:
            client = server.client()
            client.create_bucket(Bucket=BUCKET)
            for ext in ("bin", "idx"):
                client.upload_file(f"{prefix}.{ext}", BUCKET, f"s3/corpus.{ext}")
            os.environ["AWS_ENDPOINT_URL"] = server.endpoint
            megatron = quiet_import(
                "megatron.core.datasets.indexed_dataset",
                "megatron.core.datasets.object_storage_utils",
            )
            _s3_rows(bench, server, prefix, local, rng, batches, progress, megatron, FaultProxy)
        finally:
            server.stop()


def _requests_per_batch(proxy_class, endpoint: str, env: str, read) -> float:
    """Requests one call of ``read`` issues, counted by a proxy in front of the store."""
    proxy = proxy_class(endpoint)
    saved = os.environ[env]
    try:
        os.environ[env] = proxy.endpoint
        read()  # opens the stores through the proxy
        proxy.reset_counts()
        read()
        return float(proxy.requests)
    finally:
        os.environ[env] = saved
        proxy.stop()


def _gcs_rows(bench, server, remote, local, rng, batches, progress, proxy_class) -> None:
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage
    from requests.adapters import HTTPAdapter

    client = storage.Client(project="bench", credentials=AnonymousCredentials())
    # A connection per thread (requests' default pool of 10 would drop some).
    client._http.mount("http://", HTTPAdapter(pool_connections=THREADS, pool_maxsize=THREADS))
    blob = client.bucket(BUCKET).blob("gcs/corpus.bin")
    pool = ThreadPoolExecutor(THREADS)

    def peer(indices):
        pieces = _pieces(local, indices)

        def fetch(piece):
            sequence, start, length = piece
            begin = int(local.indexed.sequence_pointers[sequence]) + start * 2
            data = blob.download_as_bytes(start=begin, end=begin + length * 2 - 1)
            return np.frombuffer(data, dtype=np.uint16)

        flat = [piece for sample in pieces for piece in sample]
        arrays = iter(pool.map(fetch, flat))
        return _assemble([[next(arrays) for _ in sample] for sample in pieces])

    def ours(indices):
        return remote.__getitems__(indices)["tokens"]

    rows = rng.integers(0, len(local), (batches + 1, BATCH))
    expected = np.asarray(local.__getitems__(rows[0])["tokens"])
    first_ours, first_peer = ours(rows[0]), peer(rows[0])
    bench.check("gcs: first batch equals the local corpus (ours)", _same(first_ours, expected))
    bench.check(
        "gcs: first batch equals the local corpus (google-cloud-storage)",
        _same(first_peer, expected),
    )
    times_ours, times_peer = [], []
    for repeat, indices in enumerate(rows[1:]):
        order = [("ours", ours), ("peer", peer)]
        for name, read in order if repeat % 2 == 0 else order[::-1]:
            start = time.perf_counter()
            read(indices)
            (times_ours if name == "ours" else times_peer).append(time.perf_counter() - start)
        progress(f"gcs batch {repeat + 1}/{batches}")
    bench.row("gcs: shuffled 32x4097 batches, peer = GCS client x16", "tokens/s", "higher",
              _median_rate(times_ours), _median_rate(times_peer), batches)  # fmt: skip
    requests = _requests_per_batch(
        proxy_class, server.endpoint, "TENSORSTORE_GCS_HTTP_URL",
        lambda: _dataset_through_env(remote).__getitems__(rows[1]),
    )  # fmt: skip
    pieces = sum(len(sample) for sample in _pieces(local, rows[1]))
    bench.row("gcs: requests per batch (peer: one per piece)", "requests", "lower",
              requests, float(pieces), 1)  # fmt: skip
    pool.shutdown()


def _dataset_through_env(dataset):
    """The same dataset reopened (pickled), so its stores follow the current environment."""
    import pickle

    return pickle.loads(pickle.dumps(dataset))


def _s3_rows(bench, server, prefix, local, rng, batches, progress, megatron, proxy_class):
    from adapters import tensorstore_bins

    url = f"s3://{BUCKET}/s3/corpus"
    index_cache = bench.path("cloud", "s3", "index_cache")
    rows = rng.integers(0, len(local), (batches + 1, BATCH))
    expected = np.asarray(local.__getitems__(rows[0])["tokens"])

    # time to the first batch, cold .idx caches
    idx_cache = bench.path("cloud", "s3", "idx_cache_first")
    tensorstore_bins.configure(cache_dir=idx_cache)
    start = time.perf_counter()
    remote = _dataset(url, index_cache)
    first_ours = remote.__getitems__(rows[0])["tokens"]
    first_batch_ours = time.perf_counter() - start
    bench.check("s3: first batch equals the local corpus (ours)", _same(first_ours, expected))

    if megatron is None:
        bench.row("first batch, cold .idx cache (s3)", "s", "lower", first_batch_ours, None, 1)
        bench.row("s3: shuffled 32x4097 batches", "tokens/s", "higher", None, None, 0)
        return
    indexed_module, storage_module = megatron
    megatron_cache = bench.path("cloud", "s3", "megatron_idx_cache")
    shutil.rmtree(megatron_cache, ignore_errors=True)
    os.makedirs(megatron_cache)

    def open_megatron():
        config = storage_module.ObjectStorageConfig(path_to_idx_cache=megatron_cache)
        return indexed_module.IndexedDataset(url, mmap=False, object_storage_config=config)

    def megatron_batch(indexed, indices):
        pieces = _pieces(local, indices)
        return _assemble(
            [[indexed.get(sequence, start, length) for sequence, start, length in sample]
             for sample in pieces]
        )  # fmt: skip

    start = time.perf_counter()
    theirs_indexed = open_megatron()
    first_theirs = megatron_batch(theirs_indexed, rows[0])
    first_batch_theirs = time.perf_counter() - start
    bench.check(
        "s3: first batch equals the local corpus (megatron _S3BinReader)",
        _same(first_theirs, expected),
    )
    bench.row("first batch, cold .idx cache (s3)", "s", "lower",
              first_batch_ours, first_batch_theirs, 1)  # fmt: skip

    times_ours, times_theirs, misses = [], [], []
    reader = theirs_indexed.bin_reader
    for repeat, indices in enumerate(rows[1:]):
        order = [("ours", None), ("theirs", None)]
        for name, _ in order if repeat % 2 == 0 else order[::-1]:
            start = time.perf_counter()
            if name == "ours":
                remote.__getitems__(indices)
                times_ours.append(time.perf_counter() - start)
            else:
                before = _chunk_fetches(reader)
                megatron_batch(theirs_indexed, indices)
                times_theirs.append(time.perf_counter() - start)
                misses.append(_chunk_fetches(reader) - before)
        progress(f"s3 batch {repeat + 1}/{batches}")
    bench.row("s3: shuffled 32x4097 batches, peer = megatron", "tokens/s", "higher",
              _median_rate(times_ours), _median_rate(times_theirs), batches)  # fmt: skip
    requests = _requests_per_batch(
        proxy_class, server.endpoint, "AWS_ENDPOINT_URL",
        lambda: _dataset_through_env(remote).__getitems__(rows[1]),
    )  # fmt: skip
    bench.row("s3: requests per batch (peer: 256 MiB chunks)", "requests", "lower",
              requests, float(statistics.median(misses)), batches)  # fmt: skip
    bench.note(
        "s3: Megatron's requests are 256 MiB chunk fetches (each a cache miss); ours are "
        "byte ranges of the batch's pieces. moto reads the whole object for every range "
        "request, so each of our requests costs about what one of Megatron's does on the "
        "server side."
    )


def _chunk_fetches(reader) -> int:
    """How many chunks megatron's _S3BinReader fetched so far (counted by wrapping it)."""
    if not hasattr(reader, "_bench_fetches"):
        reader._bench_fetches = 0
        client = reader._client
        original = client.get_object

        def counted(*args, **kwargs):
            reader._bench_fetches += 1
            return original(*args, **kwargs)

        client.get_object = counted
    return reader._bench_fetches
