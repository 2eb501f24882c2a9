"""JAX global arrays from per-process numpy batches (the MaxText / multi-host input path).

Each process reads its own slice of the global batch (for instance with
``mdc.samplers.PretrainingSampler(..., data_parallel_rank=jax.process_index(),
data_parallel_size=jax.process_count())`` and ``dataset.__getitems__``) and hands the
numpy dict to :func:`global_batch`, which assembles one global ``jax.Array`` per key with
``jax.make_array_from_process_local_data``::

    mesh = data_mesh(("data", "fsdp"), (4, 2))
    arrays = global_batch(dataset.__getitems__(indices), mesh)   # batch dim over data*fsdp

The leading (batch) axis is sharded over ``batch_axes`` (default: every mesh axis, as
MaxText does); all other axes are replicated. The global batch is the local batch times
the number of processes along those axes. Input arrays are only read, never written
(megadata batches may be read-only views of memory-mapped files).

Constants. The core hands out the same read-only array object for keys that do not
change between batches (position ids without ``reset_position_ids``, an all-ones loss
mask). An input that is read-only AND owns its memory is taken as immutable: when the
same object comes again for the same sharding, its global array from last time is
reused instead of being copied to every device again (a few recent ones are kept).

MaxText's names. ``key_names="maxtext"`` (``global_batch``, ``prefetch_to_device``) hands
the batch over as MaxText's train step reads it: ``inputs``, ``targets``,
``inputs_position``, ``targets_position``, ``inputs_segmentation``,
``targets_segmentation`` (see :mod:`megadata_adapters.trainers.maxtext.keys` for the mapping; the
loss mask
becomes ``targets_segmentation == 0``).

Dtypes are kept as JAX allows: int32 tokens, float32 masks and bool attention masks go
through unchanged; 64-bit arrays become 32-bit unless ``jax_enable_x64`` is on.
"""

from __future__ import annotations

import queue
import threading
import weakref
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping, Sequence

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from megadata_adapters.trainers.maxtext.keys import check_key_names, rename_keys
from megadata_core.errors import DataError
from megadata_core.handover.pack import is_constant

__all__ = ["DevicePrefetcher", "batch_sharding", "data_mesh", "global_batch", "prefetch_to_device"]


def data_mesh(axis_names: Sequence[str] = ("data",), shape: Sequence[int] | None = None) -> Mesh:
    """A ``Mesh`` over all devices with ``axis_names``.

    ``shape`` defaults to every device on the first axis and 1 on the others; its product
    must equal ``jax.device_count()``.
    """
    if isinstance(axis_names, str):
        axis_names = (axis_names,)
    names = tuple(axis_names)
    if not names or not all(isinstance(n, str) for n in names):
        raise DataError(f"data_mesh: axis_names must be a non-empty sequence of str, got {names!r}")
    if len(set(names)) != len(names):
        raise DataError(f"data_mesh: axis_names repeat a name: {names!r}")
    count = jax.device_count()
    if shape is None:
        dims = (count,) + (1,) * (len(names) - 1)
    else:
        dims = tuple(int(s) for s in shape)
    if len(dims) != len(names):
        raise DataError(f"data_mesh: shape {dims} has {len(dims)} axes but axis_names {names}")
    if any(d < 1 for d in dims) or int(np.prod(dims)) != count:
        raise DataError(
            f"data_mesh: shape {dims} (product {int(np.prod(dims))}) does not cover the "
            f"{count} devices"
        )
    return jax.make_mesh(dims, names)


def _batch_axes(mesh: Mesh, batch_axes) -> tuple[str, ...]:
    names = tuple(mesh.axis_names)
    if batch_axes is None:
        return names
    axes = (batch_axes,) if isinstance(batch_axes, str) else tuple(batch_axes)
    for axis in axes:
        if axis not in names:
            raise DataError(
                f"global_batch: batch axis {axis!r} is not in the mesh; the mesh's axes are {names}"
            )
    if len(set(axes)) != len(axes):
        raise DataError(f"global_batch: batch_axes repeat an axis: {axes}")
    return axes


