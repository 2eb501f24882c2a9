"""torch skin: megadata datasets as ``torch.utils.data`` map-style datasets.

:class:`TorchDataset` wraps a :class:`megadata_core.GPTDataset`, a
:class:`megadata_core.BlendedDataset` (or anything with ``len``, ``ds[i]`` and optionally
``ds.__getitems__``) and returns torch tensors with Megatron's dtypes: ``tokens``,
``labels`` and ``position_ids`` ``torch.long``; ``loss_mask`` ``torch.float32``;
``attention_mask`` ``torch.bool``; a blend's ``dataset_id`` ``torch.int32``, as the core
and the Grain and JAX adapters give it (int16, Megatron's, cannot name 40,000 datasets).
With ``document_masking``: ``cu_seqlens`` ``torch.int32`` [S + 1] (Megatron's padded
layout) and ``max_seqlen`` ``torch.int32`` (a 0-d tensor per sample in Megatron-LM's
``inter_document_masking``, so [B] in a batch), as Megatron-LM's ``GPTDataset`` returns
them; ``segment_ids`` (no Megatron counterpart) ``torch.int32``, as flash-attention and
Transformer Engine take sequence metadata; with ``packing_alignment`` (THD) also
``cu_seqlens_padded`` ``torch.int32`` [S + 1], Transformer Engine's
``cu_seqlens_q_padded``. Every tensor owns fresh memory (the core hands out read-only
views and shared constants; they are never written or aliased).

Batches. ``torch.utils.data.DataLoader`` calls ``dataset.__getitems__(batch_indices)``
when the dataset has one and passes the result to ``collate_fn``.
``TorchDataset.__getitems__`` reads the whole micro-batch in one core call and returns a
:class:`Samples`: a sequence of samples, as torch's convention wants, that holds the
stacked tensors. torch's default collate gives those tensors as they are (a collate
function for :class:`Sample` is registered in its ``default_collate_fn_map``), so every
spelling a torch user writes works and gives the same batches::

    from torch.utils.data import DataLoader
    from megadata_adapters.frameworks import torch_data
    from megadata_core.samplers import PretrainingSampler

    sampler = PretrainingSampler(len(train), consumed, mbs, dp_rank, dp_size)
    DataLoader(torch_data.TorchDataset(train), batch_sampler=sampler, num_workers=2)
    DataLoader(torch_data.TorchDataset(train), sampler=sampler, batch_size=None)
    DataLoader(torch_data.TorchDataset(train), batch_size=4, shuffle=True)
    loader = torch_data.loader(train, sampler, num_workers=2, persistent_workers=True)

:func:`loader` is the fast one: it passes ``collate_fn=batch_collate`` (no call into
torch's collate) and ships packed batches from its workers (below).

Workers. The dataset pickles cheaply (memory-mapped indices travel as file names when a
``path_to_cache`` is set; the ``.bin`` files are reopened in the worker), so any
multiprocessing start method works. With workers (and the default ``collate_fn``),
:func:`loader` returns an :class:`UnpackingLoader`: each worker ships a
:class:`PackedBatch` -- the [B, S + 1] text once, in the core's token dtype, and the
core's shared constants (all-ones loss mask, 0..S-1 position ids) as recipes -- pickled
with the text in a ring of shared-memory slots the worker reuses (one copy there; the
rest of the batch pickles small through the worker's result pipe), instead of four
tensors through fresh shared memory (each one a file-descriptor hand-over); this process
unpacks it, reading the text in place, into the same tensors as above. With
``pin_memory=True`` torch's pin-memory thread does the unpacking.

Shutdown. :func:`loader` returns a :class:`Loader` (a DataLoader):
``loader.close()`` or leaving ``with torch_data.loader(...) as data:`` stops the workers
of every iterator it handed out, persistent workers included, and lets go of their
shared-memory rings; an iterator's own ``close()``/``with`` stops its workers; dropping
either does the same. :class:`StatefulLoader` has ``close()`` and ``with`` too. A
worker that reads a :class:`TorchDataset` (any DataLoader) ends at once when the loader's
process ends without clean-up (``kill -9``, the OOM killer), removing its ring.

Resume. The sampler's ``state_dict()`` / ``load_state_dict()`` (``consumed_samples``) is
the resume state, as in torchdata's ``StatefulDataLoader``. A loader with workers pulls
batches from the sampler ahead of the training loop, so the sampler's own count runs
ahead of what was trained on; :class:`StatefulLoader` counts the batches the loop
actually received and gives a state that resumes right after them::

    loader = torch_data.StatefulLoader(train, sampler, num_workers=2)
    for step, batch in enumerate(loader):
        ...
        if step == k:
            save(loader.state_dict())        # sampler fields + the data fingerprint
    # later, over the same data:
    loader = torch_data.StatefulLoader(train, sampler, num_workers=2)
    loader.load_state_dict(state)            # DataError if made for other data/config

The state carries the data's ``fingerprint`` (as the Grain pipeline's does);
``load_state_dict`` refuses a state made for other data or config, and one without a
fingerprint (see :class:`StatefulLoader`).
"""

