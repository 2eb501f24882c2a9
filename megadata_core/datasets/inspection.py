"""What a corpus or a built split holds, as plain arrays for programs that show it.

Pure numpy over the readers and datasets of the floors below; nothing here plots or
prints. ``tools/inspect_data.py`` formats and draws these.

* :func:`document_lengths`, :func:`length_percentiles`, :func:`binned_lengths`,
  :func:`count_token`, :func:`ends_with`: a corpus's documents and tokens.
* :func:`prefix_counts`: how many samples of each dataset the first m samples of a blend
  hold, for many m at once (its realized shares over the training steps).
* :func:`sample_sources`: for samples of a GPT split or a blend, which dataset, which of
  its samples, and which corpus document every token comes from.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from megadata_core.datasets.masks import unslotted
from megadata_core.errors import DataError

#: The percentiles ``length_percentiles`` reports by default.
PERCENTILES = (0, 1, 10, 50, 90, 99, 100)
_SCAN_CHUNK = 1 << 24  # tokens counted per step by count_token


def document_lengths(indexed) -> np.ndarray:
    """int64 [D] tokens of each document of an IndexedDataset (its sequences' sum)."""
    lengths = np.asarray(indexed.sequence_lengths, dtype=np.int64)
    bounds = np.asarray(indexed.document_indices, dtype=np.int64)
    running = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=running[1:])
    return running[bounds[1:]] - running[bounds[:-1]]


def length_percentiles(
    lengths: np.ndarray, percentiles: Sequence[float] = PERCENTILES
) -> np.ndarray:
    """float64 [len(percentiles)] percentiles of ``lengths`` (numpy's linear rule);
    NaNs for no lengths."""
    lengths = np.asarray(lengths)
    if lengths.size == 0:
        return np.full(len(percentiles), np.nan)
    return np.percentile(lengths, percentiles).astype(np.float64)


