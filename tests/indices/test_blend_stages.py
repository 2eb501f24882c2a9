"""Blends of several stages at once: ``balanced_blending_stages`` and the engine's
``run_stages`` equal the per-stage orders, value for value, on every path (periodic,
split tree, EDF side by side, plain Python, repairs)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from megadata_core import DataError
from megadata_core.indices import _blend_engine as engine
from megadata_core.indices import _blend_rules as rules
from megadata_core.indices.blending import (
    balanced_blending_indices,
    balanced_blending_stages,
    dataset_index_dtype,
)
from megadata_core.indices.schedule import schedule_blending_indices

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
BURN = engine.BURN["edf"]
#: lengths at the engine's thresholds: plain Python below SCALAR_BELOW and 4 * burn,
#: one column up to burn + segment, several past it
EDGES = [0, 1, 2, BURN - 1, BURN, BURN + 1, BURN + engine.ROWS + 1, 4 * BURN - 1, 4 * BURN,
         engine.SCALAR_BELOW - 1, engine.SCALAR_BELOW, engine.SCALAR_BELOW + 1, 12_345]


def per_stage(weights: np.ndarray, lengths) -> tuple[np.ndarray, np.ndarray]:
    """The reference: each stage's static balanced order, concatenated."""
    dtype = dataset_index_dtype(weights.shape[1])
    parts = [balanced_blending_indices(row, int(size)) for row, size in zip(weights, lengths)]
    index = np.concatenate([np.empty(0, dtype)] + [part[0] for part in parts])
    sample = np.concatenate([np.empty(0, np.int64)] + [part[1] for part in parts])
    return index, sample


def assert_equal_orders(ours, expected, datasets: int) -> None:
    assert ours[0].dtype == dataset_index_dtype(datasets) and ours[1].dtype == np.int64
    np.testing.assert_array_equal(ours[0], expected[0])
    np.testing.assert_array_equal(ours[1], expected[1])


def wide_weights(seed: int, stages: int, datasets: int, zeros: float) -> np.ndarray:
    """Lognormal base weights times lognormal noise per stage; some zeros per stage."""
    rng = np.random.default_rng(seed)
    base = rng.lognormal(0.0, 1.0, datasets)
    weights = base[None, :] * rng.lognormal(0.0, 0.5, (stages, datasets))
    weights[rng.random(weights.shape) < zeros] = 0.0
    weights[:, 0] += 1.0  # every stage with some weight
    return weights


@st.composite
def stage_blends(draw, max_datasets: int = 40, max_stages: int = 6):
    """(weights float64 [S, n], lengths int64 [S]): zero weights, periodic (small
    integer) and random rows, lengths at and between the engine's thresholds."""
    n = draw(st.integers(1, max_datasets))
    stages = draw(st.integers(1, max_stages))
    rows = []
    for _ in range(stages):
        weight = st.one_of(
            st.just(0.0), st.floats(1e-3, 1e3), st.integers(1, 5).map(float)
        )
        row = draw(st.lists(weight, min_size=n, max_size=n))
        if not any(row):
            row[draw(st.integers(0, n - 1))] = 1.0
        rows.append(row)
    length = st.one_of(st.sampled_from(EDGES), st.integers(0, 20_000))
    lengths = draw(st.lists(length, min_size=stages, max_size=stages))
    return np.array(rows, dtype=np.float64), np.array(lengths, dtype=np.int64)


@SETTINGS
@given(blend=stage_blends())
@example(blend=(np.array([[1.0, 2.0, 0.0]]), np.array([0])))
@example(blend=(np.array([[0.0, 3.0], [1.0, 1.0]]), np.array([1, 7])))
@example(blend=(np.array([[0.3, 0.5, 0.9, 0.01, 0.2, 0.7, 0.05]] * 2), np.array([4097, 600])))
def test_stages_equal_the_per_stage_orders(blend):
    weights, lengths = blend
    ours = balanced_blending_stages(weights, lengths)
    assert len(ours[0]) == len(ours[1]) == int(lengths.sum())
    assert_equal_orders(ours, per_stage(weights, lengths), weights.shape[1])


