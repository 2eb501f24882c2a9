"""A keyed bijection over ``[0, n)`` in O(sqrt(n)) memory: a lazy alternative to shuffle indices.

The domain is a grid ``[0, a) x [0, b)``: ``b = 2**q`` the least power of two with
``b * b >= n`` and ``a = ceil(n / b) <= b`` (so ``n <= a * b < n + b``), ``x = x0 * b + x1``.
An alternating Feistel network of :data:`ROUNDS` rounds permutes the grid, adding mod a
into the ``[0, a)`` half and xoring into the ``[0, b)`` half::

    x[k + 2] = (x[k] + F_k(x[k + 1])) mod a     even k,  F_k: [0, b) -> [0, a)
    x[k + 2] =  x[k] ^ F_k(x[k + 1])            odd k,   F_k: [0, a) -> [0, b)
    y = x[ROUNDS] * b + x[ROUNDS + 1]           k = 0 .. ROUNDS - 1

and cycle walking (apply again while the value is >= n) makes it a permutation of
``[0, n)``; as ``a * b - n < b``, fewer than ``b / n ~ 1 / sqrt(n)`` of the inputs walk.

The round functions are keyed hashes: ``F_k(v)`` is the top 32 bits of splitmix64's
finalizer of ``v * GAMMA + round_key[k]`` scaled to ``[0, a)`` or ``[0, b)``
(multiply-shift), round keys from the 64-bit key, keys from ``(seed, epoch, stream)``
(:func:`epoch_key`). With ``b <= 2**16`` (n <= 2**32) each ``F_k`` is tabulated once per
``(n, key)`` (:class:`_TableNetwork`), so a round is one gather and one add or xor on int64
arrays with the tables in cache; larger domains evaluate the same hashes arithmetically on
uint64 (:class:`_ArithNetwork`): both give the same permutation.

Why 6 rounds: a Feistel network over random functions is a strong pseudorandom
permutation from 4 rounds on (Luby-Rackoff; with modular addition and unequal halves too:
Patarin, Black-Rogaway), and its distance from a random permutation keeps shrinking with
more rounds; 6 leaves a margin for the small halves (~sqrt(n)) used here. Domains of at
most 64 elements (halves of 1 to 3 bits) take :data:`_SMALL_ROUNDS` = 24: with 6, the
distribution of whole permutations of ``[0, 5)`` over keys is far from uniform.

Large inputs are processed in cache-sized chunks on a small thread pool (numpy releases
the GIL); chunks are independent, so results never depend on the thread count.

Not Megatron-compatible: this is the ``shuffle="feistel"`` mode, for corpora where a
materialized permutation (8 bytes per sample or document) is too large or too slow.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache, partial
from typing import overload

import numpy as np

from megadata_core.checks import INT32_MAX, check_ids, check_int
from megadata_core.cores import shared_pool, usable_threads
from megadata_core.errors import DataError

ROUNDS = 6  # rounds of the network (even: the output lands on the grid again)
_SMALL_ROUNDS = 4 * ROUNDS  # rounds for n <= 64: tiny halves mix slowly, rounds cost nothing
ALGORITHM = "feistel-mixed-radix-v2"  # changes whenever the permutation for a key changes
MAX_N = (1 << 63) - 1  # outputs (and n itself) fit int64
_SAMPLES_STREAM = 0  # epoch_key stream of the sample order
DOCUMENTS_STREAM = 1  # epoch_key stream of the document order
_TABLE_MAX_BITS = 16  # tabulate the round functions when b <= 2**16 (n <= 2**32)

_MASK64 = (1 << 64) - 1
_GAMMA = 0x9E3779B97F4A7C15
_MUL1 = 0xBF58476D1CE4E5B9
_MUL2 = 0x94D049BB133111EB
_CHUNK = 1 << 15  # elements per chunk: a few int64 work arrays stay in L2
_PARALLEL_MIN = 1 << 18  # below this many elements, no thread pool
_MAX_THREADS = 8


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


def epoch_key(seed: int, epoch: int, stream: int = _SAMPLES_STREAM) -> int:
    """The 64-bit Feistel key of one epoch: a hash of ``(seed, epoch, stream)``.

    ``stream`` separates orders that share a seed and an epoch (sample order
    :data:`_SAMPLES_STREAM`, document order :data:`DOCUMENTS_STREAM`).
    """
    key = _mix_int((check_int("seed", seed, 0) + _GAMMA) & _MASK64)
    key = _mix_int((key ^ check_int("epoch", epoch, 0)) + 2 * _GAMMA & _MASK64)
    return _mix_int((key ^ check_int("stream", stream, 0)) + 3 * _GAMMA & _MASK64)


# -- the round functions ----------------------------------------------------------------


def _grid(n: int) -> tuple[int, int, int]:
    """``(q, a, b)``: the grid ``[0, a) x [0, b)`` holding ``[0, n)``, ``b = 2**q`` the
    least power of two with ``b * b >= n``, ``a = ceil(n / b) <= b`` (``a*b < n + b``)."""
    bits = ((n - 1).bit_length() + 1) // 2
    return bits, -(-n // (1 << bits)), 1 << bits


def _round_keys(key: int, rounds: int) -> list[int]:
    key = check_int("key", key, 0) & _MASK64
    return [_mix_int((key + (r + 1) * _GAMMA) & _MASK64) for r in range(rounds)]


def _round_function(v: np.ndarray, round_key: int | np.ndarray, m: int) -> np.ndarray:
    """``F(v)``: uint64 values -> uint64 in ``[0, m)`` (``m <= 2**32``), a new array of the
    broadcast shape of ``v`` and ``round_key`` (an int, or uint64 [r, 1] for r rounds)."""
    z = v * np.uint64(_GAMMA) + np.asarray(round_key, dtype=np.uint64)
    _mix_array(z)
    z >>= np.uint64(32)
    z *= np.uint64(m)  # (top 32 bits) * m / 2**32: uniform on [0, m) up to m / 2**32
    z >>= np.uint64(32)
    return z


def _cyclic(values: np.ndarray, size: int) -> np.ndarray:
    """``values`` [m] repeated cyclically to ``size`` entries: ``out[i] = values[i % m]``."""
    reps = -(-size // values.size)
    return np.concatenate([values] * reps)[:size] if reps > 1 else values[:size].copy()


# -- threads ------------------------------------------------------------------------------

def _check_threads(threads: int | None) -> int:
    return usable_threads(_MAX_THREADS) if threads is None else check_int("threads", threads, 1)


def _run(jobs: list[Callable[[], None]], threads: int) -> None:
    """Run independent jobs, on a pool of ``threads`` threads when there are several."""
    if threads <= 1 or len(jobs) <= 1:
        for job in jobs:
            job()
        return
    pool = shared_pool("megadata-feistel", threads)
    for future in [pool.submit(job) for job in jobs]:
        future.result()


def _spans(start: int, stop: int, block: int, threads: int) -> list[list[tuple[int, int]]]:
    """Split ``[start, stop)`` into chunks of at most ``block`` (aligned on multiples of
    ``block``), grouped into consecutive runs, one run per job."""
    edges = list(range(start - start % block + block, stop, block))
    chunks = list(zip([start, *edges], [*edges, stop]))
    jobs = 1 if stop - start < _PARALLEL_MIN else min(len(chunks), 4 * threads)
    per = -(-len(chunks) // jobs)
    return [chunks[i : i + per] for i in range(0, len(chunks), per)]


# -- the networks ---------------------------------------------------------------------


class _Network:
    """The keyed permutation of ``[0, n)`` for one ``(n, key)``; subclasses evaluate it."""

    block = _CHUNK

    def __init__(self, n: int, key: int) -> None:
        self.n = n
        self.bits, self.a, self.b = _grid(n)
        self.rounds = ROUNDS if n > 64 else _SMALL_ROUNDS
        self.round_keys = _round_keys(key, self.rounds)

    def _values(self, x: np.ndarray, inverse: bool) -> np.ndarray:
        """One pass over the grid (no walking): int64 [k] in ``[0, a*b)`` -> int64 [k]."""
        raise NotImplementedError

    def _workspace(self) -> list[np.ndarray]:
        return []

    def _block(
        self, lo: int, hi: int, work: list[np.ndarray], target: np.ndarray | None = None
    ) -> np.ndarray:
        """One pass on the inputs ``[lo, hi)`` (one chunk): int64 [hi - lo] (possibly a view
        of ``work``), or written to ``target`` [hi - lo] of any integer dtype (wrapping)."""
        values = self._values(np.arange(lo, hi, dtype=np.int64), False)
        if target is not None:
            np.copyto(target, values, casting="unsafe")
        return values

    def _walkers(self) -> tuple[np.ndarray, np.ndarray] | None:
        """The inputs whose first pass lands past n, sorted, with their walked images
        (int64 [w] each, w < b), or None where there are too many to list."""
        return None

    def _finish(self, values: np.ndarray, inverse: bool) -> np.ndarray:
        """Cycle walking on int64 [k] one-pass results, in place: re-apply while >= n."""
        todo = np.flatnonzero(values >= self.n)
        while todo.size:
            step = self._values(values[todo], inverse)
            values[todo] = step
            todo = todo[step >= self.n]
        return values

    def apply(self, x: np.ndarray, inverse: bool, threads: int) -> np.ndarray:
        """The permutation (or its inverse) of int64 [k] values in ``[0, n)``: int64 [k]."""
        out = np.empty(x.shape, np.int64)

        def job(chunks: list[tuple[int, int]]) -> None:
            for lo, hi in chunks:
                out[lo:hi] = self._values(x[lo:hi], inverse)
            self._finish(out[chunks[0][0] : chunks[-1][1]], inverse)

        if x.size:
            _run([partial(job, c) for c in _spans(0, x.size, _CHUNK, threads)], threads)
        return out

    def fill(
        self,
        out: np.ndarray,
        start: int,
        offset: int = 0,
        ids: np.ndarray | None = None,
        threads: int = 1,
    ) -> None:
        """``out[i] = P(start + i) + offset``, or ``ids[P(start + i)]`` when ``ids`` (of the
        dtype of ``out``) is given, for ``out`` [k] of any integer dtype: the arange path.
        ``offset + n - 1`` must fit the dtype of ``out``."""
        stop = start + out.size
        known = self._walkers()
        shift = out.dtype.type(offset) if ids is None and offset else None

        def job(chunks: list[tuple[int, int]]) -> None:
            work = self._workspace()
            walk_at, walk_values = [], []
            for lo, hi in chunks:
                target = out[lo - start : hi - start]
                if known is not None and ids is None:  # straight to out; walkers fixed below
                    self._block(lo, hi, work, target)
                    if shift is not None:
                        np.add(target, shift, out=target, casting="unsafe")
                    continue
                values = self._block(lo, hi, work)
                if ids is None:
                    np.add(values, offset, out=target, casting="unsafe")
                else:  # clip: entries past n are overwritten once walked
                    ids.take(values, out=target, mode="clip")
                if known is None and values.max() >= self.n:
                    at = np.flatnonzero(values >= self.n)
                    walk_at.append(at + lo)
                    walk_values.append(values[at])
            if known is not None:
                first, last = np.searchsorted(known[0], [chunks[0][0], chunks[-1][1]])
                at, values = known[0][first:last], known[1][first:last]
            elif walk_at:
                at, values = np.concatenate(walk_at), np.concatenate(walk_values)
                values = self._finish(self._values(values, False), False)
            else:
                return
            out[at - start] = values + offset if ids is None else ids[values]

        _run([partial(job, c) for c in _spans(start, stop, self.block, threads)], threads)


class _ArithNetwork(_Network):
    """Any n: the round functions hashed on the fly, uint64 arithmetic."""

    def _values(self, x: np.ndarray, inverse: bool) -> np.ndarray:
        x = x.astype(np.uint64)
        bits, a = np.uint64(self.bits), np.uint64(self.a)
        high, low = x >> bits, x & np.uint64(self.b - 1)
        u, v = (high, low) if not inverse else (low, high)  # (x[k], x[k+1]) or reversed
        for k in range(self.rounds) if not inverse else reversed(range(self.rounds)):
            f = _round_function(v, self.round_keys[k], self.b if k % 2 else self.a)
            if k % 2:  # x[k+2] = x[k] ^ F_k(x[k+1]), its own inverse
                f ^= u
            else:  # x[k+2] = x[k] + F_k(x[k+1]) mod a; x[k] = x[k+2] + (a - F_k) mod a
                if inverse:
                    np.subtract(a, f, out=f)
                f += u
                np.minimum(f, f - a, out=f)  # uint64: f - a wraps (is huge) when f < a
            u, v = v, f
        # forward ends on (x[R], x[R+1]), inverse on (x[1], x[0])
        out = (u << bits) | v if not inverse else (v << bits) | u
        return out.astype(np.int64)


class _TableNetwork(_Network):
    """Small n (b, hence a, <= ``2**_TABLE_MAX_BITS``): tabulated round functions.

    The xor half never leaves ``[0, b)``. The sums of the add half are left unreduced,
    ``x[k+2] < bound(x[k]) + a - 1``, so a table indexed by an add-half value holds ``F_k``
    repeated cyclically (``F_k(v mod a)`` at every index v). The last round and the output
    share one lookup: ``y = (x[R] mod a) * b + (x[R-1] ^ F(x[R])) = last[x[R]] ^ x[R-1]``
    with ``last[v] = (v mod a) * b | F_{R-1}(v mod a)``. The inverse uses tables of
    ``a - F_k`` (even k) the same way.
    """

    def __init__(self, n: int, key: int) -> None:
        super().__init__(n, key)
        a, b = self.a, self.b
        self.block = max(1, _CHUNK // b) * b  # whole rows of the grid
        self._columns = np.arange(b, dtype=np.int64)
        self._high = np.arange(a, dtype=np.int64) << self.bits  # (v mod a) * b for v < a
        keys = np.array(self.round_keys, dtype=np.uint64)[:, None]
        even = _round_function(np.arange(b, dtype=np.uint64), keys[0::2], a).astype(np.int64)
        odd = _round_function(np.arange(a, dtype=np.uint64), keys[1::2], b).astype(np.int64)
        f = [odd[k // 2] if k % 2 else even[k // 2] for k in range(self.rounds)]
        self._f = f  # F_k over its reduced domain, int64
        bound = [a, b]  # exclusive bounds of the unreduced x[k]
        tables = []
        for k in range(self.rounds):
            tables.append(_cyclic(f[k], bound[k + 1]))
            bound.append(b if k % 2 else bound[k] + a - 1)
        self._forward = tables[:-1]
        self._last = _cyclic(self._high | f[-1], bound[self.rounds])
        self._inverse_tables: tuple[list[np.ndarray], np.ndarray] | None = None
        self._walk: tuple[np.ndarray, np.ndarray] | None = None

    def _inverse(self) -> tuple[list[np.ndarray], np.ndarray]:
        """Inverse chain tables (k = R-1 .. 0) and the output table of ``x[0]``."""
        if self._inverse_tables is None:
            a, bound_u, bound_v, tables = self.a, self.b, self.a, []  # (x[R+1], x[R])
            for k in reversed(range(self.rounds)):
                if k % 2:
                    tables.append(_cyclic(self._f[k], bound_v))
                    bound_u, bound_v = bound_v, self.b
                else:
                    tables.append(a - self._f[k])  # indexed by the xor half: < b
                    bound_u, bound_v = bound_v, bound_u + a
            self._inverse_tables = (tables, _cyclic(self._high, bound_v))
        return self._inverse_tables

    @staticmethod
    def _chain(
        tables: list[np.ndarray],
        xor: list[bool],
        u: np.ndarray,
        v: np.ndarray,
        spare: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(u, v) -> (v, u op table[v])`` per table, in three int64 [k] buffers.

        ``mode="wrap"``: the indices are in range by construction, and unlike the default
        mode it writes into ``out`` without a temporary copy.
        """
        for table, is_xor in zip(tables, xor):
            table.take(v, out=spare, mode="wrap")
            if is_xor:
                spare ^= u
            else:
                spare += u
            u, v, spare = v, spare, u
        return u, v, spare

    def _values(self, x: np.ndarray, inverse: bool) -> np.ndarray:
        high, low = x >> self.bits, x & (self.b - 1)
        spare = np.empty_like(x)
        if not inverse:
            xor = [k % 2 == 1 for k in range(self.rounds - 1)]
            u, v, spare = self._chain(self._forward, xor, high, low, spare)
            self._last.take(v, out=spare, mode="wrap")
            spare ^= u
        else:
            tables, table = self._inverse()
            xor = [k % 2 == 1 for k in reversed(range(self.rounds))]
            u, v, spare = self._chain(tables, xor, low, high, spare)  # ends on (x[1], x[0])
            table.take(v, out=spare, mode="wrap")
            spare += u
        return spare

    def _workspace(self) -> list[np.ndarray]:
        return [np.empty(self.block, np.int64) for _ in range(3)]

    def _block(
        self, lo: int, hi: int, work: list[np.ndarray], target: np.ndarray | None = None
    ) -> np.ndarray:
        """Whole grid rows covering ``[lo, hi)``: rounds 0 and 1 need no index split, as
        ``x[0]`` is the row and ``x[1]`` the column."""
        b = self.b
        row0, row1 = lo // b, -(-hi // b)
        u, v, spare = (w[: (row1 - row0) * b] for w in work)
        grid = (row1 - row0, b)
        rows = np.arange(row0, row1, dtype=np.int64)[:, None]
        np.add(rows, self._forward[0], out=u.reshape(grid))  # x[2] = x[0] + F_0(x[1])
        self._forward[1].take(u, out=v, mode="wrap")
        np.bitwise_xor(v.reshape(grid), self._columns, out=v.reshape(grid))  # x[3]
        xor = [k % 2 == 1 for k in range(2, self.rounds - 1)]
        u, v, spare = self._chain(self._forward[2:], xor, u, v, spare)
        skip = lo - row0 * b
        part = slice(skip, skip + hi - lo)
        self._last.take(v[part], out=spare[part], mode="wrap")
        if target is None:
            target = spare[part]
        np.bitwise_xor(spare[part], u[part], out=target, casting="unsafe")
        return target

    def _walkers(self) -> tuple[np.ndarray, np.ndarray]:
        """Found backwards: the first-pass preimages of ``[n, a*b)`` that lie below n."""
        if self._walk is None:
            excess = np.arange(self.n, self.a * self.b, dtype=np.int64)
            inputs = self._values(excess, True)
            keep = inputs < self.n
            order = np.argsort(inputs[keep])
            walked = self._finish(self._values(excess[keep][order], False), False)
            self._walk = (inputs[keep][order], walked)
        return self._walk


