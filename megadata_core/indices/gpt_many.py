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

from megadata_core.errors import DataError
from megadata_core.indices._checks import check_int, id_range
from megadata_core.indices.document_order import document_index
from megadata_core.indices.epochs import num_epochs, samples_in_epochs, separate_final_epoch
from megadata_core.indices.gpt import seeded_random_state
from megadata_core.indices.sample_boundaries import sample_index_dtype
from megadata_core.indices.sample_shuffle import shuffle_index


def gpt_indices_many(
    sequence_lengths: Sequence[np.ndarray],
    document_ids: Sequence[range],
    sequence_length: int,
    num_samples: Sequence[int | None],
    random_seed: int,
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
        random_seed: in ``[0, 2**32)``; every member's stream starts from it.
        drop_last_partial_sequence: per member.

    Returns:
        per member: int32 [E*D]; int32/int64 [samples + 1, 2]; uint32/int64 [samples].

    Raises:
        DataError: a member (named by its position) with ids out of range, no
            documents or no tokens; a bad seed or sequence length.
    """
    seed = check_int("random_seed", random_seed, 0)
    if seed >= 1 << 32:
        raise DataError(f"random_seed: {seed} must be < 2**32")
    length = check_int("sequence_length", sequence_length, 1)
    count = len(document_ids)
    if not len(sequence_lengths) == len(num_samples) == len(drop_last_partial_sequence) == count:
        raise DataError(f"document_ids: {count} members, other arguments differ in length")
    extra = 1 if add_extra_token else 0
    documents, shuffles, gathered, totals, rows, widths = [], [], [], [], [], []
    for member, (lengths, ids, wanted, drop) in enumerate(
        zip(sequence_lengths, document_ids, num_samples, drop_last_partial_sequence)
    ):
        span = id_range(f"document_ids[{member}]", ids, len(lengths))
        if not span:
            raise DataError(f"document_ids[{member}]: {ids!r} is not a non-empty range")
        tokens = int(lengths[span.start : span.stop].sum(dtype=np.int64))
        if tokens == 0:
            raise DataError(f"document_ids[{member}]: the documents hold no tokens")
        epochs = num_epochs(tokens, length, wanted, extra)
        separate = separate_final_epoch(epochs, tokens, length, wanted, extra)
        rng = seeded_random_state(seed)
        order = document_index(span, epochs, rng, separate)
        total = samples_in_epochs(epochs, tokens, length, extra, drop)
        first = samples_in_epochs(epochs - 1, tokens, length, extra) if separate else total
        shuffles.append(shuffle_index(first, total, rng))
        documents.append(order)
        gathered.append(lengths[order])
        totals.append(total)
        rows.append(min(total, max(0, epochs * tokens - extra) // length))
        widths.append(sample_index_dtype(len(order), int(lengths.max())))
    return [
        (order, samples, shuffle)
        for order, samples, shuffle in zip(
            documents, _sample_indices(gathered, totals, rows, widths, length, extra), shuffles
        )
    ]


def _sample_indices(
    gathered: list[np.ndarray],
    totals: list[int],
    rows: list[int],
    widths: list[np.dtype],
    length: int,
    extra: int,
) -> list[np.ndarray]:
    """Every member's sample index from its document-ordered lengths ``gathered[m]``, its
    samples ``totals[m]``, the rows inside its stream ``rows[m]`` (later rows are the
    partial sample) and its dtype: one cumulative sum and one search for all members."""
    sizes = np.array([len(part) for part in gathered], dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(sizes)])
    ends = np.cumsum(np.concatenate(gathered), dtype=np.int64)  # [sum E_m*D_m]
    base = np.concatenate([[0], ends[starts[1:] - 1]])[:-1]  # tokens before member m
    counts = np.array(rows, dtype=np.int64)
    member = np.repeat(np.arange(len(gathered)), counts)
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
    result = []
    for m, (total, row, dtype) in enumerate(zip(totals, rows, widths)):
        out = np.empty((total + 1, 2), dtype=dtype)
        out[0] = 0
        out[1 : row + 1, 0] = pos[first_row[m] : first_row[m + 1]]
        out[1 : row + 1, 1] = samples[first_row[m] : first_row[m + 1]]
        out[row + 1 :, 0] = sizes[m] - 1  # past the stream's end: the partial sample
        out[row + 1 :, 1] = int(gathered[m][-1]) - extra
        result.append(out)
    return result


__all__ = ["gpt_indices_many"]