from __future__ import annotations

import sys
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Protocol, cast

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, get_worker_info
from torch.utils.data._utils.collate import default_collate_fn_map

from megadata_core.checks import check_int
from megadata_core.datasets.scheduled_blend import continues_schedule, resume_fields
from megadata_core.errors import DataError
from megadata_core.handover import orphans, pack
from megadata_core.handover.pack import BufferPool
from megadata_core.handover.shm import ConsumerRings, ProducerRing, SlotRef
from megadata_core.samplers import PretrainingSampler

__all__ = [
    "Loader",
    "PackedBatch",
    "Sample",
    "Samples",
    "UnpackingLoader",
    "StatefulLoader",
    "TorchDataset",
    "batch_collate",
    "loader",
    "to_torch",
]

#: Megatron's tensor dtypes, by key; other keys keep their numpy dtype.
DTYPES: dict[str, np.dtype] = {
    "tokens": np.dtype(np.int64),
    "labels": np.dtype(np.int64),
    "position_ids": np.dtype(np.int64),
    "dataset_id": np.dtype(np.int32),
    "loss_mask": np.dtype(np.float32),
    "attention_mask": np.dtype(np.bool_),
    "cu_seqlens": np.dtype(np.int32),
    "cu_seqlens_padded": np.dtype(np.int32),
    "max_seqlen": np.dtype(np.int32),
    "segment_ids": np.dtype(np.int32),
    "dataset_ids": np.dtype(np.int32),
    "document_ids": np.dtype(np.int32),
}


def to_torch(sample: Mapping[str, Any]) -> dict[str, torch.Tensor]:
    """A dict of numpy arrays (or scalars) as torch tensors with Megatron's dtypes.

    Always copies: the core's arrays may be read-only views or constants shared between
    batches, and a tensor must never alias them.
    """
    out = {}
    for key, value in sample.items():
        array = np.asarray(value)
        dtype = DTYPES.get(key, array.dtype)
        out[key] = torch.from_numpy(np.array(array, dtype=dtype, copy=True))
    return out


class Sample(dict):
    """One sample of a :class:`Samples` batch: key -> its row of each batch tensor."""


class Samples(Sequence):
    """What ``TorchDataset.__getitems__`` returns: the batch as a sequence of samples
    (torch's convention, what its fetcher hands ``collate_fn``), holding the stacked
    tensors it was read as (``.batch``, one core read).

    torch's ``default_collate`` turns it into ``.batch`` as it is (a collate function
    for :class:`Sample` is registered in ``default_collate_fn_map``, torch's documented
    extension point): no per-sample stacking. Any other collate sees a sequence of
    :class:`Sample` dicts; a list of some of them collates by stacking.
    """

    __slots__ = ("batch", "_rows")

    def __init__(self, batch: dict[str, torch.Tensor], rows: int) -> None:
        self.batch = batch
        self._rows = rows

    def __len__(self) -> int:
        return self._rows

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self._rows))]
        if not -self._rows <= index < self._rows:
            raise IndexError(f"sample {index} out of range for a batch of {self._rows}")
        return Sample((key, tensor[index]) for key, tensor in self.batch.items())


def _collate_samples(batch, *, collate_fn_map=None) -> dict[str, torch.Tensor]:
    """``default_collate`` for :class:`Sample` s: a whole :class:`Samples` is its stacked
    batch already; a list of samples is stacked key by key."""
    if isinstance(batch, Samples):
        return dict(batch.batch)
    return {key: torch.stack([sample[key] for sample in batch]) for key in batch[0]}


