"""Floor 2 (beside indices): Megatron's step batch-size ramp-up as arithmetic on steps.

megatron-core 0.18+ takes ``--step-batch-size-schedule "0:768 250B:1536 500B:3072"``
(``StepBatchsizeNumMicroBatchesCalculator``): the global batch size at ``consumed``
samples is that of the last entry whose threshold is ``<= consumed``, and each training
step consumes the global batch size current at its start. :class:`BatchSizeSchedule`
parses that string value for value (thresholds in tokens are floored to samples by the
sequence length, entries sorted, the same inputs refused) and answers, in closed form per
run of equal-sized steps (never one Python trip per step), which step starts where.

A *run* is a maximal stretch of consecutive steps of one size. A step that starts before
a threshold but ends past it keeps its size (the next step takes the new one), so a run
may start after its threshold, and an entry overtaken by such a step has no step at all.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from functools import cached_property

from megadata_core.checks import check_int, megatron_count
from megadata_core.errors import DataError

__all__ = ["BatchSizeSchedule"]

_FIELD = "step_batch_size_schedule"


def _number(entry: str, what: str, text: str) -> int:
    """Megatron's reading of one value (:func:`~megadata_core.checks.megatron_count`)."""
    try:
        return megatron_count(text)
    except (ValueError, OverflowError):
        raise DataError(
            f"{_FIELD}: entry {entry!r}: {what} {text!r} is not a finite number (a value "
            "with an optional K, M, B or T suffix)"
        ) from None


def _checked(entries: list[tuple[int, int, str]]) -> list[tuple[int, int, str]]:
    """``(threshold, batch_size, entry text)`` sorted by threshold and checked as Megatron
    checks them: at least one entry, the first threshold 0, thresholds strictly increasing,
    batch sizes > 0."""
    if not entries:
        raise DataError(f"{_FIELD}: no entries (expected 'THRESHOLD:BATCH_SIZE ...')")
    entries = sorted(entries, key=lambda item: item[0])
    if entries[0][0] != 0:
        raise DataError(
            f"{_FIELD}: entry {entries[0][2]!r}: the smallest threshold is {entries[0][0]} "
            "samples; the first threshold must be 0"
        )
    for (low, _, first), (high, _, second) in zip(entries, entries[1:]):
        if high <= low:
            raise DataError(
                f"{_FIELD}: entries {first!r} and {second!r} have the same threshold, "
                f"{low} samples; thresholds must be strictly increasing"
            )
    for _, size, entry in entries:
        if size <= 0:
            raise DataError(f"{_FIELD}: entry {entry!r}: batch size {size} must be > 0")
    return entries


