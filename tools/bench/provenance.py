"""The ``provenance`` suite of tools/bench.py: which documents a step read, at scale, and
what per-token source ids cost a read.

Usage::

    python tools/bench.py provenance                       # 1,000 prefixes, 100M documents
    python tools/bench.py provenance --only batch,1B       # 1,000 prefixes, 1B documents
    python tools/bench.py provenance --only reads          # source_ids read cost only
    python tools/bench.py provenance --scale 0.001 --repeats 1   # smoke run

Items: ``batch`` (sizes ``100M``, the default, and ``1B``, only when named: ~20 GB of
.idx) and ``reads``.

* ``batch``: a blend of 1,000 corpora of N/1,000 documents each (the ``scale`` suite's
  MMIDIDX files: lognormal lengths, mean ~1,000 tokens, sparse .bin), weights by tokens,
  every document in the train split, S = 4096, ``shuffle="feistel"``, 10M train samples
  (a run of ~10,000 steps of 1,024). The cold build runs once in a fresh interpreter
  (``batch --step 0`` on an empty cache; its time is a note).
  Then, from the warm cache: ``tools/inspect_data.py batch --step N --global_batch_size
  1024`` end to end in a fresh interpreter (start-up, the warm build of the 1,000-prefix
  blend, the lookup and 1,024 samples' report; previews off: the sparse .bin holds no
  text, and a first touch of each of its holes costs milliseconds), for ``--repeats``
  random steps; the lookup alone (``found in``, what the command prints) beside it; and
  ``where --prefix P --document D`` the same way (the inverse Feistel orders, a scan
  of the blend's 10M-entry index).
* ``reads``: ``__getitems__`` of 32 x 4096 batches of a four-corpus blend (a real corpus,
  ~100M tokens x --scale) with ``source_ids=True`` against the same datasets without
  (peer column), concat and best_fit with document masking, and concat on one corpus
  alone; each batch read by both back to back, alternating which goes first (a loaded
  machine slows both of a pair alike), medians over every batch of every repeat; the
  goal is >= 0.9x.

The suite checks free disk and memory first and skips a size with the reason when
either is short; it removes every file it wrote.
"""

from __future__ import annotations

import dataclasses
import gc
import os
import re
import shutil
import subprocess
import sys

import numpy as np

from bench.gpt import SEQUENCE, TOOLS, write_token_corpus
from bench.harness import median_of, progress
from bench.scale import GIB, IDX_BYTES_PER_DOC, write_scale_corpus

PREFIXES = 1000
SIZES = {"100M": 100_000_000, "1B": 1_000_000_000}
TRAIN_SAMPLES = 10_000_000
GLOBAL_BATCH = 1024
BATCH = 32
#: Feistel caches store the sample index (16 bytes, ~0.25 sample a document) and the
#: blend's 10 bytes a train sample; generous.
CACHE_BYTES_PER_DOC = 8
FOUND = re.compile(r"found in ([0-9.]+) s")


def _config_file(path: str, prefixes: list[str], weights: list[float], cache: str) -> str:
    blend = " ".join(f"{w!r} {p}" for w, p in zip(weights, prefixes))
    with open(path, "w") as stream:
        stream.write(
            "import sys\n"
            f"sys.path.insert(0, {TOOLS!r})\n"
            "from data_config import base_config\n\n"
            "def get_config():\n"
            "    c = base_config()\n"
            f"    c.data_path = {blend!r}\n"
            "    c.split = '100,0,0'\n"
            f"    c.sequence_length = {SEQUENCE}\n"
            "    c.shuffle = 'feistel'\n"
            "    c.eod_id = 0\n"
            "    c.create_attention_mask = False\n"
            f"    c.path_to_cache = {cache!r}\n"
            f"    c.train_samples = {TRAIN_SAMPLES}\n"
            "    return c\n"
        )
    return path


def _tool(*args: str) -> tuple[float, str]:
    """(wall seconds, stdout) of tools/inspect_data.py in a fresh interpreter."""
    import time

    began = time.perf_counter()
    process = subprocess.run(
        [sys.executable, os.path.join(TOOLS, "inspect_data.py"), *args, "--noprogress"],
        capture_output=True, text=True, check=False,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )
    seconds = time.perf_counter() - began
    if process.returncode:
        raise RuntimeError(f"inspect_data.py {args[0]} failed: {process.stderr[-2000:]}")
    return seconds, process.stdout


