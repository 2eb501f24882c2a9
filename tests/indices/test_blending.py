"""Blending indices: megatron-core's helpers as the oracle; the balanced order's bound."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from megadata_core import DataError
from megadata_core.indices import _blend_engine as engine
from megadata_core.indices import _blend_rules as rules
from megadata_core.indices import _blend_tree as trees
from megadata_core.indices import blending
from megadata_core.indices.blending import (
    balanced_blending_indices,
    balanced_bound,
    megatron_blending_indices,
    megatron_exhaustive_blending_indices,
    megatron_normalize,
    prefix_deviation,
)

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def helper_order(helpers, weights, size):
    weights = np.asarray(weights, dtype=np.float64)
    index = np.zeros(size, dtype=np.int16)
    sample = np.zeros(size, dtype=np.int64)
    helpers.build_blending_indices(index, sample, weights, len(weights), size, False)
    return index, sample


def helper_exhaustive(helpers, sizes):
    sizes = np.asarray(sizes, dtype=np.int64)
    index = np.zeros(int(sizes.sum()), dtype=np.int16)
    sample = np.zeros(int(sizes.sum()), dtype=np.int64)
    helpers.build_exhaustive_blending_indices(index, sample, sizes, len(sizes))
    return index, sample


def assert_same(ours, theirs):
    assert ours[0].dtype == np.int16 and ours[1].dtype == np.int64
    np.testing.assert_array_equal(ours[0], theirs[0])
    np.testing.assert_array_equal(ours[1], theirs[1])


def assert_counts_in_order(index, sample, datasets):
    """Each dataset's samples are read 0, 1, 2, ... in blend order."""
    for j in range(datasets):
        np.testing.assert_array_equal(sample[index == j], np.arange(int((index == j).sum())))


def bound_at(weights, size):
    """The balanced bound plus float rounding and the split tree's quantized shares."""
    return balanced_bound(weights) + 1e-9 + size * 2.0**-43


def weight_vectors(rng, count):
    """Random weights of every shape the blends meet: uniform, skewed, one dominant."""
    for trial in range(count):
        n = int(rng.integers(1, 24))
        kind = trial % 4
        if kind == 0:
            w = rng.random(n)
        elif kind == 1:
            w = rng.random(n) ** 8
        elif kind == 2:
            w = np.r_[0.999, np.full(n, 0.001 / n)]
        else:
            w = rng.dirichlet(np.full(n, 0.3))
        yield w


# -- megatron order -------------------------------------------------------------------


weights_strategy = st.lists(
    st.one_of(
        st.floats(1e-6, 1.0),
        st.sampled_from([1.0, 0.5, 0.25, 0.1, 1e-3, 1e-9, 0.999]),
    ),
    min_size=1,
    max_size=12,
)


@SETTINGS
@given(weights=weights_strategy, size=st.integers(0, 30_000))
def test_megatron_order_matches_helpers(megatron_helpers, weights, size):
    normalized = megatron_normalize(weights)
    ours = megatron_blending_indices(weights, size)
    assert_same(ours, helper_order(megatron_helpers, normalized, size))


@pytest.mark.parametrize("seed", range(3))
def test_megatron_order_matches_helpers_at_scale(megatron_helpers, seed):
    rng = np.random.default_rng(seed)
    for weights in weight_vectors(rng, 8):
        size = int(rng.integers(1, 400_000))
        normalized = megatron_normalize(weights)
        assert_same(
            megatron_blending_indices(weights, size),
            helper_order(megatron_helpers, normalized, size),
        )


def test_megatron_order_millions(megatron_helpers):
    weights = [0.4, 0.3, 0.2, 0.1]
    ours = megatron_blending_indices(weights, 3_000_000)
    assert_same(ours, helper_order(megatron_helpers, megatron_normalize(weights), 3_000_000))


def test_megatron_order_raw_weights_and_zero_weights(megatron_helpers):
    # normalize=False is the helper on the weights as given; a zero weight is picked on ties
    for weights in ([2.0, 1.0, 1.0], [0.0, 0.5, 0.5], [0.3, 0.0, 0.7], [1.0, 0.0]):
        for size in (7, 5000, 20_000):
            assert_same(
                megatron_blending_indices(weights, size, normalize=False),
                helper_order(megatron_helpers, weights, size),
            )
    assert 0 in megatron_blending_indices([0.0, 0.5, 0.5], 10, normalize=False)[0]


@SETTINGS
@given(sizes=st.lists(st.integers(1, 3000), min_size=1, max_size=10))
def test_exhaustive_matches_helpers(megatron_helpers, sizes):
    ours = megatron_exhaustive_blending_indices(sizes)
    assert_same(ours, helper_exhaustive(megatron_helpers, sizes))
    np.testing.assert_array_equal(np.bincount(ours[0], minlength=len(sizes)), sizes)


