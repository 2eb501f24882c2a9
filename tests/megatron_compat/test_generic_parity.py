"""A user's own MegatronDataset subclass through both builders; Megatron's exception types."""

from __future__ import annotations

import numpy as np
import pytest
from compat_helpers import ours, theirs

import megadata_core as mdc


def _subclass(side):
    """A mid-level dataset over a .npy of rows: sample k is row indices[k % len]."""
    base = side("megatron_dataset").MegatronDataset

    class Rows(base):
        def __init__(self, dataset, dataset_path, indices, num_samples, index_split, config):
            super().__init__(dataset, dataset_path, indices, num_samples, index_split, config)
            self.size = len(indices) if num_samples is None else num_samples

        @staticmethod
        def numel_low_level_dataset(low_level_dataset) -> int:
            return len(low_level_dataset)

        @staticmethod
        def build_low_level_dataset(dataset_path, config):
            return np.load(dataset_path)

        def __len__(self) -> int:
            return self.size

        def __getitem__(self, idx: int) -> dict:
            return {"row": self.dataset[self.indices[idx % len(self.indices)]]}

    return Rows


def _build(side, sizes, **config):
    cfg = side("blended_megatron_dataset_config").BlendedMegatronDatasetConfig(
        random_seed=1, sequence_length=4, **config
    )
    builder = side("blended_megatron_dataset_builder").BlendedMegatronDatasetBuilder
    return builder(_subclass(side), sizes, lambda: True, cfg).build()


@pytest.fixture
def row_files(tmp_path):
    paths = []
    for i, rows in enumerate((30, 50, 80)):
        path = str(tmp_path / f"rows_{i}.npy")
        np.save(path, np.arange(rows * 2).reshape(rows, 2) + 1000 * i)
        paths.append(path)
    return paths


@pytest.mark.parametrize(
    "weights, sizes, split",
    [([1.0, 2.0, 3.0], [60, 12, 5], "80,15,5"), (None, [None, None, None], "60,40,0"),
     (None, [40, 7, None], "80,20,0")],
)
def test_subclass_blends(row_files, weights, sizes, split):
    them = _build(theirs, sizes, blend=(row_files, weights), split=split)
    us = _build(ours, sizes, blend=(row_files, weights), split=split)
    for left, right in zip(them, us):
        assert (left is None) == (right is None)
        if left is None:
            continue
        assert len(left) == len(right) and left.weights == right.weights
        assert np.array_equal(left.dataset_index, right.dataset_index)
        assert np.array_equal(left.dataset_sample_index, right.dataset_sample_index)
        assert [len(d) for d in left.datasets] == [len(d) for d in right.datasets]
        for index in (0, len(left) - 1):
            a, b = left[index], right[index]
            assert a["dataset_id"] == b["dataset_id"] and np.array_equal(a["row"], b["row"])


def test_single_prefix_gives_the_subclass_itself(row_files):
    us = _build(ours, [20, None, None], blend_per_split=[([row_files[0]], None), None, None])
    assert type(us[0]).__name__ == "Rows" and len(us[0]) == 20
    assert us[1] is None and us[2] is None


def test_weighted_blend_without_size_is_an_assertion_error(row_files):
    per_split = [(row_files, [1.0, 1.0, 2.0]), None, None]
    with pytest.raises(AssertionError):
        _build(theirs, [None, None, None], blend_per_split=per_split)
    with pytest.raises(AssertionError, match="weighted blends need a size") as error:
        _build(ours, [None, None, None], blend_per_split=per_split)
    assert isinstance(error.value, mdc.DataError)


def test_oversampled_blend_is_an_index_error(row_files):
    kw = dict(blend=(row_files, [1.0, 1.0, 8.0]), split="100,0,0", mid_level_dataset_surplus=0.0)
    sizes = [400, None, None]
    with pytest.raises(IndexError):  # megatron-core raises IndexError too, callers catch it
        cfg = ours("blended_megatron_dataset_config").BlendedMegatronDatasetConfig(
            random_seed=1, sequence_length=4, **kw
        )
        rows = _subclass(ours)
        members = [
            rows(np.load(path), path, np.arange(5), 5, ours("utils").Split.train, cfg)
            for path in row_files
        ]
        ours("blended_dataset").BlendedDataset(members, [1.0, 1.0, 8.0], sizes[0], cfg)
