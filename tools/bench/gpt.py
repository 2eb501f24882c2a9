"""The ``gpt`` suite of tools/bench.py: the GPT index core beside megatron-core's GPTDataset.

Usage::

    python tools/bench.py gpt                             # full run (~5 min, 2 cores)
    python tools/bench.py gpt --scale 0.01 --repeats 1    # smoke run (< 1 min)
    python tools/bench.py gpt --only build,cache          # some items only

Items:

* ``build`` (P1): building the train index (document, sample and shuffle indices) of
  10M documents (lognormal lengths, mean ~500 tokens), S = 4096, two epochs with a
  separate final epoch. The corpus is a real .idx and a sparse .bin of the right size.
  Every build runs in a fresh interpreter (this file, run as a script) with a fresh cache
  directory, so it is a real build; time is the GPTDataset constructor, memory is VmHWM
  of that interpreter (and VmHWM minus VmRSS after imports). Ours runs in Megatron's
  shuffle mode (its arrays are compared with Megatron's by value digests) and in Feistel
  mode.
* ``sample_index``: ``megadata_core.indices.sample_index`` (all threads, and one) beside
  Megatron's compiled ``helpers.build_sample_idx`` on the same arrays: 10M documents
  (geometric lengths, mean 500), two shuffled epochs, S = 4096; the rows compared equal.
* ``read`` (P3): batches of 32 random samples of 4096 + 1 tokens (tokens, labels,
  loss_mask, position_ids) from a ~50M-token uint16 corpus in the page cache: ours
  ``__getitems__`` against Megatron's ``__getitem__`` loop, and against a raw Python loop
  copying the same pieces from a flat memory map (the floor of any reader in Python).
* ``cache``: constructing the P1 dataset again from its cache (IndexedDataset open
  included), in this process, median of the repeats; and ours in the cache's three
  verification states (tools/bench/cache_states.py): every byte checked (the first
  start after a build), files vouched for by the entry's verified-files list (a
  restart), no check (the floor).

The suite reaches tools/bench.py only through the ``Bench`` object it is given, so it
never imports bench.py (which defines absl flags, and runs as ``__main__``).
"""

from __future__ import annotations

import gc
import glob
import hashlib
import importlib.util
import json
import os
import shutil
import statistics
import struct
import sys
import time
import warnings

import numpy as np

from bench.cache_states import time_states
from bench.harness import child_result, measure
from bench.peers import proc_status, quiet_import

SEQUENCE = 4096
INDEX_SEED = 1234
BATCH = 32
EOD = 0
VOCAB = 50_000
MEAN_LENGTH = 500
SIGMA = 1.0
MIB = 1024 * 1024
SIDES = ("ours", "feistel", "megatron")
LABELS = {"ours": "ours (megatron shuffle)", "feistel": "ours (feistel shuffle)"}
TOOLS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # where bench imports from
# The build child: argv[1] puts tools/ on the path, argv[2] holds the JSON arguments.
_CHILD = (
    "import sys; sys.path.insert(0, sys.argv.pop(1)); "
    "from bench.gpt import _child_main; _child_main(sys.argv[1:])"
)


def progress(message: str) -> None:
    print(f"  .. {message}", file=sys.stderr, flush=True)


def median(values: list) -> float | None:
    values = [value for value in values if value is not None]
    return statistics.median(values) if values else None


# -- corpora ------------------------------------------------------------------------


def lognormal_lengths(rng: np.random.Generator, count: int) -> np.ndarray:
    """int32 [count] document lengths, lognormal with mean ~MEAN_LENGTH, each >= 1."""
    mu = np.log(MEAN_LENGTH) - SIGMA**2 / 2
    return np.maximum(1, rng.lognormal(mu, SIGMA, size=count)).astype(np.int32)


def write_idx(prefix: str, lengths: np.ndarray) -> int:
    """A MMIDIDX v1 .idx (uint16 tokens, one sequence per document); returns .bin bytes."""
    lengths = np.asarray(lengths, dtype=np.int32)
    pointers = np.zeros(len(lengths), dtype=np.int64)
    np.cumsum(lengths[:-1], dtype=np.int64, out=pointers[1:])
    pointers *= 2
    boundaries = np.arange(len(lengths) + 1, dtype=np.int64)
    with open(prefix + ".idx", "wb") as stream:
        stream.write(b"MMIDIDX\x00\x00" + struct.pack("<QBQQ", 1, 8, len(lengths), len(boundaries)))
        stream.write(lengths.tobytes())
        stream.write(pointers.tobytes())
        stream.write(boundaries.tobytes())
    return int(lengths.sum(dtype=np.int64)) * 2