default_collate_fn_map[Sample] = _collate_samples


def batch_collate(batch: Any) -> Any:
    """The ``collate_fn`` of :func:`loader`: the stacked batch of a :class:`Samples`
    (without a call into torch's collate), a worker's :class:`PackedBatch` as it is
    (the loader unpacks it), anything else unchanged (a module-level function:
    picklable)."""
    if isinstance(batch, Samples):
        return batch.batch
    return batch


class PackedBatch(pack.PackedBatch):
    """A core batch as a worker ships it (:class:`megadata_core.handover.pack.PackedBatch`:
    the [B, S + 1] text once in the core's token dtype, the core's shared constants as
    recipes). :meth:`unpack` gives Megatron's tensors; the DataLoader built by
    :func:`loader` unpacks after the hand-over, and torch's pin-memory thread unpacks,
    then pins (:meth:`pin_memory`)."""

    __slots__ = ()

    #: in a worker's ring (a :class:`SlotRef`) between the worker's ``put`` and :meth:`unpack`
    text: np.ndarray | SlotRef | None  # type: ignore[assignment]

    def unpack(
        self, empty: Callable[[tuple[int, ...], np.dtype], np.ndarray] | None = None
    ) -> dict[str, torch.Tensor]:
        """Megatron's tensors (see :data:`DTYPES`; other keys keep their dtype), each
        C-contiguous in memory of its own from ``empty(shape, dtype)`` (default
        ``np.empty``; it must return arrays that nothing else uses)."""
        if isinstance(self.text, SlotRef):  # in a worker's ring: read in place, once
            self.text = _RINGS.view(self.text)
        arrays = pack.unpack_arrays(self, empty or np.empty, DTYPES)
        return {key: torch.from_numpy(array) for key, array in arrays.items()}

    def pin_memory(self) -> dict[str, torch.Tensor]:
        """:meth:`unpack`, each tensor then copied to page-locked memory (torch's
        pin-memory thread calls this, as it calls ``Tensor.pin_memory``)."""
        return {key: tensor.pin_memory() for key, tensor in self.unpack().items()}


class TorchDataset(Dataset):
    """A map-style ``torch.utils.data.Dataset`` over a megadata dataset.

    ``ds[i]`` is one sample, ``ds[list_of_ints]`` a stacked batch (dicts of tensors; see
    the module docstring for dtypes), ``ds.__getitems__(indices)`` a :class:`Samples`
    that any DataLoader collates. ``ds.dataset`` is the wrapped dataset.
    """

    #: set in the workers of a :func:`loader` DataLoader: ``__getitems__`` then returns
    #: a :class:`PackedBatch` that the loader unpacks after the hand-over, its text in
    #: the worker's ring of shared memory (``_ring``) when one is set
    _pack_in_worker = False
    _ring: ProducerRing | None = None

    def __init__(self, dataset) -> None:
        self.dataset = dataset
        self._pool = BufferPool()
        self._packer = pack.Packer(PackedBatch)

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index) -> dict[str, torch.Tensor]:
        """Sample ``index`` (an int); a 1-d sequence of ints gives the stacked batch
        (``DataLoader(ds, sampler=<megadata sampler>, batch_size=None)`` asks so)."""
        _in_worker()
        if isinstance(index, torch.Tensor):
            index = index.tolist()
        if isinstance(index, (int, np.integer)):
            return to_torch(self.dataset[index])
        return self._stacked(index)

    def __getitems__(self, indices) -> Samples | PackedBatch:
        """The samples at ``indices`` (a list of ints), read in one core call, as a
        :class:`Samples` (torch's default collate and :func:`batch_collate` give its
        stacked tensors as they are); a :class:`PackedBatch` in a :func:`loader` worker."""
        _in_worker()
        if isinstance(indices, torch.Tensor):
            indices = indices.tolist()
        indices = list(indices)
        if self._pack_in_worker:
            packed = cast(PackedBatch, self._packer(self._read(indices)))  # its packed_type
            if self._ring is not None and isinstance(packed.text, np.ndarray):
                packed.text = self._ring.put(packed.text) or packed.text
            return packed
        return Samples(self._stacked(indices), len(indices))

    def _read(self, indices: list) -> dict[str, np.ndarray]:
        """The core's batch at ``indices`` (1-d ints), one ``__getitems__`` call."""
        if any(np.ndim(i) != 0 for i in indices):
            raise DataError(
                f"indices: TorchDataset got a batch of index lists ({indices[:2]!r}...): a "
                "megadata sampler yields whole micro-batches; pass it as "
                "DataLoader(batch_sampler=...), or as sampler= with batch_size=None"
            )
        getitems = getattr(self.dataset, "__getitems__", None)
        if getitems is not None:
            return getitems(indices)
        rows = [self.dataset[int(i)] for i in indices]
        return {key: np.stack([np.asarray(r[key]) for r in rows]) for key in rows[0]}

    def _stacked(self, indices) -> dict[str, torch.Tensor]:
        """The stacked tensors at ``indices``: the core's batch (its own token dtype,
        tokens and labels views of one text buffer, shared constants) packed and
        unpacked into pooled buffers -- tokens and labels cast from the text once,
        constants filled, not copied."""
        packed = cast(PackedBatch, self._packer(self._read(list(indices))))  # its packed_type
        return packed.unpack(self._pool.empty)

    def __repr__(self) -> str:
        return f"TorchDataset({self.dataset!r})"


