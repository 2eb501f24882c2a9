"""Blend schedule indices: one cursor per dataset across stages, each stage's balance,
edits that leave the samples before them unchanged."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import megadata_core as mdc
from megadata_core.indices.blending import (
    balanced_blending_indices,
    balanced_bound,
    megatron_blending_indices,
    megatron_normalize,
)
from megadata_core.indices.schedule import (
    check_schedule,
    epoch_seed,
    same_before,
    schedule_blending_indices,
    schedule_counts,
    stage_lengths,
)
from megadata_core.modes import blend_order

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def schedules(draw, max_datasets: int = 6, max_stages: int = 5, max_size: int = 3000):
    """(starts int64 [K], weights float64 [K, n], size): zero weights included (datasets
    joining or leaving), every stage with some weight."""
    n = draw(st.integers(1, max_datasets))
    k = draw(st.integers(1, max_stages))
    size = draw(st.integers(0, max_size))
    later = sorted(draw(st.sets(st.integers(1, max_size + 50), min_size=k - 1, max_size=k - 1)))
    starts = np.array([0, *later], dtype=np.int64)
    rows = []
    for _ in range(k):
        row = draw(st.lists(st.one_of(st.just(0.0), st.floats(0.01, 10.0)), min_size=n,
                            max_size=n))
        if not any(row):
            row[draw(st.integers(0, n - 1))] = 1.0
        rows.append(row)
    return starts, np.array(rows, dtype=np.float64), size


@SETTINGS
@given(schedule=schedules(), order=st.sampled_from(["balanced", "megatron"]))
@example(schedule=(np.array([0]), np.array([[1.0]]), 0), order="balanced")
@example(schedule=(np.array([0, 5]), np.array([[1.0, 0.0], [0.0, 1.0]]), 3), order="megatron")
def test_each_dataset_on_one_cursor(schedule, order):
    starts, weights, size = schedule
    index, sample = schedule_blending_indices(starts, weights, size, blend_order(order))
    assert index.shape == sample.shape == (size,)
    n = weights.shape[1]
    # every dataset's samples are 0, 1, 2, ... in blend order: no repeat, none skipped
    for j in range(n):
        mine = sample[index == j]
        assert np.array_equal(mine, np.arange(len(mine)))
    assert np.array_equal(schedule_counts(index, n), np.bincount(index, minlength=n))


@SETTINGS
@given(schedule=schedules(), order=st.sampled_from(["balanced", "megatron"]))
def test_every_stage_is_its_static_blend(schedule, order):
    starts, weights, size = schedule
    index, _ = schedule_blending_indices(starts, weights, size, blend_order(order))
    lengths = stage_lengths(starts, size)
    for k, length in enumerate(lengths.tolist()):
        lo = int(min(starts[k], size))
        piece = index[lo : lo + length]
        if order == "balanced":
            expected, _ = balanced_blending_indices(weights[k], length)
        else:
            normalized = megatron_normalize(weights[k])
            live = np.flatnonzero(normalized > 0)
            if len(live) == len(normalized):
                expected, _ = megatron_blending_indices(normalized, length, normalize=False)
            else:
                expected = live[megatron_blending_indices(normalized[live], length)[0]]
        assert np.array_equal(piece, expected)
        if order == "balanced" and length:
            # every prefix of the stage within one sample of its shares
            shares = weights[k] / weights[k].sum()
            steps = np.arange(1, length + 1)[:, None]
            counts = np.cumsum(piece[:, None] == np.arange(weights.shape[1]), axis=0)
            assert np.abs(counts - shares * steps).max() <= balanced_bound(weights[k]) + 1e-9
            assert balanced_bound(weights[k]) < 1


@SETTINGS
@given(schedule=schedules(), cut=st.integers(0, 3000), data=st.data(),
       order=st.sampled_from(["balanced", "megatron"]))
@example(schedule=(np.array([0, 10]), np.array([[1.0, 2.0], [3.0, 0.0]]), 100), cut=10,
         data=None, order="balanced")
def test_an_edit_leaves_the_samples_before_it(schedule, cut, data, order):
    """A new schedule = the old stages before N, a boundary at N, anything after: its
    first N samples are the old ones bit for bit (any sizes)."""
    starts, weights, size = schedule
    cut = min(cut, size)
    keep = starts < cut
    n = weights.shape[1]
    if data is None:
        tail = np.array([[0.5] * n])
        extra = 0
    else:
        extra = data.draw(st.integers(0, 2))  # new datasets that join at the edit
        stages = data.draw(st.integers(1, 3))
        tail = np.array([
            data.draw(st.lists(st.floats(0.01, 5.0), min_size=n + extra, max_size=n + extra))
            for _ in range(stages)
        ])
    new_starts = np.concatenate([starts[keep], cut + np.arange(len(tail)) * 37])
    if cut == 0:
        new_starts = np.arange(len(tail)) * 37
    head = np.pad(weights[keep], ((0, 0), (0, extra))) if cut else np.zeros((0, n + extra))
    new_weights = np.concatenate([head, tail.reshape(len(tail), n + extra)])
    old_index, old_sample = schedule_blending_indices(starts, weights, size, blend_order(order))
    new_size = size + (data.draw(st.integers(0, 500)) if data is not None else 0)
    new_index, new_sample = schedule_blending_indices(
        new_starts, new_weights, new_size, blend_order(order)
    )
    assert np.array_equal(old_index[:cut], new_index[:cut])
    assert np.array_equal(old_sample[:cut], new_sample[:cut])
    # after the edit every dataset continues where it was: still one cursor each
    for j in range(n + extra):
        mine = new_sample[new_index == j]
        assert np.array_equal(mine, np.arange(len(mine)))
    # the stage digests tell the two apart exactly as the samples do
    digest_old = [row.tobytes() for row in np.pad(weights, ((0, 0), (0, extra)))]
    digest_new = [row.tobytes() for row in new_weights]
    assert same_before(starts, digest_old, new_starts, digest_new, cut) is None


def test_the_megatron_users_case():
    """Train on blend A to 50%, switch weights: the run continues every dataset's own
    order, so nothing from the first half comes back."""
    size = 10_000
    a = schedule_blending_indices([0], [[0.7, 0.3]], size)
    b = schedule_blending_indices([0, size // 2], [[0.7, 0.3], [0.2, 0.8]], size)
    half = size // 2
    assert np.array_equal(a[0][:half], b[0][:half]) and np.array_equal(a[1][:half], b[1][:half])
    seen = set(zip(a[0][:half].tolist(), a[1][:half].tolist()))
    after = set(zip(b[0][half:].tolist(), b[1][half:].tolist()))
    assert not seen & after
    counts = np.bincount(b[0][half:], minlength=2)
    assert counts.tolist() == [1000, 4000]


def test_stage_lengths_and_late_stages():
    assert stage_lengths(np.array([0, 5, 20]), 12).tolist() == [5, 7, 0]
    index, sample = schedule_blending_indices([0, 100], [[1, 0], [0, 1]], 50)
    assert (index == 0).all() and np.array_equal(sample, np.arange(50))


def test_dtype_past_int16():
    weights = np.zeros((2, 40_000))
    weights[0, :3] = 1
    weights[1, 39_999] = 1
    index, _ = schedule_blending_indices([0, 6], weights, 9)
    assert index.dtype == np.int32 and index[-1] == 39_999


@pytest.mark.parametrize(
    "starts, weights, match",
    [
        ([1], [[1.0]], "first stage starts at 1"),
        ([0, 5, 5], [[1.0]] * 3, "stage 2 starts at 5, not after stage 1"),
        ([0, 9, 3], [[1.0]] * 3, "stage 2 starts at 3"),
        ([], [], "non-empty 1-D integer"),
        ([0.0], [[1.0]], "non-empty 1-D integer"),
        ([0], [[1.0], [2.0]], r"expected \[1 stages, datasets\]"),
        ([0, 4], [[1.0, 1.0], [0.0, 0.0]], "stage 1 weights: every weight is 0"),
        ([0], [[1.0, -1.0]], "stage 0 weights: weight 1 is -1.0"),
        ([0], [[np.nan]], "stage 0 weights: weight 0 is nan"),
    ],
)
def test_bad_schedules(starts, weights, match):
    with pytest.raises(mdc.DataError, match=match):
        check_schedule(np.array(starts, dtype=np.int64 if not starts or isinstance(
            starts[0], int) else np.float64), weights)


@pytest.mark.parametrize("size", [-1, 1.5, True, "3"])
def test_bad_size(size):
    with pytest.raises(mdc.DataError, match="size"):
        schedule_blending_indices([0], [[1.0]], size)


def test_bad_order():
    with pytest.raises(mdc.DataError, match="order: 'random'"):
        schedule_blending_indices([0], [[1.0]], 3, "random")


def test_same_before_says_where():
    assert same_before([0, 10], ["a", "b"], [0, 10], ["a", "c"], 10) is None
    assert "stage 1 (from sample 10)" in same_before([0, 10], ["a", "b"], [0, 10], ["a", "c"], 11)
    assert "starts at sample 10 in one and 12" in same_before(
        [0, 10], ["a", "b"], [0, 12], ["a", "b"], 20
    )
    assert "the second has a stage 1 at sample 5" in same_before([0], ["a"], [0, 5], ["a", "b"], 6)


def test_epoch_seeds():
    assert epoch_seed(1234, 0) == 1234
    seeds = [epoch_seed(1234, e) for e in range(1, 200)]
    assert len(set(seeds)) == len(seeds) and all(0 <= s < 2**32 for s in seeds)
    assert epoch_seed(1234, 3) == epoch_seed(1234, 3) != epoch_seed(1235, 3)


@SETTINGS
@given(data=st.data(), n=st.integers(1, 5), edits=st.integers(1, 4),
       order=st.sampled_from(["balanced", "megatron"]))
def test_any_number_of_edits(data, n, edits, order):
    """A run edited several times (each edit keeps the stages before its cut, adds a
    boundary there and new stages after): every cut's past stays as it was, and over the
    whole run no dataset sample is read twice or skipped."""
    def weights_row():
        row = data.draw(st.lists(st.one_of(st.just(0.0), st.floats(0.05, 5.0)),
                                 min_size=n, max_size=n))
        return row if any(row) else [1.0] * n

    starts, rows = [0], [weights_row()]
    size = 0
    for _ in range(edits):
        size += data.draw(st.integers(0, 700))
        index, sample = schedule_blending_indices(starts, rows, size, blend_order(order))
        cut = data.draw(st.integers(0, size))
        keep = [k for k, start in enumerate(starts) if start < cut]
        starts = [starts[k] for k in keep] + [cut]
        rows = [rows[k] for k in keep] + [weights_row()]
        if starts[0] != 0:
            starts, rows = [0], rows[-1:]
        edited_index, edited_sample = schedule_blending_indices(
            starts, rows, size, blend_order(order)
        )
        assert np.array_equal(edited_index[:cut], index[:cut])
        assert np.array_equal(edited_sample[:cut], sample[:cut])
        for j in range(n):
            mine = edited_sample[edited_index == j]
            assert np.array_equal(mine, np.arange(len(mine)))
