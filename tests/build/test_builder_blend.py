"""PARITY: build_datasets against megatron-core's BlendedMegatronDatasetBuilder on random
blends of small corpora (2-5 prefixes, random weights or none, random split strings,
random sizes including None, blend_per_split, multiple validation sets, single prefix).
Every split's kind and length, every member's length, the blend's dataset_index and
dataset_sample_index (blend_order="megatron") and a few samples' values are equal."""

from __future__ import annotations

import os

import numpy as np
import pytest
from builder_oracle import assert_same_split, megatron_build, ours_build
from gpt_oracle import write_corpus

import megadata_core as mdc

CASES = 40


def _split(rng: np.random.Generator) -> str:
    """A split string: 1-3 parts, train large, the others 0 or >= 5% (each split keeps
    enough documents: megatron-core loops forever on a split without tokens)."""
    count = int(rng.integers(1, 4))
    parts = [float(rng.integers(60, 100))] + [
        0.0 if rng.random() < 0.3 else float(rng.integers(5, 30)) for _ in range(count - 1)
    ]
    if rng.random() < 0.3:  # fractions, as "0.9,0.1,0"
        total = sum(parts)
        return ",".join(f"{part / total:.3f}".rstrip("0").rstrip(".") or "0" for part in parts)
    return rng.choice([",", ", ", "/"]).join(str(int(part)) for part in parts)


def _weights(rng: np.random.Generator, count: int) -> list[float] | None:
    if rng.random() < 0.35:
        return None
    return (rng.random(count) * float(rng.choice([1.0, 10.0, 100.0])) + 0.05).tolist()


def _size(rng: np.random.Generator, allow_none: bool) -> int | None:
    if allow_none and rng.random() < 0.3:
        return None
    return int(rng.integers(0, 600)) if rng.random() < 0.9 else 0


def _blend_case(rng, prefixes) -> tuple[dict, list]:
    count = int(rng.integers(1, len(prefixes) + 1))
    chosen = [prefixes[i] for i in rng.permutation(len(prefixes))[:count]]
    weights = _weights(rng, count)
    if count == 1 and weights is None and rng.random() < 0.5:
        weights = [float(rng.random() + 0.1)]  # a single weighted prefix: a blend of one
    sizes = [_size(rng, weights is None) for _ in range(3)]
    return {"blend": (chosen, weights), "split": _split(rng)}, sizes


def _per_split_case(rng, prefixes) -> tuple[dict, list]:
    blends, sizes = [], []
    multiple = bool(rng.random() < 0.3)
    for position in range(3):
        if position > 0 and rng.random() < 0.25:
            blends.append(None)
            sizes.append(_size(rng, True))
            continue
        count = int(rng.integers(1, len(prefixes) + 1))
        chosen = [prefixes[i] for i in rng.permutation(len(prefixes))[:count]]
        weights = _weights(rng, count)
        blends.append((chosen, weights))
        weighted = weights is not None and count > 1 and not (multiple and position == 1)
        sizes.append(_size(rng, not weighted))
    full = multiple and sizes[1] is None and bool(rng.random() < 0.5)
    kw = {"blend_per_split": blends, "multiple_validation_sets": multiple, "full_validation": full}
    return kw, sizes


def _without_unused_weights(kw: dict, sizes: list) -> dict:
    """Where our builder accepts a None size because the weights are unused (a single
    prefix of blend_per_split, the multiple validation sets), megatron-core asserts
    anyway: give it the same blend without those weights (its result is the same)."""
    blends = kw.get("blend_per_split")
    if blends is None:
        return kw
    blends = [
        None if blend is None
        else (blend[0], None) if size is None and (
            len(blend[0]) == 1 or (kw["multiple_validation_sets"] and position == 1))
        else blend
        for position, (blend, size) in enumerate(zip(blends, sizes))
    ]
    return {**kw, "blend_per_split": blends}


@pytest.fixture(scope="module")
def corpora(tmp_path_factory):
    directory = tmp_path_factory.mktemp("corpora")
    rng = np.random.default_rng(2024)
    return [
        write_corpus(os.path.join(directory, f"corpus{number}"),
                     rng.integers(0, 50, int(rng.integers(150, 400))), rng)
        for number in range(5)
    ]


