"""Floor 4 (beside datasets): data-parallel samplers, which global samples each DP rank reads.

Two samplers with the constructor signatures of Megatron-LM's
``megatron/training/data_samplers.py`` (not shipped in the megatron-core wheel):

* :class:`PretrainingSampler` — ``MegatronPretrainingSampler`` (``--dataloader-type
  single``): walks the global indices ``consumed_samples .. total_samples - 1`` in order.
  Index-for-index identical to Megatron.
* :class:`RandomSampler` — ``MegatronPretrainingRandomSampler`` (``--dataloader-type
  cyclic``): one shuffled pass per epoch, epochs repeating forever. Same structure as
  Megatron; the permutations come from numpy (``np.random.default_rng((seed, epoch))``)
  instead of ``torch.Generator().manual_seed(epoch)``, and ``data_sharding=False`` uses an
  elastic layout (see the class docstring for the deviation and why).

Both are *batch samplers*: iterating one yields this rank's micro-batches as ``list[int]``
(Python ints, length ``micro_batch_size``), so they plug straight into
``torch.utils.data.DataLoader(dataset, batch_sampler=sampler)`` or any loop that calls
``dataset.__getitems__(batch)``. The core imports numpy only; no torch is needed.

Vocabulary. ``G = micro_batch_size * data_parallel_size`` is the number of samples one
step reads across all DP ranks (Megatron's ``micro_batch_times_data_parallel_size``; with
gradient accumulation a *training* step reads several such groups, which changes nothing
here). "Global sequence" means the concatenation over steps of the ranks' micro-batches
in rank order. A sampler is **elastic** when its global sequence does not depend on
``data_parallel_size`` for a fixed ``G``: then a run checkpointed at ``consumed_samples``
with one DP size can resume with another (same ``G``) and read exactly the samples it
would have read. :class:`PretrainingSampler` and ``RandomSampler(data_sharding=False)``
are elastic; ``RandomSampler(data_sharding=True)`` is not (as in Megatron).

Resumption. A sampler built with ``consumed_samples=c`` continues exactly where a sampler
built with ``consumed_samples=0`` is after it handed out ``c`` global samples (``c/G``
steps). ``state_dict()`` / ``load_state_dict()`` carry that number in the style of
torchdata's ``StatefulDataLoader`` (see each class for what counts as handed out).

Training steps. With ``batch_size_schedule=`` (a :class:`BatchSizeSchedule`, Megatron's
``--step-batch-size-schedule``) a sampler also knows the *training* steps: the step that
starts at ``c`` consumed samples reads the next ``gbs(c)`` global samples, i.e.
``gbs(c) / G`` consecutive micro-batches per rank (Megatron's sampler is unchanged by the
schedule; the schedule only says how many of its micro-batches make one step).
``steps()`` yields, per step, this rank's micro-batches of it (``list[list[int]]``);
``state_dict()`` then carries the schedule's text, and ``load_state_dict`` takes only a
state at a step boundary whose schedule has the same steps as this one before it (a
schedule may be edited for the future, never for the past). Without a schedule nothing
changes (iteration, states and reprs are as before).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from megadata_core.batch_ramp import BatchSizeSchedule
from megadata_core.checks import check_int
from megadata_core.errors import DataError

__all__ = ["BatchSizeSchedule", "PretrainingSampler", "RandomSampler", "epoch_rng"]

_SCHEDULE_KEY = "batch_size_schedule"


def _check_dp(micro_batch_size: object, rank: object, size: object) -> tuple[int, int, int]:
    """Validated ``(micro_batch_size, data_parallel_rank, data_parallel_size)``."""
    mbs = check_int("micro_batch_size", micro_batch_size, minimum=1)
    dp_size = check_int("data_parallel_size", size, minimum=1)
    dp_rank = check_int("data_parallel_rank", rank, minimum=0)
    if dp_rank >= dp_size:
        raise DataError(
            f"data_parallel_rank: {dp_rank} must be smaller than data_parallel_size {dp_size}"
        )
    return mbs, dp_rank, dp_size


def _check_state(state: Mapping[str, Any], expected: Mapping[str, Any], kind: str) -> int:
    """Check a state dict against this sampler's config; return its consumed_samples."""
    if not isinstance(state, Mapping) or "consumed_samples" not in state:
        raise DataError(f"state: expected a mapping with 'consumed_samples', got {state!r}")
    for field, value in expected.items():
        if field in state and state[field] != value:
            raise DataError(
                f"state: {field} is {state[field]!r} in the state but {value!r} in this {kind}"
            )
    return check_int("consumed_samples", state["consumed_samples"], minimum=0)


