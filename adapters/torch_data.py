"""torch skin: megadata datasets as ``torch.utils.data`` map-style datasets.

:class:`TorchDataset` wraps a :class:`megadata_core.GPTDataset`, a
:class:`megadata_core.BlendedDataset` (or anything with ``len``, ``ds[i]`` and optionally
``ds.__getitems__``) and returns torch tensors with Megatron's dtypes: ``tokens``,
``labels``, ``position_ids`` and ``dataset_id`` ``torch.long``; ``loss_mask``
``torch.float32``; ``attention_mask`` ``torch.bool``. Every tensor owns fresh memory (the
core hands out read-only views and shared constants; they are never written or aliased).

Batches. ``torch.utils.data.DataLoader`` calls ``dataset.__getitems__(batch_indices)``
when the dataset has one and passes the result to ``collate_fn``.
``TorchDataset.__getitems__`` reads the whole micro-batch in one core call and returns a
dict of already stacked tensors, so the loader needs ``collate_fn=batch_collate`` (which
returns that dict as is; torch's default collate expects a list of samples)::

    from adapters import torch_data
    from megadata_core.samplers import PretrainingSampler

    sampler = PretrainingSampler(len(train), consumed, mbs, dp_rank, dp_size)
    loader = torch_data.loader(train, sampler, num_workers=2, persistent_workers=True)
    # == DataLoader(TorchDataset(train), batch_sampler=sampler,
    #               collate_fn=torch_data.batch_collate, num_workers=2, ...)

Workers. The dataset pickles cheaply (memory-mapped indices travel as file names when a
``path_to_cache`` is set; the ``.bin`` files are reopened in the worker), so any
multiprocessing start method works.

Resume. The sampler's ``state_dict()`` / ``load_state_dict()`` (``consumed_samples``) is
the resume state, as in torchdata's ``StatefulDataLoader``. A loader with workers pulls
batches from the sampler ahead of the training loop, so the sampler's own count runs
ahead of what was trained on; :class:`StatefulLoader` counts the batches the loop
actually received and gives a state that resumes right after them::

    loader = torch_data.StatefulLoader(train, sampler, num_workers=2)
    for step, batch in enumerate(loader):
        ...
        if step == k:
            save(loader.state_dict())        # a sampler state dict (plain ints)
    # later: sampler.load_state_dict(state) (or build one with that consumed_samples)
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from megadata_core.datasets.buffers import BufferPool
from megadata_core.samplers import PretrainingSampler

__all__ = ["TorchDataset", "batch_collate", "loader", "StatefulLoader", "to_torch"]

#: Megatron's tensor dtypes, by key; other keys keep their numpy dtype.
DTYPES: dict[str, np.dtype] = {
    "tokens": np.dtype(np.int64),
    "labels": np.dtype(np.int64),
    "position_ids": np.dtype(np.int64),
    "dataset_id": np.dtype(np.int64),
    "loss_mask": np.dtype(np.float32),
    "attention_mask": np.dtype(np.bool_),
}


def to_torch(sample: Mapping[str, Any], pool: BufferPool | None = None) -> dict[str, torch.Tensor]:
    """A dict of numpy arrays (or scalars) as torch tensors with Megatron's dtypes.

    Always copies: the core's arrays may be read-only views or constants shared between
    batches, and a tensor must never alias them. With ``pool`` the copies land in reused
    buffers (warm memory; a buffer is handed out again only once its tensor is gone).
    """
    out = {}
    for key, value in sample.items():
        array = np.asarray(value)
        dtype = DTYPES.get(key, array.dtype)
        if pool is not None and array.ndim:
            out[key] = torch.from_numpy(pool.copy(array, dtype))
        else:
            out[key] = torch.from_numpy(np.array(array, dtype=dtype, copy=True))
    return out


def batch_collate(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The ``collate_fn`` for :class:`TorchDataset`: its ``__getitems__`` already returns
    the stacked batch, so this returns it unchanged (a module-level function: picklable)."""
    return batch


class TorchDataset(Dataset):
    """A map-style ``torch.utils.data.Dataset`` over a megadata dataset.

    ``ds[i]`` is one sample and ``ds.__getitems__(indices)`` a stacked batch, both dicts
    of tensors (see the module docstring for dtypes). ``ds.dataset`` is the wrapped
    dataset. Use with ``collate_fn=batch_collate`` (or :func:`loader`).
    """

    def __init__(self, dataset) -> None:
        self.dataset = dataset
        # the core gathers int64 text straight away when it can (no per-batch cast)
        with_dtype = getattr(dataset, "with_token_dtype", None)
        self._reader = with_dtype(DTYPES["tokens"]) if callable(with_dtype) else dataset
        self._pool = BufferPool()

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        if isinstance(index, torch.Tensor):
            index = int(index)
        return to_torch(self._reader[index])

    def __getitems__(self, indices) -> dict[str, torch.Tensor]:
        """The samples at ``indices`` (a list of ints) as stacked tensors, one core call."""
        if isinstance(indices, torch.Tensor):
            indices = indices.tolist()
        getitems = getattr(self._reader, "__getitems__", None)
        if getitems is not None:
            return to_torch(getitems(list(indices)), self._pool)
        rows = [self._reader[int(i)] for i in indices]
        return to_torch({key: np.stack([np.asarray(r[key]) for r in rows]) for key in rows[0]})

    def __repr__(self) -> str:
        return f"TorchDataset({self.dataset!r})"


def loader(dataset, batch_sampler, num_workers: int = 0, **kwargs) -> DataLoader:
    """``DataLoader(TorchDataset(dataset), batch_sampler=batch_sampler,
    collate_fn=batch_collate, num_workers=num_workers, **kwargs)``.

    ``dataset`` may already be a :class:`TorchDataset`; ``batch_sampler`` is typically a
    :mod:`megadata_core.samplers` sampler (it yields lists of global sample indices).
    """
    if not isinstance(dataset, TorchDataset):
        dataset = TorchDataset(dataset)
    kwargs.setdefault("collate_fn", batch_collate)
    return DataLoader(dataset, batch_sampler=batch_sampler, num_workers=num_workers, **kwargs)


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
    """

    def __init__(self, dataset, batch_sampler, num_workers: int = 0, **kwargs) -> None:
        self.batch_sampler = batch_sampler
        self.loader = loader(dataset, batch_sampler, num_workers=num_workers, **kwargs)
        self._start = int(batch_sampler.consumed_samples)
        self._yielded = 0

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
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Resume the sampler from ``state`` on the next iteration."""
        self.batch_sampler.load_state_dict(state)
        self._start = int(self.batch_sampler.consumed_samples)
        self._yielded = 0
