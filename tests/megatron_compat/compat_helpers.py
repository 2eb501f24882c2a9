"""Helpers of the compat tests: the same calls to megatron-core and to
megadata_adapters.trainers.megatron_datasets, side by side in one process (install() is not used
here)."""

from __future__ import annotations

import importlib
import logging
import os
import warnings

import numpy as np
import torch
from corpora import write_corpus

EOD = 3
VOCAB = 50
FLAGS = dict(reset_position_ids=False, reset_attention_mask=False, eod_mask_loss=False)


class Tokenizer:
    """What Megatron's datasets read from a tokenizer."""

    def __init__(self, eod: int = EOD, vocab_size: int = VOCAB) -> None:
        self.eod = eod
        self.vocab_size = vocab_size
        self.unique_identifiers = {"class": "Tokenizer", "eod": eod, "vocab_size": vocab_size}


def theirs(module: str):
    """megatron-core's ``megatron.core.datasets.<module>``."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loaded = importlib.import_module(f"megatron.core.datasets.{module}")
    logging.getLogger("megatron").setLevel(logging.ERROR)
    torch.set_num_threads(1)
    return loaded


def ours(module: str):
    """megadata_adapters.trainers.megatron_datasets.<module>."""
    return importlib.import_module(f"megadata_adapters.trainers.megatron_datasets.{module}")


def build(side, cls_name: str, sizes, **config):
    """``BlendedMegatronDatasetBuilder(cls, sizes, lambda: True, GPTDatasetConfig(...))``
    on ``side`` (:func:`theirs` or :func:`ours`)."""
    gpt = side("gpt_dataset")
    builder = side("blended_megatron_dataset_builder").BlendedMegatronDatasetBuilder
    cfg = gpt.GPTDatasetConfig(tokenizer=Tokenizer(), **{**FLAGS, **config})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return builder(getattr(gpt, cls_name), sizes, lambda: True, cfg).build()


def fresh_sample(dataset, index):
    """``dataset[index]`` as a fresh megatron-core dataset returns it (it caches the first
    sample's loss mask and then edits it; megadata's values are order-independent)."""
    for member in getattr(dataset, "datasets", [dataset]):
        if hasattr(member, "masks_and_position_ids_are_cached"):
            member.masks_and_position_ids_are_cached = False
    return dataset[index]


def assert_same_sample(a: dict, b: dict) -> None:
    """Same keys in the same order, same dtypes, same values."""
    assert list(a) == list(b)
    for key in a:
        left, right = a[key], b[key]
        if torch.is_tensor(left):
            assert torch.is_tensor(right) and left.dtype == right.dtype, key
            assert torch.equal(left, right), key
        else:
            assert np.array_equal(np.asarray(left), np.asarray(right)), key


def assert_same_dataset(a, b, rng: np.random.Generator, samples: int = 4) -> None:
    """Same class name, length, indices and sampled values (blends: and their members)."""
    assert (a is None) == (b is None)
    if a is None:
        return
    if isinstance(a, list):
        assert isinstance(b, list) and len(a) == len(b)
        for left, right in zip(a, b):
            assert_same_dataset(left, right, rng, samples)
        return
    assert type(a).__name__ == type(b).__name__
    assert len(a) == len(b)
    if hasattr(a, "dataset_index"):
        assert np.array_equal(a.dataset_index, b.dataset_index)
        assert np.array_equal(a.dataset_sample_index, b.dataset_sample_index)
        assert np.asarray(a.dataset_index).dtype == np.asarray(b.dataset_index).dtype
        assert a.weights == b.weights and a.size == b.size
        for left, right in zip(a.datasets, b.datasets):
            assert_same_dataset(left, right, rng, 2)
    else:
        for name in ("document_index", "sample_index", "shuffle_index"):
            assert np.array_equal(getattr(a, name), getattr(b, name)), name
        assert np.array_equal(a.indices, b.indices) and a.num_samples == b.num_samples
        assert a.index_split == b.index_split or a.index_split.name == b.index_split.name
    if len(a):
        for index in {0, len(a) - 1, *rng.integers(0, len(a), samples).tolist()}:
            assert_same_sample(fresh_sample(a, index), b[index])


def make_corpora(directory, count: int, documents=(20, 60), seed: int = 0) -> list[str]:
    """Prefixes of ``count`` fresh small corpora in ``directory``."""
    rng = np.random.default_rng(seed)
    prefixes = []
    for i in range(count):
        n = int(rng.integers(*documents))
        prefix = os.path.join(str(directory), f"corpus_{i}")
        prefixes.append(write_corpus(prefix, rng.integers(1, 40, n), rng, vocab=VOCAB, eod=EOD,
                                     eod_rate=0.05, one_document=True))
    return prefixes
