"""The indices of a GPT dataset: Megatron's three, and the Feistel mode's.

Megatron-exact (megatron-core 0.16.1 ``GPTDataset``, bit-identical values): the epochs a
request needs and whether the final epoch is shuffled apart (:func:`tokens_per_epoch`,
:func:`num_epochs`, :func:`separate_final_epoch`: Python ints, nothing overflows), the
document index (:func:`document_index`), the shuffle index (:func:`shuffle_index`), and
:func:`gpt_indices` for the three at once with the sample index of
:mod:`.sample_boundaries`. One ``RandomState(random_seed)`` shuffles the document index,
then the shuffle index.

``shuffle="feistel"`` stores only the sample index and ``feistel_split`` = ``[first
sample of the final epoch, epochs]`` (:func:`feistel_gpt_indices`); the document order
and the sample order are keyed bijections (:mod:`megadata_core.indices.feistel`)
computed on demand (:func:`feistel_orders`). Megatron's two-range shuffle is kept: when
the final epoch is separate, its samples are permuted apart from the earlier epochs'.
Not Megatron-compatible.
"""

from __future__ import annotations

import threading

import numpy as np
import numpy.typing as npt

from megadata_core.checks import INT32_MAX, check_ids, check_int, check_lengths, id_range
from megadata_core.errors import DataError
from megadata_core.indices.arrays import (
    Allocate,
    fill_arange,
    in_memory,
    plain,
    shuffle_space,
    take_into,
)
from megadata_core.indices.feistel import FeistelDocumentIndex, FeistelShuffle
from megadata_core.indices.sample_boundaries import sample_index, samples_in_epochs

