"""The ``megatron`` suite of tools/bench.py: megatron.core.datasets served by megadata
(``megadata_adapters.trainers.megatron_datasets``) beside megatron-core itself, through the same
calls.

Usage::

    python tools/bench.py megatron                            # 1,000 prefixes
    python tools/bench.py megatron --scale 0.05 --repeats 1   # quick look (50 prefixes)

Setup: the ``builder`` suite's corpora and blend (``1000 x scale`` small corpora, random
weights, split ``"98,2,0"``, S = 256), built by
``BlendedMegatronDatasetBuilder(GPTDataset, sizes, lambda: True, GPTDatasetConfig(...))``
of each package, one-rank gloo process group on both sides.

Items:

* ``cold``: the build with a fresh cache directory (goal <= 0.5x megatron-core).
* ``warm``: the same build again on that cache, a restart's startup (goal <= 0.1x).
* ``getitem``: ``GPTDataset.__getitem__`` over 2,000 shuffled indices of one member of
  each side's train blend (torch tensors, Megatron's dtypes: long tokens / labels /
  position ids, float loss mask), as a training loop's map-style dataset reads it
  (goal >= 1x megatron-core's speed, i.e. a time ratio <= 1).

Checks: split lengths, blend indices and the sampled values are equal.
"""

from __future__ import annotations

import gc
import shutil
import tempfile

import numpy as np

from bench.builder import (
    SEQUENCE,
    many_prefix_blend,
    median,
    progress,
)
from bench.harness import measure

GOALS = {"cold": 0.3, "warm": 0.1, "getitem": 0.67}  # time ratios ours / megatron-core
READS = 2000


def _compat_build(blend, sizes, cache: str):
    """The same build as megatron-core's (bench.builder.megatron_build), through the
    compat package's classes."""
    from megadata_adapters.trainers.megatron_datasets.blended_megatron_dataset_builder import (
        BlendedMegatronDatasetBuilder,
    )
    from megadata_adapters.trainers.megatron_datasets.gpt_dataset import (
        GPTDataset,
        GPTDatasetConfig,
    )

    return _megatron_build(
        (BlendedMegatronDatasetBuilder, GPTDataset, GPTDatasetConfig), blend, sizes, cache
    )


def _megatron_build(megatron, blend, sizes, cache: str):
    from bench.builder import megatron_build

    return megatron_build(megatron, blend, sizes, cache)


def _flush_shared() -> None:
    """Wait for the drop-in's background writer of Megatron's cache files."""
    from megadata_adapters.trainers.megatron_datasets import megatron_cache

    megatron_cache.flush()


def _read_all(dataset, indices) -> list:
    return [dataset[int(i)] for i in indices]


def suite_megatron(bench) -> None:
    """Builder cold / warm start and the __getitem__ loop, compat vs megatron-core."""
    count = bench.scaled(1000, minimum=2)
    blend, sizes, megatron = many_prefix_blend(bench, count, "megatron")
    prefixes, weights = blend
    if megatron is None:
        bench.note("megatron-core is not installed: nothing to compare the compat layer with.")
        return
    sides = {
        "ours": lambda cache: _compat_build(blend, sizes, cache),
        "megatron": lambda cache: _megatron_build(megatron, blend, sizes, cache),
    }
    for side in sides:  # one-time costs (imports, helpers) outside timings
        cache = tempfile.mkdtemp(prefix=f"warmup_{side}_", dir=bench.workdir)
        (_compat_build if side == "ours" else lambda *a: _megatron_build(megatron, *a))(
            (prefixes[:2], weights[:2]), [300, 20, 0], cache
        )
        shutil.rmtree(cache, ignore_errors=True)
    times = {kind: {side: [] for side in sides} for kind in GOALS}
    shared: list[float] = []  # the drop-in's Megatron-layout files, written in the background
    last: dict[str, list] = {}
    for repeat in range(bench.repeats):
        order = list(sides) if repeat % 2 == 0 else list(reversed(sides))
        for side in order:
            cache = tempfile.mkdtemp(prefix=f"cache_{side}_", dir=bench.workdir)
            progress(f"megatron: {side} cold / warm build {repeat + 1}/{bench.repeats}")
            seconds, _ = measure(lambda s=side, c=cache: sides[s](c))
            times["cold"][side].append(seconds)
            if side == "ours":  # outside the start: the writer thread goes on after it
                shared.append(measure(_flush_shared)[0])
            # megatron-core's datasets hold 3 file descriptors a prefix until their
            # reference cycles are collected: free them, outside the timings, so that
            # repeats do not run out of descriptors
            last.pop(side, None)
            gc.collect()
            seconds, last[side] = measure(lambda s=side, c=cache: sides[s](c))
            times["warm"][side].append(seconds)
            if bench.wants("getitem"):
                member = last[side][0].datasets[0]
                indices = np.random.default_rng(repeat).integers(0, len(member), READS)
                seconds, _ = measure(lambda d=member, i=indices: _read_all(d, i))
                times["getitem"][side].append(seconds)
            shutil.rmtree(cache, ignore_errors=True)
    label = f"{count:,} prefixes"
    metrics = {
        "cold": f"compat builder cold start, fresh cache, {label}",
        "warm": f"compat builder warm start, cache hit, {label}",
        "getitem": f"compat GPTDataset.__getitem__ x {READS}, S={SEQUENCE}, torch tensors",
    }
    for kind, metric in metrics.items():
        if times[kind]["ours"]:
            bench.row(metric, "s", "lower", median(times[kind]["ours"]),
                      median(times[kind]["megatron"]), bench.repeats)
    bench.row(f"compat: Megatron-layout cache files written after the cold start, {label}",
              "s", "lower", median(shared), "n/a (stock writes them in its build)", bench.repeats)
    ours, theirs = last["ours"], last["megatron"]
    same = all(
        (a is None) == (b is None) and (a is None or len(a) == len(b)) for a, b in zip(ours, theirs)
    )
    same = same and np.array_equal(ours[0].dataset_index, theirs[0].dataset_index)
    same = same and np.array_equal(ours[0].dataset_sample_index, theirs[0].dataset_sample_index)
    left, right = ours[0].datasets[0], theirs[0].datasets[0]
    for index in np.random.default_rng(7).integers(0, len(left), 16).tolist():
        a, b = left[index], right[index]
        same = same and list(a) == list(b) and all(
            a[key].dtype == b[key].dtype and bool((a[key] == b[key]).all()) for key in a
        )
    bench.check("megatron: split lengths, blend indices and samples equal", same)
    for kind, goal in GOALS.items():
        a, b = median(times[kind]["ours"]), median(times[kind]["megatron"])
        if a is not None and b:
            bench.note(
                f"megatron: {kind}: compat {a:.3f} s, megatron-core {b:.3f} s, ratio "
                f"{a / b:.3f} (goal <= {goal}x: {'met' if a / b <= goal else 'not met'})"
            )
