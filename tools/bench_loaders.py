"""The ``loaders`` suite of tools/bench.py: tokens/s through each framework path.

Usage::

    python tools/bench.py loaders                            # full run (~2-4 min, 2 cores)
    python tools/bench.py loaders --scale 0.01 --repeats 1   # smoke run

One ~50M-token uint16 corpus (x scale; the same kind of corpus as the gpt suite's
``read`` item) and a train ``GPTDataset`` (S = 4096 + 1 extra token, no attention mask)
are read in micro-batches of 32 in ``PretrainingSampler`` order (mbs 32, dp 1) through:

* ``raw``: the core's ``ds.__getitems__(indices)`` in a loop (the baseline);
* ``grain-map``: ``grain.MapDataset.source(GrainSource(ds)).batch(32)
  .to_iter_dataset().mp_prefetch(MultiprocessingOptions(num_workers=2))``;
* ``grain-batched``: ``grain_source.batched_dataset(ds, micro_batch_size=32,
  worker_count=2)`` (one core ``__getitems__`` per micro-batch);
* ``grain-batched-0``: the same with ``worker_count=0`` (read in the calling thread);
* ``torch``: ``torch_data.loader(TorchDataset(ds), PretrainingSampler(...), num_workers=2,
  multiprocessing_context="forkserver")``;
* ``torch-0``: the same with ``num_workers=0`` (int64 tokens/labels/position ids, float32
  loss mask: Megatron's dtypes, so 2.5x the bytes of the raw int32 batch);
* ``jax``: the raw loop plus ``jax_sharding.global_batch(batch, mesh)`` on an 8-device
  simulated CPU mesh (``--xla_force_host_platform_device_count=8``, set below before
  anything imports jax).
* ``grain-ipc`` / ``torch-ipc``: the hand-over floor of those worker set-ups: the same
  2-worker ``mp_prefetch`` / ``DataLoader`` (forkserver) delivering an 8-byte element per
  batch that costs nothing to make. No worker path can beat its floor, so ratio = raw
  time / floor time bounds ``grain-batched`` / ``torch`` on this machine.

Each path is started (worker start-up = time to the first batch, reported as a note, not
in the throughput), warmed up, then timed over ``--repeats`` consecutive windows of a
fixed number of batches from the same iterator; rows are the median tokens/s (S tokens
per sample) and the ratio path/raw (the table's peer column holds the raw loop). The
first batches of every path are compared with the raw loop's tokens (a failing check).
"""

from __future__ import annotations

import gc
import os
import statistics
import sys
import time

if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (
        os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
    ).strip()

import numpy as np  # noqa: E402
from bench_gpt import (  # noqa: E402
    MEAN_LENGTH,
    SEQUENCE,
    lognormal_lengths,
    ours_dataset,
    write_token_corpus,
)

BATCH = 32
WORKERS = 2
WARMUP = 3  # batches after the first, before timing
WINDOW = 150  # timed batches per repeat
COMPARE = 3  # first batches compared with the raw loop
GOAL = 0.67  # batched paths within 1.5x of raw
BATCHED = ("grain-batched", "grain-batched-0", "torch", "torch-0", "jax")
FLOORS = ("grain-ipc", "torch-ipc")  # no data: the worker hand-over alone

LABELS = {
    "raw": "(a) raw core __getitems__ loop",
    "grain-map": "(b) Grain MapDataset.batch + mp_prefetch, 2 workers",
    "grain-batched": "(c) grain_source.batched_dataset, 2 workers",
    "grain-batched-0": "(c0) grain_source.batched_dataset, in-process",
    "torch": "(d) torch DataLoader + PretrainingSampler, 2 workers",
    "torch-0": "(d0) torch DataLoader + PretrainingSampler, in-process",
    "jax": "(e) raw loop + jax global_batch, 8-device CPU mesh",
    "grain-ipc": "(f) floor: Grain mp_prefetch, 2 workers, empty elements",
    "torch-ipc": "(g) floor: torch DataLoader, 2 workers, empty batches",
}


def progress(message: str) -> None:
    print(f"  .. {message}", file=sys.stderr, flush=True)


