"""``ScheduledBlendedDataset``: a blend whose weights change at given samples, each member
read on one cursor across all stages (no sample twice, none skipped).

The index arrays come from :func:`~megadata_core.indices.schedule.schedule_blending_indices`
(one static blend order per stage, every member's count continued), cached like a
blend's under ``config.path_to_cache``, keyed by the stages, the order and the size
alone; a load checks every member's count against its length and every read its range,
as :class:`BlendedDataset` does (whose reads, pickling and checks this class shares).

Resume across an edit. A loader's state made on one schedule may be restored onto an
edited one when both give the same samples before the state's position:
:meth:`resume_record` is what a state carries (each stage's start and a digest of its
members and weights), :meth:`continues` tells whether this schedule continues it.

``EpochChain``: one dataset's passes, read end to end on one cursor.

A blend schedule reads each member on a cursor that only moves forward, across every
stage and every edit; a member read past its samples goes on with its next epoch. A
static blend builds one GPTDataset of E epochs (Megatron shuffles them together, so
asking for more samples reorders the ones before); the chain holds one GPTDataset per
epoch instead, epoch e drawn from its own seed
(:func:`~megadata_core.indices.schedule.epoch_seed`), so that reading further appends
epochs and never changes one already read. Within an epoch no sample repeats, and its
samples hold every token of the member's documents once (as a one-epoch GPTDataset).

Sample k of the chain is sample ``k - offsets[e]`` of epoch e, the e with
``offsets[e] <= k < offsets[e + 1]``.

A short fingerprint of a dataset's identity, for resume states to carry.

A loader's resume state (consumed samples) means something only for the data and config
it was made for; restored onto another dataset of the same length it would continue
silently with other samples. The Grain and torch adapters put :func:`fingerprint` into
their states and refuse a state whose fingerprint differs.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from megadata_core.cache.entries import load_or_build
from megadata_core.cache.keys import blend_description, canonical_json, schedule_description
from megadata_core.datasets.blended_dataset import (
    BLEND_ARRAYS,
    DATASET_ID_DTYPE,
    BlendedDataset,
    member_lengths,
    read_members,
    split_of,
)
from megadata_core.datasets.masks import BLEND_SKIPS, with_member_ids
from megadata_core.datasets.reading import sample_position, sample_positions
from megadata_core.errors import DataError
from megadata_core.handover.pack import BufferPool
from megadata_core.indices.blending import blend_counts, megatron_normalize
from megadata_core.indices.schedule import (
    check_schedule,
    same_before,
    schedule_blending_indices,
    stage_lengths,
)
from megadata_core.modes import BlendOrder, blend_order_of

_RECORD_KIND = "megadata.BlendSchedule"


class _InMemory:
    """A config of an order and no cache directory."""

    def __init__(self, blend_order: BlendOrder) -> None:
        self.blend_order_mode, self.path_to_cache = blend_order, None


def _normalized_stages(weights: np.ndarray) -> np.ndarray:
    """float64 [K, n]: every stage's weights divided by their sum (Megatron's
    ``normalize``, row by row)."""
    return np.stack([megatron_normalize(row) for row in np.asarray(weights)])


def schedule_index(
    config, split: str, starts: object, weights: object, size: int
) -> dict[str, np.ndarray]:
    """A schedule's index arrays (``BLEND_ARRAYS``), built or loaded from
    ``config.path_to_cache`` (None: in memory), keyed by the stages, order and size."""
    starts, rows = check_schedule(starts, weights)
    rows = _normalized_stages(rows)
    order = blend_order_of(config)

    def build() -> dict[str, np.ndarray]:
        index, sample = schedule_blending_indices(starts, rows, size, order)
        counts = blend_counts(index, rows.shape[1])
        return {"dataset_index": index, "dataset_sample_index": sample, "dataset_counts": counts}

    return load_or_build(
        getattr(config, "path_to_cache", None),
        schedule_description(split, order.name, starts, rows, size),
        split, build, names=BLEND_ARRAYS,
    )


class _PassTable:
    """Every pass of every member chain in one list: member j's sample k is pass
    ``locate(j, k)`` of :attr:`passes` (one searchsorted over int64 [P] bounds)."""

    def __init__(self, chains: Sequence) -> None:
        lengths = np.array([len(chain) for chain in chains], dtype=np.int64)
        self.base = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)
        self.passes = [one for chain in chains for one in chain.passes]
        self.bounds = np.concatenate(
            [base + chain.offsets[:-1] for base, chain in zip(self.base.tolist(), chains)]
        ).astype(np.int64)

    @classmethod
    def of(cls, datasets: Sequence) -> _PassTable | None:
        """The table of members that are all chains of passes, else None."""
        if all(isinstance(member, EpochChain) for member in datasets):
            return cls(datasets)
        return None

    def locate(self, ids: np.ndarray, samples: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(pass int64 [B], sample in that pass int64 [B])`` of member samples (in
        range)."""
        position = self.base[ids] + samples
        found = np.searchsorted(self.bounds, position, side="right") - 1
        return found, position - self.bounds[found]