def test_exhaustive_at_scale_and_zero_sizes(megatron_helpers):
    rng = np.random.default_rng(4)
    for _ in range(4):
        sizes = rng.integers(1, 200_000, size=int(rng.integers(2, 8)))
        assert_same(
            megatron_exhaustive_blending_indices(sizes), helper_exhaustive(megatron_helpers, sizes)
        )
    wide = rng.integers(1, 300, size=rules.Megatron.WIDE + 8)  # the 2-D kernels
    assert_same(
        megatron_exhaustive_blending_indices(wide), helper_exhaustive(megatron_helpers, wide)
    )
    index, _ = balanced_blending_indices(wide, None, caps=wide)
    np.testing.assert_array_equal(np.bincount(index, minlength=len(wide)), wide)
    # a size of 0 is never picked (Megatron's helper runs past its buffers there)
    index, sample = megatron_exhaustive_blending_indices([3, 0, 5])
    np.testing.assert_array_equal(np.bincount(index, minlength=3), [3, 0, 5])
    without = helper_exhaustive(megatron_helpers, [3, 5])
    assert_same((index, sample), (np.where(without[0] == 1, 2, 0).astype(np.int16), without[1]))
    empty = megatron_exhaustive_blending_indices([0, 0])
    assert empty[0].shape == empty[1].shape == (0,)


# -- balanced order ---------------------------------------------------------------------

extreme_weights = st.one_of(
    weights_strategy,
    st.lists(st.sampled_from([0.0, 1e-9, 1e-4, 0.001, 0.5, 0.999, 1.0]), min_size=1, max_size=40),
    st.integers(2, 60).map(lambda n: [0.5] + [0.5 / n] * n),  # one dominant, many small
    st.integers(2, 30).map(lambda n: [0.999] + [0.001 / n] * n),
).filter(lambda w: any(x > 0 for x in w))


@SETTINGS
@given(weights=extreme_weights, size=st.integers(0, 12_000))
def test_balanced_within_one_sample_in_every_prefix(weights, size):
    index, sample = balanced_blending_indices(weights, size)
    assert index.dtype == np.int16 and sample.dtype == np.int64 and len(index) == size
    assert prefix_deviation(index, weights) <= bound_at(weights, len(index)) < 1 + 1e-9
    assert_counts_in_order(index, sample, len(weights))
    zero = [j for j, w in enumerate(weights) if w == 0]
    assert not np.isin(index, zero).any()


@pytest.mark.parametrize("seed", range(2))
def test_balanced_bound_at_scale(seed):
    rng = np.random.default_rng(10 + seed)
    for weights in weight_vectors(rng, 6):
        size = int(rng.integers(50_000, 200_000))
        index, sample = balanced_blending_indices(weights, size)
        assert prefix_deviation(index, weights) <= bound_at(weights, len(index))
        assert_counts_in_order(index, sample, len(weights))


def test_balanced_is_the_sequential_rule_and_prefix_stable():
    """The vectorized run equals the plain-Python rule (for weights with a period: over
    one period, then repeated), and a longer blend starts with the shorter one (the order
    does not depend on the size)."""
    rng = np.random.default_rng(3)
    for weights in weight_vectors(rng, 8):
        live, rates, period = blending._balanced_rates(np.asarray(weights, dtype=float))
        long = balanced_blending_indices(weights, 60_000)
        short = balanced_blending_indices(weights, 9_000)
        np.testing.assert_array_equal(long[0][:9_000], short[0])
        np.testing.assert_array_equal(long[1][:9_000], short[1])
        tree = blending._split_tree(live, rates, period)
        if tree is not None:  # the split-tree order (its leaves are the caller's ids)
            picks, samples = trees.scalar_tree_order(tree[0], 60_000)
            np.testing.assert_array_equal(long[0], picks)
            np.testing.assert_array_equal(long[1], samples)
            continue
        steps = 60_000 if period is None else min(60_000, int(period.sum()))
        picks, samples = rules.scalar_edf(rates, None, np.zeros(len(rates), int), 0, steps)
        picks, samples = np.asarray(picks), np.asarray(samples)
        if steps < 60_000:  # the period, repeated; sample ids grow by a_j per period
            rounds = np.arange(60_000) // steps
            picks = np.resize(picks, 60_000)
            samples = np.resize(samples, 60_000) + rounds * period[picks]
        np.testing.assert_array_equal(long[0], live[picks])
        np.testing.assert_array_equal(long[1], samples)


def test_balanced_exhaustive_caps():
    sizes = [5, 1, 17, 0, 3]
    index, sample = balanced_blending_indices(sizes, None, caps=sizes)
    np.testing.assert_array_equal(np.bincount(index, minlength=5), sizes)
    assert prefix_deviation(index, sizes) <= bound_at(sizes, len(index))
    assert_counts_in_order(index, sample, 5)


