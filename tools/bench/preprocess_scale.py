"""The ``preprocess`` suite: ours beside gigatoken's whole-file path and Megatron's loop on
real text (items ``peers``, ``rss-2g``, ``large``, ``modes``, ``encoders``:
tools/bench/preprocess_peers.py), then the task
plan on its engines against the single-process path (item ``scale``).

Usage::

    python tools/bench.py preprocess --repeats 1            # ~100 MB, ~3-4 min on 2 cores
    python tools/bench.py preprocess --scale 0.05 --repeats 1
    python tools/bench.py preprocess --only peers,rss-2g --repeats 3

Rows of ``scale`` (the "theirs" column of the scale-* rows is the single-process
``preprocess_jsonl`` run of the same input, not Megatron):

* ``scale-local1`` / ``scale-local2`` / ``scale-ray2``: documents/s and MB/s of
  ``preprocess_tasks`` with the local engine on 1 and 2 processes and Ray on a local
  2-CPU cluster (its start counted: a run pays it), on English-like jsonl (about 100 MB
  at scale 1, 16 tasks) with Megatron's ``GPT2BPETokenizer`` (a 16k byte-level BPE
  trained on the input, as the format suite's preprocess items); every corpus must
  equal the single-process one. Without the ``tokenizers`` package: ByteTokenizer.
* ``scale-efficiency``: local 2 workers / (2 x local 1 worker).
* ``task-seconds``: mean seconds of one task on one core (local 1 worker), the figure
  a cluster estimate scales from; ``ray-startup``: seconds of ``ray.init`` plus one
  trivial task.
* ``worker-rss``: peak RSS (MiB) of a pool worker with a corpus 1x and 10x larger at the
  same task size (a task's memory, not the corpus'); ByteTokenizer, a smaller corpus.
"""

from __future__ import annotations

import functools
import json
import os
import random
import subprocess
import sys

from bench.harness import Bench, measure, median_of, progress, same_files
from bench.preprocess_small import bench_small  # (at import: its flags)
from megadata_core.preprocess import ByteTokenizer, local_engine, preprocess_jsonl, preprocess_tasks

_RSS_RUN = """
import resource, sys
from megadata_core.preprocess import ByteTokenizer, local_engine, preprocess_tasks
preprocess_tasks([sys.argv[1]], sys.argv[2], ByteTokenizer, append_eod=True,
                 task_size=int(sys.argv[3]), engine=local_engine(2))
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
"""


def _write_corpus(path: str, documents: int, seed: int) -> None:
    rng = random.Random(seed)
    words = ["data", "token", "corpus", "über", "模型", "shard", "merge", "plan", "ray"]
    with open(path, "w", encoding="utf-8") as stream:
        for index in range(documents):
            text = " ".join(rng.choice(words) for _ in range(rng.randint(20, 400)))
            stream.write(json.dumps({"id": index, "text": text}) + "\n")


def _corpus(prefix: str) -> list[str]:
    return [f"{prefix}_text_document.bin", f"{prefix}_text_document.idx"]


