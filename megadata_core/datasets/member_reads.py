"""Reading a batch that spans several member datasets: one read per member, scattered
back into batch order. Shared by the datasets made of members (a blend, an epoch chain)."""

from __future__ import annotations

import numpy as np

from megadata_core.datasets.lazy_members import LazyMembers
from megadata_core.errors import DataError
from megadata_core.handover.buffers import BufferPool


def member_lengths(datasets) -> np.ndarray:
    """int64 [M]: ``len`` of every member (a :class:`LazyMembers` knows them unmade)."""
    if isinstance(datasets, LazyMembers):
        return datasets.lengths
    return np.array([len(dataset) for dataset in datasets], dtype=np.int64).reshape(-1)


def read_member(dataset, samples: np.ndarray) -> dict:
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
    :func:`~megadata_core.datasets.source_ids.batch_sources`); left empty otherwise.

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
            parts.append((where, read_member(dataset, samples[where])))
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