@dataclass(frozen=True)
class BatchSizeSchedule:
    """A step batch-size schedule with thresholds in samples.

    Build one with :meth:`parse` (Megatron's string) or from the two tuples. ``str()``
    is the canonical text ``"0:768 61035156:1536"`` (thresholds in samples), which
    :meth:`parse` reads back to an equal schedule; equal schedules compare equal.

    Attributes:
        thresholds: consumed samples at which each entry takes effect, ``(0, ...)``
            strictly increasing (Python ints: no bound).
        batch_sizes: global batch size of each entry, each > 0.

    Raises:
        DataError: naming the entry and the value.
    """

    thresholds: tuple[int, ...]
    batch_sizes: tuple[int, ...]

    def __post_init__(self) -> None:
        thresholds, sizes = tuple(self.thresholds), tuple(self.batch_sizes)
        if len(thresholds) != len(sizes):
            raise DataError(
                f"{_FIELD}: {len(thresholds)} thresholds but {len(sizes)} batch sizes"
            )
        thresholds = tuple(check_int(f"{_FIELD} threshold", t) for t in thresholds)
        sizes = tuple(check_int(f"{_FIELD} batch size", b) for b in sizes)
        entries = [(t, b, f"{t}:{b}") for t, b in zip(thresholds, sizes)]
        if [item[0] for item in _checked(entries)] != list(thresholds):
            raise DataError(f"{_FIELD}: thresholds {thresholds} are not in increasing order")
        object.__setattr__(self, "thresholds", thresholds)
        object.__setattr__(self, "batch_sizes", sizes)

    @classmethod
    def parse(cls, schedule: str, sequence_length: int | None = None) -> BatchSizeSchedule:
        """Megatron's ``--step-batch-size-schedule`` string.

        Entries ``THRESHOLD:BATCH_SIZE`` are separated by spaces or commas; values may end
        in K, M, B or T (1e3 .. 1e12) and are read as ``int(float(value) * multiplier)``.
        With ``sequence_length`` (Megatron training passes ``--seq-length``) thresholds
        are tokens, converted to samples as ``tokens // sequence_length``; without it they
        are samples.
        """
        if not isinstance(schedule, str):
            raise DataError(f"{_FIELD}: expected a string, got {schedule!r}")
        if sequence_length is not None:
            sequence_length = check_int("sequence_length", sequence_length, minimum=1)
        entries = []
        for entry in schedule.replace(",", " ").split():  # one trip per entry
            threshold_text, colon, size_text = entry.partition(":")
            if not colon:
                raise DataError(
                    f"{_FIELD}: entry {entry!r} has no ':' (expected THRESHOLD:BATCH_SIZE)"
                )
            threshold = _number(entry, "threshold", threshold_text)
            if sequence_length is not None:
                threshold //= sequence_length
            entries.append((threshold, _number(entry, "batch size", size_text), entry))
        entries = _checked(entries)
        return cls(tuple(t for t, _, _ in entries), tuple(b for _, b, _ in entries))

    def __str__(self) -> str:
        return " ".join(f"{t}:{b}" for t, b in zip(self.thresholds, self.batch_sizes))

    @cached_property
    def runs(self) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
        """``(starts, first_steps, sizes)``: per run of equal-sized steps, the consumed
        samples where it starts, the index of its first step, and its step size. The last
        run never ends. Two schedules whose runs agree have the same steps."""
        starts: list[int] = []
        first_steps: list[int] = []
        sizes: list[int] = []
        consumed = step = 0
        ends = self.thresholds[1:] + (None,)
        for size, end in zip(self.batch_sizes, ends):  # one trip per entry
            if end is not None and consumed >= end:
                continue  # a step of the previous size ran past this entry
            if not sizes or sizes[-1] != size:
                starts.append(consumed)
                first_steps.append(step)
                sizes.append(size)
            if end is not None:
                count = -(-(end - consumed) // size)  # steps that start before `end`
                consumed += count * size
                step += count
        return tuple(starts), tuple(first_steps), tuple(sizes)

    def global_batch_size(self, consumed_samples: int) -> int:
        """The global batch size at ``consumed_samples`` (the last entry whose threshold
        is ``<= consumed_samples``), as Megatron's calculator."""
        consumed = check_int("consumed_samples", consumed_samples, minimum=0)
        return self.batch_sizes[bisect.bisect_right(self.thresholds, consumed) - 1]

    def num_micro_batches(
        self, consumed_samples: int, micro_batch_size: int, data_parallel_size: int
    ) -> int:
        """Micro-batches per rank in the step at ``consumed_samples``: ``gbs // (mbs·dp)``.

        Raises:
            DataError: when the global batch size is not a multiple of ``mbs·dp`` (where
                Megatron's consistency check fails), naming both numbers.
        """
        mbs = check_int("micro_batch_size", micro_batch_size, minimum=1)
        dp = check_int("data_parallel_size", data_parallel_size, minimum=1)
        size = self.global_batch_size(consumed_samples)
        if size % (mbs * dp):
            raise DataError(
                f"{_FIELD}: global batch size {size} at consumed_samples {consumed_samples} "
                f"is not divisible by micro_batch_size {mbs} x data_parallel_size {dp} = "
                f"{mbs * dp}"
            )
        return size // (mbs * dp)

    def consumed_after(self, steps: int) -> int:
        """Consumed samples after ``steps`` training steps from 0 (where step ``steps``
        starts)."""
        steps = check_int("steps", steps, minimum=0)
        starts, first_steps, sizes = self.runs
        run = bisect.bisect_right(first_steps, steps) - 1
        return starts[run] + (steps - first_steps[run]) * sizes[run]

    def step_at(self, consumed_samples: int) -> int:
        """The index of the step that starts at ``consumed_samples``.

        Raises:
            DataError: when no step starts there, naming the steps around it.
        """
        consumed = check_int("consumed_samples", consumed_samples, minimum=0)
        starts, first_steps, sizes = self.runs
        run = bisect.bisect_right(starts, consumed) - 1
        steps, rest = divmod(consumed - starts[run], sizes[run])
        if rest:
            before = consumed - rest
            raise DataError(
                f"consumed_samples: {consumed} is not a step boundary of the batch-size "
                f"schedule {str(self)!r}: the steps around it start at {before} and "
                f"{before + sizes[run]}"
            )
        return first_steps[run] + steps

    def train_iters(self, train_samples: int) -> int:
        """Megatron's ``update_train_iters`` for sample-based training: the number of
        steps until at least ``train_samples`` samples are consumed."""
        samples = check_int("train_samples", train_samples, minimum=0)
        if samples == 0:
            return 0
        starts, first_steps, sizes = self.runs
        run = bisect.bisect_left(starts, samples) - 1  # the last run starting before
        return first_steps[run] - (-(samples - starts[run]) // sizes[run])

    def first_difference(self, other: BatchSizeSchedule) -> int | None:
        """Consumed samples where the first step that differs between the two schedules
        starts (a step of both, with another size), or None when their steps are all
        the same."""
        if not isinstance(other, BatchSizeSchedule):
            raise DataError(f"{_FIELD}: expected a BatchSizeSchedule, got {other!r}")
        mine, theirs = self.runs, other.runs
        pairs = list(zip(zip(mine[0], mine[2]), zip(theirs[0], theirs[2])))
        for (start, size), (other_start, other_size) in pairs:  # one trip per run
            if (start, size) != (other_start, other_size):
                return min(start, other_start)
        if len(mine[0]) == len(theirs[0]):
            return None
        longer = mine if len(mine[0]) > len(theirs[0]) else theirs
        return longer[0][len(pairs)]