def suite_preprocess_scale(bench: Bench) -> None:
    """Ours beside gigatoken and Megatron on real text (bench.preprocess_peers); the task
    plan's engines vs one process; Ray's start; a worker's memory vs corpus size."""
    from bench.format import make_jsonl
    from bench.preprocess_peers import peer_items

    if bench.wants("small"):
        bench_small(bench)
    peer_items(bench)
    if not bench.wants("scale"):
        return

    source = bench.path("scale", "input.jsonl")
    documents = bench.scaled(175_000, 200)
    size = make_jsonl(source, documents, bench.seed)
    factory, tokenizer_name = _tokenizer(bench, source)
    task_size = max(1, size // 16)
    bench.note(f"preprocess: {documents} documents, {size / 1e6:.1f} MB jsonl, tasks of "
               f"{task_size / 1e6:.2f} MB (16 tasks), {tokenizer_name}; the peer column of "
               "the scale-* rows is the single-process preprocess_jsonl, not Megatron")
    reference = bench.path("scale", "single")
    single = []
    for _ in range(bench.repeats):
        progress("single process")
        seconds, _ = measure(lambda: preprocess_jsonl([source], reference, factory,
                                                      append_eod=True))
        single.append(seconds)
    single_s = median_of(single)
    engines = {"local1": lambda: local_engine(1), "local2": lambda: local_engine(2)}
    try:
        import ray

        from megadata_adapters.engines.ray_preprocess import ray_engine
    except ImportError:
        ray = None
        bench.note("ray is not installed: scale-ray2 and ray-startup are n/a")
    rates = {}
    for name, make in engines.items():
        rates[name] = _timed_engine(bench, name, make, source, task_size, reference, factory)
    if ray is not None:
        progress("ray startup")
        seconds, _ = measure(lambda: _start_ray(ray))
        ray.shutdown()
        bench.row("ray-startup (init + one task)", "s", "lower", seconds, None, 1)
        rates["ray2"] = _timed_engine(
            bench, "ray2", lambda: ray_engine(progress=False, num_cpus=2), source, task_size,
            reference, factory)
    for name, seconds in rates.items():
        bench.row(f"scale-{name} documents/s", "docs/s", "higher", documents / seconds,
                  documents / single_s, bench.repeats)
        bench.row(f"scale-{name} MB/s", "MB/s", "higher", size / 1e6 / seconds,
                  size / 1e6 / single_s, bench.repeats)
    bench.row("scale-efficiency (2 workers / 2x1)", "ratio", "higher",
              rates["local1"] / (2 * rates["local2"]), None, bench.repeats)
    bench.row(f"task-seconds (one {task_size / 1e6:.1f} MB task, one core)", "s", "lower",
              rates["local1"] / 16, None, bench.repeats)
    rss_source = bench.path("scale", "rss_input.jsonl")
    rss_documents = bench.scaled(40_000, 200)
    _write_corpus(rss_source, rss_documents, bench.seed)
    _worker_rss(bench, rss_source, rss_documents, max(1, os.path.getsize(rss_source) // 16))


def _tokenizer(bench, source: str):
    """(picklable factory, name): GPT2BPETokenizer trained on ``source``, else bytes."""
    try:
        import tokenizers  # noqa: F401
    except ImportError:
        bench.note("the tokenizers package is not installed: ByteTokenizer instead of BPE")
        return ByteTokenizer, "ByteTokenizer"
    from bench.preprocess import train_tokenizer_files
    from megadata_adapters.tokenizing.text_tokenizers import load_tokenizer

    files = train_tokenizer_files(source, bench.path("scale", "tokenizer"))
    factory = functools.partial(load_tokenizer, "GPT2BPETokenizer", **files["GPT2BPETokenizer"])
    return factory, "GPT2BPETokenizer (16k BPE trained on the input)"


def _start_ray(ray) -> None:
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    ray.get(ray.remote(lambda: 0).remote())


def _timed_engine(bench, name, make, source, task_size, reference, factory) -> float:
    prefix = bench.path("scale", name)
    times = []
    for _ in range(bench.repeats):
        progress(f"task plan, {name}")
        seconds, _ = measure(lambda: preprocess_tasks(
            [source], prefix, factory, append_eod=True, task_size=task_size, engine=make()))
        times.append(seconds)
        bench.check(f"{name} corpus == single process",
                    same_files(*zip(_corpus(prefix), _corpus(reference))))
    return median_of(times)


def _worker_rss(bench, source, documents, task_size) -> None:
    big = bench.path("scale", "input10x.jsonl")
    with open(big, "wb") as out, open(source, "rb") as one:
        data = one.read()
        for _ in range(10):
            out.write(data)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    for label, path in (("1x", source), ("10x", big)):
        progress(f"worker RSS, corpus {label}")
        result = subprocess.run(
            [sys.executable, "-c", _RSS_RUN, path, bench.path("scale", f"rss{label}"),
             str(task_size)], capture_output=True, text=True, env=env, check=True)
        kib = int(result.stdout.split()[-1])
        bench.row(f"worker-rss corpus {label}", "MiB", "lower", kib / 1024, None, 1)
