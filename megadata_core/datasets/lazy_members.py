"""A blend's member datasets made at first access, their lengths known up front.

A warm start of a blend of 10,000 corpora would otherwise make 30,000 GPTDatasets (one
per prefix and split) before the first batch, most of them read much later: ~0.25 s of
objects, and as many again in garbage-collector passes over them in a process that
imported a framework. :class:`LazyMembers` is the sequence a :class:`BlendedDataset`
holds instead: ``lengths`` (int64 [M]) answers every sizing question, ``members[j]``
makes member j once (``make(j)``, checked when the sequence was made, see the builder)
and keeps it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

import numpy as np


class LazyMembers(Sequence):
    """``M`` datasets of one ``split``: ``lengths`` int64 [M] (``len`` of each), item j
    made by ``make(j)`` at its first access (thread-safe, once). ``make`` must be
    picklable: a pickled sequence carries it, not the datasets it made."""

    def __init__(self, make: Callable[[int], object], lengths: np.ndarray, split: str) -> None:
        self._make = make
        self.lengths = np.asarray(lengths, dtype=np.int64).reshape(-1)
        self.split = split
        self._made: dict[int, object] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self.lengths)

    def __getitem__(self, number):
        if isinstance(number, slice):
            return [self[n] for n in range(*number.indices(len(self)))]
        if isinstance(number, (bool, np.bool_)) or not isinstance(number, (int, np.integer)):
            raise TypeError(f"member index must be an int, got {type(number).__name__}")
        number = int(number)
        if number < 0:
            number += len(self)
        if not 0 <= number < len(self):
            raise IndexError(f"member {number} of {len(self)}")
        member = self._made.get(number)
        if member is None:
            with self._lock:
                member = self._made.get(number)
                if member is None:
                    member = self._made[number] = self._make(number)
        return member

    @property
    def made(self) -> int:
        """How many members were made so far."""
        return len(self._made)

    def __getstate__(self) -> dict:
        return {"make": self._make, "lengths": self.lengths, "split": self.split}

    def __setstate__(self, state: dict) -> None:
        type(self).__init__(self, state["make"], state["lengths"], state["split"])

    def __repr__(self) -> str:
        return f"LazyMembers(split={self.split!r}, members={len(self)}, made={self.made})"
