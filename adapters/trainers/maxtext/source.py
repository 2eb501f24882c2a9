"""The sources megadata hands MaxText (see the package docstring).

* ``grain_file_type: mmap_npy``: MaxText's spec and blend spellings, the plan of Megatron
  samples they name, :class:`MegadataNpySource` and the ``get_mmap_npy_dataset`` that
  replaces MaxText's;
* ``grain_train_files: /path/data.json`` (a megadata data config,
  :func:`~megadata_adapters.trainers.maxtext.keys.data_config`): :class:`ConfiguredSource`,
  megadata's own samples (``packing: best_fit`` with ``document_masking``, blends and
  ``blend_schedule``, ``source_ids``, ``mock``) already split under MaxText's keys
  (:mod:`~megadata_adapters.trainers.maxtext.keys`), which MaxText's
  ``MegatronSplitInputsTargets`` passes on (the hook lets elements without ``text``
  through). ``max_seqlen``, one number per sample, is left out: MaxText shards every key
  of a batch as [batch, length]. ``mmap_npy_split``'s part 0 trains, part 1 evaluates;
* ``grain_file_type: mmap``: :class:`MegadataDocumentSource`, MaxText's own windows over
  megadata's reads of the same documents.

Both MaxText file types serve text, and MaxText makes the masks: a conversation corpus
(a ``PREFIX_roles`` sibling) named there trains every label, as stock MaxText reads it,
and :func:`warn_conversations` logs a warning that names it; its roles' loss mask
reaches MaxText through a data config only.

Grain's reader asks a host's source for its indices in order (``host_index + j *
host_count`` for j = 0, 1, ...; from several threads at once). Where requests follow that
order, :class:`ReadAheadSource` reads :attr:`~ReadAheadSource.READ_AHEAD` of them in one
batched read of megadata's and hands them out from there; any other request (a user's
random access) is read alone.
"""

from __future__ import annotations

import logging
import math
import os
import sys
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

import megadata_core as mdc
from megadata_adapters.trainers.maxtext.keys import (
    MARK,
    SOURCE,
    data_config,
    names_data_config,
    to_maxtext,
)
from megadata_core.errors import DataError
from megadata_core.format.roles import has_roles, roles_prefix

log = logging.getLogger("megadata_adapters.trainers.maxtext")

#: Megatron's (and MaxText's) blend overprovisioning, in percent.
BLEND_MARGIN = 0.5


def warn_conversations(prefixes: Sequence[str], file_type: str) -> list[str]:
    """Warn (logged) about the conversation corpora among ``prefixes`` (a
    ``PREFIX_roles`` sibling beside them) that ``grain_file_type: file_type`` reads: it
    serves MaxText their text, and MaxText's own pipeline then trains every label. Only
    a megadata data config (``grain_train_files: data.json``) serves their roles' loss
    mask as ``targets_segmentation``. Returns those prefixes."""
    found = [str(prefix) for prefix in prefixes if has_roles(str(prefix))]
    for prefix in found:
        log.warning(
            "%s is a conversation corpus (%s beside it), but grain_file_type %s serves "
            "MaxText its text and MaxText trains every label; name a megadata data config "
            "(grain_train_files: data.json) to train only the labels of its trained roles",
            prefix, roles_prefix(prefix), file_type,
        )
    return found


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


# -- mmap_npy --------------------------------------------------------------------------


