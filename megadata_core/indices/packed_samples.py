"""The index of ``packing="best_fit"``: every epoch's documents packed into samples.

Per epoch the split's documents are put in a shuffled order and packed by best fit
decreasing (:func:`megadata_core.indices.packing.best_fit_pack`) into bins of
``capacity = sequence_length + add_extra_token`` tokens; the order only breaks ties
between documents of equal length, so every epoch has the same number of bins B (best
fit decreasing's bin count depends only on the multiset of lengths), holding other
documents; the bins' shapes are even the same (:class:`~.packing.PackLayout`, computed
once), only which document of a length fills which place changes. A sample is one bin:
its pieces back to back, padded at the end. Epochs are as many as the samples asked for
need, ``E = ceil(num_samples / B)`` (one for None), and the
E * B samples are then shuffled globally.

Randomness, all from ``random_seed`` (the output is a pure function of the lengths, the
ids, the config and the seed):

* ``shuffle="megatron"``: one ``RandomState(seed)`` shuffles ``arange(D)`` for epoch 0,
  1, ... in turn, then draws the sample shuffle with Megatron's rule
  (:func:`megadata_core.indices.shuffle_index`): when E > 1 and the final epoch supplies
  fewer than ``int(0.8 * B)`` of the samples asked for, the first E - 1 epochs are
  shuffled together and the final epoch apart (so its unused tail is not spread over the
  whole run), else all E * B together;
* ``shuffle="feistel"``: epoch e's document order is the Feistel order of epoch e
  (:func:`megadata_core.indices.feistel_document_order`), and the sample order is the
  lazy two-range Feistel order of :mod:`megadata_core.indices.gpt` (only
  ``feistel_split`` = [first sample of the final range, epochs] is stored).

Stored arrays (4 bytes a piece where ids fit int32, about what concat stores a document):

* ``piece_document`` [E * P]: the corpus document of every piece, epoch after epoch;
* ``bin_offsets`` int64 [B + 1]: bin b of epoch e holds piece rows
  ``e * P + bin_offsets[b] .. e * P + bin_offsets[b + 1]`` (the shapes repeat per epoch);
* ``full_offset`` int64 [E * F]: the offset of the one piece of full bin f < F of epoch e
  (bins 0 .. F-1 of an epoch hold capacity-sized pieces of cut documents); any other
  piece starts at ``(length // capacity) * capacity`` of its document (0 unless cut) and
  runs to the document's end;
* ``packed_shape`` int64 [4]: E, the first shuffled range (E * B, or (E - 1) * B), F,
  capacity; [5] with ``packing_alignment`` a (its fifth value): documents are placed by
  their lengths rounded up to a multiple of a (:func:`packing_units`), the capacity is S
  and a piece's padded length is its length rounded up likewise;
* ``shuffle_index`` [E * B] (``"megatron"``; uint32, int64 past 2**32 - 2): the sample
  order. ``"feistel"`` stores none: :class:`~.sample_order.FeistelOrder` over
  ``(packed_shape[1], E * B)``.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np

from megadata_core.checks import check_ids, check_int, id_range, narrow_int
from megadata_core.errors import DataError
from megadata_core.indices.arrays import (
    SCRATCH_PREFIX,
    Allocate,
    fill_arange,
    in_memory,
    plain,
    shuffle_space,
)
from megadata_core.indices.feistel import DOCUMENTS_STREAM, epoch_key, feistel_range
from megadata_core.indices.gpt import (
    SEPARATE_FINAL_EPOCH_THRESHOLD,
    seeded_random_state,
    shuffle_index,
)
from megadata_core.indices.packing import fill_documents, full_offsets, pack_layout

#: The arrays a best_fit GPT dataset stores (and ``shuffle_index`` unless Feistel).
PIECE_ARRAYS = ("piece_document", "bin_offsets", "full_offset", "packed_shape")


_ID_BLOCK = 1 << 24  # piece rows turned into corpus ids per step


def packed_epochs(bins_per_epoch: int, num_samples: int | None) -> int:
    """E: epochs of B bins that hold ``num_samples`` samples (1 for None)."""
    if num_samples is None:
        return 1
    return max(1, -(-num_samples // bins_per_epoch))


def _packed_first_range(bins_per_epoch: int, epochs: int, num_samples: int | None) -> int:
    """Samples in the first shuffled range: E * B, or (E - 1) * B when the final epoch is
    shuffled apart (E > 1 and it supplies fewer than ``int(0.8 * B)`` samples asked for)."""
    total = epochs * bins_per_epoch
    if epochs > 1 and num_samples is not None:
        from_final = num_samples - (epochs - 1) * bins_per_epoch
        if from_final < int(SEPARATE_FINAL_EPOCH_THRESHOLD * bins_per_epoch):
            return total - bins_per_epoch
    return total


def packing_units(
    lengths: np.ndarray,
    sequence_length: int,
    add_extra_token: bool,
    alignment: int | None,
    empty: Allocate = in_memory,
) -> tuple[int, np.ndarray, int]:
    """``(capacity, units, unit_capacity)``: the bin's tokens and what best fit packs.

    Unaligned: ``capacity = S + extra`` tokens and the lengths as they are. With an
    ``alignment`` a (THD layout for context parallelism, a = 2 * cp_size): every document
    piece takes its length rounded up to a multiple of a, so the packing runs in units of
    a tokens: ``units = ceil(lengths / a)`` (int [D]) into bins of ``S / a`` units; the bin
    holds S tokens (the extra label token of the last position is padding). A document
    longer than S is cut into S-token pieces (the last of them maybe padded) and a rest.
    ``units`` comes from ``empty`` (a working array), written a block at a time.
    """
    if alignment is None:
        capacity = sequence_length + int(bool(add_extra_token))
        return capacity, lengths, capacity
    alignment = check_int("packing_alignment", alignment, 1)
    if sequence_length % alignment:
        raise DataError(
            f"packing_alignment: sequence_length {sequence_length} is not a multiple of "
            f"{alignment}"
        )
    if alignment == 1:
        return sequence_length, lengths, sequence_length
    lengths = np.asarray(lengths)
    dtype = np.int32 if lengths.dtype == np.int32 else np.int64
    units = empty(SCRATCH_PREFIX + "pack-units", (len(lengths),), dtype)
    for lo in range(0, len(lengths), _ID_BLOCK):
        part = units[lo : lo + _ID_BLOCK]
        np.add(lengths[lo : lo + _ID_BLOCK], alignment - 1, out=part, casting="unsafe")
        part //= alignment
    return sequence_length, units, sequence_length // alignment


def packed_indices(
    sequence_lengths: np.ndarray,
    document_ids: np.ndarray | range,
    sequence_length: int,
    num_samples: int | None,
    random_seed: int,
    *,
    add_extra_token: bool = True,
    feistel: bool = False,
    empty: Allocate = in_memory,
    alignment: int | None = None,
) -> dict[str, np.ndarray]:
    """The stored arrays of a best_fit GPT dataset (see the module docstring).

    Args:
        sequence_lengths: int [N] lengths of every document of the corpus.
        document_ids: int [D] the split's documents, or a step-1 ``range`` of them.
        sequence_length: S >= 1.
        num_samples: samples requested, or None for one epoch.
        random_seed: in ``[0, 2**32)``.
        add_extra_token: bins hold S + 1 tokens (labels are the shift).
        feistel: the orders are Feistel bijections (computed on demand, no
            ``shuffle_index``), else Megatron's RandomState draws.
        empty: where the results and the large working arrays are made (memory, or files
            of the cache entry: :mod:`megadata_core.indices.arrays`).
        alignment: None, or a; documents placed by their padded length (see
            :func:`packing_units`); bins hold S tokens, S a multiple of a.

    Returns:
        ``{name: array}``: :data:`PIECE_ARRAYS`, and ``shuffle_index`` unless ``feistel``.
    """
    seed = check_int("random_seed", random_seed, 0)
    if seed >= 1 << 32:
        raise DataError(f"random_seed: {seed} must be < 2**32")
    length = check_int("sequence_length", sequence_length, 1)
    if num_samples is not None:
        num_samples = check_int("num_samples", num_samples, 0)
    corpus = np.asarray(sequence_lengths)
    span = id_range("document_ids", document_ids, len(corpus))
    if span is not None:
        lengths = corpus[span.start : span.stop]  # a view: pack_layout reads int32 as is
        high_id = span.stop - 1
    else:
        ids = check_ids("document_ids", document_ids, len(corpus)).astype(np.int64)
        lengths = corpus[ids]
        high_id = int(ids.max()) if ids.size else 0
    if int(lengths.sum(dtype=np.int64)) == 0:
        raise DataError(f"document_ids: the {len(lengths)} documents hold no tokens")
    capacity, units, unit_capacity = packing_units(
        lengths, length, add_extra_token, alignment, empty
    )
    count = len(lengths)

    rng = None if feistel else seeded_random_state(seed)
    order_dtype = narrow_int(count - 1)

    def epoch_order(epoch: int) -> np.ndarray | Callable[[int, int], np.ndarray]:
        if rng is None:  # computed a block at a time where the fill reads it
            key = epoch_key(seed, epoch, DOCUMENTS_STREAM)
            return lambda lo, hi: feistel_range(lo, hi, count, key)
        order = empty(f"{SCRATCH_PREFIX}pack-order-{epoch % 2}", (count,), order_dtype)
        with shuffle_space(empty, order) as work:
            fill_arange(work)  # no [D] temporary
            rng.shuffle(plain(work))  # the same draws for any dtype
        return order

    # One worker thread packs while this thread draws the document orders (the
    # shuffles release the GIL): the layout beside epoch 0's order, epoch e's fill
    # beside epoch e + 1's order, the last fill beside the sample shuffle. The draws
    # stay in this thread, in the same sequence, so the values never depend on it.
    with ThreadPoolExecutor(1, thread_name_prefix="megadata-pack") as pool:
        pending = pool.submit(pack_layout, units, unit_capacity, empty)  # one layout, every epoch
        order = epoch_order(0)
        layout = pending.result()
        bins, pieces, full = len(layout.bin_offsets) - 1, layout.num_pieces, layout.full_count
        epochs = packed_epochs(bins, num_samples)
        documents = empty("piece_document", (epochs * pieces,), narrow_int(high_id))
        full_offset = empty("full_offset", (epochs * full,), np.int64)

        def fill(epoch: int, order: np.ndarray | Callable[[int, int], np.ndarray]) -> None:
            rows = documents[epoch * pieces : (epoch + 1) * pieces]
            fill_documents(layout, order, rows, empty=empty)
            if full:
                full_offset[epoch * full : (epoch + 1) * full] = full_offsets(
                    rows[:full], capacity
                )
            for lo in range(0, pieces, _ID_BLOCK):  # positions in the split -> corpus ids
                part = rows[lo : lo + _ID_BLOCK]
                if span is None:
                    part[...] = ids[part]
                elif span.start:
                    part += span.start

        filled: Future[None] | None = None
        for epoch in range(epochs):
            if filled is not None:
                filled.result()
            filled = pool.submit(fill, epoch, order)
            if epoch + 1 < epochs:
                order = epoch_order(epoch + 1)
        del order  # the last epoch's: its fill holds it while it needs it
        head = _packed_first_range(bins, epochs, num_samples)
        order_of_samples = (
            shuffle_index(head, epochs * bins, rng, empty=empty) if rng is not None else None
        )
        if filled is not None:
            filled.result()
    out = {
        "piece_document": documents,
        "bin_offsets": layout.bin_offsets,
        "full_offset": full_offset,
        "packed_shape": np.array(
            [epochs, head, full, capacity] + ([] if alignment is None else [alignment]),
            dtype=np.int64,
        ),
    }
    if order_of_samples is not None:
        out["shuffle_index"] = order_of_samples
    return out
