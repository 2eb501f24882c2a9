"""Exact, vectorized runs of the sequential blending rules (private to ``blending``).

A rule (:mod:`megadata_core.indices._blend_rules`) picks one dataset per step from the
counts picked so far, so the order is sequential by definition. It is computed exactly,
and vectorized, by running many *segments* of the order side by side, one numpy column
each, for a fixed number of steps:

* segment 0 starts at step 0 from zero counts (the true start);
* segment k > 0 starts ``burn`` steps before the positions it records, from a guess of
  the counts there (the rule's ``guess``), and the rules forget where they started,
  usually within a few hundred steps;
* a segment's counts at its first recorded position must equal the previous segment's
  counts at its end. When every pair agrees, every segment started from the true counts
  (induction from segment 0) and the order equals the sequential one, value for value.
  Segments that disagree run again from their predecessor's end counts, all in one
  vectorized pass, while that fixes enough of them per pass; the ones still broken then
  run again one after the other in plain Python (exact; slow per step: docs/benchmarks.md,
  "Blend orders"). Skewed weights over many datasets end up there most: a rare dataset
  keeps a wrong guess of its count until its next sample, thousands of steps later.

A periodic order (the balanced one over rates ``a_j / P``) is computed for one period
and repeated by :func:`tile`, one write per output element.

Independent EDF runs (a blend schedule's stages) run side by side (:func:`run_stages`):
the columns of all runs step together in one kernel with per-column rates
(:class:`~megadata_core.indices._blend_rules.EdfStages`), each run's first column from
its true start, links checked and repairs made within a run; runs short enough for one
column each need no burn-in at all.

The Python loop runs ``burn + segment`` steps (a few thousand) whatever the size: the
columns grow with the size, not the trip count.

Past ``WIDE`` datasets a step is one pass over [K, n] rows (each column's counts
contiguous, argmax/argmin along rows) whatever n, so segments grow with n (fewer burn-in
steps), and EDF burns in for ~2n/3 steps (a rare dataset's wrong guess lasts until its
next sample). The speed beside megatron-core's C++ loop: docs/benchmarks.md.

The C++ loop costs O(size x n). Past ``SHORTLIST_ABOVE`` datasets the megatron rule
without caps steps on a per-column shortlist of the datasets that can win within the
next block of ~1.6 sqrt(n) steps (:class:`~megadata_core.indices._blend_rules.
MegatronShortlist`, exact by a bound), ~O(size x sqrt(n)).

Stages side by side (:func:`run_stages`, one column per stage, no burn-in) pay the
Python steps once for all runs instead of once per run; over many datasets the [K, n]
passes, not the steps, dominate.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from megadata_core.indices import _blend_rules as rules

#: Steps each segment runs before the positions it records.
BURN = {"megatron": 256, "edf": 256}
#: EDF over many datasets forgets a wrong guess more slowly (a rare dataset's count is
#: off until its next sample): it burns in for 2n/3 steps, up to this many (measured
#: with lognormal weights: 256 steps left nearly every segment of a 1,000-dataset order
#: to a second pass).
EDF_WIDE_BURN = 4096
#: Below this many samples the plain-Python loop is the faster one.
SCALAR_BELOW = 4096
#: Steps buffered before they are copied into the output (rows of a [ROWS, K] buffer),
#: BLOCK columns at a time.
ROWS, BLOCK = 32, 1024
#: The fewest columns per view, on average, for which copies through views pay.
VIEW_COLUMNS = 8
#: Steps per row when a periodic order is written out (:func:`tile`).
TILE_ROW = 1 << 14
#: Cost model (seconds) of a vectorized repair pass against re-running the broken
#: segments in plain Python: per step, per step and column, per step and dataset.
STEP_COST, COLUMN_COST, SCALAR_COST = 30e-6, 5e-9, 0.15e-6
MAX_REPAIR_ROUNDS = 64
#: The overhead of one vectorized step, in steps of one column and dataset.
STEP_UNITS = 4000.0

#: The megatron rule runs on a shortlist past this many datasets, in blocks of
#: SHORTLIST_BLOCK * sqrt(n) steps (a block's start costs a few passes over n per
#: column, a step ~2 * block).
SHORTLIST_ABOVE, SHORTLIST_BLOCK = 256, 1.6

_KERNELS = {"megatron": rules.Megatron, "edf": rules.Edf}
_SCALAR = {"megatron": rules.scalar_megatron, "edf": rules.scalar_edf}


def _kernel(rule: str, weights: np.ndarray, caps: np.ndarray | None):
    """The rule's kernel: the megatron rule without caps over more than SHORTLIST_ABOVE
    datasets steps on a shortlist per column (exact, ~2 sqrt(n) per step)."""
    kernel = _KERNELS[rule]
    if kernel is rules.Megatron and caps is None and len(weights) > SHORTLIST_ABOVE:
        block = max(ROWS, int(SHORTLIST_BLOCK * math.sqrt(len(weights))))
        return rules.MegatronShortlist(weights, block)
    return kernel(weights, caps)


def dataset_dtype(count: int) -> np.dtype:
    """int16 for up to 32767 datasets (Megatron's dtype), else int32."""
    return np.dtype(np.int16) if count <= np.iinfo(np.int16).max else np.dtype(np.int32)


def segment_length(size: int, burn: int, datasets: int = 4) -> int:
    """Steps per segment: ~sqrt(size * burn * max(n, 4) / STEP_UNITS) (per-step Python
    overhead against burn-in work, which grows with the n datasets a wide kernel reads
    per column; pass 4 for the per-dataset loops, whose overhead grows with n too), a
    multiple of ROWS in [ROWS, 8192]."""
    length = int(math.sqrt(size * burn * max(datasets, 4) / STEP_UNITS))
    return int(min(8192, max(ROWS, length // ROWS * ROWS)))


class _Recorder:
    """Buffers the picks of K columns, ROWS steps at a time, then copies them into
    ``out[first[k] + step]``: through [c, segment] views of blocks of consecutive columns
    that record one segment after the other (when they average at least VIEW_COLUMNS
    columns), else by fancy indexing."""

    def __init__(self, out_index, out_sample, first: np.ndarray, segment: int) -> None:
        self.out_index, self.out_sample, self.first = out_index, out_sample, first
        columns = len(first)
        self.picks = np.empty((ROWS, columns), dtype=np.intp)
        self.before = np.empty((ROWS, columns), dtype=np.float64)
        self.row = self.done = 0
        self.views = None
        edges = [0, *(np.flatnonzero(np.diff(first) != segment) + 1).tolist(), columns]
        if columns >= VIEW_COLUMNS * (len(edges) - 1):
            self.views = []
            for lo, hi in zip(edges[:-1], edges[1:]):
                begin, end = int(first[lo]), int(first[lo]) + (hi - lo) * segment
                shape = (hi - lo, segment)
                index, sample = out_index[begin:end], out_sample[begin:end]
                self.views.append((lo, hi, index.reshape(shape), sample.reshape(shape)))

    def run(self, kernel, steps: int) -> None:
        for _ in range(steps):
            kernel.step(self.picks[self.row], self.before[self.row])
            self.row += 1
            if self.row == ROWS:
                self.flush()
        self.flush()

    def flush(self) -> None:
        rows, done = self.row, self.done
        if rows and self.views is not None:  # transposed in cache-sized column blocks
            for lo, hi, index, sample in self.views:
                for begin in range(lo, hi, BLOCK):
                    end = min(begin + BLOCK, hi)
                    picks, before = self.picks[:rows, begin:end], self.before[:rows, begin:end]
                    index[begin - lo : end - lo, done : done + rows] = picks.T
                    sample[begin - lo : end - lo, done : done + rows] = before.T
        elif rows:
            where = self.first[:, None] + np.arange(done, done + rows)[None, :]
            self.out_index[where] = self.picks[:rows].T
            self.out_sample[where] = self.before[:rows].T
        self.done += rows
        self.row = 0


def run(
    rule: str,
    weights: np.ndarray,
    size: int,
    caps: np.ndarray | None = None,
    index_dtype: np.typing.DTypeLike = np.int16,
    stats: dict | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The first ``size`` steps of ``rule`` ("megatron" or "edf").

    Args:
        rule: "megatron" (weights as the rule reads them) or "edf" (rates > 0, sum 1).
        weights: float64 [n].
        size: steps (samples).
        caps: int64 [n] or None: a dataset that reached its cap is skipped.
        index_dtype: dtype of the dataset index.
        stats: if given, filled with ``segments``, ``segment`` (steps each), ``repaired``
            (segment re-runs), ``rounds`` and ``sequential`` (steps run in plain Python).

    Returns:
        ``(dataset_index index_dtype [size], dataset_sample_index int64 [size])``.
    """
    weights = np.ascontiguousarray(weights, dtype=np.float64)
    burn = BURN[rule]
    if rule == "edf":
        burn = max(burn, min(EDF_WIDE_BURN, 2 * len(weights) // 3))
    stats = {} if stats is None else stats
    stats.update(segments=1, segment=size, repaired=0, rounds=0, sequential=size)
    if size < max(SCALAR_BELOW, 4 * burn):
        out_index = np.empty(size, dtype=index_dtype)
        out_sample = np.empty(size, dtype=np.int64)
        zeros = np.zeros(len(weights), dtype=np.int64)
        _sequential(rule, weights, caps, zeros, 0, size, out_index, out_sample)
        return out_index, out_sample
    kernel = _kernel(rule, weights, caps)
    # a wide kernel's step costs ~n per column (~its shortlist's width) and little else:
    # longer segments pay
    width = getattr(kernel, "width", len(weights)) if kernel.wide else 4
    segment = segment_length(size, burn, width)
    columns = max(1, -(-(size - burn) // segment))
    out_index = np.empty(columns * segment + burn, dtype=index_dtype)
    out_sample = np.empty(columns * segment + burn, dtype=np.int64)
    steps = np.arange(columns, dtype=np.int64) * segment
    guess = kernel.guess(steps)
    guess[:, 0] = 0  # segment 0 starts at the true start
    kernel.start(guess, steps)
    pick, before = np.empty(columns, dtype=np.intp), np.empty(columns)
    for t in range(burn):  # burn-in; column 0 is real and recorded
        kernel.step(pick, before)
        out_index[t], out_sample[t] = pick[0], before[0]
    first = kernel.state()
    _Recorder(out_index, out_sample, steps + burn, segment).run(kernel, segment)
    last = kernel.state()
    stats.update(segments=columns, segment=segment, sequential=0)
    steps += burn
    layout = _Columns(segment, steps, steps, np.full(columns, size), np.arange(columns) - 1)

    def restart(counts: np.ndarray, bad: np.ndarray) -> None:
        kernel.start(counts, layout.steps[bad])

    def replay(counts: np.ndarray, column: int, begin: int, stop: int) -> tuple[list, list]:
        return _SCALAR[rule](weights, caps, counts, begin, stop)

    _repair(restart, replay, kernel, first, last, layout, out_index, out_sample, stats)
    return out_index[:size], out_sample[:size]


def run_stages(
    rule: str,
    rates: np.ndarray,
    lengths: np.ndarray,
    index_dtype: np.typing.DTypeLike = np.int16,
    stats: dict | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """S independent runs of ``rule`` ("edf"), side by side in one vectorized pass.

    Args:
        rule: "edf".
        rates: float64 [S, n]: row s holds run s's rates (> 0, sum 1) and 0 for the
            datasets it never picks.
        lengths: int [S] >= 0: steps of each run.
        index_dtype: dtype of the dataset index.
        stats: as :func:`run`'s, over all runs (``segments``: columns in all).

    Returns:
        ``(dataset_index index_dtype [sum(lengths)], dataset_sample_index int64
        [sum(lengths)])``: the concatenation over s of ``run(rule, rates[s][live],
        lengths[s])`` (``live`` = the datasets with rate > 0; each run's counts start
        from zero), dataset ids in the columns of ``rates``, value for value.

    Each run's columns start as :func:`run`'s do (its first at its true start, the
    others from a guess, ``burn`` steps early); all columns of all runs step together
    (:class:`~megadata_core.indices._blend_rules.EdfStages`: per-column rates), links
    are checked within a run, and broken columns are repaired as :func:`run` repairs
    them. Runs short enough to be one column need no burn-in and no check.
    """
    if rule != "edf":
        raise ValueError(f"rule: {rule!r}; runs side by side are 'edf' only")
    table = np.ascontiguousarray(rates, dtype=np.float64)
    sizes = np.asarray(lengths, dtype=np.int64)
    places = np.concatenate([[0], np.cumsum(sizes)])  # each run's place in the output
    total = int(places[-1])
    stats = {} if stats is None else stats
    stats.update(segments=0, segment=0, repaired=0, rounds=0, sequential=0)
    runs = np.flatnonzero(sizes > 0)
    if runs.size == 0:
        return np.empty(0, dtype=index_dtype), np.empty(0, dtype=np.int64)
    datasets = table.shape[1]
    kernel = rules.EdfStages(table)
    live = int(kernel.live[runs].max())
    burn = max(BURN[rule], min(EDF_WIDE_BURN, 2 * live // 3))
    plan = _stage_plan(sizes[runs], kernel.live[runs], burn, datasets, kernel.wide)

    def replay(run_id: int, counts: np.ndarray, begin: int, stop: int) -> tuple[np.ndarray, list]:
        """Steps [begin, stop) of run ``run_id`` in plain Python, over its live datasets."""
        ids = np.flatnonzero(table[run_id] > 0)
        picks, samples = _SCALAR[rule](table[run_id, ids], None, counts[ids], begin, stop)
        return ids[np.asarray(picks, dtype=np.intp)], samples

    if plan is None:  # every run in plain Python
        out_index = np.empty(total, dtype=index_dtype)
        out_sample = np.empty(total, dtype=np.int64)
        zeros = np.zeros(datasets, dtype=np.int64)
        for run_id in runs.tolist():
            lo, hi = int(places[run_id]), int(places[run_id + 1])
            out_index[lo:hi], out_sample[lo:hi] = replay(run_id, zeros, 0, hi - lo)
        stats.update(segments=int(runs.size), sequential=total)
        return out_index, out_sample
    burn, segment, counts = plan
    layout, owner, heads = _stage_columns(sizes, places, runs, counts, burn, segment)
    columns = len(owner)
    steps = layout.steps - burn  # where each column starts (burns in)
    guess = np.zeros((datasets, columns), dtype=np.int64)
    later = layout.previous >= 0
    if later.any():
        guess[:, later] = kernel.guess(steps[later], owner[later])
    kernel.start(guess, steps, owner)
    head_index = np.empty((burn, runs.size), dtype=np.intp)  # the runs' first steps
    head_sample = np.empty((burn, runs.size))
    pick, before = np.empty(columns, dtype=np.intp), np.empty(columns)
    for t in range(burn):  # burn-in; each run's first column is real and recorded
        kernel.step(pick, before)
        np.take(pick, heads, out=head_index[t])
        np.take(before, heads, out=head_sample[t])
    first = kernel.state()
    # the output, then one segment per run for its last column (which runs past its end)
    out_index = np.empty(total + runs.size * segment, dtype=index_dtype)
    out_sample = np.empty(total + runs.size * segment, dtype=np.int64)
    _Recorder(out_index, out_sample, layout.places, segment).run(kernel, segment)
    last = kernel.state()
    stats.update(segments=columns, segment=segment)

    def restart(start: np.ndarray, bad: np.ndarray) -> None:
        kernel.start(start, layout.steps[bad], owner[bad])

    def replay_column(start: np.ndarray, column: int, begin: int, stop: int) -> tuple:
        return replay(int(owner[column]), start, begin, stop)

    _repair(restart, replay_column, kernel, first, last, layout, out_index, out_sample, stats)
    tails = columns - runs.size
    for number, run_id in enumerate(runs.tolist()):  # each run's head and last column
        lo, hi = int(places[run_id]), int(places[run_id + 1])
        head = min(burn, hi - lo)
        out_index[lo : lo + head] = head_index[:head, number]
        out_sample[lo : lo + head] = head_sample[:head, number]
        begin = lo + int(layout.steps[tails + number])
        place = int(layout.places[tails + number])
        out_index[begin:hi] = out_index[place : place + hi - begin]
        out_sample[begin:hi] = out_sample[place : place + hi - begin]
    if runs.size * segment > total // 4:  # short runs: leave no large slack behind
        return out_index[:total].copy(), out_sample[:total].copy()
    return out_index[:total], out_sample[:total]


def _stage_columns(
    sizes: np.ndarray,
    places: np.ndarray,
    runs: np.ndarray,
    counts: np.ndarray,
    burn: int,
    segment: int,
) -> tuple[_Columns, np.ndarray, np.ndarray]:
    """The columns of runs side by side: ``(layout, owner int64 [K] (each column's
    run), heads int64 [R] (each run's first column))``.

    Run r (``runs[r]``, ``counts[r]`` columns) records its first ``burn`` steps apart
    (its first column burns in from the true start); its columns but the last record
    straight into the output at ``places``, in order, runs after one another; the last
    columns of all runs come after them and record into one segment each past the
    output (``total + r * segment``), as they may run past their run's end. Each block
    of consecutive columns records one segment after the other (:class:`_Recorder`
    copies it through a view).
    """
    total, count = int(places[-1]), len(runs)
    full = counts - 1  # columns that end within their run
    owner = np.concatenate([np.repeat(runs, full), runs])
    starts = np.cumsum(full) - full  # each run's first full column
    local = np.concatenate([np.arange(int(full.sum())) - np.repeat(starts, full), full])
    steps = burn + local * segment  # the step each column records first
    spots = places[owner] + steps
    spots[-count:] = total + np.arange(count) * segment
    tails = len(owner) - count + np.arange(count)
    previous = np.arange(len(owner)) - 1
    previous[local == 0] = -1
    previous[tails] = np.where(full > 0, starts + full - 1, -1)
    heads = np.where(full > 0, starts, tails)
    layout = _Columns(segment, steps, spots, sizes[owner], previous)
    return layout, owner, heads


def _stage_plan(
    sizes: np.ndarray, live: np.ndarray, burn: int, datasets: int, wide: bool
) -> tuple[int, int, np.ndarray] | None:
    """``(burn, segment, columns int64 [R])`` for R runs of ``sizes`` steps side by side,
    or None where plain Python costs less.

    A run longer than ``burn + segment`` steps gets a column per ``segment`` steps after
    its first; with no such run the pass needs no burn-in (one column per run). Costs
    in units of a step of one column and dataset, as :func:`segment_length`'s: a step
    costs STEP_UNITS (a narrow kernel's per-dataset loop a quarter of that per dataset),
    a column n more; a plan with links expects half a repair pass; plain Python costs
    ``SCALAR_COST / COLUMN_COST`` per step and dataset.
    """
    step = STEP_UNITS if wide else STEP_UNITS / 4 * max(datasets, 4)
    longest = int(sizes.max())
    plan = (0, longest, np.ones_like(sizes))
    best = longest * (step + len(sizes) * datasets)
    for segment in range(ROWS, 8192 + 1, ROWS):
        if burn + segment >= longest:
            break
        columns = np.where(sizes > burn + segment, -(-(sizes - burn) // segment), 1)
        cost = (burn + 1.5 * segment) * step + (burn + segment) * columns.sum() * datasets
        if cost < best:
            plan, best = (burn, segment, columns), cost
    scalar = float(np.dot(sizes, 2 + live)) * (SCALAR_COST / COLUMN_COST)
    return None if scalar < best else plan


def tile(
    word_index: np.ndarray,
    word_sample: np.ndarray,
    growth: np.ndarray,
    size: int,
    out: tuple[np.ndarray, np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The first ``size`` steps of a period repeated forever.

    Args:
        word_index: the period's dataset ids (its dtype is the output's), [P].
        word_sample: the period's dataset sample ids, int64 [P].
        growth: int64 [P]: how much ``word_sample[s]`` grows per period (the count of
            dataset ``word_index[s]`` in one period).
        size: steps.
        out: if given, the two arrays [size] to write into.

    The period is first repeated into a row of about ``TILE_ROW`` steps; the rows are
    then broadcast (dataset ids) and written one from the previous (sample ids), so
    each output element is written once.
    """
    period = len(word_index)
    repeats = max(1, TILE_ROW // period)
    row_index = np.tile(word_index, repeats)
    row_growth = np.tile(growth * repeats, repeats)  # a row holds `repeats` periods
    row_sample = (word_sample[None, :] + np.arange(repeats)[:, None] * growth[None, :]).ravel()
    length = len(row_index)
    rows, tail = divmod(size, length)
    if out is None:
        out = np.empty(size, dtype=word_index.dtype), np.empty(size, dtype=np.int64)
    out_index, out_sample = out
    out_index[: rows * length].reshape(rows, length)[...] = row_index
    out_index[rows * length :] = row_index[:tail]
    samples = out_sample[: rows * length].reshape(rows, length)
    current = row_sample.copy()
    for row in range(rows):  # one pass over the output, a row (cache-sized) at a time
        samples[row] = current
        current += row_growth
    out_sample[rows * length :] = current[:tail]
    return out_index, out_sample


class _Columns(NamedTuple):
    """Where K columns (of one run or several side by side) record, ``segment`` steps
    each."""

    segment: int
    steps: np.ndarray  # int64 [K]: the step of its run each column records first
    places: np.ndarray  # int64 [K]: where that step goes in the output buffers
    stops: np.ndarray  # int64 [K]: the step its run ends at
    previous: np.ndarray  # int64 [K]: the column it continues (< k), or -1 at a start


def _broken(first: np.ndarray, last: np.ndarray, previous: np.ndarray) -> np.ndarray:
    """Columns whose first counts differ from their predecessor's last counts."""
    linked = np.flatnonzero(previous >= 0)
    return linked[(first[:, linked] != last[:, previous[linked]]).any(axis=0)]


def _repair(restart, replay, kernel, first, last, layout, out_index, out_sample, stats):
    """Re-run broken columns from their predecessor's end (vectorized) while that makes
    progress; then re-run the ones still broken in order, in plain Python.

    ``restart(counts [n, B], columns [B])`` starts the kernel's B columns there;
    ``replay(counts [n], column, begin, stop)`` is the (picks, samples) of steps
    ``[begin, stop)`` of the column's run in plain Python.
    """
    segment, datasets = layout.segment, first.shape[0]
    bad = _broken(first, last, layout.previous)

    def worth_a_pass(broken: int) -> bool:  # a pass must cost < half the plain-Python runs
        vectorized = STEP_COST + broken * datasets * COLUMN_COST
        return 2 * vectorized < broken * (2 + datasets) * SCALAR_COST

    while bad.size and stats["rounds"] < MAX_REPAIR_ROUNDS and worth_a_pass(bad.size):
        stats["rounds"] += 1
        stats["repaired"] += int(bad.size)
        start = last[:, layout.previous[bad]]
        restart(start, bad)
        _Recorder(out_index, out_sample, layout.places[bad], segment).run(kernel, segment)
        first[:, bad] = start
        last[:, bad] = kernel.state()
        before, bad = bad.size, _broken(first, last, layout.previous)
        if bad.size >= before:
            break
    if bad.size == 0:
        return
    # One sweep in order: a column whose first counts still differ from its (now final)
    # predecessor's last counts runs again, in plain Python; the others are verified.
    for k in range(int(bad[0]), first.shape[1]):
        previous = int(layout.previous[k])
        if previous < 0 or np.array_equal(first[:, k], last[:, previous]):
            continue
        begin, place = int(layout.steps[k]), int(layout.places[k])
        stop = min(begin + segment, int(layout.stops[k]))
        first[:, k] = last[:, previous]
        picks, samples = replay(first[:, k], k, begin, stop)
        end = place + stop - begin
        out_index[place:end] = picks
        out_sample[place:end] = samples
        last[:, k] = first[:, k] + np.bincount(out_index[place:end], minlength=datasets)
        stats["sequential"] += stop - begin


def _sequential(rule, weights, caps, counts, first, stop, out_index, out_sample) -> None:
    """``out_*[first:stop]``: the rule's steps from ``counts``, in plain Python."""
    picks, samples = _SCALAR[rule](weights, caps, counts, first, stop)
    out_index[first:stop] = picks
    out_sample[first:stop] = samples