def _parse_spec(spec: str) -> tuple[str, str]:
    """``'INDEX_DIR|PREFIX'`` -> ``(INDEX_DIR, PREFIX)``; one ``.bin``/``.idx`` prefix only."""
    parts = spec.strip().split("|")
    if len(parts) != 2:
        raise DataError(
            f"grain_train_files: mmap_npy spec must be 'index_dir|prefix', got {spec!r}"
        )
    index_dir, paths = parts[0].strip(), parts[1].strip()
    if not index_dir:
        raise DataError(f"grain_train_files: {spec!r} names no index directory before '|'")
    prefixes = [p.strip() for p in paths.split(":")]
    if len(prefixes) == 1 and os.path.isfile(prefixes[0] + ".idx"):
        return index_dir, prefixes[0]
    if len(prefixes) == 1 and os.path.isdir(prefixes[0]):
        found = sorted(n for n in os.listdir(prefixes[0]) if n.endswith(".idx"))
        if len(found) == 1:
            return index_dir, os.path.join(prefixes[0], found[0][: -len(".idx")])
        raise DataError(
            f"grain_train_files: {prefixes[0]} is a directory of {len(found)} .idx shards; "
            "megadata serves one .bin/.idx prefix per spec (merge the shards with "
            "megadata-merge, or blend them with ';')"
        )
    if len(prefixes) > 1:
        raise DataError(
            f"grain_train_files: {spec!r} names {len(prefixes)} shards; megadata serves one "
            ".bin/.idx prefix per spec (merge them with megadata-merge, or blend them with ';')"
        )
    raise DataError(f"grain_train_files: no {prefixes[0]}.idx (from {spec!r})")


def _parse_mixture(pattern: str) -> tuple[list[str], list[float]]:
    """MaxText's ``'spec,weight;spec,weight'``: specs and weights normalized once (float64),
    zero weights dropped (``_parse_weighted_mixture``)."""
    specs, weights = [], []
    for i, part in enumerate(pattern.split(";")):
        cut = part.rfind(",")
        if cut == -1 or not part[:cut].strip():
            raise DataError(f"grain_train_files: entry {i} {part!r} is not 'spec,weight'")
        try:
            weight = float(part[cut + 1 :])
        except ValueError:
            raise DataError(f"grain_train_files: entry {i} has weight {part[cut + 1:]!r}") from None
        if not math.isfinite(weight) or weight < 0:
            raise DataError(f"grain_train_files: entry {i} has weight {weight}, not >= 0")
        specs.append(part[:cut].strip())
        weights.append(weight)
    array = np.asarray(weights, dtype=np.float64)
    if array.sum() <= 0:
        raise DataError(f"grain_train_files: the weights of {pattern!r} are all 0")
    normalized = (array / np.sum(array)).tolist()
    kept = [(s, w) for s, w in zip(specs, normalized) if w > 0]
    return [s for s, _ in kept], [w for _, w in kept]


def _split_range(split: str | None, split_index: int, count: int) -> range:
    """The documents of part ``split_index`` of ``split`` (MaxText's ``parse_split_range``:
    cumulative fractions, rounded), or all ``count``."""
    if not split:
        return range(count)
    try:
        ratios = [float(x) for x in str(split).split(",")]
    except ValueError:
        raise DataError(f"mmap_npy_split: {split!r} is not comma-separated numbers") from None
    if not 0 <= split_index < len(ratios) or sum(ratios) <= 0:
        raise DataError(f"mmap_npy_split: {split!r} has no part {split_index}")
    total = sum(ratios)
    cumulative = [0.0]
    for ratio in ratios:
        cumulative.append(cumulative[-1] + ratio / total)
    return range(
        int(round(cumulative[split_index] * count)), int(round(cumulative[split_index + 1] * count))
    )


