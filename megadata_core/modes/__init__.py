"""Floor 3: the choices a user names in a data config, each one object of a small protocol.

``GPTDataConfig(packing="best_fit", shuffle="feistel", blend_order="megatron")`` names
three modes. Config parsing turns each name into its object once (:func:`packing`,
:func:`shuffle`, :func:`blend_order`; the config's ``packing_mode``, ``shuffle_mode`` and
``blend_order_mode``); the datasets, the cache keys, sizing, provenance and the adapters
ask the object and never compare its name. A mode is one module (its algorithm in
:mod:`megadata_core.indices`), registered by name with :func:`register`:

============  =============================================  =======================
kind          protocol                                       modes
============  =============================================  =======================
packing       :class:`Packing` (arrays, build, pieces, ...)  ``concat``, ``best_fit``
shuffle       :class:`Shuffle` (orders, their arrays)        ``megatron``, ``feistel``
blend order   :class:`BlendOrder` (a blend's two arrays)     ``balanced``, ``megatron``
raw order     windows of a raw member's pieces               ``windows``
roles         :class:`~.trained_roles.TrainedRoles` (a       the three ``train_on_*``
              table over role codes: which labels train)     switches
============  =============================================  =======================

May import the ground, format, indices and cache (floor 2); the datasets ask it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from megadata_core.checks import first_outside, out_of_range
from megadata_core.errors import DataError
from megadata_core.indices.arrays import Allocate

_multiples: dict[int, np.ndarray] = {}  # step -> read-only int64 0, step, 2 * step, ...


def counting(count: int, step: int = 1) -> np.ndarray:
    """int64 [count] ``0, step, .. (count - 1) * step`` (a read-only slice of a shared
    array, grown on demand: no array is made per batch)."""
    values = _multiples.get(step)
    if values is None or count > len(values):
        size = max(count, 4096, 2 * len(values) if values is not None else 0)
        values = np.arange(0, size * step, step, dtype=np.int64)
        values.flags.writeable = False
        _multiples[step] = values
    return values[:count]


def outside(name: str, what: str, values: np.ndarray, high: int) -> DataError:
    """The DataError of index values of array ``name`` outside ``[0, high)``."""
    value = first_outside(np.asarray(values).astype(np.int64), high)
    if value is None:  # (not reached: callers raise on a value outside)
        return DataError(f"{name}: a {what} is out of range [0, {high})")
    return out_of_range(name, what, value, high)


@dataclass(frozen=True)
class Pieces:
    """The pieces of a batch of B samples, P pieces in all (every sample has >= 1): where
    a packing's samples take their tokens.

    A piece starts at token 0 of its document except the first of each sample, which
    starts at that sample's ``offset`` (concat samples), or at ``starts`` when given
    (packed samples: any piece may start inside its document).

    Attributes:
        document: int [P] sequence id of each piece.
        length: int64 [P] tokens in the piece (>= 0).
        first: int64 [B] index of each sample's first piece.
        offset: int [B] first token of each sample's first piece within its document.
        starts: int64 [P] first token of every piece, or None (see above).
        slot: int64 [P] tokens each piece takes in its sample, its length and the padding
            after it (``packing_alignment``: the length rounded up to a multiple), or
            None (pieces back to back, each ``length`` tokens).
    """

    document: np.ndarray
    length: np.ndarray
    first: np.ndarray
    offset: np.ndarray
    starts: np.ndarray | None = None
    slot: np.ndarray | None = None

    @property
    def start(self) -> np.ndarray:
        """int64 [P] first token of each piece within its document."""
        if self.starts is not None:
            return self.starts
        start = np.zeros(len(self.length), dtype=np.int64)
        start[self.first] = self.offset
        return start


class Mode:
    """What every mode has: its ``name`` (what the config says), and how it is asked for
    (``kind``: the config field)."""

    kind: ClassVar[str]
    name: ClassVar[str]

    def __repr__(self) -> str:
        return f"<{self.kind} mode {self.name!r}>"


class Shuffle(Mode):
    """The order of documents and samples: the arrays it stores for each packing and the
    orders it computes from them."""

    kind = "shuffle"
    #: Whether the orders are drawn from one RandomState and stored (else computed).
    draws: ClassVar[bool]

    def describe(self) -> dict:
        """What the cache key adds for this order (beside ``"shuffle": name``)."""
        return {}

    def concat_arrays(self) -> tuple[str, ...]:
        """The arrays a concat dataset stores."""
        raise NotImplementedError

    def concat_indices(self, lengths: np.ndarray, ids, config, num_samples: int | None,
                       tokens: int, **options: Any) -> dict[str, np.ndarray]:
        """A concat dataset's arrays (options: ``add_extra_token``,
        ``drop_last_partial_sequence``, ``empty``)."""
        raise NotImplementedError

    def concat_orders(self, ids, arrays: dict, total: int, seed: int) -> tuple[Any, Any]:
        """``(document_index, shuffle_index)`` of a concat dataset's ``arrays``."""
        raise NotImplementedError

    def packed_order(self, arrays: dict, head: int, total: int, seed: int) -> Any:
        """The sample order of packed bins: the stored ``shuffle_index``, or computed."""
        raise NotImplementedError

    def document_positions(self, document_index, document: int) -> np.ndarray:
        """int64 [K] sorted: the positions of a concat ``document_index`` that hold
        ``document`` (provenance)."""
        raise NotImplementedError

    def unshuffle(self, order, rows: np.ndarray) -> np.ndarray:
        """int64 [K] sorted: the positions of the sample ``order`` whose rows are among
        ``rows`` (provenance)."""
        raise NotImplementedError


