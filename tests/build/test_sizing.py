"""The build's sizing from a corpus's lengths alone: every member's documents, epochs and
samples equal what the built GPTDataset holds (any shuffle, packing, split, sizes), and
an empty split fails with the index build's own error."""

from __future__ import annotations

import os

import numpy as np
import pytest
from gpt_oracle import write_corpus
from hypothesis import given, settings
from hypothesis import strategies as st

import megadata_core as mdc
from megadata_core.build import Job, member_size
from megadata_core.build.plan import index_entries, member_documents


@settings(max_examples=30, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 50), min_size=3, max_size=40),
    sequence_length=st.integers(1, 20),
    num_samples=st.one_of(st.none(), st.integers(0, 80)),
    split=st.sampled_from(["train", "valid", "test"]),
    bookend=st.sampled_from([(0.0, 1.0), (0.0, 0.5), (0.5, 1.0)]),
    packing=st.sampled_from(["concat", "best_fit"]),
    shuffle=st.sampled_from(["megatron", "feistel"]),
    extra=st.booleans(),
    drop_last=st.booleans(),
)
def test_member_size_is_what_the_dataset_holds(
    tmp_path_factory, lengths, sequence_length, num_samples, split, bookend, packing, shuffle,
    extra, drop_last,
):
    directory = tmp_path_factory.mktemp("sizing")
    prefix = write_corpus(os.path.join(directory, "c"), lengths, np.random.default_rng(0))
    corpus = mdc.IndexedDataset(prefix)
    config = mdc.GPTDataConfig(
        random_seed=1, sequence_length=sequence_length, eod_id=3, packing=packing,
        shuffle=shuffle, add_extra_token_to_sequence=extra,
        drop_last_partial_validation_sequence=drop_last,
    )
    job = Job(prefix, split, bookend, num_samples)
    documents = member_documents(job, len(corpus))
    try:
        built = mdc.GPTDataset(corpus, documents, num_samples, config, split)
    except mdc.DataError as error:
        with pytest.raises(mdc.DataError) as planned:
            member_size(corpus.sequence_lengths, job, config)
        assert str(planned.value) == str(error)
        return
    size = member_size(corpus.sequence_lengths, job, config)
    assert (size.documents, size.samples, size.epochs) == (
        len(documents), len(built), built.epochs if len(documents) else 0
    )
    if packing == "concat" and len(documents):
        entries = index_entries(corpus, job, config)
        assert entries == max(len(built.document_index), size.epochs * size.tokens
                              // sequence_length)