def _sampler(total: int):
    from megadata_core.samplers import PretrainingSampler

    return PretrainingSampler(
        total_samples=total,
        consumed_samples=0,
        micro_batch_size=BATCH,
        data_parallel_rank=0,
        data_parallel_size=1,
    )


# -- the paths: each returns (iterator, close, tokens_of(batch)) -------------------------


def _raw(ds):
    def batches():
        for indices in _sampler(len(ds)):
            yield ds.__getitems__(indices)

    return batches(), None, lambda batch: batch["tokens"]


def _grain_map(ds):
    import grain

    from adapters.grain_source import GrainSource

    pipeline = (
        grain.MapDataset.source(GrainSource(ds))
        .batch(BATCH, drop_remainder=True)
        .to_iter_dataset()
        .mp_prefetch(grain.MultiprocessingOptions(num_workers=WORKERS))
    )
    iterator = iter(pipeline)
    return iterator, getattr(iterator, "close", None), lambda batch: batch["tokens"]


def _grain_batched(ds, workers: int = WORKERS):
    from adapters.grain_source import batched_dataset

    iterator = iter(batched_dataset(ds, micro_batch_size=BATCH, worker_count=workers))
    return iterator, iterator.close, lambda batch: batch["tokens"]


def _torch(ds, workers: int = WORKERS):
    from adapters.torch_data import TorchDataset, loader

    context = {"multiprocessing_context": "forkserver"} if workers else {}
    data = loader(TorchDataset(ds), _sampler(len(ds)), num_workers=workers, **context)
    iterator = iter(data)
    close = getattr(iterator, "_shutdown_workers", None)
    return iterator, close, lambda batch: batch["tokens"].numpy()


class _Nothing:
    """A dataset (Grain MapDataset protocol and torch map-style) whose every element is
    one 8-byte array: measures the worker hand-over alone."""

    def __init__(self, length: int) -> None:
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index) -> dict[str, np.ndarray]:
        return {"tokens": np.zeros(1, np.int64)}

    def __getitems__(self, indices) -> dict[str, np.ndarray]:
        return {"tokens": np.zeros(1, np.int64)}


def _grain_ipc(ds):
    import grain

    from adapters.grain_source import BATCHED_READ_OPTIONS, ensure_absl_flags_parsed

    ensure_absl_flags_parsed()
    steps = len(ds) // BATCH
    pipeline = (
        grain.MapDataset.range(steps)
        .map(_Nothing(steps).__getitem__)
        .to_iter_dataset(BATCHED_READ_OPTIONS)
        .mp_prefetch(grain.MultiprocessingOptions(num_workers=WORKERS))
    )
    iterator = iter(pipeline)
    return iterator, getattr(iterator, "close", None), None


def _collate_nothing(batch):
    return batch


def _torch_ipc(ds):
    from torch.utils.data import DataLoader

    data = DataLoader(
        _Nothing(len(ds)),
        batch_sampler=_sampler(len(ds)),
        collate_fn=_collate_nothing,
        num_workers=WORKERS,
        multiprocessing_context="forkserver",
    )
    iterator = iter(data)
    return iterator, getattr(iterator, "_shutdown_workers", None), None


def _jax(ds):
    import jax

    from adapters.jax_sharding import data_mesh, global_batch

    mesh = data_mesh(("data",))
    if mesh.devices.size != 8:
        progress(f"jax: {mesh.devices.size} devices, not 8 (XLA_FLAGS was set too late?)")

    def batches():
        for indices in _sampler(len(ds)):
            arrays = global_batch(ds.__getitems__(indices), mesh)
            yield jax.block_until_ready(arrays)

    return batches(), None, lambda batch: np.asarray(batch["tokens"])


PATHS = {
    "raw": _raw,
    "grain-map": _grain_map,
    "grain-batched": _grain_batched,
    "grain-batched-0": lambda ds: _grain_batched(ds, workers=0),
    "torch": _torch,
    "torch-0": lambda ds: _torch(ds, workers=0),
    "jax": _jax,
    "grain-ipc": _grain_ipc,
    "torch-ipc": _torch_ipc,
}