class MmapNpyPlan:
    """Everything that makes the samples (picklable: a Grain worker rebuilds from it)."""

    def __init__(
        self,
        members: list[tuple[str, str, int | None]],
        weights: list[float] | None,
        size: int | None,
        *,
        seq_length: int,
        eod_id: int,
        seed: int,
        split: str | None,
        split_index: int,
        num_epoch: int,
        path_to_cache: str,
    ) -> None:
        self.members = members  # (index_dir, prefix, num_samples or None)
        self.weights = weights
        self.size = size
        self.seq_length = seq_length
        self.eod_id = eod_id
        self.seed = seed
        self.split = split
        self.split_index = split_index
        self.num_epoch = num_epoch
        self.path_to_cache = path_to_cache

    def build(self):
        """The megadata dataset: a GPTDataset, or a BlendedDataset of them."""
        name = ("train", "valid", "test")[min(self.split_index, 2)]
        warn_conversations([prefix for _, prefix, _ in self.members], "mmap_npy")
        datasets = []
        for index_dir, prefix, num_samples in self.members:
            indexed = mdc.IndexedDataset(prefix)
            if indexed.sequence_lengths.shape[0] != indexed.document_indices.shape[0] - 1:
                raise DataError(
                    f"{prefix}: {indexed.document_indices.shape[0] - 1} documents != "
                    f"{indexed.sequence_lengths.shape[0]} sequences (preprocessed with "
                    "--split-sentences); megadata serves mmap_split_sentences: false only"
                )
            documents = _split_range(self.split, self.split_index, len(indexed))
            if len(documents) == 0:
                raise DataError(
                    f"{prefix}: no documents in part {self.split_index} of mmap_npy_split "
                    f"{self.split!r}"
                )
            if num_samples is None:  # MaxText: whole epochs, num_epoch of them
                tokens = int(np.sum(indexed.sequence_lengths[documents.start : documents.stop]))
                num_samples = (tokens - 1) // self.seq_length * max(1, self.num_epoch)
            config = mdc.GPTDataConfig(
                random_seed=self.seed,
                sequence_length=self.seq_length,
                path_to_cache=self.path_to_cache if len(self.members) > 1 else index_dir,
                create_attention_mask=False,
                eod_id=self.eod_id,
                blend_order="megatron",
            )
            datasets.append(mdc.GPTDataset(indexed, documents, num_samples, config, name))
        if self.weights is None:
            return datasets[0]
        return mdc.BlendedDataset(datasets, self.weights, self.size, datasets[0].config)


class MegadataNpySource(ReadAheadSource):
    """A Grain random-access source: sample ``i`` as MaxText's ``MegatronNpyDataSource``
    gives it, ``{"text": int32 [S + 1]}``, read by megadata (a host's samples in order
    read ahead: :class:`ReadAheadSource`).
    """

    def __init__(self, plan: MmapNpyPlan, host_index: int = 0, host_count: int = 1) -> None:
        self._open(plan, host_index, host_count)

    def _open(self, plan: MmapNpyPlan, host_index: int, host_count: int) -> None:
        self._plan = plan
        self.dataset = plan.build()
        length = len(self.dataset) if plan.size is None else min(plan.size, len(self.dataset))
        self._width = plan.seq_length + 1
        # a blend's member sizes, asked once (a read-ahead checks every block against them)
        members = getattr(self.dataset, "datasets", [])
        self._member_sizes = np.array([len(m) for m in members], np.int64)
        self._start(length, host_index, host_count)
        log.info("megadata serves MaxText's mmap_npy samples: %r", self)

    def _read_batch(self, indices: np.ndarray) -> dict[str, np.ndarray]:
        return {"text": self._read(indices)}

    def _read_single(self, index: int) -> dict[str, np.ndarray]:
        return {"text": self._read_one(index)}

    def _read_one(self, index: int) -> np.ndarray:
        """int32 [S + 1]: sample ``index`` alone (megadata's one-sample read)."""
        dataset = self.dataset
        if self._plan.weights is not None:  # the blend's member and that member's sample
            member = int(dataset.dataset_index[index])
            sample = int(dataset.dataset_sample_index[index])
            members = dataset.datasets
            if not (0 <= member < len(members) and 0 <= sample < len(members[member])):
                raise DataError(
                    f"blend sample {index}: dataset {member}, sample {sample} is out of range"
                )
            dataset, index = members[member], sample
        return dataset.sample_text(index).tokens.astype(np.int32, copy=False)

    def _read(self, indices: np.ndarray) -> np.ndarray:
        """int32 [B, S + 1]: the samples at ``indices`` (int64 [B]), Megatron's reads."""
        dataset = self.dataset
        out = np.empty((len(indices), self._width), np.int32)
        if self._plan.weights is None:
            out[:] = dataset.sample_texts(indices)
            return out
        # the blend's member and that member's sample of each
        member = np.asarray(dataset.dataset_index[indices], np.int64)
        sample = np.asarray(dataset.dataset_sample_index[indices], np.int64)
        members = dataset.datasets
        sizes = self._member_sizes
        bad = (member < 0) | (member >= len(members))
        bad |= ~bad & ((sample < 0) | (sample >= sizes[np.where(bad, 0, member)]))
        if bad.any():
            first = int(np.flatnonzero(bad)[0])
            raise DataError(
                f"blend sample {int(indices[first])}: dataset {int(member[first])}, sample "
                f"{int(sample[first])} is out of range"
            )
        for number in np.unique(member).tolist():
            where = member == number
            out[where] = members[number].sample_texts(sample[where])
        return out

    def __getstate__(self) -> dict:
        return {"plan": self._plan, "host": self._host}

    def __setstate__(self, state: dict) -> None:
        self._open(state["plan"], *state.get("host", (0, 1)))

    def __repr__(self) -> str:
        return f"MegadataNpySource({len(self)} samples of {self.dataset!r})"


