"""BatchSizeSchedule: Megatron's --step-batch-size-schedule, parsed and stepped."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from ramp_reference import (
    batch_size_at,
    first_difference,
    schedule_entries,
    schedule_text,
    step_starts,
    train_iters,
)

import megadata_core as mdc
from megadata_core.samplers import BatchSizeSchedule

MEGATRON_EXAMPLE = "0:768 250B:1536 500B:3072 750B:6144"


def test_megatron_example_in_tokens_and_samples():
    tokens = BatchSizeSchedule.parse(MEGATRON_EXAMPLE, sequence_length=4096)
    assert tokens.thresholds == (0, 250 * 10**9 // 4096, 500 * 10**9 // 4096, 750 * 10**9 // 4096)
    assert tokens.batch_sizes == (768, 1536, 3072, 6144)
    samples = BatchSizeSchedule.parse("0:768 61035156250:1536")
    assert samples.thresholds == (0, 61_035_156_250)
    assert str(samples) == "0:768 61035156250:1536"


def test_steps_keep_their_size_across_a_threshold():
    schedule = BatchSizeSchedule.parse("0:8 20:16 30:4 1K:32")
    # 0 8 16 | 24 (16 < 20 <= 24: the step at 16 stays 8) 40 (past 30: 4) 44 ...
    assert [schedule.consumed_after(i) for i in range(6)] == [0, 8, 16, 24, 40, 44]
    assert schedule.runs == ((0, 24, 40, 1000), (0, 3, 4, 244), (8, 16, 4, 32))
    assert schedule.step_at(44) == 5 and schedule.train_iters(41) == 5
    assert schedule.global_batch_size(29) == 16 and schedule.global_batch_size(30) == 4


def test_huge_counts_are_exact_and_closed_form():
    """Thresholds past int64 stay Python ints; 10^15 steps take no time."""
    schedule = BatchSizeSchedule.parse("0:1 1e15:2 1e30:3")
    assert schedule.thresholds == (0, 10**15, int(float("1e30")))
    assert schedule.train_iters(2 * 10**15) == 10**15 + 5 * 10**14
    assert schedule.consumed_after(10**15 + 7) == 10**15 + 14
    assert schedule.step_at(10**15 + 14) == 10**15 + 7
    assert schedule.global_batch_size(10**31) == 3


def test_equal_schedules_compare_equal_and_print_the_same():
    a = BatchSizeSchedule.parse(" 1k:16,0:8 ", sequence_length=None)
    b = BatchSizeSchedule.parse("0:8 1000:16")
    c = BatchSizeSchedule((0, 1000), (8, 16))
    assert a == b == c and hash(a) == hash(c) and str(a) == str(c) == "0:8 1000:16"
    assert BatchSizeSchedule.parse(str(a)) == a
    assert BatchSizeSchedule.parse("0:8 4001:16", sequence_length=4) == b


@pytest.mark.parametrize(
    ("text", "sequence_length", "words"),
    [
        ("", None, "no entries"),
        (" , ,", None, "no entries"),
        ("0:8 100", None, "'100' has no ':'"),
        ("0:x", None, "batch size 'x'"),
        ("y:8", None, "threshold 'y'"),
        ("0:8:3", None, "batch size '8:3'"),
        ("0:", None, "batch size ''"),
        ("0:8 inf:16", None, "threshold 'inf'"),
        ("0:8 nan:16", None, "threshold 'nan'"),
        ("0:8 1e400:16", None, "threshold '1e400'"),
        ("0:8 1KB:16", None, "threshold '1KB'"),
        ("0:8 B:16", None, "threshold 'B'"),
        ("10:8", None, "entry '10:8'.*first threshold must be 0"),
        ("-1:8 0:16", None, "entry '-1:8'.*first threshold must be 0"),
        ("0:8 100:16 1e2:32", None, "'100:16' and '1e2:32' have the same threshold, 100"),
        ("0:8 3:16", 4, "'0:8' and '3:16' have the same threshold, 0"),
        ("0:0", None, "entry '0:0': batch size 0 must be > 0"),
        ("0:8 100:-16", None, "entry '100:-16': batch size -16"),
        ("0:0.5", None, "entry '0:0.5': batch size 0"),
        ("0:8", 0, "sequence_length"),
        ("0:8", -4, "sequence_length"),
        ("0:8", 4.0, "sequence_length"),
    ],
)
def test_rejected_strings(text, sequence_length, words):
    with pytest.raises(mdc.DataError, match=words):
        BatchSizeSchedule.parse(text, sequence_length=sequence_length)


@pytest.mark.parametrize(
    ("thresholds", "batch_sizes", "words"),
    [
        ((0, 10), (8,), "2 thresholds but 1 batch sizes"),
        ((), (), "no entries"),
        ((5,), (8,), "first threshold must be 0"),
        ((0, 10, 5), (1, 2, 3), "not in increasing order"),
        ((0, 10, 10), (1, 2, 3), "same threshold"),
        ((0,), (8.0,), "batch size: 8.0 is not an integer"),
        ((0.0,), (8,), "threshold: 0.0 is not an integer"),
        ((0,), (0,), "batch size 0 must be > 0"),
    ],
)
def test_rejected_tuples(thresholds, batch_sizes, words):
    with pytest.raises(mdc.DataError, match="step_batch_size_schedule"):
        BatchSizeSchedule(thresholds, batch_sizes)
    with pytest.raises(mdc.DataError, match=words):
        BatchSizeSchedule(thresholds, batch_sizes)


def test_rejected_arguments_of_the_methods():
    schedule = BatchSizeSchedule.parse("0:12 100:24")
    cases = [
        (lambda: BatchSizeSchedule.parse(768), "step_batch_size_schedule: expected a string"),
        (lambda: schedule.global_batch_size(-1), "consumed_samples: -1"),
        (lambda: schedule.global_batch_size(1.0), "consumed_samples: 1.0"),
        (lambda: schedule.num_micro_batches(0, 0, 1), "micro_batch_size: 0"),
        (lambda: schedule.num_micro_batches(0, 1, 0), "data_parallel_size: 0"),
        (lambda: schedule.num_micro_batches(0, 5, 2),
         "global batch size 12 at consumed_samples 0 is not divisible by micro_batch_size 5 "
         "x data_parallel_size 2 = 10"),
        (lambda: schedule.consumed_after(-1), "steps: -1"),
        (lambda: schedule.step_at(-12), "consumed_samples: -12"),
        (lambda: schedule.step_at(30), "consumed_samples: 30 is not a step boundary .* 24 and 36"),
        (lambda: schedule.train_iters(-1), "train_samples: -1"),
        (lambda: schedule.first_difference("0:12"), "expected a BatchSizeSchedule"),
    ]
    for call, words in cases:
        with pytest.raises(mdc.DataError, match=words):
            call()


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_parse_invariants(data):
    entries = data.draw(schedule_entries(max_threshold=10**7, batch_sizes=st.integers(1, 10**4)))
    text = data.draw(schedule_text(entries))
    schedule = BatchSizeSchedule.parse(text)
    assert list(zip(schedule.thresholds, schedule.batch_sizes)) == entries
    assert schedule.thresholds[0] == 0
    assert all(a < b for a, b in zip(schedule.thresholds, schedule.thresholds[1:]))
    assert all(type(v) is int for v in schedule.thresholds + schedule.batch_sizes)
    assert BatchSizeSchedule.parse(str(schedule)) == schedule
    assert BatchSizeSchedule.parse(data.draw(schedule_text(entries))) == schedule
    length = data.draw(st.integers(1, 4096))
    tokens = [t // length for t, _ in entries]
    if len(set(tokens)) == len(tokens):  # distinct in samples: accepted
        in_tokens = BatchSizeSchedule.parse(text, sequence_length=length)
        assert in_tokens.thresholds == tuple(tokens)
    else:
        with pytest.raises(mdc.DataError, match="same threshold"):
            BatchSizeSchedule.parse(text, sequence_length=length)


@settings(max_examples=300, deadline=None)
@given(schedule_entries(), st.integers(0, 2000))
def test_train_iters_and_batch_sizes_equal_the_plain_loop(entries, train_samples):
    schedule = BatchSizeSchedule(*zip(*entries))
    assert schedule.train_iters(train_samples) == train_iters(entries, train_samples)
    for consumed in range(0, 500, 7):
        assert schedule.global_batch_size(consumed) == batch_size_at(entries, consumed)


@settings(max_examples=300, deadline=None)
@given(schedule_entries(), st.integers(1, 4), st.integers(1, 4))
def test_steps_equal_the_plain_loop(entries, mbs, dp):
    schedule = BatchSizeSchedule(*zip(*entries))
    starts = step_starts(entries, 600)
    assert [schedule.consumed_after(step) for step in range(len(starts))] == starts
    assert [schedule.step_at(start) for start in starts] == list(range(len(starts)))
    boundaries = set(starts)
    for consumed in range(starts[-1]):
        if consumed not in boundaries:
            with pytest.raises(mdc.DataError, match="not a step boundary"):
                schedule.step_at(consumed)
    for start in starts:
        size = batch_size_at(entries, start)
        if size % (mbs * dp) == 0:
            assert schedule.num_micro_batches(start, mbs, dp) == size // (mbs * dp)
        else:
            with pytest.raises(mdc.DataError, match=f"micro_batch_size {mbs}"):
                schedule.num_micro_batches(start, mbs, dp)


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_first_difference_is_the_first_step_that_differs(data):
    entries = data.draw(schedule_entries(batch_sizes=st.integers(1, 12)))
    edit = data.draw(st.sampled_from(["same", "after", "random", "redundant"]))
    if edit == "same":
        other = list(entries)
    elif edit == "redundant":  # an entry that repeats the batch size before it changes nothing
        threshold = data.draw(st.integers(1, 500).filter(lambda t: t not in dict(entries)))
        other = sorted([*entries, (threshold, batch_size_at(entries, threshold))])
    elif edit == "after":  # the schedule from some point on is replaced
        cut = data.draw(st.integers(1, 500))
        tail = data.draw(schedule_entries(batch_sizes=st.integers(1, 12)))
        other = [e for e in entries if e[0] < cut] + [(cut + t, b) for t, b in tail]
    else:
        other = data.draw(schedule_entries(batch_sizes=st.integers(1, 12)))
    a, b = BatchSizeSchedule(*zip(*entries)), BatchSizeSchedule(*zip(*other))
    expected = first_difference(entries, other)
    assert a.first_difference(b) == b.first_difference(a) == expected
    if edit in ("same", "redundant"):
        assert expected is None
