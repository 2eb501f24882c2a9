"""``megatron.core.datasets.gpt_dataset``: GPT samples computed by megadata.

:class:`GPTDataset` holds a :class:`megadata_core.GPTDataset` (``ds.core``) and answers
as megatron-core's class: ``document_index``, ``sample_index``, ``shuffle_index`` (the
same values), ``len``, and ``ds[i]`` as a dict of torch tensors with Megatron's keys,
dtypes and values (long tokens/labels/position ids, float loss mask, bool attention mask
``[1, S, S]``); ``ds[None]`` is the batch-padding sample (loss mask all 0).

One difference, on purpose: megatron-core caches the loss mask of the first sample it
serves and zeroes pad positions of later samples in that cached tensor, so its values
depend on the order samples are read. Here every sample's values depend on the sample
alone (megatron-core's values when each sample is read first).

``inter_document_masking`` (megatron-core 0.19's option; served with 0.16.1 too) is
megadata's ``document_masking`` of Megatron's concat samples: a sample is 0.19's dict,
``tokens``, ``labels``, ``loss_mask``, ``position_ids`` (restarting at 0 per document),
``cu_seqlens`` int32 [S + 1] (padded with S) and ``max_seqlen`` (int32 scalar), with no
attention mask; ``reset_position_ids`` and ``reset_attention_mask`` are accepted beside
it and change nothing, as in 0.19. The loss mask is Megatron's (a label that crosses into
the next document is trained on); ``mask_cross_document_labels=True`` (not a Megatron
field) zeroes it. megadata's ``best_fit`` packing is not exposed here (Megatron has no
such option for pretraining): use ``megadata_core.GPTDataConfig(packing="best_fit")``.

``__getitem__`` goes through ``_query_document_sample_shuffle_indices``, as Megatron's
does: a subclass that overrides it (Megatron's ``GPTFIMDataset``) gets its text turned
into the sample by Megatron's rules; the class's own hook is the core's one-sample read,
and then the sample is made by the core directly (the same values, faster). The hook
returns ``(text, document_ids, document_lengths)`` with megatron-core 0.19 installed (or
none), ``(text, document_ids)`` with 0.16.1 - 0.18. A tokenizer without a pad token
(``tokenizer.pad`` None, 0.19's GPT2BPETokenizer) pads with -1 internally.

The index cache is megadata's (``path_to_cache``, content-addressed, written atomically);
with ``path_to_cache=None`` the indices are built in memory (megatron-core writes them
next to the corpus). ``fast_cache_load`` and ``defer_npy_index_mmap`` are accepted and
need nothing: cache hits are memory-mapped and cheap anyway.

A conversation corpus (a ``PREFIX_roles.bin/.idx`` sibling, docs/conversations.md) is
read as megadata reads it: its ``loss_mask`` trains only the labels of the trained roles,
which megadata's ``train_on_assistant_responses_only``, ``train_on_thinking_traces`` and
``train_on_tool_calls`` (fields of this config too, not Megatron's) choose. Stock
megatron-core reads the same tokens as plain text.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from dataclasses import dataclass, field
from typing import Any

import numpy
import torch

import megadata_core as mdc
from megadata_adapters.trainers.megatron_datasets import megatron_cache
from megadata_adapters.trainers.megatron_datasets._errors import MegatronCompatError, require
from megadata_adapters.trainers.megatron_datasets._version import query_returns_lengths
from megadata_adapters.trainers.megatron_datasets.blended_megatron_dataset_config import (
    BlendedMegatronDatasetConfig,
)
from megadata_adapters.trainers.megatron_datasets.indexed_dataset import IndexedDataset
from megadata_adapters.trainers.megatron_datasets.megatron_dataset import (
    MegatronDataset,
    pad_token_id,
)
from megadata_adapters.trainers.megatron_datasets.object_storage_utils import (
    ObjectStorageConfig,
    is_object_storage_path,
)
from megadata_adapters.trainers.megatron_datasets.utils import Split
from megadata_core.datasets import mock as core_mock
from megadata_core.indices import num_epochs, samples_in_epochs, tokens_per_epoch
from megadata_core.indices.feistel import FeistelDocumentIndex
from megadata_core.indices.gpt import FeistelOrder

logger = logging.getLogger(__name__)

#: Megatron's sample dtypes: tokens, labels and position ids are torch.long.
TOKEN_DTYPE = numpy.int64
#: megadata's switches of which roles of a conversation corpus train (GPTDataConfig's).
ROLE_SWITCHES = (
    "train_on_assistant_responses_only", "train_on_thinking_traces", "train_on_tool_calls",
)


@dataclass
class GPTDatasetConfig(BlendedMegatronDatasetConfig):
    """Configuration of GPT datasets (megatron-core's fields and defaults)."""

    reset_position_ids: bool | None = None
    reset_attention_mask: bool | None = None
    eod_mask_loss: bool | None = None
    create_attention_mask: bool = True
    drop_last_partial_validation_sequence: bool = True
    add_extra_token_to_sequence: bool = True
    object_storage_cache_path: str | None = None
    data_parallel_size: int = 1
    sequence_parallel_size: int = 0
    hybrid_context_parallel: bool = False
    sequences_per_dataset: dict[str, tuple[int, int]] | None = None
    token_dtype_code: int | None = field(init=False, default=None)
    context_parallel_size: int | None = None
    inter_document_masking: bool = False  # megatron-core 0.19's name (see the module doc)
    mask_cross_document_labels: bool = False  # megadata's opt-in (see the module doc)
    # which roles of a conversation corpus train (megadata's, docs/conversations.md)
    train_on_assistant_responses_only: bool = True
    train_on_thinking_traces: bool = False
    train_on_tool_calls: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        require(self.tokenizer is not None, "tokenizer: GPTDatasetConfig needs a tokenizer")
        for name in ("reset_position_ids", "reset_attention_mask", "eod_mask_loss"):
            require(getattr(self, name) is not None, f"{name}: must be set (True or False)")
        vocab_size = getattr(self.tokenizer, "vocab_size", None)
        if vocab_size is not None:
            self.token_dtype_code = 4 if vocab_size > numpy.iinfo(numpy.uint16).max + 1 else 8
        if self.sequences_per_dataset is not None:
            require(
                self.token_dtype_code is not None,
                "sequences_per_dataset: needs a tokenizer with a vocab_size",
            )


def _eod(config) -> int | None:
    try:
        return int(config.tokenizer.eod)
    except Exception:
        return None


def core_config(config: BlendedMegatronDatasetConfig, **changes) -> mdc.GPTDataConfig:
    """The :class:`megadata_core.GPTDataConfig` of a Megatron config (Megatron's blend
    order and shuffle, the tokenizer's EOD and Megatron's pad rule)."""
    per_split = (
        config.blend_per_split if config.blend_per_split and any(config.blend_per_split) else None
    )
    masking = bool(getattr(config, "inter_document_masking", False))
    pad = pad_token_id(config)
    fields: dict[str, Any] = dict(
        random_seed=config.random_seed,
        sequence_length=config.sequence_length,
        blend=config.blend,
        blend_per_split=per_split,
        split=None if per_split else config.split,
        path_to_cache=config.path_to_cache or None,  # "" is no cache, as in Megatron
        mmap_bin_files=bool(config.mmap_bin_files),
        mid_level_dataset_surplus=config.mid_level_dataset_surplus,
        # under inter_document_masking 0.19 overwrites the position ids per document and
        # drops the attention mask: the reset flags change nothing there
        reset_position_ids=bool(getattr(config, "reset_position_ids", False)) and not masking,
        reset_attention_mask=(
            bool(getattr(config, "reset_attention_mask", False)) and not masking
        ),
        eod_mask_loss=bool(getattr(config, "eod_mask_loss", False)),
        # Megatron-LM main returns no attention mask with inter_document_masking
        create_attention_mask=bool(getattr(config, "create_attention_mask", True))
        and not masking,
        document_masking=masking,
        mask_cross_document_labels=masking
        and bool(getattr(config, "mask_cross_document_labels", False)),
        drop_last_partial_validation_sequence=bool(
            getattr(config, "drop_last_partial_validation_sequence", True)
        ),
        add_extra_token_to_sequence=bool(getattr(config, "add_extra_token_to_sequence", True)),
        multiple_validation_sets=bool(config.multiple_validation_sets),
        full_validation=bool(config.full_validation),
        eod_id=_eod(config),
        pad_id=-1 if pad is None else pad,  # a tokenizer without a pad token
        shuffle="megatron",
        blend_order="megatron",
    )
    for name in ROLE_SWITCHES:  # not Megatron fields: a stock config has none
        value = getattr(config, name, None)
        if value is not None:
            fields[name] = value
    max_open_files = getattr(config, "max_open_files", None)  # not a Megatron field
    if max_open_files is not None:
        fields["max_open_files"] = max_open_files
    fields.update(changes)
    return mdc.GPTDataConfig(**fields)


def deferred_length(dataset) -> int:
    """Samples of a GPT dataset whose index arrays are not made yet, from its corpus
    lengths: what megatron-core's deferred ``__len__`` computes (its build_sample_idx
    count), in exact integer steps (:mod:`megadata_core.indices.gpt`)."""
    config = dataset.config
    lengths = numpy.asarray(_low_level_corpus(dataset.dataset).sequence_lengths)
    tokens = tokens_per_epoch(lengths, numpy.asarray(dataset.indices))
    extra = int(config.add_extra_token_to_sequence)
    epochs = num_epochs(tokens, config.sequence_length, dataset.num_samples, extra)
    drop_last = True
    if dataset.index_split == Split.valid:
        drop_last = bool(config.drop_last_partial_validation_sequence)
    return samples_in_epochs(epochs, tokens, config.sequence_length, extra, drop_last)


def _low_level_corpus(dataset):
    """The megadata corpus behind a low-level dataset (ours or megadata's)."""
    if isinstance(dataset, IndexedDataset):
        return dataset.corpus
    if isinstance(dataset, (mdc.IndexedDataset, core_mock.MockGPTLowLevelDataset)):
        return dataset
    raise mdc.DataError(
        f"dataset: a GPTDataset reads an IndexedDataset or MockGPTLowLevelDataset, "
        f"got {type(dataset).__name__}"
    )


def _tensors(sample: dict) -> dict:
    """A megadata sample (numpy) as Megatron's dict of writable tensors (copies only of
    read-only arrays; a numpy scalar such as ``max_seqlen`` becomes a 0-d tensor)."""
    return {
        key: torch.from_numpy(value if value.flags.writeable else numpy.array(value))
        for key, value in sample.items()
    }


class GPTDataset(MegatronDataset):
    """megatron-core's GPTDataset (same constructor), computed by megadata."""

    config: GPTDatasetConfig

    def __init__(
        self,
        indexed_dataset: IndexedDataset,
        dataset_path: str | None,
        indexed_indices: numpy.ndarray,
        num_samples: int | None,
        index_split: Split,
        config: GPTDatasetConfig,
    ) -> None:
        super().__init__(
            indexed_dataset, dataset_path, indexed_indices, num_samples, index_split, config
        )
        require(
            indexed_indices is not None,
            "indexed_indices: megadata needs the split's document indices (got None)",
        )
        self._core = None
        if not self._deferred():
            self._core = self._made_core()

    def _deferred(self) -> bool:
        """Whether the index arrays wait for the first sample (Megatron's
        ``defer_npy_index_mmap``: ``document_index`` and friends are None until then)."""
        return bool(getattr(self.config, "defer_npy_index_mmap", False)) and bool(
            self.config.path_to_cache
        )

    @property
    def core(self) -> mdc.GPTDataset:
        """The megadata GPTDataset behind this one (made now when deferred)."""
        if self._core is None:
            self._core = self._made_core()
        return self._core

    @core.setter
    def core(self, value: mdc.GPTDataset) -> None:
        self._core = value

    def _made_core(self) -> mdc.GPTDataset:
        """The megadata dataset: from Megatron's cache files in ``path_to_cache`` when
        they are there and verified (:mod:`.megatron_cache`), else built (through
        megadata's own cache) and written there in Megatron's layout for stock jobs."""
        corpus = _low_level_corpus(self.dataset)
        config = core_config(self.config, blend=None, blend_per_split=None, split=None)
        make = functools.partial(
            mdc.GPTDataset, corpus, self.indices, self.num_samples, config,
            split=self.index_split.name, token_dtype=TOKEN_DTYPE,
        )
        if not self.config.path_to_cache or self.config.mock:
            return make()
        base = megatron_cache.base_path(
            self.config.path_to_cache, self.unique_description, type(self).__name__,
            self.index_split.name,
        )
        in_memory = dataclasses.replace(config, path_to_cache=None)
        arrays = megatron_cache.load(
            base, self.unique_description, megatron_cache.GPT_FILES,
            lambda: mdc.GPTDataset(corpus, self.indices, self.num_samples, in_memory,
                                   split=self.index_split.name).index_arrays,
        )
        if arrays is not None:
            return make(arrays=arrays, origin=f"Megatron cache {base}-*")
        core = make()
        megatron_cache.write(base, self.unique_description, core.index_arrays)
        return core

    @classmethod
    def _wrap(cls, core: mdc.GPTDataset, low_level, config) -> GPTDataset:
        """The Megatron view of a megadata GPTDataset built by the builder."""
        self = cls.__new__(cls)
        MegatronDataset.__init__(
            self,
            low_level,
            None if isinstance(low_level, MockGPTLowLevelDataset) else low_level.path_prefix,
            core.indices,
            core.num_samples,
            Split[core.split],
            config,
        )
        self._core = core
        return self

    @staticmethod
    def numel_low_level_dataset(  # type: ignore[override]  # Megatron's signature
        low_level_dataset: IndexedDataset,
    ) -> int:
        """Sequences: GPT splits a corpus by sequence."""
        return low_level_dataset.sequence_lengths.shape[0]

    @staticmethod
    def build_low_level_dataset(  # type: ignore[override]  # Megatron's signature
        dataset_path: str, config: GPTDatasetConfig
    ) -> IndexedDataset:
        """The corpus at ``dataset_path`` (object storage needs object_storage_cache_path)."""
        if is_object_storage_path(dataset_path):
            cache_path = config.object_storage_cache_path
            if cache_path is None:
                raise MegatronCompatError(f"object_storage_cache_path: needed for {dataset_path}")
            return IndexedDataset(
                dataset_path,
                multimodal=False,
                mmap=False,
                object_storage_config=ObjectStorageConfig(path_to_idx_cache=cache_path),
            )
        counts = None
        if config.sequences_per_dataset:
            counts = config.sequences_per_dataset[dataset_path]
        return IndexedDataset(
            dataset_path,
            multimodal=False,
            mmap=config.mmap_bin_files,
            fast_cache_load=config.fast_cache_load,
            sequences_per_dataset=counts,
            dtype_code=config.token_dtype_code if counts else None,
        )

    @property
    def document_index(self) -> numpy.ndarray | FeistelDocumentIndex | None:
        return None if self._core is None else self._core.document_index

    @property
    def sample_index(self) -> numpy.ndarray | None:
        return None if self._core is None else self._core.sample_index

    @property
    def shuffle_index(self) -> numpy.ndarray | FeistelOrder | None:
        return None if self._core is None else self._core.shuffle_index

    def __len__(self) -> int:
        if self._core is None:  # deferred: Megatron's count, from the corpus lengths
            return deferred_length(self)
        return len(self._core)

    def __getitem__(self, idx: int | None) -> dict[str, torch.Tensor]:
        """Sample ``idx`` (None: the padding sample) as Megatron's dict of tensors."""
        if torch.is_tensor(idx):
            idx = int(idx)
        if type(self)._query_document_sample_shuffle_indices is not _OWN_QUERY:
            return self._from_query(idx)  # a subclass's text (Megatron's FIM dataset)
        if idx is not None and self._plain_samples():
            text = self.core.sample_text(idx)  # the core's one-sample read
            if not text.padded:
                ones, positions = self._constants()
                tensor = torch.from_numpy(text.tokens)
                return {
                    "tokens": tensor[:-1],
                    "labels": tensor[1:],
                    "loss_mask": ones.clone(),
                    "position_ids": positions,  # shared, as megatron-core's cached one
                }
        sample = self.core[idx]
        if self.core.config.document_masking:  # megatron-core 0.19's keys
            sample.pop("segment_ids")
        return _tensors(sample)

    def _from_query(self, idx: int | None) -> dict[str, torch.Tensor]:
        """Megatron's ``__getitem__`` over the text a subclass's hook returns: masks,
        position ids (and document masks from its lengths) by Megatron's rules."""
        answer = self._query_document_sample_shuffle_indices(0 if idx is None else idx)
        text, lengths = answer[0], (list(answer[2]) if len(answer) > 2 else None)
        sample = {key: value[0] for key, value in
                  self.core.samples_from_text(numpy.asarray(text), lengths).items()}
        if idx is None:  # Megatron's batch-padding sample
            sample["loss_mask"] = numpy.zeros_like(sample["loss_mask"])
        if self.core.config.document_masking:
            sample.pop("segment_ids")
        return _tensors(sample)

    def _plain_samples(self) -> bool:
        """Whether samples need no mask work: no resets, no EOD loss mask, no attention
        mask, an extra token, a pad id the corpus cannot hold. One sample is then just
        its text: the core's one-sample read (``sample_text``) instead of its batched
        path (built for whole batches, slower for one sample)."""
        plain = self.__dict__.get("_plain")
        if plain is None:
            config, core = self.config, self.core
            dtype = numpy.dtype(core.indexed.dtype)
            plain = (
                not (config.reset_position_ids or config.reset_attention_mask)
                and not core.config.document_masking
                and not (config.eod_mask_loss or config.create_attention_mask)
                and bool(config.add_extra_token_to_sequence)
                and dtype.kind in "iu"
                and not numpy.iinfo(dtype).min <= core.pad_id <= numpy.iinfo(dtype).max
                and isinstance(self.dataset, IndexedDataset)
                and not core.has_roles  # a conversation corpus: its roles shape the mask
            )
            self.__dict__["_plain"] = plain
        return plain

    def _constants(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The all-ones loss mask (cloned per sample) and the 0..S-1 position ids."""
        cached = self.__dict__.get("_constant_tensors")
        if cached is None:
            length = self.config.sequence_length
            cached = (torch.ones(length, dtype=torch.float), torch.arange(length, dtype=torch.long))
            self.__dict__["_constant_tensors"] = cached
        return cached

    def _query_document_sample_shuffle_indices(self, idx: int) -> tuple:
        """The raw text (int64 [S + extra], pads = the pad id), the document ids and
        (megatron-core 0.19) the tokens of each document piece before padding, of sample
        ``idx``, as megatron-core returns them: the core's one-sample read
        (:meth:`megadata_core.GPTDataset.sample_text`)."""
        text = self.core.sample_text(int(idx))
        tokens = text.tokens.astype(numpy.int64)
        pad = self._pad_token_id if self._pad_token_id is not None else self.core.pad_id
        tokens[int(text.lengths.sum()) :] = pad
        if query_returns_lengths():
            return tokens, text.documents, text.lengths.tolist()
        return tokens, text.documents


_OWN_QUERY = GPTDataset._query_document_sample_shuffle_indices


class MockGPTLowLevelDataset(core_mock.MockGPTLowLevelDataset):
    """megatron-core's mock corpus from a tokenizer (``vocab_size``, ``eod``): 100,000
    documents, lengths from ``default_rng(0)``, tokens ``(1 .. L-1) % V`` then EOD."""

    seed: int = core_mock.MOCK_SEED
    size: int = core_mock.MOCK_DOCUMENTS
    max_sequence_length: int = core_mock.MOCK_MAX_LENGTH

    def __init__(self, tokenizer) -> None:
        super().__init__(tokenizer.vocab_size, tokenizer.eod)
        self.eod_token = self.eod_id

    @classmethod
    def _of(cls, corpus: core_mock.MockGPTLowLevelDataset) -> MockGPTLowLevelDataset:
        self = cls.__new__(cls)
        self.__dict__.update(corpus.__dict__)
        self.eod_token = self.eod_id
        return self


class MockGPTDataset(GPTDataset):
    """GPT samples of the mock corpus (``config.mock``: neither blend given)."""

    def __init__(
        self,
        dataset: MockGPTLowLevelDataset,
        dataset_path: str | None,
        indices: numpy.ndarray,
        num_samples: int,
        index_split: Split,
        config: GPTDatasetConfig,
    ) -> None:
        require(config.mock, "config: MockGPTDataset needs a mock config (no blend)")
        super().__init__(
            dataset,  # type: ignore[arg-type]  # a mock corpus, as in megatron-core
            dataset_path, indices, num_samples, index_split, config,
        )

    @staticmethod
    def numel_low_level_dataset(  # type: ignore[override]  # Megatron's signature
        low_level_dataset: MockGPTLowLevelDataset,
    ) -> int:
        return len(low_level_dataset)

    @staticmethod
    def build_low_level_dataset(  # type: ignore[override]  # Megatron's signature
        dataset_path: str | None, config: GPTDatasetConfig
    ) -> MockGPTLowLevelDataset:
        return MockGPTLowLevelDataset(config.tokenizer)
