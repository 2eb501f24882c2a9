"""``GPTDataConfig``: the GPT dataset configuration, with Megatron's field names.

Field names and defaults follow megatron-core 0.16.1's ``GPTDatasetConfig`` (and its base
``BlendedMegatronDatasetConfig``). Megatron takes the end-of-document and pad ids from a
tokenizer object; here they are plain fields (``eod_id``, ``pad_id``). Megatron's three
``Optional[bool]`` switches that it asserts are set (``reset_position_ids``,
``reset_attention_mask``, ``eod_mask_loss``) default to False here.

Blends and the split string are checked here (shapes, weights > 0, the split parses);
the builder (:mod:`megadata_core.build.builder`) turns them into datasets.
"""

from __future__ import annotations

import copy
import math
import os
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from megadata_core import modes
from megadata_core.checks import check_int
from megadata_core.datasets import blend_args
from megadata_core.datasets.blend_schedule import check_blend_schedule
from megadata_core.errors import DataError
from megadata_core.format.open_files import DEFAULT_MAX_OPEN_FILES, check_limit
from megadata_core.indices import splits
from megadata_core.modes import BlendOrder, Packing, Shuffle

SPLIT_NAMES = ("train", "valid", "test")

_BOOL_FIELDS = (
    "mmap_bin_files",
    "reset_position_ids",
    "reset_attention_mask",
    "eod_mask_loss",
    "create_attention_mask",
    "drop_last_partial_validation_sequence",
    "add_extra_token_to_sequence",
    "multiple_validation_sets",
    "full_validation",
    "document_masking",
    "source_ids",
)


def _bool(field: str, value: object) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise DataError(f"{field}: {value!r} is not a bool")
    return bool(value)


def _blend(field: str, value: object) -> tuple | None:
    """``(prefixes, weights or None)`` as tuples (hashable), shape-checked."""
    return None if value is None else blend_args.checked_blend(value, field)


def _seed(value: object) -> int:
    seed = check_int("random_seed", value)
    if not 0 <= seed < 1 << 32:
        raise DataError(f"random_seed: {seed} must be in [0, 2**32)")
    return seed


def parse_split(split: str) -> tuple[float, float, float]:
    """Megatron's split string (``"969,30,1"``, ``"98/2/0"``) as normalized fractions
    (:func:`megadata_core.indices.splits.parse_split`; missing trailing parts are 0)."""
    return splits.parse_split(split, "split")


