"""Side-by-side benchmarks: megadata against its peers, in one run, with ratios.

Usage::

    python tools/bench.py format                            # full run (~4 min, 2 cores)
    python tools/bench.py format --scale 0.01 --repeats 1   # smoke run (seconds)

Suites (the first positional argument; ``--only`` picks items within one):

    format   writer documents/s, finalize of 10M sequences, many-part merge RSS,
             preprocessing documents/s
    gpt      train-index build for 10M documents (time, peak RSS), sample_index against
             Megatron's C++ build_sample_idx, batched reads against megatron-core's
             __getitem__ loop and a raw copy, cache-hit load
    builder  build_datasets of many-prefix blends, cold and warm (cache bundle)
    blend    blend indices: Megatron's order and the balanced one, several weightings
    loaders  Grain, torch and JAX adapter paths against the core's raw batched read
    cloud    shuffled batches from s3rver / fake-gcs-server behind a latency and
             bandwidth shaping proxy: ours, megatron-core, boto3 / GCS client pools
    megatron the megatron.core.datasets drop-in (adapters/trainers/megatron_datasets) beside
             megatron-core: builder cold / warm start, GPTDataset.__getitem__ loop
    maxtext  MaxText 0.2.5's mmap_npy path beside megadata's behind its hook
             (adapters/trainers/maxtext): index build of 10M documents (time, peak RSS),
             blend dispatch, random reads (run it with a Python that has maxtext)
    preprocess  the task plan: local pool of 1 and 2 workers and Ray beside one
             process (documents/s, MB/s, scaling, Ray start-up, worker RSS)
    packing  best-fit packing: padding and documents cut beside Grain's packers and the
             lower bound, build time vs concat, document-masked batch reads
    scale    one corpus of 10M..1B documents: train-index build time, peak RSS and
             RssAnon in fresh processes, cache-hit start, reads; beside megatron-core
    walk     module visits of one cold cached 3-split blend build (the house's
             structure: builder and gpt_dataset entries, returns to a module left)
    schedule blend schedules: the already-trained samples a Megatron rebuild with new
             weights serves again against an edited schedule's, Levanter's staged
             MixtureDataset beside them (an overlay venv); a 20-stage schedule's cold
             build and reads against a static blend
    provenance  inspect_data.py batch --step and where at 1,000 prefixes and 100M (1B
             when named) documents; the read cost of source_ids (peer: without)
    stream   raw shards streamed (RawShards): time to a first 32x4097 batch from raw JSON
             lines (85 MB-10 GB) beside megadata-preprocess + build and HF datasets
             streaming, the background tokenizer's tokens/s and headroom, shuffle quality
    chat     conversations preprocessed into tokens + roles (MB/s, 1 and 2 workers)
             beside a transformers apply_chat_template loop (same tokens and assistant
             masks checked); best-fit padding of their lengths beside first-fit
             decreasing and the lower bound (S = 4096, 8192)

The first positional argument names the suite; a suite is one function in
``bench.SUITES`` (tools/bench/: one module per suite, the shared harness, the peers'
imports) that takes a :class:`bench.harness.Bench` and records rows. Every row is measured for
ours and the peer (megatron-core) in the same process run, alternating which goes
first on each repeat; the table shows medians and the ratio ours/peer. Peers that
are not installed show ``n/a``. Outputs that must be byte-identical are compared and
a mismatch makes the run exit with status 1 (after the table is printed).
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
import tempfile
import time

import numpy as np
from absl import app, flags
from bench import SUITES
from bench.harness import Bench, render_table, version_of

from megadata_cli import tool_main

FLAGS = flags.FLAGS
flags.DEFINE_integer("repeats", 5, "Repeats per measurement; the table shows medians.")
flags.DEFINE_float("scale", 1.0, "Multiplies every size (0.01 for a quick smoke run).")
flags.DEFINE_string("workdir", None, "Scratch directory (default: a temp dir, removed after).")
flags.DEFINE_bool("keep_workdir", False, "Keep the scratch files for inspection.")
flags.DEFINE_integer("workers", 2, "Worker processes for the preprocessing benchmark.")
flags.DEFINE_list("only", [], "Run only these items of the suite (e.g. writer,finalize).")
flags.DEFINE_integer("seed", 1234, "Seed of the synthetic data.")


# -- main ------------------------------------------------------------------------------------


def environment_line() -> str:
    cpus = os.cpu_count()
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = cpus
    memory = ""
    try:
        import psutil

        memory = f", memory {psutil.virtual_memory().total / 2**30:.1f} GiB"
    except ImportError:
        pass
    return (
        f"environment: {cpus} CPUs ({usable} usable){memory}, python {sys.version.split()[0]}, "
        f"numpy {np.__version__}, megadata-core {version_of('megadata-core')}, "
        f"megatron-core {version_of('megatron-core')}, torch {version_of('torch')}"
    )


def main(argv: list[str]) -> int:
    names = argv[1:]
    if len(names) != 1 or names[0] not in SUITES:
        raise app.UsageError(f"give one suite, one of: {', '.join(SUITES)} (got {names})")
    if FLAGS.repeats < 1 or FLAGS.scale <= 0:
        raise app.UsageError("--repeats must be >= 1 and --scale > 0")
    name = names[0]
    command = " ".join(shlex.quote(a) for a in [os.path.basename(sys.executable)] + sys.argv)
    print(f"command: {command}", flush=True)
    print(environment_line(), flush=True)
    if FLAGS.workdir:
        os.makedirs(FLAGS.workdir, exist_ok=True)
    workdir = tempfile.mkdtemp(prefix=f"bench_{name}_", dir=FLAGS.workdir)
    bench = Bench(
        repeats=FLAGS.repeats,
        scale=FLAGS.scale,
        workdir=workdir,
        workers=FLAGS.workers,
        seed=FLAGS.seed,
        only=FLAGS.only,
    )
    started = time.perf_counter()
    try:
        SUITES[name](bench)
    finally:
        if FLAGS.keep_workdir:
            print(f"scratch kept in {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    print()
    print(
        f"suite {name}: scale {FLAGS.scale:g}, medians of up to {FLAGS.repeats} repeats, "
        f"{time.perf_counter() - started:.0f} s"
    )
    print(render_table(bench.rows, bench.peer))
    failed = False
    if bench.checks:
        print()
        for what, ok, detail in bench.checks:
            verdict = "n/a" if ok is None else ("yes" if ok else "NO")
            failed |= ok is False
            print(f"check {what}: {verdict}{(' ' + detail) if detail else ''}")
    for text in bench.notes:
        print(f"note: {text}")
    sys.stdout.flush()
    return 1 if failed else 0


if __name__ == "__main__":
    tool_main.run(main)
