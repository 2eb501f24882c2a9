"""``BlendedDataset``: several datasets read in a blended order (megatron-core's
``BlendedDataset``), a whole batch at once.

``ds[i]`` is ``{"dataset_id": j, **datasets[j][k]}`` with ``(j, k) =
(dataset_index[i], dataset_sample_index[i])``, as in Megatron (``j`` an int32, whatever the
number of members: :data:`DATASET_ID_DTYPE`). The two index arrays are
built by :mod:`megadata_core.indices.blending` in the order ``config.blend_order`` names:
``"megatron"`` (Megatron's values) or ``"balanced"`` (earliest deadline first: every dataset
within one sample of its share in every prefix). They go through the on-disk cache
(:mod:`megadata_core.cache.entries`) when ``config.path_to_cache`` is set, keyed by the
members' own descriptions, the weights, the size and the order.

Differences from Megatron: a weight of 0 is allowed (the dataset is never read; in the
megatron order the blend is Megatron's over the other datasets); errors are
:class:`~megadata_core.DataError` (Megatron asserts, or raises IndexError when a dataset
is asked for more samples than it has).

A blend's member datasets made at first access, their lengths known up front.

A warm start of a blend of 10,000 corpora would otherwise make 30,000 GPTDatasets (one
per prefix and split, and garbage-collector passes over them) before the first batch,
most of them read much later. :class:`LazyMembers` is the sequence a :class:`BlendedDataset`
holds instead: ``lengths`` (int64 [M]) answers every sizing question, ``members[j]``
makes member j once (``make(j)``, checked when the sequence was made, see the builder)
and keeps it.

Reading a batch that spans several member datasets: one read per member, scattered
back into batch order. Shared by the datasets made of members (a blend, an epoch chain).
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from megadata_core.cache import npy_files
from megadata_core.cache.entries import load_or_build
from megadata_core.cache.keys import blend_description
from megadata_core.checks import first_outside, out_of_range, unsigned
from megadata_core.datasets import reading
from megadata_core.datasets.config import SPLIT_NAMES
from megadata_core.datasets.masks import BLEND_SKIPS, with_member_ids
from megadata_core.datasets.reading import sample_positions
from megadata_core.errors import DataError, OversampledError
from megadata_core.handover.pack import BufferPool
from megadata_core.indices.blending import blend_counts, check_weights, megatron_normalize
from megadata_core.modes import blend_order_of

BLEND_ARRAYS = ("dataset_index", "dataset_sample_index", "dataset_counts")

#: The dtype of the ``dataset_id`` of every sample and batch, whatever the number of
#: members: int32 (``dataset_index`` itself is int16 up to 32,767 members, as Megatron's
#: cache files hold it, and int32 past that; int16 cannot name 40,000 datasets). The
#: Grain, torch and JAX adapters hand it on as int32 too.
DATASET_ID_DTYPE = np.dtype(np.int32)


def split_of(datasets) -> str:
    """The members' common split name (``.split``, a name or Megatron's ``Split``;
    "train" for members without one; a :class:`LazyMembers` says it for all)."""
    names = set()
    for dataset in [datasets] if isinstance(datasets, LazyMembers) else datasets:
        split = getattr(dataset, "split", "train")
        names.add(getattr(split, "name", split))
    if len(names) != 1:
        raise DataError(f"datasets: members come from different splits {sorted(map(str, names))}")
    name = names.pop()
    if name not in SPLIT_NAMES:
        raise DataError(f"datasets: split {name!r} is not one of {SPLIT_NAMES}")
    return name


def _integral_sizes(weights: list) -> list[int]:
    """Exhaustive blends draw ``weights[j]`` samples of dataset j: whole numbers."""
    values = check_weights(weights)
    if np.any(values != np.floor(values)):
        raise DataError(
            f"weights: {weights!r} must be whole numbers (samples per dataset) when size is None"
        )
    return [int(value) for value in values]


class BlendedDataset:
    """Samples of several datasets in a blended order.

    Args:
        datasets: the member datasets (``len``, ``[k]``, optionally ``__getitems__``),
            e.g. :class:`GPTDataset`s of one split, or a :class:`LazyMembers` (made at
            first read, sized by its ``lengths``).
        weights: one weight per dataset, finite and >= 0, not all 0; None: the datasets'
            lengths. With ``size`` None, whole numbers: dataset j gives exactly
            ``weights[j]`` samples (Megatron's exhaustive blend).
        size: samples in the blend, or None (exhaustive: ``sum(weights)``).
        config: a :class:`GPTDataConfig` (``blend_order``, ``path_to_cache``).
        arrays: the index arrays, precomputed (``dataset_index``, ``dataset_sample_index``,
            ``dataset_counts``; e.g. from the builder's cache bundle, keyed by every
            input): used as given (the counts are still checked against the members).
        use_cache: False builds the indices in memory even with ``path_to_cache`` set
            (the builder caches them in its bundle instead).
        origin: where given ``arrays`` came from, named by read-time errors.

    Attributes:
        dataset_index: int16 [size] which dataset each sample reads (int32 past 32,767
            datasets).
        dataset_sample_index: int64 [size] which of that dataset's samples.
        weights: the normalized weights (float), or the per-dataset sample counts (int)
            of an exhaustive blend.

    Raises:
        DataError: bad weights or size, members of different splits, or a blend that
            asks a dataset for more samples than it has (an :class:`OversampledError`:
            raise ``mid_level_dataset_surplus``, as Megatron says).
    """

    def __init__(
        self,
        datasets,
        weights,
        size: int | None,
        config,
        *,
        arrays: Mapping[str, np.ndarray] | None = None,
        use_cache: bool = True,
        origin: str | None = None,
    ) -> None:
        if not isinstance(datasets, LazyMembers):
            datasets = list(datasets)
        if not len(datasets):
            raise DataError("datasets: no datasets to blend")
        self._order = blend_order_of(config)
        if weights is None:
            weights = member_lengths(datasets).tolist()
        try:
            weights = list(weights)
        except TypeError:
            raise DataError(f"weights: {weights!r} is not a sequence") from None
        if len(weights) != len(datasets):
            raise DataError(f"weights: {len(weights)} weights for {len(datasets)} datasets")
        self.datasets = datasets
        self.config = config
        self._buffers = BufferPool()
        self._entry = origin  # where given arrays that are not cache files came from
        self.blend_order = self._order.name
        self.split = split_of(datasets)
        if size is None:
            self.weights = _integral_sizes(weights)
        else:
            if isinstance(size, (bool, float, np.floating)) or not isinstance(
                size, (int, np.integer)
            ):
                raise DataError(f"size: {size!r} is not an integer")
            if size < 0:
                raise DataError(f"size: {size} must be >= 0")
            self.weights = megatron_normalize(weights).tolist()
        self.size = None if size is None else int(size)
        self._start_indices(arrays, use_cache)

    def _start_indices(self, arrays: Mapping[str, np.ndarray] | None, use_cache: bool) -> None:
        """The blend's arrays: ``arrays`` as given (the bundle's), else the cache's, else
        built here."""
        if arrays is not None:
            given = dict(arrays)
            if sorted(given) != sorted(BLEND_ARRAYS):
                raise DataError(f"arrays: got {sorted(given)}, expected {sorted(BLEND_ARRAYS)}")
            self._set_arrays(given)
        elif use_cache:
            self._load_indices()
        else:
            self._set_arrays(self._build())

    # -- indices ------------------------------------------------------------------------

    def description(self) -> dict | None:
        """Every input of the index arrays (the cache key is its sha256); None when a
        member cannot describe itself (then nothing is cached)."""
        members = []
        for dataset in self.datasets:
            describe = getattr(dataset, "description", None)
            if describe is None:
                return None
            members.append(describe())
        return blend_description(self.split, self.blend_order, self.weights, self.size, members)

    def _build(self) -> dict[str, np.ndarray]:
        weights = np.asarray(self.weights, dtype=np.float64)
        index, sample = self._order.blend(weights, self.size, self.weights)
        counts = blend_counts(index, len(self.datasets))
        return {"dataset_index": index, "dataset_sample_index": sample, "dataset_counts": counts}

    def _load_indices(self) -> None:
        directory = getattr(self.config, "path_to_cache", None)
        description = self.description() if directory is not None else None
        if directory is not None and description is None:
            warnings.warn(
                "path_to_cache: a blended dataset has no description(); its indices are "
                "built in memory, not cached",
                stacklevel=3,
            )
            directory = None
        arrays = load_or_build(
            directory, description or {}, self.split, self._build, names=BLEND_ARRAYS
        )
        self._set_arrays(arrays)

    def _set_arrays(self, arrays: dict[str, np.ndarray]) -> None:
        self._arrays = arrays  # memory maps stay here (pickled as file names)
        self.dataset_index = np.asarray(arrays["dataset_index"])
        self.dataset_sample_index = np.asarray(arrays["dataset_sample_index"])
        sizes = member_lengths(self.datasets)
        self._sizes = sizes.astype(np.uint64)
        counts = np.asarray(arrays["dataset_counts"]).astype(np.int64)
        if counts.shape != sizes.shape:
            raise DataError(
                f"dataset_counts: {counts.shape[0] if counts.ndim else 0} counts for "
                f"{len(sizes)} datasets"
            )
        over = np.flatnonzero(counts > sizes)
        if len(over):
            j = int(over[0])
            kind = (
                "GPTDataset" if isinstance(self.datasets, LazyMembers)
                else type(self.datasets[j]).__name__
            )
            raise OversampledError(
                f"weights: the {self.split} blend asks {int(counts[j])} samples of dataset "
                f"{j} ({kind}, {int(sizes[j])} samples); raise "
                "mid_level_dataset_surplus (e.g. two- or ten-fold, from "
                f"{getattr(self.config, 'mid_level_dataset_surplus', '?')}) or size "
                "the members larger"
            )

    @property
    def index_arrays(self) -> dict[str, np.ndarray]:
        """``dataset_index``, ``dataset_sample_index`` and ``dataset_counts`` as loaded or
        built (cache files stay memory maps)."""
        return dict(self._arrays)

    # -- samples ------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self.dataset_index)

    def _positions(self, indices: object) -> np.ndarray:
        return sample_positions(indices, len(self), self.split)

    def __getitem__(self, index: int) -> dict:
        """``{"dataset_id": j, **datasets[j][k]}`` (Megatron's keys and order)."""
        if isinstance(index, (bool, np.bool_)) or not isinstance(index, (int, np.integer)):
            raise TypeError(f"sample index must be an int, got {type(index).__name__}")
        ids, samples = self._members(self._positions([index]))
        dataset_id, sample_id = DATASET_ID_DTYPE.type(ids[0]), int(samples[0])
        sample = dict(self.datasets[int(dataset_id)][sample_id])
        if "dataset_ids" in sample:  # source_ids: the member's id, not its own 0
            sample["dataset_ids"] = np.where(sample["document_ids"] >= 0,
                                             np.int32(dataset_id), np.int32(-1))
        return {"dataset_id": dataset_id, **sample}

    def _members(self, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(dataset_index, dataset_sample_index)`` at ``positions``, range-checked:
        DataError naming the array and its source for a value out of range (unsigned
        views: a negative value fails as one too large does)."""
        ids = self.dataset_index[positions]
        samples = self.dataset_sample_index[positions]
        try:
            sizes = self._sizes[unsigned(ids)]
        except IndexError:
            count = len(self.datasets)
            where = reading.origin(self._arrays, "dataset_index", self._entry)
            value = first_outside(ids, count)
            if value is None:  # (not reached: only a value outside fails to index)
                raise DataError(f"dataset_index: a dataset is out of range [0, {count})") from None
            raise out_of_range("dataset_index", "dataset", value, count, where) from None
        if (unsigned(samples) >= sizes).any():
            signed = sizes.astype(np.int64)
            bad = int(np.argmax((samples < 0) | (samples >= signed)))
            raise out_of_range(
                "dataset_sample_index", f"sample of dataset {int(ids[bad])}",
                int(samples[bad]), int(signed[bad]),
                reading.origin(self._arrays, "dataset_sample_index", self._entry),
            )
        return ids, samples

    def __getitems__(self, indices) -> dict[str, np.ndarray]:
        """The samples at ``indices`` (B positions), stacked: ``dataset_id`` int32 [B] and
        every member key with a leading batch axis. One ``__getitems__`` call per member
        read (members without one are read sample by sample and stacked)."""
        ids, samples = self._members(self._positions(indices))
        parts: list = []  # with source_ids: the members' pieces, for the batch's keys
        batch = read_members(self.datasets, ids, samples, self._buffers, BLEND_SKIPS, parts)
        return {"dataset_id": ids.astype(DATASET_ID_DTYPE),
                **with_member_ids(batch, ids, parts)}

    # -- pickling (workers): memory-mapped indices travel as file names -------------

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_arrays"] = {
            name: npy_files.pickled_map(array) for name, array in self._arrays.items()
        }
        state.pop("dataset_index", None)
        state.pop("dataset_sample_index", None)
        return state

    def __setstate__(self, state: dict) -> None:
        arrays = {
            name: npy_files.reopened_map(value) for name, value in state.pop("_arrays").items()
        }
        state.setdefault("_entry", None)
        self.__dict__.update(state)
        self._arrays = arrays
        self.dataset_index = np.asarray(arrays["dataset_index"])
        self.dataset_sample_index = np.asarray(arrays["dataset_sample_index"])
        if "_sizes" not in state:  # pickled by an older version
            self._sizes = member_lengths(self.datasets).astype(np.uint64)

    def __repr__(self) -> str:
        weights = [round(w, 6) if isinstance(w, float) else w for w in self.weights]
        members = ", ".join(repr(dataset) for dataset in self.datasets)
        return (
            f"BlendedDataset(split={self.split!r}, size={len(self)}, "
            f"order={self.blend_order!r}, weights={weights}, datasets=[{members}])"
        )


class LazyMembers(Sequence):
    """``M`` datasets of one ``split``: ``lengths`` int64 [M] (``len`` of each), item j
    made by ``make(j)`` at its first access (thread-safe, once). ``make`` must be
    picklable: a pickled sequence carries it, not the datasets it made."""

    def __init__(self, make: Callable[[int], object], lengths: np.ndarray, split: str) -> None:
        self._make = make
        self.lengths = np.asarray(lengths, dtype=np.int64).reshape(-1)
        self.split = split
        self._made: dict[int, object] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self.lengths)

    def __getitem__(self, number):
        if isinstance(number, slice):
            return [self[n] for n in range(*number.indices(len(self)))]
        if isinstance(number, (bool, np.bool_)) or not isinstance(number, (int, np.integer)):
            raise TypeError(f"member index must be an int, got {type(number).__name__}")
        number = int(number)
        if number < 0:
            number += len(self)
        if not 0 <= number < len(self):
            raise IndexError(f"member {number} of {len(self)}")
        member = self._made.get(number)
        if member is None:
            with self._lock:
                member = self._made.get(number)
                if member is None:
                    member = self._made[number] = self._make(number)
        return member

    @property
    def made(self) -> int:
        """How many members were made so far."""
        return len(self._made)

    def __getstate__(self) -> dict:
        return {"make": self._make, "lengths": self.lengths, "split": self.split}

    def __setstate__(self, state: dict) -> None:
        type(self).__init__(self, state["make"], state["lengths"], state["split"])

    def __repr__(self) -> str:
        return f"LazyMembers(split={self.split!r}, members={len(self)}, made={self.made})"


def member_lengths(datasets) -> np.ndarray:
    """int64 [M]: ``len`` of every member (a :class:`LazyMembers` knows them unmade)."""
    if isinstance(datasets, LazyMembers):
        return datasets.lengths
    return np.array([len(dataset) for dataset in datasets], dtype=np.int64).reshape(-1)


def _read_member(dataset, samples: np.ndarray) -> dict:
    """``samples`` of one member, stacked: its ``__getitems__``, or sample by sample."""
    getitems = getattr(dataset, "__getitems__", None)
    if getitems is not None:
        return getitems(samples)
    rows = [dataset[int(k)] for k in samples]
    return {key: np.stack([np.asarray(row[key]) for row in rows]) for key in rows[0]}


def _sourced(dataset) -> bool:
    """Whether a member reads with ``source_ids`` and can hand its pieces over instead."""
    config = getattr(dataset, "config", None)
    return bool(getattr(config, "source_ids", False)) and hasattr(dataset, "read_with_pieces")


def read_members(
    datasets, ids: np.ndarray, samples: np.ndarray, buffers: BufferPool,
    skip: frozenset = frozenset(), pieces: list | None = None,
) -> dict[str, np.ndarray]:
    """The batch whose row b is sample ``samples[b]`` of member ``ids[b]`` (int [B] each,
    in range): every member key with a leading batch axis, one read per member (keys in
    ``skip`` are not gathered from several members: the caller makes them).

    ``pieces``: a list that, when every member read has ``source_ids`` on, receives
    ``(rows int [b], Pieces, width, S)`` per member read, and the members' own source
    keys are not made (the caller makes them for the whole batch at once,
    :func:`~megadata_core.datasets.masks.batch_sources`); left empty otherwise.

    Raises:
        DataError: members that return different keys.
    """
    order = np.argsort(ids, kind="stable")  # grouped by member, batch order inside
    counts = np.bincount(ids, minlength=len(datasets))
    ends = np.cumsum(counts).tolist()
    touched = np.flatnonzero(counts).tolist()
    handed = pieces is not None and all(_sourced(datasets[member]) for member in touched)
    parts = []
    for member in touched:
        where = order[ends[member] - counts[member] : ends[member]]
        dataset = datasets[member]
        if handed and pieces is not None:  # (handed: pieces is a list)
            batch, found = dataset.read_with_pieces(samples[where])
            config = dataset.config
            width = config.sequence_length + int(config.add_extra_token_to_sequence)
            pieces.append((where, found, width, config.sequence_length))
            parts.append((where, batch))
        else:
            parts.append((where, _read_member(dataset, samples[where])))
    if not parts:
        return {}
    keys = list(parts[0][1])
    for _, part in parts[1:]:
        if list(part) != keys:
            raise DataError(f"datasets: members return different keys ({keys} and {list(part)})")
    if len(parts) == 1:  # one member: its batch is already in order
        return dict(parts[0][1])
    batch = {}
    for key in keys:
        if key in skip:
            continue
        first = np.asarray(parts[0][1][key])
        dtype = np.result_type(*(np.asarray(part[key]).dtype for _, part in parts))
        out = buffers.empty((len(ids),) + first.shape[1:], dtype)
        for where, part in parts:
            out[where] = part[key]
        batch[key] = out
    return batch
