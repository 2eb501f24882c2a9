"""GPTDataConfig.blend_schedule: the forms it takes and every input it rejects."""

from __future__ import annotations

import pytest

import megadata_core as mdc
from megadata_core.datasets.config import (
    parse_schedule_text,
    schedule_arrays,
    token_count,
)


def config(schedule, **kw):
    kw.setdefault("split", "98,2,0")
    kw.setdefault("sequence_length", 4096)
    return mdc.GPTDataConfig(random_seed=1, blend_schedule=schedule, **kw)


def test_code_form_and_tokens():
    made = config([
        (0, (["/d/web", "/d/code"], [8, 2])),
        ("50B", "0.5 /d/web 0.2 /d/code 0.3 /d/math"),
        (20_000_000, (["/d/math"], [1])),
    ])
    assert made.blend_schedule == (
        (0, (("/d/web", "/d/code"), (8.0, 2.0))),
        (50 * 10**9 // 4096, (("/d/web", "/d/code", "/d/math"), (0.5, 0.2, 0.3))),
        (20_000_000, (("/d/math",), (1.0,))),
    )
    prefixes, starts, weights = schedule_arrays(made.blend_schedule)
    assert prefixes == ["/d/web", "/d/code", "/d/math"]
    assert starts.tolist() == [0, 12207031, 20_000_000]
    assert weights.tolist() == [[8, 2, 0], [0.5, 0.2, 0.3], [0, 0, 1]]
    # the normalized field is its own normal form (dataclasses.replace re-checks it)
    from dataclasses import replace

    assert replace(made, random_seed=2).blend_schedule == made.blend_schedule


def test_text_form():
    text = """
        # warm-up on web, then anneal
        0:    0.8 /d/web 0.2 /d/code
        1.5K: 0.5 /d/web 0.5 s3://bucket/math   # a remote prefix keeps its colon
    """
    made = config(text, sequence_length=10)
    assert made.blend_schedule == (
        (0, (("/d/web", "/d/code"), (0.8, 0.2))),
        (150, (("/d/web", "s3://bucket/math"), (0.5, 0.5))),
    )
    assert config("0: 1 /a; 100: 1 /b", sequence_length=10).blend_schedule[1][0] == 10
    assert parse_schedule_text("0: 1 /a;;\n100: 1 /b") == [("0", "1 /a"), ("100", "1 /b")]


def test_megatron_counts():
    # Megatron's step-batch-size-schedule rule: int(float(number) * multiplier)
    assert token_count("250B", "x") == 250_000_000_000
    assert token_count(" 1.5k ", "x") == 1500
    assert token_count("2T", "x") == 2 * 10**12
    assert token_count("7", "x") == 7
    assert token_count("0.1M", "x") == int(0.1 * 10**6)


@pytest.mark.parametrize(
    "schedule, match",
    [
        ([], "is not a non-empty list"),
        (b"0: 1 /a", "is not a non-empty list"),
        ("", "no stages"),
        ("# only a comment", "no stages"),
        ("0 1 /a", "is not 'START: WEIGHT PREFIX"),
        ("0:", "is not 'START: WEIGHT PREFIX"),
        ([(0,)], r"blend_schedule\[0\]: \(0,\) is not a \(start, blend\) pair"),
        ([5], r"blend_schedule\[0\]: 5 is not a \(start, blend\) pair"),
        ([(1, "1 /a")], r"blend_schedule\[0\] start: 1 is sample 1; the first stage starts at 0"),
        ([("1M", "1 /a")], r"blend_schedule\[0\] start: '1M' is sample 244"),
        ([(0, "1 /a"), (0, "1 /b")], r"blend_schedule\[1\] start: 0 is sample 0, not after"),
        ([(0, "1 /a"), (9, "1 /b"), (3, "1 /c")], r"blend_schedule\[2\] start: 3 is sample 3"),
        ([(0, "1 /a"), ("100", "1 /b")], r"'100' is sample 0, not after stage 0's 0"),
        ([(0, "1 /a"), (-5, "1 /b")], r"blend_schedule\[1\] start: -5 must be >= 0"),
        ([(0.0, "1 /a")], r"start: 0.0 is not an int \(samples\) or a string \(tokens\)"),
        ([(True, "1 /a")], r"start: True is not an int"),
        ([("5X", "1 /a")], r"start: '5X' is not a number"),
        ([("-1K", "1 /a")], r"start: '-1K' must be a finite number >= 0"),
        ([("nan", "1 /a")], r"start: 'nan' must be a finite number >= 0"),
        ([(0, "/a /b")], r"blend_schedule\[0\] blend: no weights; every stage"),
        ([(0, (["/a"], None))], "no weights"),
        ([(0, (["/a", "/b"], [1.0]))], "2 prefixes but 1 weights"),
        ([(0, ("/a", [1.0]))], "must be a non-empty list of paths"),
        ([(0, ([], []))], "must be a non-empty list of paths"),
        ([(0, (["/a"], ["x"]))], r"weights \['x'\] must be numbers"),
        ([(0, 5)], r"blend_schedule\[0\] blend: 5 is not a \(prefixes, weights\) pair"),
        ([(0, (["/a", "/b"], [0, 0]))], "every weight is 0"),
        ([(0, (["/a", "/b"], [1, -1]))], "weight 1 is -1.0"),
        ([(0, (["/a", "/a"], [1, 1]))], "prefix '/a' is listed twice"),
    ],
)
def test_rejected(schedule, match):
    with pytest.raises(mdc.DataError, match=match):
        config(schedule)


def test_exclusive_and_needs_a_split():
    stages = [(0, "1 /a")]
    with pytest.raises(mdc.DataError, match="blend and blend_schedule are incompatible"):
        config(stages, blend="1 /a")
    with pytest.raises(mdc.DataError, match="blend_per_split and blend_schedule are"):
        config(stages, split=None, blend_per_split=["1 /a", None, None])
    with pytest.raises(mdc.DataError, match="split: must be given with blend_schedule"):
        config(stages, split=None)
    # an all-None blend_per_split is no blend_per_split
    assert config(stages, blend_per_split=[None, None, None]).blend_per_split is None


def test_with_random_seed_keeps_the_checked_fields():
    made = config([(0, "1 /a"), ("1M", "1 /a 1 /b")])
    other = made.with_random_seed(99)
    assert other.random_seed == 99 and made.random_seed == 1
    assert other.blend_schedule is made.blend_schedule and other.split == made.split
    for bad, match in ((-1, r"must be in \[0, 2\*\*32\)"), (2**32, "must be in"),
                       (1.0, "is not an integer"), (True, "is not an integer")):
        with pytest.raises(mdc.DataError, match=f"random_seed: .*{match}"):
            made.with_random_seed(bad)
