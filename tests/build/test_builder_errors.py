"""build_datasets rejects bad input with a DataError naming the field."""

from __future__ import annotations

import os

import numpy as np
import pytest
from builder_oracle import ours_config
from gpt_oracle import write_corpus

import megadata_core as mdc
from megadata_core.build.builder import build_datasets


@pytest.fixture
def corpora(tmp_path):
    rng = np.random.default_rng(0)
    return [
        write_corpus(os.path.join(tmp_path, name), rng.integers(1, 40, 100), rng)
        for name in ("a", "b")
    ]


@pytest.mark.parametrize(
    ("sizes", "why"),
    [
        ([1, 2], "sizes: 2 entries"),
        ([1, 2, 3, 4], "sizes: 4 entries"),
        ("123", "sizes: '123' is not a sequence"),
        (None, "sizes: None is not a sequence"),
        ([1.5, None, None], r"sizes\[train\]: 1.5 is not an integer"),
        ([10, -1, None], r"sizes\[valid\]: -1 must be >= 0"),
        ([10, None, True], r"sizes\[test\]: True is not an integer"),
    ],
)
def test_bad_sizes(corpora, sizes, why):
    config = ours_config(random_seed=1, sequence_length=8, blend=(corpora[:1], None), split="1")
    with pytest.raises(mdc.DataError, match=why):
        build_datasets(config, sizes)


def test_neither_blend_nor_mock():
    config = mdc.GPTDataConfig(random_seed=1, sequence_length=8)
    with pytest.raises(mdc.DataError, match="blend: none of blend, blend_per_split and"):
        build_datasets(config, [1, 1, 1])


def test_mock_with_a_blend(corpora):
    config = ours_config(random_seed=1, sequence_length=8, blend=(corpora, None), split="1")
    with pytest.raises(mdc.DataError, match="mock: mock data takes no blend"):
        build_datasets(config, [1, 1, 1], mock=True, vocab_size=10)


def test_mock_needs_vocab_and_eod():
    with pytest.raises(mdc.DataError, match="vocab_size"):
        build_datasets(mdc.GPTDataConfig(random_seed=1, sequence_length=8, eod_id=0), [1, 1, 1],
                       mock=True)
    with pytest.raises(mdc.DataError, match="eod_id"):
        build_datasets(mdc.GPTDataConfig(random_seed=1, sequence_length=8), [1, 1, 1],
                       mock=True, vocab_size=10)


@pytest.mark.parametrize("eod_id", [500, 100, -1])
def test_mock_eod_outside_the_vocabulary(eod_id):
    config = mdc.GPTDataConfig(random_seed=1, sequence_length=8, eod_id=eod_id)
    with pytest.raises(mdc.DataError, match=f"eod_id: {eod_id} is not a token of vocab_size 100"):
        build_datasets(config, [1, 1, 1], mock=True, vocab_size=100)


def test_both_blend_and_blend_per_split(corpora):
    with pytest.raises(mdc.DataError, match="blend: blend and blend_per_split"):
        ours_config(random_seed=1, sequence_length=8, blend=(corpora, None),
                    blend_per_split=[(corpora, None), None, None])


def test_missing_prefix_is_named(corpora, tmp_path):
    missing = str(tmp_path / "nowhere" / "corpus")
    config = ours_config(random_seed=1, sequence_length=8, blend=([corpora[0], missing], None),
                         split="1")
    with pytest.raises(mdc.DataError, match=f"blend: dataset prefix '{missing}' cannot be opened"):
        build_datasets(config, [10, None, None])
    config = ours_config(random_seed=1, sequence_length=8,
                         blend_per_split=[(corpora, None), ([missing], None), None])
    with pytest.raises(mdc.DataError, match=r"blend_per_split\[valid\]: dataset prefix"):
        build_datasets(config, [10, None, None])


def test_weights_need_a_size(corpora):
    config = ours_config(random_seed=1, sequence_length=8, blend=(corpora, [1, 2]), split="9,1")
    with pytest.raises(mdc.DataError, match=r"sizes\[valid\]: None, but blend has weights.*"
                                            r"ceil\(size \* weight\)"):
        build_datasets(config, [10, None, None])
    config = ours_config(random_seed=1, sequence_length=8,
                         blend_per_split=[(corpora, [1, 2]), None, None])
    with pytest.raises(mdc.DataError, match=r"sizes\[train\]: None, but blend_per_split\[train\]"):
        build_datasets(config, [None, 5, 5])


@pytest.mark.parametrize(
    ("blend", "why"),
    [
        (("a", "b"), "prefixes 'a' must be a non-empty list"),
        ((["a", "b"], [1.0, -1.0]), "weight 1 is -1.0"),
        ((["a", "b"], [0.0, 0.0]), "every weight is 0"),
        ((["a", "b"], [float("nan"), 1.0]), "weight 0 is nan"),
        ((["a", "b"], [1.0]), "2 prefixes but 1 weights"),
    ],
)
def test_bad_blends(blend, why):
    with pytest.raises(mdc.DataError, match=f"blend.*{why}"):
        mdc.GPTDataConfig(random_seed=1, sequence_length=8, blend=blend, split="1")


@pytest.mark.parametrize("split", ["0,0,0", "1,2,3,4", "98,-2", "a,b", "1..2"])
def test_bad_split(split, corpora):
    with pytest.raises(mdc.DataError, match="split: "):
        mdc.GPTDataConfig(random_seed=1, sequence_length=8, blend=(corpora, None), split=split)


def test_full_validation_needs_no_valid_size(corpora):
    config = ours_config(random_seed=1, sequence_length=8, multiple_validation_sets=True,
                         full_validation=True,
                         blend_per_split=[(corpora[:1], None), (corpora, None), None])
    with pytest.raises(mdc.DataError, match=r"sizes\[valid\]: 7, but full_validation"):
        build_datasets(config, [10, 7, None])


def test_empty_split_names_the_prefix(tmp_path):
    # megatron-core loops forever here (no tokens, samples wanted); we raise
    rng = np.random.default_rng(1)
    prefix = write_corpus(str(tmp_path / "tiny"), rng.integers(1, 40, 20), rng)
    config = ours_config(random_seed=1, sequence_length=8, blend=([prefix], None),
                         split="99,1")
    with pytest.raises(mdc.DataError, match=r"blend: dataset prefix .*tiny' \(valid split"):
        build_datasets(config, [10, 10, None])


def test_bad_max_workers(corpora):
    config = ours_config(random_seed=1, sequence_length=8, blend=(corpora[:1], None), split="1")
    with pytest.raises(mdc.DataError, match="max_workers"):
        build_datasets(config, [1, None, None], max_workers=0)
    with pytest.raises(mdc.DataError, match="config: expected GPTDataConfig"):
        build_datasets({"blend": None}, [1, None, None])
