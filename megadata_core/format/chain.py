"""Runs of sequences of several corpora read as one corpus (the windows of raw shards).

A :class:`CorpusChain` holds parts ``(corpus, first, stop)``: sequences ``[first, stop)``
of an :class:`~megadata_core.format.IndexedDataset`, in order. It answers what a GPT
dataset reads of a corpus (``sequence_lengths``, ``sequence_pointers``,
``document_indices``, ``dtype``, ``read_ranges``) over a virtual ``.bin`` in which each
part's bytes follow the previous part's with one token of gap, so that a read the GPT
dataset merges never spans two parts. Every sequence is one document.

A chain of conversation pieces also holds its roles (``roles``: one roles corpus per part,
the same sequences taken): :attr:`CorpusChain.roles` is the chain of those, read as the
roles sibling of the chain (:func:`~megadata_core.datasets.conversations.open_roles`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from megadata_core.errors import DataError


class CorpusChain:
    """Sequences of several corpora as one corpus (read-only; all parts of one dtype).

    Args:
        parts: ``(corpus, first, stop)`` per part: an IndexedDataset and the half-open
            range of its sequences taken, in chain order.
        roles: None, or one corpus per part: the roles of that part's tokens (uint8, the
            same sequences), chained as :attr:`roles`.
    """

    pointers_aligned = True
    multimodal = False

    def __init__(self, parts: Sequence[tuple[Any, int, int]],
                 roles: Sequence[Any] | None = None) -> None:
        if not parts:
            raise DataError("CorpusChain: no parts")
        if roles is not None and len(roles) != len(parts):
            raise DataError(f"CorpusChain: {len(roles)} roles corpora for {len(parts)} parts")
        dtypes = {np.dtype(corpus.dtype) for corpus, _, _ in parts}
        if len(dtypes) != 1:
            raise DataError(f"CorpusChain: parts of dtypes {sorted(map(str, dtypes))}")
        self.dtype = dtypes.pop()
        self._parts = [(corpus, int(first), int(stop)) for corpus, first, stop in parts]
        lengths, pointers, bases = [], [], [0]
        itemsize = self.dtype.itemsize
        for corpus, first, stop in self._parts:
            if not 0 <= first <= stop <= len(corpus.sequence_lengths):
                raise DataError(f"CorpusChain: sequences [{first}, {stop}) outside {corpus!r}")
            part_lengths = np.asarray(corpus.sequence_lengths[first:stop])
            start = int(corpus.sequence_pointers[first]) if stop > first else 0
            part_pointers = np.asarray(corpus.sequence_pointers[first:stop], np.int64)
            lengths.append(part_lengths.astype(np.int32, copy=False))
            pointers.append(part_pointers - start + bases[-1])
            bases.append(bases[-1] + int(part_lengths.sum(dtype=np.int64)) * itemsize + itemsize)
        self.sequence_lengths = np.concatenate(lengths)
        self.sequence_pointers = np.concatenate(pointers)
        self.document_indices = np.arange(len(self.sequence_lengths) + 1, dtype=np.int64)
        self._bases = np.asarray(bases, np.int64)  # [parts + 1] virtual byte offsets
        self._starts = np.asarray(
            [int(c.sequence_pointers[f]) if s > f else 0 for c, f, s in self._parts],
            np.int64,
        )
        #: the chain of the parts' roles (the same sequences), or None
        self.roles: CorpusChain | None = None if roles is None else CorpusChain(
            [(corpus, first, stop) for corpus, (_, first, stop) in zip(roles, self._parts)])

    def __len__(self) -> int:
        return len(self.sequence_lengths)

    @property
    def parts(self) -> list[tuple[Any, int, int]]:
        return list(self._parts)

    def token_view(self) -> None:
        """None: the chain is not one memory map (reads go through :meth:`read_ranges`)."""
        return None

    def check_files(self) -> None:
        for corpus, _, _ in self._parts:
            check = getattr(corpus, "check_files", None)
            if check is not None:
                check()

    def read_bytes(self, byte_offset: int, count: int) -> np.ndarray:
        return self.read_ranges(np.array([byte_offset], np.int64), np.array([count], np.int64))

    def read_ranges(self, byte_offsets: np.ndarray, counts: np.ndarray) -> np.ndarray:
        """The tokens of many ranges of the virtual .bin (int64 [R] byte offsets, int64
        [R] token counts), concatenated in the order given; each range lies in one part."""
        byte_offsets = np.asarray(byte_offsets, np.int64)
        counts = np.asarray(counts, np.int64)
        out = np.empty(int(counts.sum()), self.dtype)
        if not len(out):
            return out
        part = np.searchsorted(self._bases, byte_offsets, side="right") - 1
        itemsize = self.dtype.itemsize
        placed = np.cumsum(counts) - counts
        for k in np.unique(part).tolist():  # one gather per part (a window has a few)
            corpus = self._parts[k][0]
            chosen = np.flatnonzero(part == k)
            first = (byte_offsets[chosen] - self._bases[k] + self._starts[k]) // itemsize
            flat = corpus.token_view()
            if flat is None:
                tokens = corpus.read_ranges(first * itemsize, counts[chosen])
            else:
                sizes = counts[chosen]
                steps = np.repeat(first - (np.cumsum(sizes) - sizes), sizes)
                steps += np.arange(len(steps))
                tokens = flat[steps]
            where = np.repeat(placed[chosen] - (np.cumsum(counts[chosen]) - counts[chosen]),
                              counts[chosen]) + np.arange(int(counts[chosen].sum()))
            out[where] = tokens
        return out

    def __repr__(self) -> str:
        return f"CorpusChain({len(self._parts)} parts, {len(self)} sequences)"
