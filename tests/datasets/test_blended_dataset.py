"""BlendedDataset: megatron-core 0.16.1's BlendedDataset as the oracle (megatron order),
the balanced order's bound, batching, caching, pickling and bad input."""

from __future__ import annotations

import math
import os
import pickle
import tempfile
import warnings

import numpy as np
import pytest
from cache_helpers import entry_files
from gpt_oracle import OracleTokenizer, megatron_sample, ours_dataset, write_corpus

import megadata_core as mdc
from megadata_core import DataError
from megadata_core.datasets.blended_dataset import BlendedDataset
from megadata_core.errors import OversampledError
from megadata_core.indices.blending import prefix_deviation

PLAIN = dict(reset_position_ids=False, reset_attention_mask=False, eod_mask_loss=False)


@pytest.fixture(scope="module")
def megatron_blend():
    """Build megatron's BlendedDataset over megatron GPTDatasets of the given prefixes."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import torch
        from megatron.core.datasets.blended_dataset import BlendedDataset as TheirBlend
        from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig
        from megatron.core.datasets.indexed_dataset import IndexedDataset
        from megatron.core.datasets.utils import Split
    torch.set_num_threads(1)

    def build(prefixes, num_samples, weights, size, root, seed, length):
        def make_config(blend, cache):
            return GPTDatasetConfig(
                random_seed=seed,
                sequence_length=length,
                blend=blend,
                split="1,1,1",
                path_to_cache=cache,
                tokenizer=OracleTokenizer(3),
                **PLAIN,
            )

        members = []
        for prefix, count in zip(prefixes, num_samples):
            indexed = IndexedDataset(prefix)
            ids = np.arange(len(indexed.sequence_lengths), dtype=np.int32)
            cache = tempfile.mkdtemp(dir=root)  # Megatron's key misses the data: own dirs
            members.append(
                GPTDataset(
                    indexed, prefix, ids, count, Split.train, make_config(([prefix], None), cache)
                )
            )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "Cannot save ... path_to_cache is None"
            # path_to_cache None: the build needs no torch.distributed
            return TheirBlend(members, weights, size, make_config((prefixes, None), None))

    return build


@pytest.fixture
def workdir():
    with tempfile.TemporaryDirectory() as directory:
        yield directory


def corpora(workdir, rng, count):
    return [
        write_corpus(os.path.join(workdir, f"corpus{i}"), rng.integers(1, 50, 30), rng)
        for i in range(count)
    ]


def our_members(prefixes, num_samples, seed, length):
    return [
        ours_dataset(
            prefix, count, "train", eod=3, random_seed=seed, sequence_length=length, **PLAIN
        )
        for prefix, count in zip(prefixes, num_samples)
    ]


def config(order="megatron", cache=None, **kw):
    return mdc.GPTDataConfig(
        random_seed=1, sequence_length=8, blend_order=order, path_to_cache=cache, **kw
    )


def assert_same_blend(theirs, ours, limit=None):
    np.testing.assert_array_equal(ours.dataset_index, theirs.dataset_index)
    np.testing.assert_array_equal(ours.dataset_sample_index, theirs.dataset_sample_index)
    assert ours.dataset_index.dtype == np.int16
    count = len(ours) if limit is None else min(limit, len(ours))
    for i in range(count):
        reference = megatron_sample(theirs, i)
        mine = ours[i]
        assert list(mine) == list(reference)
        for key, value in reference.items():
            value = value.numpy() if hasattr(value, "numpy") else np.asarray(value)
            np.testing.assert_array_equal(mine[key], value, err_msg=f"{key} of sample {i}")


@pytest.mark.parametrize("seed", range(4))
def test_megatron_order_equals_megatron(megatron_blend, workdir, seed):
    rng = np.random.default_rng(seed)
    count = int(rng.integers(2, 5))
    prefixes = corpora(workdir, rng, count)
    weights = (rng.random(count) + 0.05).tolist()
    size = int(rng.integers(20, 120))
    share = np.asarray(weights) / sum(weights)
    num_samples = [int(math.ceil(size * w * 1.1)) + 2 for w in share]
    theirs = megatron_blend(prefixes, num_samples, weights, size, workdir, seed, 8)
    members = our_members(prefixes, num_samples, seed, 8)
    ours = BlendedDataset(members, weights, size, config("megatron"))
    assert len(ours) == len(theirs) == size
    assert_same_blend(theirs, ours)
    batch = ours.__getitems__(np.arange(size))
    for i in range(size):
        for key, value in ours[i].items():
            np.testing.assert_array_equal(batch[key][i], value)


def test_exhaustive_equals_megatron(megatron_blend, workdir):
    """weights None and size None: every sample of every member, Megatron's exhaustive order."""
    rng = np.random.default_rng(7)
    prefixes = corpora(workdir, rng, 3)
    num_samples = [None, None, None]  # one epoch each
    members = our_members(prefixes, num_samples, 2, 8)
    lengths = [len(member) for member in members]
    theirs = megatron_blend(prefixes, num_samples, lengths, None, workdir, 2, 8)
    ours = BlendedDataset(members, None, None, config("megatron"))
    assert len(ours) == sum(lengths)
    assert ours.weights == lengths
    assert_same_blend(theirs, ours, limit=60)
    balanced = BlendedDataset(members, None, None, config("balanced"))
    np.testing.assert_array_equal(np.bincount(balanced.dataset_index, minlength=3), lengths)
    assert prefix_deviation(balanced.dataset_index, lengths) < 1