def _in_worker() -> None:
    """In a DataLoader worker: end it when the loader's process ends, even killed without
    clean-up (``kill -9``; torch's own check runs every 5 s, and only between batches),
    removing its shared-memory ring (:func:`orphans.exit_with_parent`)."""
    if not orphans.watching() and get_worker_info() is not None:
        orphans.exit_with_parent()


#: This process's view of the workers' rings (the pin-memory thread unpacks too).
_RINGS = ConsumerRings()


class _PackInWorker:
    """``worker_init_fn`` of a :func:`loader` with workers: the worker's dataset returns
    :class:`PackedBatch` es, their text in a ring of ``slots`` shared-memory slots; then
    the user's ``worker_init_fn`` (if any) runs.

    Ring reuse is safe because of the DataLoader's protocol: a worker computes a batch
    only when this process asks for it (its index queue), and this process asks only
    once fewer than ``prefetch_factor * num_workers`` batches it asked for are still
    unreturned; it unpacks each batch as it returns it. So when a worker is asked for its
    k-th batch, its (k - slots)-th was unpacked, for ``slots`` above that bound, and the
    request itself (a pipe) orders the two.
    """

    def __init__(self, then: Callable[[int], None] | None, slots: int) -> None:
        self.then = then
        self.slots = slots

    def __call__(self, worker_id: int) -> None:
        orphans.exit_with_parent()  # the worker ends with this process (kill -9 included)
        info = get_worker_info()
        if info is not None and isinstance(info.dataset, TorchDataset):
            info.dataset._pack_in_worker = True
            info.dataset._ring = ProducerRing(self.slots)
        if self.then is not None:
            self.then(worker_id)


def _stop_workers(iterator: Any) -> None:
    """Stop a DataLoader iterator's workers (joined: torch sends each one its stop and
    waits for it) and let go of their shared-memory rings; no-op without workers."""
    pids = [worker.pid for worker in getattr(iterator, "_workers", ())]
    shutdown = getattr(iterator, "_shutdown_workers", None)
    if shutdown is not None:
        shutdown()
    _RINGS.forget(pids)


class _LoaderIterator(Protocol):
    """What :class:`_Unpacking` uses of a DataLoader's iterator."""

    def __next__(self) -> Any: ...

    def __len__(self) -> int: ...


