"""The ``packing`` suite of tools/bench.py: best-fit packed samples beside Grain's packers.

Usage::

    python tools/bench.py packing                            # full run (a few min, 2 cores)
    python tools/bench.py packing --scale 0.01 --repeats 1   # smoke run
    python tools/bench.py packing --only padding,read        # some items only

Items:

* ``padding``: padding fraction and documents cut, on the same documents: the demo
  corpus (this Python's standard library, byte tokens, as tools/demo.py builds it) and
  a lognormal length distribution with a long tail (40k documents x scale, mean ~1k
  tokens, sigma 1.2). Capacity C = S + 1 = 4097 tokens per sample (the extra token) for
  every side. Ours = :func:`megadata_core.indices.packing.best_fit_pack` (exact best fit
  decreasing over the whole split, documents in a shuffled order); Grain =
  ``grain.experimental.BestFitPackIterDataset`` and ``FirstFitPackIterDataset``
  (``num_packing_bins`` 32, MaxText's batch of bins), fed the same shuffled documents,
  each longer than C first cut into C-token pieces as ours does (Grain would drop the
  rest of it); concat = Megatron's windows (no padding, the tail dropped; a document is
  cut when a window boundary falls inside it). Lower bound = 1 - T / (ceil(T / C) C).
* ``build``: the train index of the gpt suite's 10M documents (x scale; lognormal,
  mean ~500), one epoch, S = 4096, ``packing="best_fit"`` vs ``"concat"``, both with
  ``document_masking``; each build a fresh interpreter with a fresh cache directory
  (cold): time of the ``GPTDataset`` constructor and VmHWM (peak RSS).
* ``thd``: the padding of ``packing_alignment = 2 * cp_size`` (THD for context
  parallelism), cp 1, 2, 4, 8, against unaligned best_fit and Megatron's per-batch
  sequence-packing rule on the same documents (:mod:`bench.packing_thd`).
* ``read``: batches of 32 random samples x 4096 + 1 tokens, ``document_masking=True``,
  from a ~20M-token corpus (x scale) in the page cache: best_fit ``__getitems__`` vs
  concat ``__getitems__`` (median batch time), and vs Grain's ``BestFitPackIterDataset``
  over the same documents (``MapDataset.source(IndexedDataset).shuffle``, each cut to
  C tokens as Grain requires, 32 bins, ``.batch(32)``) in tokens/s.

OLMo-core's ``NumpyPackedFSLDataset`` (best fit decreasing too, "OBFD") is a second peer
for ``padding`` and ``build``. ``ai2-olmo-core`` 3.0.0 installs without CUDA but pins
``filelock<4`` and ``huggingface_hub<2``, so it runs in an overlay venv in the bench cache
(:mod:`bench.olmo`; created on first use at scale >= 0.1, only used below it) in fresh
interpreters, ``long_doc_strategy=fragment`` (cut, as ours; its default truncates), at
``sequence_length`` 4096: its packer takes powers of 2 only, so ours is packed at 4096 too
for those rows, and its instance count must equal ours. ``padding``: its default input, a
raw uint16 token file with EOS ending each document (scanned for boundaries). ``build``:
the same 10M documents as a sparse token file plus the Dolma ``.csv.gz`` metadata
(``use_array_if_local=False``), time of constructor + ``prepare()`` (it packs in a forked
worker; peak RSS counts it). If the overlay cannot be built, its rows are n/a and the
notes say why.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time

import numpy as np

from bench.gpt import lognormal_lengths, time_batches, write_sparse_corpus, write_token_corpus
from bench.harness import child_result, median_of, progress
from bench.olmo import OLMO_CORE, overlay_python, run_olmo, write_olmo_metadata, write_olmo_tokens
from bench.packing_thd import item_thd
from bench.peers import proc_status

SEQUENCE = 4096
CAPACITY = SEQUENCE + 1
BATCH = 32
GRAIN_BINS = 32
EOD = 0
OLMO_SEQUENCE = 4096  # OLMo-core's packer (a segment tree) takes powers of 2 only
OLMO_VOCAB = 50_000
OLMO_MIN_SCALE = 0.1  # below: the OLMo overlay venv is used only if it exists already
OLMO_BUILD_REPEATS = 2  # at most: one OLMo-core build of 10M documents takes ~2 min
MIB = 1024 * 1024
LONG_MEAN = 1000
LONG_SIGMA = 1.2
TOOLS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_CHILD = (
    "import sys; sys.path.insert(0, sys.argv.pop(1)); "
    "from bench.packing import _child_main; _child_main(sys.argv[1:])"
)


# -- document lengths ---------------------------------------------------------------


def long_tail_lengths(rng: np.random.Generator, count: int) -> np.ndarray:
    """int64 [count] lognormal lengths, mean ~LONG_MEAN, sigma LONG_SIGMA, each >= 1."""
    mu = np.log(LONG_MEAN) - LONG_SIGMA**2 / 2
    return np.maximum(1, rng.lognormal(mu, LONG_SIGMA, size=count)).astype(np.int64)


def demo_lengths(bench) -> np.ndarray:
    """int64 [D] document lengths of the demo corpus (stdlib sources, byte tokens + EOD)."""
    import megadata_core as mdc
    from megadata_cli.make_demo_corpus import build_demo_corpus
    from megadata_core.preprocess import ByteTokenizer, preprocess_jsonl

    jsonl = bench.path("demo", "stdlib.jsonl")
    build_demo_corpus(jsonl, max_documents=bench.scaled(2000, minimum=100))
    summary = preprocess_jsonl(
        [jsonl], bench.path("demo", "stdlib"), ByteTokenizer, append_eod=True, workers=1
    )
    lengths = np.asarray(mdc.IndexedDataset(summary.output_prefixes["text"]).sequence_lengths)
    shutil.rmtree(os.path.dirname(jsonl), ignore_errors=True)
    return lengths.astype(np.int64)


# -- the packers -----------------------------------------------------------------------


def lower_bound(lengths: np.ndarray, capacity: int = CAPACITY) -> float:
    """1 - T / (fewest samples x C): the least padding any packing can have."""
    tokens = int(lengths.sum())
    return 1 - tokens / (-(-tokens // capacity) * capacity)


def pack_ours(lengths: np.ndarray, order: np.ndarray, capacity: int = CAPACITY) -> dict:
    from megadata_core.indices.packing import best_fit_pack

    start = time.perf_counter()
    bins = best_fit_pack(lengths, capacity, order)
    seconds = time.perf_counter() - start
    pieces = np.bincount(bins.piece_document, minlength=len(lengths))
    kept = np.bincount(bins.piece_document, weights=bins.piece_length, minlength=len(lengths))
    return {
        "samples": bins.num_bins,
        "padding": 1 - int(lengths.sum()) / (bins.num_bins * capacity),
        "cut": int((pieces > 1).sum()),
        "every_token_once": bool(np.array_equal(kept, lengths)),
        "seconds": seconds,
    }


def pack_concat(lengths: np.ndarray, order: np.ndarray) -> dict:
    """Megatron's windows over the documents in ``order``: sample j = tokens [jS, jS+S]."""
    ordered = lengths[order]
    ends = np.cumsum(ordered)
    starts = ends - ordered
    samples = (int(ends[-1]) - 1) // SEQUENCE
    cut = (starts // SEQUENCE != (ends - 1) // SEQUENCE) & (starts < samples * SEQUENCE)
    return {"samples": samples, "padding": 0.0, "cut": int(cut.sum())}


def _pieces(lengths: np.ndarray, order: np.ndarray) -> np.ndarray:
    """int64 piece lengths of the documents in ``order``, each cut into C-token pieces
    and a remainder, as ours cuts them (Grain's packers would truncate instead)."""
    ordered = lengths[order]
    count = -(-ordered // CAPACITY)
    pieces = np.full(int(count.sum()), CAPACITY, dtype=np.int64)
    pieces[np.cumsum(count) - 1] = ordered - (count - 1) * CAPACITY
    return pieces


class _Zeros:
    """Grain map: element i = ``{"tokens": zeros[:pieces[i]]}`` (lengths are all that
    packing looks at)."""

    def __init__(self, pieces: np.ndarray) -> None:
        self.pieces = pieces
        self.zeros = np.zeros(CAPACITY, dtype=np.int32)

    def __call__(self, index: int) -> dict:
        return {"tokens": self.zeros[: self.pieces[index]]}


def pack_grain(packer: str, lengths: np.ndarray, order: np.ndarray, seed: int) -> dict:
    import grain

    pieces = _pieces(lengths, order)
    source = grain.MapDataset.range(len(pieces)).map(_Zeros(pieces)).to_iter_dataset()
    packed = getattr(grain.experimental, packer)(
        source,
        length_struct={"tokens": CAPACITY},
        num_packing_bins=GRAIN_BINS,
        seed=seed,
        shuffle_bins=False,
    )
    samples = real = 0
    start = time.perf_counter()
    for element in packed:
        samples += 1
        real += int(np.count_nonzero(element["tokens_segment_ids"]))
    return {
        "samples": samples,
        "padding": 1 - int(lengths.sum()) / (samples * CAPACITY),
        "cut": int((lengths > CAPACITY).sum()),
        "every_token_once": real == int(lengths.sum()),
        "seconds": time.perf_counter() - start,
    }


def padding_olmo(bench, olmo: tuple[str | None, str], name: str, label: str,
                 lengths: np.ndarray, order: np.ndarray) -> None:
    """OLMo-core's NumpyPackedFSLDataset beside ours, both at OLMO_SEQUENCE tokens per
    sample, on the same documents (its token file holds them in ``order``)."""
    ours = pack_ours(lengths, order, OLMO_SEQUENCE)
    theirs: dict | str = olmo[1] or "n/a"
    if olmo[0] is not None:
        progress(f"padding, {name}: OLMo-core NumpyPackedFSLDataset (overlay venv)")
        tokens = bench.path("padding-olmo", "tokens.npy")
        write_olmo_tokens(tokens, lengths[order], EOD, OLMO_VOCAB, bench.seed)
        theirs = run_olmo(olmo[0], tokens, OLMO_SEQUENCE, EOD, OLMO_VOCAB, metadata=False,
                          work_dir=os.path.join(bench.workdir, "padding-olmo", "work"))
        shutil.rmtree(os.path.join(bench.workdir, "padding-olmo"), ignore_errors=True)
    got = isinstance(theirs, dict)
    at = f"{label}, S = {OLMO_SEQUENCE}"
    bench.row(f"padding, {at}, peer = OLMo-core packed", "%", "lower",
              100 * ours["padding"], 100 * theirs["padding"] if got else None, 1)
    bench.row(f"documents cut, {at}, peer = OLMo-core packed", "docs", "lower",
              ours["cut"], theirs["cut"] if got else None, 1)
    if not got:
        bench.note(f"padding, {name}: OLMo-core n/a: {theirs}")
        return
    longer = int((lengths > OLMO_SEQUENCE).sum())
    bench.check(
        f"padding, {name}: OLMo-core's instance count equals ours at S = {OLMO_SEQUENCE}",
        theirs["samples"] == ours["samples"],
        f"({theirs['samples']:,} vs {ours['samples']:,})",
    )
    bench.check(
        f"documents cut, {name}: OLMo-core's and ours only those longer than {OLMO_SEQUENCE}",
        theirs["cut"] == ours["cut"] == longer,
        f"({theirs['cut']:,}, {ours['cut']:,}, {longer:,})",
    )
    bench.check(f"every token once, {name}: OLMo-core", theirs["every_token_once"])
    bench.note(
        f"padding, {name}, S = {OLMO_SEQUENCE}: samples ours {ours['samples']:,}, OLMo-core "
        f"{theirs['samples']:,}, fewest possible "
        f"{-(-int(lengths.sum()) // OLMO_SEQUENCE):,} (lower bound "
        f"{100 * lower_bound(lengths, OLMO_SEQUENCE):.4f}%); OLMo-core build (EOS scan + OBFD, "
        f"fresh process) {theirs['seconds']:.2f} s, ours best_fit_pack {ours['seconds']:.3f} s"
    )


def item_padding(bench, olmo: tuple[str | None, str]) -> None:
    rng = np.random.default_rng(bench.seed + 30)
    corpora = {
        "demo corpus": demo_lengths(bench),
        "lognormal": long_tail_lengths(rng, bench.scaled(40_000, minimum=500)),
    }
    for name, lengths in corpora.items():
        order = rng.permutation(len(lengths))
        tokens = int(lengths.sum())
        longer = int((lengths > CAPACITY).sum())
        progress(
            f"padding, {name}: {len(lengths):,} documents, {tokens:,} tokens, mean "
            f"{lengths.mean():.0f}, max {lengths.max():,}, {longer:,} longer than {CAPACITY}"
        )
        ours = pack_ours(lengths, order)
        concat = pack_concat(lengths, order)
        bound = lower_bound(lengths)
        grain = {}
        for packer in ("BestFitPackIterDataset", "FirstFitPackIterDataset"):
            progress(f"padding, {name}: grain {packer}")
            grain[packer] = pack_grain(packer, lengths, order, bench.seed)
        label = f"{name}, {len(lengths) / 1e3:g}k docs"
        best, first = grain["BestFitPackIterDataset"], grain["FirstFitPackIterDataset"]
        bench.row(f"padding, {label}, peer = Grain BestFit", "%", "lower",
                  100 * ours["padding"], 100 * best["padding"], 1)
        bench.row(f"padding, {label}, peer = Grain FirstFit", "%", "lower",
                  100 * ours["padding"], 100 * first["padding"], 1)
        bench.row(f"padding, {label}, peer = lower bound", "%", "lower",
                  100 * ours["padding"], 100 * bound, 1)
        bench.row(f"documents cut, {label}, peer = concat", "docs", "lower",
                  ours["cut"], concat["cut"], 1)
        bench.row(f"pack time, {label}, peer = Grain BestFit", "s", "lower",
                  ours["seconds"], best["seconds"], 1)
        padding_olmo(bench, olmo, name, label, lengths, order)
        bench.check(
            f"padding, {name}: ours <= Grain BestFit's",
            ours["padding"] <= best["padding"],
            f"({100 * ours['padding']:.3f}% vs {100 * best['padding']:.3f}%)",
        )
        bench.check(
            f"padding, {name}: ours within 0.5 points of the lower bound",
            ours["padding"] - bound <= 0.005,
            f"({100 * ours['padding']:.3f}% vs {100 * bound:.3f}%)",
        )
        bench.check(
            f"documents cut, {name}: only those longer than {CAPACITY} ({longer:,})",
            ours["cut"] == longer,
            f"(ours {ours['cut']:,})",
        )
        bench.check(
            f"every token once, {name}: ours and both Grain packers",
            ours["every_token_once"] and all(g["every_token_once"] for g in grain.values()),
        )
        bench.note(
            f"padding, {name}: samples: ours {ours['samples']:,}, Grain BestFit "
            f"{best['samples']:,}, FirstFit {first['samples']:,} (padding "
            f"{100 * first['padding']:.3f}%), concat {concat['samples']:,} (no padding; "
            f"{concat['cut']:,} documents cut), fewest possible "
            f"{-(-int(lengths.sum()) // CAPACITY):,}"
        )
    bench.note(
        "padding: C = 4097 tokens per sample for every side; Grain gets the documents in "
        f"the same shuffled order, cut into C-token pieces as ours cuts them, "
        f"num_packing_bins={GRAIN_BINS}, shuffle_bins=False; its padding falls with more "
        "bins (at 256 bins, ~0.5% on a 20k-document lognormal sample measured here)."
    )


# -- build: fresh interpreters -------------------------------------------------------------


def _config(cache: str, packing: str):
    """The bench's GPT config: S = SEQUENCE, document masking, no attention mask."""
    import megadata_core as mdc

    return mdc.GPTDataConfig(
        random_seed=1234,
        sequence_length=SEQUENCE,
        path_to_cache=cache,
        eod_id=EOD,
        pad_id=EOD,
        create_attention_mask=False,
        packing=packing,
        document_masking=True,
    )


def build_child(packing: str, prefix: str, cache: str) -> dict:
    _config(cache, packing)  # imports megadata_core before the baseline
    baseline = proc_status("VmRSS")
    start = time.perf_counter()
    dataset = _read_dataset(prefix, cache, packing)
    seconds = time.perf_counter() - start
    return {
        "seconds": seconds,
        "peak": proc_status("VmHWM"),
        "baseline": baseline,
        "samples": len(dataset),
    }


def run_build_child(packing: str, prefix: str, cache: str) -> dict:
    return child_result(
        [sys.executable, "-c", _CHILD, TOOLS, json.dumps([packing, prefix, cache])],
        f"build child ({packing})",
    )


def _resources_for(documents: int, workdir: str) -> str | None:
    """Why a build of ``documents`` cannot run here (memory, disk), or None."""
    need_disk = documents * 20 * 3  # .idx + the cached indices, generously
    free_disk = shutil.disk_usage(workdir).free
    if free_disk < need_disk:
        return f"{free_disk / 2**30:.1f} GiB free disk, needs ~{need_disk / 2**30:.1f} GiB"
    try:
        import psutil

        available = psutil.virtual_memory().available
    except ImportError:
        return None
    need_memory = documents * 150  # peak RSS measured here: ~100 bytes per document
    if available < need_memory:
        return f"{available / 2**30:.1f} GiB memory available, needs ~{need_memory / 2**30:.1f}"
    return None


def build_olmo(bench, olmo: tuple[str | None, str], lengths: np.ndarray,
               ours: list[dict], label: str) -> None:
    """Cold builds of OLMo-core's NumpyPackedFSLDataset (S = OLMO_SEQUENCE) over the same
    documents, beside our best_fit builds (``ours``)."""
    repeats = min(bench.repeats, OLMO_BUILD_REPEATS)
    results: list[dict] = []
    failed = olmo[1]
    if olmo[0] is not None:
        tokens = bench.path("build-olmo", "tokens.npy")
        write_olmo_metadata(tokens, lengths)
        for repeat in range(repeats):
            progress(f"build: OLMo-core NumpyPackedFSLDataset, repeat {repeat + 1}/{repeats}")
            work = os.path.join(bench.workdir, "build-olmo", f"work_{repeat}")
            result = run_olmo(olmo[0], tokens, OLMO_SEQUENCE, EOD, OLMO_VOCAB,
                              metadata=True, work_dir=work)
            shutil.rmtree(work, ignore_errors=True)
            if isinstance(result, str):
                failed = result
                break
            results.append(result)
        shutil.rmtree(os.path.join(bench.workdir, "build-olmo"), ignore_errors=True)
    got = bool(results) and not failed

    def stat(value, side):
        return median_of([value(r) for r in side]) if got or side is ours else None

    metric = f"{label}, best_fit (peer = OLMo-core NumpyPackedFSLDataset)"
    runs = len(results) if got else 0
    bench.row(f"{metric}: time", "s", "lower",
              stat(lambda r: r["seconds"], ours), stat(lambda r: r["seconds"], results), runs)
    bench.row(f"{metric}: peak RSS", "MiB", "lower",
              stat(lambda r: r["peak"] / MIB, ours), stat(lambda r: r["peak"] / MIB, results),
              runs)
    bench.row(f"{metric}: peak RSS above imports", "MiB", "lower",
              stat(lambda r: (r["peak"] - r["baseline"]) / MIB, ours),
              stat(lambda r: (r["peak"] - r["baseline"]) / MIB, results), runs)
    if not got:
        bench.note(f"build: OLMo-core n/a: {failed}")
        return
    from megadata_core.indices.packing import best_fit_pack

    expected = best_fit_pack(lengths.astype(np.int64), OLMO_SEQUENCE,
                             np.arange(len(lengths))).num_bins
    bench.check(
        f"build: OLMo-core's instance count equals ours at S = {OLMO_SEQUENCE}",
        results[0]["samples"] == expected and results[0]["every_token_once"],
        f"({results[0]['samples']:,} vs {expected:,})",
    )
    bench.note(
        f"build: OLMo-core NumpyPackedFSLDataset, sequence_length={OLMO_SEQUENCE} (its packer "
        f"takes powers of 2; ours {CAPACITY} = S + 1), long_doc_strategy=fragment, boundaries "
        "from the Dolma metadata .csv.gz (use_array_if_local=False: a 10M-document token file "
        "to scan for EOS would be ~10 GB here), constructor + prepare() in a fresh "
        "interpreter with a fresh work_dir; it packs in a forked worker (the peak is the larger "
        "of the parent's VmHWM and the worker's ru_maxrss) and does not shuffle (its loader "
        f"does); {results[0]['samples']:,} instances; ours: shuffle + best fit + "
        "document_masking index, in-process."
    )


def item_build(bench, olmo: tuple[str | None, str]) -> None:
    count = bench.scaled(10_000_000, minimum=1000)
    short = _resources_for(count, bench.workdir)
    if short:
        bench.note(f"build skipped: {short}")
        return
    lengths = lognormal_lengths(np.random.default_rng(bench.seed + 10), count)
    prefix = bench.path("build", "corpus")
    write_sparse_corpus(prefix, lengths)
    progress(f"build: {count:,} documents, {int(lengths.sum(dtype=np.int64)):,} tokens")
    sides = ("best_fit", "concat")
    results = {side: [] for side in sides}
    for repeat in range(bench.repeats):
        for side in sides if repeat % 2 == 0 else sides[::-1]:
            progress(f"build: repeat {repeat + 1}/{bench.repeats}, {side}")
            cache = os.path.join(bench.workdir, "build", f"cache_{side}_{repeat}")
            results[side].append(run_build_child(side, prefix, cache))
            shutil.rmtree(cache, ignore_errors=True)

    def stat(side, value):
        return median_of([value(result) for result in results[side]])

    label = f"build train index, {count / 1e6:g}M docs, 1 epoch, document_masking"
    bench.row(f"{label}, best_fit (peer = concat): time", "s", "lower",
              stat("best_fit", lambda r: r["seconds"]), stat("concat", lambda r: r["seconds"]),
              bench.repeats)
    bench.row(f"{label}, best_fit (peer = concat): peak RSS", "MiB", "lower",
              stat("best_fit", lambda r: r["peak"] / MIB),
              stat("concat", lambda r: r["peak"] / MIB), bench.repeats)
    bench.row(f"{label}, best_fit (peer = concat): peak RSS above imports", "MiB", "lower",
              stat("best_fit", lambda r: (r["peak"] - r["baseline"]) / MIB),
              stat("concat", lambda r: (r["peak"] - r["baseline"]) / MIB), bench.repeats)
    build_olmo(bench, olmo, lengths, results["best_fit"], label)
    bench.note(
        f"build: samples best_fit {results['best_fit'][0]['samples']:,}, concat "
        f"{results['concat'][0]['samples']:,}; each build a fresh interpreter and cache "
        "directory (IndexedDataset open + GPTDataset constructor; the .bin is sparse); "
        "goal: best_fit <= 2x concat's time."
    )
    shutil.rmtree(os.path.join(bench.workdir, "build"), ignore_errors=True)


# -- read --------------------------------------------------------------------------------------


def _read_dataset(prefix: str, cache: str, packing: str):
    """The whole corpus as one GPTDataset (built, or loaded from ``cache``)."""
    import megadata_core as mdc

    indexed = mdc.IndexedDataset(prefix)
    config = _config(cache, packing)
    return mdc.GPTDataset(indexed, np.arange(len(indexed), dtype=np.int32), None, config)


def grain_tokens_per_second(prefix: str, batches: int, seed: int) -> float:
    """tokens/s of Grain's BestFit packer over the documents of ``prefix`` (shuffled),
    32 bins, batched by 32; the first batch (start-up) untimed. Documents longer than
    the capacity are cut to it first, as Grain's users must: its packers raise on an
    input longer than ``length_struct`` (MaxText truncates before packing)."""
    import grain

    import megadata_core as mdc

    # repeat(): a small (smoke-scale) corpus still fills every batch asked for
    documents = grain.MapDataset.source(mdc.IndexedDataset(prefix)).shuffle(seed=seed).repeat()
    packed = grain.experimental.BestFitPackIterDataset(
        documents.map(lambda tokens: {"tokens": tokens[:CAPACITY]}).to_iter_dataset(),
        length_struct={"tokens": CAPACITY},
        num_packing_bins=GRAIN_BINS,
        seed=seed,
    ).batch(BATCH)
    iterator = iter(packed)
    next(iterator)
    start = time.perf_counter()
    for _ in range(batches):
        next(iterator)
    return batches * BATCH * SEQUENCE / (time.perf_counter() - start)


def item_read(bench) -> None:
    rng = np.random.default_rng(bench.seed + 20)
    target = bench.scaled(20_000_000, minimum=300_000)
    lengths = long_tail_lengths(rng, int(target / LONG_MEAN * 1.2)).astype(np.int32)
    lengths = lengths[np.cumsum(lengths, dtype=np.int64) <= target]
    prefix = bench.path("read", "corpus")
    write_token_corpus(prefix, lengths, rng)
    datasets = {
        side: _read_dataset(prefix, os.path.join(bench.workdir, "read", f"cache_{side}"), side)
        for side in ("best_fit", "concat")
    }
    count = {side: len(ds) for side, ds in datasets.items()}
    per_repeat = bench.scaled(200, minimum=10)
    progress(f"read: {len(lengths):,} documents, samples {count}, {per_repeat} batches/repeat")
    batches = {
        side: [rng.integers(0, count[side], BATCH) for _ in range(per_repeat)]
        for side in datasets
    }
    for side, dataset in datasets.items():  # every page touched once
        for start in range(0, count[side], 256):
            dataset.__getitems__(np.arange(start, min(start + 256, count[side])))
    first = datasets["best_fit"].__getitems__(batches["best_fit"][0])
    bench.check(
        "read: best_fit batches carry segment_ids [32, 4096], cu_seqlens [32, 4097], max_seqlen",
        first["segment_ids"].shape == (BATCH, SEQUENCE)
        and first["cu_seqlens"].shape == (BATCH, SEQUENCE + 1)
        and "max_seqlen" in first,
    )
    seconds = {side: [] for side in datasets}
    for repeat in range(bench.repeats):
        for side in list(datasets) if repeat % 2 == 0 else list(datasets)[::-1]:
            seconds[side].append(time_batches(datasets[side].__getitems__, batches[side]))
    speed = {side: BATCH * SEQUENCE / median_of(values) for side, values in seconds.items()}
    grain_batches = bench.scaled(20, minimum=3)
    progress(f"read: Grain BestFit iterator, {grain_batches} batches")
    grain_speed = grain_tokens_per_second(prefix, grain_batches, bench.seed)
    label = f"read {BATCH} x {SEQUENCE}+1, document_masking, best_fit __getitems__"
    bench.row(f"{label} (peer = concat __getitems__)", "tokens/s", "higher",
              speed["best_fit"], speed["concat"], bench.repeats)
    bench.row(f"{label} (peer = Grain BestFit iterator)", "tokens/s", "higher",
              speed["best_fit"], grain_speed, 1)
    bench.note(
        f"read: goals best_fit/concat >= 0.8 (here {speed['best_fit'] / speed['concat']:.2f}), "
        f"best_fit/Grain BestFit >= 5 (here {speed['best_fit'] / grain_speed:.1f}); Grain "
        f"packs {GRAIN_BINS} bins from a shuffled MapDataset over the same IndexedDataset "
        "(documents longer than 4097 cut to 4097 before it, as Grain's users must: its "
        "packers raise on longer inputs), batch 32, in this process."
    )


# -- the suite ---------------------------------------------------------------------------------


def suite_packing(bench) -> None:
    """Best-fit packing: padding and documents cut vs Grain, build time, batch reads."""
    olmo: tuple[str | None, str] = (None, "not asked")
    if bench.wants("padding") or bench.wants("build"):
        create = bench.scale >= OLMO_MIN_SCALE
        if create:
            progress("OLMo-core: the overlay venv (created on first use: venv + pip install)")
        olmo = overlay_python(create)
    if bench.wants("padding"):
        item_padding(bench, olmo)
    if bench.wants("thd"):
        rng = np.random.default_rng(bench.seed + 30)
        item_thd(bench, {
            "demo corpus": demo_lengths(bench),
            "lognormal": long_tail_lengths(rng, bench.scaled(40_000, minimum=500)),
        }, rng)
    if bench.wants("build"):
        item_build(bench, olmo)
    if bench.wants("read"):
        item_read(bench)
    bench.note(
        f"OLMo-core ({OLMO_CORE}) runs in an overlay venv in the bench cache ("
        + (olmo[0].split("/bin/")[0] if olmo[0] else f"not used: {olmo[1]}")
        + "; its own filelock<4 and huggingface_hub<2 shadow this environment's there only); "
        f"below scale {OLMO_MIN_SCALE} the overlay is not created, only used if it exists."
    )


def _child_main(argv: list[str]) -> None:
    packing, prefix, cache = json.loads(argv[0])
    print("RESULT " + json.dumps(build_child(packing, prefix, cache)), flush=True)