@pytest.mark.parametrize("case", range(CASES))
def test_random_blends_match_megatron(corpora, case):
    rng = np.random.default_rng(7000 + case)
    prefixes = corpora[: int(rng.integers(2, 6))]
    if case % 3 == 2:
        kw, sizes = _per_split_case(rng, prefixes)
    else:
        kw, sizes = _blend_case(rng, prefixes)
    kw.update(
        random_seed=int(rng.integers(0, 2**31)),
        sequence_length=int(rng.choice([8, 16, 24])),
        mid_level_dataset_surplus=float(rng.choice([0.005, 0.05, 0.5])),
        drop_last_partial_validation_sequence=bool(rng.random() < 0.5),
        add_extra_token_to_sequence=bool(rng.random() < 0.8),
    )
    try:
        theirs = megatron_build(sizes, **_without_unused_weights(kw, sizes))
    except (AssertionError, IndexError, ValueError, RuntimeError) as error:
        # megatron rejects it (e.g. a blend oversampling a dataset): so must we
        with pytest.raises(mdc.DataError):
            ours_build(sizes, **kw)
        pytest.skip(f"megatron rejects this case too: {type(error).__name__}")
    ours = ours_build(sizes, **kw)
    for mine, reference in zip(ours, theirs):
        assert_same_split(reference, mine, rng)
    balanced = ours_build(sizes, blend_order="balanced", **kw)  # our default order
    for mine, reference in zip(balanced, theirs):
        if reference is not None and not isinstance(reference, list):
            assert len(mine) == len(reference)


def test_weighted_blend_size_exceeds_the_request(corpora):
    """The blend holds sum_j ceil(size * w_j) samples (more than asked), and member j is
    built for ceil(ceil(size * w_j) * (1 + surplus)) samples, as in megatron-core."""
    kw = dict(random_seed=1, sequence_length=16, blend=(corpora[:3], [1.0, 1.0, 1.0]),
              split="1", mid_level_dataset_surplus=0.005)
    sizes = [100, None, None]
    ours = ours_build(sizes, **kw)
    assert len(ours[0]) == 3 * 34  # ceil(100 / 3) = 34 each
    assert [dataset.num_samples for dataset in ours[0].datasets] == [35, 35, 35]
    theirs = megatron_build([100, 0, 0], **kw)  # megatron wants a size even for no split
    assert len(theirs[0]) == len(ours[0]) and ours[1] is None and ours[2] is None
    np.testing.assert_array_equal(ours[0].dataset_index, theirs[0].dataset_index)


def test_unweighted_blend_exhaustive_and_capped(corpora):
    rng = np.random.default_rng(3)
    for sizes in ([None, None, None], [50, 7, None]):
        kw = dict(random_seed=2, sequence_length=16, blend=(corpora[:3], None), split="8,2")
        theirs = megatron_build(sizes, **kw)
        ours = ours_build(sizes, **kw)
        for mine, reference in zip(ours, theirs):
            assert_same_split(reference, mine, rng)
        assert all(dataset.num_samples is None for dataset in ours[0].datasets)
    assert len(ours[0]) == 50


def test_multiple_validation_sets(corpora):
    rng = np.random.default_rng(4)
    kw = dict(random_seed=5, sequence_length=8, multiple_validation_sets=True,
              full_validation=True,
              blend_per_split=[(corpora[:2], [0.4, 0.6]), (corpora[1:4], [1.0, 2.0, 3.0]), None])
    sizes = [200, None, None]
    theirs = megatron_build(sizes, **_without_unused_weights(kw, sizes))
    ours = ours_build(sizes, **kw)
    assert isinstance(ours[1], list) and len(ours[1]) == 3
    for mine, reference in zip(ours, theirs):
        assert_same_split(reference, mine, rng)


def test_each_prefix_opened_once(corpora):
    kw = dict(random_seed=5, sequence_length=8,
              blend_per_split=[(corpora[:3], [1, 2, 3]), (corpora[:2], None), (corpora[2:3], None)])
    ours = ours_build([100, 20, None], **kw)
    by_prefix = {}
    members = list(ours[0].datasets) + list(ours[1].datasets) + [ours[2]]
    for dataset in members:
        by_prefix.setdefault(dataset.indexed.path_prefix, set()).add(id(dataset.indexed))
    assert all(len(ids) == 1 for ids in by_prefix.values())
    assert len(by_prefix) == 3


def test_a_zero_weight_prefix_is_never_read(corpora):
    """Megatron asserts every weight > 0; ours builds the blend of the other prefixes."""
    kw = dict(random_seed=3, sequence_length=16, split="9,1")
    sizes = [300, 30, 0]
    ours = ours_build(sizes, blend=(corpora[:3], [0.0, 1.0, 2.0]), **kw)
    theirs = megatron_build(sizes, blend=(corpora[1:3], [1.0, 2.0]), **kw)
    for mine, reference in zip(ours[:2], theirs[:2]):
        assert len(mine) == len(reference)
        np.testing.assert_array_equal(mine.dataset_index, reference.dataset_index + 1)
        np.testing.assert_array_equal(mine.dataset_sample_index, reference.dataset_sample_index)