def _run_path(name: str, ds, window: int, repeats: int) -> dict:
    """Start-up seconds, tokens/s of each timed window, and the first batches' tokens."""
    gc.collect()
    start = time.perf_counter()
    iterator, close, tokens_of = PATHS[name](ds)
    first = next(iterator)
    startup = time.perf_counter() - start
    seen = [] if tokens_of is None else [np.array(tokens_of(first))]
    try:
        for _ in range(WARMUP):
            batch = next(iterator)
            if tokens_of is not None and len(seen) < COMPARE:
                seen.append(np.array(tokens_of(batch)))
        rates = []
        for _ in range(repeats):
            gc.collect()
            start = time.perf_counter()
            for _ in range(window):
                next(iterator)
            seconds = time.perf_counter() - start
            rates.append(window * BATCH * SEQUENCE / seconds)
    finally:
        if close is not None:
            close()
        del iterator
        gc.collect()
    return {"startup": startup, "rates": rates, "tokens": seen}


def suite_loaders(bench) -> None:
    """Tokens/s of every framework path over the raw core ``__getitems__`` loop."""
    rng = np.random.default_rng(bench.seed + 30)
    target = bench.scaled(50_000_000, minimum=2_000_000)
    lengths = lognormal_lengths(rng, int(target / MEAN_LENGTH * 1.2) + 10)
    lengths = lengths[np.cumsum(lengths, dtype=np.int64) <= target]
    prefix = bench.path("loaders", "corpus")
    write_token_corpus(prefix, lengths, rng)
    # enough samples (epochs) for the warm-up and every timed window, and one spare batch
    window = WINDOW
    samples = (1 + WARMUP + bench.repeats * window + 1) * BATCH
    cache = os.path.join(bench.workdir, "loaders", "cache")
    ds = ours_dataset(prefix, samples, cache)
    total_batches = len(ds) // BATCH
    progress(
        f"loaders: {int(lengths.sum()):,} tokens in {len(lengths):,} documents, "
        f"{len(ds):,} samples = {total_batches:,} batches of {BATCH}; "
        f"{bench.repeats} x {window} timed batches per path"
    )
    results = {}
    for name in PATHS:
        if not bench.wants(name):
            continue
        progress(f"loaders: {name}")
        try:
            results[name] = _run_path(name, ds, window, bench.repeats)
        except ImportError as error:
            bench.note(f"{name}: skipped ({error})")

    raw = results.get("raw")
    raw_rate = statistics.median(raw["rates"]) if raw else None
    for name, result in results.items():
        rate = statistics.median(result["rates"])
        bench.row(
            f"loader {LABELS[name]}, {BATCH} x {SEQUENCE}+1",
            "tokens/s",
            "higher",
            rate,
            raw_rate,
            len(result["rates"]),
        )
    for name, result in results.items():
        if name == "raw" or name in FLOORS or raw is None:
            continue
        same = all(
            np.array_equal(mine, want) for mine, want in zip(result["tokens"], raw["tokens"])
        ) and len(result["tokens"]) == len(raw["tokens"])
        bench.check(
            f"loader {name}: first {len(raw['tokens'])} batches' tokens equal the raw loop's "
            "(PretrainingSampler order)",
            same,
        )
    bench.note(
        "loaders: the 'megatron' column is the raw core loop (a) and the ratio is path/raw "
        f"(tokens/s, {SEQUENCE} tokens per sample, {window} batches per timed window, one "
        "iterator per path, windows back to back after "
        f"{WARMUP + 1} warm-up batches)."
    )
    if raw_rate:
        verdicts = []
        for name in BATCHED:
            if name in results:
                ratio = statistics.median(results[name]["rates"]) / raw_rate
                verdicts.append(f"{name} {ratio:.2f} ({'met' if ratio >= GOAL else 'NOT met'})")
        bench.note(f"loaders goal: batched paths path/raw >= {GOAL}: " + ", ".join(verdicts))
        floors = [
            f"{name} {statistics.median(results[name]['rates']) / raw_rate:.2f}"
            for name in FLOORS
            if name in results
        ]
        if floors:
            bench.note(
                "loaders: worker hand-over floors (raw time / floor time; a worker path "
                "cannot exceed it on this machine): " + ", ".join(floors)
            )
    bench.note(
        "loaders start-up (iterator creation to first batch, workers included; not in the "
        "throughput): "
        + ", ".join(f"{name} {result['startup']:.2f} s" for name, result in results.items())
    )
