"""Where the tokens of GPT samples are: their *pieces*, for a batch at once or one sample.

A sample is a run of pieces: its first document from an offset, whole documents, and
its last document up to an offset (Megatron's ``_query_document_sample_shuffle_indices``).
:func:`locate_pieces` finds every piece of every sample of a batch at once from the
sample index rows (:func:`locate_packed_pieces` from a best_fit index); the copies of
:mod:`.reading` then gather them. :func:`one_sample` does both for one concat sample in
scalar steps, for a per-sample ``__getitem__``. Index values out of range are
DataErrors naming the array (unsigned views: a negative value fails as one too large
does), free when nothing is wrong.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from megadata_core.checks import first_outside, out_of_range, unsigned
from megadata_core.errors import DataError
from megadata_core.indices.feistel import FeistelDocumentIndex

_BEGIN_END = np.array([0, 1], dtype=np.int64)
_BEGIN_END_U64 = np.array([0, 1], dtype=np.uint64)  # uint64 + int64 would be float64
_multiples: dict[int, np.ndarray] = {}  # step -> read-only int64 0, step, 2 * step, ...


def counting(count: int, step: int = 1) -> np.ndarray:
    """int64 [count] ``0, step, .. (count - 1) * step`` (a read-only slice of a shared
    array, grown on demand: no array is made per batch)."""
    values = _multiples.get(step)
    if values is None or count > len(values):
        size = max(count, 4096, 2 * len(values) if values is not None else 0)
        values = np.arange(0, size * step, step, dtype=np.int64)
        values.flags.writeable = False
        _multiples[step] = values
    return values[:count]


@dataclass(frozen=True)
class Pieces:
    """The pieces of a batch of B samples, P pieces in all (every sample has >= 1).

    A piece starts at token 0 of its document except the first of each sample, which
    starts at that sample's ``offset`` (concat samples), or at ``starts`` when given
    (packed samples: any piece may start inside its document).

    Attributes:
        document: int [P] sequence id of each piece.
        length: int64 [P] tokens in the piece (>= 0).
        first: int64 [B] index of each sample's first piece.
        offset: int [B] first token of each sample's first piece within its document.
        starts: int64 [P] first token of every piece, or None (see above).
        slot: int64 [P] tokens each piece takes in its sample, its length and the padding
            after it (``packing_alignment``: the length rounded up to a multiple), or
            None (pieces back to back, each ``length`` tokens).
    """

    document: np.ndarray
    length: np.ndarray
    first: np.ndarray
    offset: np.ndarray
    starts: np.ndarray | None = None
    slot: np.ndarray | None = None

    @property
    def start(self) -> np.ndarray:
        """int64 [P] first token of each piece within its document."""
        if self.starts is not None:
            return self.starts
        start = np.zeros(len(self.length), dtype=np.int64)
        start[self.first] = self.offset
        return start


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
        raise _outside("shuffle_index", "sample row", rows, len(sample_index) - 1) from None
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
        raise _outside("sample_index", "document_index position", positions,
                       len(document_index)) from None
    try:
        length = sequence_lengths[unsigned(document)].astype(np.int64)
    except IndexError:
        raise _outside("document_index", "document id", document,
                       len(sequence_lengths)) from None
    length[last] = bounds[:, 1, 1] + extra if extra else bounds[:, 1, 1]
    offset = bounds[:, 0, 1]
    length[first] -= offset
    if length.size and length.min() < 0:
        raise DataError("sample_index: an offset lies past the end of its document")
    return Pieces(document, length, first, offset)


def locate_packed_pieces(
    arrays: dict[str, np.ndarray], sequence_lengths: np.ndarray, rows: np.ndarray
) -> Pieces:
    """Every piece of the packed samples (bins) ``rows`` of a best_fit index
    (:mod:`megadata_core.indices.packed_samples`), as :class:`Pieces` with ``starts``.

    Args:
        arrays: ``piece_document``, ``bin_offsets``, ``full_offset``, ``packed_shape``.
        sequence_lengths: int [N] the corpus lengths.
        rows: int [B] bins in ``[0, E * B)`` (the shuffle index's values).

    Raises:
        DataError: naming the array whose values do not fit (``shuffle_index`` for a row
            outside the bins, ``piece_document`` for a document outside the corpus).
    """
    offsets = arrays["bin_offsets"]
    shape = arrays["packed_shape"]
    epochs, _, full, capacity = (int(value) for value in shape[:4])
    alignment = int(shape[4]) if len(shape) > 4 else None
    bins, pieces = len(offsets) - 1, int(offsets[-1])
    rows = np.asarray(rows).astype(np.int64, copy=False)
    if rows.size and (int(rows.min()) < 0 or int(rows.max()) >= epochs * bins):
        raise _outside("shuffle_index", "sample row", rows, epochs * bins)
    epoch, local = np.divmod(rows, bins)
    begin = offsets[local]
    counts = offsets[local + 1] - begin
    begin += epoch * pieces
    last = np.add.accumulate(counts, dtype=np.int64)
    first = last - counts
    total = int(last[-1]) if counts.size else 0
    piece = (begin - first).repeat(counts)
    piece += counting(total)
    document = arrays["piece_document"][piece]
    try:
        length = sequence_lengths[unsigned(document)].astype(np.int64)
    except IndexError:
        raise _outside("piece_document", "document id", document,
                       len(sequence_lengths)) from None
    if alignment is None:
        starts = length // capacity
    else:  # a document placed by its padded length: full pieces while S units remain
        starts = length + (alignment - 1)
        starts //= alignment
        starts //= capacity // alignment
    starts *= capacity
    whole = np.flatnonzero(local < full)  # full bins: one capacity-sized piece each
    at = first[whole]
    if whole.size:
        starts[at] = arrays["full_offset"][epoch[whole] * full + local[whole]]
    length -= starts
    slot = None
    if alignment is None:
        length[at] = capacity
    else:  # the last full piece of a document may hold fewer than S tokens
        np.minimum(length, capacity, out=length)
        slot = length + (alignment - 1)
        slot //= alignment
        slot *= alignment
    return Pieces(document, length, first, starts[first], starts, slot)


def _outside(name: str, what: str, values: np.ndarray, high: int) -> DataError:
    value = first_outside(np.asarray(values).astype(np.int64), high)
    if value is None:  # (not reached: callers raise on a value outside)
        return DataError(f"{name}: a {what} is out of range [0, {high})")
    return out_of_range(name, what, value, high)


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
        raise _outside("shuffle_index", "sample row", np.array([row]), total)
    (first, offset), (last, end) = sample_index[row : row + 2].tolist()
    if last < first:
        raise DataError("sample_index: rows are not increasing (corrupt index)")
    if first < 0 or last >= len(document_index):
        raise _outside("sample_index", "document_index position", np.array([first, last]),
                       len(document_index))
    if isinstance(document_index, np.ndarray):
        ids = document_index[first : last + 1]
    else:  # a computed (Feistel) document index
        ids = np.asarray(document_index[np.arange(first, last + 1)])
    documents = ids.tolist()
    count = len(sequence_lengths)
    if min(documents) < 0 or max(documents) >= count:
        raise _outside("document_index", "document id", ids, count)
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
