"""The balanced order as a tree of two-way splits (private to ``blending``).

Every internal node of a binary tree over the datasets hands the samples it receives to
its two children by a Beatty sequence: after ``k`` of its samples the left child has had
``floor(q k + 1/2)``, where ``q = A / 2**45`` is the left child's share of the node's
weight (exact integer arithmetic: the order is a pure function of the step, the same on
every machine and for every size). The root receives every step.

Bound: a child's count is within 1/2 of ``q`` times its parent's count, so if the parent
is within ``E`` of its own share, the child is within ``E_child = 1/2 + q E`` (the root's
children: 1/2). A dataset at depth 2 is within ``1/2 + q/2 < 1``; deeper ones can
exceed 1, so the tree is chosen to minimize the largest leaf bound (every tree for up
to ``EXHAUSTIVE`` datasets, else two greedy shapes) and is used only when that bound is
at most ``1 - MARGIN`` (and at most ``MAX_DEPTH`` deep). Against the caller's float
rates the quantized shares add at most ``m * depth * 2**-46 <= m * 2**-43`` at prefix
length m.

Why it is fast: each child's slots are closed-form in its rank (integer division by a
constant, which numpy runs as a multiply and shift), so a node maps its children's
ranks to output positions in a few array passes, and each output element is written
once (dataset id and sample id packed into one int64, split in place afterwards).
"""

from __future__ import annotations

import heapq
import itertools
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from megadata_core.cores import usable_threads

#: Bits of a split's share: ``q = ratio / 2**RATIO_BITS``.
RATIO_BITS = 45
ONE = 1 << RATIO_BITS
HALF = ONE >> 1
#: Output steps per pass: ``r + d * 2**45 < 2**63`` for every rank offset d < CHUNK.
#: One thread writes CHUNK / 2 at a time (cache-sized); several threads take whole
#: CHUNKs (fewer Python steps, which hold the GIL).
CHUNK = 1 << 17
#: A tree is used only if its bound is at most 1 - MARGIN (room for the quantized shares).
MARGIN = 2.0**-10
#: Up to this many datasets every tree shape is tried (945 for 6).
EXHAUSTIVE = 6
#: Deeper trees are not used (each level adds up to 2**-46 to a leaf's rate error).
MAX_DEPTH = 8
#: The dataset id and sample id share one int64 while the order is written.
ID_BITS = 16
#: Threads for one order (each takes a range of chunks), and the steps per thread.
MAX_THREADS, THREAD_MIN_STEPS = 4, 1 << 21
#: Larger blends take the sequential rule (the packed sample id must fit in 63 - 16 bits).
MAX_SIZE = 1 << 46


@dataclass(frozen=True)
class Split:
    """An internal node: the left child gets ``ratio / 2**45`` of the node's samples."""

    ratio: int
    left: Split | int  # a dataset id (a leaf) or another split
    right: Split | int


def _weight(shape, rates: np.ndarray) -> float:
    if isinstance(shape, int):
        return float(rates[shape])
    return _weight(shape[0], rates) + _weight(shape[1], rates)


def _quantize(shape, rates: np.ndarray):
    """A shape (nested pairs of dataset ids) as Splits with integer shares."""
    if isinstance(shape, int):
        return shape
    left, right = _weight(shape[0], rates), _weight(shape[1], rates)
    ratio = int(round(left / (left + right) * ONE))
    ratio = min(max(ratio, 1), ONE - 1)
    return Split(ratio, _quantize(shape[0], rates), _quantize(shape[1], rates))


def tree_bound(tree, parent: float = 0.0) -> float:
    """The largest leaf bound ``E`` of a tree (see the module docstring); 0 for a leaf."""
    if isinstance(tree, int):
        return parent
    share = tree.ratio / ONE
    return max(
        tree_bound(tree.left, 0.5 + share * parent),
        tree_bound(tree.right, 0.5 + (1.0 - share) * parent),
    )


