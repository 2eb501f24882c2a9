"""``order="windows"``: the order of a raw-shards member, over seeded windows of pieces.

A raw member's shards are cut into pieces (the preprocessing plan's tasks: about
``piece_size`` bytes of lines, a compressed file, or row groups). Each epoch permutes
the split's pieces (seeded by the config's seed, the split and the epoch) and groups
them, in that order, into windows of ``window`` pieces (the last may hold fewer; the
first epoch's first windows ramp up from ``first_window`` pieces, doubling). A
window's documents are shuffled across its pieces and cut into samples by the packing
mode, and its samples are shuffled: a GPT dataset over the window's documents, seeded by
its own seed. The epoch's samples are its windows' samples, window after window.

Everything here is a function of the seed, the split, the epoch and the piece count:
never of timing, worker counts or hosts.
"""

from __future__ import annotations

import zlib

import numpy as np

from megadata_core.errors import DataError
from megadata_core.modes import Mode, register


class Windows(Mode):
    """Seeded windows of pieces: documents shuffled within a window, samples too."""

    kind = "raw_order"
    name = "windows"

    def describe(self) -> dict:
        return {"raw_order": self.name, "version": 1}

    def seed(self, seed: int, split: str, epoch: int, window: int | None = None) -> int:
        """A 31-bit seed of (config seed, split, epoch[, window]): the window's GPT
        dataset draws its orders from it (``window`` None: the epoch's permutation)."""
        words = [int(seed) & 0xFFFFFFFF, zlib.crc32(split.encode()), int(epoch),
                 0 if window is None else int(window) + 1]
        state = np.random.SeedSequence(words).generate_state(1, np.uint32)[0]
        return int(state) & 0x7FFFFFFF

    def epoch_windows(self, pieces: int, window: int, seed: int, split: str,
                      epoch: int, first_window: int | None = None) -> list[np.ndarray]:
        """The pieces (int64 ids in ``[0, pieces)``) of each window of one epoch. The
        first epoch's windows ramp up from ``first_window`` pieces, doubling up to
        ``window`` (the first batch waits for one small window); None: no ramp."""
        if pieces < 1:
            raise DataError(f"raw shards: no pieces in the {split} split")
        if window < 1:
            raise DataError(f"window: {window} must be >= 1 piece")
        order = np.random.RandomState(self.seed(seed, split, epoch)).permutation(pieces)
        order = order.astype(np.int64)
        sizes = []
        size = window if epoch > 0 or first_window is None else min(window, first_window)
        total = 0
        while total < pieces:
            sizes.append(min(size, pieces - total))
            total += sizes[-1]
            size = min(window, 2 * size)
        bounds = np.cumsum([0, *sizes])
        return [order[start:stop] for start, stop in zip(bounds[:-1], bounds[1:])]

    def need_order(self, pieces: int, window: int, seed: int, split: str,
                   first_window: int | None = None) -> np.ndarray:
        """int64 [pieces]: the pieces in the order the first epoch reads them (the order
        a background tokenizer makes them in)."""
        return np.concatenate(self.epoch_windows(pieces, window, seed, split, 0, first_window))


register(Windows())
