"""The ``maxtext`` suite of tools/bench.py: MaxText's ``mmap_npy`` path beside megadata's.

Usage (MaxText 0.2.5 needs Python >= 3.12; the test command's venv has both)::

    ~/.cache/megadata/venvs/maxtext-0.2.5-py3.12/bin/python tools/bench.py maxtext
    ... tools/bench.py maxtext --scale 0.01 --repeats 1   # smoke run (seconds)

Without ``maxtext`` installed the peer's figures are ``n/a``. Items:

* ``build``: the train indices (document, sample, shuffle) of a 10M-document corpus
  (lognormal lengths, mean ~500 tokens; a real .idx and a sparse .bin), S = 4096, 1.5
  epochs' samples (two epochs, the last one separate). MaxText: its offline builder
  ``convert`` (``maxtext/utils/mmap_index_builder.py``; its start-up build runs the same
  ``build_indices`` and saves the same files); ours: the dataset the MaxText hook serves
  (``megadata_adapters.trainers.maxtext``), built into an empty cache. Each build runs in
  a fresh interpreter: time, and peak RSS (VmHWM) as its own row. The three arrays are
  compared by value digests.
* ``blend``: the blend dispatch (which dataset, which of its samples) for 2M samples over
  weights 0.5, 0.3, 0.2: MaxText's ``build_blending_indices`` (a Python loop per sample,
  run on every host) against ours ``megatron_blending_indices``; equal value for value.
* ``read``: 2,000 samples (``{"text": int32 [S + 1]}``), one ``__getitem__`` at a time,
  from a ~50M-token uint16 corpus in the page cache: MaxText's ``MegatronNpyDataSource``
  against megadata's source behind the hook, over the same indices (built by each), in
  two orders: a host's indices in sequence, as Grain's reader asks for them (the samples
  behind them are shuffled, so each is a random read of the corpus; megadata reads ahead
  64 at a time there), and random indices (each read alone). The samples are compared.

The suite reaches tools/bench.py only through the ``Bench`` object it is given.
"""

from __future__ import annotations

import gc
import json
import logging
import os
import shutil
import statistics
import sys
import time

import numpy as np

from bench.gpt import lognormal_lengths, value_digest, write_sparse_corpus, write_token_corpus
from bench.harness import child_result, progress
from bench.peers import proc_status, quiet_import

SEQUENCE = 4096
SEED = 1234
EOD = 0
DOCUMENTS = 10_000_000
BLEND_WEIGHTS = (0.5, 0.3, 0.2)
BLEND_SAMPLES = 2_000_000
READ_TOKENS = 50_000_000
READS = 2_000
TOOLS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The build child: argv[1] puts tools/ on the path, argv[2] holds the JSON arguments.
_CHILD = (
    "import sys; sys.path.insert(0, sys.argv.pop(1)); "
    "from bench.maxtext import _child_main; _child_main(sys.argv[1:])"
)


def import_maxtext():
    """MaxText's index utilities, blending and data source modules, or None."""
    return quiet_import(
        "maxtext.input_pipeline._mmap_index_utils",
        "maxtext.input_pipeline._megatron_blending",
        "maxtext.input_pipeline._mmap_datasource",
    )


def directory(bench, *parts: str) -> str:
    """A new directory under the bench's scratch directory."""
    path = os.path.join(bench.workdir, *parts)
    os.makedirs(path, exist_ok=True)
    return path


def median(values: list) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


# -- the two sides ----------------------------------------------------------------------


def ours_source(prefix: str, num_samples: int, index_dir: str):
    """The source megadata's MaxText hook serves for ``grain_train_files: INDEX_DIR|PREFIX``
    with ``max_target_length`` = SEQUENCE (built into ``index_dir``, megadata's cache)."""
    from megadata_adapters.trainers.maxtext.source import MegadataNpySource, MmapNpyPlan

    plan = MmapNpyPlan(
        [(index_dir, prefix, num_samples)], None, None, seq_length=SEQUENCE, eod_id=EOD,
        seed=SEED, split=None, split_index=0, num_epoch=1, path_to_cache=index_dir,
    )
    return MegadataNpySource(plan)


