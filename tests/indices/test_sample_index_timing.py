"""Timing of sample_index against Megatron's C++ build_sample_idx (printed, never asserted).

10M documents of mean length ~500, S=4096, 2 epochs. Run with ``-s`` to see the numbers.
"""

from __future__ import annotations

import time

import numpy as np

from megadata_core.indices import sample_index


def _best_of(runs: int, call) -> tuple[float, np.ndarray]:
    best, result = float("inf"), None
    for _ in range(runs):
        start = time.perf_counter()
        result = call()
        best = min(best, time.perf_counter() - start)
    return best, result


def test_timing_against_megatron(megatron_helpers):
    draw = np.random.default_rng(0)
    count, epochs, seq = 10_000_000, 2, 4096
    sizes = np.clip(draw.geometric(1 / 500, count), 1, 2**20).astype(np.int32)
    doc_idx = np.concatenate([draw.permutation(count), draw.permutation(count)]).astype(np.int32)
    tokens = int(sizes.sum(dtype=np.int64))
    args = (sizes, doc_idx, seq, epochs, tokens, True, True)
    theirs_s, theirs = _best_of(3, lambda: megatron_helpers.build_sample_idx(*args))
    ours_s, ours = _best_of(3, lambda: sample_index(*args))
    one_s, _ = _best_of(3, lambda: sample_index(*args, num_threads=1))
    np.testing.assert_array_equal(ours, theirs)
    print(
        f"\nsample_index, {count} docs x {epochs} epochs, {len(ours) - 1} samples: "
        f"megatron C++ {theirs_s:.3f} s, ours {ours_s:.3f} s (x{theirs_s / ours_s:.2f} faster), "
        f"ours 1 thread {one_s:.3f} s (x{theirs_s / one_s:.2f})"
    )