@dataclass(frozen=True)
class GPTDataConfig:
    """Configuration of GPT datasets (Megatron's ``GPTDatasetConfig`` field names).

    Attributes:
        random_seed: seed of every RandomState / Feistel key, in ``[0, 2**32)``.
        sequence_length: S, tokens per sample (samples read S + 1 tokens with
            ``add_extra_token_to_sequence``).
        blend: ``(prefixes, weights or None)``, or Megatron's ``--data-path`` string
            (``"0.3 /a 0.7 /b"``, ``"/a /b"``); weights finite, >= 0 and not all 0
            (a 0 weight: the dataset is never read; Megatron asserts > 0); not with
            ``blend_per_split``.
        blend_per_split: one blend (or None) per split: train, valid, test.
        blend_schedule: blends that change during training: ``[(start, blend), ...]``,
            stages in order, the first at 0; ``start`` in samples (int) or tokens (a
            string with Megatron's K/M/B/T suffixes, ``"50B"``), ``blend`` a weighted
            ``(prefixes, weights)`` or ``--data-path`` string; or the text form
            ``"0: 0.8 /a 0.2 /b; 50B: 0.5 /a 0.5 /c"``
            (:mod:`megadata_core.datasets.blend_schedule`). Each dataset is read on one
            cursor across all stages (no sample twice); applies to every split (the
            stages' starts in that split's samples), as ``blend`` does. Not with
            ``blend`` or ``blend_per_split``; needs ``split``.
        split: Megatron's split string, e.g. ``"969,30,1"`` (required with ``blend``).
        path_to_cache: directory of the index cache; None builds in memory.
        mmap_bin_files: read .bin files through mmap (else pread).
        mid_level_dataset_surplus: extra share of samples built per blended dataset.
        reset_position_ids: restart position ids after every EOD.
        reset_attention_mask: block attention across EODs.
        eod_mask_loss: no loss on EOD tokens.
        create_attention_mask: return an ``attention_mask`` (bool, True = masked).
        drop_last_partial_validation_sequence: the valid split drops a trailing partial
            sample (else it is padded with ``pad_id``).
        add_extra_token_to_sequence: samples span S + 1 tokens (labels are the shift).
        multiple_validation_sets: keep validation blends apart (builder).
        full_validation: validate on a full epoch (builder).
        eod_id: end-of-document token id (Megatron: ``tokenizer.eod``); needed by
            ``reset_position_ids``, ``reset_attention_mask`` and ``eod_mask_loss``.
        pad_id: pad token id (Megatron: ``tokenizer.pad``, else -1).
        shuffle, blend_order, packing: the names of modes (:mod:`megadata_core.modes`,
            which registers more; a mode object is taken too, and its name kept):
        shuffle: ``"megatron"`` (bit-exact RandomState indices) or ``"feistel"`` (lazy,
            O(1)-memory sample order; not Megatron-compatible).
        blend_order: ``"balanced"`` (vectorized) or ``"megatron"`` (Megatron's exact order).
        packing: ``"concat"`` (Megatron's samples: fixed windows of the concatenated,
            shuffled documents) or ``"best_fit"`` (every epoch's documents packed into
            samples by best fit decreasing, padded at the end; a document is cut only
            when longer than a sample; :mod:`megadata_core.indices.packed_samples`).
        document_masking: samples also carry ``segment_ids``, ``cu_seqlens`` and
            ``max_seqlen``, and position ids restart per document
            (:mod:`megadata_core.datasets.document_masks`; megatron-core 0.19's
            ``inter_document_masking``, value for value). Not with
            ``reset_position_ids`` / ``reset_attention_mask``, which find documents by
            EOD tokens instead.
        packing_alignment: None, or a (``2 * cp_size`` for context parallelism's THD
            layout): best_fit places every document by its length rounded up to a
            multiple of a, and samples also carry ``cu_seqlens_padded`` (the padded
            offsets; ``cu_seqlens`` then holds the real lengths), as Megatron's
            ``--pad-packed-seq-alignment``. Needs ``packing="best_fit"``,
            ``document_masking=True`` and ``sequence_length`` a multiple of a; samples
            hold S tokens (the extra label token is padding).
        mask_cross_document_labels: no loss on a label that crosses into the next
            document piece (a document's last position, whose label is the next
            document's first token). None (the default) decides by packing: False for
            ``concat`` (Megatron 0.19's ``inter_document_masking`` trains on it), True
            for ``best_fit`` (a packed document's neighbour is arbitrary, so that label
            is noise), with or without ``packing_alignment``. True or False overrides
            either way. :attr:`masks_cross_document_labels` is the decision.
        source_ids: samples also carry ``dataset_ids`` (index into the blend's
            prefixes) and ``document_ids`` (document in its corpus), int32 [S], the
            source of every token, -1 on padding
            (:mod:`megadata_core.datasets.source_ids`). Changes only what a sample
            carries: not part of any cache key or fingerprint.
    """

    random_seed: int
    sequence_length: int
    blend: tuple | None = None
    blend_per_split: tuple | None = None
    split: str | None = None
    blend_schedule: tuple | None = None
    path_to_cache: str | None = None
    mmap_bin_files: bool = True
    mid_level_dataset_surplus: float = 0.005
    reset_position_ids: bool = False
    reset_attention_mask: bool = False
    eod_mask_loss: bool = False
    create_attention_mask: bool = True
    drop_last_partial_validation_sequence: bool = True
    add_extra_token_to_sequence: bool = True
    multiple_validation_sets: bool = False
    full_validation: bool = False
    eod_id: int | None = None
    pad_id: int = -1
    shuffle: str = "megatron"
    blend_order: str = "balanced"
    packing: str = "concat"
    document_masking: bool = False
    mask_cross_document_labels: bool | None = None
    packing_alignment: int | None = None
    source_ids: bool = False
    max_open_files: int = DEFAULT_MAX_OPEN_FILES
    #: (packing, shuffle, blend order) mode objects, set once by ``__post_init__``.
    _modes: ClassVar[tuple[Packing, Shuffle, BlendOrder]]

    @property
    def masks_cross_document_labels(self) -> bool:
        """Whether samples train no label that crosses into another document:
        ``mask_cross_document_labels``, or when None, the packing's default (True for
        ``best_fit`` only)."""
        if self.mask_cross_document_labels is None:
            return self.packing_mode.masks_cross_document_labels
        return self.mask_cross_document_labels

    @property
    def packing_mode(self) -> Packing:
        """The :class:`~megadata_core.modes.Packing` that ``packing`` names, with the
        options it owns (``packing_alignment``)."""
        return self._modes[0]

    @property
    def shuffle_mode(self) -> Shuffle:
        """The :class:`~megadata_core.modes.Shuffle` that ``shuffle`` names."""
        return self._modes[1]

    @property
    def blend_order_mode(self) -> BlendOrder:
        """The :class:`~megadata_core.modes.BlendOrder` that ``blend_order`` names."""
        return self._modes[2]

    def __post_init__(self) -> None:
        def put(name: str, value: object) -> None:
            object.__setattr__(self, name, value)

        put("random_seed", _seed(self.random_seed))
        length = check_int("sequence_length", self.sequence_length)
        if length <= 0:
            raise DataError(f"sequence_length: {length} must be > 0")
        put("sequence_length", length)
        for name in _BOOL_FIELDS:
            put(name, _bool(name, getattr(self, name)))
        self._check_sources(put)
        if self.path_to_cache is not None:
            put("path_to_cache", os.fspath(self.path_to_cache))
        surplus = self.mid_level_dataset_surplus
        if isinstance(surplus, (bool, np.bool_)) or not isinstance(
            surplus, (int, float, np.integer, np.floating)
        ):
            raise DataError(f"mid_level_dataset_surplus: {surplus!r} is not a number")
        if not math.isfinite(surplus) or surplus < 0:
            raise DataError(f"mid_level_dataset_surplus: {surplus!r} must be finite and >= 0")
        put("mid_level_dataset_surplus", float(surplus))
        if self.eod_id is not None:
            put("eod_id", check_int("eod_id", self.eod_id))
        pad = check_int("pad_id", self.pad_id)
        if not -(1 << 63) <= pad < 1 << 63:
            raise DataError(f"pad_id: {pad} does not fit int64")
        put("pad_id", pad)
        put("max_open_files", check_limit("max_open_files", self.max_open_files))
        shuffle, order = modes.shuffle(self.shuffle), modes.blend_order(self.blend_order)
        packing = modes.packing(self.packing)
        for name, mode in (("shuffle", shuffle), ("blend_order", order), ("packing", packing)):
            put(name, mode.name)  # a mode object given: the field holds its name
        if self.mask_cross_document_labels is not None:
            put("mask_cross_document_labels",
                _bool("mask_cross_document_labels", self.mask_cross_document_labels))
        self._check_alignment(put)
        put("_modes", (packing.configured(self), shuffle, order))
        if self.document_masking:
            for name in ("reset_position_ids", "reset_attention_mask"):
                if getattr(self, name):
                    raise DataError(
                        f"document_masking: True contradicts {name}=True (document masking "
                        f"takes document boundaries from the index, {name} from EOD "
                        "tokens); set one of them"
                    )

    def _check_alignment(self, put) -> None:
        """``packing_alignment``: None or an int >= 1 (the packing that owns it checks
        the rest)."""
        alignment = self.packing_alignment
        if alignment is None:
            return
        if isinstance(alignment, (bool, np.bool_)) or not isinstance(
            alignment, (int, np.integer)
        ):
            raise DataError(f"packing_alignment: {alignment!r} is not an int")
        alignment = int(alignment)
        if alignment < 1:
            raise DataError(f"packing_alignment: {alignment} must be >= 1")
        put("packing_alignment", alignment)

    def _check_sources(self, put) -> None:
        """Blend / blend_per_split / split: types and Megatron's compatibility rules."""
        put("blend", _blend("blend", self.blend))
        per_split = self.blend_per_split
        if per_split is not None:
            per_split = tuple(per_split)
            if len(per_split) != len(SPLIT_NAMES):
                raise DataError(
                    f"blend_per_split: {len(per_split)} blends, expected one per split "
                    f"{SPLIT_NAMES}"
                )
            per_split = tuple(
                _blend(f"blend_per_split[{name}]", blend)
                for name, blend in zip(SPLIT_NAMES, per_split)
            )
            if not any(per_split):
                per_split = None
            put("blend_per_split", per_split)
        if self.blend_schedule is not None:
            put("blend_schedule", check_blend_schedule(self.blend_schedule,
                                                       self.sequence_length))
            if self.blend is not None or per_split is not None:
                other = "blend" if self.blend is not None else "blend_per_split"
                raise DataError(f"blend_schedule: {other} and blend_schedule are "
                                "incompatible (a schedule's stages are its blends)")
            if self.split is None:
                raise DataError("split: must be given with blend_schedule (e.g. '969,30,1')")
        if self.split is not None:
            if not isinstance(self.split, str):
                raise DataError(f"split: {self.split!r} is not a string")
            parse_split(self.split)
        if per_split is not None:
            if self.blend is not None:
                raise DataError("blend: blend and blend_per_split are incompatible")
            if self.split is not None:
                raise DataError(f"split: {self.split!r} is incompatible with blend_per_split")
        elif self.blend is not None and self.split is None:
            raise DataError("split: must be given with blend (e.g. '969,30,1')")

    def with_random_seed(self, seed: int) -> GPTDataConfig:
        """This config with another ``random_seed`` (checked). The other fields were
        checked when this config was made and are not checked again (a blend schedule
        of 1,000 prefixes takes ~20 ms to check; a schedule's members make one config
        per epoch)."""
        made = copy.copy(self)
        object.__setattr__(made, "random_seed", _seed(seed))
        return made

    @property
    def split_fractions(self) -> tuple[float, float, float] | None:
        """``split`` as normalized (train, valid, test) fractions, or None."""
        return None if self.split is None else parse_split(self.split)

    @property
    def split_matrix(self) -> list[tuple[float, float] | None] | None:
        """Megatron's split matrix: ``(begin, end)`` fractions per split, None for an empty
        split (e.g. ``"98,2,0"`` -> ``[(0, .98), (.98, 1.0), None]``); None without
        ``split``."""
        fractions = self.split_fractions
        return None if fractions is None else splits.split_matrix(fractions)