class Packing(Mode):
    """How a GPT dataset cuts its documents into samples.

    The protocol, asked by the datasets (:class:`~megadata_core.GPTDataset`), the cache
    keys, the builder's sizing and provenance: the arrays' names (:meth:`array_names`),
    their build (:meth:`build`), what keys them (:meth:`describe`), how many samples a
    split holds (:meth:`size`), the views a dataset reads (:meth:`views`), a batch's
    pieces (:meth:`locate`), and the rows that may hold a document (:meth:`rows_with`).
    """

    kind = "packing"
    #: Pieces may start inside a document and samples end in padding (document masks
    #: give the padding a segment of its own).
    packed: ClassVar[bool] = False
    #: The default of ``mask_cross_document_labels``.
    masks_cross_document_labels: ClassVar[bool] = False

    def configured(self, config) -> Packing:
        """This mode with the options of ``config`` it owns (checked: DataError)."""
        if config.packing_alignment is not None:
            raise DataError(
                f"packing_alignment: {config.packing_alignment} needs packing='best_fit' "
                f"and document_masking=True (got packing={config.packing!r}, "
                f"document_masking={config.document_masking}); {self.name} samples are "
                "not packed"
            )
        return self

    def array_names(self, shuffle: Shuffle) -> tuple[str, ...]:
        raise NotImplementedError

    def empty_arrays(self, shuffle: Shuffle) -> dict[str, np.ndarray]:
        """The arrays of a split asked for 0 samples of 0 documents."""
        raise NotImplementedError

    def describe(self, drop_last: bool) -> dict:
        """What the cache key adds for this packing (``drop_last``: whether a last
        partial sample is dropped): ``{"packing": name, ...}`` with its algorithm's
        version and options (only ``concat`` keeps the keys that predate packings)."""
        raise NotImplementedError

    def build(self, lengths: np.ndarray, ids, config, num_samples: int | None,
              drop_last: bool, tokens: int, empty: Allocate) -> dict[str, np.ndarray]:
        """The arrays of :meth:`array_names` for the split's ``ids`` of the corpus
        ``lengths`` (int [N]), ``tokens`` in all, into arrays from ``empty``."""
        raise NotImplementedError

    def size(self, lengths: np.ndarray, tokens: int, config, num_samples: int | None,
             drop_last: bool) -> tuple[int, int]:
        """``(epochs, samples)`` a split of documents of ``lengths`` (int [D]) holds."""
        raise NotImplementedError

    def views(self, dataset, arrays: dict) -> None:
        """Set the dataset's views of its ``arrays``: ``shuffle_index``, ``_total``,
        and what :meth:`locate` reads."""
        raise NotImplementedError

    def epochs(self, dataset) -> int:
        raise NotImplementedError

    def locate(self, dataset, rows: np.ndarray) -> Pieces:
        """The pieces of the samples at ``rows`` (shuffle index values, int [B])."""
        raise NotImplementedError

    def one_sample(self, dataset, flat: np.ndarray, row: int):
        """``(tokens, documents, lengths)`` of one sample read in scalar steps, or None
        (the batched read serves it)."""
        return None

    def rows_with(self, dataset, document: int) -> np.ndarray:
        """int64 [K]: sample rows (before the shuffle) that may hold ``document``."""
        raise NotImplementedError

    def batched(self, shuffle: Shuffle) -> bool:
        """Whether many members' arrays are built and checked together (Megatron's three
        concat arrays: :func:`megadata_core.indices.gpt_many.gpt_indices_many`)."""
        return False


