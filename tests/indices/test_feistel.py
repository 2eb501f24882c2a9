"""The Feistel bijection: exhaustive on small domains, sampled on huge ones."""

from __future__ import annotations

import multiprocessing
import os
import warnings

import numpy as np
import pytest

import megadata_core as mdc
from megadata_core.indices import (
    FeistelShuffle,
    epoch_key,
    feistel_document_index,
    feistel_document_order,
    feistel_invert,
    feistel_permute,
)
from megadata_core.indices import feistel as fm
from megadata_core.indices.feistel import feistel_range

KEYS = [0, 1, 2**64 - 1, epoch_key(1234, 3)]


@pytest.mark.parametrize("key", KEYS)
def test_bijection_for_every_small_n(key):
    for n in range(1, 301):
        x = np.arange(n)
        y = feistel_permute(x, n, key)
        assert y.dtype == np.int64
        np.testing.assert_array_equal(np.sort(y), x)
        np.testing.assert_array_equal(feistel_invert(y, n, key), x)
        np.testing.assert_array_equal(feistel_range(0, n, n, key), y)


@pytest.mark.parametrize("n", [255, 256, 257, 4095, 4097, 65535, 65536, 65537, 1_000_003])
def test_bijection_around_powers_of_two(n):
    key = epoch_key(n, 1)
    y = feistel_range(0, n, n, key)
    assert y.dtype == np.int64
    np.testing.assert_array_equal(np.bincount(y, minlength=n), np.ones(n))  # a permutation
    np.testing.assert_array_equal(feistel_permute(np.arange(n), n, key), y)
    np.testing.assert_array_equal(feistel_invert(y, n, key), np.arange(n))
    np.testing.assert_array_equal(feistel_range(n // 3, n - 7, n, key), y[n // 3 : n - 7])


@pytest.mark.parametrize(
    "n", [1, 2, 5, 64, 65, 1000, 4097, 2**20 + 1, 2**28 - 5, 10**9, 2**32 - 3, 2**32]
)
def test_tables_match_arithmetic(n):
    """The tabulated network (n <= 2**32) and the hashed one (larger n) are one function."""
    x = np.unique(np.random.default_rng(n).integers(0, n, 5000))
    for key in KEYS[1:]:
        table, arith = fm._TableNetwork(n, key), fm._ArithNetwork(n, key)
        y = table.apply(x, False, 1)
        np.testing.assert_array_equal(arith.apply(x, False, 1), y)
        np.testing.assert_array_equal(arith.apply(y, True, 1), x)
        np.testing.assert_array_equal(table.apply(y, True, 1), x)
    # tables up to 2**32: a billion documents or samples take the tabulated network
    assert isinstance(fm._network(2**32, 1), fm._TableNetwork)
    assert isinstance(fm._network(2**32 + 1, 1), fm._ArithNetwork)


def test_huge_domain_past_2_to_32():
    n = 2**40 + 3
    x = np.unique(np.random.default_rng(0).integers(0, n, 200_000, dtype=np.int64))
    x = np.concatenate([x, [0, 1, n - 2, n - 1]])
    key = epoch_key(7, 0)
    y = feistel_permute(x, n, key)
    assert y.min() >= 0 and y.max() < n
    assert len(np.unique(y)) == len(np.unique(x))
    np.testing.assert_array_equal(feistel_invert(y, n, key), x)
    assert y.max() > 2**39  # not confined to the low bits


def test_range_past_the_tables():
    n, key = 2**32 + 7, epoch_key(3, 0)
    for start, stop in [(0, 3000), (n - 70_000, n)]:
        y = feistel_range(start, stop, n, key)
        np.testing.assert_array_equal(y, feistel_permute(np.arange(start, stop), n, key))
        assert y.min() >= 0 and y.max() < n and len(np.unique(y)) == stop - start


def test_largest_domain():
    n = 2**63 - 1
    x = np.array([0, 5, n - 1], dtype=np.int64)
    y = feistel_permute(x, n, 99)
    assert y.min() >= 0 and len(set(y.tolist())) == 3
    np.testing.assert_array_equal(feistel_invert(y, n, 99), x)


def test_shapes_and_scalars():
    y = feistel_permute(np.arange(12).reshape(3, 4), 12, 5)
    assert y.shape == (3, 4)
    assert feistel_permute(3, 12, 5).shape == ()
    assert int(feistel_permute(3, 12, 5)) == y.reshape(-1)[3]


def chi_square(counts: np.ndarray) -> float:
    expected = counts.sum() / counts.size
    return float(((counts - expected) ** 2 / expected).sum())


def test_uniformity_sanity():
    n, keys = 10, 2000
    where_zero = np.array([int(np.flatnonzero(feistel_permute(np.arange(n), n, k) == 0)[0])
                           for k in range(keys)])  # fmt: skip
    counts = np.bincount(where_zero, minlength=n)
    assert chi_square(counts) < 40  # 9 degrees of freedom: p ~ 1e-5
    assert counts.min() > 0.6 * keys / n and counts.max() < 1.4 * keys / n
    # Whole permutations of a tiny domain: all 120 of [0, 5) come up, about equally often.
    perms = np.array([feistel_permute(np.arange(5), 5, epoch_key(k, 0)) for k in range(2400)])
    codes = np.unique(perms @ 5 ** np.arange(5), return_counts=True)[1]
    assert codes.size == 120 and chi_square(codes) < 250  # 119 degrees of freedom
    # The images of two inputs are about independent (n = 70: 4830 ordered pairs).
    pairs = np.array([feistel_permute([0, 1], 70, epoch_key(k, 1)) for k in range(20_000)])
    counts = np.bincount(pairs[:, 0] * 70 + pairs[:, 1], minlength=70 * 70)
    assert not counts[::71].any()  # never equal
    assert chi_square(np.delete(counts, np.arange(0, 70 * 70, 71))) < 1.1 * 4829 + 250
    # Different keys give different permutations; the identity is not favoured.
    perms = {tuple(feistel_permute(np.arange(50), 50, k).tolist()) for k in range(200)}
    assert len(perms) == 200
    fixed = np.mean([np.mean(feistel_permute(np.arange(1000), 1000, k) == np.arange(1000))
                     for k in range(50)])  # fmt: skip
    assert fixed < 0.01


def test_epoch_keys_differ_and_are_stable():
    keys = {epoch_key(seed, epoch, stream) for seed in range(20) for epoch in range(20)
            for stream in range(2)}  # fmt: skip
    assert len(keys) == 800 and all(0 <= k < 2**64 for k in keys)
    assert epoch_key(1234, 5) == epoch_key(1234, 5)
    # Pinned so that a change of the mixing (which would reorder every run) is noticed.
    assert epoch_key(1234, 5, 1) == 4445679969210163417
    assert FeistelShuffle(1000, 1234, 0)[np.arange(5)].tolist() == [788, 248, 549, 365, 502]
    assert FeistelShuffle(20, 1234, 0)[:].tolist() == [
        12, 16, 1, 2, 6, 0, 9, 7, 18, 13, 3, 11, 10, 15, 4, 5, 14, 8, 19, 17
    ]  # fmt: skip
    big = FeistelShuffle(2**40 + 3, 1234, 0)[np.arange(3)].tolist()
    assert big == [70233906562, 279538008710, 651992811736]
    assert FeistelShuffle(10**7, 1234, 0)[:3].tolist() == [2653675, 1466756, 5117882]


def test_shuffle_object():
    shuffle = FeistelShuffle(1000, seed=3, epoch=2)
    assert len(shuffle) == 1000
    everything = shuffle[:]
    np.testing.assert_array_equal(np.sort(everything), np.arange(1000))
    assert isinstance(shuffle[7], int) and shuffle[7] == everything[7]
    assert shuffle[-1] == everything[-1]
    np.testing.assert_array_equal(shuffle[10:20:3], everything[10:20:3])
    np.testing.assert_array_equal(shuffle[np.array([[1, 2], [3, -4]])],
                                  everything[[[1, 2], [3, -4]]])  # fmt: skip
    np.testing.assert_array_equal(shuffle.inverse(everything), np.arange(1000))
    assert shuffle.inverse(shuffle[5]) == 5
    assert not np.array_equal(FeistelShuffle(1000, 3, 3)[:], everything)  # next epoch
    for bad in (1000, -1001, np.array([0, 1000])):
        with pytest.raises(IndexError):
            shuffle[bad]
    with pytest.raises(IndexError):
        shuffle[np.array([0.5])]


def test_thread_count_does_not_matter():
    n, key = 700_001, epoch_key(5, 2)
    x = np.random.default_rng(0).integers(0, n, 600_000)
    ids = np.arange(40, 40 + n, dtype=np.int32)
    one = feistel_permute(x, n, key, threads=1)
    full = feistel_range(0, n, n, key, threads=1)
    index = feistel_document_index(ids, 2, 5, threads=1)
    for threads in (2, 3, 8):
        np.testing.assert_array_equal(feistel_permute(x, n, key, threads=threads), one)
        np.testing.assert_array_equal(feistel_invert(one, n, key, threads=threads), x)
        np.testing.assert_array_equal(feistel_range(0, n, n, key, threads=threads), full)
        np.testing.assert_array_equal(feistel_document_index(ids, 2, 5, threads=threads), index)
    np.testing.assert_array_equal(full[x], one)
    np.testing.assert_array_equal(index[n:], feistel_document_order(ids, 5, 1))
    assert feistel_document_index(ids, 2, 5).tolist() == index.tolist()  # deterministic


def _order_in_child(queue) -> None:
    ids = np.arange(700_001, dtype=np.int32)
    queue.put(feistel_document_index(ids, 1, 5, threads=2)[:1000].tolist())


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_threads_after_fork():
    """A forked child (a DataLoader worker) gets fresh pool threads instead of hanging."""
    ids = np.arange(700_001, dtype=np.int32)
    expected = feistel_document_index(ids, 1, 5, threads=2)[:1000].tolist()  # pool started
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # fork of a threaded process
        child = context.Process(target=_order_in_child, args=(queue,))
        child.start()
    try:
        assert queue.get(timeout=60) == expected
    finally:
        child.join(10)
        if child.is_alive():
            child.kill()


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint16, np.uint32])
def test_document_order_of_any_ids(dtype):
    n = 3001
    key = epoch_key(9, 4, fm.DOCUMENTS_STREAM)
    perm = feistel_permute(np.arange(n), n, key)
    top = min(int(np.iinfo(dtype).max) + 1, fm.MAX_N)  # ids < MAX_N
    spread = np.sort(np.random.default_rng(1).choice(60_000, n, replace=False)).astype(dtype)
    for ids in (np.arange(n, dtype=dtype), (top - n + np.arange(n)).astype(dtype), spread,
                spread[::-1].copy()):  # fmt: skip
        order = feistel_document_order(ids, 9, 4)
        assert order.dtype == ids.dtype
        np.testing.assert_array_equal(order, ids[perm])
    if dtype != np.uint16:
        ids = np.arange(2**31 - n, 2**31, dtype=dtype)  # ends at int32's top
        index = feistel_document_index(ids, 5, 9)
        assert index.dtype == np.int32
        np.testing.assert_array_equal(index[4 * n :], ids[perm])