class ScheduledBlendedDataset(BlendedDataset):
    """Samples of several datasets in a blend that changes at the stages' starts.

    Args:
        datasets: the n members (e.g. :class:`EpochChain`\\ s, long enough for what the
            schedule reads of each), in the order of the weights' columns.
        starts: int [K], the sample each stage begins at (0 first, increasing).
        weights: float [K, n], each stage's weights (finite, >= 0, not all 0; 0: the
            member is not read in that stage).
        size: samples in the blend (>= 0; stages from ``size`` on hold none).
        config: a :class:`GPTDataConfig` (``blend_order``, ``path_to_cache``).
        arrays: the index arrays, precomputed (the counts are still checked).
        use_cache: False builds the indices in memory even with ``path_to_cache`` set.

    Attributes:
        starts: int64 [K]; stage_weights: float64 [K, n], each row normalized.
        weights: float [n], each member's share of the whole blend (the stages' weights
            averaged over their lengths), as a static blend's ``weights``.

    Raises:
        DataError: bad stages or size; an :class:`OversampledError` when a member is
            shorter than what the schedule reads of it.
    """

    size: int  # always given (a plain blend's may be None)

    def __init__(
        self,
        datasets: Sequence,
        starts: object,
        weights: object,
        size: int,
        config,
        *,
        arrays: Mapping[str, np.ndarray] | None = None,
        use_cache: bool = True,
        origin: str | None = None,
    ) -> None:
        datasets = list(datasets)
        if not datasets:
            raise DataError("datasets: no datasets to blend")
        starts, rows = check_schedule(starts, weights)
        if rows.shape[1] != len(datasets):
            raise DataError(f"weights: {rows.shape[1]} columns for {len(datasets)} datasets")
        self._order = blend_order_of(config)
        if isinstance(size, (bool, np.bool_)) or not isinstance(size, (int, np.integer)):
            raise DataError(f"size: {size!r} is not an integer")
        if size < 0:
            raise DataError(f"size: {size} must be >= 0")
        self.datasets, self.config = datasets, config
        self._buffers = BufferPool()
        self._entry = origin
        self.blend_order = self._order.name
        self.split = split_of(datasets)
        self.size = int(size)
        self.starts = starts
        self.stage_weights = _normalized_stages(rows)
        lengths = stage_lengths(starts, self.size).astype(np.float64)
        overall = lengths @ self.stage_weights if self.size else self.stage_weights[0]
        self.weights = (overall / overall.sum()).tolist()
        self._identities: list[str] | None = None
        self._passes = _PassTable.of(datasets)
        self._start_indices(arrays, use_cache)

    # -- indices ------------------------------------------------------------------------

    def index_description(self) -> dict:
        """Every input of the index arrays (the cache key is its sha256)."""
        return schedule_description(
            self.split, self.blend_order, self.starts, self.stage_weights, self.size
        )

    def description(self) -> dict | None:
        """The blend's identity (its members' own descriptions, the stages, the order and
        the size: what a loader's fingerprint hashes); None when a member cannot
        describe itself."""
        members = self._member_descriptions()
        if members is None:
            return None
        described = blend_description(self.split, self.blend_order, [], self.size, members)
        described["schedule"] = self.index_description()
        return described

    def _member_descriptions(self) -> list[dict] | None:
        members = []
        for dataset in self.datasets:
            describe = getattr(dataset, "description", None)
            described = None if describe is None else describe()
            if described is None:
                return None
            members.append(described)
        return members

    def _build(self) -> dict[str, np.ndarray]:
        return schedule_index(
            _InMemory(self._order), self.split, self.starts, self.stage_weights, self.size
        )

    def _load_indices(self) -> None:
        self._set_arrays(
            schedule_index(self.config, self.split, self.starts, self.stage_weights, self.size)
        )

    # -- samples --------------------------------------------------------------------------

    def __getitems__(self, indices) -> dict[str, np.ndarray]:
        """As :meth:`BlendedDataset.__getitems__`; members that are :class:`EpochChain`\\ s
        are read one level down, one read per pass the batch touches (as a static
        blend's reads, one per member)."""
        if self._passes is None:
            return super().__getitems__(indices)
        ids, samples = self._members(self._positions(indices))
        passes, local = self._passes.locate(ids, samples)
        parts: list = []  # with source_ids: the passes' pieces, for the batch's keys
        batch = read_members(self._passes.passes, passes, local, self._buffers, BLEND_SKIPS,
                             parts)
        return {"dataset_id": ids.astype(DATASET_ID_DTYPE),
                **with_member_ids(batch, ids, parts)}

    # -- resume across edits --------------------------------------------------------------

    def _member_identities(self) -> list[str]:
        """sha256 (hex) of every member's description (computed once)."""
        if self._identities is None:
            members = self._member_descriptions()
            if members is None:
                raise DataError(
                    "datasets: a member has no description(); a schedule over it cannot "
                    "be checked against a resume state"
                )
            self._identities = [
                hashlib.sha256(canonical_json({"value": m}).encode()).hexdigest()
                for m in members
            ]
        return self._identities

    def resume_record(self) -> dict:
        """What a loader state carries of the schedule (JSON): ``starts`` and, per stage,
        the sha256 of its members (id, identity) with weight > 0 and their weights."""
        identities = self._member_identities()
        stages = []
        for row in self.stage_weights:
            live = np.flatnonzero(row > 0).tolist()
            stage = {
                "kind": _RECORD_KIND,
                "split": self.split,
                "order": self.blend_order,
                "members": [[j, identities[j]] for j in live],
                "weights": row[live].tobytes().hex(),
            }
            stages.append(hashlib.sha256(canonical_json(stage).encode()).hexdigest())
        return {"starts": self.starts.tolist(), "stages": stages}

    def continues(self, record: object, consumed: int) -> str | None:
        """None when this schedule's first ``consumed`` samples are those of the schedule
        ``record`` (a :meth:`resume_record`) describes; else why not."""
        if (
            not isinstance(record, Mapping)
            or not isinstance(record.get("starts"), list)
            or not isinstance(record.get("stages"), list)
            or len(record["starts"]) != len(record["stages"])
        ):
            return f"the state's blend_schedule {record!r} is not a schedule record"
        mine = self.resume_record()
        return same_before(
            record["starts"], record["stages"], mine["starts"], mine["stages"], consumed
        )

    def __repr__(self) -> str:
        members = ", ".join(repr(dataset) for dataset in self.datasets)
        return (
            f"ScheduledBlendedDataset(split={self.split!r}, size={len(self)}, "
            f"order={self.blend_order!r}, stages={self.starts.tolist()}, "
            f"datasets=[{members}])"
        )


