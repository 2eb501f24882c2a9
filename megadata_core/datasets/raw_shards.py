"""A blend member of raw text shards, read while a background tokenizer makes its corpus.

:class:`RawShards` names the shards (paths, URLs or globs of ``.jsonl``, ``.jsonl.gz``,
``.jsonl.zst``, ``.parquet``), the tokenizer (the preprocessing tokenizer types and
files, as a dict, or a zero-argument factory), the text key and the window; it stands
in a blend wherever a prefix does (``GPTDataConfig(blend=([RawShards(...), "/data/code"],
[0.7, 0.3]))``, or ``{"raw": ...}`` in a JSON data config).

:class:`RawShardsDataset` is one split of it: its pieces (the split's fraction of the
pieces, as Megatron splits documents) in the order of the ``windows`` raw order
(:mod:`megadata_core.modes.windows`). Each window is a :class:`GPTDataset` over the
window's documents (a :class:`~megadata_core.format.chain.CorpusChain` of its pieces),
built with the window's seed: the packing mode cuts it (concat or best_fit, document
masking, THD), and its samples are shuffled. Sample ``k`` of the split is a pure function
of the config, the seed, the shard list and the shards' bytes: a read waits for the
pieces it needs (one progress line every few seconds of waiting), never for more, and
resuming at any consumed-samples count reads the same samples. With ``source_ids`` a
document is named by its piece and its sequence within it (int64 ``piece << 32 |
sequence``): known before the pieces around it are tokenized. A conversation encoder's
pieces carry their roles: the window's chain holds the chain of them
(:attr:`CorpusChain.roles`), and its GPT dataset's loss mask trains the labels of the
config's trained roles, as over a preprocessed conversation corpus.
"""

from __future__ import annotations

import os
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from megadata_core import modes
from megadata_core.cache.keys import gpt_description
from megadata_core.datasets.blended_dataset import read_members
from megadata_core.datasets.config import GPTDataConfig
from megadata_core.datasets.gpt_arrays import drops_last
from megadata_core.datasets.gpt_dataset import GPTDataset
from megadata_core.datasets.raw_member import RawShards
from megadata_core.datasets.reading import sample_position, sample_positions
from megadata_core.errors import DataError
from megadata_core.format.chain import CorpusChain
from megadata_core.handover.pack import BufferPool
from megadata_core.preprocess.stream import RawCorpus, note_wait

_OPEN_WINDOWS = 4  # window datasets kept built per split (reads move forward)


