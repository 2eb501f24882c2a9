"""A Grain source that reads a host's samples ahead, many in one batched read.

Grain's reader asks a host's source for its indices in order (``host_index + j *
host_count`` for j = 0, 1, ...; from several threads at once). Where requests follow that
order, :class:`ReadAheadSource` reads :attr:`~ReadAheadSource.READ_AHEAD` of them in one
batched read of megadata's and hands them out from there; any other request (a user's
random access) is read alone.
"""

from __future__ import annotations

import threading

import numpy as np


class ReadAheadSource:
    """Base of the MaxText sources: subclasses say how to read a batch of samples
    (:meth:`_read_batch`: name -> array [B, ...]) and one (:meth:`_read_single`), and call
    :meth:`_start` once they know their length."""

    #: Samples of one host read together when the requests go in order.
    READ_AHEAD = 64
    #: Batches of read-ahead samples kept (the threads of Grain's prefetch work on a few).
    BLOCKS_KEPT = 4

    def _start(self, length: int, host_index: int, host_count: int) -> None:
        self._length = int(length)
        self._host = (int(host_index), int(host_count))
        self._blocks: dict[int, dict[str, np.ndarray]] = {}  # block number -> batch arrays
        self._last_block = -2
        self._lock = threading.Lock()

    def _read_batch(self, indices: np.ndarray) -> dict[str, np.ndarray]:
        """The samples at ``indices`` (int64 [B]): name -> array [B, ...]."""
        raise NotImplementedError

    def _read_single(self, index: int) -> dict[str, np.ndarray]:
        """Sample ``index`` alone: name -> array."""
        raise NotImplementedError

    def __len__(self) -> int:
        return self._length

    def __getitem__(self, index: int) -> dict[str, np.ndarray]:
        if index < 0:
            index += self._length
        if not 0 <= index < self._length:
            raise IndexError(f"index {index} out of range for {self._length} samples")
        host_index, host_count = self._host
        step, other_host = divmod(int(index) - host_index, host_count)
        if other_host or step < 0:
            return self._read_single(int(index))
        block, row = divmod(step, self.READ_AHEAD)
        with self._lock:
            batch = self._blocks.get(block)
            in_order = block in (self._last_block, self._last_block + 1)
            self._last_block = block
            if batch is None and in_order:
                steps = np.arange(block * self.READ_AHEAD, (block + 1) * self.READ_AHEAD)
                indices = host_index + steps * host_count
                batch = self._read_batch(indices[indices < self._length])
                self._blocks[block] = batch
                for old in [b for b in self._blocks if b < block - self.BLOCKS_KEPT + 1]:
                    del self._blocks[old]
        if batch is None:  # out of order (a random access): this sample alone
            return self._read_single(int(index))
        return {name: values[row] for name, values in batch.items()}
