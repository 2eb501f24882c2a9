"""The ``scale`` suite of tools/bench.py: the train index of one corpus of up to a billion
documents, ours beside megatron-core's, each build in a fresh interpreter.

Usage::

    python tools/bench.py scale                          # 10M, 100M, 300M documents
    python tools/bench.py scale --only 10M,1B            # some sizes (1B only when named)
    python tools/bench.py scale --scale 0.001 --only 10M # smoke run (10,000 documents)

Items are sizes: ``10M``, ``100M``, ``300M`` (the default) and ``1B`` (only when named
in ``--only``: ~20 GB of .idx plus ~25 GB of index cache). Per size:

* the corpus: a real MMIDIDX .idx of N documents with lognormal lengths (mean ~1,000
  tokens), written in chunks with the format's header layout, and a sparse .bin of the
  right size (created with truncate; reads touch a few pages);
* the train index, S = 4096, two epochs whose final epoch is shuffled apart (as the
  ``gpt`` suite), built in a fresh interpreter with a fresh cache directory, by ours
  with ``shuffle="megatron"`` and ``"feistel"`` and by megatron-core (killed when its
  RSS passes ``MEGATRON_RSS_CAP``; the row says where it stopped). Memory is sampled
  by this process from the child's /proc/PID/status every 50 ms: peak VmRSS and peak
  RssAnon (what cannot be paged back to a file: the memory the build owns), beside the
  child's own VmHWM;
* the cache-hit start, twice, each in another fresh interpreter (the first checks the
  CRC of every cache file and records it, the second compares file identities only):
  IndexedDataset open (which validates the .idx) and GPTDataset construction from the
  cache (its check included), timed apart;
* ``__getitems__`` throughput: 200 batches of 32 random samples, timed on a second pass
  (the sparse .bin's pages are zero-filled on first touch).

The suite checks free disk and memory first and skips a size with the reason when
either is short; it removes every file it wrote.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time

import numpy as np

from bench.gpt import SEQUENCE, TOOLS, build_plan, import_megatron, megatron_dataset, progress

SIZES = {"10M": 10_000_000, "100M": 100_000_000, "300M": 300_000_000, "1B": 1_000_000_000}
DEFAULT_SIZES = ("10M", "100M", "300M")
MEAN_LENGTH = 1000
SIGMA = 1.0
CHUNK = 1 << 24  # documents per chunk of the corpus writer
MEGATRON_RSS_CAP = 18 << 30
SIDES = ("megatron-shuffle", "feistel", "megatron-core")
IDX_BYTES_PER_DOC = 20  # int32 length + int64 pointer + int64 boundary
CACHE_BYTES_PER_DOC = 26  # document index (2 epochs int32) + sample/shuffle index, generous
GIB = 1 << 30
BATCH = 32
BATCHES = 200
_CHILD = (
    "import sys; sys.path.insert(0, sys.argv.pop(1)); "
    "from bench.scale import _child_main; _child_main(sys.argv[1:])"
)


# -- the corpus ------------------------------------------------------------------------


def _chunk_lengths(seed: int, chunk: int, count: int) -> np.ndarray:
    """int32 [count] lengths of chunk ``chunk`` (each chunk has its own stream, so the two
    passes of :func:`write_scale_corpus` see the same lengths)."""
    rng = np.random.default_rng([seed, chunk])
    mu = np.log(MEAN_LENGTH) - SIGMA**2 / 2
    return np.maximum(1, rng.lognormal(mu, SIGMA, size=count)).astype(np.int32)


def write_scale_corpus(prefix: str, count: int, seed: int) -> tuple[int, np.ndarray]:
    """A MMIDIDX .idx of ``count`` one-sequence documents (uint16 tokens) written
    ``CHUNK`` documents at a time, and a sparse .bin of the matching size.

    Returns ``(tokens, sample_lengths)``: the total and the first chunk's lengths (for
    the build plan's arithmetic).
    """
    from megadata_core.format import idx_layout

    chunks = [(k, min(CHUNK, count - start)) for k, start in enumerate(range(0, count, CHUNK))]
    with open(prefix + ".idx", "wb") as stream:
        stream.write(idx_layout.pack_header(8, count, count + 1))  # 8: uint16
        for k, size in chunks:
            stream.write(_chunk_lengths(seed, k, size).tobytes())
        tokens = 0
        for k, size in chunks:
            lengths = _chunk_lengths(seed, k, size)
            ends = np.cumsum(lengths, dtype=np.int64)
            pointers = np.empty(size, np.int64)
            pointers[0] = tokens
            pointers[1:] = ends[:-1] + tokens
            pointers *= 2
            stream.write(pointers.tobytes())
            tokens += int(ends[-1])
        for start in range(0, count + 1, CHUNK):
            stream.write(np.arange(start, min(count + 1, start + CHUNK), dtype=np.int64).tobytes())
    with open(prefix + ".bin", "wb"):
        pass
    os.truncate(prefix + ".bin", tokens * 2)
    return tokens, _chunk_lengths(seed, 0, chunks[0][1])


def plan_for(tokens: int) -> dict:
    """``bench.gpt.build_plan``'s two-epoch plan for a corpus of ``tokens`` tokens."""

    class _Sum:  # build_plan only sums the lengths
        def sum(self, dtype=None):
            return tokens

        def __len__(self):
            return 0

    return build_plan(_Sum())


