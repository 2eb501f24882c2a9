"""packing="best_fit" and document_masking on GPTDataset: properties over random corpora,
Megatron-LM main's inter_document_masking definition in concat mode, cache keys, blends,
context parallelism, determinism across processes, bad input."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import subprocess
import sys
import tempfile

import numpy as np
import pytest
from corpora import write_corpus
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import megadata_core as mdc
from megadata_core.datasets import gpt_arrays
from megadata_core.datasets.context_parallel import context_parallel_slice

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def position_corpus(directory: str, lengths: list[int]) -> mdc.IndexedDataset:
    """int32 corpus whose token values are 1 + the token's global position (so every
    token names its document and place)."""
    tokens = np.arange(1, sum(lengths) + 1)
    prefix = os.path.join(directory, "corpus")
    return mdc.IndexedDataset(write_corpus(prefix, lengths, tokens=tokens, dtype=np.int32))


def read_all(dataset) -> dict[str, np.ndarray]:
    return dataset.__getitems__(np.arange(len(dataset)))


def owner(lengths: list[int]):
    """Token value -> document id."""
    bounds = np.cumsum([0] + list(lengths)) + 1
    return lambda values: np.searchsorted(bounds, values, side="right") - 1


CORPUS = st.lists(st.integers(0, 40), min_size=1, max_size=30).filter(lambda x: sum(x) > 0)
SETTINGS = settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@SETTINGS
@given(CORPUS, st.integers(1, 24), st.booleans(), st.integers(1, 3), st.integers(0, 2**32 - 1),
       st.sampled_from(["megatron", "feistel"]))
# S = 1 with the extra token: two 1-token documents fill a bin, the second only as the
# label; cu_seqlens [2] holds the first alone (found by the explore profile)
@example([1, 1], 1, True, 1, 0, "megatron")
def test_best_fit_properties(lengths, length, extra, epochs, seed, shuffle):
    with tempfile.TemporaryDirectory() as directory:
        indexed = position_corpus(directory, lengths)
        config = mdc.GPTDataConfig(
            random_seed=seed, sequence_length=length, packing="best_fit",
            document_masking=True, add_extra_token_to_sequence=extra, shuffle=shuffle,
            mask_cross_document_labels=True,
        )
        one = mdc.GPTDataset(indexed, np.arange(len(lengths)), None, config)
        bins = len(one)
        dataset = mdc.GPTDataset(indexed, np.arange(len(lengths)), bins * (epochs - 1) + 1,
                                 config)
        assert len(dataset) == bins * epochs
        batch = read_all(dataset)
        tokens, labels = batch["tokens"], batch["labels"]
        text = np.concatenate([tokens, labels[:, -1:]], axis=1) if extra else tokens
        # every token of the split exactly once per epoch
        real = text[text > 0]
        assert np.array_equal(np.bincount(real, minlength=sum(lengths) + 1)[1:],
                              np.full(sum(lengths), epochs))
        segments, positions = batch["segment_ids"], batch["position_ids"]
        cu, widest = batch["cu_seqlens"], batch["max_seqlen"]
        assert cu.shape == (len(dataset), length + 1) and cu.dtype == np.int32
        assert segments.dtype == np.int32 and widest.dtype == np.int32
        doc = owner(lengths)
        for b in range(len(dataset)):
            present = tokens[b] > 0
            count = int(present.sum())
            # padding only at the end, segment 0 there
            assert present[:count].all() and not present[count:].any()
            assert (segments[b, count:] == 0).all() and (segments[b, :count] >= 1).all()
            # segments change exactly where the document changes; positions restart there
            docs = doc(tokens[b, :count])
            change = np.flatnonzero(np.diff(docs)) + 1
            assert np.array_equal(np.flatnonzero(np.diff(segments[b, :count])) + 1, change)
            assert np.array_equal(np.unique(segments[b, :count]),
                                  np.arange(1, len(change) + 2))
            expected_cu = [0, *change.tolist(), count] + ([length] if count < length else [])
            assert cu[b].tolist() == expected_cu + [length] * (length + 1 - len(expected_cu))
            assert widest[b] == np.diff(cu[b]).max()
            for lo, hi in zip(cu[b][:-1], cu[b][1:]):
                assert np.array_equal(positions[b, lo:hi], np.arange(hi - lo))
            # a label trained on is the next token of the same document
            trained = batch["loss_mask"][b] > 0
            assert (doc(labels[b][trained]) == doc(tokens[b][trained])).all()
            assert (labels[b][trained] == tokens[b][trained] + 1).all()
        # no document cut unless longer than a sample (each piece sits in one sample)
        capacity = length + extra
        samples_of = {}
        for b in range(len(dataset)):
            for d in np.unique(doc(text[b][text[b] > 0])):
                samples_of[d] = samples_of.get(d, 0) + 1
        for d, count in samples_of.items():
            assert count == epochs or lengths[d] > capacity


def megatron_main_masks(parts: list[int], length: int, extra: int):
    """Megatron-LM main's inter_document_masking for one sample, from its document part
    lengths (as _query_document_sample_shuffle_indices returns them)."""
    parts = list(parts)
    if extra:
        parts[-1] -= 1
        if parts[-1] == 0:
            parts.pop()
    shortfall = length - sum(parts)
    if shortfall > 0:
        if parts:
            parts[-1] += shortfall
        else:
            parts.append(shortfall)
    cu = [0]
    for part in parts:
        cu.append(cu[-1] + part)
    widest = max(b - a for a, b in zip(cu[:-1], cu[1:]))
    positions = [0] * length
    for a, b in zip(cu[:-1], cu[1:]):
        for i in range(a, b):
            positions[i] = i - a
    return cu + [length] * (length + 1 - len(cu)), widest, positions


def sample_parts(dataset, row: int, extra: int) -> list[int]:
    """The document part lengths of sample ``row`` (Megatron's query, plain Python)."""
    (begin, offset), (end, last) = dataset.sample_index[row : row + 2].tolist()
    sizes = dataset.indexed.sequence_lengths
    if begin == end:
        return [last - offset + extra]
    parts = []
    for place in range(begin, end + 1):
        size = int(sizes[dataset.document_index[place]])
        start = offset if place == begin else 0
        parts.append(last + extra - start if place == end else size - start)
    return parts


@SETTINGS
@given(CORPUS, st.integers(1, 16), st.booleans(), st.booleans(), st.integers(0, 100))
# a padded last sample whose last part is the extra token alone: Megatron drops that
# part and folds the padding into the part before
@example([8, 6, 3, 4, 1], 2, True, False, 0)
# S = 1: the second document holds only the extra token and is dropped (explore profile)
@example([1, 1], 1, True, False, 0)
# ... and an empty document after it: Megatron's [0, 1, 1] is [0, 1] padded (explore)
@example([1, 1, 0], 1, True, False, 1)
# an empty document before the only token: Megatron's [0, 0, 1] cannot fit [S + 1 = 2]
@example([0, 1], 1, False, False, 1)
def test_concat_matches_megatron_main_definition(lengths, length, extra, drop, seed):
    with tempfile.TemporaryDirectory() as directory:
        indexed = position_corpus(directory, lengths)
        config = mdc.GPTDataConfig(
            random_seed=seed, sequence_length=length, document_masking=True,
            add_extra_token_to_sequence=extra, drop_last_partial_validation_sequence=drop,
        )
        plain = mdc.GPTDataConfig(
            random_seed=seed, sequence_length=length, add_extra_token_to_sequence=extra,
            drop_last_partial_validation_sequence=drop,
        )
        try:
            dataset = mdc.GPTDataset(indexed, np.arange(len(lengths)), None, config, "valid")
        except mdc.DataError:
            return  # fewer tokens than one sample
        if len(dataset) == 0:
            return
        base = mdc.GPTDataset(indexed, np.arange(len(lengths)), None, plain, "valid")
        positions = np.arange(len(dataset))
        expected = [megatron_main_masks(
            sample_parts(dataset, int(dataset.shuffle_index[p]), extra), length, extra)
            for p in positions]
        # Megatron's list can outgrow S + 1 only by trailing boundaries at S (empty parts
        # after the last token), which its padding repeats anyway: those are dropped
        for cu, _, _ in expected:
            while len(cu) > length + 1 and cu[-1] == cu[-2] == length:
                cu.pop()
        if max(len(cu) for cu, _, _ in expected) > length + 1:
            with pytest.raises(mdc.DataError, match="document_masking"):
                dataset.__getitems__(positions)
            return
        batch = dataset.__getitems__(positions)
        reference = base.__getitems__(positions)
        for b, (cu, widest, position) in enumerate(expected):
            assert batch["cu_seqlens"][b].tolist() == cu
            assert int(batch["max_seqlen"][b]) == widest
            assert batch["position_ids"][b].tolist() == position
        # tokens, labels and the loss mask as concat (Megatron 0.19 trains across a
        # boundary); with mask_cross_document_labels, boundary labels are also zeroed
        for key in ("tokens", "labels", "loss_mask"):
            assert np.array_equal(batch[key], reference[key]), key
        masking = dataclasses.replace(config, mask_cross_document_labels=True)
        masked = mdc.GPTDataset(indexed, np.arange(len(lengths)), None, masking, "valid")
        batch = masked.__getitems__(positions)
        zeroed = (reference["loss_mask"] > 0) & (batch["loss_mask"] == 0)
        assert ((batch["loss_mask"] > 0) <= (reference["loss_mask"] > 0)).all()
        doc = owner(lengths)
        tokens, labels = batch["tokens"], batch["labels"]
        crosses = (tokens > 0) & (labels > 0) & (doc(tokens) != doc(labels))
        assert np.array_equal(zeroed, crosses & (reference["loss_mask"] > 0))


def test_concat_arrays_and_keys_unchanged(tmp_path):
    indexed = position_corpus(str(tmp_path), [30, 5, 17, 40])
    plain = mdc.GPTDataConfig(random_seed=3, sequence_length=8)
    masked = mdc.GPTDataConfig(random_seed=3, sequence_length=8, document_masking=True,
                               create_attention_mask=False)
    a = mdc.GPTDataset(indexed, np.arange(4), 20, plain)
    b = mdc.GPTDataset(indexed, np.arange(4), 20, masked)
    assert a.description() == b.description()  # masking changes no array: same cache entry
    assert "packing" not in a.description()  # concat keys (old cache entries) unchanged
    packed = mdc.GPTDataConfig(random_seed=3, sequence_length=8, packing="best_fit")
    c = mdc.GPTDataset(indexed, np.arange(4), 20, packed)
    assert c.description()["packing"] == "best_fit"
    assert set(b[0]) == {"tokens", "labels", "loss_mask", "position_ids", "segment_ids",
                         "cu_seqlens", "max_seqlen"}
    assert set(c[0]) == {"tokens", "labels", "attention_mask", "loss_mask", "position_ids"}


def test_best_fit_cache_round_trip(tmp_path):
    indexed = position_corpus(str(tmp_path), [30, 5, 17, 40, 3, 3, 9])
    config = mdc.GPTDataConfig(random_seed=5, sequence_length=12, packing="best_fit",
                               document_masking=True, path_to_cache=str(tmp_path / "cache"))
    built = mdc.GPTDataset(indexed, np.arange(7), 30, config)
    loaded = mdc.GPTDataset(indexed, np.arange(7), 30, config)
    assert isinstance(loaded._arrays["piece_document"], np.memmap)
    for key, value in read_all(built).items():
        assert np.array_equal(value, read_all(loaded)[key]), key
    names = mdc.modes.packing("best_fit").array_names(mdc.modes.shuffle("megatron"))
    assert sorted(os.listdir(tmp_path / "cache")) == sorted(
        [name for name in os.listdir(tmp_path / "cache")
         if any(name.endswith(f"-{n}.npy") for n in names) or not name.endswith(".npy")]
    )


@pytest.mark.parametrize("shuffle", ["megatron", "feistel"])
def test_best_fit_build_spills_into_the_cache(tmp_path, monkeypatch, shuffle):
    """A cached best_fit build makes its results and working rows as files of the entry
    (what keeps a billion-document build out of anonymous memory), with the same
    samples as a build in memory."""
    from megadata_core.cache import spill as cache_spill
    from megadata_core.indices import packed_samples

    def spill_everything(directory, files, spill_above=0, working_prefix=None):
        return cache_spill.spill_arrays(directory, files, 0, working_prefix)

    layouts = []

    def recording(*args):
        layouts.append(real_layout(*args))
        return layouts[-1]

    real_layout = packed_samples.pack_layout
    monkeypatch.setattr(gpt_arrays, "spill_arrays", spill_everything)
    monkeypatch.setattr(packed_samples, "pack_layout", recording)
    indexed = position_corpus(str(tmp_path), [30, 5, 17, 40, 3, 3, 9, 22, 8])
    fields = dict(random_seed=5, sequence_length=12, packing="best_fit", shuffle=shuffle)
    in_memory = mdc.GPTDataset(indexed, np.arange(9), 40, mdc.GPTDataConfig(**fields))
    layouts.clear()
    cached = mdc.GPTDataset(indexed, np.arange(9), 40, mdc.GPTDataConfig(
        **fields, path_to_cache=str(tmp_path / "cache")))
    assert [type(layout.row) for layout in layouts] == [np.memmap]
    assert isinstance(layouts[0].bin_offsets, np.memmap)
    for key, value in read_all(in_memory).items():
        assert np.array_equal(value, read_all(cached)[key]), key
    assert not [name for name in os.listdir(tmp_path / "cache") if "scratch-" in name]


def test_blend_and_splits_with_best_fit(tmp_path):
    for name, lengths in (("a", [30, 5, 17, 40, 3, 3, 9, 12] * 4), ("b", [7, 60, 2, 11] * 6)):
        os.makedirs(tmp_path / name)
        position_corpus(str(tmp_path / name), lengths)
    prefixes = [str(tmp_path / "a" / "corpus"), str(tmp_path / "b" / "corpus")]
    config = mdc.GPTDataConfig(
        random_seed=2, sequence_length=16, blend=(prefixes, [0.3, 0.7]), split="80,20,0",
        packing="best_fit", document_masking=True, path_to_cache=str(tmp_path / "cache"),
    )
    train, valid, test = mdc.build_datasets(config, [50, 10, 0])
    assert test is None and len(train) >= 50 and len(valid) >= 10
    batch = train.__getitems__(list(range(len(train))))
    assert batch["segment_ids"].shape == (len(train), 16)
    again, _, _ = mdc.build_datasets(config, [50, 10, 0])
    for key, value in again.__getitems__(list(range(len(train)))).items():
        assert np.array_equal(value, batch[key]), key


def test_context_parallel_slice_of_masked_batch(tmp_path):
    indexed = position_corpus(str(tmp_path), [30, 5, 17, 40])
    config = mdc.GPTDataConfig(random_seed=3, sequence_length=8, packing="best_fit",
                               document_masking=True)
    batch = mdc.GPTDataset(indexed, np.arange(4), None, config).__getitems__([0, 1])
    part = context_parallel_slice(batch, 1, 2)
    keep = [2, 3, 4, 5]
    for key in ("tokens", "segment_ids", "position_ids", "loss_mask"):
        assert np.array_equal(part[key], batch[key][:, keep]), key
    assert part["cu_seqlens"] is batch["cu_seqlens"]
    assert part["max_seqlen"] is batch["max_seqlen"]
    assert part["attention_mask"].shape == (2, 1, 4, 8)


CHILD = """
import hashlib, sys
import numpy as np
import megadata_core as mdc
indexed = mdc.IndexedDataset(sys.argv[1])
config = mdc.GPTDataConfig(random_seed=9, sequence_length=16, packing="best_fit",
                           document_masking=True, shuffle=sys.argv[2])
dataset = mdc.GPTDataset(indexed, np.arange(len(indexed)), 200, config)
batch = dataset.__getitems__(np.arange(len(dataset)))
digest = hashlib.sha256()
for key in sorted(batch):
    digest.update(key.encode() + np.ascontiguousarray(batch[key]).tobytes())
print(len(dataset), digest.hexdigest())
"""


@pytest.mark.parametrize("shuffle", ["megatron", "feistel"])
def test_deterministic_across_processes(tmp_path, shuffle):
    rng = np.random.default_rng(1)
    indexed = position_corpus(str(tmp_path), rng.integers(0, 50, 120).tolist())
    outputs = [
        subprocess.run(
            [sys.executable, "-c", CHILD, indexed.path_prefix, shuffle],
            capture_output=True, text=True, check=True, timeout=120,
            env={**os.environ, "PYTHONPATH": ROOT, "PYTHONHASHSEED": str(salt)},
        ).stdout
        for salt in (1, 2)
    ]
    assert outputs[0] == outputs[1] and outputs[0].strip()
    config = mdc.GPTDataConfig(random_seed=9, sequence_length=16, packing="best_fit",
                               document_masking=True, shuffle=shuffle)
    here = mdc.GPTDataset(indexed, np.arange(len(indexed)), 200, config)
    batch = here.__getitems__(np.arange(len(here)))
    digest = hashlib.sha256()
    for key in sorted(batch):
        digest.update(key.encode() + np.ascontiguousarray(batch[key]).tobytes())
    assert outputs[0].split() == [str(len(here)), digest.hexdigest()]


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"packing": "first_fit"}, "packing: 'first_fit' is not one of"),
        ({"packing": "best_fit", "sequence_length": 0}, "sequence_length: 0 must be > 0"),
        ({"document_masking": True, "reset_position_ids": True, "eod_id": 0},
         "document_masking: True contradicts reset_position_ids"),
        ({"document_masking": True, "reset_attention_mask": True, "eod_id": 0},
         "document_masking: True contradicts reset_attention_mask"),
        ({"document_masking": "yes"}, "document_masking: 'yes' is not a bool"),
    ],
)
def test_bad_config(fields, message):
    with pytest.raises(mdc.DataError, match=message):
        mdc.GPTDataConfig(**{"random_seed": 1, "sequence_length": 8, **fields})