class RawShardsDataset:
    """One split of a raw-shards member: ``len``, ``ds[i]``, ``ds.__getitems__(indices)``
    with a GPT dataset's keys.

    Args:
        raw: the member.
        corpus: its :class:`~megadata_core.preprocess.stream.RawCorpus`.
        pieces: int [P] the split's pieces (ids into ``corpus.tasks``).
        num_samples: samples served (epochs follow one another); None: one epoch (its
            length is known once every piece of the split is tokenized).
        config: the :class:`GPTDataConfig` (its seed, sequence length, packing, masks).
        split: ``"train"``, ``"valid"`` or ``"test"``.
        token_dtype: int32 or int64.
    """

    def __init__(self, raw: RawShards, corpus: RawCorpus, pieces: np.ndarray,
                 num_samples: int | None, config: GPTDataConfig, split: str = "train",
                 *, token_dtype: Any = np.int32) -> None:
        self.raw, self.corpus, self.config, self.split = raw, corpus, config, split
        self.pieces = np.asarray(pieces, np.int64)
        if not len(self.pieces):
            raise DataError(f"raw shards: {raw} has no pieces in the {split} split")
        self.order = modes.raw_order(raw.order)
        self.token_dtype = np.dtype(token_dtype)
        self.num_samples = num_samples
        self._per_epoch = -(-len(self.pieces) // raw.window)  # windows of later epochs
        self._first_epoch = len(self.order.epoch_windows(
            len(self.pieces), raw.window, config.random_seed, split, 0, raw.first_window))
        self._starts = [0]  # first sample of each window, in read order (grows)
        self._windows: OrderedDict[int, _Window] = OrderedDict()
        self._layouts: dict[int, list[np.ndarray]] = {}
        self._buffers = BufferPool()
        self._locks: dict[int, threading.RLock] = {}  # per process: see _lock
        self._served = [time.monotonic(), 0]  # (since, tokens) for the wait line
        corpus.want(self.pieces[self.order.need_order(
            len(self.pieces), raw.window, config.random_seed, split, raw.first_window)],
            urgent=raw.first_window)
        corpus.start()
        if num_samples is None:
            while len(self._starts) <= self._first_epoch:
                self._count_next()
            self._length = self._starts[self._first_epoch]
        else:
            self._length = int(num_samples)

    # -- windows ----------------------------------------------------------------------

    def _epoch_of(self, window: int) -> tuple[int, int]:
        """(epoch, window within it) of a window in read order."""
        if window < self._first_epoch:
            return 0, window
        epoch, number = divmod(window - self._first_epoch, self._per_epoch)
        return epoch + 1, number

    def _epoch_start(self, epoch: int) -> int:
        """The read-order number of an epoch's first window."""
        return 0 if epoch == 0 else self._first_epoch + (epoch - 1) * self._per_epoch

    def _window_pieces(self, window: int) -> np.ndarray:
        epoch, number = self._epoch_of(window)
        layout = self._layouts.get(epoch)
        if layout is None:
            layout = self._layouts[epoch] = self.order.epoch_windows(
                len(self.pieces), self.raw.window, self.config.random_seed, self.split, epoch,
                self.raw.first_window)
            if len(self._layouts) > 2:
                self._layouts.pop(min(self._layouts))
        return self.pieces[layout[number]]

    def _window_config(self, window: int) -> GPTDataConfig:
        epoch, number = self._epoch_of(window)
        seed = self.order.seed(self.config.random_seed, self.split, epoch, number)
        return replace(self.config, random_seed=seed, path_to_cache=None, blend=None,
                       blend_per_split=None, blend_schedule=None, split=None)

    def _chain(self, window: int) -> CorpusChain:
        def waited(index: int, seconds: float) -> None:
            since, tokens = self._served
            rate = tokens / max(time.monotonic() - since, 1e-9)
            note_wait(self.corpus, index, seconds, rate)

        opened = [self.corpus.open_piece_roles(int(i), waited)
                  for i in self._window_pieces(window).tolist()]
        roles = [part[1] for part in opened] if self.corpus.roles else None
        return CorpusChain([(corpus, first, stop) for corpus, _, first, stop in opened], roles)

    def _count_next(self) -> None:
        """Add the sample count of the next window (waiting for its pieces)."""
        window = len(self._starts) - 1
        chain = self._chain(window)
        config = self._window_config(window)
        lengths = chain.sequence_lengths
        tokens = int(lengths.sum(dtype=np.int64))
        extra = int(config.add_extra_token_to_sequence)
        samples = 0
        if tokens > extra:
            samples = config.packing_mode.size(lengths, tokens, config, None,
                                               drops_last(config, self.split))[1]
        self._starts.append(self._starts[-1] + int(samples))
        if samples and len(self._windows) < _OPEN_WINDOWS:
            self._windows[window] = self._build(window, chain, config)

    def _build(self, window: int, chain: CorpusChain, config: GPTDataConfig) -> _Window:
        dataset = GPTDataset(chain, range(len(chain)), None, config, self.split,
                             token_dtype=self.token_dtype)
        expected = self._starts[window + 1] - self._starts[window]
        if len(dataset) != expected:
            raise DataError(f"raw shards: window {window} holds {len(dataset)} samples, "
                            f"sized as {expected}")
        return _Window(dataset, self._window_pieces(window), chain)

    def _window(self, window: int) -> _Window:
        dataset = self._windows.get(window)
        if dataset is None:
            dataset = self._build(window, self._chain(window), self._window_config(window))
            self._windows[window] = dataset
            while len(self._windows) > _OPEN_WINDOWS:
                self._windows.popitem(last=False)
        else:
            self._windows.move_to_end(window)
        return dataset

    def locate(self, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """int64 [B] window (in read order: epoch * windows per epoch + window) and
        int64 [B] sample within it, of the split's samples at ``positions``."""
        highest = int(positions.max()) if len(positions) else -1
        while self._starts[-1] <= highest:
            self._count_next()
            epoch, number = self._epoch_of(len(self._starts) - 1)
            if number == 0 and epoch > 0 and \
                    self._starts[-1] == self._starts[self._epoch_start(epoch - 1)]:
                raise DataError(f"raw shards: an epoch of {self.raw} ({self.split}) makes no "
                                f"sample of {self.config.sequence_length} tokens")
        starts = np.asarray(self._starts, np.int64)
        window = np.searchsorted(starts, positions, side="right") - 1
        return window, positions - starts[window]

    def description(self) -> dict:
        """Every input of the samples (a loader's state carries its hash, so a restore
        onto other data is refused): the corpus, the split's pieces, the raw order and
        window, and what a GPT dataset's description holds."""
        description = gpt_description(
            self.config, self.split,
            {"count": len(self.pieces), "pieces": [int(self.pieces[0]), int(self.pieces[-1])]},
            self.num_samples, self.corpus.describe(), drop_last=drops_last(self.config, self.split))
        description.update(kind="megadata.RawShardsDataset", window=self.raw.window,
                           first_window=self.raw.first_window, **self.order.describe())
        return description

    # -- samples ----------------------------------------------------------------------

    def __len__(self) -> int:
        return self._length

    def __getitems__(self, indices: Sequence[int] | np.ndarray) -> dict[str, np.ndarray]:
        positions = sample_positions(indices, len(self), self.split)
        with self._lock:
            window, local = self.locate(positions)
            touched, which = np.unique(window, return_inverse=True)
            datasets = [self._window(int(w)) for w in touched.tolist()]
        batch = read_members(datasets, which.reshape(-1), local, self._buffers)
        self._served[1] += len(positions) * self.config.sequence_length
        return batch

    def __getitem__(self, index: int) -> dict[str, np.ndarray]:
        position = sample_position(index, len(self), self.split)
        batch = self.__getitems__(np.array([position], np.int64))
        return {key: value[0] for key, value in batch.items()}

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_windows"] = OrderedDict()  # rebuilt where read (pieces may have moved)
        state["_locks"] = {}
        return state

    @property
    def _lock(self) -> threading.RLock:
        """The lock of the window bookkeeping that reader threads share; one per process
        (a fork may copy it held by a thread the child does not have)."""
        return self._locks.setdefault(os.getpid(), threading.RLock())

    def __repr__(self) -> str:
        return (f"RawShardsDataset({self.raw}, split={self.split}, pieces={len(self.pieces)}, "
                f"window={self.raw.window}, samples={len(self)})")


class _Window:
    """One window's GPT dataset, its ``document_ids`` (``source_ids``) turned from
    sequence ids of the window's chain into the raw member's own: ``piece << 32 |
    sequence within the piece`` (int64; -1 on padding), the same whichever window or
    epoch reads the document."""

    def __init__(self, dataset: GPTDataset, pieces: np.ndarray, chain: CorpusChain) -> None:
        self.dataset, self.config = dataset, dataset.config
        self._pieces = np.asarray(pieces, np.int64)
        sizes = [stop - first for _, first, stop in chain.parts]
        self._firsts = np.cumsum([0, *sizes[:-1]]).astype(np.int64)  # [parts] in the chain

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitems__(self, samples) -> dict[str, np.ndarray]:
        batch = self.dataset.__getitems__(samples)
        local = batch.get("document_ids")
        if local is not None:
            local = np.asarray(local, np.int64)
            part = np.searchsorted(self._firsts, local, side="right") - 1
            own = (self._pieces[part] << 32) | (local - self._firsts[part])
            batch["document_ids"] = np.where(local < 0, -1, own)
        return batch


def split_pieces(corpus: RawCorpus, bookend: tuple[float, float]) -> np.ndarray:
    """int64 [P]: the pieces of a split's ``bookend`` fractions (Megatron's rule for
    documents, ``int(round(fraction * count))``, over the pieces)."""
    begin, end = (int(round(fraction * corpus.pieces)) for fraction in bookend)
    return np.arange(begin, end, dtype=np.int64)