@pytest.mark.parametrize(
    "seed, stages, datasets, zeros, lengths",
    [
        (1234, 6, 1000, 0.0, [7500] * 6),  # one column per stage, no burn-in
        (5, 4, 300, 0.2, [20_000, 100, 0, 9_000]),  # several columns, short stages along
        (6, 3, 700, 0.5, [3, 30_000, 1_500]),
        (7, 5, 60, 0.3, [50_000, 0, 4_096, 80_000, 17]),
    ],
)
def test_wide_stages_equal_the_per_stage_orders(seed, stages, datasets, zeros, lengths):
    weights = wide_weights(seed, stages, datasets, zeros)
    ours = balanced_blending_stages(weights, lengths)
    assert_equal_orders(ours, per_stage(weights, lengths), datasets)


def edf_table(seed: int, runs: int, datasets: int, zeros: float) -> np.ndarray:
    """float64 [runs, datasets]: each row's rates (sum 1), zeros where it never picks."""
    weights = wide_weights(seed, runs, datasets, zeros)
    return weights / weights.sum(axis=1, keepdims=True)


def per_run(table: np.ndarray, lengths) -> tuple[np.ndarray, np.ndarray]:
    """The reference of run_stages: engine.run over each row's live datasets."""
    indices, samples = [np.empty(0, np.int16)], [np.empty(0, np.int64)]
    for rates, size in zip(table, lengths):
        live = np.flatnonzero(rates > 0)
        index, sample = engine.run("edf", rates[live], int(size))
        indices.append(live.astype(np.int16)[index])
        samples.append(sample)
    return np.concatenate(indices), np.concatenate(samples)


@pytest.mark.parametrize("datasets", [6, 40])
def test_run_stages_repairs_and_falls_back_exactly(monkeypatch, datasets):
    """Columns that start from a wrong guess are re-run (within their run); past the
    repair budget the rest runs in plain Python; the values are the same either way."""
    table = edf_table(11, 4, datasets, 0.3)
    lengths = [30_000, 7, 0, 60_000]
    expected = per_run(table, lengths)
    monkeypatch.setattr(engine, "BURN", {"megatron": 1, "edf": 1})
    monkeypatch.setattr(engine, "EDF_WIDE_BURN", 1)
    stats = {}
    ours = engine.run_stages("edf", table, lengths, np.int16, stats)
    assert stats["repaired"] > 0 and stats["segments"] > len(lengths)
    np.testing.assert_array_equal(ours[0], expected[0])
    np.testing.assert_array_equal(ours[1], expected[1])
    monkeypatch.setattr(engine, "MAX_REPAIR_ROUNDS", 0)
    stats = {}
    ours = engine.run_stages("edf", table, lengths, np.int16, stats)
    assert stats["sequential"] > 0 and stats["repaired"] == 0
    np.testing.assert_array_equal(ours[0], expected[0])
    np.testing.assert_array_equal(ours[1], expected[1])


def test_run_stages_plans():
    """Short narrow runs go to plain Python; short wide ones are one column each (no
    burn-in, no links); long ones several columns each. Values equal either way."""
    cases = [
        (edf_table(1, 3, 4, 0.0), [100, 0, 2_000], "python"),
        (edf_table(2, 3, 1000, 0.1), [900, 700, 10], "one column"),
        (edf_table(3, 2, 8, 0.0), [200_000, 90_000], "columns"),
    ]
    for table, lengths, plan in cases:
        stats = {}
        ours = engine.run_stages("edf", table, lengths, np.int16, stats)
        expected = per_run(table, lengths)
        np.testing.assert_array_equal(ours[0], expected[0])
        np.testing.assert_array_equal(ours[1], expected[1])
        if plan == "python":
            assert stats["sequential"] == sum(lengths)
        elif plan == "one column":
            assert stats["segments"] == 3 and stats["segment"] == max(lengths)
        else:
            assert stats["segments"] > 2 and stats["sequential"] == 0


def test_run_stages_empty_and_rule():
    index, sample = engine.run_stages("edf", np.ones((2, 3)) / 3, [0, 0], np.int32)
    assert index.shape == sample.shape == (0,) and index.dtype == np.int32
    with pytest.raises(ValueError, match="rule"):
        engine.run_stages("megatron", np.ones((1, 2)) / 2, [10])


