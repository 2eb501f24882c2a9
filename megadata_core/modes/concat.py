"""``packing="concat"``: Megatron's samples, fixed windows of the concatenated documents.

Sample j starts at token j * S of the stream of the split's documents in the shuffle's
document order (every epoch), and spans S + extra tokens (consecutive samples overlap by
the extra token): Megatron's ``_build_document_sample_shuffle_indices``, value for value.
The arrays are the shuffle mode's (:meth:`~megadata_core.modes.Shuffle.concat_arrays`).
A sample is a run of pieces: its first document from an offset, whole documents, and its
last document up to an offset (Megatron's ``_query_document_sample_shuffle_indices``):
:func:`locate_pieces` finds every piece of every sample of a batch at once,
:func:`one_sample` reads one sample in scalar steps. Index values out of range are
DataErrors naming the array (unsigned views: a negative value fails as one too large
does), free when nothing is wrong.
"""

from __future__ import annotations

import numpy as np

from megadata_core.checks import unsigned
from megadata_core.errors import DataError
from megadata_core.indices import num_epochs, samples_in_epochs
from megadata_core.indices.feistel import FeistelDocumentIndex
from megadata_core.modes import Packing, Pieces, Shuffle, counting, outside, register

_BEGIN_END = np.array([0, 1], dtype=np.int64)
_BEGIN_END_U64 = np.array([0, 1], dtype=np.uint64)  # uint64 + int64 would be float64


class Concat(Packing):
    """Megatron's concat samples (the default)."""

    name = "concat"

    def array_names(self, shuffle: Shuffle) -> tuple[str, ...]:
        return shuffle.concat_arrays()

    def empty_arrays(self, shuffle: Shuffle) -> dict[str, np.ndarray]:
        arrays: dict[str, np.ndarray] = {
            "document_index": np.empty(0, np.int32),
            "sample_index": np.zeros((1, 2), np.int32),
            "shuffle_index": np.empty(0, np.uint32),
            "feistel_split": np.array([0, 1], np.int64),
        }
        return {name: arrays[name] for name in shuffle.concat_arrays()}

    def describe(self, drop_last: bool) -> dict:
        return {"drop_last_partial_sequence": drop_last}  # (concat keys stay as they were)

    def build(self, lengths, ids, config, num_samples, drop_last, tokens, empty):
        return config.shuffle_mode.concat_indices(
            lengths, ids, config, num_samples, tokens,
            add_extra_token=bool(config.add_extra_token_to_sequence),
            drop_last_partial_sequence=drop_last, empty=empty,
        )

    def size(self, lengths, tokens, config, num_samples, drop_last):
        extra = int(config.add_extra_token_to_sequence)
        epochs = num_epochs(tokens, config.sequence_length, num_samples, extra)
        samples = samples_in_epochs(epochs, tokens, config.sequence_length, extra, drop_last)
        return epochs, samples

    def views(self, dataset, arrays):
        dataset._packed = None
        # Plain ndarray views: numpy.memmap results pay subclass overhead on every op.
        dataset.sample_index = np.asarray(arrays["sample_index"])
        total = len(dataset.sample_index) - 1
        dataset.document_index, dataset.shuffle_index = dataset.config.shuffle_mode.concat_orders(
            dataset._document_ids(), arrays, total, dataset.config.random_seed
        )
        if len(dataset.shuffle_index) != total:
            raise DataError(
                f"shuffle_index: {len(dataset.shuffle_index)} entries for {total} samples"
            )
        dataset._total = total

    def epochs(self, dataset) -> int:
        return len(dataset.document_index) // max(1, len(dataset.indices))

    def locate(self, dataset, rows):
        return locate_pieces(dataset.sample_index, dataset.document_index,
                             dataset.indexed.sequence_lengths, rows, dataset._extra)

    def one_sample(self, dataset, flat, row):
        return one_sample(flat, dataset.indexed.sequence_pointers, dataset.sample_index,
                          dataset.document_index, dataset.indexed.sequence_lengths, row,
                          dataset._extra)

    def rows_with(self, dataset, document):
        """Sample-index rows whose span includes a position of ``document``."""
        index = dataset.sample_index
        rows = len(index) - 1
        candidates = []
        positions = dataset.config.shuffle_mode.document_positions(
            dataset.document_index, document)
        for position in positions.tolist():  # one per epoch
            # rows r with begin_r <= position <= end_r (both columns nondecreasing)
            upper = _count_below(lambda r: index[r, 0], rows, position, inclusive=True)
            lower = _count_below(lambda r: index[r + 1, 0], rows, position, inclusive=False)
            if lower < upper:
                candidates.append(np.arange(lower, upper, dtype=np.int64))
        return np.concatenate(candidates) if candidates else np.zeros(0, np.int64)

    def batched(self, shuffle: Shuffle) -> bool:
        return shuffle.draws


register(Concat())