def write_sparse_corpus(prefix: str, lengths: np.ndarray) -> int:
    """A real .idx and a sparse .bin of the matching size (nothing is written to it)."""
    size = write_idx(prefix, lengths)
    with open(prefix + ".bin", "wb"):
        pass
    os.truncate(prefix + ".bin", size)
    return size


def write_token_corpus(prefix: str, lengths: np.ndarray, rng: np.random.Generator) -> int:
    """A real corpus: tokens uniform in [1, VOCAB), every document ending in EOD."""
    tokens = rng.integers(1, VOCAB, size=int(lengths.sum(dtype=np.int64)), dtype=np.uint16)
    tokens[np.cumsum(lengths, dtype=np.int64) - 1] = EOD
    tokens.tofile(prefix + ".bin")
    return write_idx(prefix, lengths)


# -- the two libraries ------------------------------------------------------------------


class _Tokenizer:
    """What megatron's GPTDataset reads from a tokenizer (no pad: it pads with -1)."""

    eod = EOD
    vocab_size = VOCAB
    unique_identifiers = {"class": "bench_gpt._Tokenizer", "eod": EOD}


def import_megatron():
    """(torch, megatron's gpt_dataset module, IndexedDataset, Split), or None."""
    modules = quiet_import(
        "torch",
        "megatron.core.datasets.gpt_dataset",
        "megatron.core.datasets.indexed_dataset",
        "megatron.core.datasets.utils",
    )
    if modules is None:
        return None
    torch, gpt_dataset, indexed_dataset, utils = modules
    torch.set_num_threads(1)
    return torch, gpt_dataset, indexed_dataset.IndexedDataset, utils.Split


def document_ids(count: int) -> np.ndarray:
    """Every document of the corpus, as both libraries get them: int32, as Megatron's
    BlendedMegatronDatasetBuilder passes a split's ids (``numpy.arange(lo, hi, 1, int32)``)."""
    return np.arange(count, dtype=np.int32)


def megatron_dataset(megatron, prefix: str, num_samples, cache: str):
    """megatron-core's train GPTDataset over every document of ``prefix``."""
    _, gpt_dataset, indexed_class, split = megatron
    config = gpt_dataset.GPTDatasetConfig(
        random_seed=INDEX_SEED,
        sequence_length=SEQUENCE,
        blend=([prefix], None),
        split="1,0,0",
        path_to_cache=cache,
        tokenizer=_Tokenizer(),
        reset_position_ids=False,
        reset_attention_mask=False,
        eod_mask_loss=False,
        create_attention_mask=False,
    )
    indexed = indexed_class(prefix)
    ids = document_ids(len(indexed.sequence_lengths))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return gpt_dataset.GPTDataset(indexed, prefix, ids, num_samples, split.train, config)


def ours_dataset(prefix: str, num_samples, cache: str | None, shuffle: str = "megatron"):
    """megadata's train GPTDataset over every document of ``prefix``: Megatron's concat
    windows, whose document, sample and shuffle indices this suite compares with
    Megatron's and reads directly (best_fit datasets have none: the packing suite)."""
    import megadata_core as mdc

    config = mdc.GPTDataConfig(
        random_seed=INDEX_SEED,
        sequence_length=SEQUENCE,
        path_to_cache=cache,
        eod_id=EOD,
        create_attention_mask=False,
        shuffle=shuffle,
        packing="concat",
    )
    indexed = mdc.IndexedDataset(prefix)
    return mdc.GPTDataset(indexed, document_ids(len(indexed)), num_samples, config)


# -- P1: the build, one fresh interpreter per run ------------------------------------------


def value_digest(array) -> str:
    """sha256 of the shape and the values as little-endian int64 (dtype-independent)."""
    array = np.asarray(array)
    digest = hashlib.sha256(repr(tuple(array.shape)).encode("ascii"))
    flat = array.reshape(-1)
    step = 1 << 20
    for start in range(0, flat.size, step):
        digest.update(flat[start : start + step].astype("<i8").tobytes())
    return digest.hexdigest()


