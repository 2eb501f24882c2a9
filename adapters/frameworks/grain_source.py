"""Grain skin: megadata datasets as Grain data sources and datasets.

Two ways in, both over any megadata dataset (``len``, ``ds[i]``, ``ds.__getitems__``):

* :class:`GrainSource` — a ``grain`` ``RandomAccessDataSource`` (one sample per index),
  for Grain's own pipelines::

      src = grain_source.GrainSource(train)
      ds = grain.MapDataset.source(src).shuffle(seed=0).batch(8)
      loader = grain.DataLoader(data_source=src, sampler=grain.samplers.IndexSampler(...),
                                worker_count=2, operations=[grain.transforms.Batch(8)])

  Grain compares ``repr(data_source)`` when it restores a ``DataLoader`` checkpoint; the
  repr is the dataset's own repr plus a short fingerprint of its ``description()`` (every
  field that changes the arrays), so a checkpoint does not restore onto other data.

* :func:`batched_dataset` — Megatron's ``MegatronPretrainingSampler`` layout with ONE core
  ``__getitems__`` per micro-batch (Grain itself reads sample by sample). Element ``t`` is
  this rank's ``t``-th micro-batch: global batch ``t`` is ``[c + t·G, c + (t+1)·G)``
  (``c`` = consumed samples, ``G = micro_batch_size · data_parallel_size``) and rank ``r``
  takes ``[r·mbs, (r+1)·mbs)`` of it. It is a Grain ``IterDataset`` whose iterator state
  is ``{"consumed_samples", "total_samples"}``: restoring it into a pipeline with another
  worker count or another DP layout (same ``G``) continues exactly::

      ds = grain_source.batched_dataset(train, micro_batch_size=4, data_parallel_rank=r,
                                        data_parallel_size=dp, worker_count=2)
      it = iter(ds)
      ...
      state = it.get_state()          # {"consumed_samples": ..., "total_samples": ...}

absl flags. Grain 0.2.18 reads absl flags when it starts worker processes, and raises
``UnparsedFlagAccessError`` outside an absl app (grain issue 1355). :class:`GrainSource`
and :func:`batched_dataset` call :func:`ensure_absl_flags_parsed`, which marks absl's
flags as parsed (keeping their defaults) when no app has parsed them; an app that parses
its flags later (``app.run``) still does so normally.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import grain
import numpy as np

from megadata_adapters.trainers.maxtext.keys import check_key_names, rename_keys, renames
from megadata_core.checks import check_int
from megadata_core.datasets.scheduled_blend import continues_schedule, fingerprint, resume_fields
from megadata_core.errors import DataError
from megadata_core.handover import orphans, pack
from megadata_core.handover import shm as segments
from megadata_core.handover.pack import BufferPool

__all__ = [
    "GrainSource",
    "MicroBatchDataset",
    "PackedMicroBatch",
    "batched_dataset",
    "ensure_absl_flags_parsed",
    "fingerprint",
    "unpack",
]


def ensure_absl_flags_parsed() -> None:
    """Mark absl's flags as parsed (defaults) if nothing parsed them yet (grain issue 1355).

    Without this, Grain 0.2.18 worker start-up raises ``UnparsedFlagAccessError`` when it
    runs outside ``absl.app.run`` (plain scripts, notebooks, pytest).
    """
    try:
        from absl import flags
    except ImportError:  # Grain depends on absl; nothing to do without it.
        return
    if not flags.FLAGS.is_parsed():
        flags.FLAGS.mark_as_parsed()


def _writable(sample: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """Fresh, writable arrays: the core may hand out read-only views and shared constants."""
    return {key: np.array(value, copy=True) for key, value in sample.items()}


def _owned(batch: Mapping[str, Any], pool: BufferPool) -> dict[str, np.ndarray]:
    """Writable arrays that nothing else shares, in reused buffers: the core hands out
    read-only views and shared constants, and copying into warm, pooled memory costs a
    fraction of faulting in fresh pages every batch (the pool hands a buffer out again
    only once every array, view and export of it is gone)."""
    return {key: pool.copy(np.asarray(value)) for key, value in batch.items()}


class PackedMicroBatch(pack.PackedBatch):
    """A micro-batch as a worker ships it (:class:`megadata_core.handover.pack.PackedBatch`:
    the text once, the core's constants as recipes); :func:`unpack` gives it back."""

    __slots__ = ()


def unpack(packed: PackedMicroBatch, pool: BufferPool | None = None) -> dict[str, np.ndarray]:
    """The micro-batch ``packed`` came from, as writable arrays that nothing else shares
    (the core's dtypes; in ``pool`` buffers when given)."""
    return pack.unpack_arrays(packed, np.empty if pool is None else pool.empty)


class _Layout:
    """The small, array-free part of a shipped micro-batch: its keys and its constants'
    recipes, None for a plain micro-batch (a leaf for Grain's tree functions: it pickles
    through the pipe as it is)."""

    __slots__ = ("keys", "constants")

    def __init__(self, keys: tuple[str, ...], constants: dict | None) -> None:
        self.keys = keys
        self.constants = constants

    def __getstate__(self) -> tuple:
        return (self.keys, self.constants)

    def __setstate__(self, state: tuple) -> None:
        self.keys, self.constants = state


def _ship(element: PackedMicroBatch | Mapping[str, Any]) -> dict[str, Any]:
    """A worker's element: ``element``'s arrays in one shared-memory file of this worker
    (:mod:`megadata_core.handover.shm`), so only its name goes through Grain's pipe;
    :func:`_received` lays it out again in the consumer. The first call in a worker also
    makes the worker end when its consumer does (:func:`orphans.exit_with_parent`: a
    trainer killed with ``kill -9`` leaves no worker, and the worker removes its files
    that nobody took).

    Why names and not bytes: a worker hands its element to a ``multiprocessing`` queue
    whose feeder thread writes the pickle into a pipe, and a process joins that thread
    when it exits. An element larger than the pipe's buffer (64 KiB on Linux; a 32 x 1025
    uint16 micro-batch is 65.6 KB) that the consumer never reads -- it stopped reading
    when it asked the workers to stop -- keeps the worker from exiting until Grain's join
    gives up after 25 s and kills it, once per worker. Why not Grain's own shared memory
    (``SharedMemoryArray``): its arrays close themselves in ``__del__``, which fails with
    a message at interpreter exit for every batch still referenced then, and its blocks
    live on after a ``kill -9`` until Python's resource tracker notices. Where
    ``/dev/shm`` is full the arrays go as they are (Grain's shared memory).
    """
    orphans.exit_with_parent()
    if isinstance(element, PackedMicroBatch):
        arrays = {} if element.text is None else {_TEXT: element.text}
        arrays.update((_ARRAY + key, value) for key, value in element.arrays.items())
        layout = _Layout(element.keys, element.constants)
    else:  # a plain micro-batch (a dataset without __getitems__)
        arrays = {_ARRAY + key: np.asarray(value) for key, value in element.items()}
        layout = _Layout(tuple(element), None)
    ref = segments.write_segment(arrays)
    if ref is not None:
        return {"segment": ref, "layout": layout}
    return {"inline": {key: np.ascontiguousarray(value) for key, value in arrays.items()},
            "layout": layout}


_TEXT, _ARRAY = "text", "array:"


def _plain(array: Any) -> Any:
    """A plain ndarray view of Grain's shared-memory array, its block's name removed now
    (the mapping stays while a view of it lives): nothing is left to clean up at exit."""
    if not isinstance(array, np.ndarray):
        return array
    shm = getattr(array, "shm", None)
    if shm is not None and getattr(array, "_unlink_on_del", False):
        shared: Any = array  # a Grain SharedMemoryArray (grain is untyped)
        shared._unlink_on_del = False  # Grain's flag: close the mapping only, later
        try:
            shm.unlink()
        except FileNotFoundError:  # already gone
            pass
    return array.view(np.ndarray)


def _received(element: Mapping[str, Any]) -> PackedMicroBatch | dict[str, np.ndarray]:
    """What a worker shipped with :func:`_ship`: a :class:`PackedMicroBatch`, or a plain
    micro-batch, its arrays read-only views of the worker's file."""
    layout = element["layout"]
    if element.get("segment") is not None:
        arrays = segments.read_segment(element["segment"])
    else:
        arrays = {key: _plain(value) for key, value in element["inline"].items()}
    text = arrays.pop(_TEXT, None)
    arrays = {key[len(_ARRAY):]: value for key, value in arrays.items()}
    if layout.constants is None:
        return arrays
    return PackedMicroBatch(layout.keys, text, arrays, layout.constants)


class _Unpack:
    """Grain ``map`` in the consuming process: the core's read-only layout without copying
    (:func:`megadata_core.handover.pack.view_arrays`), or with ``writable``
    :func:`unpack` into this process's pool."""

    def __init__(self, writable: bool = False) -> None:
        self.writable = writable
        self._pool = BufferPool()
        self._constants: dict = {}

    def __call__(self, element: PackedMicroBatch | Mapping[str, Any]) -> dict[str, np.ndarray]:
        packed = element if isinstance(element, PackedMicroBatch) else _received(element)
        if not isinstance(packed, PackedMicroBatch):  # a plain micro-batch
            return _owned(packed, self._pool) if self.writable else packed
        if self.writable:
            return unpack(packed, self._pool)
        return pack.view_arrays(packed, self._constants)


#: Grain's reader for a batched pipeline: one element is a whole micro-batch that the core
#: reads faster than Grain's thread pool hands it over (docs/benchmarks.md), so in place.
BATCHED_READ_OPTIONS = grain.ReadOptions(num_threads=0, prefetch_buffer_size=0)


class GrainSource:
    """A Grain ``RandomAccessDataSource`` over a megadata dataset.

    ``src[i]`` is the dataset's sample ``i`` as a dict of writable numpy arrays;
    ``src.__getitems__(indices)`` (and Grain's batched-read hook ``_getitems``) read all
    indices in ONE core call. Pickles as the dataset (which pickles small: memory maps
    travel as file names and are reopened on load). ``key_names="maxtext"`` gives each
    sample under MaxText's names (:mod:`megadata_adapters.trainers.maxtext.keys`: ``inputs``,
    ``targets``,
    ``inputs_segmentation``, ``inputs_position``, ...); ``"megatron"`` (default) as the
    core names them. A worker process that the source's maker started (Grain's
    ``DataLoader`` workers) ends when the maker does, even killed with ``kill -9``
    (:func:`orphans.exit_with_parent`, from its first read).
    """

    def __init__(self, dataset: Any, *, key_names: str = "megatron") -> None:
        if not hasattr(dataset, "__len__") or not hasattr(dataset, "__getitem__"):
            raise DataError(
                f"dataset: {type(dataset).__name__} has no __len__/__getitem__; GrainSource "
                "needs a megadata dataset"
            )
        self.dataset = dataset
        self.key_names = check_key_names(key_names)
        mark = fingerprint(dataset)
        self._repr = f"GrainSource({dataset!r}" + (f", fingerprint={mark!r})" if mark else ")")
        self._maker = os.getpid()
        ensure_absl_flags_parsed()

    def _in_worker(self) -> None:
        """In a worker started by the process that made this source: end with it."""
        if not orphans.watching() and os.getppid() == getattr(self, "_maker", None):
            orphans.exit_with_parent()

    def __len__(self) -> int:
        return len(self.dataset)

    def _index(self, index: object) -> int:
        if isinstance(index, bool) or not isinstance(index, (int, np.integer)):
            raise TypeError(f"GrainSource index must be an int, got {type(index).__name__}")
        length = len(self.dataset)
        i = int(index)
        if not -length <= i < length:
            raise IndexError(f"GrainSource index {i} out of range for {length} samples")
        return i % length

    def __getitem__(self, index: int) -> dict[str, np.ndarray]:
        self._in_worker()
        return _writable(rename_keys(self.dataset[self._index(index)], self.key_names))

    def __getitems__(self, indices: Sequence[int]) -> dict[str, np.ndarray]:
        """The samples at ``indices`` stacked along a leading batch axis (one core read)."""
        self._in_worker()
        positions = [self._index(i) for i in indices]
        getitems = getattr(self.dataset, "__getitems__", None)
        if getitems is None:
            samples = [self.dataset[i] for i in positions]
            keys = samples[0].keys() if samples else ()
            batch = {key: np.stack([np.asarray(s[key]) for s in samples]) for key in keys}
            return dict(rename_keys(batch, self.key_names)) if batch else batch
        return _writable(rename_keys(getitems(positions), self.key_names))

    def _getitems(self, indices: Sequence[int]) -> list[dict[str, np.ndarray]]:
        """Grain's batched-read hook: one core read, split back into samples."""
        if len(indices) == 0:
            return []
        batch = self.__getitems__(indices)
        return [{key: value[j] for key, value in batch.items()} for j in range(len(indices))]

    def __repr__(self) -> str:
        return self._repr

    def __getstate__(self) -> dict:
        return {"dataset": self.dataset, "_repr": self._repr, "key_names": self.key_names,
                "_maker": getattr(self, "_maker", None)}

    def __setstate__(self, state: dict) -> None:
        self.key_names = "megatron"  # a source pickled before the option existed
        self.__dict__.update(state)


class MicroBatchDataset(grain.MapDataset):
    """Grain ``MapDataset``: element ``t`` = this rank's ``t``-th micro-batch (one core read).

    ``PretrainingSampler`` semantics with ``drop_last=True``: global batch ``t`` is the
    global indices ``[c + t·G, c + (t+1)·G)``; rank ``r`` reads ``[r·mbs, (r+1)·mbs)`` of it.
    With ``packed=True`` an element is a :class:`PackedMicroBatch` (what a worker ships;
    :func:`unpack` turns it into the plain micro-batch).
    """

    def __init__(
        self,
        dataset: Any,
        *,
        micro_batch_size: int,
        data_parallel_rank: int = 0,
        data_parallel_size: int = 1,
        consumed_samples: int = 0,
        packed: bool = False,
        writable: bool = False,
    ) -> None:
        super().__init__()
        self.dataset = dataset
        self.packed = bool(packed)
        self.writable = bool(writable)
        self.micro_batch_size = check_int("micro_batch_size", micro_batch_size, minimum=1)
        self.data_parallel_size = check_int("data_parallel_size", data_parallel_size, minimum=1)
        self.data_parallel_rank = check_int("data_parallel_rank", data_parallel_rank, minimum=0)
        if self.data_parallel_rank >= self.data_parallel_size:
            raise DataError(
                f"data_parallel_rank: {self.data_parallel_rank} is not below "
                f"data_parallel_size {self.data_parallel_size}"
            )
        self.total_samples = len(dataset)
        self.consumed_samples = check_int("consumed_samples", consumed_samples, minimum=0)
        if self.consumed_samples > self.total_samples:
            raise DataError(
                f"consumed_samples: {self.consumed_samples} is beyond the total of "
                f"{self.total_samples} samples"
            )
        self.global_batch = self.micro_batch_size * self.data_parallel_size
        self._length = (self.total_samples - self.consumed_samples) // self.global_batch
        self._pool = BufferPool()
        self._packer = pack.Packer(PackedMicroBatch)

    def __len__(self) -> int:
        return self._length

    def indices(self, step: int) -> np.ndarray:
        """Global sample indices of this rank's micro-batch ``step``."""
        start = (
            self.consumed_samples
            + step * self.global_batch
            + self.data_parallel_rank * self.micro_batch_size
        )
        return np.arange(start, start + self.micro_batch_size, dtype=np.int64)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return self.slice(index)
        step = int(index)
        if not 0 <= step < self._length:
            raise IndexError(f"micro-batch {step} out of range for {self._length}")
        getitems = getattr(self.dataset, "__getitems__", None)
        positions = self.indices(step)
        if getitems is None:
            samples = [self.dataset[int(i)] for i in positions]
            return {key: np.stack([np.asarray(s[key]) for s in samples]) for key in samples[0]}
        if self.packed:  # for a worker: the consumer unpacks (see _BatchedIterDataset)
            return self._packer(getitems(positions))
        if self.writable:
            return _owned(getitems(positions), self._pool)
        return dict(getitems(positions))  # the core's arrays, as its __getitems__ gives them

    def __str__(self) -> str:
        return (
            f"MicroBatchDataset(samples={self.total_samples}, consumed={self.consumed_samples}, "
            f"micro_batch_size={self.micro_batch_size}, rank={self.data_parallel_rank}/"
            f"{self.data_parallel_size})"
        )


class _ConsumedSamplesIterator(grain.DatasetIterator):
    """Counts the micro-batches handed out; state is the global consumed-sample count."""

    def __init__(self, owner: _BatchedIterDataset) -> None:
        super().__init__()
        self._owner = owner
        self._inner: Iterator[dict[str, np.ndarray]] | None = None
        self._start(owner.consumed_samples)

    def _start(self, consumed: int) -> None:
        self.close_inner()
        self._consumed = consumed
        self._inner = iter(self._owner.pipeline(consumed))

    def close_inner(self) -> None:
        inner, self._inner = getattr(self, "_inner", None), None
        if inner is not None and hasattr(inner, "close"):
            inner.close()

    def __next__(self) -> dict[str, np.ndarray]:
        if self._inner is None:  # closed: a TypeError, as next(None) raises
            raise TypeError("next() on a closed iterator")
        batch = next(self._inner)
        self._consumed += self._owner.global_batch
        return batch

    def get_state(self) -> dict[str, Any]:
        return {
            "consumed_samples": self._consumed,
            "total_samples": self._owner.total_samples,
            **resume_fields(self._owner.dataset),  # a blend schedule's stages too
        }

    def set_state(self, state: dict[str, Any]) -> None:
        mine = fingerprint(self._owner.dataset)
        edited = False
        if state.get("fingerprint") != mine:  # an edited blend schedule may continue it
            consumed = check_int("consumed_samples", state.get("consumed_samples"), minimum=0)
            edited = continues_schedule(state, self._owner.dataset, consumed, sequential=True)
        if state.get("fingerprint") != mine and not edited:
            raise DataError(
                f"fingerprint: checkpoint was made for data/config {state.get('fingerprint')!r}, "
                f"this pipeline reads {mine!r} ({self._owner.dataset!r}); refusing to continue "
                "a different stream"
            )
        if not edited and int(state.get("total_samples", -1)) != self._owner.total_samples:
            raise DataError(
                f"total_samples: checkpoint has {state.get('total_samples')!r}, this dataset "
                f"has {self._owner.total_samples} samples; the state belongs to other data"
            )
        consumed = check_int("consumed_samples", state.get("consumed_samples"), minimum=0)
        if consumed > self._owner.total_samples:
            raise DataError(
                f"consumed_samples: {consumed} is beyond the total of "
                f"{self._owner.total_samples} samples"
            )
        self._start(consumed)

    def close(self) -> None:
        """Stop the workers (at once: see :func:`_ship`); idempotent. Dropping the
        iterator or leaving its ``with`` block does the same."""
        self.close_inner()
        self._closed = True

    def __enter__(self) -> _ConsumedSamplesIterator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Rename:
    """Grain ``map``: a micro-batch under ``key_names`` (:func:`rename_keys`)."""

    def __init__(self, key_names: str) -> None:
        self.key_names = key_names

    def __call__(self, batch: Mapping[str, Any]) -> dict[str, np.ndarray]:
        return dict(rename_keys(batch, self.key_names))


class _BatchedIterDataset(grain.IterDataset):
    """IterDataset over :class:`MicroBatchDataset`; see :func:`batched_dataset`."""

    def __init__(
        self,
        dataset: Any,
        *,
        micro_batch_size: int,
        data_parallel_rank: int,
        data_parallel_size: int,
        consumed_samples: int,
        worker_count: int,
        worker_buffer_size: int,
        read_options: Any,
        writable: bool = False,
        key_names: str = "megatron",
    ) -> None:
        super().__init__()
        self.key_names = check_key_names(key_names)
        self._kwargs: dict[str, Any] = dict(
            micro_batch_size=micro_batch_size,
            data_parallel_rank=data_parallel_rank,
            data_parallel_size=data_parallel_size,
        )
        self.writable = bool(writable)
        first = MicroBatchDataset(dataset, consumed_samples=consumed_samples, **self._kwargs)
        self.dataset = dataset
        self.consumed_samples = first.consumed_samples
        self.total_samples = first.total_samples
        self.global_batch = first.global_batch
        self.worker_count = check_int("worker_count", worker_count, minimum=0)
        self.worker_buffer_size = check_int("worker_buffer_size", worker_buffer_size, minimum=1)
        self.read_options = read_options

    def pipeline(self, consumed: int) -> grain.IterDataset:
        """The Grain pipeline starting at ``consumed`` global samples."""
        workers = self.worker_count > 0
        micro = MicroBatchDataset(
            self.dataset,
            consumed_samples=consumed,
            packed=workers,
            writable=self.writable,
            **self._kwargs,
        )
        pipeline = micro.to_iter_dataset(self.read_options or BATCHED_READ_OPTIONS)
        if workers:  # workers ship packed micro-batches; this process unpacks them
            ensure_absl_flags_parsed()
            pipeline = pipeline.map(_ship).mp_prefetch(
                grain.MultiprocessingOptions(
                    num_workers=self.worker_count, per_worker_buffer_size=self.worker_buffer_size
                )
            ).map(_Unpack(self.writable))
        if renames(self.key_names):  # after the hand-over: workers ship core keys
            pipeline = pipeline.map(_Rename(self.key_names))
        return pipeline

    def __iter__(self) -> _ConsumedSamplesIterator:
        return _ConsumedSamplesIterator(self)

    def __str__(self) -> str:
        return (
            f"BatchedDataset(samples={self.total_samples}, consumed={self.consumed_samples}, "
            f"global_batch={self.global_batch}, workers={self.worker_count})"
        )


def batched_dataset(
    dataset: Any,
    *,
    micro_batch_size: int,
    data_parallel_rank: int = 0,
    data_parallel_size: int = 1,
    consumed_samples: int = 0,
    worker_count: int = 0,
    worker_buffer_size: int = 1,
    read_options: grain.ReadOptions | None = None,
    writable: bool = False,
    key_names: str = "megatron",
) -> grain.IterDataset:
    """This rank's micro-batches as a Grain ``IterDataset`` (``PretrainingSampler`` layout).

    Each element is one micro-batch: a dict of arrays with a leading axis of
    ``micro_batch_size``, read with one ``dataset.__getitems__``. The final partial global
    batch is dropped (Megatron's ``drop_last=True``). ``worker_count > 0`` prefetches in
    that many processes (Grain ``mp_prefetch``); ``read_options`` sets Grain's reader
    threads (default :data:`BATCHED_READ_OPTIONS`: read in the calling thread, or in each
    worker).

    Arrays: in-process (``worker_count=0``) a batch is the core's own, zero-copy -- as
    ``__getitems__`` returns it: ``tokens``/``labels`` read-only views of one buffer, shared
    read-only constants -- which a consumer that only reads (``global_batch``, a device
    put) wants; writing raises. Batches from workers come in the same layout: tokens and
    labels read-only views of the text the worker shipped, each constant one read-only
    array shared by every batch (nothing is copied after the hand-over).
    ``writable=True`` copies every key into arrays of its own (about as long again as the
    read for a 32 x 4096 batch). Buffers are reused only once a batch is dropped.

    Speed: one Grain ``mp_prefetch`` hand-over, even of an empty element, costs more than
    the core's read of a micro-batch (docs/benchmarks.md, bench ``loaders``), so
    ``worker_count=0`` is the fast choice for local ``.bin`` files; workers pay
    off when a batch is slow to read (remote storage, attention masks, heavy transforms).
    Workers ship each micro-batch packed (:class:`PackedMicroBatch`: the text once, the
    core's constants as recipes), its arrays in one shared-memory file of the worker's
    (only its name goes through the pipe), and this process lays it out again (a ``map``
    after ``mp_prefetch``). Closing the iterator (``close()``, dropping it, or leaving its
    ``with`` block) stops the workers at once: nothing large is ever left in a worker's
    pipe for it to flush before it can exit. Workers also end when this process does, even
    killed without clean-up (``kill -9``), removing the files nobody read.

    The iterator's ``get_state()`` is ``{"consumed_samples", "total_samples"}`` (plain ints,
    counted at the batches handed out, not the prefetched ones); ``set_state`` accepts it
    from a pipeline with any worker count, DP layout or micro-batch size over the same
    dataset and continues at that global sample (elastic, as ``PretrainingSampler``).
    ``key_names="maxtext"`` renames each micro-batch's keys to MaxText's
    (:mod:`megadata_adapters.trainers.maxtext.keys`), in this process after any hand-over.
    Raises ``DataError`` naming the offending argument.
    """
    return _BatchedIterDataset(
        dataset,
        micro_batch_size=micro_batch_size,
        data_parallel_rank=data_parallel_rank,
        data_parallel_size=data_parallel_size,
        consumed_samples=consumed_samples,
        worker_count=worker_count,
        worker_buffer_size=worker_buffer_size,
        read_options=read_options,
        writable=writable,
        key_names=key_names,
    )
