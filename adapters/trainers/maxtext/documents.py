"""``grain_file_type: mmap`` through megadata: MaxText's own windows over megadata's
reads of the same documents (see the package docstring)."""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence
from typing import Any

import numpy as np

from megadata_adapters.trainers.maxtext.modules import MARK, SOURCE
from megadata_core.errors import DataError

log = logging.getLogger("megadata_adapters.trainers.maxtext")


class MegadataDocumentSource:
    """MaxText's ``MMapIndexedDataSource`` / ``MultiShardMMapIndexedDataSource`` (the
    documents ``grain_file_type: mmap`` windows), read by megadata: document ``i`` of the
    shards in their order as ``{feature_name: tokens}`` (the corpus dtype), a document of
    a ``--split-sentences`` corpus with ``split_sentences`` (its sentences joined)."""

    def __init__(
        self, path_prefixes: Sequence[str], feature_name: str = "text",
        split_sentences: bool = False,
    ) -> None:
        self._open(path_prefixes, feature_name, split_sentences)

    def _open(self, path_prefixes: Sequence[str], feature_name: str, split_sentences: bool) -> None:
        import megadata_core as mdc

        self._prefixes = [str(p) for p in path_prefixes]
        if not self._prefixes:
            raise DataError("grain_train_files: an mmap spec that names no .bin/.idx shard")
        self._feature_name = feature_name
        self._split_sentences = bool(split_sentences)
        self._corpora = [mdc.IndexedDataset(p) for p in self._prefixes]
        counts = [self._counts(c) for c in self._corpora]
        self._token_counts = np.concatenate(counts) if counts else np.zeros(0, np.int64)
        self._ends = np.cumsum([len(c) for c in counts], dtype=np.int64)

    def _counts(self, corpus) -> np.ndarray:
        """int64 [D]: each document's tokens (each sequence's without split_sentences)."""
        lengths = np.asarray(corpus.sequence_lengths, np.int64)
        if not self._split_sentences:
            return lengths
        bounds = np.asarray(corpus.document_indices, np.int64)
        totals = np.concatenate([[0], np.cumsum(lengths)])
        return totals[bounds[1:]] - totals[bounds[:-1]]

    def __len__(self) -> int:
        return int(self._ends[-1])

    def __getitem__(self, index: int) -> dict[str, np.ndarray]:
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(f"Index {index} out of range for dataset with {len(self)} elements")
        shard = int(np.searchsorted(self._ends, index, side="right"))
        local = int(index) - (int(self._ends[shard - 1]) if shard else 0)
        corpus = self._corpora[shard]
        if not self._split_sentences:
            return {self._feature_name: np.array(corpus[local])}
        first, last = (int(x) for x in corpus.document_indices[local : local + 2])
        parts = corpus[first:last] if last > first else []
        tokens = np.concatenate(parts) if parts else np.zeros(0, corpus.dtype)
        return {self._feature_name: tokens}

    def doc_token_counts(self) -> np.ndarray:
        """int64 [D]: the tokens of every document, shard after shard."""
        return self._token_counts

    def check_eod_presence(self, eod_id: int, mode_label: str) -> None:
        """Warn, as MaxText does, when none of the first 20 documents of the first shard
        ends with ``eod_id`` (the corpus was preprocessed without ``--append-eod``)."""
        count = min(int(self._ends[0]), 20)
        ends = [self[i][self._feature_name] for i in range(count)]
        ends = [t[-1] for t in ends if len(t)]
        if ends and not any(int(t) == eod_id for t in ends):
            log.warning(
                "None of the first %d documents end with eod_id=%d. %s does NOT insert EOD "
                "tokens: preprocess with --append-eod for correct document boundaries.",
                count, eod_id, mode_label,
            )

    def __getstate__(self) -> dict:
        return {"path_prefixes": self._prefixes, "feature_name": self._feature_name,
                "split_sentences": self._split_sentences}

    def __setstate__(self, state: dict) -> None:
        self._open(state["path_prefixes"], state["feature_name"], state["split_sentences"])

    def __repr__(self) -> str:
        return f"MegadataDocumentSource({len(self)} documents of {len(self._prefixes)} shard(s))"


def create_mmap_source(path_prefix, split_sentences, seq_length, eod_id):
    """MaxText's ``create_mmap_source`` (``grain_file_type: mmap``) with megadata's
    documents: MaxText's own shard resolution, and its own windows
    (``MMapSampleIndexDataSource``) over :class:`MegadataDocumentSource`."""
    import grain.python as grain

    datasource = sys.modules[SOURCE]
    prefixes = datasource._resolve_bin_prefixes(path_prefix.strip())
    source: Any = MegadataDocumentSource(prefixes, split_sentences=split_sentences)
    log.info("megadata serves MaxText's mmap documents: %r", source)
    if seq_length and eod_id is not None:
        source = datasource.MMapSampleIndexDataSource(source, seq_length=seq_length,
                                                      eod_id=eod_id)
    return grain.MapDataset.source(source)


setattr(create_mmap_source, MARK, True)
