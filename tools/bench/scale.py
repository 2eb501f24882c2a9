"""The ``scale`` suite of tools/bench.py: the train index of one corpus of up to a billion
documents, ours beside megatron-core's, each build in a fresh interpreter.

Usage::

    python tools/bench.py scale                          # 10M, 100M, 300M documents
    python tools/bench.py scale --only 10M,1B            # some sizes (1B only when named)
    python tools/bench.py scale --only 1B,feistel        # some sides at some sizes
    python tools/bench.py scale --scale 0.001 --only 10M # smoke run (10,000 documents)

Items are sizes: ``10M``, ``100M``, ``300M`` (the default) and ``1B`` (only when named
in ``--only``: ~20 GB of .idx plus up to ~16 GB of index cache, one side at a time), and
sides: ``megatron-shuffle``, ``feistel``, ``best-fit`` and ``best-fit-feistel``
(``packing="best_fit"`` with each shuffle) and ``megatron-core`` (not at 1B unless named); every
side when none is named. Per size:

* the corpus: a real MMIDIDX .idx of N documents with lognormal lengths (mean ~1,000
  tokens), written in chunks with the format's header layout, and a sparse .bin of the
  right size (created with truncate; reads touch a few pages);
* the train index, S = 4096, two epochs whose final epoch is shuffled apart (as the
  ``gpt`` suite), built in a fresh interpreter with a fresh cache directory, by ours
  with ``shuffle="megatron"`` and ``"feistel"``, each with ``packing="concat"`` and
  ``"best_fit"``, and by megatron-core (killed when its RSS passes ``RSS_CAP``; the
  note says where it stopped). Memory is sampled
  by this process from the child's /proc/PID/status every 50 ms: peak VmRSS and peak
  RssAnon (what cannot be paged back to a file: the memory the build owns), beside the
  child's own VmHWM;
* the cache-hit start, twice, each in another fresh interpreter (the first checks the
  CRC of every cache file and records it, the second compares file identities only):
  the corpus open (``open_corpus``: the .idx validated, or vouched for by the cache's
  record of a validation of the same files; the row says which) and GPTDataset
  construction from the cache (its check included), timed apart;
* index lookups alone (``locate_pieces``: which pieces of which documents each sample
  reads, the part of ``__getitems__`` that grows with the corpus) over 200 batches of
  32 random samples, timed on a first pass (pages perhaps not in memory) and a second,
  each with its major and minor page faults (/proc/self/stat); then ``__getitems__``
  over the first 50 batches, timed on a second pass. The sparse .bin's pages are
  holes, zero-filled at each read and dropped first under memory pressure: once the
  .idx fills the page cache (1B documents on a 23 GiB machine) every pass pays that,
  so compare the lookups across sizes.

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
#: megatron-core and best_fit (whose memory grows with the corpus) are killed past this
#: VmRSS: this project's machine has 23 GiB, shared.
RSS_CAP = 12 << 30
CAPPED = ("megatron-core",)
SIDES = ("megatron-shuffle", "feistel", "best-fit", "best-fit-feistel", "megatron-core")
BEST_FIT_SIDES = ("best-fit", "best-fit-feistel")
PEER_SIDE = "megatron-core"
MEGATRON_MAX = 300_000_000  # megatron-core at larger sizes only when named
IDX_BYTES_PER_DOC = 20  # int32 length + int64 pointer + int64 boundary
#: One side's cache at a time (removed after it): document index (2 epochs, int32: 8
#: bytes) + sample and shuffle index (~0.5 sample a document, 16 bytes each), generous.
CACHE_BYTES_PER_DOC = 26
SETTLE_SECONDS = 2.5  # past cache_files.RACY_NS: a check of an older file is recorded
GIB = 1 << 30
BATCH = 32
BATCHES = 200  # index lookups timed over this many batches
READ_BATCHES = 50  # whole __getitems__ over the first of them (a 1B .bin read is slow)
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


def _ours(prefix: str, cache: str, side: str, num_samples: int):
    """Our train dataset: ``(dataset, open seconds, how the .idx was trusted, build or
    load seconds)``. The corpus is opened as ``mdc.open_corpus(prefix, cache)`` does,
    in two timed steps to tell a validation from a vouched record."""
    import megadata_core as mdc
    from megadata_core.cache.corpus_trust import ensure_validated

    config = mdc.GPTDataConfig(
        random_seed=1234,
        sequence_length=SEQUENCE,
        path_to_cache=cache,
        eod_id=0,
        create_attention_mask=False,
        shuffle="feistel" if side.endswith("feistel") else "megatron",
        packing="best_fit" if side in BEST_FIT_SIDES else "concat",
    )
    began = time.perf_counter()
    indexed = mdc.IndexedDataset.open_deferred(prefix)
    trust = ensure_validated(indexed, cache)
    opened = time.perf_counter() - began
    began = time.perf_counter()
    dataset = mdc.GPTDataset(indexed, range(len(indexed)), num_samples, config)
    return dataset, opened, trust, time.perf_counter() - began


def _faults() -> tuple[int, int]:
    """This process's (major, minor) page faults so far (/proc/self/stat fields 12, 10)."""
    with open("/proc/self/stat") as stream:
        fields = stream.read().rpartition(")")[2].split()
    return int(fields[9]), int(fields[7])