def binned_lengths(lengths: np.ndarray, bins: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Documents in file order cut into at most ``bins`` runs of equal count:
    ``(first int64 [K], mean float64 [K], largest int64 [K])`` of each run (K <= bins).
    A trend in the means along the file is an ordering artifact of the corpus."""
    lengths = np.asarray(lengths, dtype=np.int64)
    if bins < 1:
        raise DataError(f"bins: {bins} must be >= 1")
    if lengths.size == 0:
        empty = np.zeros(0, dtype=np.int64)
        return empty, np.zeros(0), empty
    first = np.unique(np.linspace(0, len(lengths), min(bins, len(lengths)) + 1)[:-1].astype(
        np.int64))
    counts = np.diff(np.append(first, len(lengths)))
    mean = np.add.reduceat(lengths, first) / counts
    return first, mean, np.maximum.reduceat(lengths, first)


def count_token(
    indexed, token_id: int, progress: Callable[[int], object] | None = None
) -> int:
    """How many times ``token_id`` occurs in the corpus's sequences (a chunked scan of
    every token; ``progress(tokens)`` after each chunk)."""
    lengths = np.asarray(indexed.sequence_lengths, dtype=np.int64)
    total = int(lengths.sum())
    flat = indexed.token_view()
    count = 0
    if flat is not None:
        pointers = np.asarray(indexed.sequence_pointers, dtype=np.int64)
        end = int(pointers[-1]) // indexed.dtype.itemsize + int(lengths[-1]) if total else 0
        for start in range(0, end, _SCAN_CHUNK):
            piece = flat[start : min(end, start + _SCAN_CHUNK)]
            count += int(np.count_nonzero(piece == token_id))
            if progress is not None:
                progress(len(piece))
        return count
    for start in range(0, len(lengths), 4096):  # pread / remote: sequences in batches
        stop = min(len(lengths), start + 4096)
        tokens = indexed.read_bytes(
            int(indexed.sequence_pointers[start]), int(lengths[start:stop].sum())
        )
        count += int(np.count_nonzero(tokens == token_id))
        if progress is not None:
            progress(len(tokens))
    return count


def ends_with(indexed, token_id: int) -> int:
    """How many documents end with ``token_id`` (their last non-empty sequence's last
    token; documents without tokens do not count)."""
    lengths = np.asarray(indexed.sequence_lengths, dtype=np.int64)
    bounds = np.asarray(indexed.document_indices, dtype=np.int64)
    if len(lengths) == 0:
        return 0
    # the last non-empty sequence before each document's end
    filled = np.where(lengths > 0, np.arange(len(lengths)), -1)
    last = np.maximum.accumulate(filled)[np.maximum(bounds[1:] - 1, 0)]
    own = (bounds[1:] > bounds[:-1]) & (last >= bounds[:-1])
    sequences = last[own]
    itemsize = indexed.dtype.itemsize
    at = np.asarray(indexed.sequence_pointers, dtype=np.int64)[sequences] // itemsize
    at += lengths[sequences] - 1
    flat = indexed.token_view()
    if flat is not None:
        tokens = flat[at]
    else:
        tokens = indexed.read_ranges(at * itemsize, np.ones(len(at), dtype=np.int64))
    return int(np.count_nonzero(tokens == token_id))


def prefix_counts(dataset_index: np.ndarray, datasets: int, steps: np.ndarray) -> np.ndarray:
    """int64 [len(steps), datasets]: samples of dataset j among the first ``steps[k]``
    samples of a blend order (``dataset_index`` int [size]; steps in ``[0, size]``)."""
    index = np.asarray(dataset_index)
    steps = np.asarray(steps, dtype=np.int64)
    if steps.size and (steps.min() < 0 or steps.max() > len(index)):
        raise DataError(f"steps: must lie in [0, {len(index)}], got {steps.min()}..{steps.max()}")
    counts = np.empty((len(steps), datasets), dtype=np.int64)
    for j in range(datasets):  # one pass per dataset, never per sample
        counts[:, j] = np.searchsorted(np.flatnonzero(index == j), steps, side="left")
    return counts


def schedule_shares(
    dataset_index: np.ndarray, starts: np.ndarray, stage_weights: np.ndarray, steps: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A blend schedule's requested and realized shares after each of ``steps`` samples
    (int [T], each in ``[1, size]``): ``(requested, realized, distance)``, float64 [T, n]
    each. ``requested[t]``: the weights (normalized) of the stage that sample
    ``steps[t] - 1`` is in; ``realized[t]``: each dataset's share of that stage's samples
    so far; ``distance[t]``: ``|count - weight x samples|`` within the stage, in samples
    (under 1 for the balanced order)."""
    steps = np.asarray(steps, dtype=np.int64)
    begin = np.asarray(starts, dtype=np.int64)
    weights = np.asarray(stage_weights, dtype=np.float64)
    n = weights.shape[1]
    if steps.size and steps.min() < 1:
        raise DataError(f"steps: must be >= 1, got {int(steps.min())}")
    stage = np.searchsorted(begin, steps - 1, side="right") - 1
    first = begin[stage]
    counts = prefix_counts(dataset_index, n, steps)
    before = prefix_counts(dataset_index, n, np.minimum(begin, len(dataset_index)))[stage]
    within = (steps - first).astype(np.float64)[:, None]
    requested = weights[stage]
    realized = (counts - before) / within
    distance = np.abs((counts - before) - requested * within)
    return requested, realized, distance


@dataclass(frozen=True)
class SampleSources:
    """Where B samples of a split come from.

    Attributes:
        dataset_id: int64 [B] the member dataset of a blend (0 for a single dataset).
        member_sample: int64 [B] the sample of that member.
        first_document: int64 [B] the corpus sequence each sample starts in.
        documents: int64 [B, S + extra] the corpus sequence of every text token (tokens
            are the first S, labels the last S), -1 for padding; None unless asked for.
    """

    dataset_id: np.ndarray
    member_sample: np.ndarray
    first_document: np.ndarray
    documents: np.ndarray | None = None


def members(dataset) -> list:
    """The GPT datasets of a split: a blend's members, or ``[dataset]``."""
    return list(getattr(dataset, "datasets", [dataset]))


