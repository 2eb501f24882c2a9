"""``BatchSizeSchedule`` against megatron-core 0.18+'s own
``StepBatchsizeNumMicroBatchesCalculator`` on randomized ``--step-batch-size-schedule``
strings (valid and not): the same strings refused, the same parsed entries, the same
global batch size at every consumed count, the same micro-batch counts and consistency
failures; and Megatron-LM's ``update_train_iters`` (shipped in the 0.19 wheel) gives our
``train_iters``. megatron-core 0.16.1 has no step schedule: skipped there."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

import megadata_core as mdc
from megadata_core.samplers import BatchSizeSchedule

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    import megatron.core
    from megatron.core import num_microbatches_calculator as calculators

STEP = getattr(calculators, "StepBatchsizeNumMicroBatchesCalculator", None)
VERSION = getattr(megatron.core, "__version__", "?")
pytestmark = pytest.mark.skipif(
    STEP is None,
    reason=f"megatron-core {VERSION} has no StepBatchsizeNumMicroBatchesCalculator "
    "(--step-batch-size-schedule came in 0.18)",
)
logging.getLogger("megatron").setLevel(logging.ERROR)

#: Values that are not numbers to Megatron, or not finite ones.
JUNK = ["", "abc", "inf", "-inf", "nan", "1e400", "1KB", "B", "k", "0x10", "1:2", "1..5"]


@st.composite
def spelled(draw, number: int) -> str:
    """``number`` in one of Megatron's spellings (which may read as another number: 0.29K
    is 289), now and then a value it refuses."""
    kind = draw(st.sampled_from(["int"] * 20 + ["suffix", "decimal", "exponent"] * 2 + ["junk"]))
    if kind == "junk":
        return draw(st.sampled_from(JUNK))
    if kind == "suffix":
        suffix = draw(st.sampled_from("KMBTkmbt"))
        return f"{draw(st.sampled_from([number, number / 8, number / 1000]))}{suffix}"
    if kind == "decimal":
        return f"{number / draw(st.sampled_from([2, 3, 10, 7]))}"
    if kind == "exponent":
        return f"{number}e{draw(st.integers(-3, 4))}"
    return str(number)


@st.composite
def schedule_string(draw, scale: int = 1) -> str:
    """Entries in any order with spaces and commas: thresholds 0 and distinct others up
    to 5,000 x ``scale`` (a negative one, or none at 0, now and then), small batch sizes
    (0 and -1 too), a colon missing or doubled at times."""
    count = draw(st.sampled_from([0, *range(1, 7)] + [*range(1, 7)] * 3))  # few empty ones
    later = draw(st.lists(st.integers(1, 5000 * scale), min_size=max(count - 1, 0),
                          max_size=max(count - 1, 0), unique=True))
    first = draw(st.integers(-5, 5)) if draw(st.integers(0, 19)) == 0 else 0
    entries = []
    for threshold in [first, *later][:count]:
        entry = f"{draw(spelled(threshold))}:{draw(spelled(draw(st.integers(-1, 64))))}"
        entry = draw(st.sampled_from([entry] * 40 + [entry.replace(":", ""), entry + ":4"]))
        entries.append(entry)
    entries = draw(st.permutations(entries))
    separators = st.sampled_from([" ", ",", ", ", "  ", "\t"])
    return "".join(entry + draw(separators) for entry in entries)


def megatron_calculator(text: str, sequence_length, mbs: int = 1, dp: int = 1):
    """Megatron's calculator, or the exception it raises."""
    try:
        return STEP(micro_batch_size=mbs, data_parallel_size=dp,
                    decrease_batch_size_if_needed=False, rank=1, schedule=text,
                    seq_length=sequence_length)
    except (AssertionError, ValueError, OverflowError) as error:
        return error


def ours(text: str, sequence_length):
    try:
        return BatchSizeSchedule.parse(text, sequence_length=sequence_length)
    except mdc.DataError as error:
        return error


@settings(max_examples=400, deadline=None)
@given(st.sampled_from([None, None, 1, 3, 64, 1000, 4096]), st.sampled_from([1, 2, 3, 4]),
       st.sampled_from([1, 2, 4, 8]), st.data())