def maxtext_build(prefix: str, num_samples: int, index_dir: str) -> str:
    """MaxText's offline build into ``index_dir``; the hash naming its files."""
    index_utils = import_maxtext()[0]
    paths = index_utils.convert(
        input_paths=[prefix], output_dir=index_dir, seq_length=SEQUENCE,
        num_samples=num_samples, seed=SEED,
    )
    return os.path.basename(paths["document_index"]).split("-")[0]


def maxtext_source(prefix: str, index_dir: str):
    """MaxText's own ``MegatronNpyDataSource`` over the files ``maxtext_build`` wrote."""
    datasource = import_maxtext()[2]
    return datasource.MegatronNpyDataSource(index_dir, prefix, eod_id=EOD, seq_length=SEQUENCE)


# -- build: one fresh interpreter per run --------------------------------------------------


def build_child(side: str, prefix: str, num_samples: int, index_dir: str) -> dict:
    """One build, measured, in a fresh interpreter; the arrays' value digests."""
    if side == "maxtext":
        import_maxtext()
    else:
        import megadata_adapters.trainers.maxtext  # noqa: F401  (imported before the baseline)
    gc.collect()
    baseline = proc_status("VmRSS")
    start = time.perf_counter()
    if side == "maxtext":
        file_hash = maxtext_build(prefix, num_samples, index_dir)
        seconds = time.perf_counter() - start
        peak = proc_status("VmHWM")
        arrays = [
            np.load(os.path.join(index_dir, f"{file_hash}-{name}_index.npy"), mmap_mode="r")
            for name in ("document", "sample", "shuffle")
        ]
    else:
        dataset = ours_source(prefix, num_samples, index_dir).dataset
        seconds = time.perf_counter() - start
        peak = proc_status("VmHWM")
        arrays = [dataset.document_index, dataset.sample_index, dataset.shuffle_index]
    return {
        "seconds": seconds, "peak": peak, "baseline": baseline,
        "digests": [value_digest(np.asarray(a)) for a in arrays],
    }


def _child_main(argv: list[str]) -> None:
    result = build_child(*json.loads(argv[0]))
    print("RESULT " + json.dumps(result), flush=True)


def suite_build(bench, have_peer: bool) -> None:
    documents = bench.scaled(DOCUMENTS, 1000)
    prefix = bench.path("build", "corpus")
    lengths = lognormal_lengths(np.random.default_rng(bench.seed), documents)
    write_sparse_corpus(prefix, lengths)
    per_epoch = (int(lengths.sum(dtype=np.int64)) - 1) // SEQUENCE
    num_samples = per_epoch + per_epoch // 2
    progress(f"build: {documents:,} documents, {num_samples:,} samples")
    sides = ["ours", "maxtext"] if have_peer else ["ours"]
    found: dict[str, list[dict]] = {side: [] for side in sides}
    for repeat in range(bench.repeats):
        for side in sides if repeat % 2 == 0 else sides[::-1]:
            index_dir = directory(bench, "build", f"index-{side}-{repeat}")
            arguments = json.dumps([side, prefix, num_samples, index_dir])
            found[side].append(child_result(
                [sys.executable, "-c", _CHILD, TOOLS, arguments], f"build child ({side})"
            ))
            shutil.rmtree(index_dir, ignore_errors=True)
    seconds = {s: median([r["seconds"] for r in found[s]]) for s in sides}
    peaks = {s: median([r["peak"] / 2**20 for r in found[s]]) for s in sides}
    bench.row(f"train index build, {documents:,} docs", "s", "lower",
              seconds["ours"], seconds.get("maxtext"), bench.repeats)
    above = {s: median([(r["peak"] - r["baseline"]) / 2**20 for r in found[s]]) for s in sides}
    bench.row(f"train index build, {documents:,} docs: peak RSS", "MiB", "lower",
              peaks["ours"], peaks.get("maxtext"), bench.repeats)
    bench.row(f"train index build, {documents:,} docs: peak RSS above imports", "MiB", "lower",
              above["ours"], above.get("maxtext"), bench.repeats)
    if have_peer:
        same = found["ours"][0]["digests"] == found["maxtext"][0]["digests"]
        bench.check("build: document, sample and shuffle indices equal MaxText's", same)


# -- blend dispatch -------------------------------------------------------------------------