def available_memory() -> int:
    """Bytes of memory available (MemAvailable)."""
    with open("/proc/meminfo") as stream:
        for line in stream:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


def _room(bench, documents: int) -> str | None:
    """Why this size cannot run here, or None."""
    disk = shutil.disk_usage(bench.workdir).free
    needed = documents * (IDX_BYTES_PER_DOC + CACHE_BYTES_PER_DOC)
    if disk < needed * 1.2:
        return f"needs ~{needed / GIB:.0f} GiB of disk, {disk / GIB:.0f} GiB free"
    memory = available_memory()
    if memory < 4 * GIB:
        return f"needs ~4 GiB of free memory, {memory / GIB:.1f} GiB available"
    return None


def item_batch(bench, label: str, documents: int) -> None:
    documents = bench.scaled(documents, minimum=PREFIXES * 100)
    why = _room(bench, documents)
    if why is not None:
        bench.note(f"batch {label}: skipped ({why})")
        return
    per = documents // PREFIXES
    directory = os.path.dirname(bench.path("provenance", label, "x"))
    progress(f"batch {label}: writing {PREFIXES:,} corpora of {per:,} documents")
    prefixes, tokens = [], []
    for k in range(PREFIXES):  # one trip per corpus
        prefix = os.path.join(directory, f"corpus_{k:04d}")
        count, _ = write_scale_corpus(prefix, per, bench.seed + k)
        prefixes.append(prefix)
        tokens.append(float(count))
    cache = os.path.join(directory, "cache")
    config = _config_file(os.path.join(directory, "config.py"), prefixes, tokens, cache)
    progress(f"batch {label}: cold build of the blend ({PREFIXES * per:,} documents)")
    cold, _ = _tool("batch", f"--config={config}", "--step=0", "--preview_tokens=0",
                    f"--global_batch_size={GLOBAL_BATCH}")
    rng = np.random.default_rng(bench.seed)
    steps = rng.integers(0, TRAIN_SAMPLES // GLOBAL_BATCH, bench.repeats).tolist()
    walls, lookups = [], []
    for step in steps:  # one fresh process per step
        wall, out = _tool("batch", f"--config={config}", f"--step={step}",
                          f"--global_batch_size={GLOBAL_BATCH}", "--preview_tokens=0")
        walls.append(wall)
        lookups.append(float(FOUND.search(out).group(1)))
        shown = out.count("\n  sample ")
        bench.check(f"batch {label}: step {step} shows {GLOBAL_BATCH} samples",
                    shown == GLOBAL_BATCH, f"{shown}")
    where_walls, where_lookups = [], []
    for k in rng.integers(0, PREFIXES, bench.repeats).tolist():
        wall, out = _tool("where", f"--config={config}", f"--prefix={prefixes[k]}",
                          f"--document={int(rng.integers(0, per))}",
                          f"--global_batch_size={GLOBAL_BATCH}")
        where_walls.append(wall)
        where_lookups.append(float(FOUND.search(out).group(1)))
    name = f"{PREFIXES:,} prefixes, {PREFIXES * per:,} documents"
    bench.row(f"batch --step, gbs {GLOBAL_BATCH}: command (fresh process, warm cache), "
              f"{name}", "s", "lower", median_of(walls), None, len(walls))
    bench.row(f"batch --step: the lookup alone, {name}", "s", "lower", median_of(lookups),
              None, len(lookups))
    bench.row(f"where --prefix --document: command, {name}", "s", "lower",
              median_of(where_walls), None, len(where_walls))
    bench.row(f"where: the search alone, {name}", "s", "lower", median_of(where_lookups),
              None, len(where_lookups))
    bench.note(f"batch {label}: cold build of the blend's indices (batch --step 0 on an "
               f"empty cache, fresh process) {cold:.0f} s; steps {steps}; train split "
               f"{TRAIN_SAMPLES:,} samples, shuffle feistel, S 4096")
    shutil.rmtree(directory, ignore_errors=True)


def _blend_datasets(directory: str, prefixes: list[str], packing: str) -> tuple:
    """(without, with source_ids): the same train split twice, from one cache."""
    import megadata_core as mdc

    config = mdc.GPTDataConfig(
        random_seed=1234, sequence_length=SEQUENCE, blend=(prefixes, None), split="98,2,0",
        path_to_cache=os.path.join(directory, f"cache_{packing}"), eod_id=0,
        create_attention_mask=False, packing=packing,
        document_masking=packing == "best_fit",
    )
    plain = mdc.build_datasets(config, [None, None, None])[0]
    sourced = mdc.build_datasets(dataclasses.replace(config, source_ids=True),
                                 [None, None, None])[0]
    return plain, sourced


def paired(with_ids, without, batches, repeats: int) -> dict[str, list[float]]:
    """Seconds per batch of both reads, each batch read by both back to back (the order
    alternating): a loaded machine slows both sides of a pair alike."""
    import time

    gc.collect()
    seconds: dict[str, list[float]] = {"with": [], "without": []}
    for repeat in range(repeats):
        for k, batch in enumerate(batches):
            order = [("with", with_ids), ("without", without)]
            for side, read in order if (k + repeat) % 2 == 0 else order[::-1]:
                began = time.perf_counter()
                read(batch)
                seconds[side].append(time.perf_counter() - began)
    return seconds


def item_reads(bench) -> None:
    rng = np.random.default_rng(bench.seed + 29)
    directory = os.path.dirname(bench.path("provenance", "reads", "x"))
    per = bench.scaled(25_000_000, minimum=200_000)
    prefixes = []
    for k in range(4):
        mu = np.log(1000) - 0.5
        lengths = np.maximum(1, rng.lognormal(mu, 1.0, int(per / 1000 * 1.1))).astype(np.int32)
        lengths = lengths[np.cumsum(lengths, dtype=np.int64) <= per]
        prefix = os.path.join(directory, f"corpus_{k}")
        write_token_corpus(prefix, lengths, rng)
        prefixes.append(prefix)
    batches_per_repeat = bench.scaled(200, minimum=10)
    for packing in ("concat", "best_fit"):
        plain, sourced = _blend_datasets(directory, prefixes, packing)
        count = len(plain)
        batches = [rng.integers(0, count, BATCH) for _ in range(batches_per_repeat)]
        for start in range(0, count, 256):  # every page touched once
            plain.__getitems__(np.arange(start, min(start + 256, count)))
        first = sourced.__getitems__(batches[0])
        bench.check(f"reads {packing}: source_ids batches carry dataset_ids, document_ids "
                    f"int32 [{BATCH}, {SEQUENCE}]",
                    first["document_ids"].shape == (BATCH, SEQUENCE)
                    and first["dataset_ids"].dtype == np.int32)
        masking = ", document_masking" if packing == "best_fit" else ""
        sides = [("4-corpus blend", sourced, plain, batches)]
        if packing == "concat":  # one member alone: no blend gathering its rows
            member = [rng.integers(0, len(plain.datasets[0]), BATCH)
                      for _ in range(batches_per_repeat)]
            sides.append(("one corpus", sourced.datasets[0], plain.datasets[0], member))
        for what, with_ids, without, reads in sides:
            seconds = paired(with_ids.__getitems__, without.__getitems__, reads,
                             bench.repeats)
            speed = {side: BATCH * SEQUENCE / median_of(v) for side, v in seconds.items()}
            bench.row(f"read {BATCH} x {SEQUENCE}+1, {what}, {packing}{masking}, "
                      "source_ids=True (peer = the same without)", "tokens/s", "higher",
                      speed["with"], speed["without"], bench.repeats)
            bench.note(f"reads {what} {packing}: with / without source_ids "
                       f"{speed['with'] / speed['without']:.2f} (goal >= 0.9)")
    shutil.rmtree(directory, ignore_errors=True)


def suite_provenance(bench) -> None:
    """batch --step / where at 1,000 prefixes; the read cost of source_ids."""
    named = [label for label in SIZES if label in bench.only]
    if bench.wants("batch") or named:
        for label in named or ["100M"]:
            item_batch(bench, label, SIZES[label])
    if bench.wants("reads"):
        item_reads(bench)
