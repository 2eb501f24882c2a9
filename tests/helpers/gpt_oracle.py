"""Helpers shared by the dataset tests: corpora, the megadata side, comparisons."""

from __future__ import annotations

import functools
import warnings

import corpora
import numpy as np

import megadata_core as mdc


class OracleTokenizer:
    """What megatron's GPTDataset reads from a tokenizer: eod, pad (optional), vocab_size
    and unique_identifiers (for its cache description)."""

    def __init__(self, eod: int, pad: int | None = None, vocab_size: int = 1000) -> None:
        self.eod = eod
        self.vocab_size = vocab_size
        if pad is not None:
            self.pad = pad
        self.unique_identifiers = {"class": "OracleTokenizer", "eod": eod, "pad": pad}


#: The oracle tests' corpus (:func:`corpora.write_corpus`): tokens in ``[0, vocab)``, EOD 3
#: sprinkled (5%) and ending each sequence, every sequence in one document.
write_corpus = functools.partial(corpora.write_corpus, eod=3, eod_rate=0.05, one_document=True)


def ours_dataset(prefix, num_samples, split, *, eod, pad=None, indices=None, mmap=True, **kw):
    """megadata's GPTDataset with the same arguments as the oracle builder."""
    indexed = mdc.IndexedDataset(prefix, mmap=mmap)
    if indices is None:
        indices = np.arange(len(indexed))
    config = mdc.GPTDataConfig(eod_id=eod, pad_id=-1 if pad is None else pad, **kw)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the pad == eod warning, checked elsewhere
        return mdc.GPTDataset(indexed, indices, num_samples, config, split)


def megatron_sample(theirs, index: int) -> dict:
    """``theirs[index]`` as a fresh megatron-core dataset would return it.

    megatron-core 0.16.1 caches the loss mask of the first sample it serves when the
    masks are cacheable, and then zeroes that sample's pad positions in the cached tensor
    itself (``loss_mask[labels == pad] = 0`` runs on the object it just cached; later calls
    clone it). If the first sample served is a padded partial one, every later sample's
    loss mask keeps those zeros: its values depend on the order of access. Dropping the
    cache before each call asks for the order-independent values, which are ours.
    """
    members = getattr(theirs, "datasets", [theirs])
    for dataset in members:
        if hasattr(dataset, "masks_and_position_ids_are_cached"):
            dataset.masks_and_position_ids_are_cached = False
    return theirs[index]


def assert_same_samples(theirs, ours, limit: int | None = None) -> None:
    """Every key of every sample equal (values; dtypes may differ), and the batched
    ``__getitems__`` equal to the per-sample results."""
    assert len(ours) == len(theirs)
    count = len(ours) if limit is None else min(limit, len(ours))
    batch = ours.__getitems__(np.arange(count))
    for i in range(count):
        reference = {key: value.numpy() for key, value in megatron_sample(theirs, i).items()}
        mine = ours[i]
        assert list(mine) == list(reference), (list(mine), list(reference))
        for key, value in reference.items():
            assert mine[key].shape == value.shape, (key, i)
            np.testing.assert_array_equal(mine[key], value, err_msg=f"{key} of sample {i}")
            np.testing.assert_array_equal(batch[key][i], mine[key], err_msg=f"batched {key}")
