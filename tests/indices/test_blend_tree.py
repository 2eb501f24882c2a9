"""The balanced order of weights without a period: the split tree (closed-form child
positions, its bound, when it is used and when the sequential rule takes over)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from megadata_core.indices import _blend_tree as trees
from megadata_core.indices import blending
from megadata_core.indices.blending import (
    balanced_blending_indices,
    balanced_bound,
    prefix_deviation,
)

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def step_by_formula(tree, step: int) -> tuple[int, int]:
    """(dataset, sample) of one step, from the closed-form counts: a node's left child
    has had ``(ratio * k + HALF) >> 46`` of its first k samples."""
    node, rank = tree, step
    while not isinstance(node, int):
        before = (node.ratio * rank + trees.HALF) >> trees.RATIO_BITS
        after = (node.ratio * (rank + 1) + trees.HALF) >> trees.RATIO_BITS
        node, rank = (node.left, before) if after > before else (node.right, rank - before)
    return node, rank


def random_tree(rng, ids):
    """A random shape over ``ids`` with random (also extreme) shares."""
    if len(ids) == 1:
        return int(ids[0])
    cut = int(rng.integers(1, len(ids)))
    share = rng.choice([rng.random(), 1e-9, 1 - 1e-9, 0.5])
    ratio = min(max(int(share * trees.ONE), 1), trees.ONE - 1)
    return trees.Split(ratio, random_tree(rng, ids[:cut]), random_tree(rng, ids[cut:]))


def test_vectorized_order_is_the_step_by_step_definition():
    rng = np.random.default_rng(0)
    for n in (2, 3, 4, 5, 7, 12):
        tree = random_tree(rng, rng.permutation(40)[:n])
        size = int(rng.integers(1, 3 * (trees.CHUNK // 2)))  # crosses chunk boundaries
        index, sample = trees.tree_order(tree, size, np.int16)
        picks, samples = trees.scalar_tree_order(tree, size)
        np.testing.assert_array_equal(index, picks)
        np.testing.assert_array_equal(sample, samples)


def test_chunks_far_into_the_order_match_the_closed_form():
    """A chunk at step ~2**40 (ranks far beyond int64 products) equals the per-step
    closed form, so the exact integer arithmetic holds for any step < MAX_SIZE."""
    rng = np.random.default_rng(1)
    for n in (2, 4, 6):
        tree = random_tree(rng, np.arange(n))
        first = int(rng.integers(2**39, 2**41))
        count = 5000
        packed = np.empty(count, dtype=np.int64)
        trees._Writer(trees._depth(tree), count).emit(tree, first, count, None, 0, 0, packed)
        expected = [step_by_formula(tree, first + d) for d in range(count)]
        np.testing.assert_array_equal(packed & 0xFFFF, [dataset for dataset, _ in expected])
        np.testing.assert_array_equal(packed >> 16, [sample for _, sample in expected])


def test_tree_bound_is_the_recursion():
    half = trees.Split(trees.HALF, 0, 1)
    assert trees.tree_bound(half) == 0.5
    nested = trees.Split(trees.HALF, half, trees.Split(trees.HALF, 2, 3))
    assert trees.tree_bound(nested) == 0.75  # 1/2 + 1/2 * 1/2
    deep = trees.Split(trees.HALF, 4, nested)
    assert trees.tree_bound(deep) == pytest.approx(0.5 + 0.5 * 0.75)


def tree_weights():
    small = st.lists(st.floats(1e-6, 1.0), min_size=2, max_size=6)
    return st.one_of(small, st.lists(st.sampled_from([1e-3, 0.1, 0.2, 0.5, 1.0]), min_size=2))


@SETTINGS
@given(weights=tree_weights(), size=st.integers(1, 40_000))
def test_tree_order_within_its_bound(weights, size):
    """Wherever a tree is used, every prefix stays within its bound (< 1)."""
    values = np.asarray(weights, dtype=float)
    live, rates, period = blending._balanced_rates(values)
    plan = blending._split_tree(live, rates, period)
    index, sample = balanced_blending_indices(weights, size)
    if plan is None:
        return
    bound = plan[1]
    assert bound == balanced_bound(weights) <= 1 - trees.MARGIN
    assert prefix_deviation(index, weights) <= bound + 1e-9 + size * 2.0**-43
    for j in range(len(weights)):  # each dataset's samples in order, from 0
        np.testing.assert_array_equal(sample[index == j], np.arange(np.sum(index == j)))


def test_general_weights_of_a_few_datasets_use_the_tree():
    rng = np.random.default_rng(2)
    used = 0
    for _ in range(20):
        weights = rng.dirichlet(np.ones(4))
        live, rates, period = blending._balanced_rates(weights)
        used += blending._split_tree(live, rates, period) is not None
    assert used >= 16  # at most a few skewed draws need the sequential rule


def test_no_tree_within_the_margin_means_the_sequential_rule():
    """Geometric weights put a tiny dataset beside a large one at every split: no tree
    reaches 1 - MARGIN, so the order is EDF's, within Tijdeman's bound."""
    weights = [1.0, 1e-3, 1e-6, 1e-9]
    live, rates, period = blending._balanced_rates(np.asarray(weights))
    assert period is None and trees.split_tree(live, rates) is None
    assert balanced_bound(weights) == 1 - 1 / 6
    index, _ = balanced_blending_indices(weights, 20_000)
    assert prefix_deviation(index, weights) <= 1 - 1 / 6 + 1e-9


def test_dataset_ids_beyond_the_packing_use_the_sequential_rule():
    rates = np.array([0.3, 0.7])
    assert trees.split_tree(np.array([5, 1 << trees.ID_BITS]), rates) is None
    assert trees.split_tree(np.array([5, 70]), rates) is not None


def test_caps_that_bind_fall_back_and_exhaustive_caps_are_exact():
    weights = [np.sqrt(2), np.sqrt(3), np.sqrt(5)]
    live, rates, period = blending._balanced_rates(np.asarray(weights))
    assert blending._split_tree(live, rates, period) is not None
    index, sample = balanced_blending_indices(weights, 3000, caps=[400, 2000, 2000])
    counts = np.bincount(index, minlength=3)
    assert counts[0] == 400 and counts.sum() == 3000  # the cap held; the rest went on
    caps = [1234, 5678, 91011]
    index, sample = balanced_blending_indices(caps, None, caps=caps)
    np.testing.assert_array_equal(np.bincount(index, minlength=3), caps)
    assert prefix_deviation(index, caps) < 1


def test_prefix_stable_across_sizes():
    weights = np.sqrt([0.4, 0.3, 0.2, 0.1])
    long = balanced_blending_indices(weights, 200_000)
    short = balanced_blending_indices(weights, 70_001)
    np.testing.assert_array_equal(long[0][:70_001], short[0])
    np.testing.assert_array_equal(long[1][:70_001], short[1])


def test_thread_count_does_not_change_the_order():
    tree, _ = trees.split_tree(np.arange(3), np.array([0.5, 0.3, 0.2]) ** 0.5 / 1.5)
    size = 5 * trees.CHUNK + 123
    one = trees.tree_order(tree, size, np.int16, threads=1)
    for threads in (2, 3, 7):
        many = trees.tree_order(tree, size, np.int16, threads=threads)
        np.testing.assert_array_equal(one[0], many[0])
        np.testing.assert_array_equal(one[1], many[1])
