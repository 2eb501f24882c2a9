"""``packing="best_fit"``: every epoch's documents packed into samples by best fit decreasing.

A document is cut only when longer than a sample; samples end in padding
(:mod:`megadata_core.indices.packed_samples` builds the arrays). Options it owns:
``packing_alignment`` (THD for context parallelism: documents placed by their lengths
rounded up to a multiple, needs ``document_masking``). Its labels that cross into the
next document are masked by default (a packed document's neighbour is arbitrary).
"""

from __future__ import annotations

import numpy as np

from megadata_core.cache.keys import PACKING_ALGORITHM_VERSION
from megadata_core.checks import unsigned
from megadata_core.errors import DataError
from megadata_core.indices.arrays import scan_equal
from megadata_core.indices.packed_samples import (
    PIECE_ARRAYS,
    packed_epochs,
    packed_indices,
    packing_units,
)
from megadata_core.indices.packing import pack_layout
from megadata_core.modes import Packing, Pieces, Shuffle, counting, outside, register


class BestFit(Packing):
    """Best-fit packed samples; ``alignment``: None, or ``packing_alignment``."""

    name = "best_fit"
    packed = True
    masks_cross_document_labels = True

    def __init__(self, alignment: int | None = None) -> None:
        self.alignment = alignment

    def configured(self, config) -> BestFit:
        alignment = config.packing_alignment
        if alignment is None:
            return self if self.alignment is None else BestFit()
        if not config.document_masking:
            raise DataError(
                f"packing_alignment: {alignment} needs packing='best_fit' and "
                f"document_masking=True (got packing={config.packing!r}, "
                f"document_masking={config.document_masking}); the padded layout is "
                "read through document masks"
            )
        length = config.sequence_length
        if alignment > length:
            raise DataError(
                f"packing_alignment: {alignment} is larger than sequence_length {length}"
            )
        if length % alignment:
            raise DataError(
                f"packing_alignment: sequence_length {length} is not a multiple of "
                f"{alignment} (the padded layout fills the sample exactly)"
            )
        return BestFit(alignment)

    def __repr__(self) -> str:
        return f"<packing mode 'best_fit' alignment={self.alignment}>"

    def array_names(self, shuffle: Shuffle) -> tuple[str, ...]:
        return PIECE_ARRAYS + (("shuffle_index",) if shuffle.draws else ())

    def empty_arrays(self, shuffle: Shuffle) -> dict[str, np.ndarray]:
        arrays: dict[str, np.ndarray] = {
            "piece_document": np.empty(0, np.int32),
            "bin_offsets": np.zeros(1, np.int64),
            "full_offset": np.empty(0, np.int64),
            "packed_shape": np.array([1, 0, 0, 1], np.int64),
            "shuffle_index": np.empty(0, np.uint32),
        }
        return {name: arrays[name] for name in self.array_names(shuffle)}

    def describe(self, drop_last: bool) -> dict:
        described = {"packing": self.name, "packing_algorithm": PACKING_ALGORITHM_VERSION}
        if self.alignment is not None:  # unaligned keys stay as they were
            described["packing_alignment"] = self.alignment
        return described  # packed samples are never partial: no drop_last

    def build(self, lengths, ids, config, num_samples, drop_last, tokens, empty):
        return packed_indices(
            lengths, ids, config.sequence_length, num_samples, config.random_seed,
            add_extra_token=bool(config.add_extra_token_to_sequence),
            feistel=not config.shuffle_mode.draws, empty=empty, alignment=self.alignment,
        )

    def size(self, lengths, tokens, config, num_samples, drop_last):
        """Whole epochs of B bins; B from the packing alone."""
        _, units, capacity = packing_units(
            lengths, config.sequence_length, bool(config.add_extra_token_to_sequence),
            self.alignment,
        )
        bins = len(pack_layout(units, capacity).bin_offsets) - 1
        epochs = packed_epochs(bins, num_samples)
        return epochs, epochs * bins

    def views(self, dataset, arrays):
        packed = {name: np.asarray(array) for name, array in arrays.items()}
        shape = packed["packed_shape"]
        alignment = self.alignment
        expected = (4,) if alignment is None else (5,)
        if shape.shape != expected or len(packed["bin_offsets"]) < 1:
            raise DataError(
                f"packed_shape: {shape.tolist()} is not [epochs, head, full, capacity"
                + ("]" if alignment is None else ", alignment]")
            )
        epochs, head = int(shape[0]), int(shape[1])
        total = epochs * (len(packed["bin_offsets"]) - 1)
        config = dataset.config
        capacity = config.sequence_length + (dataset._extra if alignment is None else 0)
        if int(shape[3]) != capacity:
            raise DataError(f"packed_shape: capacity {int(shape[3])} != {capacity} (config)")
        if alignment is not None and int(shape[4]) != alignment:
            raise DataError(
                f"packed_shape: alignment {int(shape[4])} != {alignment} (packing_alignment)"
            )
        order = config.shuffle_mode.packed_order(packed, head, total, config.random_seed)
        if len(order) != total:
            raise DataError(f"shuffle_index: {len(order)} entries for {total} samples")
        dataset.shuffle_index = order
        dataset.sample_index = dataset.document_index = None
        dataset._packed = packed
        dataset._total = total

    def epochs(self, dataset) -> int:
        return int(dataset._packed["packed_shape"][0])

    def locate(self, dataset, rows):
        return locate_packed_pieces(dataset._packed, dataset.indexed.sequence_lengths, rows)

    def rows_with(self, dataset, document):
        """Bins (rows before the shuffle) with a piece of ``document``."""
        packed = dataset._packed
        offsets = np.asarray(packed["bin_offsets"])
        bins, pieces = len(offsets) - 1, int(offsets[-1])
        hits = scan_equal(packed["piece_document"], document)
        if not hits.size or not pieces:
            return np.zeros(0, np.int64)
        epoch, local = np.divmod(hits, pieces)
        return epoch * bins + np.searchsorted(offsets, local, side="right") - 1


register(BestFit())


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
        raise outside("shuffle_index", "sample row", rows, epochs * bins)
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
        raise outside("piece_document", "document id", document,
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
