"""The balanced order of weights with a period (decimals, small integers): one period of
the rule, tiled; the bound, prefix stability, caps and the tiling itself."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from megadata_core.indices import _blend_engine as engine
from megadata_core.indices import _blend_rules as rules
from megadata_core.indices import blending
from megadata_core.indices.blending import (
    balanced_blending_indices,
    balanced_bound,
    megatron_normalize,
    prefix_deviation,
)

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def check_order(weights, index, sample):
    """Every prefix within the bound; each dataset read 0, 1, 2, ...; weight 0 unread."""
    assert prefix_deviation(index, weights) <= balanced_bound(weights) + 1e-9
    counts = np.bincount(index, minlength=len(weights))
    for j, count in enumerate(counts):
        np.testing.assert_array_equal(sample[index == j], np.arange(count))
        if weights[j] == 0:
            assert count == 0


@pytest.mark.parametrize(
    ("weights", "expected"),
    [
        ([0.4, 0.3, 0.2, 0.1], [4, 3, 2, 1]),
        ([0.3, 0.7], [3, 7]),
        ([2, 4, 6], [1, 2, 3]),
        ([0.999, 0.001], [999, 1]),
        ([5.0], [1]),
        ([1 / 3, 2 / 3], [1, 2]),
    ],
)
def test_period_counts_of_rational_weights(weights, expected):
    rates = megatron_normalize(weights)
    np.testing.assert_array_equal(rules.period_counts(rates), expected)


@pytest.mark.parametrize(
    "weights",
    [
        [1.0, 1e-9],  # period 1e9 + 1: too long
        np.sqrt([0.4, 0.3, 0.2, 0.1]),
        np.random.default_rng(0).random(6),
        [1234567, 89012345],  # rational, but the period is their sum
        [2.0**-60, 1.0],
    ],
)
def test_no_period(weights):
    assert rules.period_counts(megatron_normalize(weights)) is None


rational_weights = st.one_of(
    st.lists(st.integers(0, 40), min_size=1, max_size=9),
    st.lists(
        st.sampled_from([0.0, 0.1, 0.2, 0.25, 0.3, 0.5, 0.001, 0.999]), min_size=1, max_size=9
    ),
    st.integers(2, 30).map(lambda n: [0.999] + [0.001 / n] * n),
    st.integers(2, 12).map(lambda n: [0.5] + [0.5 / n] * n),
).filter(lambda w: any(x > 0 for x in w))


@SETTINGS
@given(weights=rational_weights, size=st.integers(0, 25_000))
def test_periodic_order_within_the_bound(weights, size):
    index, sample = balanced_blending_indices(weights, size)
    assert index.dtype == np.int16 and sample.dtype == np.int64 and len(index) == size
    check_order(weights, index, sample)


@pytest.mark.parametrize("weights", [[0.4, 0.3, 0.2, 0.1], [7, 0, 3, 1, 1], [0.999, 0.001]])
def test_periodic_order_is_one_period_repeated_and_prefix_stable(weights, monkeypatch):
    monkeypatch.setattr(engine, "TILE_ROW", 64)  # many rows and a tail
    live, rates, period = blending._balanced_rates(np.asarray(weights, dtype=float))
    length = int(period.sum())
    word, samples = engine.run("edf", rates, length)
    for size in (length - 1, length, length + 1, 3 * length + 17, 50_003):
        index, sample = balanced_blending_indices(weights, size)
        rounds = np.arange(size) // length
        picks = np.resize(word, size)
        np.testing.assert_array_equal(index, live[picks])
        np.testing.assert_array_equal(sample, np.resize(samples, size) + rounds * period[picks])
        check_order(weights, index, sample)
    # the first period is the plain-Python rule on the period's rates
    picks, samples = rules.scalar_edf(rates, None, np.zeros(len(rates), int), 0, length)
    np.testing.assert_array_equal(word, picks)


def test_periodic_order_with_caps():
    # the exhaustive blend of caps with a short period: tiled, each dataset exactly its cap
    caps = [20, 40, 0, 60]
    index, sample = balanced_blending_indices(caps, None, caps=caps)
    np.testing.assert_array_equal(np.bincount(index, minlength=4), caps)
    check_order(caps, index, sample)
    # caps that bind: the rule runs to the end and skips spent datasets
    index, sample = balanced_blending_indices([1, 1], 12, caps=[10, 2])
    np.testing.assert_array_equal(np.bincount(index, minlength=2), [10, 2])
    for j in range(2):
        np.testing.assert_array_equal(sample[index == j], np.arange((index == j).sum()))


def test_tile():
    word = np.array([0, 1, 0, 2], dtype=np.int16)
    samples = np.array([0, 0, 1, 0])
    growth = np.array([2, 1, 2, 1])
    for size in (0, 3, 4, 9, 4099, 70_001):
        index, sample = engine.tile(word, samples, growth, size)
        assert index.dtype == np.int16 and sample.dtype == np.int64
        np.testing.assert_array_equal(index, np.resize(word, size))
        np.testing.assert_array_equal(
            sample, np.resize(samples, size) + np.arange(size) // 4 * np.resize(growth, size)
        )
