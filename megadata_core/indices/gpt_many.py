"""The GPT indices of many small datasets at once (a blend's members).

Each member's ``(document_index, sample_index, shuffle_index)`` equals
:func:`megadata_core.indices.gpt.gpt_indices` for it, byte for byte. The two
RandomState shuffles of a member are sequential draws of its own stream and stay one
call each (cheap for small members); the sample index -- a cumulative sum of the
gathered lengths and a ``searchsorted`` of the sample targets -- is computed for every
member in one segmented pass: the members' document-ordered lengths are concatenated,
summed once, and member m's targets are shifted by the tokens of the members before it,
so each search lands inside its own segment. In memory only: for members whose index
is small (a blend's thousands of small corpora); large ones keep the block-wise build.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from megadata_core.checks import INT32_MAX, check_int, id_range
from megadata_core.errors import DataError
from megadata_core.indices.gpt import (
    UINT32_LIMIT,
    num_epochs,
    seeded_random_state,
    separate_final_epoch,
    shuffle_index,
)
from megadata_core.indices.sample_boundaries import sample_index_dtype, samples_in_epochs


def gpt_indices_many(
    sequence_lengths: Sequence[np.ndarray],
    document_ids: Sequence[range],
    sequence_length: int,
    num_samples: Sequence[int | None],
    random_seed: int | Sequence[int],
    *,
    add_extra_token: bool = True,
    drop_last_partial_sequence: Sequence[bool],
) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Per member m, ``gpt_indices(sequence_lengths[m], document_ids[m], S,
    num_samples[m], random_seed, add_extra_token=..., drop_last_partial_sequence=
    drop_last_partial_sequence[m])``.

    Args:
        sequence_lengths: per member, int [N_m] lengths of its corpus (validated:
            not negative; members may share a corpus).
        document_ids: per member, the ``range(lo, hi)`` of its documents (not empty).
        sequence_length: S >= 1.
        num_samples: per member, samples requested or None (one epoch).
        random_seed: in ``[0, 2**32)``; every member's stream starts from it (or one
            seed per member, e.g. a blend schedule's passes, each its own epoch seed).
        drop_last_partial_sequence: per member.

    Returns:
        per member: int32 [E*D]; int32/int64 [samples + 1, 2]; uint32/int64 [samples].

    Raises:
        DataError: a member (named by its position) with ids out of range, no
            documents or no tokens; a bad seed or sequence length.
    """
    count = len(document_ids)
    given = random_seed if isinstance(random_seed, Sequence) else [random_seed] * count
    seeds = [check_int("random_seed", seed, 0) for seed in given]
    for seed in seeds:
        if seed >= 1 << 32:
            raise DataError(f"random_seed: {seed} must be < 2**32")
    length = check_int("sequence_length", sequence_length, 1)
    if not (
        len(sequence_lengths) == len(num_samples) == len(drop_last_partial_sequence)
        == len(seeds) == count
    ):
        raise DataError(f"document_ids: {count} members, other arguments differ in length")
    extra = 1 if add_extra_token else 0
    checked = [id_range(f"document_ids[{m}]", ids, len(lengths))
               for m, (lengths, ids) in enumerate(zip(sequence_lengths, document_ids))]  # fmt: skip
    # Each distinct corpus once, end to end: member m reads it from offset[m].
    corpora: dict[int, int] = {}
    parts: list[np.ndarray] = []
    offsets: list[int] = []
    widths: list[int] = []
    end = 0
    spans: list[range] = []
    for lengths, span in zip(sequence_lengths, checked):
        if not span:
            raise DataError(f"document_ids[{len(offsets)}]: {span!r} is not a non-empty range")
        spans.append(span)
        key = id(lengths)
        if key not in corpora:
            corpora[key] = end
            parts.append(lengths)
            end += len(lengths)
        offsets.append(corpora[key])
        widths.append(int(lengths.max()))
    flat = np.concatenate(parts)
    sums = np.concatenate([[0], np.cumsum(flat, dtype=np.int64)])
    offset = np.array(offsets, dtype=np.int64)
    lo = np.array([span.start for span in spans], dtype=np.int64)
    hi = np.array([span.stop for span in spans], dtype=np.int64)
    tokens = (sums[offset + hi] - sums[offset + lo]).tolist()
    plans = []  # per member: epochs, separate, samples, first shuffled range
    for member, (count, wanted, drop) in enumerate(
        zip(tokens, num_samples, drop_last_partial_sequence)
    ):
        if count == 0:
            raise DataError(f"document_ids[{member}]: the documents hold no tokens")
        epochs = num_epochs(count, length, wanted, extra)
        separate = separate_final_epoch(epochs, count, length, wanted, extra)
        total = samples_in_epochs(epochs, count, length, extra, drop)
        first = samples_in_epochs(epochs - 1, count, length, extra) if separate else total
        plans.append((epochs, separate, total, first))
    sizes = np.array([plan[0] for plan in plans], dtype=np.int64) * (hi - lo)  # E_m * D_m
    if int(hi.max()) > INT32_MAX + 1:
        raise DataError(f"document_ids: id {int(hi.max()) - 1} does not fit int32")
    # Every member's ids tiled per epoch, in one pass: member m's E_m * D_m entries.
    orders = _segments(sizes, np.int64)
    orders %= np.repeat(hi - lo, sizes)
    orders += np.repeat(lo, sizes)
    orders = orders.astype(np.int32)
    totals = np.array([plan[2] for plan in plans], dtype=np.int64)
    narrow = int(totals.max()) < UINT32_LIMIT
    shuffles = _segments(totals, np.uint32) if narrow else None
    bounds = np.concatenate([[0], np.cumsum(sizes)]).tolist()
    marks = np.concatenate([[0], np.cumsum(totals)]).tolist()
    documents, samples = [], []
    for member, (epochs_m, separate, total, first) in enumerate(plans):
        rng = seeded_random_state(seeds[member])  # the member's own stream, as Megatron's
        order = orders[bounds[member] : bounds[member + 1]]
        if separate and epochs_m > 1:
            split = len(order) - len(spans[member])
            rng.shuffle(order[:split])
            rng.shuffle(order[split:])
        else:
            rng.shuffle(order)
        if shuffles is not None:  # narrow
            shuffle = shuffles[marks[member] : marks[member + 1]]
            rng.shuffle(shuffle[:first])
            if first != total:
                rng.shuffle(shuffle[first:])
        else:
            shuffle = shuffle_index(first, total, rng)
        documents.append(order)
        samples.append(shuffle)
    gathered = flat[orders + np.repeat(offset, sizes)]
    rows = [min(total, max(0, e * t - extra) // length)
            for (e, _, total, _), t in zip(plans, tokens)]  # fmt: skip
    dtypes = [sample_index_dtype(int(size), width) for size, width in zip(sizes, widths)]
    built = _sample_indices(gathered, bounds, totals.tolist(), rows, dtypes, length, extra)
    return list(zip(documents, built, samples))


def _segments(sizes: np.ndarray, dtype: type) -> np.ndarray:
    """``concatenate([arange(n) for n in sizes])`` in one pass, of ``dtype``."""
    total = int(sizes.sum())
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    out = np.arange(total, dtype=np.int64)
    out -= np.repeat(starts, sizes)
    return out.astype(dtype, copy=False)


def _sample_indices(
    gathered: np.ndarray,
    bounds: list[int],
    totals: list[int],
    rows: list[int],
    widths: list[np.dtype],
    length: int,
    extra: int,
) -> list[np.ndarray]:
    """Every member's sample index from the document-ordered lengths of all members
    (member m's at ``gathered[bounds[m]:bounds[m + 1]]``), its samples ``totals[m]``, the
    rows inside its stream ``rows[m]`` (later rows are the partial sample) and its dtype:
    one cumulative sum and one search for all members."""
    starts = np.array(bounds, dtype=np.int64)
    sizes = np.diff(starts)
    ends = np.cumsum(gathered, dtype=np.int64)  # [sum E_m*D_m]
    base = np.concatenate([[0], ends[starts[1:-1] - 1]])  # tokens before member m
    counts = np.array(rows, dtype=np.int64)
    member = np.repeat(np.arange(len(sizes)), counts)
    first_row = np.concatenate([[0], np.cumsum(counts)])
    j = np.arange(int(first_row[-1]), dtype=np.int64) - first_row[:-1][member] + 1
    samples = j * length
    # Targets of member m lie in (base_m, base_m + E_m*T_m]: its segment holds the first
    # position reaching each, and the position before a segment ends at base_m.
    pos = np.searchsorted(ends, samples + (base[member] + extra), side="left")
    before = ends[np.maximum(pos - 1, 0)]
    before[pos == 0] = 0
    samples -= before - base[member]
    pos -= starts[:-1][member]
    last = gathered[starts[1:] - 1].tolist()
    result = []
    for m, (total, row, dtype) in enumerate(zip(totals, rows, widths)):
        out = np.empty((total + 1, 2), dtype=dtype)
        out[0] = 0
        out[1 : row + 1, 0] = pos[first_row[m] : first_row[m + 1]]
        out[1 : row + 1, 1] = samples[first_row[m] : first_row[m + 1]]
        out[row + 1 :, 0] = sizes[m] - 1  # past the stream's end: the partial sample
        out[row + 1 :, 1] = last[m] - extra
        result.append(out)
    return result


__all__ = ["gpt_indices_many"]
