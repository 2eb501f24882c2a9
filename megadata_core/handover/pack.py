"""A batch packed for the hand-over from a worker process: fewer bytes, same arrays.

A core batch holds ``tokens`` and ``labels`` as views of one [B, S + 1] text buffer and
shares read-only constants between batches (an all-ones loss mask, 0..S-1 position ids).
A worker that pickles the batch as it is ships the text twice and the constants every
time. :class:`Packer` turns a batch into a :class:`PackedBatch` -- the text once, the
constants as recipes -- and :func:`unpack_arrays` rebuilds independent, writable arrays
from it in the consuming process, or :func:`view_arrays` the core's read-only layout
without copying. Framework adapters (Grain, torch) wrap these.

:class:`BufferPool` hands out output buffers again once the caller has dropped them (the
datasets assemble their batches in them too): fresh arrays of a few hundred KB come from
the allocator as new pages (glibc hands large freed blocks back to the OS), and faulting
those pages in costs more than filling them. It keeps a few arrays per (shape, dtype)
and hands one out again only when nothing but the pool refers to it (CPython reference
counts: any array, view, tensor or buffer export that still uses it holds one), so a
batch the caller still holds is never overwritten.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

#: How to rebuild a constant: ``("full", value)`` or ``("arange",)`` (rows 0..n-1).
Recipe = tuple


def is_constant(array: object) -> bool:
    """A plain numpy array that is read-only and owns its memory: the core's shared
    constants look like this (views and fresh batch arrays do not)."""
    return type(array) is np.ndarray and not array.flags.writeable and array.flags.owndata


def text_of(tokens: object, labels: object) -> np.ndarray | None:
    """The read-only [B, S + 1] buffer that ``tokens`` (= text[:, :-1]) and ``labels``
    (= text[:, 1:]) are views of (the core's layout), or None when they are not so."""
    if (
        type(tokens) is not np.ndarray
        or type(labels) is not np.ndarray
        or tokens.ndim != 2
        or tokens.shape != labels.shape
        or tokens.dtype != labels.dtype
        or tokens.strides != labels.strides
        or tokens.shape[1] == 0
        or tokens.strides != ((tokens.shape[1] + 1) * tokens.itemsize, tokens.itemsize)
        or labels.__array_interface__["data"][0]
        != tokens.__array_interface__["data"][0] + tokens.itemsize
    ):
        return None
    shape = (tokens.shape[0], tokens.shape[1] + 1)  # row b ends with labels[b, -1]
    return np.lib.stride_tricks.as_strided(tokens, shape, tokens.strides, writeable=False)


def recipe_of(array: np.ndarray) -> Recipe | None:
    """How to rebuild ``array`` without its bytes: every element equal (``("full", v)``),
    every row ``0..n-1`` (``("arange",)``), or None (ship it)."""
    flat = array.reshape(-1)
    if flat.size == 0 or np.array_equal(flat, np.broadcast_to(flat[0], flat.shape)):
        return ("full", flat[0].item() if flat.size else 0)
    if array.ndim >= 2 and array.dtype.kind in "iu":
        row = np.arange(array.shape[-1], dtype=array.dtype)
        if np.array_equal(array, np.broadcast_to(row, array.shape)):
            return ("arange",)
    return None


class PackedBatch:
    """A batch as a worker ships it (pickles small).

    Attributes:
        keys: the batch's keys, in order.
        text: [B, S + 1] in the core's token dtype (``tokens`` = ``text[:, :-1]``,
            ``labels`` = ``text[:, 1:]``), or None when the batch is not laid out so.
        arrays: the keys that change from batch to batch, as numpy arrays.
        constants: ``key -> (recipe, shape, dtype str)`` for the core's shared constants.
    """

    __slots__ = ("keys", "text", "arrays", "constants")

    def __init__(
        self,
        keys: tuple[str, ...],
        text: np.ndarray | None,
        arrays: dict[str, np.ndarray],
        constants: dict[str, tuple[Recipe, tuple[int, ...], str]],
    ) -> None:
        self.keys = keys
        self.text = text
        self.arrays = arrays
        self.constants = constants

    def __getstate__(self) -> tuple:
        return (self.keys, self.text, self.arrays, self.constants)

    def __setstate__(self, state: tuple) -> None:
        self.keys, self.text, self.arrays, self.constants = state


def unpack_arrays(
    packed: PackedBatch,
    empty: Callable[[tuple[int, ...], np.dtype], np.ndarray] = np.empty,
    dtypes: Mapping[str, np.dtype] | None = None,
) -> dict[str, np.ndarray]:
    """The batch ``packed`` came from, each key C-contiguous in memory of its own from
    ``empty(shape, dtype)`` (which must return arrays nothing else uses); ``dtypes`` casts
    keys it names (e.g. int64 tokens), the rest keep the core's dtypes."""
    dtypes = dtypes or {}
    out = {}
    for key in packed.keys:
        if key in packed.constants:
            recipe, shape, dtype = packed.constants[key]
            target = empty(shape, dtypes.get(key, np.dtype(dtype)))
            if recipe[0] == "full":
                target.fill(recipe[1])
            else:
                target[...] = np.arange(shape[-1], dtype=target.dtype)
        else:
            if packed.text is not None and key in ("tokens", "labels"):
                source = packed.text[:, :-1] if key == "tokens" else packed.text[:, 1:]
            else:
                source = np.asarray(packed.arrays[key])
            target = empty(source.shape, dtypes.get(key, source.dtype))
            np.copyto(target, source, casting="unsafe")
        out[key] = target
    return out


#: Constants kept by :func:`view_arrays` per consumer (by recipe, shape and dtype).
CONSTANTS_KEPT = 16


def view_arrays(
    packed: PackedBatch, constants: dict[tuple, np.ndarray]
) -> dict[str, np.ndarray]:
    """The batch ``packed`` came from in the core's own layout, without copying its bytes:
    ``tokens``/``labels`` read-only views of the one text buffer, other keys read-only,
    and each constant one read-only array shared by every batch (made once and kept in
    ``constants``, a dict the caller holds) -- as the core's ``__getitems__`` hands them out
    in-process, so consumers that only read (a device put) copy nothing here."""
    out = {}
    for key in packed.keys:
        if key in packed.constants:
            recipe, shape, dtype = packed.constants[key]
            entry = (recipe, tuple(shape), str(dtype))
            array = constants.get(entry)
            if array is None:
                array = np.empty(shape, np.dtype(dtype))
                if recipe[0] == "full":
                    array.fill(recipe[1])
                else:
                    array[...] = np.arange(shape[-1], dtype=array.dtype)
                array.flags.writeable = False
                while len(constants) >= CONSTANTS_KEPT:
                    constants.pop(next(iter(constants)))
                constants[entry] = array
        elif packed.text is not None and key in ("tokens", "labels"):
            array = packed.text[:, :-1] if key == "tokens" else packed.text[:, 1:]
        else:
            array = np.asarray(packed.arrays[key]).view()
        if array.flags.writeable:
            array = array.view()
            array.flags.writeable = False
        out[key] = array
    return out


class Packer:
    """Turns core batches into packed ones (``packed_type``, a :class:`PackedBatch` class),
    remembering the recipe of each constant it met (holding the array, so its ``id`` is not
    reused while remembered)."""

    def __init__(self, packed_type: type = PackedBatch, kept: int = 16) -> None:
        self.packed_type = packed_type
        self.kept = kept
        self._recipes: dict[int, tuple[np.ndarray, Recipe | None]] = {}
        self._lock = threading.Lock()

    def __getstate__(self) -> dict:
        return {"packed_type": self.packed_type, "kept": self.kept}

    def __setstate__(self, state: dict) -> None:
        type(self).__init__(self, state["packed_type"], state["kept"])

    def _recipe(self, array: np.ndarray) -> Recipe | None:
        with self._lock:
            hit = self._recipes.get(id(array))
        if hit is not None and hit[0] is array:
            return hit[1]
        recipe = recipe_of(array)
        with self._lock:
            if len(self._recipes) >= self.kept:
                self._recipes.clear()
            self._recipes[id(array)] = (array, recipe)
        return recipe

    def __call__(self, batch: Mapping[str, Any]) -> PackedBatch:
        text = None
        if "tokens" in batch and "labels" in batch:
            text = text_of(batch["tokens"], batch["labels"])
        arrays, constants = {}, {}
        for key, value in batch.items():
            if text is not None and key in ("tokens", "labels"):
                continue
            recipe = self._recipe(value) if is_constant(value) else None
            if recipe is None:
                arrays[key] = np.asarray(value)
            else:
                constants[key] = (recipe, value.shape, value.dtype.str)
        return self.packed_type(tuple(batch), text, arrays, constants)


_REFCOUNTS = hasattr(sys, "getrefcount")


def _references(arrays: list[np.ndarray], position: int) -> int:
    """References to ``arrays[position]``, counted the same way for every call."""
    return sys.getrefcount(arrays[position])


class BufferPool:
    """Hands out uninitialized arrays, reusing ones no caller holds any more."""

    def __init__(self, per_shape: int = 4) -> None:
        self.per_shape = per_shape
        self._arrays: dict[tuple, list[np.ndarray]] = {}
        self._lock = threading.Lock()
        probe = [np.empty(1)]
        self._idle = _references(probe, 0)  # the count when only the pool's list holds it

    def empty(self, shape: tuple[int, ...], dtype: np.typing.DTypeLike) -> np.ndarray:
        """An array of ``shape`` and ``dtype`` with arbitrary contents."""
        if not _REFCOUNTS:
            return np.empty(shape, dtype)
        key = (tuple(shape), np.dtype(dtype).str)
        with self._lock:
            arrays = self._arrays.setdefault(key, [])
            for position in range(len(arrays)):
                if _references(arrays, position) == self._idle:
                    return arrays[position]
            array = np.empty(shape, dtype)
            if len(arrays) < self.per_shape:
                arrays.append(array)
            return array

    def __getstate__(self) -> dict:
        return {"per_shape": self.per_shape}  # buffers stay in their process

    def __setstate__(self, state: dict) -> None:
        type(self).__init__(self, state["per_shape"])

    def copy(self, array: np.ndarray, dtype: np.typing.DTypeLike | None = None) -> np.ndarray:
        """A writable, C-contiguous copy of ``array`` (cast to ``dtype`` if given) in a
        pooled buffer: no other caller shares it while the result is referenced."""
        out = self.empty(array.shape, array.dtype if dtype is None else dtype)
        np.copyto(out, array, casting="unsafe")
        return out
