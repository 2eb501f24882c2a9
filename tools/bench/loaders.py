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
  worker_count=2)`` (one core ``__getitems__`` per micro-batch; workers ship packed
  micro-batches, unpacked in this process);
* ``grain-batched-0``: the same with ``worker_count=0`` (read in the calling thread; the
  batch is the core's own arrays, zero-copy, read-only as ``__getitems__`` gives them);
* ``grain-batched-0w``: the same with ``writable=True`` (every key copied into arrays of
  its own);
* ``torch``: ``torch_data.loader(TorchDataset(ds), PretrainingSampler(...), num_workers=2,
  multiprocessing_context="forkserver")`` (workers ship packed batches, unpacked in this
  process into Megatron's dtypes);
* ``torch-0``: the same with ``num_workers=0`` (int64 tokens/labels/position ids, float32
  loss mask: Megatron's dtypes, so 2.5x the bytes of the raw int32 batch);
* ``jax``: the raw loop plus ``jax_sharding.global_batch(batch, mesh)`` on an 8-device
  simulated CPU mesh (``--xla_force_host_platform_device_count=8``, set below before
  anything imports jax).
* ``megatron-dtypes``: the raw loop plus every key copied into Megatron's dtypes in
  reused buffers: the least work of any torch path (``torch-0`` cannot exceed it).
* ``grain-ipc`` / ``torch-ipc``: the hand-over floor of those worker set-ups: the same
  2-worker ``mp_prefetch`` / ``DataLoader`` (forkserver) delivering an 8-byte element per
  batch that costs nothing to make. No worker path can beat its floor, so ratio = raw
  time / floor time bounds ``grain-batched`` / ``torch`` on this machine.

Every path is started first (worker start-up = time to the first batch, reported as a
note, not in the throughput) and warmed up; then the timed windows are interleaved:
``3 x --repeats`` rounds, each one window of the raw loop followed by one window of every
other path (their order rotates by one each round). A window is ``LEAD`` untimed batches
(draining what workers prefetched meanwhile) then ~``WINDOW_SECONDS`` of timed ones (a
batch count per path, from ``CALIBRATE`` batches timed after its warm-up), then a
short pause so that the workers refill their buffers outside the next path's window. The
rows are the median tokens/s (S tokens per sample) and median(path)/median(raw) (the
table's peer column holds the raw loop); the notes give the median of the per-round
ratios (each window against the same round's raw window), which load from other jobs
skews the least. The first batches of every path are compared with the raw loop's tokens
(a failing check).
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

from bench.gpt import (  # noqa: E402
    MEAN_LENGTH,
    SEQUENCE,
    lognormal_lengths,
    ours_dataset,
    write_token_corpus,
)

BATCH = 32
WORKERS = 2
WARMUP = 3  # batches after the first, before timing
WINDOW_SECONDS = 0.15  # aim of one timed window; its batch count is set per path ...
WINDOW = (30, 400)  # ... within these bounds, from the path's calibration batches
CALIBRATE = 10  # batches timed after the warm-up to size the path's windows
ROUNDS_PER_REPEAT = 3  # rounds = this x --repeats
LEAD = 8  # untimed batches before each window (drain the prefetched ones)
SETTLE = 0.05  # seconds of pause after each window (workers refill their prefetch)
COMPARE = 3  # first batches compared with the raw loop
GOAL = 0.67  # batched paths within 1.5x of raw
BATCHED = ("grain-batched", "grain-batched-0", "grain-batched-0w", "torch", "torch-0", "jax")
FLOORS = ("grain-ipc", "torch-ipc")  # no data: the worker hand-over alone
#: the least a torch path does: the batch in Megatron's dtypes (in this process)
BYTES_FLOOR = "megatron-dtypes"

LABELS = {
    "raw": "(a) raw core __getitems__ loop",
    "grain-map": "(b) Grain MapDataset.batch + mp_prefetch, 2 workers",
    "grain-batched": "(c) grain_source.batched_dataset, 2 workers",
    "grain-batched-0": "(c0) grain_source.batched_dataset, in-process, zero-copy",
    "grain-batched-0w": "(c1) grain_source.batched_dataset, in-process, writable=True",
    "torch": "(d) torch DataLoader + PretrainingSampler, 2 workers",
    "torch-0": "(d0) torch DataLoader + PretrainingSampler, in-process",
    "jax": "(e) raw loop + jax global_batch, 8-device CPU mesh",
    "grain-ipc": "(f) floor: Grain mp_prefetch, 2 workers, empty elements",
    "torch-ipc": "(g) floor: torch DataLoader, 2 workers, empty batches",
    "megatron-dtypes": "(h) floor: raw loop + every key copied into Megatron's dtypes",
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

    from megadata_adapters.frameworks.grain_source import GrainSource

    pipeline = (
        grain.MapDataset.source(GrainSource(ds))
        .batch(BATCH, drop_remainder=True)
        .to_iter_dataset()
        .mp_prefetch(grain.MultiprocessingOptions(num_workers=WORKERS))
    )
    iterator = iter(pipeline)
    return iterator, getattr(iterator, "close", None), lambda batch: batch["tokens"]


def _grain_batched(ds, workers: int = WORKERS, writable: bool = False):
    from megadata_adapters.frameworks.grain_source import batched_dataset

    pipeline = batched_dataset(ds, micro_batch_size=BATCH, worker_count=workers, writable=writable)
    iterator = iter(pipeline)
    return iterator, iterator.close, lambda batch: batch["tokens"]


def _torch(ds, workers: int = WORKERS):
    from megadata_adapters.frameworks.torch_data import TorchDataset, loader

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

    from megadata_adapters.frameworks.grain_source import (
        BATCHED_READ_OPTIONS,
        ensure_absl_flags_parsed,
    )

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

    from megadata_adapters.frameworks.jax_sharding import data_mesh, global_batch

    mesh = data_mesh(("data",))
    if mesh.devices.size != 8:
        progress(f"jax: {mesh.devices.size} devices, not 8 (XLA_FLAGS was set too late?)")

    def batches():
        for indices in _sampler(len(ds)):
            arrays = global_batch(ds.__getitems__(indices), mesh)
            yield jax.block_until_ready(arrays)

    return batches(), None, lambda batch: np.asarray(batch["tokens"])


def _megatron_dtypes(ds):
    """The raw loop plus what any torch path must do at least: every key in Megatron's
    dtypes (int64 tokens, labels and position ids, float32 loss mask), in C-contiguous
    buffers of its own, reused batch after batch (warm pages, no torch)."""
    from megadata_adapters.frameworks.torch_data import DTYPES

    buffers: dict[str, np.ndarray] = {}

    def batches():
        for indices in _sampler(len(ds)):
            out = {}
            for key, value in ds.__getitems__(indices).items():
                dtype = DTYPES.get(key, value.dtype)
                target = buffers.get(key)
                if target is None or target.shape != value.shape or target.dtype != dtype:
                    target = buffers[key] = np.empty(value.shape, dtype)
                np.copyto(target, value, casting="unsafe")
                out[key] = target
            yield out

    return batches(), None, lambda batch: batch["tokens"].copy()


PATHS = {
    "raw": _raw,
    "grain-map": _grain_map,
    "grain-batched": _grain_batched,
    "grain-batched-0": lambda ds: _grain_batched(ds, workers=0),
    "grain-batched-0w": lambda ds: _grain_batched(ds, workers=0, writable=True),
    "torch": _torch,
    "torch-0": lambda ds: _torch(ds, workers=0),
    "jax": _jax,
    "grain-ipc": _grain_ipc,
    "torch-ipc": _torch_ipc,
    "megatron-dtypes": _megatron_dtypes,
}


def _open(name: str, ds) -> dict:
    """Start path ``name``: its iterator after the first and warm-up batches, the start-up
    seconds (creation to first batch) and the first batches' tokens."""
    gc.collect()
    start = time.perf_counter()
    iterator, close, tokens_of = PATHS[name](ds)
    first = next(iterator)
    startup = time.perf_counter() - start
    seen = [] if tokens_of is None else [np.array(tokens_of(first))]
    del first
    for _ in range(WARMUP):
        batch = next(iterator)
        if tokens_of is not None and len(seen) < COMPARE:
            seen.append(np.array(tokens_of(batch)))
        del batch
    start = time.perf_counter()
    for _ in range(CALIBRATE):
        next(iterator)
    per_batch = (time.perf_counter() - start) / CALIBRATE
    window = int(min(max(round(WINDOW_SECONDS / per_batch), WINDOW[0]), WINDOW[1]))
    return {
        "iterator": iterator,
        "close": close,
        "startup": startup,
        "tokens": seen,
        "window": window,
        "rates": [],
    }


def _window(path: dict) -> float:
    """Tokens/s of one timed window: ``LEAD`` untimed batches first (they drain what the
    workers prefetched while other paths ran), then the path's ``window`` timed batches."""
    iterator, window = path["iterator"], path["window"]
    gc.collect()
    for _ in range(LEAD):
        next(iterator)
    start = time.perf_counter()
    for _ in range(window):
        next(iterator)
    seconds = time.perf_counter() - start
    time.sleep(SETTLE)  # the workers refill their prefetch now, not in the next window
    return window * BATCH * SEQUENCE / seconds


def _close(path: dict) -> None:
    close = path.pop("close", None)
    try:
        if close is not None:
            close()
    finally:
        path.pop("iterator", None)
        gc.collect()


def _interleaved(names: list[str], ds, rounds: int, bench) -> dict:
    """Open every path, then ``rounds`` rounds of one timed window per path (raw first,
    the others in an order that rotates by one each round): the windows that a per-round
    ratio compares ran seconds apart, so load from other jobs hits both about alike."""
    paths = {}
    try:
        for name in names:
            progress(f"loaders: start {name}")
            try:
                paths[name] = _open(name, ds)
            except ImportError as error:
                bench.note(f"{name}: skipped ({error})")
        others = [name for name in paths if name != "raw"]
        for turn in range(rounds):
            shift = turn % len(others) if others else 0
            order = (["raw"] if "raw" in paths else []) + others[shift:] + others[:shift]
            for name in order:
                paths[name]["rates"].append(_window(paths[name]))
            progress(f"loaders: round {turn + 1}/{rounds}")
    finally:
        for path in paths.values():
            _close(path)
    return paths


def _spread(values: list[float]) -> str:
    """median [min-max] of ``values`` (two decimals)."""
    return f"{statistics.median(values):.2f} [{min(values):.2f}-{max(values):.2f}]"


def suite_loaders(bench) -> None:
    """Tokens/s of every framework path over the raw core ``__getitems__`` loop."""
    rng = np.random.default_rng(bench.seed + 30)
    target = bench.scaled(50_000_000, minimum=2_000_000)
    lengths = lognormal_lengths(rng, int(target / MEAN_LENGTH * 1.2) + 10)
    lengths = lengths[np.cumsum(lengths, dtype=np.int64) <= target]
    prefix = bench.path("loaders", "corpus")
    write_token_corpus(prefix, lengths, rng)
    rounds = ROUNDS_PER_REPEAT * bench.repeats
    # every path reads from sample 0 on its own: enough samples (epochs) for one path's
    # warm-up, calibration, every lead-in and longest timed window, and one spare batch
    samples = (1 + WARMUP + CALIBRATE + rounds * (LEAD + WINDOW[1]) + 1) * BATCH
    cache = os.path.join(bench.workdir, "loaders", "cache")
    ds = ours_dataset(prefix, samples, cache)
    total_batches = len(ds) // BATCH
    progress(
        f"loaders: {int(lengths.sum()):,} tokens in {len(lengths):,} documents, "
        f"{len(ds):,} samples = {total_batches:,} batches of {BATCH}; "
        f"{rounds} rounds of one ~{WINDOW_SECONDS} s window per path, interleaved"
    )
    names = [name for name in PATHS if bench.wants(name)]
    results = _interleaved(names, ds, rounds, bench)

    raw = results.get("raw")
    raw_rate = statistics.median(raw["rates"]) if raw else None
    ratios = {}
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
        if raw is not None and name != "raw":
            ratios[name] = [mine / base for mine, base in zip(result["rates"], raw["rates"])]
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
        "loaders: the 'megatron' column is the raw core loop (a) and the ratio is "
        f"median(path)/median(raw) (tokens/s, {SEQUENCE} tokens per sample). All paths are "
        f"open at once; each of {rounds} rounds times one window per path ({LEAD} untimed "
        f"batches, then ~{WINDOW_SECONDS} s of timed ones, raw first, then the others in a "
        f"rotating order, {SETTLE * 1000:.0f} ms pause after each window); timed batches per "
        "window: " + ", ".join(f"{name} {result['window']}" for name, result in results.items())
    )
    if ratios:
        bench.note(
            "loaders: per-round ratio path/raw (window against the same round's raw window), "
            "median [min-max]: "
            + ", ".join(f"{name} {_spread(values)}" for name, values in ratios.items())
        )
        verdicts = [
            f"{name} {statistics.median(ratios[name]):.2f} "
            f"({'met' if statistics.median(ratios[name]) >= GOAL else 'NOT met'})"
            for name in BATCHED
            if name in ratios
        ]
        bench.note(
            f"loaders goal: batched paths, median per-round path/raw >= {GOAL}: "
            + ", ".join(verdicts)
        )
        floors = [
            f"{name} {statistics.median(ratios[name]):.2f}" for name in FLOORS if name in ratios
        ]
        if floors:
            bench.note(
                "loaders: worker hand-over floors (median per-round raw time / floor time; a "
                "worker path cannot exceed it on this machine): " + ", ".join(floors)
            )
        if BYTES_FLOOR in ratios:
            bench.note(
                f"loaders: {BYTES_FLOOR} {statistics.median(ratios[BYTES_FLOOR]):.2f} of raw: "
                "the raw batch is int32 text with tokens and labels views of it and shared "
                "constants (~4 bytes written per token); Megatron's tensors need int64 "
                "tokens, labels and position ids and a float32 loss mask (~28 bytes per "
                "token), so torch-0 cannot exceed this ratio in one process"
            )
    bench.note(
        "loaders start-up (iterator creation to first batch, workers included; not in the "
        "throughput): "
        + ", ".join(f"{name} {result['startup']:.2f} s" for name, result in results.items())
    )