def _read_rates(dataset) -> dict:
    """Read rates: ``lookups_first_per_s`` and ``lookup_first_faults`` (major, minor),
    the index lookups alone (which pieces of which documents each sample reads: what
    grows with the corpus) over batches never read before (run first: the pages they
    touch may not be in the page cache, or not mapped); ``lookups_per_s`` and
    ``lookup_faults``, the same batches again; ``samples_per_s``, ``__getitems__`` over
    batches read once before. The sparse .bin's pages are holes: every read of one
    allocates zeroed page-cache pages, which the kernel drops first under memory
    pressure (with a 20 GB .idx in 23 GiB of RAM they are gone by the next pass), so
    the full figure at large sizes times page allocation, not the index."""
    from megadata_core.modes.best_fit import locate_packed_pieces
    from megadata_core.modes.concat import locate_pieces

    rng = np.random.default_rng(0)
    batches = rng.integers(0, len(dataset), size=(BATCHES, BATCH))
    lengths, extra = dataset.indexed.sequence_lengths, dataset._extra

    def lookups(batch) -> None:
        rows = dataset.shuffle_index[batch]
        if dataset._packed is not None:
            locate_packed_pieces(dataset._packed, lengths, rows)
        else:
            locate_pieces(dataset.sample_index, dataset.document_index, lengths, rows,
                                  extra)

    def timed(work, count: int) -> tuple[float, tuple[int, ...]]:
        before = _faults()
        began = time.perf_counter()
        for batch in batches[:count]:
            work(batch)
        rate = count * BATCH / (time.perf_counter() - began)
        return rate, tuple(after - then for after, then in zip(_faults(), before))

    result = {}
    result["lookups_first_per_s"], result["lookup_first_faults"] = timed(lookups, BATCHES)
    result["lookups_per_s"], result["lookup_faults"] = timed(lookups, BATCHES)
    timed(dataset.__getitems__, READ_BATCHES)
    result["samples_per_s"] = timed(dataset.__getitems__, READ_BATCHES)[0]
    return result


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

        dataset, opened, trust, built = _ours(prefix, cache, side, samples)
        result.update(seconds=built, open_seconds=opened, idx=trust)
        if kind == "start":
            result.update(_read_rates(dataset))
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


def _sides(bench, count: int) -> list[str]:
    """The sides to run at ``count`` documents: those named in ``--only``, else every
    side within its default size limit."""
    named = [side for side in SIDES if side in bench.only]
    if named:
        return named
    limits = {PEER_SIDE: MEGATRON_MAX}
    return [side for side in SIDES if count <= limits.get(side, count)]


