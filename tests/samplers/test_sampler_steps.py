"""Samplers with a step batch-size schedule: training steps, states, exact resumes."""

from __future__ import annotations

import itertools
import json

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st
from ramp_reference import batch_size_at, first_difference, schedule_entries
from sampler_reference import steps as micro_batches

import megadata_core as mdc
from megadata_core.samplers import BatchSizeSchedule, PretrainingSampler, RandomSampler

#: Every global batch size below is a multiple of 12, so each (mbs, dp) here divides it.
LAYOUTS = [(1, 1), (2, 1), (1, 2), (3, 1), (1, 3), (2, 2), (4, 1), (1, 4), (3, 2), (2, 3),
           (6, 1), (1, 6), (4, 3), (3, 4), (6, 2), (2, 6), (12, 1), (1, 12)]
SIZES = st.integers(1, 4).map(lambda k: 12 * k)


def schedule_of(entries) -> BatchSizeSchedule:
    return BatchSizeSchedule(*zip(*entries))


def make(kind: str, total: int, consumed: int, mbs: int, dp: int, schedule, seed: int = 3):
    """``make(rank)`` -> rank's sampler."""
    if kind == "pretraining":
        return lambda r: PretrainingSampler(total, consumed, mbs, r, dp,
                                            batch_size_schedule=schedule)
    sharding = kind == "random_sharded"
    return lambda r: RandomSampler(total, consumed, mbs, r, dp, data_sharding=sharding,
                                   seed=seed, batch_size_schedule=schedule)


def global_training_steps(samplers, n: int) -> list[list[int]]:
    """The first ``n`` steps of the ranks' samplers: per step, micro-batch after
    micro-batch, the ranks' lists in rank order."""
    per_rank = [list(itertools.islice(s.steps(), n)) for s in samplers]
    assert len({len(steps) for steps in per_rank}) == 1
    return [
        [i for micro in zip(*(steps[t] for steps in per_rank)) for batch in micro for i in batch]
        for t in range(len(per_rank[0]))
    ]


def test_pretraining_steps_read_the_schedule_in_order():
    schedule = BatchSizeSchedule.parse("0:4 10:8 40:16")
    sampler = PretrainingSampler(60, 0, 2, 1, 2, batch_size_schedule=schedule)
    got = list(sampler.steps())
    # steps start at 0 4 8 12 20 28 36 44; the step at 44 would end at 60: it fits
    assert got == [[[2, 3]], [[6, 7]], [[10, 11]], [[14, 15], [18, 19]],
                   [[22, 23], [26, 27]], [[30, 31], [34, 35]], [[38, 39], [42, 43]],
                   [[46, 47], [50, 51], [54, 55], [58, 59]]]
    assert sampler.state_dict()["consumed_samples"] == 60
    assert all(type(i) is int for step in got for batch in step for i in batch)
    short = PretrainingSampler(59, 0, 2, 1, 2, batch_size_schedule=schedule, drop_last=False)
    assert len(list(short.steps())) == 7  # no partial step, whatever drop_last
    assert short.state_dict()["consumed_samples"] == 44


