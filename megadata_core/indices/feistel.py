"""A keyed bijection over ``[0, n)`` in O(1) memory: a lazy alternative to shuffle indices.

A balanced Feistel network over ``2h`` bits (the least even width >= 2 whose range holds
n) permutes ``[0, 2**(2h))``; cycle walking (apply again while the value is >= n) turns it
into a permutation of ``[0, n)``. Each round maps ``(L, R) -> (R, L ^ F_r(R))`` with
``F_r`` the splitmix64 finalizer of ``R ^ round_key[r]``, taking its top h bits. Round keys
come from the 64-bit key; keys come from ``(seed, epoch, stream)`` (:func:`epoch_key`).
Everything is vectorized over numpy uint64 arrays; the only Python loops run over rounds
and over cycle-walking steps (a few dozen at most, each on the elements still >= n).

Not Megatron-compatible: this is the ``shuffle="feistel"`` mode, for corpora where a
materialized permutation (8 bytes per sample or document) is too large or too slow.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from megadata_core.errors import DataError
from megadata_core.indices._checks import INT32_MAX, check_ids, check_int

ROUNDS = 6
MAX_N = (1 << 63) - 1  # outputs (and n itself) fit int64
SAMPLES_STREAM = 0  # epoch_key stream of the sample order
DOCUMENTS_STREAM = 1  # epoch_key stream of the document order

_MASK64 = (1 << 64) - 1
_GAMMA = 0x9E3779B97F4A7C15
_MUL1 = 0xBF58476D1CE4E5B9
_MUL2 = 0x94D049BB133111EB


def _mix_int(z: int) -> int:
    """splitmix64's finalizer on a Python int (a bijection of 64-bit words)."""
    z = ((z ^ (z >> 30)) * _MUL1) & _MASK64
    z = ((z ^ (z >> 27)) * _MUL2) & _MASK64
    return z ^ (z >> 31)


