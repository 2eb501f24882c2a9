"""Split strings, split matrices, document ranges and blend sizes against megatron-core."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from megadata_core import DataError
from megadata_core.indices import splits


@pytest.fixture(scope="module")
def megatron_splits():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from megatron.core.datasets import blended_megatron_dataset_builder as builder
        from megatron.core.datasets import blended_megatron_dataset_config as config
        from megatron.core.datasets import utils
    return config, builder, utils


_PART = st.one_of(
    st.integers(0, 1000).map(str),
    st.floats(0, 100, allow_nan=False).map(lambda x: f"{x:.4f}".rstrip("0")),
    st.sampled_from(["0", "0.0", ".5", "1.", "969", "30", "1"]),
)


@settings(max_examples=300, deadline=None)
@given(
    parts=st.lists(_PART, min_size=1, max_size=3),
    separator=st.sampled_from([",", ", ", "/", " "]),
)
def test_parse_split_and_matrix_match_megatron(megatron_splits, parts, separator):
    config, _, _ = megatron_splits
    text = separator.join(parts)
    if sum(float(part) for part in parts) == 0:
        with pytest.raises(DataError, match="split"):
            splits.parse_split(text)
        return
    theirs = config.parse_and_normalize_split(text)
    ours = splits.parse_split(text)
    assert list(ours) == theirs  # bit-identical floats
    assert splits.split_matrix(ours) == config.convert_split_vector_to_split_matrix(theirs)


@pytest.mark.parametrize(
    ("text", "matrix"),
    [
        ("969,30,1", [(0, 0.969), (0.969, 0.999), (0.999, 1.0)]),
        ("98,2", [(0, 0.98), (0.98, 1.0), None]),
        ("0.9,0.1,0", [(0, 0.9), (0.9, 1.0), None]),
        ("1", [(0, 1.0), None, None]),
        ("0,1,0", [None, (0.0, 1.0), None]),
    ],
)
def test_known_matrices(text, matrix):
    ours = splits.split_matrix(splits.parse_split(text))
    assert len(ours) == 3
    for got, want in zip(ours, matrix):
        if want is None:
            assert got is None
        else:
            assert got == pytest.approx(want)


def test_document_ranges_round_as_megatron():
    matrix = splits.split_matrix(splits.parse_split("969,30,1"))
    assert splits.document_ranges(matrix, 1000) == [range(0, 969), range(969, 999),
                                                    range(999, 1000)]
    # Python's round: half to even (Megatron's int(round(x)))
    assert splits.document_ranges([(0.0, 0.5), (0.5, 1.0)], 5) == [range(0, 2), range(2, 5)]
    assert splits.document_ranges([None, (0.0, 1.0), None], 7) == [None, range(0, 7), None]
    for count in (0, 1, 3, 10, 199, 200, 1001):
        for text in ("969,30,1", "98,2", "1,1,1", "0.9,0.1,0", "7,2,1"):
            fractions = splits.parse_split(text)
            ranges = splits.document_ranges(splits.split_matrix(fractions), count)
            for bookend, documents in zip(splits.split_matrix(fractions), ranges):
                if bookend is None:
                    assert documents is None
                    continue
                assert documents.start == int(round(bookend[0] * float(count)))
                assert documents.stop == int(round(bookend[1] * float(count)))
            stops = [r.stop for r in ranges if r is not None]
            assert stops[-1] == count


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("", "1 to 3 numbers"),
        (",,", "1 to 3 numbers"),
        ("0,0,0", "positive"),
        ("1,2,3,4", "1 to 3 numbers"),
        ("98,-2", "negative"),
        ("-1", "negative"),
        ("1e-3,1", "not a list of numbers"),
        ("ninety,ten", "not a list of numbers"),
        ("1.2.3,1", "not a number"),
        (".", "not a number"),
        ("9" * 400, "finite"),
    ],
)
def test_bad_split_strings(text, why):
    with pytest.raises(DataError, match=f"split: .*{why}"):
        splits.parse_split(text)


def test_parse_split_not_a_string():
    with pytest.raises(DataError, match="split: "):
        splits.parse_split(None)


def test_normalize_weights_bit_identical(megatron_splits):
    _, _, utils = megatron_splits
    rng = np.random.default_rng(7)
    for count in (1, 2, 3, 7, 8, 9, 100, 1000, 3000):
        weights = (rng.random(count) * rng.choice([1e-3, 1, 1e3])).tolist()
        assert splits.normalize_weights(weights) == utils.normalize(weights)
    assert splits.normalize_weights([1, 2, 7]) == utils.normalize([1, 2, 7])


@pytest.mark.parametrize(
    "weights", [[0.5, -0.1], [float("nan"), 1.0], [0.0, 0.0], [float("inf")], [], ["x"]]
)
def test_bad_weights(weights):
    with pytest.raises(DataError, match="weights"):
        splits.normalize_weights(weights, "weights")


def test_a_zero_weight_is_allowed():
    assert splits.normalize_weights([0.0, 1.0, 3.0]) == [0.0, 0.25, 0.75]


def test_samples_per_dataset_match_megatron(megatron_splits):
    _, builder, utils = megatron_splits
    rng = np.random.default_rng(11)
    for _ in range(200):
        count = int(rng.integers(1, 6))
        weights = utils.normalize((rng.random(count) + 0.01).tolist())
        sizes = [int(x) for x in rng.integers(0, 10**int(rng.integers(1, 9)), 3)]
        surplus = float(rng.choice([0.0, 0.005, 0.1, 1.0]))
        theirs = builder._get_size_per_split_per_dataset(weights, sizes, surplus)
        assert splits.samples_per_dataset(weights, sizes, surplus) == theirs
        targets = builder._get_size_per_split_per_dataset(weights, sizes)
        assert splits.samples_per_dataset(weights, sizes) == targets
    # a None size (a split that is not built) stays None
    assert splits.samples_per_dataset([0.25, 0.75], [10, None, 3], 0.5) == [
        [math.ceil(3 * 1.5), None, 2],
        [math.ceil(8 * 1.5), None, 5],
    ]


def test_document_bounds_equal_document_ranges_for_every_job():
    rng = np.random.default_rng(4)
    counts = np.concatenate([rng.integers(0, 5000, 2000), [1, 2, 3, 4, 10, 1000, 2**40]])
    halves = [(0.0, 0.5), (0.5, 1.0), (0.25, 0.75), (0.125, 0.375)]  # .5 ties: half to even
    matrices = [splits.split_matrix(splits.parse_split(text)) for text in
                ("969,30,1", "98,2,0", "1,1,1", "33.3,33.3,33.4", "7,2,1")]
    bookends = [pair for matrix in matrices for pair in matrix if pair] + halves
    chosen = [bookends[i] for i in rng.integers(0, len(bookends), len(counts))]
    firsts, ends = splits.document_bounds(chosen, counts)
    expected = [splits.document_ranges([pair], int(n))[0] for pair, n in zip(chosen, counts)]
    assert firsts.tolist() == [r.start for r in expected]
    assert ends.tolist() == [r.stop for r in expected]
