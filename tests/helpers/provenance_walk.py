"""An independent walk of the index arrays, one sample at a time, in plain Python: the
oracle of the provenance tests (batch segments, where, source ids).

Concat samples follow Megatron's ``_query_document_sample_shuffle_indices`` loop (the
shuffle index gives the sample-index row; rows (b, o) and (e, f) bound it; positions b..e
of the document index, the first from o, the last up to f + extra); best_fit samples the
definition of :mod:`megadata_core.indices.packed_samples`' stored arrays (bin b of epoch
e holds piece rows ``e * P + bin_offsets[b] ..``; a full bin f < F one capacity-sized
piece from ``full_offset[e * F + f]``; any other piece from ``(length // capacity) *
capacity`` to the document's end). Blends: ``dataset_index`` / ``dataset_sample_index``;
chains (blend schedules): pass after pass.
"""

from __future__ import annotations

import numpy as np

from megadata_core.datasets.scheduled_blend import EpochChain


def _row(gpt, local: int) -> int:
    return int(np.asarray(gpt.shuffle_index[np.array([local], dtype=np.int64)])[0])


def walk_gpt(gpt, local: int) -> list[tuple[int, int, int]]:
    """``[(document, start, length), ...]`` of sample ``local`` of a GPTDataset, in text
    order, empty pieces left out."""
    lengths = np.asarray(gpt.indexed.sequence_lengths)
    row = _row(gpt, local)
    out = []
    if gpt.packing == "concat":
        extra = int(gpt.config.add_extra_token_to_sequence)
        (b, o), (e, f) = (tuple(int(v) for v in gpt.sample_index[r]) for r in (row, row + 1))
        for p in range(b, e + 1):
            d = int(gpt.document_index[p])
            start = o if p == b else 0
            end = f + extra if p == e else int(lengths[d])
            if end > start:
                out.append((d, start, end - start))
        return out
    arrays = gpt.index_arrays
    epochs, _, full, capacity = (int(v) for v in arrays["packed_shape"])
    offsets = np.asarray(arrays["bin_offsets"])
    bins, pieces = len(offsets) - 1, int(offsets[-1])
    epoch, b = divmod(row, bins)
    for q in range(int(offsets[b]), int(offsets[b + 1])):
        d = int(arrays["piece_document"][epoch * pieces + q])
        if b < full:
            start, length = int(arrays["full_offset"][epoch * full + b]), capacity
        else:
            start = int(lengths[d]) // capacity * capacity
            length = int(lengths[d]) - start
        if length > 0:
            out.append((d, start, length))
    return out


def walk(dataset, position: int) -> tuple[int, int, list[tuple[int, int, int]]]:
    """``(member, member sample, segments)`` of sample ``position`` of a split."""
    if hasattr(dataset, "dataset_index"):
        j = int(dataset.dataset_index[position])
        k = int(dataset.dataset_sample_index[position])
        member = dataset.datasets[j]
    else:
        j, k, member = 0, position, dataset
    local = k
    if isinstance(member, EpochChain):
        for one in member.passes:
            if local < len(one):
                return j, k, walk_gpt(one, local)
            local -= len(one)
        raise AssertionError("chain sample past its passes")
    return j, k, walk_gpt(member, local)


def member_corpus(dataset, j: int):
    """The corpus of member j (of a blend, a chain, or the dataset itself)."""
    members = getattr(dataset, "datasets", None)
    return (dataset if members is None else members[j]).indexed


def token_sources(dataset, position: int, width: int) -> tuple[np.ndarray, np.ndarray]:
    """int64 [width] the member and the document of every text position, -1 padding."""
    j, _, segments = walk(dataset, position)
    members = np.full(width, -1, np.int64)
    documents = np.full(width, -1, np.int64)
    column = 0
    for d, _, n in segments:
        documents[column : column + n] = d
        members[column : column + n] = j
        column += n
    return members, documents


def samples_holding(dataset) -> dict[tuple[int, int], list[int]]:
    """``(member, document) -> [positions]``: every sample of the split that holds a
    token of that document, by walking every sample."""
    found: dict[tuple[int, int], list[int]] = {}
    for position in range(len(dataset)):
        j, _, segments = walk(dataset, position)
        for d in sorted({d for d, _, _ in segments}):
            found.setdefault((j, d), []).append(position)
    return found