def batch_sharding(mesh: Mesh, batch_axes=None) -> NamedSharding:
    """``NamedSharding(mesh, PartitionSpec(batch_axes))``: leading axis over ``batch_axes``."""
    return NamedSharding(mesh, PartitionSpec(_batch_axes(mesh, batch_axes)))


def _local_shards(mesh: Mesh, axes: tuple[str, ...]) -> int:
    """How many distinct batch slices this process's devices hold (trip count: devices)."""
    positions = [mesh.axis_names.index(a) for a in axes]
    here = jax.process_index()
    seen = set()
    for coords, device in np.ndenumerate(mesh.devices):
        if device.process_index == here:
            seen.add(tuple(coords[p] for p in positions))
    return len(seen)


#: (id(array), sharding, x64) -> (array, global array) for immutable inputs; the entry
#: holds the array, so its id cannot be reused by another object while it is cached.
_CONSTANTS: OrderedDict[tuple, tuple[np.ndarray, jax.Array]] = OrderedDict()
_CONSTANTS_LOCK = threading.Lock()
_CONSTANTS_KEPT = 8


def _to_global(sharding: NamedSharding, value) -> jax.Array:
    """``make_array_from_process_local_data``, reusing the result for immutable inputs."""
    if not is_constant(value):
        return jax.make_array_from_process_local_data(sharding, value)
    x64 = jax.config.jax_enable_x64  # type: ignore[attr-defined]  # jax flags: dynamic attributes
    key = (id(value), sharding, bool(x64))
    with _CONSTANTS_LOCK:
        hit = _CONSTANTS.get(key)
        if hit is not None and hit[0] is value and not hit[1].is_deleted():  # donated?
            _CONSTANTS.move_to_end(key)
            return hit[1]
    array = jax.make_array_from_process_local_data(sharding, value)
    with _CONSTANTS_LOCK:
        _CONSTANTS[key] = (value, array)
        while len(_CONSTANTS) > _CONSTANTS_KEPT:
            _CONSTANTS.popitem(last=False)
    return array


def global_batch(
    batch: Mapping, mesh: Mesh, batch_axes=None, key_names: str = "megatron"
) -> dict[str, jax.Array]:
    """Per-process numpy batch -> dict of global ``jax.Array`` sharded on the leading axis.

    batch: mapping of key -> array with a leading batch axis, the same size for all keys
    (this process's share of the global batch). mesh: a ``jax.sharding.Mesh``.
    batch_axes: mesh axis name or names the batch axis is split over (default: all).
    key_names: ``"megatron"`` (keys as given) or ``"maxtext"`` (MaxText's names).
    """
    key_names = check_key_names(key_names)
    if not isinstance(batch, Mapping):
        raise DataError(f"global_batch: batch must be a mapping of arrays, got {type(batch)!r}")
    if not batch:
        raise DataError("global_batch: batch is empty")
    batch = rename_keys(batch, key_names)
    axes = _batch_axes(mesh, batch_axes)
    sharding = NamedSharding(mesh, PartitionSpec(axes))

    sizes = {}
    for key, value in batch.items():
        if not isinstance(value, np.ndarray | jax.Array):
            raise DataError(
                f"global_batch: batch[{key!r}] is a {type(value).__name__}, not an array"
            )
        if value.ndim == 0:
            raise DataError(f"global_batch: batch[{key!r}] is 0-d; it has no batch axis")
        sizes[key] = int(value.shape[0])
    if len(set(sizes.values())) > 1:
        raise DataError(f"global_batch: arrays disagree on the batch size (leading axis): {sizes}")
    local = next(iter(sizes.values()))
    shards = _local_shards(mesh, axes)
    if local % shards:
        raise DataError(
            f"global_batch: the local batch of {local} rows does not divide over the {shards} "
            f"local device slices of mesh axes {axes} (mesh shape {dict(mesh.shape)})"
        )
    return {key: _to_global(sharding, value) for key, value in batch.items()}


