"""GPT datasets as members of a build: their cache maps held, and many made cheaply.

Many GPT datasets that share one's config, split and token dtype, made cheaply.

A blend of 10,000 corpora has 30,000 members (one per prefix and split) whose checks
depend mostly on what they share: the config, the split, the corpus dtype, the names of
the index arrays. :class:`GPTSiblings` (a base of :class:`GPTDataset`) makes them from a
first, fully checked dataset: :meth:`~GPTSiblings.siblings` all at once (their spans
range-checked in one pass), :meth:`~GPTSiblings.lazy_siblings` each at its first read
(a warm start reads few of them before training starts), from arrays packed in one cache
entry (:class:`megadata_core.cache.npy_files.PackedArrays`).

A GPT dataset's index arrays as memory maps of cache files: counted, released, pickled.

Index arrays memory-mapped from the cache count against the corpus's
:class:`~megadata_core.format.reader.OpenFiles` (a blend's members share one,
``config.max_open_files``): when released, the next access maps them again, and a cache
file that changed meanwhile is a DataError naming it. Pickled (to a worker), the maps
travel as file names and the identities they had when checked.
:class:`MappedIndices` is a base of :class:`~megadata_core.datasets.gpt_dataset.GPTDataset`
(its attributes are that class's).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from megadata_core.cache import npy_files
from megadata_core.cache.keys import document_ids
from megadata_core.datasets.blended_dataset import LazyMembers
from megadata_core.datasets.config import GPTDataConfig
from megadata_core.errors import DataError
from megadata_core.indices.gpt import GPT_ARRAYS


def _split_name(split: Any) -> str:
    """A split's name (Megatron's ``Split`` enum too)."""
    return getattr(split, "name", split)


class GPTSiblings:
    """The sibling-making half of :class:`~megadata_core.datasets.gpt_dataset.GPTDataset`
    (its attributes are that class's)."""

    # GPTDataset's attributes and method that this half uses (declared, not set here):
    indexed: Any
    config: GPTDataConfig
    split: str
    token_dtype: np.dtype
    _arrays: dict[str, np.ndarray]
    _entry: str | None
    _set_arrays: Callable[[dict[str, np.ndarray]], None]

    def _batched(self) -> bool:
        """Whether siblings share this one's checks: Megatron's three concat arrays."""
        config = self.config
        return (config.packing_mode.batched(config.shuffle_mode)
                and sorted(self._arrays) == sorted(GPT_ARRAYS))

    def _sibling(
        self,
        indexed,
        indices: range,
        num_samples: int | None,
        arrays: Mapping[str, np.ndarray],
        split: str,
    ) -> GPTSiblings:
        """A dataset of ``split`` with this one's config and token dtype over ``indexed``
        (a corpus of the same dtype), from precomputed ``arrays``: the checks that depend
        only on what the two share are not repeated (the builder makes 1,000s of them).
        """
        if indexed.dtype != self.indexed.dtype or arrays.keys() != self._arrays.keys():
            make: Callable[..., GPTSiblings] = type(self)  # GPTDataset's __init__
            return make(
                indexed, indices, num_samples, self.config, split,
                token_dtype=self.token_dtype, arrays=arrays,
            )
        other = object.__new__(type(self))
        state = other.__dict__
        state.update(self.__dict__)
        state["split"] = split
        state["indexed"] = indexed
        state["indices"], state["_ids_description"] = document_ids(indexed, indices)
        state["num_samples"] = None if num_samples is None else int(num_samples)
        state["_pool"] = None
        state["_constants"] = {}
        state.pop("_released", None)
        other._set_arrays(dict(arrays))
        return other

    def siblings(
        self,
        corpora: list,
        spans: list[range],
        num_samples: list[int | None],
        arrays: list[dict[str, np.ndarray]],
        origin: str | None = None,
        splits: list[str] | None = None,
    ) -> list:
        """Datasets with this one's config and token dtype over ``corpora`` (of the same
        dtype), documents ``spans``, ``num_samples``, precomputed index ``arrays`` (named
        as this one's) and ``splits`` (default: this one's): the checks that depend only
        on what they share are not repeated. Megatron-shuffled concat arrays are made
        together: the spans are range-checked in one pass and each dataset is one dict
        of its own fields over this one's (a warm start of 10,000 prefixes makes 30,000).
        ``origin`` names where the arrays came from in read-time errors (e.g. the build
        bundle)."""
        if splits is None:
            splits = [self.split] * len(corpora)
        splits = [_split_name(split) for split in splits]
        made = self._siblings(corpora, spans, num_samples, arrays, splits)
        if origin is not None:
            for dataset in made:
                dataset._entry = origin
        return made

    def _siblings(
        self,
        corpora: list,
        spans: list[range],
        num_samples: list[int | None],
        arrays: list[dict[str, np.ndarray]],
        splits: list[str],
    ) -> list:
        items = list(zip(corpora, spans, num_samples, arrays, splits))
        if not self._batched():
            return [self._sibling(*item) for item in items]
        counts = np.array([len(corpus) for corpus in corpora], dtype=np.int64)
        lows = np.array([span.start for span in spans], dtype=np.int64)
        highs = np.array([span.stop for span in spans], dtype=np.int64)
        steps = np.array([span.step for span in spans], dtype=np.int64)
        bad = (lows < 0) | (highs > counts) | (steps != 1) | (highs <= lows)
        if bad.any():  # the one-by-one path says what is wrong
            return [self._sibling(*item) for item in items]
        dtype = self.indexed.dtype
        result = []
        for indexed, span, wanted, given, split in items:
            if indexed.dtype != dtype or given.keys() != self._arrays.keys():
                result.append(self._sibling(indexed, span, wanted, given, split))
                continue
            total = len(given["sample_index"]) - 1
            if len(given["shuffle_index"]) != total:
                raise DataError(
                    f"shuffle_index: {len(given['shuffle_index'])} entries for {total} samples"
                )
            result.append(self._checked_sibling(indexed, span, wanted, given, split))
        return result

    def _checked_sibling(
        self,
        indexed,
        span: range,
        wanted: int | None,
        given: Mapping[str, np.ndarray],
        split: str | None = None,
    ) -> GPTSiblings:
        """One member of :meth:`_siblings` whose checks were done (the span inside the
        corpus, the corpus dtype this one's, Megatron concat arrays of these names with
        ``len(shuffle_index) == len(sample_index) - 1``): one dict of its own fields."""
        other = object.__new__(type(self))
        state = other.__dict__
        state.update(self.__dict__)
        state.pop("_released", None)
        state.pop("_mapped_files", None)  # given arrays: no cache files of its own
        samples = np.asarray(given["sample_index"])
        state.update(
            split=self.split if split is None else split,
            indexed=indexed, indices=span, num_samples=None if wanted is None else int(wanted),
            _ids_description={"count": len(span), "range": [span.start, span.stop]},
            _pool=None, _constants={}, _arrays=dict(given), sample_index=samples,
            document_index=np.asarray(given["document_index"]),
            shuffle_index=np.asarray(given["shuffle_index"]), _total=len(samples) - 1,
        )
        return other

    def lazy_siblings(
        self,
        corpora,
        corpus_numbers: np.ndarray,
        firsts: np.ndarray,
        ends: np.ndarray,
        wanted: Sequence[int | None],
        arrays,
        rows: np.ndarray,
        origin: str | None = None,
    ) -> LazyMembers | None:
        """This dataset and its siblings as a :class:`LazyMembers` whose member j is made
        at its first read: corpus ``corpus_numbers[j]`` of ``corpora`` (which has
        ``dtype_codes`` and ``sequences``, int64 [P], and ``at(number)``), documents
        ``[firsts[j], ends[j])``, ``wanted[j]`` samples and the three concat arrays at
        ``arrays[rows[j] : rows[j] + 3]`` (``arrays`` has ``rows``, the first dimension of
        each, as :class:`~megadata_core.cache.npy_files.PackedArrays`). Member 0 is this
        dataset (made from ``rows[0]``). Every member is checked here at once; None when
        one does not pass (the caller then makes them one by one, which names what is
        wrong)."""
        corpus_numbers = np.asarray(corpus_numbers, dtype=np.int64)
        rows = np.asarray(rows, dtype=np.int64)
        firsts, ends = np.asarray(firsts, dtype=np.int64), np.asarray(ends, dtype=np.int64)
        codes, counts = corpora.dtype_codes[corpus_numbers], corpora.sequences[corpus_numbers]
        own_code = corpora.dtype_codes[corpus_numbers[0]]
        lengths = arrays.rows[rows + 1] - 1  # sample_index rows - 1
        shuffles = arrays.rows[rows + 2]
        if (
            not self._batched()
            or (codes != own_code).any()
            or (firsts < 0).any()
            or (ends > counts).any()
            or (ends <= firsts).any()
            or (shuffles != lengths).any()
            or (lengths < 0).any()
        ):
            return None
        if origin is not None:
            self._entry = origin
        counts_wanted = np.array(
            [-1 if value is None else value for value in wanted], dtype=np.int64
        )
        make = _SiblingMaker(
            self, corpora, corpus_numbers, firsts, ends, counts_wanted, arrays, rows
        )
        return LazyMembers(make, lengths, self.split)


class _SiblingMaker:
    """Makes member j of :meth:`GPTSiblings.lazy_siblings`: ``template``'s sibling over
    corpus ``corpus_numbers[j]`` of ``corpora`` (``corpora.at(number)``), documents
    ``[firsts[j], ends[j])``, ``wanted[j]`` samples (-1: None) and the arrays at
    ``arrays[rows[j] : rows[j] + 3]`` (named as :data:`~megadata_core.indices.gpt.GPT_ARRAYS`).
    Picklable: a worker gets the corpora unopened and the packed blob as its file name."""

    def __init__(
        self,
        template,
        corpora,
        corpus_numbers: np.ndarray,
        firsts: np.ndarray,
        ends: np.ndarray,
        wanted: np.ndarray,
        arrays,
        rows: np.ndarray,
    ) -> None:
        self.template = template
        self.corpora = corpora
        self.corpus_numbers = corpus_numbers
        self.firsts, self.ends, self.wanted = firsts, ends, wanted
        self.arrays = arrays
        self.rows = rows

    def __call__(self, number: int):
        if number == 0:
            return self.template
        row = int(self.rows[number])
        given = dict(zip(GPT_ARRAYS, self.arrays[row : row + len(GPT_ARRAYS)]))
        wanted = int(self.wanted[number])
        return self.template._checked_sibling(
            self.corpora.at(int(self.corpus_numbers[number])),
            range(int(self.firsts[number]), int(self.ends[number])),
            None if wanted < 0 else wanted,
            given,
        )


#: What holds the index arrays (and with them the cache files' memory maps): dropped by
#: :meth:`MappedIndices.release_open_files`, made again at the next access.
_MAPPED = ("_arrays", "sample_index", "document_index", "shuffle_index", "_packed")
_REOPEN = threading.Lock()  # one dataset's cache files re-mapped at a time


class MappedIndices:
    """The memory-map half of :class:`~megadata_core.datasets.gpt_dataset.GPTDataset`."""

    def _set_arrays(self, arrays: dict[str, np.ndarray]) -> None:
        self._set_views(arrays)
        self._hold_maps(arrays)

    def _hold_maps(self, arrays: dict[str, np.ndarray]) -> None:
        """Count the cache files ``arrays`` maps in the corpus's OpenFiles, keeping how to
        map them again (each file's identity now, when it was just checked)."""
        state = self.__dict__
        state.pop("_released", None)
        state.pop("_mapped_files", None)
        files = sum(npy_files.is_file_map(array) for array in arrays.values())
        open_files = getattr(self.indexed, "_open_files", None)
        if files and open_files is not None:
            state["_mapped_files"] = {
                name: npy_files.pickled_map(array) for name, array in arrays.items()
            }
            open_files.opened(self, files)

    def release_open_files(self) -> None:
        """Drop the index arrays and with them the cache files' maps (the corpus's
        OpenFiles asks, least recently used first); a batch in flight keeps the arrays
        it holds. The next access maps the files again (:meth:`_reopen_maps`)."""
        state = self.__dict__
        with _REOPEN:
            if "_mapped_files" in state and "_released" not in state:
                state["_released"] = state["_mapped_files"]  # first: readers re-map
                for name in _MAPPED:
                    state.pop(name, None)
        open_files = getattr(self.indexed, "_open_files", None)
        if open_files is not None:
            open_files.closed(self)  # counted no more (a no-op when it asked)

    def __getattr__(self, name: str):
        # Only called for attributes not set: the index arrays of released cache maps.
        state = self.__dict__
        if name in _MAPPED and "_released" in state:
            return self._reopen_maps(name)
        raise AttributeError(name)

    def _reopen_maps(self, name: str):
        """Map the released cache files again, each only if it is still the file that
        was checked (:func:`npy_files.reopened_map`: DataError naming it otherwise),
        and return the attribute ``name`` (taken under the lock: another thread may
        release the maps again at once)."""
        state = self.__dict__
        with _REOPEN:
            released = state.get("_released")
            if released is None:
                return state[name]  # another thread re-mapped them
            arrays = {key: npy_files.reopened_map(value) for key, value in released.items()}
            self._set_views(arrays)
            del state["_released"]
            value = state[name]
        open_files = getattr(self.indexed, "_open_files", None)
        if open_files is not None:
            open_files.opened(self, sum(map(npy_files.is_file_map, arrays.values())))
        return value

    # -- pickling (workers): memory-mapped indices travel as file names -------------

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_pool"] = None
        state["_constants"] = {}
        # the identities taken when the files were checked; nothing re-mapped to pickle
        packed = state.pop("_released", None) or state.pop("_mapped_files", None)
        state.pop("_mapped_files", None)
        if packed is None:
            packed = {
                name: npy_files.pickled_map(array) for name, array in self._arrays.items()
            }
        state["_arrays"] = packed
        for name in ("document_index", "sample_index", "shuffle_index", "_packed"):
            state.pop(name, None)
        if "range" in self._ids_description and isinstance(self.indices, np.ndarray):
            # Megatron's splits: no need to ship the ids (a range pickles as itself)
            state["indices"] = ("range", self.indices.dtype.str, *self._ids_description["range"])
        return state

    def __setstate__(self, state: dict) -> None:
        arrays = {
            name: npy_files.reopened_map(value) for name, value in state.pop("_arrays").items()
        }
        if isinstance(state["indices"], tuple):
            _, dtype, low, high = state["indices"]
            state["indices"] = np.arange(low, high, dtype=dtype)
        state.pop("_buffers", None)  # pickled by an older version
        state.pop("_flat", None)
        state.setdefault("_pool", None)
        state.setdefault("_entry", None)
        self.__dict__.update(state)
        self._set_arrays(arrays)