# -- a megadata data config -------------------------------------------------------------


class ConfiguredSource(ReadAheadSource):
    """The samples of one split of a megadata data config, under MaxText's keys
    (picklable: a Grain worker rebuilds the datasets from the cache)."""

    def __init__(
        self, config: mdc.GPTDataConfig, num_samples: int | None, split_index: int,
        extras: dict[str, Any], host_index: int = 0, host_count: int = 1,
    ) -> None:
        self._open(config, num_samples, split_index, extras, host_index, host_count)

    def _open(self, config, num_samples, split_index, extras, host_index, host_count) -> None:
        self._state = (config, num_samples, split_index, extras)
        sizes: list[int | None] = [0, 0, 0]  # only this split is built
        sizes[split_index] = num_samples
        datasets = mdc.build_datasets(
            config, sizes, mock=extras["mock"], vocab_size=extras["vocab_size"]
        )
        dataset = datasets[split_index]
        if dataset is None or len(dataset) == 0:
            part = ("train", "valid", "test")[split_index]
            raise DataError(f"grain_train_files: the data config gives no {part} samples")
        self.dataset = dataset
        length = len(dataset) if num_samples is None else min(int(num_samples), len(dataset))
        self._start(length, host_index, host_count)
        log.info("megadata serves MaxText its own samples: %r", self)

    def _read_batch(self, indices: np.ndarray) -> dict[str, np.ndarray]:
        batch = to_maxtext(self.dataset.__getitems__(indices))
        # MaxText shards every key of a batch as [batch, length]: one number per sample
        # (max_seqlen) cannot go
        return {name: np.asarray(v) for name, v in batch.items() if np.ndim(v) == 2}

    def _read_single(self, index: int) -> dict[str, np.ndarray]:
        batch = self._read_batch(np.array([index]))
        return {name: values[0] for name, values in batch.items()}

    def __getstate__(self) -> dict:
        return {"state": self._state, "host": self._host}

    def __setstate__(self, state: dict) -> None:
        self._open(*state["state"], *state["host"])

    def __repr__(self) -> str:
        return f"ConfiguredSource({len(self)} samples of {self.dataset!r})"


def configured_dataset(
    path: str, seq_length: int, eod_id: int, seed: int, num_samples: int | None,
    split_index: int, host_index: int, host_count: int, num_threads: int,
    prefetch_buffer_size: int,
):
    """MaxText's input dataset (a Grain ``IterDataset``, this host's samples in order) of
    the data config ``path``."""
    import grain.python as grain

    config, extras = data_config(path, seq_length, eod_id, seed)
    if split_index not in (0, 1):
        raise DataError(f"mmap_npy_split: part {split_index} (0 trains, 1 evaluates)")
    source = ConfiguredSource(config, num_samples, split_index, extras, host_index, host_count)
    dataset = grain.MapDataset.source(source)[host_index::host_count]
    return dataset.to_iter_dataset(
        read_options=grain.ReadOptions(num_threads=num_threads,
                                       prefetch_buffer_size=prefetch_buffer_size)
    )