@lru_cache(maxsize=16)
def _network(n: int, key: int) -> _Network:
    """The network of ``(n, key)``, its tables built once (about 20 * sqrt(n) int64)."""
    if _grid(n)[0] <= _TABLE_MAX_BITS:
        return _TableNetwork(n, key)
    return _ArithNetwork(n, key)


# -- the public functions --------------------------------------------------------------


def _check_n(n: int) -> int:
    size = check_int("n", n, 1)
    if size > MAX_N:
        raise DataError(f"n: {size} exceeds 2**63 - 1")
    return size


def _apply(
    values: object, n: int, key: int, inverse: bool, field: str, threads: int | None
) -> np.ndarray:
    size = _check_n(n)
    key = check_int("key", key, 0)
    workers = _check_threads(threads)
    array = np.asarray(values)
    flat = check_ids(field, array.reshape(-1), size).astype(np.int64, copy=False)
    out = _network(size, key & _MASK64).apply(flat, inverse, workers)
    return out.reshape(array.shape)


def feistel_permute(x: object, n: int, key: int, *, threads: int | None = None) -> np.ndarray:
    """The keyed permutation of ``[0, n)`` applied to ``x``.

    Args:
        x: integers in ``[0, n)``, any shape (a scalar gives a 0-d array).
        n: domain size, 1 <= n <= 2**63 - 1.
        key: 64-bit key, e.g. :func:`epoch_key`.
        threads: worker threads for large inputs (default: the usable CPUs, at most 8);
            the result does not depend on it.

    Returns:
        int64 array of the shape of ``x``; distinct inputs give distinct outputs.
    """
    return _apply(x, n, key, inverse=False, field="x", threads=threads)


