"""Which labels are trained where a sample holds several documents.

best_fit (with or without ``packing_alignment``, with or without ``document_masking``)
trains no label that crosses into another document by default, whatever the lengths:
a packed document's neighbour is arbitrary. concat keeps Megatron 0.19's semantics (its
``inter_document_masking`` trains that label). ``mask_cross_document_labels`` overrides
either way. Every token names its document (token = document * STRIDE + offset + 1; pads
are 0), so a trained position's token and label must name the same document.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from corpora import write_corpus
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import megadata_core as mdc

STRIDE = 1 << 16
SETTINGS = settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


def _corpus(prefix: str, lengths: np.ndarray) -> mdc.IndexedDataset:
    document = np.repeat(np.arange(len(lengths)), lengths)
    offset = np.arange(int(lengths.sum())) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    tokens = document * STRIDE + offset + 1
    return mdc.IndexedDataset(write_corpus(prefix, lengths, tokens=tokens, dtype=np.int32))


def _batch(indexed, **options) -> dict[str, np.ndarray]:
    config = mdc.GPTDataConfig(random_seed=5, pad_id=0, **options)
    dataset = mdc.GPTDataset(indexed, np.arange(len(indexed)), None, config)
    return dataset.__getitems__(np.arange(len(dataset)))


def _crossing_trained(batch: dict[str, np.ndarray]) -> int:
    """Trained positions whose label is a real token of another document than the token's
    (a trained label on a pad is counted too: it must never happen)."""
    tokens = batch["tokens"].astype(np.int64)
    labels = batch["labels"].astype(np.int64)
    trained = batch["loss_mask"] > 0
    assert (tokens[trained] > 0).all()  # a pad is never trained on as input
    crossing = (tokens // STRIDE != labels // STRIDE) | (labels == 0)
    return int((trained & crossing).sum())


LENGTHS = st.lists(st.integers(1, 40), min_size=2, max_size=30)


@pytest.mark.parametrize("cp", [None, 1, 2, 4, 8])
@SETTINGS
@given(data=st.data())
def test_best_fit_trains_no_label_across_documents_by_default(tmp_path_factory, cp, data):
    lengths = np.array(data.draw(LENGTHS, label="lengths"))
    alignment = None if cp is None else 2 * cp
    unit = alignment or 1
    size = unit * data.draw(st.integers(1, max(1, 48 // unit)), label="units per sample")
    masking = True if alignment else data.draw(st.booleans(), label="document_masking")
    extra = True if alignment else data.draw(st.booleans(), label="extra token")
    indexed = _corpus(str(tmp_path_factory.mktemp("cross") / "corpus"), lengths)
    options = dict(sequence_length=size, packing="best_fit", document_masking=masking,
                   packing_alignment=alignment, add_extra_token_to_sequence=extra,
                   create_attention_mask=False)
    batch = _batch(indexed, **options)
    assert _crossing_trained(batch) == 0
    # the override trains them again: exactly the labels the default masks
    trained = _batch(indexed, mask_cross_document_labels=False, **options)
    difference = (trained["loss_mask"] > 0) & (batch["loss_mask"] == 0)
    tokens, labels = batch["tokens"].astype(np.int64), batch["labels"].astype(np.int64)
    crossing = (tokens // STRIDE != labels // STRIDE) & (labels > 0) & (tokens > 0)
    np.testing.assert_array_equal(difference, crossing)


@SETTINGS
@given(lengths=LENGTHS, size=st.integers(1, 48), masking=st.booleans())
def test_concat_keeps_megatron_semantics_unless_told(tmp_path_factory, lengths, size, masking):
    indexed = _corpus(str(tmp_path_factory.mktemp("concat") / "corpus"), np.array(lengths))
    options = dict(sequence_length=size, document_masking=masking, create_attention_mask=False)
    default = _batch(indexed, **options)
    explicit = _batch(indexed, mask_cross_document_labels=False, **options)
    for key in default:
        np.testing.assert_array_equal(default[key], explicit[key])
    assert (default["loss_mask"] == 1).all()  # Megatron trains every label of concat
    assert _crossing_trained(_batch(indexed, mask_cross_document_labels=True, **options)) == 0


def test_the_default_decides_by_packing():
    base = mdc.GPTDataConfig(random_seed=1, sequence_length=8)
    assert base.mask_cross_document_labels is None
    assert base.masks_cross_document_labels is False
    packed = dataclasses.replace(base, packing="best_fit")  # the default follows packing
    assert packed.masks_cross_document_labels is True
    told = dataclasses.replace(packed, mask_cross_document_labels=False)
    assert told.masks_cross_document_labels is False
    concat_told = dataclasses.replace(base, mask_cross_document_labels=True)
    assert concat_told.masks_cross_document_labels is True


def test_a_non_bool_override_is_rejected():
    with pytest.raises(mdc.DataError, match="mask_cross_document_labels: 'yes' is not a bool"):
        mdc.GPTDataConfig(random_seed=1, sequence_length=8, mask_cross_document_labels="yes")


def test_hand_example_best_fit(tmp_path):
    """Documents of 3 and 2 tokens in one sample of 8 (extra token): positions 0-1 and 3
    are trained; 2 (label: the next document's first token) and 4 on (label: pad) are not."""
    indexed = _corpus(str(tmp_path / "corpus"), np.array([3, 2]))
    batch = _batch(indexed, sequence_length=8, packing="best_fit", document_masking=True,
                   create_attention_mask=False)
    assert len(batch["tokens"]) == 1
    row = batch["loss_mask"][0].tolist()
    first = batch["tokens"][0, 0] // STRIDE
    assert row[:5] == [1, 1, 0, 1, 0] if first == 0 else row[:5] == [1, 0, 1, 1, 0]
    assert row[5:] == [0, 0, 0]