@pytest.mark.parametrize("kind", ["pretraining", "random_sharded", "random_unsharded"])
def test_steps_group_the_micro_batches(kind):
    """The sampler's micro-batches are unchanged; a step takes gbs / G of them."""
    schedule = BatchSizeSchedule.parse("0:8 30:24 100:48")
    for rank in range(2):
        plain = make(kind, 203, 0, 2, 2, None)(rank)
        stepped = make(kind, 203, 0, 2, 2, schedule)(rank)
        steps = list(itertools.islice(stepped.steps(), 40))
        assert all(type(i) is int for step in steps for batch in step for i in batch)
        flat = [batch for step in steps for batch in step]
        assert flat == micro_batches(plain, len(flat))
        starts = [schedule.consumed_after(t) for t in range(len(steps))]
        assert [len(step) for step in steps] == [batch_size_at([(0, 8), (30, 24), (100, 48)], c)
                                                 // 4 for c in starts]


def test_random_steps_cross_epochs_and_set_the_epoch():
    schedule = BatchSizeSchedule.parse("0:12")
    sampler = RandomSampler(30, 0, 2, 0, 2, data_sharding=False, batch_size_schedule=schedule)
    steps = sampler.steps()
    epochs = []
    for _ in range(5):  # an epoch is 28 samples: steps at 0 12 24 36 48
        next(steps)
        epochs.append(sampler.epoch)
    assert epochs == [0, 0, 0, 1, 1] and sampler.consumed_samples == 60


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_resume_at_any_step_with_another_layout_continues_exactly(data):
    """State after k steps with one (mbs, dp); resumed with another (same G where the
    sampler needs it) from that rank-0 state: the same global samples follow."""
    kind = data.draw(st.sampled_from(["pretraining", "random_sharded", "random_unsharded"]))
    entries = data.draw(schedule_entries(max_threshold=300, batch_sizes=SIZES))
    schedule = schedule_of(entries)
    total = data.draw(st.integers(48, 400))
    mbs, dp = data.draw(st.sampled_from(LAYOUTS))
    if kind == "pretraining":
        other = data.draw(st.sampled_from(LAYOUTS))
    elif kind == "random_unsharded":
        other = data.draw(st.sampled_from([(m, d) for m, d in LAYOUTS if m * d == mbs * dp]))
    else:
        other = (mbs, dp)
    n = 12
    reference = global_training_steps([make(kind, total, 0, mbs, dp, schedule)(r)
                                       for r in range(dp)], n)
    k = data.draw(st.integers(0, len(reference)))
    head = [make(kind, total, 0, mbs, dp, schedule)(r) for r in range(dp)]
    for sampler in head:
        list(itertools.islice(sampler.steps(), k))
    state = json.loads(json.dumps(head[0].state_dict()))
    assert state["consumed_samples"] == schedule.consumed_after(k)
    assert state["batch_size_schedule"] == str(schedule)
    tail = [make(kind, total, 0, *other, schedule)(r) for r in range(other[1])]
    for sampler in tail:
        sampler.load_state_dict(state)
    assert global_training_steps(tail, n - k) == reference[k:n]
    if kind != "pretraining" or state["consumed_samples"] < total:  # (none left: refused)
        built = [make(kind, total, state["consumed_samples"], *other, schedule)(r)
                 for r in range(other[1])]  # or built at the consumed count
        assert global_training_steps(built, n - k) == reference[k:n]
    if kind == "pretraining":  # Megatron's order: the steps tile the samples
        flat = [i for step in reference for i in step]
        assert flat == list(range(len(flat)))


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_schedule_edits_are_accepted_only_after_the_consumed_samples(data):
    kind = data.draw(st.sampled_from(["pretraining", "random_unsharded"]))
    entries = data.draw(schedule_entries(max_threshold=200, batch_sizes=SIZES))
    cut = data.draw(st.integers(1, 300))
    tail = data.draw(schedule_entries(max_threshold=200, batch_sizes=SIZES))
    edited = [e for e in entries if e[0] < cut] + [(cut + t, b) for t, b in tail]
    old, new = schedule_of(entries), schedule_of(edited)
    k = data.draw(st.integers(0, 10))
    sampler = make(kind, 1000, 0, 2, 3, old)(1)
    list(itertools.islice(sampler.steps(), k))
    state = sampler.state_dict()
    consumed = state["consumed_samples"]
    resumed = make(kind, 1000, 0, 2, 3, new)(1)
    differ = first_difference(entries, edited)
    event("refused" if differ is not None and differ < consumed else "accepted")
    if differ is not None and differ < consumed:
        with pytest.raises(mdc.DataError, match="differ before the state's consumed_samples"):
            resumed.load_state_dict(state)
        return
    resumed.load_state_dict(state)  # same steps so far: continue with the new schedule
    assert resumed.state_dict()["batch_size_schedule"] == str(new)
    fresh = make(kind, 1000, 0, 2, 3, new)(1)
    steps = list(itertools.islice(fresh.steps(), new.step_at(consumed) + 5))
    assert list(itertools.islice(resumed.steps(), 5)) == steps[new.step_at(consumed):]


def test_without_a_schedule_states_and_reprs_are_unchanged():
    p = PretrainingSampler(100, 8, 2, 1, 2)
    assert p.state_dict() == {"consumed_samples": 8, "total_samples": 100,
                              "micro_batch_size": 2, "data_parallel_size": 2,
                              "drop_last": True}
    assert repr(p) == ("PretrainingSampler(total_samples=100, consumed_samples=8, "
                       "micro_batch_size=2, data_parallel_rank=1, data_parallel_size=2, "
                       "drop_last=True)")
    r = RandomSampler(100, 8, 2, 1, 2, seed=5)
    assert r.state_dict() == {"consumed_samples": 8, "total_samples": 100,
                              "global_batch_size": 4, "data_sharding": True, "seed": 5,
                              "micro_batch_size": 2, "data_parallel_size": 2}
    assert repr(r).endswith("data_sharding=True, seed=5)")
    scheduled = PretrainingSampler(100, 8, 2, 1, 2,
                                   batch_size_schedule=BatchSizeSchedule.parse("0:8"))
    assert repr(scheduled).endswith("drop_last=True, batch_size_schedule='0:8')")


SCHEDULE = BatchSizeSchedule.parse("0:8 20:24")  # steps at 0 8 16 24 48 ...
GOOD = {"total_samples": 200, "consumed_samples": 0, "micro_batch_size": 2,
        "data_parallel_rank": 0, "data_parallel_size": 2, "batch_size_schedule": SCHEDULE}


@pytest.mark.parametrize("cls", [PretrainingSampler, RandomSampler])
@pytest.mark.parametrize(
    ("changes", "words"),
    [
        ({"batch_size_schedule": "0:8"}, "batch_size_schedule: expected a BatchSizeSchedule"),
        ({"consumed_samples": 12}, "consumed_samples: 12 is not a step boundary"),
        ({"consumed_samples": 20}, "consumed_samples: 20 is not a step boundary"),
        ({"micro_batch_size": 3, "consumed_samples": 0},
         "global batch size 8 at consumed_samples 0 is not divisible by micro_batch_size 3"),
        ({"micro_batch_size": 1, "data_parallel_size": 16, "consumed_samples": 48},
         "global batch size 24 at consumed_samples 48 .* micro_batch_size 1 x "
         "data_parallel_size 16"),
    ],
)
def test_rejected_construction(cls, changes, words):
    with pytest.raises(mdc.DataError, match=words):
        cls(**{**GOOD, **changes})


@pytest.mark.parametrize("cls", [PretrainingSampler, RandomSampler])
def test_steps_need_a_schedule(cls):
    with pytest.raises(mdc.DataError, match="batch_size_schedule: steps"):
        cls(**{**GOOD, "batch_size_schedule": None}).steps()


def test_a_step_whose_batch_size_does_not_divide_stops_the_steps():
    sampler = PretrainingSampler(**{**GOOD, "batch_size_schedule":
                                    BatchSizeSchedule.parse("0:8 20:12"), "data_parallel_size": 8,
                                    "micro_batch_size": 1})
    steps = sampler.steps()
    assert len([next(steps) for _ in range(3)]) == 3
    with pytest.raises(mdc.DataError, match="global batch size 12 at consumed_samples 24"):
        next(steps)


@pytest.mark.parametrize("cls", [PretrainingSampler, RandomSampler])
@pytest.mark.parametrize(
    ("state", "words"),
    [
        ({"consumed_samples": 16}, "state: batch_size_schedule is None in the state but '0:8 "),
        ({"consumed_samples": 12, "batch_size_schedule": "0:8 20:24"},
         "consumed_samples: 12 is not a step boundary"),
        ({"consumed_samples": 40, "batch_size_schedule": "0:8 16:24"},
         "differ before the state's consumed_samples 40: the step at 16 consumed samples "
         "reads 24 samples in the state's schedule and 8 in this one"),
        ({"consumed_samples": 48, "batch_size_schedule": "0:8 20:x"},
         "state: batch_size_schedule '0:8 20:x' is not a schedule: step_batch_size_schedule"),
        ({"consumed_samples": 48, "batch_size_schedule": 8},
         "state: batch_size_schedule 8 is not a schedule"),
        ({"consumed_samples": 20, "batch_size_schedule": "0:8 20:24 100:4"},
         "consumed_samples: 20 is not a step boundary of the batch-size schedule '0:8 20:24 "
         "100:4'"),
    ],
)
def test_rejected_states(cls, state, words):
    with pytest.raises(mdc.DataError, match=words):
        cls(**GOOD).load_state_dict(state)


@pytest.mark.parametrize("cls", [PretrainingSampler, RandomSampler])
def test_a_state_with_a_schedule_needs_a_sampler_with_one(cls):
    with pytest.raises(mdc.DataError, match="'0:8' in the state but None in this sampler"):
        cls(**{**GOOD, "batch_size_schedule": None}).load_state_dict(
            {"consumed_samples": 8, "batch_size_schedule": "0:8"})


@pytest.mark.parametrize("cls", [PretrainingSampler, RandomSampler])
def test_a_future_edit_is_accepted(cls):
    sampler = cls(**GOOD)
    sampler.load_state_dict({"consumed_samples": 24, "batch_size_schedule": "0:8 24:4"})
    sampler.load_state_dict({"consumed_samples": 24, "batch_size_schedule": "0:8 17:48"})
    assert sampler.consumed_samples == 24
    assert len(next(sampler.steps())) == 6  # this sampler's 24 from 24 on, as 6 x (2 x 2)