def test_document_order_and_index():
    ids = np.arange(100, 350, dtype=np.int32)
    order = feistel_document_order(ids, 9, 0)
    assert order.dtype == np.int32
    np.testing.assert_array_equal(np.sort(order), ids)
    index = feistel_document_index(ids, 3, 9)
    assert index.dtype == np.int32 and index.shape == (750,)
    np.testing.assert_array_equal(index[:250], order)
    np.testing.assert_array_equal(index[500:], feistel_document_order(ids, 9, 2))
    assert not np.array_equal(index[:250], index[250:500])
    # The document order does not reuse the sample order of the same (seed, epoch).
    assert not np.array_equal(order - 100, FeistelShuffle(250, 9, 0)[:])
    assert feistel_document_order(np.array([], np.int32), 1, 0).shape == (0,)


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda: feistel_permute([0], 0, 1), "n"),
        (lambda: feistel_permute([0], 2**63, 1), "n"),
        (lambda: feistel_permute([5], 5, 1), "x"),
        (lambda: feistel_permute([-1], 5, 1), "x"),
        (lambda: feistel_invert([5], 5, 1), "y"),
        (lambda: feistel_permute([0], 5, -1), "key"),
        (lambda: epoch_key(-1, 0), "seed"),
        (lambda: epoch_key(0, -1), "epoch"),
        (lambda: FeistelShuffle(0, 1), "n"),
        (lambda: feistel_document_index(np.arange(3), 0, 1), "num_epochs"),
        (lambda: feistel_document_index(np.arange(3), 1, 1, threads=0), "threads"),
        (lambda: feistel_permute([0], 5, 1, threads=-1), "threads"),
        (lambda: feistel_range(3, 2, 5, 1), "stop"),
        (lambda: feistel_range(0, 6, 5, 1), "stop"),
        (lambda: feistel_range(-1, 2, 5, 1), "start"),
    ],
)
def test_bad_input(call, field):
    with pytest.raises(mdc.DataError, match=field):
        call()