class _Unpacking:
    """Iterator over a DataLoader iterator that unpacks :class:`PackedBatch` es into
    pooled buffers (batches that are not packed pass through); :meth:`close` (or leaving
    a ``with`` block) stops its workers; other attributes are the wrapped iterator's."""

    def __init__(self, inner: _LoaderIterator, pool: BufferPool) -> None:
        self._inner = inner
        self._pool = pool
        self._closed = False

    def __iter__(self) -> _Unpacking:
        return self

    def __next__(self) -> dict[str, torch.Tensor]:
        if self._closed:
            raise StopIteration
        batch = next(self._inner)
        if isinstance(batch, PackedBatch):
            return batch.unpack(self._pool.empty)
        return batch

    def __len__(self) -> int:
        return len(self._inner)

    def close(self) -> None:
        """Stop the workers now (persistent ones too: the loader starts new ones when
        iterated again); idempotent."""
        self._closed = True
        _stop_workers(self._inner)

    def __enter__(self) -> _Unpacking:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class Loader(DataLoader):
    """The DataLoader :func:`loader` builds: a ``torch.utils.data.DataLoader`` that can be
    closed. ``close()`` (or leaving a ``with`` block) stops the workers of every iterator
    it handed out, persistent ones included, within about a second; its iterators have
    ``close()`` and ``with`` too. Dropping a loader or iterator stops them as well."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._unpack_pool = BufferPool()
        self._handed_out: weakref.WeakSet = weakref.WeakSet()

    def __iter__(self) -> _Unpacking:  # type: ignore[override]  # wraps torch's iterator
        inner = super().__iter__()
        workers = getattr(inner, "_workers", None)  # torch's multi-process iterator
        if workers and inner not in self._handed_out:
            self._handed_out.add(inner)
            # after torch's own __del__ has stopped the workers: let go of their rings
            weakref.finalize(inner, _RINGS.forget, [w.pid for w in workers])
        return _Unpacking(inner, self._unpack_pool)

    def close(self) -> None:
        """Stop the workers of every iterator of this loader; idempotent. Iterating the
        loader again starts new ones."""
        for inner in list(self._handed_out):
            _stop_workers(inner)
        self._handed_out.clear()
        self._iterator = None  # torch's persistent-workers iterator

    def __enter__(self) -> Loader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class UnpackingLoader(Loader):
    """The :class:`Loader` :func:`loader` builds when workers run: they ship each batch as
    a :class:`PackedBatch` (the [B, S + 1] text once, in the core's token dtype; the core's
    shared constants as recipes) instead of four tensors through shared memory, and
    iterating unpacks it here into Megatron's tensors (pooled buffers). With
    ``pin_memory=True`` torch's pin-memory thread unpacks straight into pinned memory."""


def loader(dataset, batch_sampler, num_workers: int = 0, **kwargs) -> Loader:
    """``DataLoader(TorchDataset(dataset), batch_sampler=batch_sampler,
    collate_fn=batch_collate, num_workers=num_workers, **kwargs)``.

    ``dataset`` may already be a :class:`TorchDataset`; ``batch_sampler`` is typically a
    :mod:`megadata_core.samplers` sampler (it yields lists of global sample indices).
    With workers and the default ``collate_fn`` it is an :class:`UnpackingLoader`: the
    workers ship packed batches, unpacked in this process (same tensors, a fraction of
    the shared-memory hand-overs); a ``worker_init_fn`` given still runs in each worker.
    Once TensorStore is imported (remote corpora), workers start by ``spawn`` unless
    ``multiprocessing_context`` is given: a forked TensorStore process aborts, and a fork
    server keeps the environment (endpoints, credentials) of the moment it started.
    """
    if not isinstance(dataset, TorchDataset):
        dataset = TorchDataset(dataset)
    kwargs.setdefault("collate_fn", batch_collate)
    if num_workers > 0 and "tensorstore" in sys.modules:
        # TensorStore aborts a process forked after its threads started (remote corpora);
        # spawn, not forkserver: workers must see this process's environment as it is now
        # (store endpoints, credentials), not as it was when a fork server started.
        kwargs.setdefault("multiprocessing_context", "spawn")
    if num_workers > 0 and kwargs["collate_fn"] is batch_collate:
        ahead = (kwargs.get("prefetch_factor") or 2) * num_workers  # unreturned at most
        kwargs["worker_init_fn"] = _PackInWorker(kwargs.get("worker_init_fn"), ahead + 2)
        return UnpackingLoader(
            dataset, batch_sampler=batch_sampler, num_workers=num_workers, **kwargs
        )
    return Loader(dataset, batch_sampler=batch_sampler, num_workers=num_workers, **kwargs)