def _mix_array(z: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer on a uint64 array, in place (wrapping multiplication)."""
    z ^= z >> np.uint64(30)
    z *= np.uint64(_MUL1)
    z ^= z >> np.uint64(27)
    z *= np.uint64(_MUL2)
    z ^= z >> np.uint64(31)
    return z


def epoch_key(seed: int, epoch: int, stream: int = SAMPLES_STREAM) -> int:
    """The 64-bit Feistel key of one epoch: a hash of ``(seed, epoch, stream)``.

    ``stream`` separates orders that share a seed and an epoch (sample order
    :data:`SAMPLES_STREAM`, document order :data:`DOCUMENTS_STREAM`).
    """
    key = _mix_int((check_int("seed", seed, 0) + _GAMMA) & _MASK64)
    key = _mix_int((key ^ check_int("epoch", epoch, 0)) + 2 * _GAMMA & _MASK64)
    return _mix_int((key ^ check_int("stream", stream, 0)) + 3 * _GAMMA & _MASK64)


def _half_bits(n: int) -> int:
    """h: each Feistel half has h bits; ``4**h`` is the least even power of two >= n."""
    bits = max(2, (n - 1).bit_length())
    return (bits + 1) // 2


def _round_keys(key: int) -> list[np.uint64]:
    key = check_int("key", key, 0) & _MASK64
    return [np.uint64(_mix_int((key + (r + 1) * _GAMMA) & _MASK64)) for r in range(ROUNDS)]


def _network(x: np.ndarray, half: int, keys: list[np.uint64], inverse: bool) -> np.ndarray:
    """One pass of the Feistel network over ``[0, 4**half)``: uint64 [m] -> uint64 [m]."""
    bits = np.uint64(half)
    shift = np.uint64(64 - half)  # F keeps the top h bits of the mixed word
    left, right = x >> bits, x & np.uint64((1 << half) - 1)
    for key in reversed(keys) if inverse else keys:
        if inverse:  # (L', R') -> (R' ^ F(L'), L')
            left, right = right ^ (_mix_array(left ^ key) >> shift), left
        else:  # (L, R) -> (R, L ^ F(R))
            left, right = right, left ^ (_mix_array(right ^ key) >> shift)
    left <<= bits
    left |= right
    return left


def _walk(x: np.ndarray, n: int, key: int, inverse: bool) -> np.ndarray:
    """Cycle walking: re-apply the network to the elements that land at or past n."""
    half, keys, limit = _half_bits(n), _round_keys(key), np.uint64(n)
    y = _network(x, half, keys, inverse)
    todo = np.flatnonzero(y >= limit)
    while todo.size:
        step = _network(y[todo], half, keys, inverse)
        y[todo] = step
        todo = todo[step >= limit]
    return y


def _check_n(n: int) -> int:
    size = check_int("n", n, 1)
    if size > MAX_N:
        raise DataError(f"n: {size} exceeds 2**63 - 1")
    return size


def _apply(values: object, n: int, key: int, inverse: bool, field: str) -> np.ndarray:
    size = _check_n(n)
    array = np.asarray(values)
    flat = check_ids(field, array.reshape(-1), size)
    out = _walk(flat.astype(np.uint64), size, key, inverse)
    return out.astype(np.int64).reshape(array.shape)


def feistel_permute(x: object, n: int, key: int) -> np.ndarray:
    """The keyed permutation of ``[0, n)`` applied to ``x``.

    Args:
        x: integers in ``[0, n)``, any shape (a scalar gives a 0-d array).
        n: domain size, 1 <= n <= 2**63 - 1.
        key: 64-bit key, e.g. :func:`epoch_key`.

    Returns:
        int64 array of the shape of ``x``; distinct inputs give distinct outputs.
    """
    return _apply(x, n, key, inverse=False, field="x")


def feistel_invert(y: object, n: int, key: int) -> np.ndarray:
    """The inverse of :func:`feistel_permute`: ``feistel_invert(feistel_permute(x)) == x``.

    Returns int64 of the shape of ``y``.
    """
    return _apply(y, n, key, inverse=True, field="y")


@dataclass(frozen=True)
class FeistelShuffle:
    """The sample order of one epoch, computed lazily: ``shuffle[i]`` is where sample
    position i goes, a permutation of ``[0, n)`` keyed by ``epoch_key(seed, epoch, stream)``.

    ``shuffle[i]`` takes an int (gives an int), a slice or an integer array (gives int64
    of the same shape); negative indices count from the end, as in a sequence.
    """

    n: int
    seed: int
    epoch: int = 0
    stream: int = SAMPLES_STREAM

    def __post_init__(self) -> None:
        _check_n(self.n)
        epoch_key(self.seed, self.epoch, self.stream)  # validates

    @property
    def key(self) -> int:
        return epoch_key(self.seed, self.epoch, self.stream)

    def __len__(self) -> int:
        return self.n

    def _positions(self, index: object) -> np.ndarray:
        if isinstance(index, slice):
            return np.arange(*index.indices(self.n), dtype=np.int64)
        positions = np.asarray(index)
        if positions.dtype.kind not in "iu":
            raise IndexError(f"FeistelShuffle index must be integers, got {positions.dtype}")
        if positions.dtype.kind == "i" and positions.size and positions.min() < 0:
            positions = np.where(positions < 0, positions + self.n, positions)
        if positions.size and (positions.min() < 0 or positions.max() >= self.n):
            raise IndexError(f"FeistelShuffle index out of range for n={self.n}")
        return positions

    def __getitem__(self, index: object) -> int | np.ndarray:
        out = feistel_permute(self._positions(index), self.n, self.key)
        return int(out) if out.ndim == 0 else out

    def inverse(self, shuffled: object) -> int | np.ndarray:
        """The sample position that maps to ``shuffled`` (same index forms as ``[]``)."""
        out = feistel_invert(self._positions(shuffled), self.n, self.key)
        return int(out) if out.ndim == 0 else out


def feistel_document_order(doc_ids: np.ndarray, seed: int, epoch: int) -> np.ndarray:
    """The document order of one epoch: ``out[i] = doc_ids[feistel_permute(i)]`` with key
    ``epoch_key(seed, epoch, DOCUMENTS_STREAM)``.

    Args:
        doc_ids: int [D] the split's document ids.

    Returns:
        [D] array of the dtype of ``doc_ids``, a permutation of it.
    """
    ids = check_ids("doc_ids", doc_ids, MAX_N)
    key = epoch_key(seed, epoch, DOCUMENTS_STREAM)
    if ids.size == 0:
        return ids.copy()
    return ids[feistel_permute(np.arange(ids.size, dtype=np.int64), ids.size, key)]


def feistel_document_index(doc_ids: np.ndarray, num_epochs: int, seed: int) -> np.ndarray:
    """The Feistel counterpart of Megatron's document index: epoch e (0-based) holds
    ``feistel_document_order(doc_ids, seed, e)``; the epochs are concatenated.

    Returns:
        int32 [num_epochs * D] (ids must fit int32, as in Megatron).
    """
    ids = check_ids("doc_ids", doc_ids, INT32_MAX + 1)
    epochs = check_int("num_epochs", num_epochs, 1)
    out = np.empty((epochs, ids.size), dtype=np.int32)
    for epoch in range(epochs):
        out[epoch] = feistel_document_order(ids, seed, epoch)
    return out.reshape(-1)