def _all_shapes(ids: tuple):
    """Every unordered binary tree over ``ids`` (the first id always goes left)."""
    if len(ids) == 1:
        yield ids[0]
        return
    first, rest = ids[0], ids[1:]
    for size in range(len(rest)):
        for chosen in itertools.combinations(rest, size):
            others = tuple(x for x in rest if x not in chosen)
            for left in _all_shapes((first, *chosen)):
                for right in _all_shapes(others):
                    yield (left, right)


def _halving_shape(ids: list, rates: np.ndarray):
    """Split by weight into two near-equal groups (heaviest first), recursively."""
    if len(ids) == 1:
        return ids[0]
    groups: tuple[list, list] = ([], [])
    sums = [0.0, 0.0]
    for j in sorted(ids, key=lambda j: (-rates[j], j)):
        side = 0 if sums[0] <= sums[1] else 1
        groups[side].append(j)
        sums[side] += float(rates[j])
    return (_halving_shape(groups[0], rates), _halving_shape(groups[1], rates))


def _huffman_shape(ids: list, rates: np.ndarray):
    """Merge the two lightest groups until one is left."""
    heap = [(float(rates[j]), n, j) for n, j in enumerate(ids)]
    heapq.heapify(heap)
    serial = len(heap)
    while len(heap) > 1:
        first, second = heapq.heappop(heap), heapq.heappop(heap)
        heapq.heappush(heap, (first[0] + second[0], serial, (first[2], second[2])))
        serial += 1
    return heap[0][2]


def split_tree(ids: np.ndarray, rates: np.ndarray):
    """(tree, bound): the tree with the smallest bound over datasets ``ids`` (int [n])
    with ``rates`` (float64 [n], > 0, sum 1), or None when no tree tried reaches
    ``1 - MARGIN`` (or ids do not fit in ID_BITS)."""
    members = [int(j) for j in ids]
    if len(members) == 1:
        return members[0], 0.0
    if max(members) >= 1 << ID_BITS or len(members) > 1 << MAX_DEPTH:
        return None  # ids too large to pack; every tree of so many leaves is too deep
    by_id = dict(zip(members, np.asarray(rates, dtype=np.float64)))
    lookup = np.zeros(max(members) + 1)
    lookup[list(by_id)] = list(by_id.values())
    if len(members) <= EXHAUSTIVE:
        shapes = _all_shapes(tuple(members))
    else:
        shapes = [_halving_shape(members, lookup), _huffman_shape(members, lookup)]
    best, best_bound = None, np.inf
    for shape in shapes:
        tree = _quantize(shape, lookup)
        bound = tree_bound(tree)
        if bound < best_bound:
            best, best_bound = tree, bound
    if best_bound > 1.0 - MARGIN or _depth(best) > MAX_DEPTH:
        return None
    return best, best_bound


_SHIFTED = np.arange(CHUNK, dtype=np.int64) << RATIO_BITS
_RANKS = np.arange(CHUNK, dtype=np.int64) << ID_BITS


