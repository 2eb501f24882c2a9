"""Which documents a training step read: every sample of a global batch as its segments.

A *segment* is a run of one sample's text taken from one document: the member dataset
(index into the blend's prefixes), the document (sequence id in its corpus), the tokens
``[start, start + length)`` of that document, and where they sit in the sample's text
(``column``, text coordinates: S + extra tokens, so a concat sample's last token, the
extra one, is only a label). Found from the index arrays alone (blend ``dataset_index``
/ ``dataset_sample_index``, a chain's passes, ``shuffle_index``, ``sample_index`` /
``document_index`` or a best_fit index): O(batch) work, nothing read from any ``.bin``.

* :func:`_leaf_reads`: the GPT datasets (and their local samples) behind a split's
  samples, through blends, blend schedules and epoch chains.
* :func:`batch_segments`: the :class:`Segments` of samples of a split.
* :func:`step_samples` / :func:`sample_steps`: the global samples of training step N and
  the step (and data-parallel rank) of a sample, with a constant global batch size or a
  :class:`~megadata_core.batch_ramp.BatchSizeSchedule` (its ``runs``: steps are
  arithmetic per run of equal-sized steps).

Where a document went: the samples of a split that hold tokens of one document.

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

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from megadata_core.checks import check_int
from megadata_core.datasets.gpt_dataset import GPTDataset
from megadata_core.datasets.reading import sample_positions
from megadata_core.datasets.scheduled_blend import EpochChain
from megadata_core.errors import DataError
from megadata_core.indices.arrays import SCAN_BLOCK


@dataclass(frozen=True)
class _LeafRead:
    """Samples of a split that one GPT dataset (a leaf) holds.

    Attributes:
        dataset: the GPTDataset (a blend member, or a pass of a member's chain).
        dataset_id: the member's index in the blend (0 for a single dataset).
        rows: int64 [K] which of the asked samples these are.
        local: int64 [K] the samples of ``dataset`` they are.
    """

    dataset: GPTDataset
    dataset_id: int
    rows: np.ndarray
    local: np.ndarray


def _members_of(dataset, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    if hasattr(dataset, "dataset_index"):
        return dataset._members(positions)  # range-checked against the members
    return np.zeros(len(positions), dtype=np.int64), positions


def _leaf_reads(dataset, positions: np.ndarray) -> list[_LeafRead]:
    """The leaves that hold the samples at ``positions`` (int64 [B], in range) of a
    GPTDataset, a BlendedDataset or ScheduledBlendedDataset of GPTDatasets or
    EpochChains; one entry per (member, pass) the samples touch."""
    ids, samples = _members_of(dataset, positions)
    ids = np.asarray(ids).astype(np.int64)
    samples = np.asarray(samples).astype(np.int64)
    members = getattr(dataset, "datasets", None)
    out = []
    for j in np.unique(ids).tolist():  # one trip per member read, never per sample
        rows = np.flatnonzero(ids == j)
        member = dataset if members is None else members[j]
        if isinstance(member, EpochChain):
            passes, local = member._locate(samples[rows])
            for p in np.unique(passes).tolist():
                mask = passes == p
                out.append(_LeafRead(member.passes[p], j, rows[mask], local[mask]))
        else:
            out.append(_LeafRead(member, j, rows, samples[rows]))
    return out


@dataclass(frozen=True)
class Segments:
    """The segments of B samples, P in all, sample after sample, in text order.

    Attributes:
        sample: int64 [P] which of the B samples (0-based, in the order asked).
        dataset_id: int64 [P] the member dataset (index into the blend's prefixes).
        document: int64 [P] the document (sequence id) in that member's corpus.
        start: int64 [P] its first token taken, within the document.
        length: int64 [P] tokens taken (>= 1: empty pieces are left out).
        column: int64 [P] where the segment starts in the sample's text.
        member_sample: int64 [B] each sample's index in its member dataset.
        sample_dataset: int64 [B] each sample's member dataset.
        width: S + extra, the text length of a sample.
    """

    sample: np.ndarray
    dataset_id: np.ndarray
    document: np.ndarray
    start: np.ndarray
    length: np.ndarray
    column: np.ndarray
    member_sample: np.ndarray
    sample_dataset: np.ndarray
    width: int

    def of(self, row: int) -> slice:
        """The slice of the segments of sample ``row``."""
        lo, hi = np.searchsorted(self.sample, [row, row + 1])
        return slice(int(lo), int(hi))


def _columns(first: np.ndarray, length: np.ndarray) -> np.ndarray:
    """int64 [P]: start of every piece inside its sample (pieces of a sample back to
    back; ``first`` [B] each sample's first piece)."""
    ends = np.cumsum(length)
    starts = ends - length
    counts = np.diff(first, append=len(length))
    return starts - np.repeat(starts[first], counts)


def batch_segments(dataset, indices) -> Segments:
    """:class:`Segments` of the samples at ``indices`` (int [B]) of a split (GPTDataset,
    BlendedDataset or ScheduledBlendedDataset).

    Raises:
        DataError: an index outside the split, or index arrays whose values are out of
            range (naming the array).
    """
    split = getattr(dataset, "split", "train")
    try:
        positions = sample_positions(indices, len(dataset), split)
    except IndexError as error:
        raise DataError(f"indices: {error}") from None
    positions = np.asarray(positions, dtype=np.int64).reshape(-1)
    batch = len(positions)
    parts, member_sample = [], np.zeros(batch, np.int64)
    sample_dataset = np.zeros(batch, np.int64)
    width = 0  # (no parts: no sample read)
    ids, samples = _members_of(dataset, positions)
    member_sample[:] = samples
    sample_dataset[:] = ids
    for leaf in _leaf_reads(dataset, positions):
        gpt = leaf.dataset
        config = gpt.config
        width = config.sequence_length + int(config.add_extra_token_to_sequence)
        pieces = gpt._pieces(gpt.shuffle_index[leaf.local])
        count = np.diff(pieces.first, append=len(pieces.length))
        owner = np.repeat(leaf.rows, count)
        length = pieces.length.astype(np.int64)
        parts.append((
            owner, np.full(len(owner), leaf.dataset_id, np.int64),
            np.asarray(pieces.document).astype(np.int64), pieces.start.astype(np.int64),
            length, _columns(pieces.first, length),
        ))
    if not parts:
        empty = np.zeros(0, np.int64)
        return Segments(empty, empty, empty, empty, empty, empty, member_sample,
                        sample_dataset, 0)
    owner, dataset_id, document, start, length, column = (
        np.concatenate(values) for values in zip(*parts)
    )
    order = np.lexsort((column, owner))
    keep = order[length[order] > 0]
    return Segments(owner[keep], dataset_id[keep], document[keep], start[keep],
                    length[keep], column[keep], member_sample, sample_dataset, width)


# -- training steps -----------------------------------------------------------------------


def _runs(global_batch_size: int | None, schedule) -> tuple[np.ndarray, ...]:
    """``(starts, first_steps, sizes)`` int64 of the runs of equal-sized steps: one run of
    ``global_batch_size`` without a schedule, else the schedule's ``runs``."""
    runs: Sequence[Sequence[int]] | None
    if schedule is None:
        size = check_int("global_batch_size", global_batch_size, minimum=1)
        runs = ((0,), (0,), (size,))
    else:
        runs = getattr(schedule, "runs", None)
        if runs is None:
            raise DataError(f"step_batch_size_schedule: expected a BatchSizeSchedule, got "
                            f"{type(schedule).__name__}")
    return tuple(np.asarray(values, dtype=np.int64) for values in runs)


def step_samples(
    step: int,
    *,
    global_batch_size: int | None = None,
    schedule=None,
    micro_batch_size: int = 1,
    data_parallel_size: int = 1,
    data_parallel_rank: int | None = None,
) -> np.ndarray:
    """int64 [gbs or gbs / dp]: the global samples that training step ``step`` reads, as
    Megatron's sequential sampler hands them out (:class:`PretrainingSampler`): the
    step starts at the samples consumed before it and reads the next ``gbs`` of them;
    with ``data_parallel_rank`` only that rank's (its ``micro_batch_size`` samples of
    every group of ``micro_batch_size * data_parallel_size``), in its reading order.

    Raises:
        DataError: a negative step, a global batch size that the micro-batch and DP
            sizes do not divide, a rank outside ``[0, data_parallel_size)``.
    """
    step = check_int("step", step, minimum=0)
    starts, first_steps, sizes = _runs(global_batch_size, schedule)
    mbs = check_int("micro_batch_size", micro_batch_size, minimum=1)
    dp = check_int("data_parallel_size", data_parallel_size, minimum=1)
    run = int(np.searchsorted(first_steps, step, side="right")) - 1
    size = int(sizes[run])
    first = int(starts[run]) + (step - int(first_steps[run])) * size
    if size % (mbs * dp):
        raise DataError(f"global_batch_size: {size} at step {step} is not divisible by "
                        f"micro_batch_size {mbs} x data_parallel_size {dp}")
    everything = np.arange(first, first + size, dtype=np.int64)
    if data_parallel_rank is None:
        return everything
    rank = check_int("data_parallel_rank", data_parallel_rank, minimum=0)
    if rank >= dp:
        raise DataError(f"data_parallel_rank: {rank} must be < data_parallel_size {dp}")
    return everything.reshape(-1, dp, mbs)[:, rank].reshape(-1)


def sample_steps(
    positions: np.ndarray,
    *,
    global_batch_size: int | None = None,
    schedule=None,
    micro_batch_size: int = 1,
    data_parallel_size: int = 1,
) -> tuple[np.ndarray, np.ndarray]:
    """``(step int64 [K], data-parallel rank int64 [K])`` that read the global samples
    ``positions`` (int [K], >= 0) with :func:`step_samples`' sampler."""
    positions = np.asarray(positions, dtype=np.int64)
    starts, first_steps, sizes = _runs(global_batch_size, schedule)
    mbs = check_int("micro_batch_size", micro_batch_size, minimum=1)
    dp = check_int("data_parallel_size", data_parallel_size, minimum=1)
    run = np.searchsorted(starts, positions, side="right") - 1
    steps, within = np.divmod(positions - starts[run], sizes[run])
    rank = within % (mbs * dp) // mbs
    return first_steps[run] + steps, rank


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


def _leaf_samples(dataset, document: int) -> np.ndarray:
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
    """:func:`_leaf_samples` of a blend member: a GPTDataset, or an :class:`EpochChain`
    (every pass; chain sample numbers)."""
    if not isinstance(member, EpochChain):
        return _leaf_samples(member, document)
    found = [
        _leaf_samples(one, document) + member.offsets[p]
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
        return _leaf_samples(dataset, document)
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