# -- stub members ---------------------------------------------------------------------


class Stub:
    """A member dataset: sample k of dataset `tag` is {"x": [tag, k], "y": k * 0.5}."""

    def __init__(self, size: int, tag: int, split: str = "train") -> None:
        self.size, self.tag, self.split = size, tag, split
        self.calls = 0

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, k):
        assert 0 <= k < self.size
        return {"x": np.array([self.tag, k], dtype=np.int32), "y": np.float32(k * 0.5)}

    def __getitems__(self, ks):
        self.calls += 1
        ks = np.asarray(ks)
        assert ks.min() >= 0 and ks.max() < self.size
        x = np.stack([np.full(len(ks), self.tag), ks], axis=1).astype(np.int32)
        return {"x": x, "y": (ks * 0.5).astype(np.float32)}

    def description(self) -> dict:
        return {"stub": self.tag, "size": self.size, "split": self.split}

    def __repr__(self) -> str:
        return f"Stub(tag={self.tag}, size={self.size})"


class Untouchable(Stub):
    """A member that must never be read."""

    def __getitem__(self, k):
        raise AssertionError("a weight-0 dataset was read")

    def __getitems__(self, ks):
        raise AssertionError("a weight-0 dataset was read")


class Plain:
    """A member without __getitems__ or description (read sample by sample)."""

    def __init__(self, size: int, tag: int) -> None:
        self.size, self.tag = size, tag

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, k):
        return {"x": np.array([self.tag, k], dtype=np.int32), "y": np.float32(k * 0.5)}


@pytest.mark.parametrize("order", ["megatron", "balanced"])
def test_getitems_groups_by_member(order):
    members = [Stub(400, 0), Stub(400, 1), Plain(400, 2)]
    ds = BlendedDataset(members, [0.5, 0.3, 0.2], 600, config(order))
    rng = np.random.default_rng(0)
    indices = rng.integers(-600, 600, 64)
    batch = ds.__getitems__(indices)
    assert list(batch) == ["dataset_id", "x", "y"]
    assert members[0].calls == members[1].calls == 1  # one call per member
    for row, i in enumerate(indices):
        sample = ds[int(i)]
        assert list(sample) == ["dataset_id", "x", "y"]
        assert batch["dataset_id"][row] == sample["dataset_id"]
        np.testing.assert_array_equal(batch["x"][row], sample["x"])
        assert batch["y"][row] == sample["y"]
        assert sample["x"][0] == sample["dataset_id"]
        assert sample["x"][1] == ds.dataset_sample_index[int(i)]
    assert batch["x"].dtype == np.int32 and batch["y"].dtype == np.float32
    single = ds.__getitems__(np.flatnonzero(ds.dataset_index == 0)[:5])
    np.testing.assert_array_equal(single["x"][:, 0], 0)
    empty = ds.__getitems__([])
    assert empty["dataset_id"].shape == (0,)
    with pytest.raises(IndexError):
        ds.__getitems__([600])
    with pytest.raises(IndexError):
        ds[-601]
    with pytest.raises(TypeError):
        ds[1.0]