def get_mmap_npy_dataset(
    data_file_pattern,
    split_sentences,
    seq_length,
    eod_id,
    num_epoch,
    host_index,
    host_count,
    num_threads,
    prefetch_buffer_size,
    blend_cache_dir,
    blend_index_dir,
    blend_split,
    apply_transforms,
    num_samples=None,
    seed=1234,
    blend_margin=BLEND_MARGIN,
    split=None,
    split_index=0,
):
    """MaxText's ``get_mmap_npy_dataset`` (same arguments, same iterator), reading through
    megadata (module docstring). ``blend_split`` ("train"/"eval") only named MaxText's blend
    cache files; megadata's cache keys say everything."""
    import grain.python as grain

    if names_data_config(data_file_pattern):  # megadata's own samples (ConfiguredSource)
        if split_sentences:
            raise DataError("mmap_split_sentences: true with a megadata data config (megadata "
                            "indexes sequences)")
        return configured_dataset(
            data_file_pattern.strip(), int(seq_length), int(eod_id), int(seed), num_samples,
            int(split_index), host_index, host_count, num_threads, prefetch_buffer_size,
        )
    if split_sentences:
        raise DataError(
            "mmap_split_sentences: true is not served by megadata (Megatron, and megadata, "
            "index sequences); run without megadata_adapters.trainers.maxtext for this corpus"
        )
    if blend_index_dir:
        raise DataError(
            f"blend_index_dir: {blend_index_dir!r}: megadata builds (and caches) the blend "
            "indices itself; drop blend_index_dir"
        )
    common: dict[str, Any] = {
        "seq_length": int(seq_length),
        "eod_id": int(eod_id),
        "seed": int(seed),
        "split": split or None,
        "split_index": int(split_index),
        "num_epoch": int(num_epoch or 1),
    }
    if ";" not in data_file_pattern:
        index_dir, prefix = _parse_spec(data_file_pattern)
        plan = MmapNpyPlan([(index_dir, prefix, num_samples)], None, None, path_to_cache=index_dir,
                     **common)
        dataset = grain.MapDataset.source(MegadataNpySource(plan, host_index, host_count))
        return apply_transforms(
            dataset, False, 0, 1, host_index, host_count, num_threads, prefetch_buffer_size
        )
    specs, weights = _parse_mixture(data_file_pattern)
    parsed = [_parse_spec(spec) for spec in specs]
    buffers: list[int | None] = [None] * len(parsed)
    if num_samples is not None:  # Megatron's per-dataset sizes, as MaxText computes them
        buffers = [
            math.ceil(math.ceil(num_samples * w) * (1.0 + blend_margin / 100.0))
            for w in weights
        ]
    if len(parsed) == 1:  # one weight left (the others 0): MaxText reads it alone
        plan = MmapNpyPlan([(parsed[0][0], parsed[0][1], buffers[0])], None, None,
                     path_to_cache=parsed[0][0], **common)
        dataset = grain.MapDataset.source(MegadataNpySource(plan, host_index, host_count))
        return apply_transforms(
            dataset, False, 0, 1, host_index, host_count, num_threads, prefetch_buffer_size
        )
    if num_samples is None:
        raise DataError(
            "steps: a blend (';' in grain_train_files) needs steps > 0: its size is "
            "steps * global_batch_size (megadata builds no unsized weighted blend)"
        )
    plan = MmapNpyPlan(
        [(d, p, b) for (d, p), b in zip(parsed, buffers)],
        weights,
        int(num_samples),
        path_to_cache=blend_cache_dir or parsed[0][0],
        **common,
    )
    dataset = grain.MapDataset.source(MegadataNpySource(plan, host_index, host_count))
    dataset = dataset[host_index::host_count]
    return dataset.to_iter_dataset(
        read_options=grain.ReadOptions(num_threads=num_threads,
                                       prefetch_buffer_size=prefetch_buffer_size)
    )


setattr(get_mmap_npy_dataset, MARK, True)


# -- mmap ------------------------------------------------------------------------------


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
    warn_conversations(prefixes, "mmap")
    source: Any = MegadataDocumentSource(prefixes, split_sentences=split_sentences)
    log.info("megadata serves MaxText's mmap documents: %r", source)
    if seq_length and eod_id is not None:
        source = datasource.MMapSampleIndexDataSource(source, seq_length=seq_length,
                                                      eod_id=eod_id)
    return grain.MapDataset.source(source)


setattr(create_mmap_source, MARK, True)