@pytest.mark.parametrize("wide", [False, True])
def test_stage_kernel_follows_the_plain_rule_from_any_counts(wide):
    """Every column of the per-run kernel, started anywhere from any counts, follows
    scalar_edf over its run's rates > 0 (a run of one dataset, D = 0, included)."""
    datasets = rules.Edf.WIDE + 6 if wide else 5
    rng = np.random.default_rng(12)
    table = edf_table(13, 4, datasets, 0.4)
    table[3] = 0.0
    table[3, 2] = 1.0  # one live dataset: bound 0
    runs = np.array([0, 1, 2, 3, 0, 2])
    steps = np.array([0, 5, 1_000, 7, 123_456, 40])
    counts = rules.EdfStages(table).guess(steps, runs)
    counts[:, 1] += rng.integers(0, 3, datasets) * (table[1] > 0)  # off the rule's path
    kernel = rules.EdfStages(table)
    assert kernel.wide == wide
    kernel.start(counts, steps, runs)
    picks = np.empty((150, len(runs)), dtype=np.intp)
    before = np.empty((150, len(runs)))
    for t in range(150):
        kernel.step(picks[t], before[t])
    for column, run in enumerate(runs.tolist()):
        live = np.flatnonzero(table[run] > 0)
        start = int(steps[column])
        expected, samples = rules.scalar_edf(
            table[run, live], None, counts[live, column], start, start + 150
        )
        np.testing.assert_array_equal(picks[:, column], live[expected])
        np.testing.assert_array_equal(before[:, column], samples)


def test_schedule_of_many_datasets_equals_the_per_stage_loop():
    """A 1,000-dataset, 8-stage schedule (all stages EDF, side by side): each stage's
    static order, each dataset's samples continuing across stages."""
    weights = wide_weights(1234, 8, 1000, 0.1)
    starts = np.arange(8) * 3_000
    size = 8 * 3_000 - 500
    index, sample = schedule_blending_indices(starts, weights, size)
    lengths = np.diff(np.append(starts, size))
    expected_index, counts = per_stage(weights, lengths)
    np.testing.assert_array_equal(index, expected_index)
    offsets = np.zeros(1000, dtype=np.int64)
    for k, lo in enumerate(starts.tolist()):
        piece = slice(lo, lo + int(lengths[k]))
        np.testing.assert_array_equal(sample[piece], counts[piece] + offsets[index[piece]])
        offsets += np.bincount(index[piece], minlength=1000)


# -- validation --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("weights", "lengths", "match"),
    [
        ([1.0, 2.0], [5], r"weights: expected \[stages, datasets\]"),
        ([[[1.0]]], [5], r"weights: expected \[stages, datasets\]"),
        (np.zeros((2, 0)), [1, 1], r"weights: expected \[stages, datasets\]"),
        ("ab", [5], "weights"),
        ([[1.0, 1.0], [1.0, -1.0]], [5, 5], r"weights\[1\]: weight 1 is -1.0"),
        ([[1.0, np.nan]], [5], r"weights\[0\]: weight 1 is nan"),
        ([[1.0, np.inf]], [5], r"weights\[0\]: weight 1 is inf"),
        ([[1.0, 1.0], [0.0, 0.0]], [5, 5], r"weights\[1\]: every weight is 0"),
        ([[1.0, 1.0]], [5, 5], "lengths: 2 lengths for 1 stages"),
        ([[1.0, 1.0]] * 2, [5], "lengths: 1 lengths for 2 stages"),
        ([[1.0, 1.0]], [-1], "lengths: negative length -1"),
        ([[1.0, 1.0]], [2.5], "lengths: expected an integer array"),
        ([[1.0, 1.0]], [True], "lengths: expected an integer array"),
        ([[1.0, 1.0]], [[5]], "lengths: expected a 1-D array"),
        ([[1.0, 1.0]], [1 << 52], r"lengths: 4503599627370496 must be < 2\*\*52"),
    ],
)
def test_bad_stages(weights, lengths, match):
    with pytest.raises(DataError, match=match):
        balanced_blending_stages(weights, lengths)


def test_no_stages():
    index, sample = balanced_blending_stages(np.zeros((0, 3)), [])
    assert index.shape == sample.shape == (0,) and index.dtype == np.int16
    index, _ = balanced_blending_stages(np.ones((2, 40_000)), [3, 0])
    assert index.dtype == np.int32 and index.tolist() == [0, 1, 2]
