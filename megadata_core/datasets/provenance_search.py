"""Where a document went: the samples of a split that hold tokens of one document.

The reverse of :func:`~megadata_core.datasets.provenance.batch_segments`, from the index
arrays alone, in memory bounded by a block whatever the corpus size (the arrays may be
memory maps of billions of entries; they are scanned block by block, vectorized):

1. where the document sits in its dataset's order: the positions of ``document_index``
   that hold it (concat; one scan, or one inverse Feistel bijection per epoch), or the
   pieces of ``piece_document`` that hold it (best_fit);
2. which sample-index rows (bins) hold those positions: two binary searches over the
   nondecreasing first column of ``sample_index`` per position, then the rows' pieces
   (a row whose only piece of the document is empty does not count);
3. where the shuffle put those rows: a scan of ``shuffle_index``, or the inverse of the
   Feistel order (no scan);
4. in a blend, which blend positions read those member samples: a scan of
   ``dataset_index`` and ``dataset_sample_index`` (a chain's passes first mapped to
   chain samples).
"""

from __future__ import annotations

import numpy as np

from megadata_core.checks import check_int
from megadata_core.datasets.epoch_chain import EpochChain
from megadata_core.errors import DataError
from megadata_core.indices.gathers import SCAN_BLOCK


def _holding(dataset, rows: np.ndarray, document: int) -> np.ndarray:
    """The rows among ``rows`` with at least one token of ``document``, sorted."""
    rows = np.unique(rows)
    if not rows.size:
        return rows
    pieces = dataset._pieces(rows)
    owner = np.repeat(rows, np.diff(pieces.first, append=len(pieces.length)))
    hold = (np.asarray(pieces.document) == document) & (pieces.length > 0)
    return np.unique(owner[hold])


def unshuffle(dataset, rows: np.ndarray) -> np.ndarray:
    """int64 [K] sorted: the sample positions whose ``shuffle_index`` value is one of
    ``rows`` (a scan, or the inverse bijection of a Feistel order)."""
    return dataset.config.shuffle_mode.unshuffle(dataset.shuffle_index, rows)


def leaf_samples(dataset, document: int) -> np.ndarray:
    """int64 [K] sorted: the samples of a GPTDataset holding tokens of ``document``.

    Raises:
        DataError: ``document`` outside the corpus's sequences.
    """
    count = len(dataset.indexed.sequence_lengths)
    document = check_int("document", document, minimum=0)
    if document >= count:
        raise DataError(f"document: {document} is outside the corpus's {count:,} documents "
                        f"[0, {count}) ({getattr(dataset.indexed, 'path_prefix', '?')})")
    rows = dataset.config.packing_mode.rows_with(dataset, document)
    return unshuffle(dataset, _holding(dataset, rows, document))


def member_samples(member, document: int) -> np.ndarray:
    """:func:`leaf_samples` of a blend member: a GPTDataset, or an :class:`EpochChain`
    (every pass; chain sample numbers)."""
    if not isinstance(member, EpochChain):
        return leaf_samples(member, document)
    found = [
        leaf_samples(one, document) + member.offsets[p]
        for p, one in enumerate(member.passes)  # one trip per pass
    ]
    return np.concatenate(found) if found else np.zeros(0, np.int64)


def where_document(dataset, member: int, document: int, block: int = SCAN_BLOCK) -> np.ndarray:
    """int64 [K] sorted: the samples of a split (a GPTDataset, or a blend of them) that
    hold tokens of ``document`` of member ``member`` (its index in the blend; 0 for a
    single dataset).

    Raises:
        DataError: a member or document out of range.
    """
    members = getattr(dataset, "datasets", None)
    if members is None:
        if member != 0:
            raise DataError(f"member: {member} for a split of one dataset (only 0)")
        return leaf_samples(dataset, document)
    member = check_int("member", member, minimum=0)
    if member >= len(members):
        raise DataError(f"member: {member} is outside the blend's {len(members)} datasets")
    local = member_samples(members[member], document)
    if not local.size:
        return local
    ids, samples = dataset.dataset_index, dataset.dataset_sample_index
    wanted = np.unique(local)
    found = []
    for lo in range(0, len(ids), block):  # one trip per block of the blend
        mine = np.flatnonzero(np.asarray(ids[lo : lo + block]) == member)
        if not mine.size:
            continue
        picked = np.asarray(samples[lo : lo + block])[mine].astype(np.int64)
        hits = mine[np.isin(picked, wanted)]
        if hits.size:
            found.append(hits + lo)
    return np.concatenate(found).astype(np.int64) if found else np.zeros(0, np.int64)
