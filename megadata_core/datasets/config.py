"""``GPTDataConfig``: the GPT dataset configuration, with Megatron's field names.

Field names and defaults follow megatron-core 0.16.1's ``GPTDatasetConfig`` (and its base
``BlendedMegatronDatasetConfig``). Megatron takes the end-of-document and pad ids from a
tokenizer object; here they are plain fields (``eod_id``, ``pad_id``). Megatron's three
``Optional[bool]`` switches that it asserts are set (``reset_position_ids``,
``reset_attention_mask``, ``eod_mask_loss``) default to False here.

Blends and the split string are checked here (shapes, weights > 0, the split parses);
the builder (:mod:`megadata_core.build.builder`) turns them into datasets.

Megatron-LM's data command-line forms as a ``blend`` / ``blend_per_split`` / ``split``.

Megatron-LM's ``get_blend_and_blend_per_split`` and ``get_blend_from_list``:

* ``--data-path 0.3 /a/prefix 0.7 /b/prefix`` (weight, prefix pairs) or
  ``--data-path /a/prefix /b/prefix`` (no weights: blended by their sizes), with
  ``--split "969,30,1"`` (Megatron-LM's legacy default when omitted);
* ``--data-args-path FILE``: the file's content is the data-path string;
* ``--train-data-path / --valid-data-path / --test-data-path``: one blend per split;
* ``--per-split-data-args-path FILE``: JSON ``{"train": ..., "valid": ..., "test": ...}``,
  each a data-path string or list (or null).

:func:`blend_from_args` returns the three GPTDataConfig fields::

    config = mdc.GPTDataConfig(random_seed=1234, sequence_length=4096,
                               **blend_from_args(data_path="0.3 /a 0.7 /b", split="98,2"))

Differences from Megatron (stricter, never different values): a list element holding
spaces (a quoted ``"0.3 /a 0.7 /b"``) is split into items (Megatron would read it as one
prefix); a list mixing weighted and unweighted items raises (Megatron means to assert,
but its check consumes a ``map`` iterator and passes, reading every item as a prefix);
``--data-path`` with per-split paths, or ``--split`` with per-split paths, raises.

``GPTDataConfig.blend_schedule``: stages of blends, as code writes them and as text.

In code, a list of ``(start, blend)`` pairs, stages in order, the first at 0::

    blend_schedule=[(0, (["/data/web", "/data/code"], [0.8, 0.2])),
                    ("50B", "0.5 /data/web 0.2 /data/code 0.3 /data/math")]

``start`` is an int (samples) or a string (tokens, with Megatron's ``K``/``M``/``B``/``T``
suffixes, converted to samples as ``--step-batch-size-schedule`` thresholds are:
``int(float(number) * multiplier) // sequence_length``); ``blend`` is a ``(prefixes,
weights)`` pair or Megatron's ``--data-path`` string, with weights (a stage states its
mixture). A prefix may join at a later stage or leave one (weight 0, or not listed).

As text (the tools' ``--blend_schedule``, or a file of it), stages are separated by ``;``
or new lines, each ``START: WEIGHT PREFIX WEIGHT PREFIX ...``; ``#`` starts a comment;
a START is Megatron's threshold, in tokens::

    0:   0.8 /data/web 0.2 /data/code
    50B: 0.5 /data/web 0.2 /data/code 0.3 /data/math   # anneal on math

The normalized field is a tuple of ``(start in samples, (prefixes, weights))``;
:func:`schedule_arrays` lays it out for the indices (one id per prefix, in the order the
prefixes first appear, so a prefix keeps its id when later stages are edited).
"""

from __future__ import annotations

import copy
import json
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from megadata_core import modes
from megadata_core.checks import check_int, megatron_count
from megadata_core.datasets.raw_member import raw_member
from megadata_core.errors import DataError
from megadata_core.format.reader import DEFAULT_MAX_OPEN_FILES, check_limit
from megadata_core.indices import splits
from megadata_core.modes import BlendOrder, Packing, Shuffle
from megadata_core.modes.trained_roles import TrainedRoles

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
    "train_on_assistant_responses_only",
    "train_on_thinking_traces",
    "train_on_tool_calls",
)


def _bool(field: str, value: object) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise DataError(f"{field}: {value!r} is not a bool")
    return bool(value)


