"""GPTDataset.sample_text, the core's one-sample read: Megatron's
``_query_document_sample_shuffle_indices`` value for value (megatron-core 0.16.1 as the
oracle), the same from a memory-mapped corpus (scalar steps) and through the batched read
(pread), and index values out of range as DataErrors naming the array and its source."""

from __future__ import annotations

import os
import warnings

import numpy as np
import pytest
from gpt_oracle import ours_dataset, write_corpus
from hypothesis import example, given, reject, settings
from hypothesis import strategies as st

import megadata_core as mdc
from megadata_core.datasets import reading
from megadata_core.modes.concat import one_sample


@settings(max_examples=25, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 40), min_size=1, max_size=30),
    sequence_length=st.integers(1, 24),
    extra=st.booleans(),
    drop_last=st.booleans(),
    num_samples=st.integers(1, 60),
    seed=st.integers(0, 2**16),
)
@example(lengths=[0, 5, 0, 0, 3, 0, 6], sequence_length=4, extra=True, drop_last=False,
         num_samples=3, seed=1)  # empty documents inside samples, a partial last one
def test_sample_text_is_megatrons_query(
    megatron_gpt_dataset, lengths, sequence_length, extra, drop_last, num_samples, seed
):
    if sum(lengths) == 0:
        lengths = [*lengths[:-1], 1]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import tempfile

        with tempfile.TemporaryDirectory() as directory:
            os.makedirs(os.path.join(directory, "cache"))
            prefix = write_corpus(os.path.join(directory, "c"), lengths,
                                  np.random.default_rng(seed))
            options = dict(
                random_seed=seed, sequence_length=sequence_length,
                add_extra_token_to_sequence=extra,
                drop_last_partial_validation_sequence=drop_last,
                reset_position_ids=False, reset_attention_mask=False, eod_mask_loss=False,
            )
            try:
                theirs = megatron_gpt_dataset(prefix, num_samples, "valid",
                                              os.path.join(directory, "cache"), eod=3, **options)
            except AssertionError:  # megatron's own sanity check (a partial last sample
                reject()  # ending on an empty document): no oracle to compare with
            mapped = ours_dataset(prefix, num_samples, "valid", eod=3, **options)
            pread = ours_dataset(prefix, num_samples, "valid", eod=3, mmap=False, **options)
            assert len(mapped) == len(theirs)
            for index in range(len(theirs)):
                text, documents = theirs._query_document_sample_shuffle_indices(index)
                for ours in (mapped, pread):
                    sample = ours.sample_text(index)
                    np.testing.assert_array_equal(sample.tokens, text, err_msg=str(index))
                    np.testing.assert_array_equal(sample.documents, documents)
                    assert int(sample.lengths.sum()) <= len(text)
                    assert sample.padded == (int(sample.lengths.sum()) < len(text))


def _dataset(tmp_path, **changes):
    prefix = write_corpus(str(tmp_path / "c"), [7, 0, 9, 30, 4, 12], np.random.default_rng(1))
    config = mdc.GPTDataConfig(random_seed=2, sequence_length=8, eod_id=3, **changes)
    return mdc.GPTDataset(mdc.IndexedDataset(prefix), range(6), 10, config)


def test_sample_text_reads_the_batch_values_and_counts_from_the_end(tmp_path):
    dataset = _dataset(tmp_path)
    batch = dataset.__getitems__(np.arange(len(dataset)))
    for index in range(len(dataset)):
        text = dataset.sample_text(index).tokens
        np.testing.assert_array_equal(text[:-1], batch["tokens"][index])
    np.testing.assert_array_equal(dataset.sample_text(-1).tokens,
                                  dataset.sample_text(len(dataset) - 1).tokens)
    with pytest.raises(IndexError, match="out of range"):
        dataset.sample_text(len(dataset))
    with pytest.raises(TypeError):
        dataset.sample_text(1.0)


def test_sample_texts_is_sample_text_for_a_batch(tmp_path):
    dataset = _dataset(tmp_path)
    rng = np.random.default_rng(3)
    indices = rng.integers(-len(dataset), len(dataset), size=40)
    texts = dataset.sample_texts(indices)
    assert texts.shape == (40, dataset.config.sequence_length + 1)
    for row, index in zip(texts, indices.tolist()):
        np.testing.assert_array_equal(row, dataset.sample_text(index).tokens)
    again = dataset.sample_texts(indices[::-1])  # the first batch's array stays as it was
    np.testing.assert_array_equal(again[::-1], texts)
    with pytest.raises(IndexError, match="out of range"):
        dataset.sample_texts([0, len(dataset)])


@pytest.mark.parametrize(
    ("array", "row", "value", "match"),
    [
        ("shuffle_index", 0, 10_000, r"shuffle_index: sample row 10000 is out of range"),
        ("sample_index", 1, (0, 0), r"sample_index: rows are not increasing"),
        ("sample_index", 1, (99, 0), r"sample_index: document_index position 99"),
        ("sample_index", 0, (0, 500), r"sample_index: an offset lies past the end"),
        ("document_index", 0, 77, r"document_index: document id 77 is out of range"),
    ],
)
def test_values_out_of_range_are_data_errors_naming_the_array(tmp_path, array, row, value,
                                                              match):
    dataset = _dataset(tmp_path)
    arrays = {name: np.array(values) for name, values in dataset.index_arrays.items()}
    if array == "shuffle_index":
        arrays[array] = arrays[array].astype(np.int64)
        arrays[array][:] = value
    elif array == "sample_index":
        arrays[array][arrays["shuffle_index"][0] + row] = value
    else:
        arrays[array][:] = value
    broken = mdc.GPTDataset(dataset.indexed, range(6), 10, dataset.config, arrays=arrays,
                            origin="a test")
    with pytest.raises(mdc.DataError, match=match + r".*\(in a test\)"):
        broken.sample_text(0)
    with pytest.raises(mdc.DataError, match=match.split(":")[0]):
        broken.__getitems__([0])  # the batched read says the same array


def test_one_sample_reads_a_computed_document_index(tmp_path):
    """Feistel's document order is computed, not an array: the scalar read asks it for
    the sample's positions."""
    dataset = _dataset(tmp_path, shuffle="feistel")
    flat = reading.flat_tokens(dataset.indexed)
    for index in range(len(dataset)):
        row = int(dataset.shuffle_index[index])
        tokens, documents, lengths = one_sample(
            flat, dataset.indexed.sequence_pointers, dataset.sample_index,
            dataset.document_index, dataset.indexed.sequence_lengths, row, 1,
        )
        assert len(tokens) == int(lengths.sum())
        np.testing.assert_array_equal(dataset.sample_text(index).tokens[: len(tokens)], tokens)
