"""``GPTDataset``: Megatron's GPT samples over a .bin/.idx corpus, a whole batch at once.

Values equal megatron-core 0.16.1's ``GPTDataset`` for the same corpus, document ids,
sample count, split and config (dtypes may differ: tokens, labels and position ids are
int32 by default, for JAX; int64 on request). The dataset gets its index arrays from one
call, :func:`megadata_core.datasets.gpt_arrays.gpt_arrays` (given, loaded from the
on-disk cache when ``config.path_to_cache`` is set, or built as Megatron's
``_build_document_sample_shuffle_indices``), and answers ``len``, ``[i]`` and
``__getitems__`` from them.

``shuffle="feistel"`` replaces both RandomState permutations by keyed Feistel bijections
(:mod:`megadata_core.indices.gpt`): the document order is still materialized
while building (the sample index needs it), the sample order is computed on the fly;
not Megatron-compatible.

A member whose prefix has a roles sibling (a conversation corpus,
:mod:`megadata_core.format.roles`) reads the roles of every batch with its tokens' pieces
(:mod:`megadata_core.datasets.conversations`): its ``loss_mask`` also needs the label's
role to train (``config.trained_roles_mode``) and the label in the same document piece.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Mapping
from typing import NamedTuple

import numpy as np

from megadata_core.cache.keys import document_ids
from megadata_core.datasets import conversations, gpt_arrays, masks, reading
from megadata_core.datasets.config import SPLIT_NAMES, GPTDataConfig
from megadata_core.datasets.gpt_members import GPTSiblings, MappedIndices
from megadata_core.datasets.masks import (
    crossing_labels,
    document_masks,
    segment_attention_mask,
)
from megadata_core.datasets.reading import sample_position, sample_positions
from megadata_core.errors import DataError
from megadata_core.handover.pack import BufferPool
from megadata_core.indices.feistel import FeistelDocumentIndex
from megadata_core.indices.gpt import FeistelOrder
from megadata_core.modes import Pieces

_TOKEN_DTYPES = (np.dtype(np.int32), np.dtype(np.int64))


class SampleText(NamedTuple):
    """One sample's raw text and its pieces (see :meth:`GPTDataset.sample_text`)."""

    tokens: np.ndarray
    documents: np.ndarray
    lengths: np.ndarray
    padded: bool


def _split_name(split: object) -> str:
    name = getattr(split, "name", split)  # accept megatron's Split enum too
    if name not in SPLIT_NAMES:
        raise DataError(f"split: {split!r} is not one of {SPLIT_NAMES}")
    return name


def _check_token_id(field: str, value: int, dtype: np.dtype) -> None:
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        if not info.min <= value <= info.max:
            raise DataError(
                f"{field}: {value} is outside the corpus dtype {dtype} range "
                f"[{info.min}, {info.max}]"
            )


def _known(pieces: Pieces | None) -> Pieces:
    """A batch's pieces where they must be known: every read locates them, and given text
    has them with ``document_masking`` (see :meth:`GPTDataset.samples_from_text`)."""
    if pieces is None:
        raise DataError("pieces: a batch without its document pieces (internal error)")
    return pieces


