"""Train / valid / test splits and per-dataset sample counts, as megatron-core 0.16.1.

A split string (``"969,30,1"``, ``"98,2"``, ``"0.9,0.1,0"``) becomes three normalized
fractions (:func:`parse_split`, missing parts are 0), then a *split matrix* of
``(begin, end)`` book-ends per split, None for an empty split (:func:`split_matrix`),
then contiguous document ranges ``[int(round(begin * N)), int(round(end * N)))``
(:func:`document_ranges`). Blends: :func:`normalize_weights` and
:func:`samples_per_dataset` (Megatron's ``_get_size_per_split_per_dataset``). Every float
is computed with the same operations in the same order as Megatron, so the boundaries
and counts are bit-identical.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from megadata_core.errors import DataError

SPLIT_NAMES = ("train", "valid", "test")
_NUMBER = re.compile(r"[.0-9]+")  # Megatron's pattern: runs of digits and dots
_SEPARATORS = re.compile(r"[\s,/:;]*")

_Bookend = tuple[float, float]


def parse_split(split: str, field: str = "split") -> tuple[float, float, float]:
    """Megatron's split string as three normalized fractions (train, valid, test).

    Numbers are the ``[.0-9]+`` runs Megatron reads, separated by commas (or ``/``,
    ``:``, ``;``, spaces); missing trailing parts are 0; the sum is normalized as
    Megatron's ``normalize`` does (float64 division by the numpy sum).

    Stricter than Megatron, which drops every other character (it reads ``"98,-2"`` as
    ``"98,2"`` and ``"1e-3,1"`` as three numbers): a sign, letter or other character
    raises, as do more than three parts, an unparsable number (``"1.2.3"``) and a sum
    that is 0 or not finite.

    Raises:
        DataError: naming ``field`` and the string.
    """
    if not isinstance(split, str):
        raise DataError(f"{field}: {split!r} is not a string")
    runs = _NUMBER.findall(split)
    rest = _NUMBER.sub(" ", split)
    if not _SEPARATORS.fullmatch(rest):
        if _SEPARATORS.fullmatch(rest.replace("-", "")):
            raise DataError(f"{field}: {split!r} has a negative part; parts must be >= 0")
        raise DataError(
            f"{field}: {split!r} is not a list of numbers separated by commas (e.g. '969,30,1')"
        )
    try:
        parts = [float(run) for run in runs]
    except ValueError:
        raise DataError(f"{field}: {split!r} holds a part that is not a number") from None
    if not 1 <= len(parts) <= len(SPLIT_NAMES):
        raise DataError(f"{field}: {split!r} must hold 1 to 3 numbers, got {len(parts)}")
    parts += [0.0] * (len(SPLIT_NAMES) - len(parts))
    vector = np.array(parts, dtype=np.float64)
    total = vector.sum()
    if not math.isfinite(total) or total <= 0:
        raise DataError(f"{field}: {split!r} must have a positive, finite sum")
    return tuple((vector / total).tolist())


def split_matrix(fractions: Sequence[float]) -> list[_Bookend | None]:
    """Book-ends of each split: ``[.9, .09, .01] -> [(0, .9), (.9, .99), (.99, 1.0)]``;
    None where a split is empty (end <= begin). Cumulative sums left to right in Python
    floats, as Megatron's ``convert_split_vector_to_split_matrix``."""
    edges: list[float] = [0]
    for fraction in fractions:
        edges.append(edges[-1] + fraction)
    return [(lo, hi) if hi > lo else None for lo, hi in zip(edges[:-1], edges[1:])]


def document_ranges(matrix: Sequence[_Bookend | None], count: int) -> list[range | None]:
    """Each split's documents ``range(int(round(lo * N)), int(round(hi * N)))`` (Python's
    round: half to even), None where the book-end is None. ``count`` = N sequences."""
    return [None if bookend is None else document_range(bookend, count) for bookend in matrix]


def document_range(bookend: _Bookend, count: int) -> range:
    """One split's documents of :func:`document_ranges` (``bookend`` not None)."""
    total = float(count)
    return range(int(round(bookend[0] * total)), int(round(bookend[1] * total)))


def document_bounds(
    bookends: npt.ArrayLike, counts: npt.ArrayLike
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`document_ranges` of many (book-end, count) pairs at once: int64 [J] first
    and end document of each, from float64 [J, 2] book-ends and int [J] counts (numpy's
    rint rounds half to even, as Python's round; the products are the same doubles)."""
    bookends = np.asarray(bookends, dtype=np.float64).reshape(-1, 2)
    total = np.asarray(counts, dtype=np.int64).astype(np.float64)[:, None]
    bounds = np.rint(bookends * total).astype(np.int64)
    return bounds[:, 0], bounds[:, 1]


def check_weights(weights: Sequence[float], field: str = "weights") -> list[float]:
    """Weights as Python floats: each finite and >= 0, not all 0. (Megatron's
    BlendedDataset asserts every weight > 0; a 0 here means the dataset is never read,
    see :class:`megadata_core.BlendedDataset`.)"""
    try:
        values = [float(weight) for weight in weights]
    except (TypeError, ValueError):
        raise DataError(f"{field}: {weights!r} are not numbers") from None
    if not values:
        raise DataError(f"{field}: no weights")
    for position, weight in enumerate(values):
        if not math.isfinite(weight) or weight < 0:
            raise DataError(
                f"{field}: weight {position} is {weight!r}; every weight must be finite and >= 0"
            )
    if not any(values):
        raise DataError(f"{field}: every weight is 0 ({values!r})")
    return values


def normalize_weights(weights: Sequence[float], field: str = "weights") -> list[float]:
    """Weights divided by their sum, as Megatron's ``normalize``: float64 numpy division
    by ``numpy.sum`` (pairwise summation, so not Python's ``sum`` past 8 weights)."""
    vector = np.array(check_weights(weights, field), dtype=np.float64)
    return (vector / vector.sum()).tolist()


def samples_per_dataset(
    weights: Sequence[float], sizes: Sequence[int | None], surplus: float = 0.0
) -> list[list[int | None]]:
    """Samples to request from each dataset of a blend, per split (Megatron's
    ``_get_size_per_split_per_dataset``): ``ceil(ceil(size * w) * (1 + surplus))``.

    Args:
        weights: the normalized weights, one per dataset.
        sizes: the requested samples per split; None where a split is not built (its
            entry stays None).
        surplus: ``mid_level_dataset_surplus`` (0 for the targets the blend draws).

    Returns:
        ``[dataset][split]`` sample counts (Python ints, or None).
    """
    return [
        [
            None if size is None else int(math.ceil(math.ceil(size * weight) * (1 + surplus)))
            for size in sizes
        ]
        for weight in weights
    ]
