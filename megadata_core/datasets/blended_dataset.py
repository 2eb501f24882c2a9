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
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping

import numpy as np

from megadata_core.cache import npy_files
from megadata_core.cache.descriptions import blend_description
from megadata_core.cache.entries import load_or_build
from megadata_core.checks import first_outside, out_of_range, unsigned
from megadata_core.datasets import origins
from megadata_core.datasets.config import SPLIT_NAMES
from megadata_core.datasets.lazy_members import LazyMembers
from megadata_core.datasets.member_reads import member_lengths, read_members
from megadata_core.datasets.positions import sample_positions
from megadata_core.datasets.source_ids import BLEND_SKIPS, with_member_ids
from megadata_core.errors import DataError, OversampledError
from megadata_core.handover.buffers import BufferPool
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
            where = origins.origin(self._arrays, "dataset_index", self._entry)
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
                origins.origin(self._arrays, "dataset_sample_index", self._entry),
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