_END = object()


class _Feeder:
    """The background thread's side of a :class:`DevicePrefetcher`: it holds no reference
    to the prefetcher, so dropping the prefetcher lets its finalizer stop the thread."""

    def __init__(
        self, source: Iterator[Mapping], mesh: Mesh, size: int, batch_axes, key_names: str
    ) -> None:
        self.source = source
        self.mesh = mesh
        self.batch_axes = batch_axes
        self.key_names = key_names
        self.queue: queue.Queue = queue.Queue(maxsize=size)
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self.run, name="prefetch_to_device", daemon=True)

    def _put(self, item) -> bool:
        while not self.stopping.is_set():
            try:
                self.queue.put(item, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def run(self) -> None:
        try:
            for batch in self.source:
                arrays = global_batch(batch, self.mesh, self.batch_axes, self.key_names)
                jax.block_until_ready(arrays)  # on the devices before it counts as ready
                if not self._put(arrays):
                    return
            self._put(_END)
        except BaseException as error:  # handed to the consumer
            self._put(error)

    def stop(self) -> None:
        """Stop the thread, drop the batches it holds, then close the source iterator
        (a Grain or torch iterator stops its workers) once the thread no longer runs it."""
        self.stopping.set()
        while True:
            try:
                self.queue.get_nowait()
            except queue.Empty:
                break
        if self.thread is not threading.current_thread():
            self.thread.join(timeout=5.0)  # a source blocked in next() keeps it a while
        close = getattr(self.source, "close", None)
        if close is not None and not self.thread.is_alive():
            close()


class DevicePrefetcher:
    """Iterator of global batches: a background thread turns the numpy batches of
    ``iterator`` into global arrays (:func:`global_batch`) and keeps up to ``size`` of them
    on the devices ahead of the training loop. An exception in the source is raised by
    ``next``. :meth:`close`, leaving a ``with`` block, or dropping the prefetcher stops
    the thread and closes the source iterator (the prefetcher owns what it was given)."""

    def __init__(
        self,
        iterator: Iterable[Mapping],
        mesh: Mesh,
        size: int = 2,
        batch_axes=None,
        key_names: str = "megatron",
    ):
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise DataError(f"prefetch_to_device: size must be an int >= 1, got {size!r}")
        key_names = check_key_names(key_names)
        self._feeder = _Feeder(iter(iterator), mesh, size, batch_axes, key_names)
        self._queue = self._feeder.queue
        self._thread = self._feeder.thread
        self._done = False
        self._stop = weakref.finalize(self, self._feeder.stop)
        self._thread.start()

    def __iter__(self) -> Iterator[dict[str, jax.Array]]:
        return self

    def __next__(self) -> dict[str, jax.Array]:
        if self._done:
            raise StopIteration
        item = self._queue.get()
        if item is _END:
            self._done = True
            raise StopIteration
        if isinstance(item, BaseException):
            self._done = True
            raise item
        return item

    def close(self) -> None:
        """Stop the background thread, drop the batches it holds and close the source
        iterator; idempotent."""
        self._done = True
        self._stop()

    def __enter__(self) -> DevicePrefetcher:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def prefetch_to_device(
    iterator: Iterable[Mapping],
    mesh: Mesh,
    size: int = 2,
    batch_axes=None,
    key_names: str = "megatron",
) -> DevicePrefetcher:
    """Global batches of ``iterator``'s per-process numpy batches, ``size`` of them kept
    on the devices ahead by a background thread (see :class:`DevicePrefetcher`);
    ``key_names`` as :func:`global_batch`'s."""
    return DevicePrefetcher(iterator, mesh, size, batch_axes, key_names)