def feistel_invert(y: object, n: int, key: int, *, threads: int | None = None) -> np.ndarray:
    """The inverse of :func:`feistel_permute`: ``feistel_invert(feistel_permute(x)) == x``.

    Returns int64 of the shape of ``y``.
    """
    return _apply(y, n, key, inverse=True, field="y", threads=threads)


def feistel_range(
    start: int, stop: int, n: int, key: int, *, threads: int | None = None
) -> np.ndarray:
    """``feistel_permute(np.arange(start, stop), n, key)`` without the index array: int64
    [stop - start], for ``0 <= start <= stop <= n`` (the fast path for whole orders)."""
    size = _check_n(n)
    key = check_int("key", key, 0)
    first = check_int("start", start, 0)
    last = check_int("stop", stop, first)
    if last > size:
        raise DataError(f"stop: {last} exceeds n = {size}")
    out = np.empty(last - first, np.int64)
    if out.size:
        _network(size, key & _MASK64).fill(out, first, threads=_check_threads(threads))
    return out


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
    stream: int = _SAMPLES_STREAM

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
        if isinstance(index, slice) and index.step in (None, 1):
            start, stop, _ = index.indices(self.n)
            return feistel_range(start, max(start, stop), self.n, self.key)
        out = feistel_permute(self._positions(index), self.n, self.key)
        return int(out) if out.ndim == 0 else out

    def inverse(self, shuffled: object) -> int | np.ndarray:
        """The sample position that maps to ``shuffled`` (same index forms as ``[]``)."""
        out = feistel_invert(self._positions(shuffled), self.n, self.key)
        return int(out) if out.ndim == 0 else out