class BlendOrder(Mode):
    """The order in which a blend reads its members."""

    kind = "blend_order"

    def blend(self, weights: np.ndarray, size: int | None,
              caps: list) -> tuple[np.ndarray, np.ndarray]:
        """``(dataset_index, dataset_sample_index)`` of a blend: ``size`` samples of
        float64 [n] ``weights`` (Megatron-normalized), or with ``size`` None every
        sample of members of ``caps`` samples (``weights`` are then those sizes)."""
        raise NotImplementedError

    def stage(self, weights: np.ndarray, length: int) -> tuple[np.ndarray, np.ndarray]:
        """One stage of a blend schedule: ``length`` samples of float64 [n] ``weights``,
        each member counted from 0 (:mod:`megadata_core.indices.schedule`)."""
        raise NotImplementedError

    def stages(self, rows: np.ndarray, lengths: np.ndarray):
        """Every stage at once (float64 [K, n] ``rows``, int64 [K] ``lengths``), or None:
        the schedule then orders them one :meth:`stage` at a time."""
        return None


_REGISTRY: dict[str, dict[str, Mode]] = {
    "packing": {}, "shuffle": {}, "blend_order": {}, "raw_order": {}}


def register(mode: Mode) -> Mode:
    """Make ``mode`` known by its name to configs (``GPTDataConfig(<kind>=name)``); a
    name already taken by another class is a DataError. Returns the mode."""
    known = _REGISTRY[mode.kind]
    held = known.get(mode.name)
    if held is not None and type(held) is not type(mode):
        raise DataError(f"{mode.kind}: {mode.name!r} is already a mode ({held!r})")
    known[mode.name] = mode
    return mode


def names(kind: str) -> tuple[str, ...]:
    """The registered names of a kind of mode, in registration order."""
    return tuple(_REGISTRY[kind])


def _mode(kind: str, value: object) -> Any:
    if isinstance(value, Mode) and value.kind == kind:
        return value
    found = _REGISTRY[kind].get(value) if isinstance(value, str) else None
    if found is None:
        raise DataError(f"{kind}: {value!r} is not one of {names(kind)}")
    return found


def packing(value: object) -> Packing:
    """The packing mode named ``value`` (or ``value`` itself, a :class:`Packing`)."""
    return _mode("packing", value)


def shuffle(value: object) -> Shuffle:
    """The shuffle mode named ``value`` (or ``value`` itself, a :class:`Shuffle`)."""
    return _mode("shuffle", value)


def blend_order(value: object) -> BlendOrder:
    """The blend order named ``value`` (or ``value`` itself, a :class:`BlendOrder`)."""
    return _mode("blend_order", value)


def raw_order(value: object) -> Any:
    """The raw-shards order named ``value`` (``"windows"``), or ``value`` itself."""
    return _mode("raw_order", value)


def blend_order_of(config) -> BlendOrder:
    """The blend order of a config: its ``blend_order_mode``, or the mode its
    ``blend_order`` names (any object with that field)."""
    found = getattr(config, "blend_order_mode", None)
    return found if found is not None else blend_order(getattr(config, "blend_order", None))


# The shipped modes register themselves (after the protocol above: they import it).
# Defaults first: ``names`` lists them in this order.
from megadata_core.modes import concat, best_fit  # noqa: E402,F401,I001
from megadata_core.modes import megatron_shuffle, feistel_shuffle  # noqa: E402,F401,I001
from megadata_core.modes import balanced_blend, megatron_blend  # noqa: E402,F401,I001
from megadata_core.modes import windows  # noqa: E402,F401,I001
from megadata_core.modes import trained_roles  # noqa: E402,F401,I001
