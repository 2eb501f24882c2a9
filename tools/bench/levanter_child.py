"""Runs Levanter's ``MixtureDataset`` (levanter/data/mixture.py, its own code) in a fresh
interpreter of the Levanter overlay environment (see :mod:`bench.levanter_side`) and prints
``RESULT {json}``.

Run as ``python -I levanter_child.py SPEC_JSON``; it imports numpy, jax and levanter only
(never megadata). SPEC has up to two parts, each run when present:

* ``repeats``: ``size`` (samples read, ``[0, size)``), ``half`` (where our schedule
  switches weights; Levanter's stage starts must be multiples of its block size, so its
  switch is ``half`` rounded to one), ``names``, ``weights_a``, ``weights_b``, ``seed``
  (the mixture's key), ``block_size`` (Levanter's default ``mixture_block_size`` is 2048).
* ``many``: ``weights`` (a .npy [stages, datasets]), ``starts``, ``size``, ``batches`` (a
  .npy [B, b] of sample indices), ``seed``, ``block_size``: a many-dataset, many-stage
  mixture's construction and reads.

In ``repeats`` every dataset is a ``ListAsyncDataset`` (Levanter's own) of ``(name,
index)`` items, so what the mixture serves names its dataset and its index there. Each
holds as many items as the whole run could ask of it (the run's blocks x block size), so
none wraps around within the run (Levanter's default ``restart`` strategy reads ``index %
len``): any ``(name, index)`` served twice is a repeat, not a new epoch.
"""

from __future__ import annotations

import importlib.metadata
import json
import sys
import time
import warnings

import numpy as np


def _mixture(datasets: dict, stages: list, block_size: int, seed: int):
    from levanter.data import MixtureDataset

    with warnings.catch_warnings():  # "has 0 samples in the block": the many-dataset case
        warnings.simplefilter("ignore")
        return MixtureDataset(datasets=datasets, weights=stages, block_size=block_size, key=seed)


def _read(mixture, indices) -> list:
    from levanter.utils.thread_utils import blocking_wait

    return list(blocking_wait(mixture.get_batch([int(i) for i in indices])))


def _codes(items: list, names: list[str], length: int) -> np.ndarray:
    """int64: dataset * length + index of each served item."""
    number = {name: j for j, name in enumerate(names)}
    return np.asarray([number[name] * length + index for name, index in items], dtype=np.int64)


