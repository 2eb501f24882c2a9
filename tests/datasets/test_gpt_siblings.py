"""GPTDataset.siblings: many members made at once (of any split) hold exactly what a full
GPTDataset over the same corpus, split and arrays holds; bad spans and arrays still raise
DataError."""

from __future__ import annotations

import os

import numpy as np
import pytest
from builder_oracle import ours_config
from gpt_oracle import write_corpus

import megadata_core as mdc
from megadata_core.indices import gpt_indices

NAMES = ("document_index", "sample_index", "shuffle_index")


def _members(workdir, count=5):
    rng = np.random.default_rng(3)
    config = ours_config(sequence_length=16, random_seed=5)
    corpora, spans, wanted, arrays = [], [], [], []
    for number in range(count):
        prefix = os.path.join(workdir, f"c{number}")
        write_corpus(prefix, rng.integers(1, 40, int(rng.integers(20, 60))), rng)
        corpus = mdc.IndexedDataset(prefix)
        span = range(1, len(corpus) - 2)
        samples = [None, 7, 30][number % 3]
        lengths = np.asarray(corpus.sequence_lengths)
        corpora.append(corpus)
        spans.append(span)
        wanted.append(samples)
        arrays.append(dict(zip(NAMES, gpt_indices(lengths, span, 16, samples, 5))))
    return config, corpora, spans, wanted, arrays


def _state(dataset):
    return {name: value for name, value in vars(dataset).items() if name != "indexed"}


SPLITS = ["valid", "train", "test", "valid"]


@pytest.mark.parametrize("splits", [None, SPLITS], ids=["one split", "every split"])
def test_siblings_equal_full_datasets(workdir, splits):
    config, corpora, spans, wanted, arrays = _members(workdir)
    template = mdc.GPTDataset(corpora[0], spans[0], wanted[0], config, arrays=arrays[0])
    made = template.siblings(corpora[1:], spans[1:], wanted[1:], arrays[1:], splits=splits)
    for dataset, corpus, span, samples, given, split in zip(
        made, corpora[1:], spans[1:], wanted[1:], arrays[1:], splits or ["train"] * 4
    ):
        full = mdc.GPTDataset(corpus, span, samples, config, split, arrays=given)
        assert dataset.indexed is corpus
        mine, theirs = _state(dataset), _state(full)
        assert mine.keys() == theirs.keys()
        for name, value in theirs.items():
            if isinstance(value, np.ndarray):
                np.testing.assert_array_equal(mine[name], value, err_msg=name)
            else:
                assert mine[name] == value, name
        np.testing.assert_array_equal(dataset[3]["tokens"], full[3]["tokens"])


def test_siblings_keep_the_checks(workdir):
    config, corpora, spans, wanted, arrays = _members(workdir, 3)
    template = mdc.GPTDataset(corpora[0], spans[0], wanted[0], config, arrays=arrays[0])
    with pytest.raises(mdc.DataError, match="out of range"):
        template.siblings(corpora[1:], [spans[1], range(0, len(corpora[2]) + 1)],
                           wanted[1:], arrays[1:])  # fmt: skip
    short = dict(arrays[2], shuffle_index=arrays[2]["shuffle_index"][:-1])
    with pytest.raises(mdc.DataError, match="shuffle_index"):
        template.siblings(corpora[1:], spans[1:], wanted[1:], [arrays[1], short])


def test_siblings_of_other_arrays_are_made_one_by_one(workdir):
    """Arrays the fast path does not take (here Feistel's) give full datasets of the
    asked split, named origin included."""
    config, corpora, spans, wanted, _ = _members(workdir, 3)
    config = ours_config(sequence_length=16, random_seed=5, shuffle="feistel")
    full = [mdc.GPTDataset(c, s, n, config, split) for c, s, n, split in
            zip(corpora, spans, wanted, ["train", "valid", "test"])]
    made = full[0].siblings(corpora[1:], spans[1:], wanted[1:],
                            [d.index_arrays for d in full[1:]], "bundle X", ["valid", "test"])
    for dataset, reference in zip(made, full[1:]):
        assert dataset.split == reference.split and len(dataset) == len(reference)
        assert dataset._entry == "bundle X"
        np.testing.assert_array_equal(dataset[1]["tokens"], reference[1]["tokens"])