# -- the children ----------------------------------------------------------------------


def _status(pid: int) -> dict[str, int]:
    out = {}
    try:
        with open(f"/proc/{pid}/status") as stream:
            for line in stream:
                key, _, value = line.partition(":")
                if key in ("VmRSS", "RssAnon", "VmHWM"):
                    out[key] = int(value.split()[0]) * 1024
    except OSError:
        pass
    return out


def run_child(task: dict, cap: int | None = None, timeout: float = 3 * 3600) -> dict:
    """Run ``task`` in a fresh interpreter, sampling its memory every 50 ms; with
    ``cap``, kill it when its VmRSS passes ``cap`` bytes."""
    process = subprocess.Popen(
        [sys.executable, "-c", _CHILD, TOOLS, json.dumps(task)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )
    peaks = {"VmRSS": 0, "RssAnon": 0}
    killed = None
    began = time.perf_counter()
    stopping = threading.Event()

    def sample() -> None:
        nonlocal killed
        while not stopping.wait(0.05):
            status = _status(process.pid)
            for key in peaks:
                peaks[key] = max(peaks[key], status.get(key, 0))
            if cap is not None and status.get("VmRSS", 0) > cap and killed is None:
                killed = f"killed at VmRSS {status['VmRSS'] / GIB:.1f} GiB"
                process.kill()
            if time.perf_counter() - began > timeout and killed is None:
                killed = f"killed after {timeout:.0f} s"
                process.kill()

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    stdout, stderr = process.communicate()
    stopping.set()
    sampler.join()
    result = None
    for line in stdout.splitlines():
        if line.startswith("RESULT "):
            result = json.loads(line[len("RESULT ") :])
    if result is None:
        tail = stderr.strip().splitlines()[-3:]
        return {"failed": killed or f"exit {process.returncode}: {' | '.join(tail)}", **peaks}
    result.update(peaks)
    return result


def _ours(prefix: str, cache: str, shuffle: str, num_samples: int, deferred: bool = False):
    import megadata_core as mdc

    config = mdc.GPTDataConfig(
        random_seed=1234,
        sequence_length=SEQUENCE,
        path_to_cache=cache,
        eod_id=0,
        create_attention_mask=False,
        shuffle=shuffle,
    )
    began = time.perf_counter()
    indexed = mdc.IndexedDataset(prefix)
    opened = time.perf_counter() - began
    began = time.perf_counter()
    dataset = mdc.GPTDataset(indexed, range(len(indexed)), num_samples, config)
    return dataset, opened, time.perf_counter() - began


def _read_rate(dataset) -> float:
    """Samples/s of ``__getitems__`` over batches whose pages were read once before:
    the sparse .bin reads zero-filled pages, so a cold pass would time page-cache
    allocation, not the index lookups that grow with the corpus."""
    rng = np.random.default_rng(0)
    batches = rng.integers(0, len(dataset), size=(BATCHES, BATCH))
    for batch in batches:
        dataset.__getitems__(batch)
    began = time.perf_counter()
    for batch in batches:
        dataset.__getitems__(batch)
    return BATCHES * BATCH / (time.perf_counter() - began)


def _child_main(argv: list[str]) -> None:
    task = json.loads(argv[0])
    kind, side, prefix, cache = task["kind"], task["side"], task["prefix"], task["cache"]
    samples = task["num_samples"]
    result: dict = {}
    if side == "megatron-core":
        megatron = import_megatron()
        began = time.perf_counter()
        dataset = megatron_dataset(megatron, prefix, samples, cache)
        result["seconds"] = time.perf_counter() - began
    else:
        import megadata_core  # noqa: F401  (imported before the clock starts)

        shuffle = "megatron" if side == "megatron-shuffle" else "feistel"
        dataset, opened, built = _ours(prefix, cache, shuffle, samples)
        result.update(seconds=built, open_seconds=opened)
        if kind == "start":
            result["samples_per_s"] = _read_rate(dataset)
    result["samples"] = len(dataset)
    result["VmHWM"] = _status(os.getpid()).get("VmHWM", 0)
    print("RESULT " + json.dumps(result), flush=True)


# -- the suite -------------------------------------------------------------------------


def _free_memory() -> int:
    with open("/proc/meminfo") as stream:
        for line in stream:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


def _gib(value) -> float | None:
    return None if value is None else value / GIB


def run_size(bench, label: str, count: int) -> None:
    directory = bench.path("scale", label, "x")
    directory = os.path.dirname(directory)
    need = count * (IDX_BYTES_PER_DOC + CACHE_BYTES_PER_DOC * 2) + (1 << 30)
    free = shutil.disk_usage(directory).free
    if free < need:
        bench.note(f"scale {label}: skipped, {free / GIB:.0f} GiB free disk < {need / GIB:.0f}")
        return
    if _free_memory() < 4 * GIB:
        bench.note(f"scale {label}: skipped, less than 4 GiB of memory available")
        return
    try:
        prefix = os.path.join(directory, "corpus")
        began = time.perf_counter()
        tokens, _ = write_scale_corpus(prefix, count, bench.seed)
        plan = plan_for(tokens)
        progress(
            f"scale {label}: {count:,} documents, {tokens:,} tokens written in "
            f"{time.perf_counter() - began:.0f} s; {plan['num_samples']:,} samples, "
            f"{plan['epochs']} epochs (separate final: {plan['separate_final_epoch']})"
        )
        for side in SIDES:
            cache = os.path.join(directory, f"cache-{side}")
            task = {
                "kind": "build", "side": side, "prefix": prefix, "cache": cache,
                "num_samples": plan["num_samples"],
            }
            cap = MEGATRON_RSS_CAP if side == "megatron-core" else None
            build = run_child(task, cap)
            progress(f"scale {label} {side} build: {json.dumps(build)}")
            starts = []
            if side != "megatron-core" and "failed" not in build:
                time.sleep(2.5)  # past cache_files.RACY_NS: the first start records its check
                for _ in range(2):  # the first checks every byte, the second identities
                    starts.append(run_child({**task, "kind": "start"}))
                    progress(f"scale {label} {side} start: {json.dumps(starts[-1])}")
            _report(bench, label, count, side, build, starts)
            shutil.rmtree(cache, ignore_errors=True)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def _report(bench, label: str, count: int, side: str, build: dict, starts: list) -> None:
    name = f"{label} {side}"
    if "failed" in build:
        bench.note(
            f"{name}: build stopped ({build['failed']}); peak RSS "
            f"{build['VmRSS'] / GIB:.1f} GiB, RssAnon {build['RssAnon'] / GIB:.1f} GiB"
        )
        return
    seconds = build["seconds"]
    bench.row(f"{name}: build", "s", "lower", seconds, None, 1)
    bench.row(f"{name}: build per 100M documents", "s", "lower", seconds * 1e8 / count, None, 1)
    bench.row(f"{name}: peak RSS", "GiB", "lower", _gib(build["VmRSS"]), None, 1)
    bench.row(f"{name}: peak RssAnon", "GiB", "lower", _gib(build["RssAnon"]), None, 1)
    for start, when in zip(starts, ("first start (CRC)", "warm start")):
        if "failed" in start:
            bench.note(f"{name}: {when} failed ({start['failed']})")
            continue
        bench.row(f"{name}: {when}, .idx open", "s", "lower", start["open_seconds"], None, 1)
        bench.row(f"{name}: {when}, cached index", "s", "lower", start["seconds"], None, 1)
        rate = start["samples_per_s"]
        bench.row(f"{name}: {when}, __getitems__", "samples/s", "higher", rate, None, 1)


def suite_scale(bench) -> None:
    """One corpus of 10M..1B documents: build time and memory, start, reads."""
    wanted = [label for label in SIZES if label in bench.only] or list(DEFAULT_SIZES)
    bench.note(
        "scale: every build and start runs in a fresh interpreter; memory sampled from "
        "/proc/PID/status every 50 ms; the machine may be shared (times are wall clock)."
    )
    for label in wanted:
        run_size(bench, label, bench.scaled(SIZES[label], minimum=1000))