def _skipped(codes: np.ndarray, count: int, length: int) -> int:
    """Dataset indices below the furthest one served of that dataset, never served."""
    skipped = 0
    for j in range(count):
        indices = codes[codes // length == j] % length
        if len(indices):
            skipped += int(indices.max()) + 1 - len(np.unique(indices))
    return skipped


def _deviation(codes: np.ndarray, stages: list, size: int, names: list[str], length: int):
    """Per stage: the largest |count_j - w_j * m| over prefixes m of that stage (its part
    of [0, size)), w_j the stage's requested weight, normalized."""
    result = []
    bounds = [start for start, _ in stages] + [size]
    for (start, weights), end in zip(stages, bounds[1:]):
        end = min(end, size)
        w = np.asarray([weights.get(name, 0.0) for name in names], dtype=np.float64)
        w /= w.sum()
        part = codes[start:end] // length
        counts = np.cumsum(part[:, None] == np.arange(len(names))[None, :], axis=0)
        m = np.arange(1, end - start + 1)[:, None]
        result.append(float(np.abs(counts - w[None, :] * m).max()))
    return result


def _wrapped(mixture, stages: list, blocks: int, length: int) -> list[int]:
    """Datasets (by number) the run's blocks ask for more than ``length`` items (Levanter's
    per-block counts x blocks of each stage): they would wrap around."""
    starts = [start // mixture.block_size for start, _ in stages] + [blocks]
    asked = sum(
        np.asarray(mixture._counts_per_block_per_stage[k], dtype=np.int64)
        * max(0, min(starts[k + 1], blocks) - starts[k])
        for k in range(len(stages))
    )
    return [int(j) for j in np.flatnonzero(asked > length)]


def repeats(spec: dict) -> dict:
    from levanter.data import ListAsyncDataset

    names, size, block = spec["names"], spec["size"], spec["block_size"]
    a = dict(zip(names, spec["weights_a"]))
    b = dict(zip(names, spec["weights_b"]))
    switch = max(block, int(round(spec["half"] / block)) * block)
    blocks = -(-size // block)
    length = blocks * block  # the most any dataset can be asked for within the run

    def datasets():
        return {name: ListAsyncDataset([(name, i) for i in range(length)]) for name in names}

    started = time.perf_counter()
    staged_stages = [(0, a), (switch, b)]
    staged = _mixture(datasets(), staged_stages, block, spec["seed"])
    codes = _codes(_read(staged, range(size)), names, length)
    seconds = time.perf_counter() - started
    first, second = codes[:switch], codes[switch:]
    past = _codes(_read(_mixture(datasets(), [(0, a)], block, spec["seed"]), range(switch)),
                  names, length)
    # a Levanter user who rebuilds with the new weights instead of adding a stage
    rebuilt = _codes(_read(_mixture(datasets(), [(0, b)], block, spec["seed"]),
                           range(switch, size)), names, length)
    full = (size // block) * block  # the run's complete blocks
    try:  # the switch where ours is, when that is not on a block boundary
        _mixture(datasets(), [(0, a), (spec["half"], b)], block, spec["seed"])
        unaligned = ""
    except (AssertionError, ValueError) as error:
        unaligned = f"{type(error).__name__}: {str(error).splitlines()[0][:200]}"
    return {
        "block_size": block,
        "switch": switch,
        "size": size,
        "length": length,
        "repeats": int(np.isin(second, first).sum()),
        "duplicates": int(len(codes) - len(np.unique(codes))),
        "wrapped": _wrapped(staged, staged_stages, blocks, length),
        "skipped": _skipped(codes, len(names), length),
        "skipped_full_blocks": _skipped(codes[:full], len(names), length),
        "past_kept": bool(np.array_equal(first, past)),
        "deviation": _deviation(codes, staged_stages, size, names, length),
        "block_counts": [staged._counts_per_block_per_stage[k].tolist() for k in range(2)],
        "rebuild_repeats": int(np.isin(rebuilt, first).sum()),
        "unaligned": unaligned,
        "seconds": seconds,
    }


def _index_dataset(length: int):
    """A Levanter ``AsyncDataset`` of ``length`` items, item i being i (no list held)."""
    from levanter.data import AsyncDataset

    class IndexDataset(AsyncDataset):
        async def async_len(self) -> int:
            return length

        def is_finite(self) -> bool:
            return True

        async def get_batch(self, indices):
            return list(indices)

    return IndexDataset()


def many(spec: dict) -> dict:
    """The suite's many-dataset schedule (``weights``: a .npy of [stages, datasets], stage
    starts ``starts`` rounded to block boundaries): construction time, then ``batches``
    (a .npy of [B, b] sample indices) read with ``get_batch``, and as many batches of b
    (as fit in [0, size)) read in order from sample 0 (index mapping only: each dataset
    answers its index, no tokens)."""
    block = spec["block_size"]
    weights = np.load(spec["weights"])
    count = weights.shape[1]
    size = spec["size"]
    blocks = -(-size // block)
    names = [f"d{j:05d}" for j in range(count)]
    rounded = [int(round(start / block)) * block for start in spec["starts"]]
    stages, seen = [], set()
    for start, row in zip(rounded, weights):
        if start in seen or start >= size:  # two starts rounded onto one block boundary
            continue
        seen.add(start)
        stages.append((start, dict(zip(names, row.tolist()))))
    datasets = {name: _index_dataset(blocks * block) for name in names}
    started = time.perf_counter()
    mixture = _mixture(datasets, stages, block, spec["seed"])
    build = time.perf_counter() - started
    batches = np.load(spec["batches"])
    _read(mixture, batches[0])  # jax's first permutation (compilation) outside the timing
    started = time.perf_counter()
    for indices in batches:
        _read(mixture, indices)
    read = time.perf_counter() - started
    # as Levanter's loader reads a mixture: batch after batch, in order (from a fresh one,
    # so no block is cached)
    mixture = _mixture(datasets, stages, block, spec["seed"])
    started = time.perf_counter()
    in_order = min(len(batches), size // batches.shape[1])  # within [0, size)
    for first in range(0, in_order * batches.shape[1], batches.shape[1]):
        _read(mixture, range(first, first + batches.shape[1]))
    return {"datasets": count, "stages": len(stages), "size": size, "build_s": build,
            "read_s": read, "in_order": in_order, "in_order_s": time.perf_counter() - started}


def main(spec: dict) -> dict:
    import jax

    jax.config.update("jax_platforms", "cpu")
    result = {
        "levanter": importlib.metadata.version("marin-levanter"),
        "jax": importlib.metadata.version("jax"),
    }
    if spec.get("repeats"):
        result["repeats"] = repeats(spec["repeats"])
    if spec.get("many"):
        result["many"] = many(spec["many"])
    return result


if __name__ == "__main__":
    print("RESULT " + json.dumps(main(json.loads(sys.argv[1]))), flush=True)