def test_parse_batch_sizes_and_micro_batches_as_megatron(sequence_length, mbs, dp, data):
    text = data.draw(schedule_string(sequence_length or 1))
    theirs = megatron_calculator(text, sequence_length, mbs, dp)
    mine = ours(text, sequence_length)
    assert isinstance(theirs, Exception) == isinstance(mine, Exception), (text, theirs, mine)
    event(f"refused: {type(theirs).__name__}" if isinstance(mine, Exception) else "parsed")
    if isinstance(mine, Exception):
        return
    assert list(zip(mine.thresholds, mine.batch_sizes)) == theirs.schedule
    probes = {0, *mine.thresholds, *(t - 1 for t in mine.thresholds[1:]),
              *(t + 1 for t in mine.thresholds)}
    probes |= set(data.draw(st.lists(st.integers(0, mine.thresholds[-1] + 100), max_size=8)))
    for consumed in sorted(probes):
        theirs.update(consumed, consistency_check=False)
        assert mine.global_batch_size(consumed) == theirs.get_current_global_batch_size()
        try:
            theirs.update(consumed, consistency_check=True)
        except AssertionError:
            with pytest.raises(mdc.DataError, match="is not divisible"):
                mine.num_micro_batches(consumed, mbs, dp)
        else:
            assert mine.num_micro_batches(consumed, mbs, dp) == theirs.get()


@pytest.mark.parametrize(
    "text",
    ["0:768 250B:1536 500B:3072 750B:6144", "0:768, 61035156250:1536", " 1.5k:8 0:4 ",
     "0:1e3 2.5M:2K", "0:8 1e400:16", "10:8", "0:8 100:16 100:32", "0:0", ""],
)
@pytest.mark.parametrize("sequence_length", [None, 4096])
def test_examples_as_megatron(text, sequence_length):
    theirs, mine = megatron_calculator(text, sequence_length), ours(text, sequence_length)
    assert isinstance(theirs, Exception) == isinstance(mine, Exception), (text, theirs, mine)
    if not isinstance(mine, Exception):
        assert list(zip(mine.thresholds, mine.batch_sizes)) == theirs.schedule


TRAIN_ITERS = textwrap.dedent(
    """
    import contextlib, io, json, sys, types, warnings
    warnings.simplefilter("ignore")
    from megatron.core import num_microbatches_calculator as calculators
    from megatron.training.training import update_train_iters

    results = []
    for text, sequence_length, train_samples in json.load(sys.stdin):
        calculators.init_num_microbatches_calculator(
            rank=1, global_batch_size=None, micro_batch_size=1, data_parallel_size=1,
            decrease_batch_size_if_needed=False, step_batch_size_schedule=text,
            seq_length=sequence_length)
        args = types.SimpleNamespace(train_iters=None, train_samples=train_samples,
                                     step_batch_size_schedule=text)
        with contextlib.redirect_stdout(io.StringIO()):
            update_train_iters(args)
        results.append(args.train_iters)
        calculators.destroy_num_microbatches_calculator()
    print(json.dumps(results))
    """
)


def test_train_iters_as_megatron_lm():
    """Megatron-LM's ``update_train_iters`` (in a process of its own: megatron.training
    is imported nowhere else) on 300 random schedules and sample counts."""
    rng = np.random.default_rng(28)
    cases = []
    for _ in range(300):
        count = int(rng.integers(1, 6))
        thresholds = [0, *sorted(rng.choice(np.arange(1, 3000), count - 1, replace=False))]
        sizes = rng.integers(1, 97, count)
        length = [None, 1, 8, 1000][int(rng.integers(0, 4))]
        scale = 1 if length is None else length
        text = " ".join(f"{int(t) * scale}:{int(b)}" for t, b in zip(thresholds, sizes))
        cases.append((text, length, int(rng.integers(0, 6000))))
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    result = subprocess.run([sys.executable, "-c", TRAIN_ITERS], input=json.dumps(cases),
                            capture_output=True, text=True, timeout=600, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    theirs = json.loads(result.stdout.strip().splitlines()[-1])
    mine = [BatchSizeSchedule.parse(text, length).train_iters(samples)
            for text, length, samples in cases]
    assert mine == theirs