def suite_blend(bench, have_peer: bool) -> None:
    from megadata_core.indices.blending import megatron_blending_indices

    size = bench.scaled(BLEND_SAMPLES, 1000)
    weights = np.asarray(BLEND_WEIGHTS, dtype=np.float64)
    progress(f"blend: {size:,} samples over {len(weights)} datasets")

    def theirs():
        blending = import_maxtext()[1]
        index = np.zeros(size, dtype=np.int16)
        sample = np.zeros(size, dtype=np.int64)
        blending.build_blending_indices(index, sample, weights, len(weights), size)
        return index, sample

    def ours():
        return megatron_blending_indices(weights, size)

    times: dict[str, list[float]] = {"ours": [], "maxtext": []}
    last: dict[str, tuple] = {}
    for repeat in range(bench.repeats):
        for side in ("ours", "maxtext") if repeat % 2 == 0 else ("maxtext", "ours"):
            if side == "maxtext" and not have_peer:
                continue
            gc.collect()
            start = time.perf_counter()
            last[side] = (ours if side == "ours" else theirs)()
            times[side].append(time.perf_counter() - start)
    bench.row(f"blend dispatch, {size:,} samples", "s", "lower",
              median(times["ours"]), median(times["maxtext"]), bench.repeats)
    if have_peer:
        same = all(np.array_equal(a, b) for a, b in zip(last["ours"], last["maxtext"]))
        bench.check("blend: dataset and sample indices equal MaxText's", same)


# -- random reads ----------------------------------------------------------------------------


def suite_read(bench, have_peer: bool) -> None:
    tokens = bench.scaled(READ_TOKENS, 100_000)
    rng = np.random.default_rng(bench.seed)
    lengths = lognormal_lengths(rng, max(10, tokens // 500))
    prefix = bench.path("read", "corpus")
    write_token_corpus(prefix, lengths, rng)
    per_epoch = (int(lengths.sum(dtype=np.int64)) - 1) // SEQUENCE
    ours = ours_source(prefix, per_epoch, directory(bench, "read", "ours"))
    sources = {"ours": ours}
    if have_peer:
        index_dir = directory(bench, "read", "maxtext")
        maxtext_build(prefix, per_epoch, index_dir)
        sources["maxtext"] = maxtext_source(prefix, index_dir)
    count = min(READS, len(ours))
    orders = {
        # what Grain asks a host's source for: its indices in sequence (the samples
        # behind them are shuffled: random places of the corpus)
        "in Grain's order": list(range(count)),
        # any index at a time (a user's own random access)
        "random indices": rng.integers(0, len(ours), size=count).tolist(),
    }
    progress(f"read: {count:,} samples of {SEQUENCE + 1} tokens of {len(ours):,}, two orders")
    for source in sources.values():  # into the page cache, and each side's first touches
        for i in range(len(ours)):
            source[i]
    for order, indices in orders.items():
        times: dict[str, list[float]] = {"ours": [], "maxtext": []}
        for repeat in range(bench.repeats):
            for side in list(sources) if repeat % 2 == 0 else list(sources)[::-1]:
                source = sources[side]
                start = time.perf_counter()
                for i in indices:
                    source[i]
                times[side].append(time.perf_counter() - start)
        rate = {s: count / median(times[s]) if times[s] else None for s in times}
        bench.row(f"reads {order}, {count:,} samples of {SEQUENCE + 1} tokens", "samples/s",
                  "higher", rate["ours"], rate["maxtext"], bench.repeats)
        if have_peer:
            same = all(
                np.array_equal(ours[i]["text"], sources["maxtext"][i]["text"]) for i in indices
            )
            bench.check(f"read {order}: every sample equals MaxText's", same)


def suite_maxtext(bench) -> None:
    bench.peer = "maxtext"
    os.environ.setdefault("TQDM_DISABLE", "1")  # MaxText's index builder draws bars
    logging.getLogger().setLevel(logging.WARNING)  # and logs each phase and file
    have_peer = import_maxtext() is not None
    if not have_peer:
        bench.note("maxtext is not installed (Python >= 3.12, pip install 'maxtext[tpu]==0.2.5'): "
                   "the peer's figures are n/a")
    if bench.wants("build"):
        suite_build(bench, have_peer)
    if bench.wants("blend"):
        suite_blend(bench, have_peer)
    if bench.wants("read"):
        suite_read(bench, have_peer)
