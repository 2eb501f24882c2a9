"""The ``stream`` suite: raw JSON-lines shards as a blend member (``RawShards``), tokenized
in the background while training reads them, beside today's path and HF ``datasets``.

Usage::

    python tools/bench.py stream --repeats 3                     # 85 MB and 1 GB, ~15 min
    python tools/bench.py stream --sizes 85M --repeats 1         # a quick run
    python tools/bench.py stream --sizes 85M,1G,10G --repeats 3  # 10 GB: ~22 GB of disk

Items (``--only``):

* ``first-batch``: seconds from raw JSON lines to a first batch of 32 x 4097 tokens
  (sequence length 4096, the extra token), each side a fresh interpreter
  (tools/bench/stream_child.py: the clock starts when the parent starts the process, so
  the interpreter's start and the imports count; a note gives the seconds after the
  imports), at each ``--sizes`` of real text (this Python installation's text files as in
  the ``preprocess`` suite's ``peers``, in shards of ``--stream_shard_mb``, the text
  repeated past what the installation holds). Ours: ``RawShards`` in a ``GPTDataConfig``
  blend with a fresh cache directory, ``build_datasets``, ``__getitems__(range(32))``.
  Today's path: ``megadata-preprocess --workers 2``, ``build_datasets`` on the corpus,
  the same batch. HF ``datasets`` streaming (``load_dataset("json", streaming=True)``,
  ``.map`` of a transformers fast tokenizer of the same tokenizer.json, batched, the ids
  concatenated into 4097-token samples), and the same after ``.shuffle(buffer_size=
  10_000)``. Tokenizer: the 32k byte-level BPE the ``preprocess`` suite trains, on the
  input's first 8 MB of text. A size is left out, with a note, when the disk or the
  memory is short. Check: HF's first sample equals the preprocessed corpus's first 4097
  tokens (the same tokenizer, the same ids).
* ``rate``: the background tokenizer's steady state with ``workers=1`` and ``workers=2``:
  tokens/s of the pieces made after the first batch, on one ~256 MB real-text shard made
  whole, in a fresh process; its peak RSS (VmHWM). Then ``--trainer_tokens_per_s``:
  the headroom (made tokens/s over the trainer's rate) and the background cores such a
  trainer needs (its rate over one core's).
* ``shuffle``: one measure for three orders of the same documents: ours (the windows
  order, read from what the dataset serves: synthetic shards whose documents' text is
  their id, byte tokens, 1 MiB pieces so that a batch of 256 samples is 1/8 of a
  window's bytes, as with 4 MiB pieces of ~4-byte BPE tokens; the default window and
  first-epoch ramp), a shuffle buffer holding the same memory (as many documents as one
  window's pieces hold, ``window * piece_size`` bytes; files in order, and files in a
  shuffled order as HF streaming's ``.shuffle`` does), and a global shuffle (a
  permutation of all documents), the last two simulated on the same documents. For
  global batches of 256 samples: the mean number of distinct shard files and of distinct
  pieces a batch draws from, and the effective numbers (1 / the sum of the squared
  shares of its samples' documents: a few stragglers count little); for each document:
  ``|served rank - file rank| / N`` (mean; 1/3 for a uniform global shuffle). Checks:
  each window's samples hold only the pieces the dataset reads for that window, each
  piece is in one window, and the epoch serves (nearly) every document.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

import numpy as np
from absl import flags

from bench.harness import Bench, ChildFailedError, child_result, progress

FLAGS = flags.FLAGS
flags.DEFINE_list("sizes", ["85M", "1G"], "stream suite: raw JSON-lines sizes of the "
                  "first-batch item (85M, 1G, 10G, ...; times --scale).")
flags.DEFINE_integer("stream_shard_mb", 256, "stream suite: MB per shard file of the inputs.")
flags.DEFINE_float("trainer_tokens_per_s", 200_000, "stream suite: the trainer's rate the "
                   "background tokenizer's headroom is given over.")

CHILD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "stream_child.py")
SEQUENCE, BATCH, WINDOW, PIECE = 4096, 32, 8, 4 << 20
SIDES = {  # child side -> the peer's label
    "preprocess": "megadata-preprocess --workers 2 + build_datasets",
    "hf": "HF datasets streaming",
    "hf-shuffle": "HF datasets streaming + shuffle(buffer_size=10,000)",
}
_UNITS = {"K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}


def parse_size(text: str) -> int:
    text = text.strip().upper().rstrip("B")
    if text and text[-1] in _UNITS:
        return int(float(text[:-1]) * _UNITS[text[-1]])
    return int(float(text))


def _available_mib() -> float:
    with open("/proc/meminfo") as stream:
        for line in stream:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / 1024
    return 0.0


def _run(spec: dict, what: str) -> tuple[float, dict]:
    """(seconds from starting the fresh process to its first batch, its result)."""
    env = {"HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "true"}
    started = time.time()
    result = child_result([sys.executable, CHILD, json.dumps(spec)], what, env)
    return result["ready"] - started, result


def write_shards(base: str, directory: str, total: int, shard_bytes: int) -> list[str]:
    """Shards of about ``shard_bytes`` each (whole lines) holding about ``total`` bytes of
    the lines of ``base``, read over and over from its start."""
    os.makedirs(directory, exist_ok=True)

    def lines():
        while True:
            with open(base, "rb") as source:
                yield from source

    paths: list[str] = []
    written, stream = 0, lines()
    while written < total:
        path = os.path.join(directory, f"shard-{len(paths):05d}.jsonl")
        paths.append(path)
        goal, size = min(shard_bytes, total - written), 0
        with open(path, "wb", buffering=16 << 20) as out:
            while size < goal:
                line = next(stream)
                out.write(line)
                size += len(line)
        written += size
    return paths


def _tokenizer(bench: Bench, base: str) -> str:
    """tokenizer.json: the 32k byte-level BPE of the preprocess suite, trained here."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    from bench.preprocess_peers import training_texts

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.train_from_iterator(
        training_texts(base, bench.scaled(8_000_000, 100_000)),
        trainers.BpeTrainer(vocab_size=32_000, special_tokens=["<|endoftext|>"],
                            show_progress=False,
                            initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    path = bench.path("tokenizer", "tokenizer.json")
    tokenizer.save(path)
    with open(bench.path("tokenizer", "tokenizer_config.json"), "w") as stream:
        json.dump({"eos_token": "<|endoftext|>"}, stream)
    return path


def _prime(tokenizer: str) -> None:
    """Load the tokenizer once in a fresh process, so that its load-time proof's verdict
    is on disk (``MEGADATA_CACHE``) for every timed run, as on every run after a
    tokenizer's first."""
    code = ("import sys; from megadata_adapters.tokenizing.text_tokenizers import "
            "load_tokenizer; load_tokenizer('huggingface', sys.argv[1])")
    subprocess.run([sys.executable, "-c", code, tokenizer], check=True)


def suite_stream(bench: Bench) -> None:
    bench.peer = "peer"
    before = os.environ.get("MEGADATA_CACHE")
    os.environ["MEGADATA_CACHE"] = os.path.dirname(bench.path("proofs", "x"))  # children
    try:
        _items(bench)
    finally:
        if before is None:
            os.environ.pop("MEGADATA_CACHE", None)
        else:
            os.environ["MEGADATA_CACHE"] = before


def _items(bench: Bench) -> None:
    items = [item for item in ("first-batch", "rate", "shuffle") if bench.wants(item)]
    if "shuffle" in items:
        bench_shuffle(bench)
    if not {"first-batch", "rate"} & set(items):
        return
    try:
        import tokenizers  # noqa: F401
    except ImportError:
        bench.note("stream: the tokenizers package is needed for first-batch and rate: n/a")
        return
    from bench.preprocess_peers import real_text_jsonl

    sizes = [(label, bench.scaled(parse_size(label))) for label in FLAGS.sizes]
    shard_bytes = bench.scaled(FLAGS.stream_shard_mb * 10**6)
    needed = max([size for _, size in sizes if "first-batch" in items] +
                 [shard_bytes if "rate" in items else 0])
    base = bench.path("inputs", "base.jsonl")
    progress("real-text corpus")
    documents, nbytes = real_text_jsonl(base, min(needed, bench.scaled(512_000_000)))
    bench.note(f"stream: real text from this Python installation (stdlib and site-packages "
               f".py/.md/.rst/.txt files): {documents:,} documents, {nbytes / 1e6:.1f} MB, "
               "repeated (whole lines) to fill larger inputs")
    progress("training the 32k byte-level BPE")
    tokenizer = _tokenizer(bench, base)
    _prime(tokenizer)
    if "first-batch" in items:
        for label, size in sizes:
            bench_first_batch(bench, base, label, size, shard_bytes, tokenizer)
    if "rate" in items:
        bench_rate(bench, base, shard_bytes, tokenizer)


# -- first batch --------------------------------------------------------------------


def _room(bench: Bench, size: int) -> str | None:
    """Why a size cannot run here (None: it can)."""
    free = shutil.disk_usage(bench.workdir).free
    disk = 2.3 * size + 2e9  # the input, the preprocessed corpus and its work files
    if free < disk:
        return f"{free / 1e9:.1f} GB free on disk, about {disk / 1e9:.1f} GB needed"
    memory = _available_mib()
    if memory < 4096:
        return f"{memory:,.0f} MiB of memory available, 4,096 MiB needed"
    return None


def bench_first_batch(bench: Bench, base: str, label: str, size: int, shard_bytes: int,
                      tokenizer: str) -> None:
    why = _room(bench, size)
    if why:
        bench.note(f"first-batch {label}: left out: {why}")
        print(f"first-batch {label}: left out: {why}", flush=True)
        return
    directory = os.path.dirname(bench.path("inputs", label, "x"))
    progress(f"first-batch {label}: writing the shards")
    shards = write_shards(base, directory, size, shard_bytes)
    nbytes = sum(os.path.getsize(path) for path in shards)
    repeats = min(bench.repeats, 3)
    missing = [name for name in ("datasets", "transformers")
               if importlib.util.find_spec(name) is None]
    sides = ["ours", "preprocess", *([] if missing else ["hf", "hf-shuffle"])]
    if missing:
        bench.note(f"first-batch {label}: the HF sides are n/a ({', '.join(missing)} not "
                   "installed: pip install datasets transformers)")
    seconds: dict[str, list[float]] = {side: [] for side in sides}
    after: dict[str, list[float]] = {side: [] for side in seconds}
    firsts: dict[str, str] = {}
    extra: dict[str, list] = {"preprocess_s": [], "first_map": [], "first_window": []}
    for repeat in range(repeats):
        order = list(seconds) if repeat % 2 == 0 else list(reversed(seconds))
        for side in order:
            cache = bench.path("runs", f"{label}-{side}-{repeat}", "x")[:-2]
            spec = {"side": side, "inputs": shards, "tokenizer": tokenizer, "cache": cache,
                    "sequence_length": SEQUENCE, "batch": BATCH, "window": WINDOW,
                    "piece_size": PIECE, "seed": 1}
            progress(f"first-batch {label}: {side} ({repeat + 1}/{repeats})")
            try:
                elapsed, result = _run(spec, f"first batch {side}")
            except ChildFailedError as error:
                bench.note(f"first-batch {label} {side}: failed: {str(error)[-600:]}")
                shutil.rmtree(cache, ignore_errors=True)
                continue
            if result["shape"] != [BATCH, SEQUENCE + 1]:
                raise RuntimeError(f"{side}: a batch of {result['shape']}")
            seconds[side].append(elapsed)
            after[side].append(result["after_imports"])
            firsts.setdefault(side, result["first"])
            if side == "preprocess":
                extra["preprocess_s"].append(result["preprocess_s"])
            if side == "hf":
                extra["first_map"].append(result["first_map"])
            if side == "ours":
                extra["first_window"].append(result["first_window"])
            shutil.rmtree(cache, ignore_errors=True)
    what = f"first batch 32x4097, {nbytes / 1e6:,.0f} MB jsonl in {len(shards)} shards"
    ours = statistics.median(seconds["ours"]) if seconds["ours"] else None
    for side, peer in SIDES.items():
        theirs = statistics.median(seconds[side]) if seconds.get(side) else None
        bench.row(f"{what}: ours vs {peer}", "s", "lower", ours, theirs, repeats)
    medians = {side: statistics.median(values) for side, values in after.items() if values}
    runs = "; ".join(f"{side} " + ", ".join(f"{value:.1f}" for value in values)
                     for side, values in seconds.items())
    bench.note(f"first-batch {label}: each run (s): {runs}; after the imports (medians): "
               + ", ".join(f"{side} {value:.2f}" for side, value in medians.items()) + (
                   f"; megadata-preprocess alone {statistics.median(extra['preprocess_s']):.1f}"
                   " s" if extra["preprocess_s"] else ""))
    if extra["first_map"]:
        spent, texts, size = min(extra["first_map"])
        bench.note(f"first-batch {label}: HF's first map batch ({texts:,} documents, "
                   f"{size / 1e6:.1f} MB, the map's default batch size) took {spent:.1f} s in "
                   "the fast tokenizer; ours' first window: "
                   f"{extra['first_window'][0] or WINDOW} piece(s) of {PIECE >> 20} MiB")
    if "preprocess" in firsts and "hf" in firsts:
        bench.check(f"first-batch {label}: HF's first sample == the preprocessed corpus's "
                    "first 4097 tokens", firsts["hf"] == firsts["preprocess"])
    shutil.rmtree(directory, ignore_errors=True)


# -- steady-state rate --------------------------------------------------------------


def bench_rate(bench: Bench, base: str, shard_bytes: int, tokenizer: str) -> None:
    directory = os.path.dirname(bench.path("inputs", "rate", "x"))
    shards = write_shards(base, directory, shard_bytes, shard_bytes)
    nbytes = os.path.getsize(shards[0])
    repeats = min(bench.repeats, 3)
    results: dict[int, list[dict]] = {1: [], 2: []}
    for repeat in range(repeats):
        for workers in (1, 2) if repeat % 2 == 0 else (2, 1):
            cache = bench.path("runs", f"rate-{workers}-{repeat}", "x")[:-2]
            spec = {"side": "rate", "inputs": shards, "tokenizer": tokenizer, "cache": cache,
                    "sequence_length": SEQUENCE, "batch": BATCH, "window": WINDOW,
                    "piece_size": PIECE, "seed": 1, "workers": workers}
            progress(f"rate: workers={workers} ({repeat + 1}/{repeats})")
            results[workers].append(_run(spec, f"rate workers={workers}")[1])
            shutil.rmtree(cache, ignore_errors=True)
    shutil.rmtree(directory, ignore_errors=True)
    if any(r["steady_tokens_per_s"] is None for runs in results.values() for r in runs):
        bench.note("rate: the shard was made before the first batch (too small a shard): "
                   "its tokens/s over the whole run, not after the first batch")
    rate = {w: statistics.median(r["steady_tokens_per_s"] or r["overall_tokens_per_s"]
                                 for r in runs) for w, runs in results.items()}
    what = f"{nbytes / 1e6:.0f} MB real text, 32k byte-level BPE"
    for workers in results:
        bench.row(f"background tokenizer, workers={workers}, after the first batch ({what})",
                  "tokens/s", "higher", rate[workers], None, repeats)
    for workers, runs in results.items():
        bench.row(f"background tokenizer, workers={workers}: peak RSS (VmHWM) of the process",
                  "MiB", "lower", max(r["rss_mib"] for r in runs), None, repeats)
    bench.row("background tokenizer: workers=2 / (2 x workers=1)", "ratio", "higher",
              rate[2] / (2 * rate[1]), None, repeats)
    trainer = FLAGS.trainer_tokens_per_s
    for workers in (1, 2):
        bench.row(f"headroom over a {trainer:,.0f} tokens/s trainer, workers={workers}", "x",
                  "higher", rate[workers] / trainer, None, repeats)
    bench.row(f"background cores a {trainer:,.0f} tokens/s trainer needs (its rate / one "
              "core's)", "cores", "lower", trainer / rate[1], None, repeats)
    one = results[1][0]
    bench.note(f"rate: {one['tokens']:,} tokens in {one['pieces']} pieces of 4 MiB; workers=1: "
               f"first batch {statistics.median(r['first_batch_s'] for r in results[1]):.1f} "
               f"s, whole shard {statistics.median(r['complete_s'] for r in results[1]):.1f} s;"
               f" workers=2: first batch "
               f"{statistics.median(r['first_batch_s'] for r in results[2]):.1f} s, whole "
               f"shard {statistics.median(r['complete_s'] for r in results[2]):.1f} s "
               f"(after the imports); MB/s workers=1 "
               f"{nbytes / 1e6 / statistics.median(r['complete_s'] for r in results[1]):.1f}, "
               f"workers=2 "
               f"{nbytes / 1e6 / statistics.median(r['complete_s'] for r in results[2]):.1f}")


# -- shuffle quality ----------------------------------------------------------------


def _synthetic(directory: str, shards: int, shard_bytes: int, seed: int):
    """Shards of documents whose text is ``%07d|`` (their id) repeated; returns
    (paths, shard of each document, byte offset of each in its shard, text bytes)."""
    rng = np.random.default_rng(seed)
    os.makedirs(directory, exist_ok=True)
    paths, shard_of, offset_of, length_of = [], [], [], []
    document = 0
    for shard in range(shards):
        path = os.path.join(directory, f"shard-{shard:05d}.jsonl")
        paths.append(path)
        position = 0
        lines = []
        while position < shard_bytes:
            blocks = int(np.clip(rng.lognormal(np.log(128), 1.0), 2, 4096))
            line = json.dumps({"text": f"{document:07d}|" * blocks}) + "\n"
            lines.append(line)
            shard_of.append(shard)
            offset_of.append(position)
            length_of.append(8 * blocks)
            position += len(line)
            document += 1
        with open(path, "w") as out:
            out.writelines(lines)
    return (paths, np.array(shard_of, np.int64), np.array(offset_of, np.int64),
            np.array(length_of, np.int64))


def _buffer_order(count: int, size: int, rng, files: list[np.ndarray]) -> np.ndarray:
    """The order a shuffle buffer of ``size`` documents serves documents read file after
    file (``files``: each file's documents in order): fill, then each new document takes
    a random slot's place and that slot's document is served; the rest at the end."""
    served = np.empty(count, np.int64)
    buffer: list[int] = []
    out = 0
    stream = np.concatenate(files).tolist()
    slots = rng.integers(0, size, len(stream))
    for number, document in enumerate(stream):
        if len(buffer) < size:
            buffer.append(document)
            continue
        slot = int(slots[number])
        served[out] = buffer[slot]
        out += 1
        buffer[slot] = document
    rest = np.array(buffer, np.int64)
    rng.shuffle(rest)
    served[out:] = rest
    return served


def _pairs_of_order(order: np.ndarray, tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(sample, document) pairs of documents laid end to end in ``order`` (``tokens``
    each, the EOD counted) and cut into concat samples of SEQUENCE + 1 tokens."""
    ends = np.cumsum(tokens[order])
    starts = ends - tokens[order]
    # sample k holds tokens [k * SEQUENCE, (k + 1) * SEQUENCE + 1): the extra token
    first = np.maximum(starts - 1, 0) // SEQUENCE
    last = np.minimum((ends - 1) // SEQUENCE, (ends[-1] - 1) // SEQUENCE - 1)
    keep = last >= first
    order, first, last = order[keep], first[keep], last[keep]
    counts = last - first + 1
    samples = np.repeat(first, counts) + (np.arange(counts.sum()) -
                                          np.repeat(np.cumsum(counts) - counts, counts))
    return samples, np.repeat(order, counts)


def _measures(samples: np.ndarray, docs: np.ndarray, shard_of: np.ndarray,
              piece_of: np.ndarray, count: int, per_batch: int) -> dict:
    batch = samples // per_batch
    full = batch < batch.max()  # the last, partial batch left out
    batch, docs_in = batch[full], docs[full]

    def distinct(labels):
        pairs = np.unique(np.stack([batch, labels[docs_in]]), axis=1)
        return float(np.bincount(pairs[0]).mean())

    def effective(labels):  # 1 / sum of squared shares of a batch's (sample, document)s
        pairs, counts = np.unique(np.stack([batch, labels[docs_in]]), axis=1,
                                  return_counts=True)
        totals = np.bincount(pairs[0], weights=counts)
        squares = np.bincount(pairs[0], weights=counts.astype(np.float64) ** 2)
        return float(np.mean(totals**2 / squares))

    first = np.unique(docs, return_index=True)[1]
    served = docs[np.sort(first)]  # documents by first appearance
    rank = np.empty(count, np.float64)
    rank[:] = np.nan
    rank[served] = np.arange(len(served))
    seen = ~np.isnan(rank)
    displacement = float(np.mean(np.abs(rank[seen] - np.arange(count)[seen])) / seen.sum())
    return {"shards": distinct(shard_of), "pieces": distinct(piece_of),
            "effective_shards": effective(shard_of), "effective_pieces": effective(piece_of),
            "displacement": displacement, "served": int(seen.sum())}


def _sizes(sizes: list[int]) -> str:
    """``1, 2, 4, then 8 (the last 1)``: the windows' piece counts, briefly."""
    parts, run = [], 0
    for number, size in enumerate(sizes):
        if number and size == sizes[number - 1]:
            run += 1
            continue
        parts.append(str(size))
        run = 0
    text = ", ".join(parts[:-1]) + (" then " if len(parts) > 1 else "") + parts[-1]
    return text if sizes[-1] == max(sizes) else text.replace(f" then {sizes[-1]}", "") + \
        f" (the last {sizes[-1]})"


def bench_shuffle(bench: Bench) -> None:
    shards, shard_bytes = 16, bench.scaled(16 << 20, 1 << 20)
    piece, window, per_batch = bench.scaled(1 << 20, 1 << 16), WINDOW, 256
    directory = os.path.dirname(bench.path("shuffle", "shards", "x"))
    progress("shuffle: synthetic shards")
    paths, shard_of, offset_of, text_of = _synthetic(directory, shards, shard_bytes, bench.seed)
    count = len(shard_of)
    tokens = text_of + 1  # byte tokens and the EOD
    out = bench.path("shuffle", "served.npz")
    spec = {"side": "shuffle", "inputs": paths, "tokenizer": "bytes",
            "cache": os.path.dirname(bench.path("shuffle", "cache", "x")),
            "sequence_length": SEQUENCE, "batch": per_batch, "window": window,
            "piece_size": piece, "seed": 1, "out": out}
    progress("shuffle: ours, one epoch")
    _, result = _run(spec, "shuffle ours")
    served = np.load(out)
    tasks = served["tasks"]
    # the piece of each document: the task of its shard whose byte range holds its line
    piece_of = np.empty(count, np.int64)
    for shard in range(shards):
        mine = np.flatnonzero(tasks[:, 0] == shard)
        documents = np.flatnonzero(shard_of == shard)
        where = np.searchsorted(tasks[mine, 1], offset_of[documents], side="right") - 1
        piece_of[documents] = mine[where]
    ours = _measures(served["samples"], served["docs"], shard_of, piece_of, count, per_batch)
    # each window's samples hold its pieces only (the pieces the dataset reads for it)
    starts = served["starts"]
    window_of = np.searchsorted(starts, served["samples"], side="right") - 1
    allowed = np.zeros((len(starts) - 1, int(tasks.shape[0])), bool)
    bounds = np.cumsum([0, *served["window_sizes"].tolist()])
    for number in range(len(starts) - 1):
        allowed[number, served["window_pieces"][bounds[number]:bounds[number + 1]]] = True
    bench.check("shuffle: each window's samples hold only its pieces",
                bool(allowed[window_of, piece_of[served["docs"]]].all()))
    bench.check("shuffle: each piece is in one window of the epoch",
                sorted(served["window_pieces"].tolist()) == list(range(tasks.shape[0])))
    bench.check("shuffle: the epoch serves >= 99% of the documents",
                ours["served"] >= 0.99 * count, f"({ours['served']:,} of {count:,})")
    rng = np.random.default_rng(bench.seed)
    in_window = int(round(window * piece / (float(text_of.mean()) + 12)))  # + the JSON
    files = [np.flatnonzero(shard_of == shard) for shard in range(shards)]
    orders = {
        f"a shuffle buffer of {in_window:,} documents (a window's bytes), files in order":
            _buffer_order(count, in_window, rng, files),
        f"a shuffle buffer of {in_window:,} documents, files shuffled (as HF .shuffle)":
            _buffer_order(count, in_window, rng, [files[k] for k in rng.permutation(shards)]),
        "a global shuffle (a permutation of all documents)": rng.permutation(count),
    }
    theirs = {name: _measures(*_pairs_of_order(order, tokens), shard_of, piece_of, count,
                              per_batch) for name, order in orders.items()}
    labels = {"shards": "distinct shard files per batch of 256 samples",
              "pieces": "distinct pieces per batch of 256 samples",
              "effective_shards": "effective shard files per batch (1 / sum of squared "
                                  "shares)",
              "effective_pieces": "effective pieces per batch (1 / sum of squared shares)",
              "displacement": "mean |served rank - file rank| / N (1/3: uniform)"}
    for key, label in labels.items():
        for name, figures in theirs.items():
            bench.row(f"shuffle, {label}: ours (windows of {window}) vs {name}",
                      "fraction" if key == "displacement" else "mean", "higher", ours[key],
                      figures[key], 1)
    bench.note(f"shuffle: {shards} synthetic shards of {shard_bytes / 2**20:.0f} MiB, "
               f"{count:,} documents (lognormal lengths, mean {text_of.mean():,.0f} bytes), "
               f"byte tokens; pieces of {piece / 2**20:.2f} MiB ({result['pieces']} pieces, "
               f"{result['windows']} windows of {_sizes(result['window_sizes'])} pieces), "
               f"{result['samples']:,} samples of "
               f"{SEQUENCE + 1} tokens in the epoch (a batch of 256 holds "
               f"{256 * SEQUENCE / (window * piece):.3g} of a window's bytes; 0.125 with 4 "
               "MiB pieces of ~4-byte BPE tokens); ours as served by the dataset, the others "
               "simulated on the same documents")
    shutil.rmtree(os.path.dirname(out), ignore_errors=True)