def run_size(bench, label: str, count: int) -> None:
    directory = bench.path("scale", label, "x")
    directory = os.path.dirname(directory)
    need = count * (IDX_BYTES_PER_DOC + CACHE_BYTES_PER_DOC) + (1 << 30)
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
            f"{plan['epochs']} epochs (separate final: {plan['separate_final_epoch']}); "
            f"{free / GIB:.0f} GiB disk and {_free_memory() / GIB:.1f} GiB memory free"
        )
        time.sleep(SETTLE_SECONDS)  # the first validation of the .idx can be recorded
        results = {}
        for side in _sides(bench, count):
            cache = os.path.join(directory, f"cache-{side}")
            task = {
                "kind": "build", "side": side, "prefix": prefix, "cache": cache,
                "num_samples": plan["num_samples"],
            }
            cap = RSS_CAP if side in CAPPED else None
            build = run_child(task, cap)
            progress(f"scale {label} {side} build: {json.dumps(build)}")
            starts = []
            if side != PEER_SIDE and "failed" not in build:
                time.sleep(SETTLE_SECONDS)  # the first start records its check
                for _ in range(2):  # the first checks every byte, the second identities
                    starts.append(run_child({**task, "kind": "start"}))
                    progress(f"scale {label} {side} start: {json.dumps(starts[-1])}")
            results[side] = (build, starts)
            shutil.rmtree(cache, ignore_errors=True)
        peer = results.get(PEER_SIDE, ({"failed": "not run"}, []))[0]
        for side, (build, starts) in results.items():
            _report(bench, label, count, side, build, starts, None if side == PEER_SIDE else peer)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def _report(
    bench, label: str, count: int, side: str, build: dict, starts: list, peer: dict | None
) -> None:
    """The rows of one side; ``peer`` (megatron-core's build) gives the ratios."""
    name = f"{label} {side}"
    if "failed" in build:
        bench.note(
            f"{name}: build stopped ({build['failed']}); peak RSS "
            f"{build['VmRSS'] / GIB:.1f} GiB, RssAnon {build['RssAnon'] / GIB:.1f} GiB"
        )
        return
    theirs = peer if peer is not None and "failed" not in peer else {}
    seconds = build["seconds"]

    def per_100m(result: dict) -> float | None:
        return None if "seconds" not in result else result["seconds"] * 1e8 / count

    bench.row(f"{name}: build", "s", "lower", seconds, theirs.get("seconds"), 1)
    bench.row(
        f"{name}: build per 100M documents", "s", "lower", per_100m(build), per_100m(theirs), 1
    )
    for key, what in (("VmRSS", "peak RSS"), ("RssAnon", "peak RssAnon")):
        bench.row(f"{name}: {what}", "GiB", "lower", _gib(build[key]), _gib(theirs.get(key)), 1)
    for start, when in zip(starts, ("first start (CRC)", "warm start")):
        if "failed" in start:
            bench.note(f"{name}: {when} failed ({start['failed']})")
            continue
        bench.row(
            f"{name}: {when}, corpus open (.idx {start['idx']})", "s", "lower",
            start["open_seconds"], None, 1,
        )
        bench.row(f"{name}: {when}, cached index", "s", "lower", start["seconds"], None, 1)
        bench.row(
            f"{name}: {when}, open + index", "s", "lower",
            start["open_seconds"] + start["seconds"], None, 1,
        )
        bench.row(f"{name}: {when}, __getitems__ (second pass)", "samples/s", "higher",
                  start["samples_per_s"], None, 1)
        for first, label in ((True, "first pass"), (False, "second pass")):
            tag = "_first" if first else ""
            bench.row(f"{name}: {when}, index lookups ({label})", "samples/s", "higher",
                      start.get(f"lookups{tag}_per_s"), None, 1)
            major, minor = start.get(f"lookup{tag}_faults", (None, None))
            bench.row(f"{name}: {when}, index lookups ({label}): major page faults", "faults",
                      "lower", major, None, 1)
            bench.row(f"{name}: {when}, index lookups ({label}): minor page faults", "faults",
                      "lower", minor, None, 1)


def suite_scale(bench) -> None:
    """One corpus of 10M..1B documents: build time and memory, start, reads."""
    wanted = [label for label in SIZES if label in bench.only] or list(DEFAULT_SIZES)
    bench.note(
        "scale: every build and start runs in a fresh interpreter; memory sampled from "
        "/proc/PID/status every 50 ms; the machine may be shared (times are wall clock); "
        "ratios are ours / megatron-core's build at the same size; __getitems__ and its "
        "index lookups are timed on a second pass over the same batches (the sparse .bin "
        "zero-fills a page at each read of a hole the kernel has dropped)."
    )
    for label in wanted:
        run_size(bench, label, bench.scaled(SIZES[label], minimum=1000))