def test_balanced_order_bound():
    weights = [0.5] + [0.01] * 50
    members = [Stub(3000, j) for j in range(51)]
    ds = BlendedDataset(members, weights, 3000, config("balanced"))
    assert prefix_deviation(ds.dataset_index, weights) < 1
    for j in range(51):
        picked = ds.dataset_sample_index[ds.dataset_index == j]
        np.testing.assert_array_equal(picked, np.arange(len(picked)))


@pytest.mark.parametrize("order", ["megatron", "balanced"])
def test_zero_weight_member_is_never_read(order):
    members = [Stub(300, 0), Untouchable(300, 1), Stub(300, 2)]
    ds = BlendedDataset(members, [0.5, 0.0, 0.5], 400, config(order))
    assert 1 not in ds.dataset_index
    ds.__getitems__(np.arange(400))
    for i in range(0, 400, 7):
        ds[i]
    # megatron order: Megatron's blend of the other two
    if order == "megatron":
        other = BlendedDataset([Stub(300, 0), Stub(300, 2)], [0.5, 0.5], 400, config(order))
        np.testing.assert_array_equal(ds.dataset_index, np.where(other.dataset_index == 1, 2, 0))


def test_keys_must_match():
    class Other(Stub):
        def __getitems__(self, ks):
            return {"z": np.zeros(len(ks))}

    ds = BlendedDataset([Stub(100, 0), Other(100, 1)], [1, 1], 50, config())
    with pytest.raises(DataError, match="keys"):
        ds.__getitems__(np.arange(10))


# -- cache, pickle, repr ------------------------------------------------------------------


def test_cache_hit_and_key(workdir):
    cache = os.path.join(workdir, "cache")
    members = [Stub(500, 0), Stub(500, 1)]
    first = BlendedDataset(members, [0.7, 0.3], 600, config("balanced", cache))
    files = entry_files(cache)
    assert any(name.endswith("-dataset_index.npy") for name in files)
    second = BlendedDataset(members, [0.7, 0.3], 600, config("balanced", cache))
    assert isinstance(second._arrays["dataset_index"], np.memmap)  # loaded, not rebuilt
    assert entry_files(cache) == files
    np.testing.assert_array_equal(first.dataset_index, second.dataset_index)
    np.testing.assert_array_equal(first.dataset_sample_index, second.dataset_sample_index)
    # every input is in the key: order, weights, size, members
    for other in (
        BlendedDataset(members, [0.7, 0.3], 600, config("megatron", cache)),
        BlendedDataset(members, [0.6, 0.4], 600, config("balanced", cache)),
        BlendedDataset(members, [0.7, 0.3], 601, config("balanced", cache)),
        BlendedDataset([Stub(500, 0), Stub(501, 1)], [0.7, 0.3], 600, config("balanced", cache)),
    ):
        assert other.description() != first.description()
    assert len(entry_files(cache)) > len(files)
    description = first.description()
    assert description["datasets"] == [m.description() for m in members]
    assert description["blend_order"] == "balanced" and description["size"] == 600


def test_cache_needs_descriptions(workdir):
    cache = os.path.join(workdir, "cache")
    with pytest.warns(UserWarning, match="not cached"):
        ds = BlendedDataset([Plain(100, 0), Stub(100, 1)], [1, 1], 50, config(cache=cache))
    assert len(ds) == 50 and not os.path.exists(cache)


def test_pickle_and_repr(workdir):
    cache = os.path.join(workdir, "cache")
    members = [Stub(500, 0), Stub(500, 1)]
    BlendedDataset(members, [0.7, 0.3], 600, config("balanced", cache))
    ds = BlendedDataset(members, [0.7, 0.3], 600, config("balanced", cache))
    blob = pickle.dumps(ds)
    assert len(blob) < 20_000  # memory-mapped indices travel as file names
    back = pickle.loads(blob)
    np.testing.assert_array_equal(back.dataset_index, ds.dataset_index)
    np.testing.assert_array_equal(
        back.__getitems__(np.arange(600))["x"], ds.__getitems__(np.arange(600))["x"]
    )
    assert repr(back) == repr(ds)
    text = repr(ds)
    assert "size=600" in text and "'balanced'" in text and "Stub(tag=1, size=500)" in text
    assert "0.7" in text and "0.3" in text


