"""The ``cloud`` suite of tools/bench.py: shuffled GPT batches from object stores with
real latency.

Usage::

    python tools/bench.py cloud --repeats 3                # full run (~6-10 min, 2 cores)
    python tools/bench.py cloud --scale 0.01 --repeats 1   # smoke run

One uint16 corpus of ~1.1 GiB (x scale; random tokens, lognormal documents of mean ~500)
is written once into the bench cache (``$MEGADATA_BENCH_CACHE``, default
``~/.cache/megadata/bench``; free disk is checked first) and served by

* ``s3``: s3rver (npm, installed once into the cache; it streams just the asked range from
  its files, where moto reads the whole object per request), 2 node processes, and
* ``gcs``: fake-gcs-server,

each behind :class:`loopback.shaping_proxy.ShapingProxy` on 127.0.0.1: 20 ms first-byte
latency per request and 100 MB/s per connection. A train ``GPTDataset`` (S = 4096 + 1) is
built over the local copy; its index cache serves the remote datasets (the cache key is
the data's identity), so only reads are timed. Every batch is 32 random sample indices,
the same for every reader; a sample's pieces (document, offset, length) come from that
index, so every reader fetches the same bytes. Readers:

* ours: ``GPTDataset.__getitems__`` on ``s3://`` / ``gs://`` (TensorStore, all ranges of a
  batch in one ``ts.Batch``) at the adapter's default of 128 requests in flight, and again
  at ``WIDE_CONCURRENCY`` (256);
* megatron-core's ``IndexedDataset`` on ``s3://`` (``_S3BinReader``, 256 MiB chunk per
  miss), one ``get`` per piece as its ``GPTDataset.__getitem__`` does. A miss moves 256
  MiB through the 100 MB/s connection (~2.7 s) and a shuffled sample misses several
  times, so a whole batch takes minutes: it reads each batch's samples in order for at
  most ``MEGATRON_BUDGET_S`` (at least one sample) and its rate is tokens read / time;
* a boto3 (S3) or google-cloud-storage (GCS) pool of 16 threads, one ranged GET per piece.

Rows: tokens/s per reader, time to the first batch on a cold ``.idx`` cache (open +
batch; Megatron's batch part extrapolated from its samples), requests per batch counted
at the proxy, the client CPU seconds per batch (the process's CPU minus the proxy
thread's) and the loopback store's CPU seconds per batch (server processes + proxy
thread): on a real store that CPU is the provider's, here it shares the machine's cores
with the reader, so it bounds any reader that sends one request per piece (s3rver costs
~0.5-1.5 ms per request, fake-gcs-server ~0.1). Every reader's first batch is compared
with the local corpus's tokens (a failing check).
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from bench.gpt import EOD, INDEX_SEED, MEAN_LENGTH, SEQUENCE, VOCAB, lognormal_lengths, write_idx

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BATCH = 32
THREADS = 16
BUCKET = "megadata-bench"
TOKENS = 576 << 20  # 1.125 GiB of uint16: over four of Megatron's 256 MiB chunks
LATENCY_S = 0.020
BANDWIDTH = 100e6
S3RVER_PROCESSES = 2
#: Requests in flight for the extra "ours" row beside the adapter's default (128): two
#: round trips for a batch's ~313 ranges instead of three.
WIDE_CONCURRENCY = 256
MEGATRON_BUDGET_S = 40.0


def progress(message: str) -> None:
    print(f"  .. {message}", file=sys.stderr, flush=True)


def cache_dir() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.environ.get("MEGADATA_BENCH_CACHE") or os.path.join(base, "megadata", "bench")


def cached_corpus(directory: str, tokens: int, seed: int) -> str | None:
    """A uint16 corpus of ~``tokens`` random tokens in ``directory``, written once (None
    when the disk lacks room for it twice over). The ``.idx`` is renamed into place last,
    so its presence means the pair is complete."""
    prefix = os.path.join(directory, f"cloud-corpus-{tokens}-{seed}")
    if os.path.exists(prefix + ".idx") and os.path.exists(prefix + ".bin"):
        return prefix
    os.makedirs(directory, exist_ok=True)
    if shutil.disk_usage(directory).free < 4 * tokens + (1 << 30):
        return None
    rng = np.random.default_rng(seed)
    lengths = lognormal_lengths(rng, max(1, tokens // MEAN_LENGTH))
    ends = np.cumsum(lengths, dtype=np.int64)
    progress(f"writing a {int(ends[-1]) * 2 >> 20} MiB corpus into {directory} (once)")
    temporary = f"{prefix}.{os.getpid()}.tmp"
    with open(temporary + ".bin", "wb") as stream:
        for begin in range(0, int(ends[-1]), 32 << 20):
            end = min(int(ends[-1]), begin + (32 << 20))
            block = rng.integers(1, VOCAB, end - begin, dtype=np.uint16)
            inside = ends[(ends > begin) & (ends <= end)] - 1 - begin
            block[inside] = EOD
            block.tofile(stream)
    write_idx(temporary, lengths)
    os.replace(temporary + ".bin", prefix + ".bin")
    os.replace(temporary + ".idx", prefix + ".idx")
    return prefix


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
    from megadata_core.modes.concat import locate_pieces

    rows = np.asarray(dataset.shuffle_index[np.asarray(indices)], dtype=np.int64)
    pieces = locate_pieces(
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


def _thread_cpu(native_id: int) -> float:
    """CPU seconds of one thread of this process (Linux; 0 elsewhere)."""
    try:
        with open(f"/proc/self/task/{native_id}/stat") as stream:
            fields = stream.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


class _Reader:
    """One reader's measurements per batch: seconds, requests, client CPU, and the CPU
    the loopback store spent on it (server processes + proxy thread)."""

    def __init__(self, name: str, read, proxy, server) -> None:
        self.name, self.read, self.proxy, self.server = name, read, proxy, server
        self.times: list[float] = []
        self.requests: list[int] = []
        self.cpu: list[float] = []
        self.harness_cpu: list[float] = []

    def run(self, indices) -> object:
        self.proxy.reset_counts()
        proxy_cpu, server_cpu = _thread_cpu(self.proxy.native_id), self.server.cpu_seconds()
        cpu, start = time.process_time(), time.perf_counter()
        result = self.read(indices)
        self.times.append(time.perf_counter() - start)
        proxy_cpu = _thread_cpu(self.proxy.native_id) - proxy_cpu
        self.cpu.append(time.process_time() - cpu - proxy_cpu)
        self.harness_cpu.append(self.server.cpu_seconds() - server_cpu + proxy_cpu)
        self.requests.append(self.proxy.requests)
        return result

    def clear(self) -> None:
        for values in (self.times, self.requests, self.cpu, self.harness_cpu):
            values.clear()

    def rate(self) -> float | None:
        return BATCH * SEQUENCE / statistics.median(self.times) if self.times else None


def _environment(bench) -> None:
    os.environ.update(
        GOOGLE_AUTH_TOKEN_FOR_TESTING="bench",
        GCE_METADATA_ROOT="127.0.0.1:9",
        AWS_REGION="us-east-1",
        AWS_SHARED_CREDENTIALS_FILE=bench.path("no-aws-credentials"),
        AWS_CONFIG_FILE=bench.path("no-aws-config"),
    )


def suite_cloud(bench) -> None:
    sys.path.insert(0, ROOT)  # loopback/ is not installed: it lives beside tools/
    from loopback.shaping_proxy import ShapingProxy

    _environment(bench)
    cache = cache_dir()
    prefix = cached_corpus(cache, bench.scaled(TOKENS, 1 << 20), bench.seed)
    if prefix is None:
        bench.note(f"cloud: skipped, {cache} lacks free disk for the corpus")
        return
    bench.note(
        f"cloud: {os.path.getsize(prefix + '.bin') / 2**30:.2f} GiB .bin; proxy: "
        f"{LATENCY_S * 1000:g} ms first-byte latency, {BANDWIDTH / 1e6:g} MB/s per connection"
    )
    index_cache = os.path.join(cache, "cloud-index-cache")
    local = _dataset(prefix, index_cache)
    rng = np.random.default_rng(bench.seed)
    rows = rng.integers(0, len(local), (max(1, bench.repeats) + 1, BATCH))
    expected = np.asarray(local.__getitems__(rows[0])["tokens"])
    objects = {f"{BUCKET}/corpus.{ext}": f"{prefix}.{ext}" for ext in ("bin", "idx")}
    if bench.wants("s3"):
        _s3(bench, local, rows, expected, objects, index_cache, ShapingProxy)
    if bench.wants("gcs"):
        _gcs(bench, local, rows, expected, objects, index_cache, ShapingProxy)


def _first_batch_ours(bench, store: str, url: str, index_cache: str, indices):
    """(seconds, tokens): open on a cold .idx cache, index cache hit, one batch."""
    from megadata_adapters.storage import tensorstore_bins

    tensorstore_bins.configure(cache_dir=bench.path("cloud", store, "idx_cache"))
    start = time.perf_counter()
    remote = _dataset(url, index_cache)
    tokens = remote.__getitems__(indices)["tokens"]
    return time.perf_counter() - start, tokens, remote


def _wide_reader(bench, store, url, index_cache, rows, expected, proxy, server) -> _Reader:
    """Ours with WIDE_CONCURRENCY requests in flight (its first batch checked)."""
    from megadata_adapters.storage import tensorstore_bins

    resource = f"{'s3' if store == 's3' else 'gcs'}_request_concurrency"
    tensorstore_bins.configure(cache_dir=bench.path("cloud", store, "idx_cache"),
                               context={resource: {"limit": WIDE_CONCURRENCY}})  # fmt: skip
    remote = _dataset(url, index_cache)  # its source keeps these options
    tensorstore_bins.configure(cache_dir=bench.path("cloud", store, "idx_cache"))
    name = f"ours, {WIDE_CONCURRENCY} in flight"
    bench.check(f"{store}: first batch equals the local corpus ({name})",
                _same(remote.__getitems__(rows[0])["tokens"], expected))  # fmt: skip
    return _Reader(name, lambda indices: remote.__getitems__(indices)["tokens"], proxy, server)


def _wide_row(bench, store: str, wide: _Reader, peer: _Reader, label: str) -> None:
    bench.row(f"{store}: shuffled 32x4097 batches, ours with {WIDE_CONCURRENCY} requests in "
              f"flight, peer = {label}", "tokens/s", "higher", wide.rate(), peer.rate(),
              len(wide.times))  # fmt: skip


def _timed_batches(bench, store: str, readers: list[_Reader], rows) -> None:
    for repeat, indices in enumerate(rows[1:]):
        for reader in readers if repeat % 2 == 0 else readers[::-1]:
            reader.run(indices)
        progress(f"{store} batch {repeat + 1}/{len(rows) - 1}")


def _report(bench, store: str, ours: _Reader, peer: _Reader, label: str) -> None:
    runs = len(ours.times)
    bench.row(f"{store}: shuffled 32x4097 batches, peer = {label}", "tokens/s", "higher",
              ours.rate(), peer.rate(), runs)  # fmt: skip
    bench.row(f"{store}: requests per batch at the proxy, peer = {label}", "requests", "lower",
              statistics.median(ours.requests), statistics.median(peer.requests), runs)  # fmt: skip
    bench.row(f"{store}: client CPU per batch, peer = {label}", "s", "lower",
              statistics.median(ours.cpu), statistics.median(peer.cpu), runs)  # fmt: skip
    bench.row(f"{store}: loopback store CPU per batch (server + proxy), peer = {label}", "s",
              "lower", statistics.median(ours.harness_cpu), statistics.median(peer.harness_cpu),
              runs)  # fmt: skip
    per_request = ", ".join(
        f"{reader.name} {statistics.median(reader.harness_cpu) * 1e3 / requests:.2f} ms"
        for reader in (ours, peer)
        if (requests := statistics.median(reader.requests))
    )
    bench.note(f"{store}: loopback store CPU per request (server + proxy): {per_request}")


def _s3(bench, local, rows, expected, objects, index_cache, proxy_class) -> None:
    import boto3
    from botocore.config import Config

    from bench.peers import quiet_import
    from loopback import s3rver

    try:
        server = s3rver.S3rverServer(objects, processes=S3RVER_PROCESSES)
    except s3rver.S3rverUnavailableError as error:
        bench.note(f"s3: skipped, s3rver is not available ({error})")
        return
    proxy = proxy_class(server.endpoints, LATENCY_S, BANDWIDTH)
    try:
        os.environ.update(
            AWS_ACCESS_KEY_ID=s3rver.ACCESS_KEY,
            AWS_SECRET_ACCESS_KEY=s3rver.SECRET_KEY,
            AWS_ENDPOINT_URL=proxy.endpoint,
        )
        url = f"s3://{BUCKET}/corpus"
        first, tokens, remote = _first_batch_ours(bench, "s3", url, index_cache, rows[0])
        bench.check("s3: first batch equals the local corpus (ours)", _same(tokens, expected))

        client = boto3.client("s3", config=Config(max_pool_connections=THREADS))
        pool = ThreadPoolExecutor(THREADS)
        pointers = local.indexed.sequence_pointers

        def boto(indices):
            def fetch(piece):
                sequence, start, length = piece
                begin = int(pointers[sequence]) + start * 2
                body = client.get_object(
                    Bucket=BUCKET, Key="corpus.bin", Range=f"bytes={begin}-{begin + length * 2 - 1}"
                )["Body"].read()
                return np.frombuffer(body, dtype=np.uint16)

            pieces = _pieces(local, indices)
            arrays = iter(pool.map(fetch, [piece for sample in pieces for piece in sample]))
            return _assemble([[next(arrays) for _ in sample] for sample in pieces])

        ours = _Reader("ours", lambda indices: remote.__getitems__(indices)["tokens"], proxy,
                       server)  # fmt: skip
        pool_reader = _Reader("boto3", boto, proxy, server)
        bench.check("s3: first batch equals the local corpus (boto3 pool)",
                    _same(boto(rows[0]), expected))  # fmt: skip
        wide = _wide_reader(bench, "s3", url, index_cache, rows, expected, proxy, server)
        _timed_batches(bench, "s3", [ours, wide, pool_reader], rows)
        _report(bench, "s3", ours, pool_reader, "boto3 range GETs x16")
        _wide_row(bench, "s3", wide, pool_reader, "boto3 range GETs x16")
        pool.shutdown()

        megatron = quiet_import(
            "megatron.core.datasets.indexed_dataset",
            "megatron.core.datasets.object_storage_utils",
        )
        if megatron is None:
            bench.row("first batch, cold .idx cache (s3)", "s", "lower", first, None, 1)
            bench.note("s3: megatron-core is not installed: no _S3BinReader rows")
            return
        _megatron_rows(bench, megatron, local, rows, expected, url, proxy, ours, first)
    finally:
        proxy.stop()
        server.stop()


def _megatron_rows(bench, megatron, local, rows, expected, url, proxy, ours, first) -> None:
    indexed_module, storage_module = megatron
    idx_cache = bench.path("cloud", "s3", "megatron_idx_cache")
    os.makedirs(idx_cache, exist_ok=True)
    budget = max(1.0, MEGATRON_BUDGET_S * min(1.0, bench.scale * 10))

    def read_budgeted(indexed, indices):
        """(seconds, samples read, their tokens) within the budget, at least one sample."""
        parts, start = [], time.perf_counter()
        for sample in _pieces(local, indices):
            parts.append([indexed.get(document, offset, size) for document, offset, size in sample])
            if time.perf_counter() - start > budget:
                break
        return time.perf_counter() - start, len(parts), _assemble(parts)

    proxy.reset_counts()
    start = time.perf_counter()
    config = storage_module.ObjectStorageConfig(path_to_idx_cache=idx_cache)
    indexed = indexed_module.IndexedDataset(url, mmap=False, object_storage_config=config)
    opened = time.perf_counter() - start
    seconds, samples, tokens = read_budgeted(indexed, rows[0])
    bench.check("s3: first batch equals the local corpus (megatron _S3BinReader)",
                _same(tokens, expected[:samples]))  # fmt: skip
    bench.row("first batch, cold .idx cache (s3; megatron: open + its batch rate)", "s",
              "lower", first, opened + seconds * BATCH / samples, 1)  # fmt: skip

    proxy.reset_counts()
    seconds, samples, _ = read_budgeted(indexed, rows[1])
    requests = proxy.requests * BATCH / samples
    bench.row("s3: shuffled 32x4097 batches, peer = megatron _S3BinReader", "tokens/s",
              "higher", ours.rate(), samples * SEQUENCE / seconds, 1)  # fmt: skip
    bench.row("s3: requests per batch at the proxy, peer = megatron (256 MiB each)",
              "requests", "lower", statistics.median(ours.requests), requests, 1)  # fmt: skip
    bench.note(
        f"s3: megatron read {samples} of {BATCH} samples within its {budget:g} s budget; "
        "its rate and requests per batch are scaled from those samples"
    )


def _gcs(bench, local, rows, expected, objects, index_cache, proxy_class) -> None:
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage
    from requests.adapters import HTTPAdapter

    from loopback.object_stores import FakeGcsServer

    server = FakeGcsServer(objects)
    proxy = proxy_class(server.endpoint, LATENCY_S, BANDWIDTH)
    try:
        os.environ["TENSORSTORE_GCS_HTTP_URL"] = proxy.endpoint
        os.environ["STORAGE_EMULATOR_HOST"] = proxy.endpoint
        url = f"gs://{BUCKET}/corpus"
        first, tokens, remote = _first_batch_ours(bench, "gcs", url, index_cache, rows[0])
        bench.check("gcs: first batch equals the local corpus (ours)", _same(tokens, expected))
        bench.row("first batch, cold .idx cache (gcs; no peer)", "s", "lower", first, None, 1)

        client = storage.Client(project="bench", credentials=AnonymousCredentials())
        # A connection per thread (requests' default pool of 10 would drop some).
        client._http.mount("http://", HTTPAdapter(pool_connections=THREADS, pool_maxsize=THREADS))
        blob = client.bucket(BUCKET).blob("corpus.bin")
        pool = ThreadPoolExecutor(THREADS)
        pointers = local.indexed.sequence_pointers

        def gcs(indices):
            def fetch(piece):
                sequence, start, length = piece
                begin = int(pointers[sequence]) + start * 2
                data = blob.download_as_bytes(start=begin, end=begin + length * 2 - 1)
                return np.frombuffer(data, dtype=np.uint16)

            pieces = _pieces(local, indices)
            arrays = iter(pool.map(fetch, [piece for sample in pieces for piece in sample]))
            return _assemble([[next(arrays) for _ in sample] for sample in pieces])

        ours = _Reader("ours", lambda indices: remote.__getitems__(indices)["tokens"], proxy,
                       server)  # fmt: skip
        peer = _Reader("google-cloud-storage", gcs, proxy, server)
        bench.check("gcs: first batch equals the local corpus (google-cloud-storage)",
                    _same(peer.run(rows[0]), expected))  # fmt: skip
        peer.clear()
        wide = _wide_reader(bench, "gcs", url, index_cache, rows, expected, proxy, server)
        _timed_batches(bench, "gcs", [ours, wide, peer], rows)
        _report(bench, "gcs", ours, peer, "GCS client range reads x16")
        _wide_row(bench, "gcs", wide, peer, "GCS client range reads x16")
        pool.shutdown()
    finally:
        proxy.stop()
        server.stop()
