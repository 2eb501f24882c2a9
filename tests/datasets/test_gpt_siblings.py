"""GPTDataset._siblings: many members made at once hold exactly what a full GPTDataset
over the same corpus and arrays holds; bad spans and arrays still raise DataError."""

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


def test_siblings_equal_full_datasets(workdir):
    config, corpora, spans, wanted, arrays = _members(workdir)
    template = mdc.GPTDataset(corpora[0], spans[0], wanted[0], config, arrays=arrays[0])
    made = template._siblings(corpora[1:], spans[1:], wanted[1:], arrays[1:])
    for dataset, corpus, span, samples, given in zip(made, corpora[1:], spans[1:], wanted[1:],
                                                     arrays[1:]):  # fmt: skip
        full = mdc.GPTDataset(corpus, span, samples, config, arrays=given)
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
        template._siblings(corpora[1:], [spans[1], range(0, len(corpora[2]) + 1)],
                           wanted[1:], arrays[1:])  # fmt: skip
    short = dict(arrays[2], shuffle_index=arrays[2]["shuffle_index"][:-1])
    with pytest.raises(mdc.DataError, match="shuffle_index"):
        template._siblings(corpora[1:], spans[1:], wanted[1:], [arrays[1], short])