def sample_sources(dataset, indices, *, tokens: bool = False) -> SampleSources:
    """:class:`SampleSources` of the samples at ``indices`` of a GPTDataset or a
    BlendedDataset of GPTDatasets (``tokens``: also every token's document).

    Raises:
        DataError: an index outside ``[0, len(dataset))``, naming the split.
    """
    positions = np.asarray(indices).reshape(-1)
    if positions.size and positions.dtype.kind not in "iu":
        raise DataError(f"indices: {positions.dtype} values are not sample indices")
    positions = positions.astype(np.int64)
    size = len(dataset)
    outside = (positions < 0) | (positions >= size)
    if outside.any():
        raise DataError(
            f"indices: sample {int(positions[outside][0])} is outside the "
            f"{getattr(dataset, 'split', '?')} split's {size:,} samples [0, {size})"
        )
    if hasattr(dataset, "dataset_index"):
        ids = np.asarray(dataset.dataset_index)[positions].astype(np.int64)
        samples = np.asarray(dataset.dataset_sample_index)[positions].astype(np.int64)
    else:
        ids, samples = np.zeros(len(positions), dtype=np.int64), positions
    parts = members(dataset)
    first = np.zeros(len(positions), dtype=np.int64)
    documents = None
    if tokens:
        config = parts[0].config
        width = config.sequence_length + int(config.add_extra_token_to_sequence)
        documents = np.full((len(positions), width), -1, dtype=np.int64)
    for j in np.unique(ids).tolist():  # one call per member, not per sample
        rows = np.flatnonzero(ids == j)
        member = parts[j]
        shuffled = np.asarray(member.shuffle_index)[samples[rows]].astype(np.int64)
        pieces = member._pieces(shuffled)  # concat windows or packed bins alike
        first[rows] = pieces.document[pieces.first]
        if documents is not None:
            documents[rows] = _token_documents(pieces, len(rows), documents.shape[1])
    return SampleSources(ids, samples, first, documents)


def _token_documents(pieces, count: int, width: int) -> np.ndarray:
    """int64 [B, width]: the sequence of each text token of B = ``count`` samples made
    of ``pieces`` (:class:`~megadata_core.modes.Pieces`), -1 past a padded
    (packed) sample's end and on the padding between documents (``packing_alignment``)."""
    pieces = unslotted(pieces)
    per_sample = np.diff(np.append(pieces.first, len(pieces.length)))
    owner = np.repeat(np.arange(count), per_sample)  # sample of each piece
    token_owner = np.repeat(owner, pieces.length)
    tokens = np.zeros(count, dtype=np.int64)  # text tokens of each sample
    np.add.at(tokens, owner, pieces.length)
    sample_start = np.cumsum(tokens) - tokens
    column = np.arange(len(token_owner), dtype=np.int64) - sample_start[token_owner]
    keep = column < width
    out = np.full((count, width), -1, dtype=np.int64)
    owned = np.repeat(np.asarray(pieces.document, dtype=np.int64), pieces.length)
    out[token_owner[keep], column[keep]] = owned[keep]
    return out


def read_regions(
    sources: SampleSources, corpus_sizes: Sequence[int], batch_size: int, regions: int
) -> np.ndarray:
    """int64 [datasets, regions, batches]: samples of consecutive batches of
    ``batch_size`` (in ``sources`` order) that start in each equal region of each
    dataset's corpus (region r of a corpus of N sequences: ids ``[r N / R, (r+1) N / R)``).
    """
    if batch_size < 1 or regions < 1:
        raise DataError(f"batch_size {batch_size} and regions {regions} must be >= 1")
    sizes = np.maximum(np.asarray(corpus_sizes, dtype=np.int64), 1)
    count = len(sources.dataset_id)
    batches = -(-count // batch_size)
    region = sources.first_document * regions // sizes[sources.dataset_id]
    region = np.clip(region, 0, regions - 1)
    batch = np.arange(count, dtype=np.int64) // batch_size
    flat = (sources.dataset_id * regions + region) * batches + batch
    counts = np.bincount(flat, minlength=len(sizes) * regions * batches)
    return counts.reshape(len(sizes), regions, batches)
