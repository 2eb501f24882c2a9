"""A GPT dataset's index arrays as memory maps of cache files: counted, released, pickled.

Index arrays memory-mapped from the cache count against the corpus's
:class:`~megadata_core.format.open_files.OpenFiles` (a blend's members share one,
``config.max_open_files``): when released, the next access maps them again, and a cache
file that changed meanwhile is a DataError naming it. Pickled (to a worker), the maps
travel as file names and the identities they had when checked.
:class:`MappedIndices` is a base of :class:`~megadata_core.datasets.gpt_dataset.GPTDataset`
(its attributes are that class's).
"""

from __future__ import annotations

import threading

import numpy as np

from megadata_core.cache import npy_files

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