class StatefulLoader:
    """A :func:`loader` that knows how far the training loop got.

    Iterating yields the loader's batches; ``state_dict()`` is ``sampler.state_dict()``
    with ``consumed_samples`` set to the samples of the batches *yielded so far* (one
    global batch, ``micro_batch_size * data_parallel_size``, per micro-batch; capped at
    ``total_samples`` for a :class:`~megadata_core.samplers.PretrainingSampler`'s last
    partial batch), whatever the workers prefetched. ``load_state_dict(state)`` hands it
    to the sampler: the next iteration continues with the batch after the last one
    yielded. Any sampler with ``consumed_samples``, ``micro_batch_times_data_parallel_size``
    and ``state_dict``/``load_state_dict`` works (both megadata samplers do).

    The state also carries ``fingerprint``: the data's fingerprint
    (:func:`megadata_core.datasets.scheduled_blend.fingerprint`, as the Grain pipeline's
    state does), and ``load_state_dict`` refuses a state made for other data or config
    (same length, another seed, say) with a ``DataError``. A state without one (saved
    before states carried it) is refused too; to restore it anyway, knowing the data is
    the same, hand it to the sampler: ``loader.batch_sampler.load_state_dict(state)``.
    """

    def __init__(self, dataset, batch_sampler, num_workers: int = 0, **kwargs) -> None:
        self.batch_sampler = batch_sampler
        self.loader = loader(dataset, batch_sampler, num_workers=num_workers, **kwargs)
        self._resume = resume_fields(self._data)
        self.fingerprint = self._resume["fingerprint"]
        self._start = int(batch_sampler.consumed_samples)
        self._yielded = 0

    @property
    def _data(self) -> Any:
        """The megadata dataset the loader reads (:func:`loader` wraps it in a
        :class:`TorchDataset`)."""
        return cast(TorchDataset, self.loader.dataset).dataset

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        self._start = int(self.batch_sampler.consumed_samples)
        self._yielded = 0
        for batch in self.loader:
            self._yielded += 1
            yield batch

    def state_dict(self) -> dict[str, Any]:
        """The sampler's state, ``consumed_samples`` counting the batches yielded."""
        state = dict(self.batch_sampler.state_dict())
        step = int(self.batch_sampler.micro_batch_times_data_parallel_size)
        consumed = self._start + self._yielded * step
        if isinstance(self.batch_sampler, PretrainingSampler):  # last batch may be partial
            consumed = min(consumed, self.batch_sampler.total_samples)
        state["consumed_samples"] = consumed
        state.update(self._resume)  # the fingerprint; a blend schedule's stages
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resume the sampler from ``state`` on the next iteration; ``DataError`` when
        ``state`` was made for other data or config (its ``fingerprint``). A state made on
        a blend schedule that this loader's schedule edits after the state's position is
        accepted (sequential samplers only): the samples before it are the same."""
        if isinstance(state, Mapping) and "fingerprint" not in state:
            raise DataError(
                f"fingerprint: the state has none (saved before loader states carried "
                f"one), so it cannot be checked against this data ({self.fingerprint!r}, "
                f"{self._data!r}); if it is the same data, restore it "
                "with loader.batch_sampler.load_state_dict(state)"
            )
        edited = False
        if isinstance(state, Mapping) and state["fingerprint"] != self.fingerprint:
            consumed = check_int("consumed_samples", state.get("consumed_samples"), minimum=0)
            edited = continues_schedule(
                state, self._data, consumed,
                sequential=isinstance(self.batch_sampler, PretrainingSampler),
            )
        if isinstance(state, Mapping) and state["fingerprint"] != self.fingerprint and not edited:
            raise DataError(
                f"fingerprint: the state was made for data/config {state['fingerprint']!r}, "
                f"this loader reads {self.fingerprint!r} ({self._data!r}): "
                "other data, or the same with another seed, sequence length, split or "
                "blend; refusing to continue a different stream"
            )
        if edited and "total_samples" in state:  # an edit may change the blend's length
            state = {**state, "total_samples": self.batch_sampler.total_samples}
        self.batch_sampler.load_state_dict(state)
        self._start = int(self.batch_sampler.consumed_samples)
        self._yielded = 0

    def close(self) -> None:
        """Stop the loader's workers (:meth:`Loader.close`); idempotent."""
        self.loader.close()

    def __enter__(self) -> StatefulLoader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