def _check_schedule(schedule: object) -> BatchSizeSchedule | None:
    """``batch_size_schedule``: a :class:`BatchSizeSchedule` or None."""
    if schedule is not None and not isinstance(schedule, BatchSizeSchedule):
        raise DataError(
            f"{_SCHEDULE_KEY}: expected a BatchSizeSchedule (BatchSizeSchedule.parse(text, "
            f"sequence_length)) or None, got {schedule!r}"
        )
    return schedule


def _check_step_start(sampler: PretrainingSampler | RandomSampler, consumed: int) -> None:
    """With a schedule: one of its steps starts at ``consumed`` and its global batch size
    is a multiple of ``micro_batch_size x data_parallel_size`` (Megatron's consistency
    check)."""
    schedule = sampler.batch_size_schedule
    if schedule is not None:
        schedule.step_at(consumed)
        schedule.num_micro_batches(consumed, sampler.micro_batch_size, sampler.data_parallel_size)


def _state_schedule(
    state: Mapping[str, Any], schedule: BatchSizeSchedule | None, consumed: int
) -> None:
    """The state's schedule against this sampler's: both absent, or with the same steps
    before ``consumed`` (a boundary of the state's schedule)."""
    text = state.get(_SCHEDULE_KEY)
    if schedule is None or text is None:
        if schedule is not None or text is not None:
            raise DataError(
                f"state: {_SCHEDULE_KEY} is {text!r} in the state but "
                f"{None if schedule is None else str(schedule)!r} in this sampler"
            )
        return
    if text == str(schedule):
        return
    try:
        saved = BatchSizeSchedule.parse(text)
    except DataError as error:
        raise DataError(f"state: {_SCHEDULE_KEY} {text!r} is not a schedule: {error}") from None
    saved.step_at(consumed)
    first = schedule.first_difference(saved)
    if first is not None and first < consumed:
        raise DataError(
            f"state: {_SCHEDULE_KEY} {text!r} in the state and {str(schedule)!r} in this "
            f"sampler differ before the state's consumed_samples {consumed}: the step at "
            f"{first} consumed samples reads {saved.global_batch_size(first)} samples in "
            f"the state's schedule and {schedule.global_batch_size(first)} in this one "
            "(a schedule may change only after the consumed samples)"
        )