class EpochChain:
    """The passes over one member, read in order.

    Args:
        passes: the member's passes (e.g. one-epoch :class:`GPTDataset`\\ s of one corpus
            and split, each with its own seed), in order; a :class:`LazyMembers` makes
            each at its first read.

    Attributes:
        offsets: int64 [P + 1], the chain's first sample of every pass (and its length).
        split: the passes' split.
    """

    def __init__(self, passes: Sequence) -> None:
        if not len(passes):
            raise DataError("passes: a chain needs at least one pass")
        self.passes = passes
        lengths = member_lengths(passes)
        self.offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        first = passes[0]
        self.split = getattr(first, "split", "train")
        self._buffers = BufferPool()

    @property
    def first(self):
        """Pass 0 (its config, corpus and identity are the member's)."""
        return self.passes[0]

    @property
    def indices(self):
        """The member's documents (every pass reads the same ones)."""
        return self.first.indices

    @property
    def epochs(self) -> int:
        """Epochs over the member's documents, all passes together."""
        return sum(int(getattr(one, "epochs", 1)) for one in self.passes)

    @property
    def indexed(self):
        """The member's corpus."""
        return self.first.indexed

    @property
    def config(self):
        return self.first.config

    def description(self) -> dict | None:
        """The member's identity: pass 0's description (the later passes follow from it
        and their number)."""
        describe = getattr(self.first, "description", None)
        return None if describe is None else describe()

    def __len__(self) -> int:
        return int(self.offsets[-1])

    def _locate(self, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        passes = np.searchsorted(self.offsets, positions, side="right") - 1
        return passes, positions - self.offsets[passes]

    def __getitem__(self, index: int) -> dict:
        position = sample_position(index, len(self), self.split)
        passes, samples = self._locate(np.array([position], dtype=np.int64))
        return self.passes[int(passes[0])][int(samples[0])]

    def __getitems__(self, indices) -> dict[str, np.ndarray]:
        """The samples at ``indices`` (B positions), stacked; one read per pass."""
        passes, samples = self._locate(sample_positions(indices, len(self), self.split))
        return read_members(self.passes, passes, samples, self._buffers)

    def sample_text(self, index: int):
        """The member's :meth:`GPTDataset.sample_text` of chain sample ``index``."""
        position = sample_position(index, len(self), self.split)
        passes, samples = self._locate(np.array([position], dtype=np.int64))
        return self.passes[int(passes[0])].sample_text(int(samples[0]))

    def __repr__(self) -> str:
        return (
            f"EpochChain(passes={len(self.passes)}, samples={len(self)}, "
            f"first={self.first!r})"
        )


def fingerprint(dataset: Any) -> str | None:
    """First 12 hex digits of the sha256 of the dataset's ``description()`` (every input
    of its index arrays: data identity, seed, sequence length, split, ...); None when the
    dataset has no description (or returns None)."""
    describe = getattr(dataset, "description", None)
    description = describe() if callable(describe) else None
    if description is None:
        return None
    text = json.dumps(description, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def resume_fields(dataset: Any) -> dict[str, Any]:
    """What a loader state carries of its data: ``fingerprint``, and for a blend schedule
    (a dataset with ``resume_record``) its stages as ``blend_schedule``, so that a
    restore onto an edited schedule can be checked (:func:`continues_schedule`)."""
    fields: dict[str, Any] = {"fingerprint": fingerprint(dataset)}
    record = getattr(dataset, "resume_record", None)
    if callable(record):
        fields["blend_schedule"] = record()
    return fields


def continues_schedule(state: Any, dataset: Any, consumed: int, *, sequential: bool) -> bool:
    """True when ``state`` (whose fingerprint differs from the dataset's) was made on a
    blend schedule that this dataset's schedule edits after ``consumed`` samples: the
    samples before are the same, so the reader may go on. False when either side has no
    schedule (the caller refuses the state as other data).

    Raises:
        DataError: both are schedules and they differ before ``consumed``, or the reader
            is not ``sequential`` (a shuffled pass over the blend reads samples from
            everywhere: no edit leaves what it read unchanged).
    """
    continues = getattr(dataset, "continues", None)
    if not callable(continues) or not isinstance(state, Mapping) or "blend_schedule" not in state:
        return False
    if not sequential:
        raise DataError(
            "blend_schedule: the state was made on another schedule, and this reader "
            "shuffles the blend (a shuffled pass reads from the whole blend, so an edit "
            "changes samples already read); resume an edited schedule with a sequential "
            "sampler (PretrainingSampler, Grain's consumed-samples iterator)"
        )
    why = continues(state["blend_schedule"], consumed)
    if why is not None:
        raise DataError(
            f"blend_schedule: the state's schedule and this one differ before the "
            f"{consumed} samples already read ({why}); an edit may change only the stages "
            f"from sample {consumed} on"
        )
    return True