def build_child(side: str, prefix: str, num_samples: int, cache: str, head: int) -> dict:
    """One build, measured; runs in a fresh interpreter (:data:`_CHILD`).

    ``head`` is the number of samples before the final epoch: where a separate final
    epoch splits the shuffle index into two permutations.
    """
    if side == "megatron":
        megatron = import_megatron()

        def construct():
            return megatron_dataset(megatron, prefix, num_samples, cache)
    else:
        import megadata_core  # noqa: F401  (imported before the baseline)

        def construct():
            return ours_dataset(prefix, num_samples, cache, "megatron" if side == "ours" else side)

    gc.collect()
    baseline = proc_status("VmRSS")
    start = time.perf_counter()
    dataset = construct()
    seconds = time.perf_counter() - start
    peak = proc_status("VmHWM")
    result = {"seconds": seconds, "peak": peak, "baseline": baseline, "samples": len(dataset)}
    documents = np.asarray(dataset.document_index)
    indexed = dataset.dataset if side == "megatron" else dataset.indexed
    count = len(indexed.sequence_lengths)
    first_epoch = np.bincount(documents[:count], minlength=count)
    result["first_epoch_is_permutation"] = bool(first_epoch.min() == 1 == first_epoch.max())
    if side == "feistel":
        result["separate"] = getattr(dataset.shuffle_index, "first", None) == head
        return result
    shuffle = np.asarray(dataset.shuffle_index)
    result["separate"] = bool(
        0 < head < len(shuffle)
        and shuffle[:head].max() == head - 1
        and shuffle[head:].min() == head
    )
    result["digests"] = {
        "document_index": value_digest(documents),
        "sample_index": value_digest(dataset.sample_index),
        "shuffle_index": value_digest(shuffle),
    }
    return result


def run_build_child(side: str, prefix: str, num_samples: int, cache: str, head: int) -> dict:
    arguments = json.dumps([side, prefix, num_samples, cache, head])
    return child_result([sys.executable, "-c", _CHILD, TOOLS, arguments], f"build child ({side})")


