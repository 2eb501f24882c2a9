"""A packing mode defined in this file alone runs through the whole house.

``OneDocumentPerSample`` (each sample is one document, cut to S + extra tokens or padded)
implements :class:`megadata_core.modes.Packing` here, is registered by name, and is then
asked for by a config like any shipped mode: ``build_datasets`` over a blend, the index
cache (a second build loads what the first stored, for in-memory bundles and per-member
entries alike), ``GrainSource`` and ``TorchDataset``. No source file knows it.
"""

from __future__ import annotations

import dataclasses
import pickle

import numpy as np
import pytest
from corpora import write_corpus

import megadata_core as mdc
from megadata_core import modes

S = 12


class OneDocumentPerSample(modes.Packing):
    """Sample k of epoch e: document ``order[e * D + k]``, its first S + extra tokens."""

    name = "toy_one_document"
    packed = True  # samples end in padding
    builds = 0  # how many index builds ran (a cache hit runs none)

    def array_names(self, shuffle):
        return ("toy_documents",)

    def empty_arrays(self, shuffle):
        return {"toy_documents": np.empty(0, np.int64)}

    def describe(self, drop_last):
        return {"packing": self.name, "packing_algorithm": 1}

    def build(self, lengths, ids, config, num_samples, drop_last, tokens, empty):
        type(self).builds += 1
        ids = np.asarray(ids, dtype=np.int64)
        epochs = self._epochs(len(ids), num_samples)
        rng = np.random.default_rng(config.random_seed)
        out = empty("toy_documents", (epochs * len(ids),), np.int64)
        out[...] = np.concatenate([rng.permutation(ids) for _ in range(epochs)])
        return {"toy_documents": out}

    @staticmethod
    def _epochs(documents, num_samples):
        return 1 if num_samples is None else max(1, -(-num_samples // documents))

    def size(self, lengths, tokens, config, num_samples, drop_last):
        epochs = self._epochs(len(lengths), num_samples)
        return epochs, epochs * len(lengths)

    def views(self, dataset, arrays):
        order = np.asarray(arrays["toy_documents"])
        dataset._packed = {"toy_documents": order}
        dataset.sample_index = dataset.document_index = None
        dataset.shuffle_index = np.arange(len(order))  # the order is the array itself
        dataset._total = len(order)

    def epochs(self, dataset):
        return len(dataset._packed["toy_documents"]) // max(1, len(dataset.indices))

    def locate(self, dataset, rows):
        documents = dataset._packed["toy_documents"][np.asarray(rows, dtype=np.int64)]
        width = dataset.config.sequence_length + dataset._extra
        lengths = np.minimum(dataset.indexed.sequence_lengths[documents], width)
        count = len(documents)
        return modes.Pieces(documents, lengths.astype(np.int64), np.arange(count),
                            np.zeros(count, np.int64), np.zeros(count, np.int64))

    def rows_with(self, dataset, document):
        return np.flatnonzero(dataset._packed["toy_documents"] == document)


modes.register(OneDocumentPerSample())


@pytest.fixture
def corpora(tmp_path):
    rng = np.random.default_rng(3)
    return [
        write_corpus(str(tmp_path / name), rng.integers(1, 3 * S, 40), rng, low=1, vocab=90)
        for name in ("a", "b")
    ]


def _config(corpora, cache, **options):
    return mdc.GPTDataConfig(
        random_seed=7, sequence_length=S, blend=([*corpora], [0.6, 0.4]), split="90,10,0",
        packing="toy_one_document", path_to_cache=str(cache), pad_id=0, **options,
    )


def _expected(dataset, index):
    """Sample ``index`` of a blend member as this file's mode defines it."""
    document = int(dataset._packed["toy_documents"][index])
    text = np.zeros(S + 1, np.int64)
    tokens = np.asarray(dataset.indexed[document])[: S + 1]
    text[: len(tokens)] = tokens
    return text, len(tokens)


def _check_samples(blend):
    batch = blend.__getitems__(list(range(len(blend))))
    for i in range(len(blend)):
        member = blend.datasets[int(blend.dataset_index[i])]
        text, count = _expected(member, int(blend.dataset_sample_index[i]))
        np.testing.assert_array_equal(batch["tokens"][i], text[:S])
        np.testing.assert_array_equal(batch["labels"][i], text[1:])
        np.testing.assert_array_equal(batch["loss_mask"][i][: count - 1], 1.0)
        np.testing.assert_array_equal(batch["loss_mask"][i][count - 1 :], 0.0)
    return batch


@pytest.mark.parametrize("in_memory_below", [None, 0])
def test_a_toy_packing_builds_caches_and_serves(corpora, tmp_path, in_memory_below):
    config = _config(corpora, tmp_path / "cache")
    options = {} if in_memory_below is None else {"in_memory_below": in_memory_below}
    assert config.packing_mode is modes.packing("toy_one_document")
    OneDocumentPerSample.builds = 0
    train, valid, _ = mdc.build_datasets(config, [50, 6, None], **options)
    built = OneDocumentPerSample.builds
    assert built >= 2 and len(train) >= 50 and len(valid) >= 6
    batch = _check_samples(train)

    again, _, _ = mdc.build_datasets(config, [50, 6, None], **options)
    assert OneDocumentPerSample.builds == built  # loaded from the cache, not built
    for key, value in again.__getitems__(list(range(len(again)))).items():
        np.testing.assert_array_equal(value, batch[key])
    concat = mdc.build_datasets(dataclasses.replace(config, packing="concat"),
                                [50, 6, None], **options)[0]
    assert OneDocumentPerSample.builds == built  # another packing: its own cache entries
    assert concat.datasets[0].packing == "concat"
    assert train.datasets[0].packing == "toy_one_document"
    assert not np.array_equal(concat.__getitems__([0])["tokens"], batch["tokens"][:1])


def test_a_toy_packing_through_grain_and_torch(corpora, tmp_path):
    pytest.importorskip("grain")
    from megadata_adapters import grain_source

    train, _, _ = mdc.build_datasets(_config(corpora, tmp_path / "cache"), [50, 6, None])
    expected = train.__getitems__(list(range(8)))
    source = grain_source.GrainSource(train)
    clone = pickle.loads(pickle.dumps(source))
    for i in range(8):
        for key in ("tokens", "labels", "loss_mask"):
            np.testing.assert_array_equal(np.asarray(source[i][key]), expected[key][i])
            np.testing.assert_array_equal(np.asarray(clone[i][key]), expected[key][i])

    torch = pytest.importorskip("torch")
    from megadata_adapters import torch_data

    loader = torch.utils.data.DataLoader(torch_data.TorchDataset(train), batch_size=4)
    first = next(iter(loader))
    np.testing.assert_array_equal(first["tokens"].numpy(), expected["tokens"][:4])
    np.testing.assert_array_equal(first["loss_mask"].numpy(), expected["loss_mask"][:4])