def _blend(field: str, value: object) -> tuple | None:
    """``(prefixes, weights or None)`` as tuples (hashable), shape-checked."""
    return None if value is None else _checked_blend(value, field)


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
            (:mod:`megadata_core.datasets.config`). Each dataset is read on one
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
            (:mod:`megadata_core.datasets.masks`; megatron-core 0.19's
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
            (:mod:`megadata_core.datasets.masks`). Changes only what a sample
            carries: not part of any cache key or fingerprint.
        train_on_assistant_responses_only, train_on_thinking_traces,
        train_on_tool_calls: which roles train in members that are conversation
            corpora (a ``PREFIX_roles`` sibling, :mod:`megadata_core.format.roles`):
            megatron-core's names; parsed once into :attr:`trained_roles_mode`
            (:mod:`megadata_core.modes.trained_roles`): assistant content and its end
            of turn always, reasoning / tool calls by their switch, tool responses
            never; with the first False every role but tool responses. They change
            only the loss mask of roles members (docs/conversations.md): not part of
            any cache key or fingerprint.
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
    train_on_assistant_responses_only: bool = True
    train_on_thinking_traces: bool = False
    train_on_tool_calls: bool = False
    #: (packing, shuffle, blend order) mode objects, set once by ``__post_init__``.
    _modes: ClassVar[tuple[Packing, Shuffle, BlendOrder]]
    #: The trained roles of the three ``train_on_*`` switches, set by ``__post_init__``.
    _trained_roles: ClassVar[TrainedRoles]

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
    def trained_roles_mode(self) -> TrainedRoles:
        """The :class:`~megadata_core.modes.trained_roles.TrainedRoles` of the three
        ``train_on_*`` switches: which labels of a roles member train."""
        return self._trained_roles

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
        put("_trained_roles", TrainedRoles.of(self))
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
            put("blend_schedule", _check_blend_schedule(self.blend_schedule,
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
        """This config with another ``random_seed`` (checked); the other fields are not
        checked again (a large schedule's check is dear and its members make one config
        per epoch: docs/benchmarks.md, "Figures behind design choices")."""
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


#: Megatron-LM's split when ``--data-path`` is given without ``--split``.
LEGACY_DEFAULT_SPLIT = "969, 30, 1"
_PER_SPLIT_FIELDS = ("train_data_path", "valid_data_path", "test_data_path")

Blend = tuple[list[str], "list[float] | None"]


def _items(value: str | Sequence[str], field: str) -> list[str]:
    if isinstance(value, (str, bytes, os.PathLike)):
        value = [value]
    items: list[str] = []
    for element in value:
        if isinstance(element, bytes):
            element = element.decode()
        element = os.fspath(element) if isinstance(element, os.PathLike) else element
        if not isinstance(element, str):
            raise DataError(f"{field}: {element!r} is not a string")
        items.extend(element.split())
    if not items:
        raise DataError(f"{field}: no dataset prefixes")
    return items


def _weight(item: str) -> float | None:
    try:
        return float(item)
    except ValueError:
        return None


def blend_from_list(value: str | Sequence[str] | None, field: str = "data_path") -> Blend | None:
    """Megatron's ``get_blend_from_list``: ``[w1, p1, w2, p2, ...]`` or ``[p1, p2, ...]``.

    An even number of items is read as weight, prefix pairs when every weight item parses
    as a float; otherwise the items are prefixes, and none may parse as a number (Megatron
    would open ``"0.5"`` of ``"0.5 /a /b"`` as a prefix and fail much later).

    Args:
        value: a data-path string (split on whitespace) or a list of items.
        field: the name in error messages.

    Returns:
        ``(prefixes, weights or None)`` (weights as given, not normalized), or None.
    """
    if value is None:
        return None
    items = _items(value, field)
    if len(items) % 2 == 0:
        weights = [_weight(item) for item in items[0::2]]
        missing = [item for item, weight in zip(items[0::2], weights) if weight is None]
        if not missing:  # (every weight a float)
            return items[1::2], [weight for weight in weights if weight is not None]
        if len(missing) < len(weights):
            raise DataError(
                f"{field}: {missing[0]!r} is not a weight, but other items are: give a weight "
                f"before every prefix or none at all ({' '.join(items)!r})"
            )
    numbers = [item for item in items if _weight(item) is not None]
    if numbers:  # "0.5 /a /b", "/a 0.5 /b": a weight without its pair, not a prefix
        raise DataError(
            f"{field}: {numbers[0]!r} looks like a weight, but the items do not pair up as "
            f"weight, prefix ({' '.join(items)!r}): give a weight before every prefix or none "
            f"at all (write a prefix named like a number as ./{numbers[0]})"
        )
    return items, None


def _checked_blend(value: object, field: str) -> tuple[tuple[str, ...], tuple[float, ...] | None]:
    """A blend as ``(prefixes, weights or None)`` tuples (hashable), shape-checked: a pair
    or Megatron's ``--data-path`` string (``"0.3 /a 0.7 /b"`` or ``"/a /b"``).

    Raises:
        DataError: naming ``field``: not a pair, no prefixes, weights that are not
            numbers, not one per prefix, or negative / all zero.
    """
    pair: Any = blend_from_list(value, field) if isinstance(value, str) else value
    try:  # any object: what it holds is checked below
        prefixes, weights = pair
    except (TypeError, ValueError):
        raise DataError(f"{field}: {pair!r} is not a (prefixes, weights) pair") from None
    if isinstance(prefixes, (str, bytes)) or not prefixes:
        raise DataError(f"{field}: prefixes {prefixes!r} must be a non-empty list of paths")
    prefixes = tuple(raw_member(prefix, field) or os.fspath(prefix) for prefix in prefixes)
    if weights is None:
        return prefixes, None
    try:
        weights = tuple(float(weight) for weight in weights)
    except (TypeError, ValueError):
        raise DataError(f"{field}: weights {weights!r} must be numbers") from None
    if len(weights) != len(prefixes):
        raise DataError(
            f"{field}: {len(prefixes)} prefixes but {len(weights)} weights ({weights!r})"
        )
    splits.check_weights(weights, f"{field} weights")
    return prefixes, weights


def read_data_args(path: str | os.PathLike, field: str = "data_args_path") -> list[str]:
    """The whitespace-separated items of a data-args file (Megatron's --data-args-path)."""
    try:
        with open(path, encoding="utf-8") as stream:
            return stream.read().split()
    except OSError as error:
        raise DataError(f"{field}: cannot read {os.fspath(path)!r} ({error.strerror})") from None


def _per_split_file(path: str | os.PathLike) -> list[Blend | None]:
    field = "per_split_data_args_path"
    try:
        with open(path, encoding="utf-8") as stream:
            content = json.load(stream)
    except OSError as error:
        raise DataError(f"{field}: cannot read {os.fspath(path)!r} ({error.strerror})") from None
    except json.JSONDecodeError as error:
        raise DataError(f"{field}: {os.fspath(path)!r} is not JSON ({error})") from None
    if not isinstance(content, dict):
        raise DataError(f"{field}: {os.fspath(path)!r} must hold an object with train/valid/test")
    return [
        blend_from_list(content.get(name), f"{field}[{name}]")
        for name in ("train", "valid", "test")
    ]


def blend_from_args(
    *,
    data_path: str | Sequence[str] | None = None,
    data_args_path: str | os.PathLike | None = None,
    split: str | None = None,
    train_data_path: str | Sequence[str] | None = None,
    valid_data_path: str | Sequence[str] | None = None,
    test_data_path: str | Sequence[str] | None = None,
    per_split_data_args_path: str | os.PathLike | None = None,
) -> dict:
    """Megatron-LM's data arguments as GPTDataConfig fields ``blend``,
    ``blend_per_split`` and ``split`` (a dict; unused fields are None).

    With ``data_path`` / ``data_args_path`` the split defaults to Megatron-LM's legacy
    ``"969, 30, 1"``; per-split paths take no split. No data arguments at all gives all
    None (Megatron's mock data).
    """
    per_split = (train_data_path, valid_data_path, test_data_path)
    use_per_split = any(path is not None for path in per_split) or (
        per_split_data_args_path is not None
    )
    if data_path is not None and data_args_path is not None:
        raise DataError("data_args_path: give data_path or data_args_path, not both")
    if data_path is not None or data_args_path is not None:
        if use_per_split:
            raise DataError(
                "data_path: a single blend (data_path / data_args_path) and per-split paths "
                "(train/valid/test_data_path, per_split_data_args_path) are incompatible"
            )
        if data_args_path is not None:
            blend = blend_from_list(read_data_args(data_args_path), "data_args_path")
        else:
            blend = blend_from_list(data_path, "data_path")
        return {
            "blend": blend,
            "blend_per_split": None,
            "split": LEGACY_DEFAULT_SPLIT if split is None else split,
        }
    if not use_per_split:
        return {"blend": None, "blend_per_split": None, "split": split}
    if split is not None:
        raise DataError(f"split: {split!r} is incompatible with per-split data paths")
    if per_split_data_args_path is not None:
        if any(path is not None for path in per_split):
            raise DataError(
                "per_split_data_args_path: incompatible with train/valid/test_data_path"
            )
        blends = _per_split_file(per_split_data_args_path)
    else:
        blends = [
            blend_from_list(path, field) for path, field in zip(per_split, _PER_SPLIT_FIELDS)
        ]
    return {"blend": None, "blend_per_split": blends, "split": None}


Stage = tuple[int, tuple[tuple[str, ...], tuple[float, ...]]]


def token_count(text: str, field: str) -> int:
    """A count with Megatron's optional ``K``/``M``/``B``/``T`` suffix, parsed as its
    ``--step-batch-size-schedule`` parses one (:func:`~megadata_core.checks.megatron_count`),
    >= 0."""
    try:
        number = megatron_count(text)
    except ValueError:
        if text.strip().lower().lstrip("+-") in ("nan", "inf", "infinity"):
            raise DataError(f"{field}: {text!r} must be a finite number >= 0") from None
        raise DataError(
            f"{field}: {text!r} is not a number (with an optional K, M, B or T suffix)"
        ) from None
    except OverflowError:
        raise DataError(f"{field}: {text!r} must be a finite number >= 0") from None
    if number < 0:
        raise DataError(f"{field}: {text!r} must be a finite number >= 0")
    return number


def _start(value: object, sequence_length: int, field: str) -> int:
    """A stage's start in samples: an int as is, a string as tokens."""
    if isinstance(value, str):
        return token_count(value, field) // sequence_length
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise DataError(f"{field}: {value!r} is not an int (samples) or a string (tokens)")
    if value < 0:
        raise DataError(f"{field}: {value} must be >= 0")
    return int(value)


def _stage_blend(value: object, field: str) -> tuple[tuple[str, ...], tuple[float, ...]]:
    prefixes, weights = _checked_blend(value, field)
    if weights is None:
        raise DataError(
            f"{field}: no weights; every stage of a schedule states its mixture "
            "(e.g. '0.7 /a 0.3 /b')"
        )
    seen: set[str] = set()
    for prefix in prefixes:
        if prefix in seen:
            raise DataError(f"{field}: prefix {prefix!r} is listed twice")
        seen.add(prefix)
    return prefixes, weights


def parse_schedule_text(text: str, field: str = "blend_schedule") -> list[tuple[str, str]]:
    """``[(start, blend string), ...]`` of the text form (see the module docstring)."""
    stages = []
    for line in text.replace(";", "\n").splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        start, colon, blend = line.partition(":")
        if not colon or not start.strip() or not blend.strip():
            raise DataError(
                f"{field}: stage {line!r} is not 'START: WEIGHT PREFIX ...' "
                "(e.g. '50B: 0.5 /data/web 0.5 /data/math')"
            )
        stages.append((start.strip(), blend.strip()))
    if not stages:
        raise DataError(f"{field}: no stages in {text!r}")
    return stages


def _check_blend_schedule(value: object, sequence_length: int, field: str = "blend_schedule"
                         ) -> tuple[Stage, ...]:
    """The normalized schedule: ``((start in samples, (prefixes, weights)), ...)``.

    Raises:
        DataError: naming the stage: a start that is not 0 first or not after the one
            before (in samples), a blend without weights, weights all 0 or negative.
    """
    if isinstance(value, str):
        value = parse_schedule_text(value, field)
    if isinstance(value, (bytes, os.PathLike)) or not isinstance(value, Sequence) or not value:
        raise DataError(f"{field}: {value!r} is not a non-empty list of (start, blend) stages")
    stages: list[Stage] = []
    for k, stage in enumerate(value):
        try:
            start, blend = stage
        except (TypeError, ValueError):
            raise DataError(f"{field}[{k}]: {stage!r} is not a (start, blend) pair") from None
        samples = _start(start, sequence_length, f"{field}[{k}] start")
        if k == 0 and samples != 0:
            raise DataError(f"{field}[0] start: {start!r} is sample {samples}; the first "
                            "stage starts at 0")
        if k and samples <= stages[-1][0]:
            raise DataError(
                f"{field}[{k}] start: {start!r} is sample {samples}, not after stage "
                f"{k - 1}'s {stages[-1][0]}; starts must increase (tokens are counted in "
                f"samples of {sequence_length})"
            )
        stages.append((samples, _stage_blend(blend, f"{field}[{k}] blend")))
    return tuple(stages)


def schedule_arrays(schedule: Sequence[Stage]) -> tuple[list[str], np.ndarray, np.ndarray]:
    """``(prefixes, starts int64 [K], weights float64 [K, n])``: every prefix once, in the
    order of first appearance; a prefix a stage does not list has weight 0 there."""
    prefixes = list(dict.fromkeys(p for _, (names, _) in schedule for p in names))
    column = {prefix: number for number, prefix in enumerate(prefixes)}
    starts = np.array([start for start, _ in schedule], dtype=np.int64)
    weights = np.zeros((len(schedule), len(prefixes)), dtype=np.float64)
    for k, (_, (names, values)) in enumerate(schedule):
        weights[k, [column[p] for p in names]] = values
    return prefixes, starts, weights