def _range_start(ids: np.ndarray) -> int | None:
    """``ids[0]`` when ``ids`` is ``ids[0] + arange(len(ids))``, else None (1-D, non-empty)."""
    first, size = int(ids[0]), ids.size
    if int(ids[-1]) - first != size - 1:
        return None
    for lo in range(0, size - 1, 1 << 20):  # strictly increasing + span => consecutive
        hi = min(size, lo + (1 << 20) + 1)
        if not np.all(ids[lo + 1 : hi] > ids[lo : hi - 1]):
            return None
    return first


def _fill_order(
    out: np.ndarray,
    ids: np.ndarray | range,
    base: int | None,
    key: int,
    threads: int,
    start: int = 0,
) -> None:
    """``out[i] = ids[P(start + i)]`` with P keyed by ``key`` over ``[0, len(ids))``:
    ``out`` of any integer dtype, ``base`` from :func:`_range_start` (then
    ``ids[p] = base + p``: no gather; a ``range`` of ids always has one)."""
    network = _network(len(ids), key)
    if base is not None and base + 2 * len(ids) + network.b < MAX_N:
        network.fill(out, start, offset=base, threads=threads)
    else:
        if isinstance(ids, range):  # (not reached: a range's base always fits MAX_N)
            ids = np.arange(ids.start, ids.stop, dtype=out.dtype)
        source = ids if ids.dtype == out.dtype else ids.astype(out.dtype)
        network.fill(out, start, ids=source, threads=threads)