def build_plan(lengths: np.ndarray) -> dict:
    """num_samples for exactly 2 epochs whose final epoch is shuffled apart (Megatron's
    rule: it gives fewer than int(0.8 * samples_per_epoch) samples)."""
    tokens = int(lengths.sum(dtype=np.int64))
    per_epoch = (tokens - 1) // SEQUENCE  # (T - extra) // S
    num_samples = per_epoch + per_epoch // 2
    epochs = max(1, -(-(num_samples * SEQUENCE + 1) // tokens))
    before_final = ((epochs - 1) * tokens - 1) // SEQUENCE
    from_final = num_samples - before_final
    threshold = int(0.8 * per_epoch)
    return {
        "documents": len(lengths),
        "tokens_per_epoch": tokens,
        "samples_per_epoch": per_epoch,
        "num_samples": num_samples,
        "epochs": epochs,
        "samples_before_final_epoch": before_final,
        "samples_from_final_epoch": from_final,
        "threshold": threshold,
        "separate_final_epoch": epochs > 1 and from_final < threshold,
    }


class Build:
    """The P1 corpus and the cache directories the ``cache`` item reuses."""

    def __init__(self, bench) -> None:
        self.bench = bench
        rng = np.random.default_rng(bench.seed + 10)
        count = bench.scaled(10_000_000, minimum=1000)
        lengths = lognormal_lengths(rng, count)
        self.prefix = bench.path("build", "corpus")
        size = write_sparse_corpus(self.prefix, lengths)
        self.plan = build_plan(lengths)
        progress(
            f"build: {count:,} documents, {self.plan['tokens_per_epoch']:,} tokens "
            f"(mean {lengths.mean():.0f}), sparse .bin of {size / 2**30:.2f} GiB"
        )
        self.caches: dict[str, str] = {}
        self._runs = 0

    def run(self, side: str) -> dict:
        """One measured build in a fresh interpreter and a fresh cache directory; the
        directory of the latest run per side is kept for the ``cache`` item."""
        self._runs += 1
        cache = os.path.join(self.bench.workdir, "build", f"cache_{side}_{self._runs}")
        plan = self.plan
        result = run_build_child(
            side, self.prefix, plan["num_samples"], cache, plan["samples_before_final_epoch"]
        )
        old = self.caches.get(side)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
        self.caches[side] = cache
        return result

    def cache_of(self, side: str) -> str:
        if side not in self.caches:
            self.run(side)
        return self.caches[side]


def item_build(bench, build: Build, have_megatron: bool) -> None:
    plan = build.plan
    bench.note(
        "build plan: "
        + ", ".join(
            f"{key}={value:,}" if not isinstance(value, bool) else f"{key}={value}"
            for key, value in plan.items()
        )
    )
    sides = [side for side in SIDES if have_megatron or side != "megatron"]
    results = {side: [] for side in sides}
    for repeat in range(bench.repeats):
        order = sides if repeat % 2 == 0 else sides[::-1]
        for side in order:
            progress(f"build: repeat {repeat + 1}/{bench.repeats}, {side}")
            results[side].append(build.run(side))

    def stat(side, value):
        if side not in results:
            return None
        return median([value(result) for result in results[side]])

    label = (
        f"build train index, {plan['documents'] / 1e6:g}M docs, "
        f"{plan['num_samples']:,} samples, 2 epochs"
    )
    for side in ("ours", "feistel"):
        name = f"{label}, {LABELS[side]}"
        bench.row(
            f"{name}: time",
            "s",
            "lower",
            stat(side, lambda r: r["seconds"]),
            stat("megatron", lambda r: r["seconds"]),
            bench.repeats,
        )
        bench.row(
            f"{name}: peak RSS",
            "MiB",
            "lower",
            stat(side, lambda r: r["peak"] / MIB),
            stat("megatron", lambda r: r["peak"] / MIB),
            bench.repeats,
        )
        bench.row(
            f"{name}: peak RSS above imports",
            "MiB",
            "lower",
            stat(side, lambda r: (r["peak"] - r["baseline"]) / MIB),
            stat("megatron", lambda r: (r["peak"] - r["baseline"]) / MIB),
            bench.repeats,
        )

    bench.check(
        "build plan: 2 epochs, final epoch below int(0.8 * samples_per_epoch)",
        plan["epochs"] == 2 and plan["separate_final_epoch"],
    )
    for side in sides:
        first = results[side][0]
        separate = all(result["separate"] for result in results[side])
        permutation = all(result["first_epoch_is_permutation"] for result in results[side])
        samples = first["samples"]
        bench.check(
            f"build {LABELS.get(side, side)}: final epoch shuffled apart "
            f"(shuffle order = permutation of [0, {plan['samples_before_final_epoch']:,}) then "
            f"of the rest; first epoch of the document index = every document once)",
            separate and permutation,
        )
        expected = (plan["epochs"] * plan["tokens_per_epoch"] - 1) // SEQUENCE
        bench.check(
            f"build {LABELS.get(side, side)}: {expected:,} samples (2 full epochs)",
            samples == expected,
            f"(got {samples:,})",
        )
    if have_megatron:
        digests = [result["digests"] for side in ("ours", "megatron") for result in results[side]]
        same = all(digest == digests[0] for digest in digests)
        bench.check(
            "build: ours (megatron shuffle) document_index, sample_index, shuffle_index "
            "values equal megatron's (sha256 of int64 values, every repeat)",
            same,
        )
    else:
        bench.check("build: arrays equal megatron's", None, "(megatron-core not installed)")
    bench.note(
        "build goals: ours (megatron shuffle)/megatron <= 1.0 in time and in peak RSS; "
        "ours (feistel shuffle) <= 0.2x megatron's time. Megatron measured here "
        "earlier: 2.44 s and 708 MB peak for a comparable build."
    )
    bench.note(
        "build: each run is a fresh interpreter writing to a fresh cache directory; "
        "time = IndexedDataset open + the GPTDataset constructor (index build + cache "
        "write + reload; ours also validates the .idx arrays on open and CRC-32s the "
        "arrays as it writes them, Megatron does neither; neither fsyncs); both get "
        "the same int32 np.arange of document ids; peak RSS = VmHWM of that "
        "interpreter, 'above imports' subtracts VmRSS after imports (megatron-core "
        "imports torch). The .bin is sparse: the build never reads it."
    )


# -- sample_index beside Megatron's C++ build_sample_idx ------------------------------------


def item_sample_index(bench) -> None:
    """``megadata_core.indices.sample_index`` (all threads, and one) beside Megatron's
    compiled ``helpers.build_sample_idx`` on the same arrays; medians of the repeats."""
    from megadata_core.indices import sample_index  # not at the top: the build children

    modules = quiet_import("megatron.core.datasets.helpers")
    rng = np.random.default_rng(bench.seed + 30)
    count, epochs = bench.scaled(10_000_000, minimum=10_000), 2
    sizes = np.clip(rng.geometric(1 / MEAN_LENGTH, count), 1, 2**20).astype(np.int32)
    doc_idx = np.concatenate([rng.permutation(count), rng.permutation(count)]).astype(np.int32)
    args = (sizes, doc_idx, SEQUENCE, epochs, int(sizes.sum(dtype=np.int64)), True, True)
    progress(f"sample_index: {count:,} documents x {epochs} epochs, S = {SEQUENCE}")

    def runs(function) -> tuple[float | None, np.ndarray]:
        timed = [measure(function) for _ in range(bench.repeats)]
        return median([seconds for seconds, _ in timed]), timed[-1][1]

    ours_s, ours = runs(lambda: sample_index(*args))
    one_s, _ = runs(lambda: sample_index(*args, num_threads=1))
    theirs_s, theirs = None, None
    if modules is not None:
        theirs_s, theirs = runs(lambda: modules[0].build_sample_idx(*args))
    what = f"sample_index, {count:,} documents x {epochs} epochs ({len(ours) - 1:,} samples)"
    bench.row(f"{what}, all threads", "s", "lower", ours_s, theirs_s, bench.repeats)
    bench.row(f"{what}, 1 thread", "s", "lower", one_s, theirs_s, bench.repeats)
    bench.check("sample_index: rows equal megatron's build_sample_idx",
                None if theirs is None else bool(np.array_equal(ours, theirs)),
                "" if theirs is not None else "(megatron-core not installed)")


# -- P3: reading batches ----------------------------------------------------------------------


def raw_plan(dataset, pointers: np.ndarray, positions: np.ndarray) -> list[tuple]:
    """(destination start, destination stop, source start, source stop) of every piece of
    every sample at ``positions``, in tokens of a flat [B * (S + 1)] output and of the
    flat token view of the .bin (computed per piece in Python, outside any timing)."""
    if dataset.sample_index is None:  # a best_fit dataset: packed bins, no windows
        from megadata_core import DataError

        raise DataError(f"raw plan: reads concat samples, not packing={dataset.config.packing!r}")
    lengths = dataset.indexed.sequence_lengths
    width = SEQUENCE + 1
    plan = []
    for slot, position in enumerate(positions.tolist()):
        row = int(dataset.shuffle_index[position])
        (begin, offset), (end, last) = dataset.sample_index[row : row + 2].tolist()
        at = slot * width
        for place in range(begin, end + 1):
            document = int(dataset.document_index[place])
            start = offset if place == begin else 0
            stop = last + 1 if place == end else int(lengths[document])
            source = int(pointers[document]) // 2
            plan.append((at, at + stop - start, source + start, source + stop))
            at += stop - start
        if at != (slot + 1) * width:
            raise RuntimeError(f"raw plan: sample {position} spans {at - slot * width} tokens")
    return plan


def time_batches(function, batches) -> float:
    """Median seconds per batch of ``function(batch)`` over ``batches``."""
    gc.collect()
    seconds = []
    for batch in batches:
        start = time.perf_counter()
        function(batch)
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds)


def item_read(bench, megatron) -> None:
    rng = np.random.default_rng(bench.seed + 20)
    target = bench.scaled(50_000_000, minimum=200_000)
    lengths = lognormal_lengths(rng, int(target / MEAN_LENGTH * 1.1))
    lengths = lengths[np.cumsum(lengths, dtype=np.int64) <= target]
    prefix = bench.path("read", "corpus")
    size = write_token_corpus(prefix, lengths, rng)
    caches = os.path.join(bench.workdir, "read")
    ours = ours_dataset(prefix, None, os.path.join(caches, "cache_ours"))
    theirs = None
    if megatron is not None:
        theirs = megatron_dataset(megatron, prefix, None, os.path.join(caches, "cache_megatron"))
    count = len(ours)
    batches_per_repeat = bench.scaled(300, minimum=20)
    progress(
        f"read: {len(lengths):,} documents, {size // 2:,} tokens, {count:,} samples, "
        f"{batches_per_repeat} batches of {BATCH} per repeat"
    )
    flat = np.asarray(np.memmap(prefix + ".bin", dtype=np.uint16, mode="r"))
    pointers = np.asarray(ours.indexed.sequence_pointers)
    batches = [rng.integers(0, count, BATCH) for _ in range(batches_per_repeat)]
    plans = {id(batch): raw_plan(ours, pointers, batch) for batch in batches}
    out = np.empty((BATCH, SEQUENCE + 1), dtype=np.uint16)
    out_flat = out.reshape(-1)

    def raw(batch):
        for at, end, start, stop in plans[id(batch)]:
            out_flat[at:end] = flat[start:stop]
        return out

    def megatron_loop(batch):
        return [theirs[int(index)] for index in batch]

    # Hot page cache, and every page touched once through each reader's own mapping.
    with open(prefix + ".bin", "rb") as stream:
        while stream.read(1 << 24):
            pass
    int(flat[::2048].sum(dtype=np.int64))
    everything = np.arange(count)
    for start in range(0, count, 256):
        ours.__getitems__(everything[start : start + 256])
    if theirs is not None:
        for index in range(count):
            theirs[index]

    # Values: ours = the raw bytes, and = megatron's samples, on a few batches.
    raw_same = megatron_same = True
    for batch in batches[:3]:
        mine = ours.__getitems__(batch)
        text = raw(batch)
        raw_same &= np.array_equal(mine["tokens"], text[:, :-1]) and np.array_equal(
            mine["labels"], text[:, 1:]
        )
        if theirs is not None:
            for slot, index in enumerate(batch.tolist()):
                sample = theirs[index]
                megatron_same &= list(sample) == list(mine) and all(
                    np.array_equal(mine[key][slot], value.numpy()) for key, value in sample.items()
                )
    bench.check("read: ours' tokens and labels equal the raw copy of the same bytes", raw_same)
    bench.check(
        f"read: ours' batches equal megatron's samples (3 batches of {BATCH}, every key)",
        megatron_same if theirs is not None else None,
    )

    sides = {"ours": lambda batch: ours.__getitems__(batch), "raw": raw}
    if theirs is not None:
        sides["megatron"] = megatron_loop
    results = {side: [] for side in sides}
    for repeat in range(bench.repeats):
        order = list(sides) if repeat % 2 == 0 else list(sides)[::-1]
        for side in order:
            results[side].append(time_batches(sides[side], batches))
    speed = {side: BATCH / median(values) for side, values in results.items()}
    bench.row(
        f"read {BATCH} x {SEQUENCE + 1} tokens, hot page cache",
        "samples/s",
        "higher",
        speed["ours"],
        speed.get("megatron"),
        bench.repeats,
    )
    bench.row(
        "read: ours / raw piece copy (throughput)",
        "x",
        "higher",
        speed["ours"] / speed["raw"],
        None,
        bench.repeats,
    )
    bench.note(
        f"read: raw piece copy {speed['raw']:,.0f} samples/s; ours/raw = "
        f"{speed['ours'] / speed['raw']:.2f} (goal >= 0.67)"
        + (
            f"; ours/megatron = {speed['ours'] / speed['megatron']:.1f}x (goal >= 10x; "
            "Megatron measured here earlier: 14.5k samples/s)"
            if "megatron" in speed
            else ""
        )
    )
    bench.note(
        f"read: {len(batches)} batches of {BATCH} random samples per repeat, median batch "
        "time; keys tokens, labels, loss_mask, position_ids (no attention mask). Megatron = "
        "its __getitem__ per index (torch tensors, torch.set_num_threads(1), no collation); "
        "raw = a Python loop of slice copies from a flat memmap into a preallocated "
        f"[{BATCH}, {SEQUENCE + 1}] uint16 array, pieces located beforehand (untimed)."
    )


# -- cache hits -----------------------------------------------------------------------------------


def _listing(directory: str) -> dict[str, float]:
    """The cache files and their mtimes (not the verified-files lists a hit may write)."""
    return {
        name: os.stat(os.path.join(directory, name)).st_mtime_ns
        for name in sorted(os.listdir(directory))
        if not name.endswith("-verified.json")
    }


def item_cache(bench, build: Build, megatron) -> None:
    plan = build.plan
    num_samples = plan["num_samples"]
    makers = {
        "ours": lambda: ours_dataset(build.prefix, num_samples, build.cache_of("ours")),
        "feistel": lambda: ours_dataset(
            build.prefix, num_samples, build.cache_of("feistel"), "feistel"
        ),
    }
    if megatron is not None:
        makers["megatron"] = lambda: megatron_dataset(
            megatron, build.prefix, num_samples, build.cache_of("megatron")
        )
    for side in makers:
        build.cache_of(side)  # built before any timing
    before = {side: _listing(build.caches[side]) for side in makers}
    results = {side: [] for side in makers}
    lengths = {}
    for repeat in range(bench.repeats):
        order = list(makers) if repeat % 2 == 0 else list(makers)[::-1]
        for side in order:
            gc.collect()
            start = time.perf_counter()
            dataset = makers[side]()
            results[side].append(time.perf_counter() - start)
            lengths[side] = len(dataset)
            del dataset
    unchanged = all(_listing(build.caches[side]) == before[side] for side in makers)
    bench.check("cache: every load was a cache hit (cache files unchanged)", unchanged)
    bench.check(
        "cache: loaded datasets have the planned length",
        len(set(lengths.values())) == 1,
        f"({lengths})",
    )
    theirs = median(results.get("megatron", []))
    for side in ("ours", "feistel"):
        bench.row(
            f"cache-hit load of the build index, {LABELS[side]}",
            "ms",
            "lower",
            median(results[side]) * 1e3,
            None if theirs is None else theirs * 1e3,
            bench.repeats,
        )
    states = time_states(makers["ours"], build.cache_of("ours"), bench.repeats)
    for state, what in (
        ("checked", "every byte checked (first start after a build)"),
        ("vouched", "files vouched for by the verified-files list (restart)"),
        ("unverified", "whole-file check off (floor)"),
    ):
        bench.row(f"cache-hit load, ours, {what}", "ms", "lower",
                  median(states[state]) * 1e3, None, bench.repeats)
    index_mib = sum(
        os.path.getsize(path) for path in glob.glob(os.path.join(build.cache_of("ours"), "*.npy"))
    ) / MIB
    checked, floor = median(states["checked"]), median(states["unverified"])
    bench.note(
        f"cache: checking every byte of the {index_mib:,.0f} MiB of cached index files "
        f"costs {(checked - floor) * 1e3:,.1f} ms once per file identity "
        f"({index_mib / max(checked - floor, 1e-9) / 1024:,.2f} GiB/s); a restart on "
        f"unchanged files pays {(median(states['vouched']) - floor) * 1e3:,.2f} ms more "
        "than no check at all."
    )
    bench.note(
        "cache: time to construct the build item's GPTDataset again from its cache "
        "directory, IndexedDataset open included, in this process (ours validates "
        "the .idx arrays on open, hashes sampled bytes of the .idx arrays for the key, "
        "and checks the CRC-32 of every byte of each cached file once per file "
        "identity; Megatron checks nothing)."
    )


# -- the suite ----------------------------------------------------------------------------------


def suite_gpt(bench) -> None:
    """GPT index core: index build time and memory, batch reads, cache-hit loads."""
    in_process = bench.wants("read") or bench.wants("cache")
    megatron = import_megatron() if in_process else None
    if in_process:
        have_megatron = megatron is not None
    else:  # the build runs megatron-core in child interpreters only
        have_megatron = importlib.util.find_spec("megatron") is not None
    if not have_megatron:
        bench.note("megatron-core is not installed: its column is n/a.")
    build = Build(bench) if bench.wants("build") or bench.wants("cache") else None
    if bench.wants("build"):
        item_build(bench, build, have_megatron)
    if bench.wants("sample_index"):
        item_sample_index(bench)
    if bench.wants("read"):
        item_read(bench, megatron)
    if bench.wants("cache"):
        item_cache(bench, build, megatron)


def _child_main(argv: list[str]) -> None:
    side, prefix, num_samples, cache, head = json.loads(argv[0])
    result = build_child(side, prefix, num_samples, cache, head)
    print("RESULT " + json.dumps(result), flush=True)