#: The names of the three arrays :func:`gpt_indices` returns, in its order.
GPT_ARRAYS = ("document_index", "sample_index", "shuffle_index")
#: The arrays a Feistel-mode GPT dataset stores (and caches).
FEISTEL_ARRAYS = ("sample_index", "feistel_split")
#: Megatron shuffles the final epoch apart when it yields fewer than this share of an epoch.
SEPARATE_FINAL_EPOCH_THRESHOLD = 0.80
#: Megatron switches from uint32 to int64 at ``total_size >= iinfo(uint32).max - 1``.
UINT32_LIMIT = int(np.iinfo(np.uint32).max) - 1
_GATHER_BLOCK = 1 << 20  # ids per gather: lengths are summed block by block
_STREAMS = threading.local()  # one RandomState per thread, reseeded for every index


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
    requested = samples * length + (1 if add_extra_token else 0)
    return max(1, -(-requested // tokens))


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
    extra = (1 if add_extra_token else 0)
    before_final = samples_in_epochs(epochs - 1, tokens_per_epoch, sequence_length, extra)
    from_final = samples - before_final
    per_epoch = samples_in_epochs(1, tokens_per_epoch, sequence_length, extra)
    if not 0 <= from_final <= per_epoch + 1:
        raise DataError(
            f"num_epochs: {epochs} does not fit num_samples={samples} "
            f"(the final epoch would give {from_final} of {per_epoch} samples)"
        )
    return from_final < int(SEPARATE_FINAL_EPOCH_THRESHOLD * per_epoch)


def _check_random_state(rng: object) -> np.random.RandomState:
    """Megatron's streams come from the legacy ``RandomState``; a ``Generator`` differs."""
    if not isinstance(rng, np.random.RandomState):
        raise DataError(f"rng: expected numpy.random.RandomState, got {type(rng).__name__}")
    return rng


def document_index(
    doc_ids: np.ndarray | range,
    num_epochs: int,
    rng: np.random.RandomState,
    separate_final_epoch: bool,
    *,
    empty: Allocate = in_memory,
) -> np.ndarray:
    """The ids ``doc_ids`` repeated ``num_epochs`` times and shuffled, bit-identical to
    megatron-core's ``_build_document_index``.

    Megatron tiles with ``numpy.mgrid`` (int64 temporaries), casts to int32 and calls
    ``rng.shuffle``. Here the ids are tiled straight into one preallocated int32 array and
    shuffled in place: ``RandomState.shuffle`` draws the same numbers for any dtype, so the
    stream and the result are the same. With ``separate_final_epoch`` (and E > 1) the first
    E-1 epochs are shuffled together, then the final epoch alone.

    A ``range`` of ids (Megatron's consecutive splits) is written block by block with
    ``arange``: no id array is ever made, and the values are the same. A spilled result
    (file-backed) is filled and shuffled part by part in anonymous memory when it fits
    (:func:`.arrays.shuffle_space`), each part then copied into the file in order.

    Args:
        doc_ids: int [D] document ids, each in ``[0, 2**31 - 1]``, or a ``range`` of them.
        num_epochs: E >= 1.
        rng: the RandomState (advanced in place, as in Megatron).
        separate_final_epoch: shuffle the final epoch on its own.
        empty: where the result is made (:mod:`megadata_core.indices.arrays`; a
            memory-mapped spill file keeps E * D * 4 bytes out of anonymous memory).

    Returns:
        int32 [E * D] from ``empty("document_index", ...)``.
    """
    span = id_range("doc_ids", doc_ids, INT32_MAX + 1)
    ids = span if span is not None else check_ids("doc_ids", doc_ids, INT32_MAX + 1)
    epochs = check_int("num_epochs", num_epochs, 1)
    _check_random_state(rng)
    count = len(ids)
    result = empty("document_index", (epochs * count,), np.dtype(np.int32))
    out = plain(result)
    parts = [epochs - 1, 1] if separate_final_epoch and epochs > 1 else [epochs]
    done = 0
    for repeats in parts:  # each shuffled apart, in memory when a spill's is too slow
        with shuffle_space(empty, out[done * count : (done + repeats) * count]) as work:
            _tile(work.reshape(repeats, count), ids, span)
            rng.shuffle(work)
        done += repeats
    return result


def _tile(rows: np.ndarray, ids: np.ndarray | range, span: range | None) -> None:
    """Write ``ids`` into every row of int32 ``rows`` [R, D], block by block: a ``range``
    (``span``) as ``arange`` blocks, no [D] temporary."""
    if span is None:
        rows[0] = ids
    else:
        fill_arange(rows[0], span.start)
    for row in range(1, len(rows)):
        rows[row] = rows[0]


def shuffle_index(
    num_samples: int,
    total_size: int,
    rng: np.random.RandomState,
    *,
    empty: Allocate = in_memory,
) -> np.ndarray:
    """``[0, num_samples)`` shuffled, then ``[num_samples, total_size)`` shuffled apart,
    bit-identical to megatron-core's ``_build_shuffle_index``.

    Built as one ``arange`` shuffled in two in-place views (no concatenation); the
    RandomState draws exactly as Megatron's, which uses the same state right after the
    document index. A spilled result is filled and shuffled a part at a time in
    anonymous memory when it fits (:func:`.arrays.shuffle_space`).

    Args:
        num_samples: size of the first shuffled range (Megatron passes the samples of
            the first E-1 epochs when the final epoch is separate, else ``total_size``).
        total_size: number of samples in the sample index.
        rng: the RandomState (advanced in place).
        empty: where the result is made (:mod:`megadata_core.indices.arrays`).

    Returns:
        uint32 [total_size], or int64 [total_size] when ``total_size >= 2**32 - 2``.
    """
    first = check_int("num_samples", num_samples, 0)
    total = check_int("total_size", total_size, 0)
    if first > total:
        raise DataError(f"num_samples: {first} exceeds total_size {total}")
    _check_random_state(rng)
    dtype = np.int64 if total >= UINT32_LIMIT else np.uint32
    result = empty("shuffle_index", (total,), np.dtype(dtype))
    out = plain(result)
    for lo, hi in ((0, first), (first, total)):  # shuffled apart; an empty part draws nothing
        with shuffle_space(empty, out[lo:hi]) as work:  # in memory when a spill's is too slow
            fill_arange(work, lo)
            rng.shuffle(work)
    return result


def seeded_random_state(seed: int) -> np.random.RandomState:
    """A ``RandomState`` in the state ``RandomState(seed)`` starts in (the same stream),
    reused per thread: ``seed()`` on an existing one is far cheaper than a new one (numpy
    draws OS entropy first), and a blend of 1,000 small corpora builds 2,000 indices.
    Valid until this thread asks again."""
    rng = getattr(_STREAMS, "rng", None)
    if rng is None:
        rng = _STREAMS.rng = np.random.RandomState(seed)
    else:
        rng.seed(seed)
    return rng


def gpt_indices(
    sequence_lengths: np.ndarray,
    document_ids: np.ndarray | range,
    sequence_length: int,
    num_samples: int | None,
    random_seed: int,
    *,
    add_extra_token: bool = True,
    drop_last_partial_sequence: bool = True,
    empty: Allocate = in_memory,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(document_index, sample_index, shuffle_index)`` equal to megatron-core 0.16.1's
    ``GPTDataset._build_document_sample_shuffle_indices`` for the same inputs.

    One ``RandomState(random_seed)`` shuffles the document index, then the shuffle index.
    Megatron passes ``drop_last_partial_sequence=True`` except for the validation split
    (``drop_last_partial_validation_sequence``).

    Args:
        sequence_lengths: int [N] lengths of every document of the corpus.
        document_ids: int [D] the split's documents (Megatron: ``numpy.arange(lo, hi)``),
            or the ``range(lo, hi)`` itself (same values; no id array is read or made).
        sequence_length: S >= 1.
        num_samples: samples requested, or None for one epoch.
        random_seed: in ``[0, 2**32)``.
        empty: where the three arrays are made (:mod:`megadata_core.indices.arrays`:
            spill files keep them out of anonymous memory; the values are the same).

    Returns:
        int32 [E*D]; int32/int64 [num_samples' + 1, 2]; uint32/int64 [num_samples'],
        where num_samples' is what E epochs yield (>= num_samples).
    """
    seed = check_int("random_seed", random_seed, 0)
    if seed >= 1 << 32:
        raise DataError(f"random_seed: {seed} must be < 2**32")
    tokens = tokens_per_epoch(sequence_lengths, document_ids)
    if tokens == 0:
        raise DataError("document_ids: the documents hold no tokens")
    epochs = num_epochs(tokens, sequence_length, num_samples, add_extra_token)
    separate = separate_final_epoch(epochs, tokens, sequence_length, num_samples, add_extra_token)
    rng = seeded_random_state(seed)
    documents = document_index(document_ids, epochs, rng, separate, empty=empty)
    samples = sample_index(
        sequence_lengths,
        documents,
        sequence_length,
        epochs,
        tokens,
        drop_last_partial_sequence,
        add_extra_token,
        empty=empty,
    )
    total = len(samples) - 1
    if separate:
        first = samples_in_epochs(epochs - 1, tokens, sequence_length, add_extra_token)
    else:
        first = total
    return documents, samples, shuffle_index(first, total, rng, empty=empty)


class FeistelOrder:
    """The Feistel sample order: ``[0, first)`` and ``[first, total)`` each permuted by
    their own key (Megatron's two-range shuffle when the final epoch is separate)."""

    def __init__(self, first: int, total: int, seed: int) -> None:
        self.first, self.total = int(first), int(total)
        self._head = FeistelShuffle(self.first, seed, 0) if self.first else None
        rest = self.total - self.first
        self._tail = FeistelShuffle(rest, seed, 1) if rest else None

    def __len__(self) -> int:
        return self.total

    def __getitem__(self, positions: npt.ArrayLike) -> np.ndarray:
        """int [B] positions in ``[0, total)`` -> int64 [B] sample index rows."""
        where = np.asarray(positions, dtype=np.int64)
        out = np.empty(where.shape, dtype=np.int64)
        head = where < self.first
        # (positions below ``first`` exist only with a head, at or past it with a tail)
        if head.any() and self._head is not None:
            out[head] = self._head[where[head]]
        if not head.all() and self._tail is not None:
            out[~head] = self._tail[where[~head] - self.first] + self.first
        return out


def feistel_gpt_indices(
    sizes: np.ndarray,
    doc_ids: np.ndarray | range,
    sequence_length: int,
    num_samples: int | None,
    seed: int,
    tokens: int,
    *,
    add_extra_token: bool = True,
    drop_last_partial_sequence: bool = True,
    empty: Allocate = in_memory,
) -> dict[str, np.ndarray]:
    """The stored arrays of a Feistel-mode GPT dataset.

    Args:
        sizes: int [N] sequence lengths of the corpus.
        doc_ids: int [D] the split's document ids (or a step-1 range).
        sequence_length: S.
        num_samples: samples requested (None: one epoch).
        seed: the dataset seed.
        tokens: tokens per epoch (:func:`megadata_core.indices.tokens_per_epoch`), > 0.
        add_extra_token: samples span S + 1 tokens (Megatron's default).
        drop_last_partial_sequence: drop a last sample shorter than S + extra.
        empty: where the sample index is made (:mod:`megadata_core.indices.arrays`).

    Returns:
        ``{"sample_index": int [K + 1, 2], "feistel_split": int64 [2]}`` (first sample of
        the final epoch, epochs).
    """
    extra = int(add_extra_token)
    epochs = num_epochs(tokens, sequence_length, num_samples, extra)
    # The document order is computed block by block as the sample index reads it (no
    # [E * D] array); the dataset recomputes entries on demand, so it is never stored.
    documents = FeistelDocumentIndex(doc_ids, epochs, seed)
    samples = sample_index(
        sizes, documents, sequence_length, epochs, tokens, drop_last_partial_sequence, extra,
        empty=empty,
    )
    first = len(samples) - 1
    if separate_final_epoch(epochs, tokens, sequence_length, num_samples, extra):
        first = samples_in_epochs(epochs - 1, tokens, sequence_length, extra)
    return {
        "sample_index": samples,
        "feistel_split": np.array([first, epochs], dtype=np.int64),
    }


def feistel_orders(
    doc_ids: np.ndarray | range, feistel_split: np.ndarray, total: int, seed: int
) -> tuple[FeistelDocumentIndex, FeistelOrder]:
    """The document index and the sample order of :func:`feistel_gpt_indices`' arrays,
    computed on demand: ``(document_index, shuffle_index)`` for ``total`` samples."""
    first, epochs = (int(value) for value in feistel_split)
    return FeistelDocumentIndex(doc_ids, epochs, seed), FeistelOrder(first, total, seed)