def locate_pieces(
    sample_index: np.ndarray,
    document_index: np.ndarray | FeistelDocumentIndex,
    sequence_lengths: np.ndarray,
    rows: np.ndarray,
    extra: int,
) -> Pieces:
    """Every piece of the samples at ``rows`` of the sample index.

    Sample r runs from ``sample_index[r]`` = (position b, offset o) to
    ``sample_index[r + 1]`` = (position e, offset f): document ``document_index[b]`` from
    o, whole documents at positions b+1 .. e-1, and document ``document_index[e]`` up to
    f + extra (exclusive); when b == e, tokens o .. f + extra of that one document.

    Args:
        sample_index: int [n + 1, 2].
        document_index: int [m].
        sequence_lengths: int [N].
        rows: int [B] sample positions (already shuffled: the shuffle index's values),
            each in ``[0, n)``.
        extra: 1 with ``add_extra_token_to_sequence``, else 0.

    Raises:
        DataError: naming the array (``shuffle_index`` for a row outside ``[0, n)``,
            ``sample_index`` for rows that decrease, a position outside the document
            index or a first offset past its document's end, ``document_index`` for a
            document id outside ``sequence_lengths``). Free when nothing is wrong: the
            gathers index with unsigned views, so a negative value raises as one too
            large does instead of counting from the end.
    """
    rows_u = unsigned(rows)
    step = _BEGIN_END_U64 if rows_u.dtype == np.uint64 else _BEGIN_END
    try:
        bounds = sample_index[rows_u[:, None] + step]  # [B, 2, 2]: (b, o), (e, f)
    except IndexError:
        raise outside("shuffle_index", "sample row", rows, len(sample_index) - 1) from None
    begin = bounds[:, 0, 0]
    counts = bounds[:, 1, 0] - begin  # pieces per sample, minus one
    if counts.size and counts.min() < 0:
        raise DataError("sample_index: rows are not increasing (corrupt index)")
    counts += 1
    last = np.add.accumulate(counts, dtype=np.int64)
    first = last - counts
    total = int(last[-1]) if counts.size else 0
    last -= 1
    position = (begin - first).repeat(counts)  # document_index position of every piece
    position += counting(total)
    try:  # a computed document index (Feistel) checks its own positions
        document = document_index[
            unsigned(position) if isinstance(document_index, np.ndarray) else position
        ]
    except IndexError:
        positions = bounds[:, :, 0].reshape(-1)
        raise outside("sample_index", "document_index position", positions,
                       len(document_index)) from None
    try:
        length = sequence_lengths[unsigned(document)].astype(np.int64)
    except IndexError:
        raise outside("document_index", "document id", document,
                       len(sequence_lengths)) from None
    length[last] = bounds[:, 1, 1] + extra if extra else bounds[:, 1, 1]
    offset = bounds[:, 0, 1]
    length[first] -= offset
    if length.size and length.min() < 0:
        raise DataError("sample_index: an offset lies past the end of its document")
    return Pieces(document, length, first, offset)


def one_sample(
    flat: np.ndarray,
    pointers: np.ndarray,
    sample_index: np.ndarray,
    document_index,
    sequence_lengths: np.ndarray,
    row: int,
    extra: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The concat sample at ``row`` of the sample index, read from ``flat``
    (:func:`flat_tokens`): :func:`locate_pieces` and :func:`gather_tokens` for one
    sample, in scalar steps over its few pieces (a per-sample ``__getitem__`` pays a few
    microseconds instead of a batch's fixed cost of numpy calls). Same checks, same
    errors.

    Args:
        flat: every token of the .bin (its dtype).
        pointers: int64 [N] byte pointers of the sequences (whole tokens apart).
        sample_index, document_index, sequence_lengths, extra: as :func:`locate_pieces`.
        row: the sample's row (a shuffle index value).

    Returns:
        ``(tokens, documents, lengths)``: the sample's tokens (``flat``'s dtype, not
        padded: shorter than S + extra for a partial sample), int64 [P] the document of
        each piece and int64 [P] the tokens taken from it.
    """
    total = len(sample_index) - 1
    if not 0 <= row < total:
        raise outside("shuffle_index", "sample row", np.array([row]), total)
    (first, offset), (last, end) = sample_index[row : row + 2].tolist()
    if last < first:
        raise DataError("sample_index: rows are not increasing (corrupt index)")
    if first < 0 or last >= len(document_index):
        raise outside("sample_index", "document_index position", np.array([first, last]),
                       len(document_index))
    if isinstance(document_index, np.ndarray):
        ids = document_index[first : last + 1]
    else:  # a computed (Feistel) document index
        ids = np.asarray(document_index[np.arange(first, last + 1)])
    documents = ids.tolist()
    count = len(sequence_lengths)
    if min(documents) < 0 or max(documents) >= count:
        raise outside("document_index", "document id", ids, count)
    lengths = sequence_lengths[ids].tolist()
    if end + extra > lengths[-1]:
        raise DataError("sample_index: an offset lies past the end of its document")
    starts = (pointers[ids] // flat.itemsize).tolist()
    lengths[-1] = end + extra
    lengths[0] -= offset
    starts[0] += offset
    if min(lengths) < 0:
        raise DataError("sample_index: an offset lies past the end of its document")
    if len(documents) == 1:
        tokens = flat[starts[0] : starts[0] + lengths[0]]
    else:  # a handful of pieces: slices of the map, one copy
        tokens = np.concatenate([flat[b : b + n] for b, n in zip(starts, lengths)])
    return tokens, np.array(documents, dtype=np.int64), np.array(lengths, dtype=np.int64)


def _count_below(column, count: int, value: int, inclusive: bool) -> int:
    """How many of the first ``count`` entries of the nondecreasing ``column`` (indexed
    one entry at a time: a memory map is not copied) are < ``value`` (<= when
    ``inclusive``)."""
    lo, hi = 0, count
    while lo < hi:  # O(log count) scalar reads
        mid = (lo + hi) // 2
        entry = int(column(mid))
        if entry < value or (inclusive and entry == value):
            lo = mid + 1
        else:
            hi = mid
    return lo