def test_gpt_members_repr_and_pickle(workdir):
    rng = np.random.default_rng(1)
    prefixes = corpora(workdir, rng, 2)
    members = our_members(prefixes, [40, 40], 1, 8)
    ds = BlendedDataset(members, [1, 3], 60, config("balanced", os.path.join(workdir, "c")))
    back = pickle.loads(pickle.dumps(ds))
    for key, value in ds.__getitems__(np.arange(60)).items():
        np.testing.assert_array_equal(back.__getitems__(np.arange(60))[key], value)
    assert "corpus0" in repr(ds) and "corpus1" in repr(ds)


# -- bad input --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("weights", "size", "match"),
    [
        ([1.0, -1.0], 10, "weights"),
        ([0.0, 0.0], 10, "weights"),
        ([1.0, float("nan")], 10, "weights"),
        ([1.0], 10, "weights"),  # one weight for two datasets
        ([1.0, 1.0], -1, "size"),
        ([1.0, 1.0], 2.0, "size"),
        ([1.5, 2.0], None, "whole numbers"),
        ([1000, 10], 500, "asks"),  # more samples than dataset 0 holds
    ],
)
def test_bad_input(weights, size, match):
    with pytest.raises(DataError, match=match):
        BlendedDataset([Stub(300, 0), Stub(300, 1)], weights, size, config())


def test_bad_members_and_config():
    with pytest.raises(DataError, match="datasets"):
        BlendedDataset([], [], 10, config())
    with pytest.raises(DataError, match="splits"):
        BlendedDataset([Stub(10, 0), Stub(10, 1, "valid")], [1, 1], 5, config())
    with pytest.raises(DataError, match="blend_order"):
        BlendedDataset([Stub(10, 0)], [1], 5, object())
    with pytest.raises(DataError, match="asks"):  # exhaustive beyond a member's length
        BlendedDataset([Stub(10, 0), Stub(10, 1)], [11, 3], None, config("balanced"))


def test_an_oversampled_blend_is_told_by_its_type():
    """Callers (the Megatron drop-in maps it to IndexError) tell it by type, never by
    the message's words."""
    with pytest.raises(OversampledError, match="raise mid_level_dataset_surplus") as error:
        BlendedDataset([Stub(300, 0), Stub(300, 1)], [1000, 10], 500, config())
    assert isinstance(error.value, DataError)
    with pytest.raises(DataError) as other:
        BlendedDataset([Stub(300, 0), Stub(300, 1)], [1.0, -1.0], 10, config())
    assert not isinstance(other.value, OversampledError)


# -- more datasets than int16 holds (Megatron's dataset_index dtype) -----------------------

MANY = 40_000  # > 32,767


def _many_config(order: str):
    return mdc.GPTDataConfig(random_seed=1, sequence_length=8, blend_order=order)


@pytest.mark.parametrize("order", ["megatron", "balanced"])
def test_dataset_ids_past_int16(order):
    """40,000 members, the last 100 weigh most: the first 100 samples read them, by ids
    past 32,767 in an index dtype that holds them."""
    weights = np.ones(MANY)
    weights[-100:] = 1e4
    members = [Stub(200, tag) for tag in range(MANY)]
    blend = BlendedDataset(members, weights.tolist(), 100, _many_config(order))
    assert blend.dataset_index.dtype == np.int32
    np.testing.assert_array_equal(np.sort(blend.dataset_index), np.arange(MANY - 100, MANY))
    batch = blend.__getitems__([0, 99])
    np.testing.assert_array_equal(batch["x"][:, 0], batch["dataset_id"])


@pytest.mark.parametrize("order", ["megatron", "balanced"])
def test_live_ids_past_int16_with_zero_weights(order):
    """Two live members past id 32,767 among 40,000 (the others weigh 0): the blend
    reads exactly those ids (not ids wrapped to int16: the megatron order blends the 2
    live members, whose own index fits int16)."""
    weights = np.zeros(MANY)
    live = [MANY - 7_000, MANY - 1]
    weights[live] = [1.0, 3.0]
    members = [Untouchable(1, tag) for tag in range(MANY)]
    for tag in live:
        members[tag] = Stub(200, tag)
    blend = BlendedDataset(members, weights.tolist(), 100, _many_config(order))
    assert blend.dataset_index.dtype == np.int32
    assert set(np.unique(blend.dataset_index).tolist()) == set(live)
    assert blend[0]["dataset_id"] in live
