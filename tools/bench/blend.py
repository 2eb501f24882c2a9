"""The ``blend`` suite of tools/bench.py: blending indices beside megatron-core's C++ helper.

Usage::

    python tools/bench.py blend                             # full run (~1 min, 2 cores)
    python tools/bench.py blend --scale 0.01 --repeats 1    # smoke run (seconds)
    python tools/bench.py blend --only balanced,megatron    # some items only

Items (50M samples over 4 datasets with weights 0.4, 0.3, 0.2, 0.1, times ``--scale``):

* ``balanced``: ours ``balanced_blending_indices`` (earliest deadline first) against
  Megatron's C++ ``helpers.build_blending_indices`` (the peer builds its own order; the
  goal is ours/megatron <= 0.5). These weights repeat with period 10: one period of the
  rule is computed, then tiled.
* ``balanced-general``: the same with weights that have no period (the square roots of
  0.4, 0.3, 0.2, 0.1): the split-tree order (two-way Beatty splits, closed-form
  positions), on the usable cores (at most 4) and on one thread.
* ``megatron``: ours ``megatron_blending_indices`` against the same C++ call; the two
  outputs must be equal, value for value.
* ``deviation``: the largest ``|c_j(m) - w_j m|`` over every prefix m and dataset j, for
  the balanced order (must be < 1; both weight sets) and, for comparison, Megatron's.

The suite reaches tools/bench.py only through the ``Bench`` object it is given.
"""

from __future__ import annotations

import gc
import statistics
import sys
import time

import numpy as np

from bench.peers import quiet_import

WEIGHTS = (0.4, 0.3, 0.2, 0.1)
GENERAL_WEIGHTS = tuple(float(np.sqrt(w)) for w in WEIGHTS)  # no period
SAMPLES = 50_000_000


def progress(message: str) -> None:
    print(f"  .. {message}", file=sys.stderr, flush=True)


def timed(function):
    """(seconds, result) of one call, after a garbage collection."""
    gc.collect()
    start = time.perf_counter()
    result = function()
    return time.perf_counter() - start, result


def import_helpers():
    """megatron-core's compiled ``helpers`` module, or None when it is not installed."""
    modules = quiet_import("megatron.core.datasets.helpers")
    return None if modules is None else modules[0]


def megatron_order(helpers, weights: np.ndarray, size: int):
    """Megatron's BlendedDataset build: two zeroed arrays, then the C++ helper."""
    index = np.zeros(size, dtype=np.int16)
    sample = np.zeros(size, dtype=np.int64)
    helpers.build_blending_indices(index, sample, weights, len(weights), size, False)
    return index, sample


def side_by_side(bench, ours, theirs):
    """Median seconds of ``ours()`` and ``theirs()`` (None: peer missing) over the
    repeats, alternating which goes first; plus the last result of each."""
    times = {"ours": [], "theirs": []}
    last = {"ours": None, "theirs": None}
    for repeat in range(bench.repeats):
        sides = ["ours", "theirs"] if repeat % 2 == 0 else ["theirs", "ours"]
        for side in sides:
            run = ours if side == "ours" else theirs
            if run is None:
                continue
            last[side] = None  # free the previous arrays before the next build
            seconds, last[side] = timed(run)
            times[side].append(seconds)
    median = {side: statistics.median(v) if v else None for side, v in times.items()}
    return median["ours"], median["theirs"], last["ours"], last["theirs"]


def suite_blend(bench) -> None:
    """Blending indices: the balanced order and the Megatron order against Megatron's C++."""
    from megadata_core.indices.blending import (
        balanced_blending_indices,
        balanced_bound,
        megatron_blending_indices,
        megatron_normalize,
        prefix_deviation,
    )

    helpers = import_helpers()
    if helpers is None:
        bench.note("megatron-core is not installed: its column is n/a.")
    size = bench.scaled(SAMPLES, minimum=1000)
    weights = megatron_normalize(WEIGHTS)
    label = f"{size / 1e6:g}M samples, {len(WEIGHTS)} datasets"
    theirs = None if helpers is None else (lambda: megatron_order(helpers, weights, size))
    balanced = None

    if bench.wants("balanced"):
        progress(f"balanced: {label}")
        ours_s, theirs_s, balanced, _ = side_by_side(
            bench, lambda: balanced_blending_indices(WEIGHTS, size), theirs
        )
        bench.row(
            f"balanced order vs Megatron build_blending_indices, {label}",
            "s",
            "lower",
            ours_s,
            theirs_s,
            bench.repeats,
        )
        bench.note(
            "balanced goal: ours/megatron <= 0.5. Ours is earliest-deadline-first (every "
            "dataset within 1 - 1/(2n-2) samples of its share in every prefix); these "
            "weights repeat every 10 samples, so one period is computed and tiled. "
            "Megatron's C++ runs a greedy order in one loop."
        )

    if bench.wants("balanced-general"):
        from megadata_core.indices.blending import blend_threads

        progress(f"balanced-general: {label}, weights without a period")
        general = megatron_normalize(GENERAL_WEIGHTS)
        their_general = (
            None if helpers is None else (lambda: megatron_order(helpers, general, size))
        )
        for count, name in ((None, "usable cores"), (1, "1 thread")):
            with blend_threads(count):
                ours_s, theirs_s, _, _ = side_by_side(
                    bench, lambda: balanced_blending_indices(GENERAL_WEIGHTS, size), their_general
                )
            bench.row(
                f"balanced order, weights without a period ({name}), vs Megatron, {label}",
                "s",
                "lower",
                ours_s,
                theirs_s,
                bench.repeats,
            )
        bench.note(
            "balanced-general: weights sqrt(0.4), sqrt(0.3), sqrt(0.2), sqrt(0.1) (no period): "
            f"a split tree (bound {balanced_bound(GENERAL_WEIGHTS):.4f}), written in chunks "
            "on up to 4 threads (the usable cores); Megatron's C++ is one thread."
        )

    if bench.wants("megatron"):
        progress(f"megatron order: {label}")
        ours_s, theirs_s, ours, reference = side_by_side(
            bench, lambda: megatron_blending_indices(WEIGHTS, size), theirs
        )
        bench.row(
            f"megatron order vs Megatron build_blending_indices, {label}",
            "s",
            "lower",
            ours_s,
            theirs_s,
            bench.repeats,
        )
        equal = None
        if reference is not None:
            equal = bool(
                np.array_equal(ours[0], reference[0]) and np.array_equal(ours[1], reference[1])
            )
        bench.check("megatron order equals Megatron's values", equal)
        del ours, reference

    if bench.wants("deviation"):
        progress("deviation: every prefix")
        if balanced is None:
            balanced = balanced_blending_indices(WEIGHTS, size)
        worst = prefix_deviation(balanced[0], WEIGHTS)
        bench.check("balanced order max prefix deviation < 1", worst < 1, f"({worst:.6f})")
        general_worst = prefix_deviation(
            balanced_blending_indices(GENERAL_WEIGHTS, size)[0], GENERAL_WEIGHTS
        )
        bench.check(
            "balanced order (weights without a period) max prefix deviation < 1",
            general_worst < 1,
            f"({general_worst:.6f})",
        )
        if helpers is not None:
            theirs_worst = prefix_deviation(megatron_order(helpers, weights, size)[0], WEIGHTS)
            bench.note(
                f"max prefix deviation |c_j(m) - w_j m|: balanced {worst:.6f}, Megatron's "
                f"order {theirs_worst:.6f} (weights {list(WEIGHTS)})"
            )