class PretrainingSampler:
    """Megatron's ``MegatronPretrainingSampler``: sequential, resumable, elastic.

    Global step ``t`` reads the global indices ``[c + t·G, c + (t+1)·G)`` (``c`` =
    ``consumed_samples``, ``G = micro_batch_size · data_parallel_size``); rank ``r`` gets
    the contiguous slice ``[c + t·G + r·mbs, c + t·G + (r+1)·mbs)``. Iteration stops at
    ``total_samples``. The last, partial global batch (fewer than ``G`` indices left) is
    dropped when ``drop_last=True``; with ``drop_last=False`` it is sliced exactly as
    Megatron slices it, so a rank may get a short or even an **empty** list (every rank
    still yields it, keeping the ranks in step).

    ``len(sampler)`` is ``total_samples``, as in Megatron (not the number of batches).
    Python's ``list(sampler)`` takes ``len`` as a size hint and pre-allocates that many
    slots: for huge totals collect ``list(iter(sampler))`` instead.

    Elastic: the global sequence is ``c, c+1, ..., total_samples-1`` whatever the DP size,
    so resuming from ``consumed_samples`` with another DP size (same ``G``, or in fact any
    ``G``) continues it exactly.

    State: each ``iter(sampler)`` starts at ``self.consumed_samples`` (as Megatron, which
    never advances it) and counts the global samples it hands out in
    ``self.samples_handed_out`` (``G`` per yielded batch, counted when the batch is
    yielded). ``state_dict()["consumed_samples"]`` is the sum of the two: a new sampler
    built from it, or ``load_state_dict`` of it, continues after the last batch handed
    out. A ``torch.utils.data.DataLoader`` with workers pulls batches from the sampler
    ahead of the training loop, so a trainer that checkpoints should count the batches it
    trained on (as Megatron does with ``args.consumed_samples``) rather than trust the
    prefetching sampler's count.

    Training steps (with ``batch_size_schedule``): ``steps()`` yields, per training step
    from ``self.consumed_samples``, this rank's ``gbs / G`` micro-batches of the step
    (the global samples ``[c, c + gbs)``), counting ``gbs`` handed out per step; it stops
    before a step that would run past ``total_samples`` (whatever ``drop_last``). Any
    micro-batch and DP size that divide the global batch sizes resume a state exactly.

    Args:
        total_samples: number of samples in the dataset (``len(dataset)``), > 0.
        consumed_samples: global samples already consumed, ``0 <= c < total_samples``
            (with a schedule: where one of its steps starts).
        micro_batch_size: samples per rank per step, > 0.
        data_parallel_rank: this rank, ``0 <= rank < data_parallel_size``.
        data_parallel_size: number of DP ranks, > 0.
        drop_last: drop the final partial global batch (Megatron default True).
        batch_size_schedule: the step batch-size schedule, or None (no training steps).

    Raises:
        DataError: naming the offending field.

    Yields:
        ``list[int]`` of global sample indices, length ``micro_batch_size`` (shorter or
        empty only for the last partial batch with ``drop_last=False``).
    """

    def __init__(
        self,
        total_samples: int,
        consumed_samples: int,
        micro_batch_size: int,
        data_parallel_rank: int,
        data_parallel_size: int,
        drop_last: bool = True,
        *,
        batch_size_schedule: BatchSizeSchedule | None = None,
    ) -> None:
        self.total_samples = check_int("total_samples", total_samples, minimum=1)
        self.micro_batch_size, self.data_parallel_rank, self.data_parallel_size = _check_dp(
            micro_batch_size, data_parallel_rank, data_parallel_size
        )
        self.micro_batch_times_data_parallel_size = self.micro_batch_size * self.data_parallel_size
        self.drop_last = bool(drop_last)
        self.batch_size_schedule = _check_schedule(batch_size_schedule)
        self.consumed_samples = self._check_consumed(consumed_samples)
        _check_step_start(self, self.consumed_samples)
        self.samples_handed_out = 0

    def _check_consumed(self, consumed_samples: object) -> int:
        consumed = check_int("consumed_samples", consumed_samples, minimum=0)
        if consumed >= self.total_samples:
            raise DataError(
                f"consumed_samples: {consumed} is at or beyond the total of "
                f"{self.total_samples} samples (total_samples); no samples left to consume"
            )
        return consumed

    def __len__(self) -> int:
        """``total_samples`` (Megatron's choice; not the number of batches)."""
        return self.total_samples

    def get_start_end_idx(self) -> tuple[int, int]:
        """This rank's ``[start, end)`` slice of every global batch."""
        start = self.data_parallel_rank * self.micro_batch_size
        return start, start + self.micro_batch_size

    def __iter__(self) -> Iterator[list[int]]:
        self.samples_handed_out = 0
        return self._batches(self.consumed_samples)

    def _batches(self, first: int) -> Iterator[list[int]]:
        step = self.micro_batch_times_data_parallel_size
        lo, hi = self.get_start_end_idx()
        full_end = first + (self.total_samples - first) // step * step
        for batch_start in range(first, full_end, step):  # one trip per global batch
            self.samples_handed_out += step
            yield list(range(batch_start + lo, batch_start + hi))
        if full_end < self.total_samples and not self.drop_last:
            self.samples_handed_out += self.total_samples - full_end
            yield list(range(full_end, self.total_samples)[lo:hi])

    def steps(self) -> Iterator[list[list[int]]]:
        """Per training step from ``self.consumed_samples``: this rank's micro-batches of
        it, ``gbs / G`` lists of ``micro_batch_size`` ints (needs ``batch_size_schedule``)."""
        schedule = _need_schedule(self.batch_size_schedule)
        self.samples_handed_out = 0
        return self._steps(schedule, self.consumed_samples)

    def _steps(self, schedule: BatchSizeSchedule, first: int) -> Iterator[list[list[int]]]:
        mbs, dp = self.micro_batch_size, self.data_parallel_size
        group = self.micro_batch_times_data_parallel_size
        offsets = np.arange(mbs) + self.data_parallel_rank * mbs
        consumed = first
        while True:  # one trip per training step
            if consumed + schedule.global_batch_size(consumed) > self.total_samples:
                return
            count = schedule.num_micro_batches(consumed, mbs, dp)
            starts = consumed + group * np.arange(count)
            consumed += count * group
            self.samples_handed_out += count * group
            yield (starts[:, None] + offsets).tolist()

    def _config(self) -> dict[str, Any]:
        return {"total_samples": self.total_samples}

    def state_dict(self) -> dict[str, Any]:
        """``{"consumed_samples", "total_samples", "micro_batch_size",
        "data_parallel_size", "drop_last"}``; ``consumed_samples`` counts the samples
        handed out by the current iterator. Plain ints and bools (JSON-able); with a
        schedule also ``"batch_size_schedule"``, its text."""
        state = {
            "consumed_samples": self.consumed_samples + self.samples_handed_out,
            "total_samples": self.total_samples,
            "micro_batch_size": self.micro_batch_size,
            "data_parallel_size": self.data_parallel_size,
            "drop_last": self.drop_last,
        }
        return _with_schedule(state, self.batch_size_schedule)

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue from ``state["consumed_samples"]`` on the next ``iter()``.

        ``total_samples`` must match (other DP sizes and micro-batch sizes are fine: the
        sampler is elastic). A state whose ``consumed_samples`` equals ``total_samples``
        (a finished pass) is accepted and yields nothing. With a schedule the state must
        be at a step boundary and carry a schedule with the same steps before it.
        """
        consumed = _check_state(state, self._config(), "PretrainingSampler")
        if consumed > self.total_samples:
            raise DataError(
                f"consumed_samples: {consumed} is beyond the total of {self.total_samples} "
                "samples (total_samples)"
            )
        _state_schedule(state, self.batch_size_schedule, consumed)
        if consumed < self.total_samples:
            _check_step_start(self, consumed)
        self.consumed_samples = consumed
        self.samples_handed_out = 0

    def __repr__(self) -> str:
        return (
            f"PretrainingSampler(total_samples={self.total_samples}, "
            f"consumed_samples={self.consumed_samples}, "
            f"micro_batch_size={self.micro_batch_size}, "
            f"data_parallel_rank={self.data_parallel_rank}, "
            f"data_parallel_size={self.data_parallel_size}, drop_last={self.drop_last}"
            f"{_schedule_repr(self.batch_size_schedule)})"
        )


def _need_schedule(schedule: BatchSizeSchedule | None) -> BatchSizeSchedule:
    if schedule is None:
        raise DataError(
            f"{_SCHEDULE_KEY}: steps() needs a sampler built with batch_size_schedule= "
            "(its global batch sizes say how many micro-batches make a step)"
        )
    return schedule


def _with_schedule(state: dict[str, Any], schedule: BatchSizeSchedule | None) -> dict[str, Any]:
    if schedule is not None:
        state[_SCHEDULE_KEY] = str(schedule)
    return state


def _schedule_repr(schedule: BatchSizeSchedule | None) -> str:
    return "" if schedule is None else f", batch_size_schedule={str(schedule)!r}"


def epoch_rng(seed: int, epoch: int) -> np.random.Generator:
    """The generator of one epoch: ``np.random.default_rng((seed, epoch))``.

    A pure function of ``(seed, epoch)``; never of wall clock, host or worker count.
    """
    return np.random.default_rng((seed, epoch))


class RandomSampler:
    """Megatron's ``MegatronPretrainingRandomSampler`` (``--dataloader-type cyclic``).

    Epochs. With ``G = micro_batch_size · data_parallel_size``, each epoch reads
    ``active_total = total_samples − total_samples % G`` samples (``active_total_samples``)
    in ``active_total / G`` steps; epochs repeat forever with a fresh shuffle each.
    From ``consumed_samples`` the sampler derives ``epoch = consumed // active_total`` and
    ``current_epoch_samples = consumed % active_total``, exactly as Megatron.

    Iteration (as Megatron): ``iter(sampler)`` yields the *rest of the current epoch* and
    stops; every yielded batch adds ``G`` to ``self.consumed_samples`` (when yielded), so
    the next ``iter()`` continues with the next epoch. Wrap it the way Megatron's
    ``cyclic_iter`` does (``while True: yield from sampler``) for an endless stream.
    ``self.epoch`` is the epoch of the latest ``iter()`` (Megatron hands it to
    ``RandomSeedDataset.set_epoch``). ``len(sampler)`` is ``total_samples``, as Megatron
    (so prefer ``list(iter(sampler))`` to ``list(sampler)`` for huge totals).

    ``data_sharding=True`` (Megatron's default): the active range is cut into
    ``data_parallel_size`` contiguous buckets of ``bucket_size = (total // G) · mbs``;
    rank ``r`` owns ``[r·bucket_size, (r+1)·bucket_size)``, permutes it with the epoch's
    generator (``epoch_rng(seed, epoch).permutation(bucket_size)``, the same permutation
    on every rank, as Megatron's ``randperm`` seeded by the epoch), skips
    ``bucket_offset = current_epoch_samples // data_parallel_size`` entries and yields the
    rest in micro-batches. Same algorithm as Megatron; only the random numbers differ
    (numpy instead of ``torch.randperm``, and the ``seed`` argument is mixed in).
    **Not elastic**: a rank's bucket depends on the DP size, so resuming with another DP
    size reads different samples (it still resumes exactly with the same DP size).

    ``data_sharding=False`` (**deviates from Megatron, to be elastic**): each epoch
    permutes all ``total_samples`` indices with ``epoch_rng(seed, epoch)`` — independent of
    the DP size and micro-batch size — and reads the first ``active_total`` entries of the
    permutation in order: global step ``t`` of the epoch is ``perm[t·G : (t+1)·G]`` and rank
    ``r`` takes the contiguous slice ``perm[t·G + r·mbs : t·G + (r+1)·mbs]``. Megatron
    instead permutes ``(total // mbs) · mbs`` indices (a length that changes with ``mbs``,
    hence with the DP size at fixed ``G``) and deals them out strided (``[rank::dp]``), so
    the order within a global batch depends on the DP size; and when ``(total // mbs) ·
    mbs`` is not a multiple of ``G`` its ranks yield different numbers of batches per epoch
    and drift out of step. Our layout has the same step sets as Megatron's shape (a
    contiguous block of the epoch's permutation per step) and a global sequence that
    depends on ``(total_samples, G, seed, consumed_samples)`` only.

    Training steps (with ``batch_size_schedule``): ``steps()`` yields, per training step
    from ``self.consumed_samples``, this rank's ``gbs / G`` micro-batches of the step —
    the next ``gbs / G`` micro-batches of the endless stream of epochs (a step may cross
    an epoch's end) — and never stops; each step adds ``gbs`` to
    ``self.consumed_samples`` when yielded and sets ``self.epoch`` to the epoch its first
    micro-batch is in. A state resumes exactly with the same ``G`` (and, with
    ``data_sharding=True``, the same DP layout).

    Args:
        total_samples: samples in the dataset, ``>= G`` (so an epoch has a step).
        consumed_samples: global samples consumed so far, ``>= 0`` and a multiple of ``G``
            (Megatron asserts the same of ``consumed % active_total``); may exceed
            ``total_samples`` (later epochs). With a schedule: where one of its steps starts.
        micro_batch_size: samples per rank per step, > 0.
        data_parallel_rank: this rank, ``0 <= rank < data_parallel_size``.
        data_parallel_size: number of DP ranks, > 0.
        data_sharding: Megatron's ``--data-sharding`` (default True).
        seed: non-negative int mixed into every epoch's generator (Megatron has none: its
            order depends on the epoch only).
        batch_size_schedule: the step batch-size schedule, or None (no training steps).

    Raises:
        DataError: naming the offending field.

    Yields:
        ``list[int]`` of ``micro_batch_size`` global sample indices in
        ``[0, total_samples)``.
    """

    def __init__(
        self,
        total_samples: int,
        consumed_samples: int,
        micro_batch_size: int,
        data_parallel_rank: int,
        data_parallel_size: int,
        data_sharding: bool = True,
        seed: int = 0,
        *,
        batch_size_schedule: BatchSizeSchedule | None = None,
    ) -> None:
        self.total_samples = check_int("total_samples", total_samples, minimum=1)
        self.micro_batch_size, self.data_parallel_rank, self.data_parallel_size = _check_dp(
            micro_batch_size, data_parallel_rank, data_parallel_size
        )
        self.micro_batch_times_data_parallel_size = self.micro_batch_size * self.data_parallel_size
        self.last_batch_size = self.total_samples % self.micro_batch_times_data_parallel_size
        self.active_total_samples = self.total_samples - self.last_batch_size
        if self.active_total_samples == 0:
            raise DataError(
                f"total_samples: {self.total_samples} is smaller than one global batch "
                f"(micro_batch_size {self.micro_batch_size} x data_parallel_size "
                f"{self.data_parallel_size} = {self.micro_batch_times_data_parallel_size})"
            )
        self.data_sharding = bool(data_sharding)
        self.seed = check_int("seed", seed, minimum=0)
        self.batch_size_schedule = _check_schedule(batch_size_schedule)
        self.consumed_samples = self._check_consumed(consumed_samples)
        _check_step_start(self, self.consumed_samples)
        self.initial_consumed_samples = self.consumed_samples
        self.epoch = self.consumed_samples // self.active_total_samples

    def _check_consumed(self, consumed_samples: object) -> int:
        consumed = check_int("consumed_samples", consumed_samples, minimum=0)
        step = self.micro_batch_times_data_parallel_size
        if consumed % step:
            raise DataError(
                f"consumed_samples: {consumed} is not a multiple of the global batch "
                f"micro_batch_size x data_parallel_size = {step}"
            )
        return consumed

    @property
    def samples_handed_out(self) -> int:
        """Global samples handed out since construction (or the last ``load_state_dict``)."""
        return self.consumed_samples - self.initial_consumed_samples

    def __len__(self) -> int:
        """``total_samples`` (Megatron's choice; not the number of batches)."""
        return self.total_samples

    def epoch_indices(self, epoch: int, current_epoch_samples: int = 0) -> np.ndarray:
        """This rank's remaining micro-batches of ``epoch``, int64 ``[steps, mbs]``.

        ``current_epoch_samples`` (a multiple of ``G``) global samples of the epoch are
        skipped; ``steps = (active_total - current_epoch_samples) / G``.
        """
        mbs, rank, dp = self.micro_batch_size, self.data_parallel_rank, self.data_parallel_size
        rng = epoch_rng(self.seed, epoch)
        if self.data_sharding:
            bucket_size = self.total_samples // self.micro_batch_times_data_parallel_size * mbs
            bucket_offset = current_epoch_samples // dp
            order = rng.permutation(bucket_size)[bucket_offset:] + rank * bucket_size
            return order.reshape(-1, mbs)
        step = self.micro_batch_times_data_parallel_size
        order = rng.permutation(self.total_samples)
        order = order[current_epoch_samples : self.active_total_samples]
        return order.reshape(-1, step)[:, rank * mbs : (rank + 1) * mbs]

    def __iter__(self) -> Iterator[list[int]]:
        self.epoch = self.consumed_samples // self.active_total_samples
        current_epoch_samples = self.consumed_samples % self.active_total_samples
        return self._batches(self.epoch_indices(self.epoch, current_epoch_samples))

    def _batches(self, batches: np.ndarray) -> Iterator[list[int]]:
        step = self.micro_batch_times_data_parallel_size
        for row in batches:  # one trip per micro-batch
            self.consumed_samples += step
            yield row.tolist()

    def steps(self) -> Iterator[list[list[int]]]:
        """Per training step from ``self.consumed_samples``, endlessly: this rank's
        micro-batches of it, ``gbs / G`` lists of ``micro_batch_size`` ints (needs
        ``batch_size_schedule``)."""
        return self._steps(_need_schedule(self.batch_size_schedule))

    def _steps(self, schedule: BatchSizeSchedule) -> Iterator[list[list[int]]]:
        group, active = self.micro_batch_times_data_parallel_size, self.active_total_samples
        rows_per_epoch = active // group
        cached: dict[int, np.ndarray] = {}  # the epochs the current step reads

        def rows(epoch: int) -> np.ndarray:
            if epoch not in cached:
                cached.clear()
                cached[epoch] = self.epoch_indices(epoch)
            return cached[epoch]

        while True:  # one trip per training step
            count = schedule.num_micro_batches(
                self.consumed_samples, self.micro_batch_size, self.data_parallel_size
            )
            first = self.consumed_samples // group
            last = first + count  # micro-steps [first, last) of the endless stream
            epochs = range(first // rows_per_epoch, (last - 1) // rows_per_epoch + 1)
            parts = []
            for epoch in epochs:  # one trip per epoch the step reads
                base = epoch * rows_per_epoch
                parts.append(rows(epoch)[max(first - base, 0) : last - base])
            self.epoch = epochs[0]
            self.consumed_samples += count * group
            yield np.concatenate(parts).tolist()

    def _config(self) -> dict[str, Any]:
        config: dict[str, Any] = {
            "total_samples": self.total_samples,
            "global_batch_size": self.micro_batch_times_data_parallel_size,
            "data_sharding": self.data_sharding,
            "seed": self.seed,
        }
        if self.data_sharding:  # not elastic: the DP layout must not change
            config["micro_batch_size"] = self.micro_batch_size
            config["data_parallel_size"] = self.data_parallel_size
        return config

    def state_dict(self) -> dict[str, Any]:
        """``{"consumed_samples", "total_samples", "global_batch_size", "data_sharding",
        "seed", "micro_batch_size", "data_parallel_size"}`` (plain ints and bools); with
        a schedule also ``"batch_size_schedule"``, its text. ``global_batch_size`` is
        ``G = micro_batch_size x data_parallel_size`` (Megatron's name in this sampler)."""
        state = {
            "consumed_samples": self.consumed_samples,
            "total_samples": self.total_samples,
            "global_batch_size": self.micro_batch_times_data_parallel_size,
            "data_sharding": self.data_sharding,
            "seed": self.seed,
            "micro_batch_size": self.micro_batch_size,
            "data_parallel_size": self.data_parallel_size,
        }
        return _with_schedule(state, self.batch_size_schedule)

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue from ``state["consumed_samples"]`` on the next ``iter()``.

        Checked against this sampler: ``total_samples``, ``global_batch_size``,
        ``data_sharding`` and ``seed`` always; with ``data_sharding=True`` also
        ``micro_batch_size`` and ``data_parallel_size`` (that layout is not elastic).
        With a schedule the state must be at a step boundary and carry a schedule with
        the same steps before it.
        """
        consumed = _check_state(state, self._config(), "RandomSampler")
        consumed = self._check_consumed(consumed)
        _state_schedule(state, self.batch_size_schedule, consumed)
        _check_step_start(self, consumed)
        self.consumed_samples = consumed
        self.initial_consumed_samples = self.consumed_samples
        self.epoch = self.consumed_samples // self.active_total_samples

    def __repr__(self) -> str:
        return (
            f"RandomSampler(total_samples={self.total_samples}, "
            f"consumed_samples={self.consumed_samples}, "
            f"micro_batch_size={self.micro_batch_size}, "
            f"data_parallel_rank={self.data_parallel_rank}, "
            f"data_parallel_size={self.data_parallel_size}, "
            f"data_sharding={self.data_sharding}, seed={self.seed}"
            f"{_schedule_repr(self.batch_size_schedule)})"
        )