def test_report_speed(capsys):
    """Timings for the record (``pytest -s``): nothing is asserted about them."""
    import time

    def best(call, reps=3):
        times = []
        for _ in range(reps):
            start = time.perf_counter()
            call()
            times.append(time.perf_counter() - start)
        return min(times)

    ids = np.arange(10_000_000, dtype=np.int32)
    shuffle = FeistelShuffle(2_440_000, 1234)
    positions = np.random.default_rng(0).integers(0, shuffle.n, 1024)
    with capsys.disabled():
        index = best(lambda: feistel_document_index(ids, 2, 1))
        print(
            f"\nfeistel_document_index 10M x 2: {index:.3f} s"
            f"; FeistelShuffle(2.44M)[:]: {best(lambda: shuffle[:]) * 1e3:.1f} ms"
            f"; 1024 lookups: {best(lambda: shuffle[positions], 20) * 1e3:.3f} ms"
        )


def test_lazy_document_index_equals_materialized():
    from megadata_core.indices.feistel import FeistelDocumentIndex

    rng = np.random.default_rng(3)
    scattered = np.sort(rng.choice(1_000_000, 777, replace=False)).astype(np.int32)
    for ids in (np.arange(5, 1005, dtype=np.int32), scattered, range(5, 1005)):
        lazy = FeistelDocumentIndex(ids, 3, 42)
        array_ids = np.arange(5, 1005, dtype=np.int32) if isinstance(ids, range) else ids
        full = feistel_document_index(array_ids, 3, 42)
        np.testing.assert_array_equal(np.asarray(lazy), full)
        positions = rng.integers(0, len(lazy), 500)
        np.testing.assert_array_equal(lazy[positions], full[positions])
        np.testing.assert_array_equal(lazy[10:50], full[10:50])
        assert lazy[7] == full[7] and lazy[-1] == full[-1] and len(lazy) == len(full)
        with pytest.raises(IndexError):
            lazy[len(lazy)]