def feistel_document_order(
    doc_ids: np.ndarray, seed: int, epoch: int, *, threads: int | None = None
) -> np.ndarray:
    """The document order of one epoch: ``out[i] = doc_ids[feistel_permute(i)]`` with key
    ``epoch_key(seed, epoch, DOCUMENTS_STREAM)``.

    Args:
        doc_ids: int [D] the split's document ids.
        threads: worker threads (default: the usable CPUs, at most 8); no effect on values.

    Returns:
        [D] array of the dtype of ``doc_ids``, a permutation of it.
    """
    ids = check_ids("doc_ids", doc_ids, MAX_N)
    key = epoch_key(seed, epoch, DOCUMENTS_STREAM)
    workers = _check_threads(threads)
    out = np.empty(ids.size, ids.dtype)
    if ids.size:
        _fill_order(out, ids, _range_start(ids), key, workers)
    return out


def feistel_document_index(
    doc_ids: np.ndarray, num_epochs: int, seed: int, *, threads: int | None = None
) -> np.ndarray:
    """The Feistel counterpart of Megatron's document index: epoch e (0-based) holds
    ``feistel_document_order(doc_ids, seed, e)``; the epochs are concatenated.

    Args:
        doc_ids: int [D] document ids (each must fit int32, as in Megatron).
        num_epochs: E >= 1.
        seed: the dataset seed.
        threads: worker threads (default: the usable CPUs, at most 8); no effect on values.

    Returns:
        int32 [E * D].
    """
    ids = check_ids("doc_ids", doc_ids, INT32_MAX + 1)
    epochs = check_int("num_epochs", num_epochs, 1)
    workers = _check_threads(threads)
    out = np.empty((epochs, ids.size), dtype=np.int32)
    if ids.size:
        base = _range_start(ids)
        for epoch in range(epochs):
            key = epoch_key(seed, epoch, DOCUMENTS_STREAM)
            _fill_order(out[epoch], ids, base, key, workers)
    return out.reshape(-1)