class GPTDataset(GPTSiblings, MappedIndices):
    """GPT samples of one split: ``len``, ``ds[i]`` and ``ds.__getitems__(indices)``.

    Args:
        indexed: a :class:`megadata_core.IndexedDataset`.
        indices: int [D] the documents (sequences) of this split, e.g.
            ``np.arange(lo, hi)`` (Megatron's ``indexed_indices``), or ``range(lo, hi)``
            (checked in O(1); kept as ``ds.indices``). Consecutive ids are found in one
            cheap pass and the index is built from their range either way.
        num_samples: samples requested (the dataset may hold more: whole epochs), or
            None for one epoch.
        config: a :class:`GPTDataConfig`.
        split: ``"train"``, ``"valid"`` or ``"test"`` (or Megatron's ``Split``).
        token_dtype: dtype of tokens, labels and position ids: int32 (default) or int64.
        arrays: the index arrays, precomputed (e.g. loaded from the builder's cache
            bundle, keyed by every input above): ``document_index``, ``sample_index``,
            ``shuffle_index`` (``sample_index``, ``feistel_split`` for Feistel); used as
            given, nothing is built or cached.
        origin: where given ``arrays`` came from (e.g. ``"build bundle PATH"``), named
            by the errors of a batch that meets a value out of range in them.

    A sample (``ds[i]``) is a dict of numpy arrays, Megatron's keys and values:
    ``tokens`` and ``labels`` [S] (token_dtype), ``attention_mask`` [1, S, S] bool,
    True = masked (only with ``create_attention_mask``), ``loss_mask`` [S] float32,
    ``position_ids`` [S] (token_dtype). ``__getitems__`` stacks them on a batch axis.
    ``ds[None]`` is Megatron's batch-padding sample (sample 0, loss_mask all 0).

    Index arrays memory-mapped from the cache count against the corpus's
    :class:`~megadata_core.format.reader.OpenFiles` (a blend's members share one,
    ``config.max_open_files``): when released, the next access maps them again, and a
    cache file that changed meanwhile is a DataError naming it.
    """

    # The index views (_set_views): arrays, computed Feistel orders, None for best_fit.
    sample_index: np.ndarray | None
    document_index: np.ndarray | FeistelDocumentIndex | None
    shuffle_index: np.ndarray | FeistelOrder

    def __init__(
        self,
        indexed,
        indices: np.ndarray | range,
        num_samples: int | None,
        config: GPTDataConfig,
        split: str = "train",
        *,
        token_dtype: np.typing.DTypeLike = np.int32,
        arrays: Mapping[str, np.ndarray] | None = None,
        origin: str | None = None,
    ) -> None:
        if not isinstance(config, GPTDataConfig):
            raise DataError(f"config: expected GPTDataConfig, got {type(config).__name__}")
        self.indexed = indexed
        self.config = config
        self.split = _split_name(split)
        self.indices, self._ids_description = document_ids(indexed, indices)
        if num_samples is not None:
            if isinstance(num_samples, (bool, float, np.floating)) or not isinstance(
                num_samples, (int, np.integer)
            ):
                raise DataError(f"num_samples: {num_samples!r} is not an integer")
            if num_samples < 0:
                raise DataError(f"num_samples: {num_samples} must be >= 0")
            num_samples = int(num_samples)
        self.num_samples = num_samples
        self._extra = int(config.add_extra_token_to_sequence)
        self.token_dtype = self._check_dtypes(token_dtype)
        self.eod_id = config.eod_id
        self.pad_id = self._resolve_pad()
        dtype = np.dtype(indexed.dtype)
        self._pad_maybe_in_corpus = dtype.kind not in "iu" or (
            np.iinfo(dtype).min <= self.pad_id <= np.iinfo(dtype).max
        )
        self._pool: BufferPool | None = None
        self._constants: dict[tuple[str, int], np.ndarray] = {}
        self._entry = origin  # where given arrays that are not cache files came from
        self._set_arrays(
            gpt_arrays.gpt_arrays(
                config, indexed, self.indices, self._ids_description, num_samples,
                self.split, given=arrays,
            )
        )
        self._roles_corpus()  # a roles sibling that does not match: refused now

    @property
    def has_roles(self) -> bool:
        """Whether the corpus is a conversation corpus (a roles sibling beside it): its
        loss mask trains only the labels of the config's trained roles."""
        return self._roles_corpus() is not None

    def _roles_corpus(self):
        """The roles corpus beside ``self.indexed``, or None (opened and checked once per
        corpus object, whichever dataset asks first: :func:`conversations.roles_of`)."""
        return conversations.roles_of(self.indexed, self.config.mmap_bin_files)

    def _trained_labels(self, pieces: Pieces) -> np.ndarray | None:
        """bool [B, S]: whether each label's role trains (roles members), or None."""
        roles = self._roles_corpus()
        if roles is None:
            return None
        config = self.config
        codes = conversations.batch_roles(roles, pieces, config.sequence_length + self._extra)
        return config.trained_roles_mode.labels(codes, config.sequence_length)

    # -- construction -----------------------------------------------------------------

    @property
    def _buffers(self) -> BufferPool:
        """The pool of output buffers (made at the first batch: a blend of 1,000 members
        builds its datasets faster without 1,000 idle pools)."""
        pool = self._pool
        if pool is None:
            pool = self._pool = BufferPool()
        return pool

    @property
    def index_arrays(self) -> dict[str, np.ndarray]:
        """The index arrays as loaded or built (cache files stay memory maps): the names
        of :func:`megadata_core.datasets.gpt_arrays.config_array_names`."""
        return dict(self._arrays)

    def _check_dtypes(self, token_dtype: np.typing.DTypeLike) -> np.dtype:
        try:
            dtype = np.dtype(token_dtype)
        except TypeError:
            raise DataError(f"token_dtype: {token_dtype!r} is not a dtype") from None
        if dtype not in _TOKEN_DTYPES:
            raise DataError(f"token_dtype: {dtype} must be int32 or int64")
        corpus = np.dtype(self.indexed.dtype)
        if not np.can_cast(corpus, dtype, "safe"):
            raise DataError(
                f"token_dtype: corpus tokens of dtype {corpus} do not fit {dtype}"
                + (" (use token_dtype=np.int64)" if corpus.kind in "iu" else "")
            )
        config = self.config
        if config.eod_id is None and (
            config.reset_position_ids or config.reset_attention_mask or config.eod_mask_loss
        ):
            raise DataError(
                "eod_id: None, but reset_position_ids, reset_attention_mask or "
                "eod_mask_loss needs it"
            )
        if config.eod_id is not None:
            _check_token_id("eod_id", config.eod_id, corpus)
        info = np.iinfo(dtype)
        if not info.min <= config.pad_id <= info.max:
            raise DataError(f"pad_id: {config.pad_id} does not fit token_dtype {dtype}")
        return dtype

    def with_token_dtype(self, token_dtype: np.typing.DTypeLike) -> GPTDataset:
        """This dataset with tokens, labels and position ids of ``token_dtype`` (int32 or
        int64), sharing the index arrays (no rebuild, no cache access); ``self`` when the
        dtype is already that. The text is gathered straight into that dtype: cheaper than
        casting every batch afterwards."""
        dtype = self._check_dtypes(token_dtype)
        if dtype == self.token_dtype:
            return self
        other = copy.copy(self)
        other.token_dtype = dtype
        other._pool = None
        other._constants = {}
        return other

    def _resolve_pad(self) -> int:
        """Megatron's rule: a pad id equal to the EOD id is ambiguous; it warns and pads
        with -1 instead (``allow_ambiguous_pad_tokens=False``)."""
        pad = self.config.pad_id
        if self.eod_id is not None and pad == self.eod_id and pad != -1:
            warnings.warn(
                f"pad_id: {pad} equals eod_id; padding with -1 instead (as Megatron does)",
                stacklevel=3,
            )
            return -1
        return pad

    def description(self) -> dict:
        """Every input of the index arrays (the cache key is its sha256)."""
        return gpt_arrays.describe(
            self.config, self.indexed, self._ids_description, self.num_samples, self.split
        )

    def _document_ids(self) -> np.ndarray | range:
        """The ids the index functions read: ``range(lo, hi)`` for consecutive ids (no
        id array is read, gathered or tiled), else the ids array."""
        span = self._ids_description.get("range")
        return range(*span) if span is not None else self.indices

    def _set_views(self, arrays: dict[str, np.ndarray]) -> None:
        self._arrays = arrays  # memory maps stay here (pickled as file names)
        self.config.packing_mode.views(self, arrays)

    # -- samples ----------------------------------------------------------------------

    def __len__(self) -> int:
        return self._total

    def _positions(self, indices: object) -> np.ndarray:
        return sample_positions(indices, len(self), self.split)

    @property
    def packing(self) -> str:
        """The name of the config's packing mode (``"concat"``: Megatron's samples)."""
        return self.config.packing_mode.name

    @property
    def epochs(self) -> int:
        """Epochs of the split's documents that the samples hold."""
        return self.config.packing_mode.epochs(self)

    def _pieces(self, rows: np.ndarray) -> Pieces:
        """The pieces of the samples at sample-index ``rows`` (shuffle index values)."""
        try:  # index values out of range: DataErrors naming the array and its source
            return self.config.packing_mode.locate(self, rows)
        except DataError as error:
            raise reading.with_origin(error, self._arrays, self._entry) from None

    def _text(self, positions: np.ndarray) -> tuple[np.ndarray, bool, Pieces]:
        """[B, S + extra] tokens of the samples at ``positions`` (corpus dtype, or
        token_dtype padded with pad_id), whether any sample was padded, and the pieces."""
        if "_mapped_files" in self.__dict__:  # most recently used of the OpenFiles
            self.indexed._open_files.used(self)
        check = getattr(self.indexed, "check_files", None)  # mock data has no file
        if check is not None:  # before the .idx arrays are read: DataError, not SIGBUS
            check()  # (a .bin mapped below is checked as it is mapped)
        pieces = self._pieces(self.shuffle_index[positions])  # int [B]; widened there
        # Asked every batch, never kept: a view would pin the .bin map open past the
        # corpus's OpenFiles bound (a blend of 10,000 members).
        flat = reading.flat_tokens(self.indexed)
        width = self.config.sequence_length + self._extra
        try:
            text, padded = reading.gather_tokens(
                self.indexed,
                pieces,
                width,
                self.pad_id,
                self.token_dtype,
                flat,
                self._buffers.empty,
            )
            return text, padded, pieces
        except DataError as error:
            raise reading.with_origin(error, self._arrays, self._entry) from None

    def sample_text(self, index: int) -> SampleText:
        """Sample ``index``'s raw text and where it came from: Megatron's
        ``_query_document_sample_shuffle_indices``, the one-sample read a per-sample
        ``__getitem__`` (the Megatron drop-in's) calls.

        Returns:
            :class:`SampleText`: ``tokens`` [S + extra] of ``token_dtype`` (a partial
            sample padded with ``pad_id``, not yet 0), ``documents`` int64 [P] the
            document of each piece in order and ``lengths`` int64 [P] the tokens taken
            from it, ``padded``. From a memory-mapped concat corpus in scalar steps
            (the packing's ``one_sample``), else through the batched read.
        """
        position = sample_position(index, self._total, self.split)
        width = self.config.sequence_length + self._extra
        found = flat = None
        if not getattr(self.indexed, "multimodal", True):
            if "_mapped_files" in self.__dict__:
                self.indexed._open_files.used(self)
            check = getattr(self.indexed, "check_files", None)
            if check is not None:  # before the .idx arrays are read
                check()
                flat = reading.flat_tokens(self.indexed)  # None: not memory-mapped
            if flat is not None:
                try:
                    found = self.config.packing_mode.one_sample(
                        self, flat, int(self.shuffle_index[position])
                    )
                except DataError as error:
                    raise reading.with_origin(error, self._arrays, self._entry) from None
        if found is None:
            text, padded, pieces = self._text(np.array([position]))
            return SampleText(text[0], pieces.document.astype(np.int64), pieces.length, padded)
        tokens, documents, lengths = found
        text = np.empty(width, self.token_dtype)  # one sample: no pool (it costs more)
        count = len(tokens)
        if count > width:
            raise DataError(f"sample_index: a sample spans {count} > {width}")
        text[:count] = tokens
        text[count:] = self.pad_id
        return SampleText(text, documents, lengths, count < width)

    def sample_texts(self, indices) -> np.ndarray:
        """The raw text of the samples at ``indices`` (a list or int array of B
        positions): :meth:`sample_text`'s ``tokens`` for a batch, in one batched read,
        without the pieces. int [B, S + extra]: the corpus dtype, or ``token_dtype`` with
        partial samples padded with ``pad_id`` (the caller's to keep: buffers are reused
        only once nobody holds them)."""
        text, _, _ = self._text(self._positions(indices))
        return text

    def __getitems__(self, indices) -> dict[str, np.ndarray]:
        """The samples at ``indices`` (a list or int array of B positions), stacked:
        ``tokens``, ``labels`` [B, S], ``attention_mask`` [B, 1, S, S] bool (with
        ``create_attention_mask``), ``loss_mask`` [B, S] float32, ``position_ids`` [B, S].
        Zero-copy where values allow, so the arrays are read-only: with
        ``add_extra_token_to_sequence``, ``tokens`` and ``labels`` are views of one
        [B, S + 1] buffer (labels = text shifted by one); a loss mask that is all ones (no
        EOD masking, no pad possible) and position ids without ``reset_position_ids`` are
        the same for every batch, so they are shared (Megatron likewise returns one
        cached position-ids tensor every time). Copy an array to modify it; ``ds[i]``
        returns writable copies.
        """
        text, padded, pieces = self._text(self._positions(indices))
        return self._samples(text, padded, pieces, self.config.packing_mode.packed,
                             trained=self._trained_labels(pieces))

    def read_with_pieces(self, indices) -> tuple[dict[str, np.ndarray], Pieces]:
        """:meth:`__getitems__` without the ``source_ids`` keys, and the batch's pieces:
        a blend makes those keys once for its whole batch from its members' pieces
        (:func:`~megadata_core.datasets.masks.batch_sources`)."""
        text, padded, pieces = self._text(self._positions(indices))
        return self._samples(text, padded, pieces, self.config.packing_mode.packed,
                             False, self._trained_labels(pieces)), pieces

    def samples_from_text(
        self, text: np.ndarray, lengths: list | None = None
    ) -> dict[str, np.ndarray]:
        """Samples (the keys of :meth:`__getitems__`) from given text instead of this
        dataset's own: what Megatron's ``__getitem__`` does with the text a subclass's
        ``_query_document_sample_shuffle_indices`` returns (Megatron's FIM dataset).

        Args:
            text: int [S + extra] or [B, S + extra] token ids; ``pad_id`` marks padding.
            lengths: the tokens of each document piece of each sample, in text
                coordinates (Megatron 0.19's ``document_lengths``: a list, or one list per
                sample); needed with ``document_masking``, read as concat pieces.
        """
        width = self.config.sequence_length + self._extra
        text = np.array(text, dtype=self.token_dtype, ndmin=2)  # a writable copy
        if text.ndim != 2 or text.shape[1] != width:
            raise DataError(f"text: shape {text.shape}, expected [B, {width}] (S + extra)")
        pieces = None
        if self.config.document_masking:
            if lengths is None:
                raise DataError(
                    "lengths: document_masking needs each sample's document lengths "
                    "(megatron-core 0.19's third value of _query_document_sample_shuffle_"
                    "indices)"
                )
            per_sample = [lengths] if len(text) == 1 and np.ndim(lengths[0]) == 0 else lengths
            if len(per_sample) != len(text):
                raise DataError(f"lengths: {len(per_sample)} samples for {len(text)} texts")
            counts = [len(parts) for parts in per_sample]
            if min(counts, default=1) < 1:
                raise DataError("lengths: a sample without any document piece")
            length = np.concatenate([np.asarray(parts, np.int64) for parts in per_sample])
            first = np.concatenate([[0], np.cumsum(counts[:-1])]).astype(np.int64)
            pieces = Pieces(np.zeros(len(length), np.int64), length, first,
                            np.zeros(len(text), np.int64))
        return self._samples(text, True, pieces, False, sources=False)

    def _samples(
        self, text: np.ndarray, padded: bool, pieces: Pieces | None, packed: bool,
        sources: bool = True, trained: np.ndarray | None = None,
    ) -> dict[str, np.ndarray]:
        """The sample keys of a batch's ``text`` [B, S + extra] (token_dtype, pads =
        pad_id; turned to 0 in place), whether it may hold pads, and its pieces
        (``sources``: they are the text's real pieces, for ``source_ids``; given text
        has none, and its samples carry no source keys); ``trained``: bool [B, S] the
        labels whose role trains (a roles member), or None. A roles member's labels
        that cross into another document piece never train."""
        config, pad, eod, dtype = self.config, self.pad_id, self.eod_id, self.token_dtype
        batch, length = len(text), config.sequence_length
        empty = self._buffers.empty
        if self._extra:
            tokens, labels = text[:, :-1], text[:, 1:]
        else:  # Megatron rolls the text left and puts a pad label at the end
            tokens = text.view()  # a view: the read-only flag must not stick to the buffer
            labels = empty((batch, length), dtype)[...]
            labels[:, :-1] = text[:, 1:]
            labels[:, -1] = pad
        # Masks are computed before pads become 0, as in Megatron.
        may_hold_pad = padded or self._pad_maybe_in_corpus or not self._extra
        documents = None
        if config.document_masking:
            documents = document_masks(_known(pieces), length, self._extra, packed, dtype)
        crossing = None
        if (config.masks_cross_document_labels or trained is not None) and pieces is not None:
            crossing = (documents["boundary"] if documents is not None
                        else crossing_labels(pieces, length))
        if may_hold_pad or config.eod_mask_loss or crossing is not None or trained is not None:
            loss_mask = masks.loss_mask(
                tokens,
                labels if may_hold_pad else None,
                eod,
                pad,
                config.eod_mask_loss,
                out=empty((batch, length), np.float32),
            )
        else:  # all ones whatever the tokens: one shared read-only array per batch size
            loss_mask = self._constant("loss_mask", batch)
        if crossing is not None:
            loss_mask.reshape(-1)[crossing] = 0.0
        if trained is not None:
            loss_mask *= trained
        if documents is not None:
            if documents.get("padding") is not None:  # THD: pads between documents
                loss_mask.reshape(-1)[documents["padding"]] = 0.0
            position_ids = documents["position_ids"]
        elif config.reset_position_ids:
            position_ids = masks.position_ids(
                tokens, eod, True, dtype, out=empty((batch, length), dtype)
            )
        else:  # Megatron also hands out one cached position-ids tensor for every sample
            position_ids = self._constant("position_ids", batch)
        attention_mask = None
        if config.create_attention_mask and documents is not None:
            attention_mask = segment_attention_mask(documents["segment_ids"])
        elif config.create_attention_mask:
            attention_mask = masks.attention_mask(tokens, eod, config.reset_attention_mask)
        if padded or self._pad_maybe_in_corpus:  # pad ids become 0 (embedding-safe)
            text[text == pad] = 0
            if not self._extra:
                labels[labels == pad] = 0
        elif not self._extra:
            labels[:, -1] = 0
        tokens.flags.writeable = False
        labels.flags.writeable = False
        sample = {"tokens": tokens, "labels": labels}
        if attention_mask is not None:
            sample["attention_mask"] = attention_mask
        sample["loss_mask"] = loss_mask
        sample["position_ids"] = position_ids
        if documents is not None:
            for key in ("segment_ids", "cu_seqlens", "cu_seqlens_padded", "max_seqlen"):
                if key in documents:
                    sample[key] = documents[key]
        if config.source_ids and sources:
            owned = masks.token_documents(
                _known(pieces), batch, length + self._extra, length
            )
            sample["dataset_ids"] = masks.dataset_zeros(owned, padded)
            sample["document_ids"] = owned
        return sample

    def _constant(self, key: str, batch: int) -> np.ndarray:
        """A read-only [batch, S] array that is the same for every batch: the all-ones
        loss mask or the 0..S-1 position ids (built once per batch size)."""
        cached = self._constants.get((key, batch))
        if cached is None:
            length = self.config.sequence_length
            if key == "loss_mask":
                cached = np.ones((batch, length), dtype=np.float32)
            else:
                cached = masks.position_ids(
                    np.zeros((batch, length), np.int8), None, False, self.token_dtype
                )
            cached.flags.writeable = False
            if len(self._constants) >= 16:
                self._constants.clear()
            self._constants[(key, batch)] = cached
        return cached

    def __getitem__(self, index: int | None) -> dict[str, np.ndarray]:
        """One sample (see the class docstring); None gives Megatron's padding sample."""
        if index is None:
            sample = {key: value[0] for key, value in self.__getitems__([0]).items()}
            sample["loss_mask"] = np.zeros_like(sample["loss_mask"])
            return sample
        if isinstance(index, (bool, np.bool_)) or not isinstance(index, (int, np.integer)):
            raise TypeError(f"sample index must be an int, got {type(index).__name__}")
        return {key: value[0].copy() for key, value in self.__getitems__([index]).items()}

    def __repr__(self) -> str:
        return (
            f"GPTDataset(split={self.split!r}, samples={len(self)}, "
            f"sequence_length={self.config.sequence_length}, documents={len(self.indices)}, "
            f"corpus={getattr(self.indexed, 'path_prefix', '?')!r})"
        )