def test_balanced_known_order():
    # two datasets (bound 1/2): the centred Sturmian word; equal weights: round robin
    np.testing.assert_array_equal(balanced_blending_indices([2, 1], 9)[0], [0, 1, 0] * 3)
    np.testing.assert_array_equal(balanced_blending_indices([1, 1, 1], 6)[0], [0, 1, 2] * 2)
    assert balanced_bound([2, 1]) == 0.5 and balanced_bound([1, 0, 1, 1]) == 0.75
    assert balanced_bound([3.0]) == 0.0 and balanced_bound([1.0, 1e-40, 1.0]) == 0.5
    index, _ = balanced_blending_indices([1.0, 1e-300, 2.0, 0.0], 30_000)
    assert set(np.unique(index).tolist()) == {0, 2}
    np.testing.assert_array_equal(balanced_blending_indices([0, 3.0], 4)[0], [1] * 4)


def test_engine_repairs_and_falls_back_exactly(monkeypatch, megatron_helpers):
    """Segments that start from a wrong guess are re-run; past the repair budget the rest
    runs sequentially; the values are the same either way."""
    weights = megatron_normalize(np.random.default_rng(5).random(12) ** 8)
    expected = helper_order(megatron_helpers, weights, 120_000)
    monkeypatch.setattr(engine, "BURN", {"megatron": 1, "edf": 1})
    stats = {}
    ours = engine.run("megatron", weights, 120_000, stats=stats)
    assert stats["repaired"] > 0
    assert_same(ours, expected)
    monkeypatch.setattr(engine, "MAX_REPAIR_ROUNDS", 0)
    stats = {}
    ours = engine.run("megatron", weights, 120_000, stats=stats)
    assert stats["sequential"] > 0
    assert_same(ours, expected)


def test_wide_kernels_match(megatron_helpers):
    """Past a class's WIDE count of datasets, the 2-D kernel runs."""
    rng = np.random.default_rng(6)
    weights = rng.random(rules.Megatron.WIDE + 9)
    assert_same(
        megatron_blending_indices(weights, 50_000),
        helper_order(megatron_helpers, megatron_normalize(weights), 50_000),
    )
    index, _ = balanced_blending_indices(weights, 50_000)
    assert prefix_deviation(index, weights) <= bound_at(weights, len(index))
    weights = weights[: rules.Edf.WIDE + 5]
    index, sample = balanced_blending_indices(weights, 60_000)
    picks, samples = rules.scalar_edf(
        megatron_normalize(weights), None, np.zeros(len(weights), int), 0, 60_000
    )
    np.testing.assert_array_equal(index, picks)
    np.testing.assert_array_equal(sample, samples)


def test_dtype_past_int16():
    weights = np.ones(40_000)
    index, _ = balanced_blending_indices(weights, 100)
    assert index.dtype == np.int32
    np.testing.assert_array_equal(index, np.arange(100))


# -- validation --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("weights", "field"),
    [
        ([], "weights"),
        ([0.0, 0.0], "weights"),
        ([1.0, -0.5], "weights"),
        ([1.0, float("nan")], "weights"),
        ([float("inf")], "weights"),
        ("ab", "weights"),
        ([[0.5, 0.5]], "weights"),
    ],
)
@pytest.mark.parametrize(
    "build", [megatron_blending_indices, balanced_blending_indices], ids=["megatron", "balanced"]
)
def test_bad_weights(build, weights, field):
    with pytest.raises(DataError, match=field):
        build(weights, 10)


@pytest.mark.parametrize("size", [-1, 2.5, "10", None])
def test_bad_size(size):
    with pytest.raises(DataError, match="size"):
        megatron_blending_indices([1.0], size)
    with pytest.raises(DataError, match="size"):
        balanced_blending_indices([1.0], size)


@pytest.mark.parametrize("sizes", [[], [1, -2], [1.5, 2], ["a"], [[1, 2]]])
def test_bad_exhaustive_sizes(sizes):
    with pytest.raises(DataError, match="sizes"):
        megatron_exhaustive_blending_indices(sizes)


def test_empty_blends():
    for build in (megatron_blending_indices, balanced_blending_indices):
        index, sample = build([0.2, 0.8], 0)
        assert index.shape == sample.shape == (0,)
        assert index.dtype == np.int16 and sample.dtype == np.int64


def test_edf_with_no_dataset_released_takes_the_earliest_deadline():
    """Only float rounding at the bound can leave no dataset released; both forms then
    take the earliest deadline (here forced by starting every run ahead)."""
    rates = np.array([0.25, 0.75])
    kernel = rules.Edf(rates, None)
    kernel.start(np.array([[9, 9], [5, 30]]), np.array([0, 3]))
    pick, before = np.empty(2, dtype=np.intp), np.empty(2)
    kernel.step(pick, before)
    for column, (counts, step) in enumerate((([9, 5], 0), ([9, 30], 3))):
        picks, samples = rules.scalar_edf(rates, None, np.array(counts), step, step + 1)
        assert pick[column] == picks[0] and before[column] == samples[0]


