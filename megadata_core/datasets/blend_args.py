"""Megatron-LM's data command-line forms as a ``blend`` / ``blend_per_split`` / ``split``.

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
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any

from megadata_core.errors import DataError
from megadata_core.indices import splits

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


def checked_blend(value: object, field: str) -> tuple[tuple[str, ...], tuple[float, ...] | None]:
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
    prefixes = tuple(os.fspath(prefix) for prefix in prefixes)
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
