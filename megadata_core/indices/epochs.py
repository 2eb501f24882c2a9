"""How many epochs a request needs, and whether the final epoch is shuffled apart.

All arithmetic is on Python ints, so nothing overflows; the rules are those of
megatron-core 0.16.1 ``GPTDataset`` (``_get_num_tokens_per_epoch``,
``_get_num_epochs`` and the ``separate_final_epoch`` decision in
``_build_document_sample_shuffle_indices``).
"""

from __future__ import annotations

import numpy as np

from megadata_core.checks import check_ids, check_int, check_lengths, id_range
from megadata_core.errors import DataError
from megadata_core.indices.gathers import take_into

#: Megatron shuffles the final epoch apart when it yields fewer than this share of an epoch.
SEPARATE_FINAL_EPOCH_THRESHOLD = 0.80
_GATHER_BLOCK = 1 << 20  # ids per gather: lengths are summed block by block


def tokens_per_epoch(sequence_lengths: np.ndarray, document_ids: np.ndarray | range) -> int:
    """Total tokens of the documents ``document_ids`` (one epoch of a split).

    Args:
        sequence_lengths: int [N] token count of every document of the corpus.
        document_ids: int [D] the documents of the split, each in ``[0, N)``, or a
            ``range`` of them (a slice sum: no gather).

    Returns:
        Python int, ``sum(sequence_lengths[document_ids])`` summed in int64.
    """
    lengths = check_lengths("sequence_lengths", sequence_lengths)
    span = id_range("document_ids", document_ids, len(lengths))
    if span is not None:
        return int(lengths[span.start : span.stop].sum(dtype=np.int64))
    ids = check_ids("document_ids", document_ids, len(lengths))
    # Gathered block by block into one small buffer (no [D] temporary).
    buffer = np.empty(min(ids.size, _GATHER_BLOCK), dtype=lengths.dtype)
    total = 0
    for start in range(0, ids.size, _GATHER_BLOCK):
        block = ids[start : start + _GATHER_BLOCK]
        gathered = buffer[: block.size]
        take_into(lengths, block, gathered)
        total += int(gathered.sum(dtype=np.int64))
    return total


def _extra(add_extra_token: bool | int) -> int:
    return 1 if add_extra_token else 0


def num_epochs(
    tokens_per_epoch: int,
    sequence_length: int,
    num_samples: int | None,
    add_extra_token: bool | int = True,
) -> int:
    """Least E >= 1 with ``E * tokens_per_epoch >= num_samples * sequence_length + extra``.

    ``num_samples=None`` means "one pass over the data" and gives 1, as in Megatron.
    """
    tokens = check_int("tokens_per_epoch", tokens_per_epoch, 1)
    length = check_int("sequence_length", sequence_length, 1)
    if num_samples is None:
        return 1
    samples = check_int("num_samples", num_samples, 0)
    requested = samples * length + _extra(add_extra_token)
    return max(1, -(-requested // tokens))


def samples_in_epochs(
    num_epochs: int,
    tokens_per_epoch: int,
    sequence_length: int,
    add_extra_token: bool | int = True,
    drop_last_partial_sequence: bool = True,
) -> int:
    """Samples that ``num_epochs`` epochs yield: ``(E*T - extra) // S``.

    With ``drop_last_partial_sequence=False`` a trailing partial sample counts too
    (exact ceiling). Megatron's C++ computes that ceiling in float32 and is off by one
    past ~2**24 tokens; this function is exact.
    """
    epochs = check_int("num_epochs", num_epochs, 0)
    tokens = check_int("tokens_per_epoch", tokens_per_epoch, 1)
    length = check_int("sequence_length", sequence_length, 1)
    usable = max(0, epochs * tokens - _extra(add_extra_token))
    if drop_last_partial_sequence:
        return usable // length
    return -(-usable // length)


def separate_final_epoch(
    num_epochs: int,
    tokens_per_epoch: int,
    sequence_length: int,
    num_samples: int | None,
    add_extra_token: bool | int = True,
) -> bool:
    """Whether the final epoch is shuffled on its own (Megatron's rule, same arithmetic).

    True when E > 1 and the samples still needed from the final epoch,
    ``num_samples - samples_in_epochs(E - 1)``, are fewer than
    ``int(0.80 * samples_in_epochs(1))``.
    """
    epochs = check_int("num_epochs", num_epochs, 1)
    if epochs == 1 or num_samples is None:
        if epochs != 1:
            raise DataError(f"num_epochs: {epochs} needs num_samples, got None")
        return False
    samples = check_int("num_samples", num_samples, 0)
    extra = _extra(add_extra_token)
    before_final = samples_in_epochs(epochs - 1, tokens_per_epoch, sequence_length, extra)
    from_final = samples - before_final
    per_epoch = samples_in_epochs(1, tokens_per_epoch, sequence_length, extra)
    if not 0 <= from_final <= per_epoch + 1:
        raise DataError(
            f"num_epochs: {epochs} does not fit num_samples={samples} "
            f"(the final epoch would give {from_final} of {per_epoch} samples)"
        )
    return from_final < int(SEPARATE_FINAL_EPOCH_THRESHOLD * per_epoch)
