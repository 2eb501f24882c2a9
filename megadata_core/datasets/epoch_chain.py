"""``EpochChain``: one dataset's passes, read end to end on one cursor.

A blend schedule reads each member on a cursor that only moves forward, across every
stage and every edit; a member read past its samples goes on with its next epoch. A
static blend builds one GPTDataset of E epochs (Megatron shuffles them together, so
asking for more samples reorders the ones before); the chain holds one GPTDataset per
epoch instead, epoch e drawn from its own seed
(:func:`~megadata_core.indices.schedule.epoch_seed`), so that reading further appends
epochs and never changes one already read. Within an epoch no sample repeats, and its
samples hold every token of the member's documents once (as a one-epoch GPTDataset).

Sample k of the chain is sample ``k - offsets[e]`` of epoch e, the e with
``offsets[e] <= k < offsets[e + 1]``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from megadata_core.datasets.member_reads import member_lengths, read_members
from megadata_core.datasets.positions import sample_position, sample_positions
from megadata_core.errors import DataError
from megadata_core.handover.buffers import BufferPool


class EpochChain:
    """The passes over one member, read in order.

    Args:
        passes: the member's passes (e.g. one-epoch :class:`GPTDataset`\\ s of one corpus
            and split, each with its own seed), in order; a :class:`LazyMembers` makes
            each at its first read.

    Attributes:
        offsets: int64 [P + 1], the chain's first sample of every pass (and its length).
        split: the passes' split.
    """

    def __init__(self, passes: Sequence) -> None:
        if not len(passes):
            raise DataError("passes: a chain needs at least one pass")
        self.passes = passes
        lengths = member_lengths(passes)
        self.offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        first = passes[0]
        self.split = getattr(first, "split", "train")
        self._buffers = BufferPool()

    @property
    def first(self):
        """Pass 0 (its config, corpus and identity are the member's)."""
        return self.passes[0]

    @property
    def indices(self):
        """The member's documents (every pass reads the same ones)."""
        return self.first.indices

    @property
    def epochs(self) -> int:
        """Epochs over the member's documents, all passes together."""
        return sum(int(getattr(one, "epochs", 1)) for one in self.passes)

    @property
    def indexed(self):
        """The member's corpus."""
        return self.first.indexed

    @property
    def config(self):
        return self.first.config

    def description(self) -> dict | None:
        """The member's identity: pass 0's description (the later passes follow from it
        and their number)."""
        describe = getattr(self.first, "description", None)
        return None if describe is None else describe()

    def __len__(self) -> int:
        return int(self.offsets[-1])

    def _locate(self, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        passes = np.searchsorted(self.offsets, positions, side="right") - 1
        return passes, positions - self.offsets[passes]

    def __getitem__(self, index: int) -> dict:
        position = sample_position(index, len(self), self.split)
        passes, samples = self._locate(np.array([position], dtype=np.int64))
        return self.passes[int(passes[0])][int(samples[0])]

    def __getitems__(self, indices) -> dict[str, np.ndarray]:
        """The samples at ``indices`` (B positions), stacked; one read per pass."""
        passes, samples = self._locate(sample_positions(indices, len(self), self.split))
        return read_members(self.passes, passes, samples, self._buffers)

    def sample_text(self, index: int):
        """The member's :meth:`GPTDataset.sample_text` of chain sample ``index``."""
        position = sample_position(index, len(self), self.split)
        passes, samples = self._locate(np.array([position], dtype=np.int64))
        return self.passes[int(passes[0])].sample_text(int(samples[0]))

    def __repr__(self) -> str:
        return (
            f"EpochChain(passes={len(self.passes)}, samples={len(self)}, "
            f"first={self.first!r})"
        )