class FeistelDocumentIndex:
    """:func:`feistel_document_index` computed on demand, so it need not be stored.

    Entry ``p`` is ``doc_ids[feistel_permute(p mod D)]`` under the key of epoch
    ``p // D``; indexing takes an int, a slice or an integer array (gives int64), and
    ``np.asarray(index)`` materializes the whole int32 [E * D] array.
    """

    def __init__(self, doc_ids: object, num_epochs: int, seed: int) -> None:
        self.num_epochs = check_int("num_epochs", num_epochs, 1)
        self.seed = seed
        self._ids32: np.ndarray | None = None
        self._keys = [epoch_key(seed, e, DOCUMENTS_STREAM) for e in range(self.num_epochs)]
        self.doc_ids: range | np.ndarray
        self._base: int | None  # ids[p] = base + p (always so for a range)
        if isinstance(doc_ids, range) and doc_ids.step == 1:  # never materialized
            self.doc_ids = doc_ids
            self._count, self._base = len(doc_ids), doc_ids.start
            if doc_ids.start < 0 or doc_ids.stop > INT32_MAX + 1:
                raise DataError(f"doc_ids: {doc_ids} must lie in [0, 2^31)")
            return
        ids = check_ids("doc_ids", doc_ids, INT32_MAX + 1)
        self.doc_ids = ids
        self._count = ids.size
        self._base = _range_start(ids) if self._count else None

    def __len__(self) -> int:
        return self.num_epochs * self._count

    @overload
    def __getitem__(self, index: int | np.integer) -> int: ...
    @overload
    def __getitem__(self, index: slice | np.ndarray) -> np.ndarray: ...
    def __getitem__(self, index: object) -> int | np.ndarray:
        size = len(self)
        if isinstance(index, slice):
            positions = np.arange(*index.indices(size), dtype=np.int64)
        else:
            positions = np.asarray(index, dtype=np.int64)
            if positions.size and positions.min() < 0:
                positions = np.where(positions < 0, positions + size, positions)
            if positions.size and (positions.min() < 0 or positions.max() >= size):
                raise IndexError(f"document index position out of range [0, {size})")
        count = self._count
        epoch, within = np.divmod(positions, count) if count else (positions, positions)
        out = np.empty(positions.shape, dtype=np.int64)
        for e in np.unique(epoch).tolist():  # a batch touches one epoch, rarely two
            mask = epoch == e
            permuted = feistel_permute(within[mask], count, self._keys[e], threads=1)
            out[mask] = permuted + self._base if self._base is not None else self.doc_ids[permuted]
        return int(out) if out.ndim == 0 else out

    def block(self, lo: int, hi: int) -> np.ndarray:
        """int32 [hi - lo]: entries ``[lo, hi)`` (``0 <= lo <= hi <= len``), computed a
        whole run at a time (the sample index reads the order block by block this
        way, :class:`megadata_core.indices.sample_boundaries.DocumentBlocks`)."""
        if not 0 <= lo <= hi <= len(self):
            raise DataError(f"block: [{lo}, {hi}) is not inside [0, {len(self)})")
        out = np.empty(hi - lo, np.int32)
        ids = self.doc_ids
        if self._base is None and not isinstance(ids, range) and ids.dtype != np.int32:
            if self._ids32 is None:  # once, not per block (the ids are < 2^31)
                self._ids32 = ids.astype(np.int32)
            ids = self._ids32
        position = lo
        while position < hi:  # one step per epoch the block touches
            epoch, within = divmod(position, self._count)
            stop = min(hi, position - within + self._count)
            part = out[position - lo : stop - lo]
            _fill_order(part, ids, self._base, self._keys[epoch], 1, start=within)
            position = stop
        return out

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        ids = self.doc_ids
        if isinstance(ids, range):
            ids = np.arange(ids.start, ids.stop, dtype=np.int32)
        values = feistel_document_index(ids, self.num_epochs, self.seed)
        return values if dtype is None else values.astype(dtype)