class _Writer:
    """Writes one chunk of a tree's order into ``packed`` (sample id << ID_BITS |
    dataset id), with scratch arrays per tree depth (fresh temporaries of this size
    cost page faults on every pass)."""

    def __init__(self, depth: int, chunk: int) -> None:
        self.scratch = np.empty((depth + 1, 2, chunk), dtype=np.int64)
        self.packed = np.empty(chunk, dtype=np.int64)  # cache-resident while scattered into

    def emit(self, tree, first: int, count: int, where, shift: int, depth: int, packed) -> None:
        """The node's ``count`` samples from its rank ``first`` on; its d-th is at output
        position ``where[d] + shift`` (``where`` int64 [count], or None: ``d + shift``)."""
        scratch = self.scratch[depth]
        if isinstance(tree, int):
            values = np.add(_RANKS[:count], (first << ID_BITS) | tree, out=scratch[0, :count])
            if where is None:
                packed[shift : shift + count] = values
            else:
                packed[shift:][where] = values
            return
        ratio = tree.ratio
        left_first = (ratio * first + HALF) >> RATIO_BITS
        lefts = ((ratio * (first + count) + HALF) >> RATIO_BITS) - left_first
        right_first = first - left_first
        # rank j of the left child is the node's rank floor((j+1) ONE - HALF - 1) / ratio),
        # rank i of the right child floor((HALF + i ONE) / (ONE - ratio)): see the tests
        for child, child_first, child_count, numerator, divisor in (
            (tree.left, left_first, lefts, (left_first + 1) * ONE - HALF - 1, ratio),
            (tree.right, right_first, count - lefts, HALF + right_first * ONE, ONE - ratio),
        ):
            if not child_count:
                continue
            quotient, rest = divmod(numerator, divisor)
            ranks = np.add(_SHIFTED[:child_count], rest, out=scratch[0, :child_count])
            ranks //= divisor  # the child's ranks as the node's, less quotient - first >= 0
            if where is None:
                child_where, child_shift = ranks, shift + quotient - first
            else:
                child_where = np.take(  # in range by construction: no bounds checks
                    where[quotient - first :], ranks, out=scratch[1, :child_count], mode="clip"
                )
                child_shift = shift
            self.emit(child, child_first, child_count, child_where, child_shift, depth + 1, packed)


def _depth(tree) -> int:
    return 0 if isinstance(tree, int) else 1 + max(_depth(tree.left), _depth(tree.right))


def tree_order(
    tree,
    size: int,
    index_dtype: np.dtype,
    threads: int | None = None,
    out: tuple[np.ndarray, np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The first ``size`` steps (< MAX_SIZE) of the tree's order:
    ``(dataset_index index_dtype [size], dataset_sample_index int64 [size])``, written
    into ``out`` (two such arrays) when given.

    Chunks are independent, so ranges of them run on ``threads`` threads (default: the
    usable cores, at most MAX_THREADS; numpy releases the GIL in these passes). The
    result does not depend on the thread count.
    """
    if out is None:
        out = np.empty(size, dtype=index_dtype), np.empty(size, dtype=np.int64)
    out_index, out_sample = out
    if threads is None:
        threads = min(usable_threads(MAX_THREADS), -(-size // THREAD_MIN_STEPS))
    step = CHUNK if threads > 1 else CHUNK // 2
    chunks = -(-size // step)
    edges = [min(size, chunks * k // max(threads, 1) * step) for k in range(threads)] + [size]
    ranges = [(lo, hi) for lo, hi in zip(edges[:-1], edges[1:]) if hi > lo]

    def write(bounds: tuple[int, int]) -> None:
        writer = _Writer(_depth(tree), step)
        mask = (1 << ID_BITS) - 1
        for start in range(bounds[0], bounds[1], step):
            stop = min(start + step, bounds[1])
            packed = writer.packed[: stop - start]
            writer.emit(tree, start, stop - start, None, 0, 0, packed)
            np.bitwise_and(packed, mask, out=out_index[start:stop], casting="unsafe")
            np.right_shift(packed, ID_BITS, out=out_sample[start:stop])

    if len(ranges) <= 1:
        for bounds in ranges:
            write(bounds)
    else:
        with ThreadPoolExecutor(len(ranges)) as pool:
            list(pool.map(write, ranges))
    return out_index, out_sample


def scalar_tree_order(tree, size: int) -> tuple[list, list]:
    """The same order step by step in plain Python (the definition; for tests)."""
    taken: dict[int, int] = {}
    picks, samples = [], []
    for _ in range(size):
        node = tree
        while not isinstance(node, int):
            k = taken.get(id(node), 0)
            left = ((node.ratio * (k + 1) + HALF) >> RATIO_BITS) > (
                (node.ratio * k + HALF) >> RATIO_BITS
            )
            taken[id(node)] = k + 1
            node = node.left if left else node.right
        picks.append(node)
        samples.append(taken.get(-1 - node, 0))
        taken[-1 - node] = samples[-1] + 1
    return picks, samples