def test_many_datasets_long_segments_match(megatron_helpers):
    """A blend of 1,000 datasets (the wide [K, n] kernel, long segments): Megatron's
    values, for a small and a larger size."""
    weights = megatron_normalize(np.random.default_rng(8).lognormal(0.0, 1.0, 1000))
    for size in (10_300, 60_000):
        stats = {}
        ours = engine.run("megatron", weights, size, stats=stats)
        assert stats["segment"] > engine.segment_length(size, engine.BURN["megatron"])
        assert_same(ours, helper_order(megatron_helpers, weights, size))


@pytest.mark.parametrize("datasets, caps", [(40, False), (40, True), (700, False)])
def test_wide_edf_is_the_sequential_rule(datasets, caps):
    """The wide EDF kernel ([K, n] rows, burn-in growing with n) equals the plain rule,
    with and without caps that bind."""
    rng = np.random.default_rng(datasets)
    weights = rng.lognormal(0.0, 1.0, datasets)
    rates = weights / weights.sum()
    size = 40_000 if datasets < 100 else 12_000
    limits = rng.integers(300, 3_000, datasets) if caps else None  # sum > size, some bind
    stats = {}
    index, sample = engine.run("edf", rates, size, limits, stats=stats)
    assert stats["segments"] > 1  # the vectorized kernel ran
    picks, samples = rules.scalar_edf(rates, limits, np.zeros(datasets, int), 0, size)
    if caps:
        assert limits.sum() > size and np.any(np.bincount(index, minlength=datasets) == limits)
    np.testing.assert_array_equal(index, picks)
    np.testing.assert_array_equal(sample, samples)


def shortlist_weights(kind: str, datasets: int) -> np.ndarray:
    rng = np.random.default_rng(datasets)
    if kind == "equal":  # every step a tie among many: the lowest dataset must win
        return np.ones(datasets)
    if kind == "tokens":  # corpora of similar sizes: weights within a few percent
        return rng.normal(1.0, 0.04, datasets)
    if kind == "skewed":
        return rng.lognormal(0.0, 2.0, datasets)
    weights = rng.random(datasets) * 1e-3  # a few heavy datasets over many rare ones
    weights[:3] = [5.0, 3.0, 1.0]
    return weights


@pytest.mark.parametrize("kind", ["equal", "tokens", "skewed", "heavy"])
def test_shortlist_kernel_matches_megatron(megatron_helpers, kind):
    """The megatron rule over more than SHORTLIST_ABOVE datasets runs on per-column
    shortlists; its values are megatron-core's, ties and rare datasets included."""
    datasets = engine.SHORTLIST_ABOVE + 400
    weights = megatron_normalize(shortlist_weights(kind, datasets))
    size = 40_000
    assert isinstance(engine._kernel("megatron", weights, None), rules.MegatronShortlist)
    stats = {}
    ours = engine.run("megatron", weights, size, stats=stats)
    assert stats["segments"] > 1
    assert_same(ours, helper_order(megatron_helpers, weights, size))


def test_shortlist_kernel_from_any_counts():
    """Started mid-run from arbitrary counts (a guess, a repair's start), every column
    of the shortlist kernel follows the plain rule; the shortlists are short."""
    rng = np.random.default_rng(11)
    datasets, columns, steps = 600, 5, 700
    weights = megatron_normalize(rng.lognormal(0.0, 1.0, datasets))
    starts = np.array([0, 1, 977, 50_000, 1_234_567])
    counts = rules.apportion(weights, starts)
    counts[:, 2] += rng.integers(0, 3, datasets)  # counts off the rule's own path
    kernel = rules.MegatronShortlist(weights, block=40)
    kernel.start(counts, starts)
    picks = np.empty((steps, columns), dtype=np.intp)
    before = np.empty((steps, columns))
    lengths = []
    for step in range(steps):
        kernel.step(picks[step], before[step])
        if kernel.left == kernel.block - 1:
            lengths += [(ids < datasets).sum(axis=1) for _, ids, *_ in kernel.groups]
    for column in range(columns):
        first = int(starts[column])
        expected = rules.scalar_megatron(weights, None, counts[:, column], first, first + steps)
        np.testing.assert_array_equal(picks[:, column], expected[0])
        np.testing.assert_array_equal(before[:, column], expected[1])
    picked = [np.bincount(picks[:, k], minlength=datasets) for k in range(columns)]
    final = counts + np.stack(picked, axis=1)
    np.testing.assert_array_equal(kernel.state(), final)
    assert np.median(np.concatenate(lengths)) < datasets / 4
