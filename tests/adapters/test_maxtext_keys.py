"""key_names="maxtext": the Grain and JAX skins hand batches over under MaxText's names
(inputs, targets, inputs_position, targets_position, inputs_segmentation,
targets_segmentation), with MaxText's loss weight (targets_segmentation != 0) equal to
the core's loss mask."""

from __future__ import annotations

import numpy as np
import pytest
from adapter_helpers import deadline, gpt_dataset, write_corpus

import megadata_core as mdc
from megadata_adapters.trainers.maxtext import keys as maxtext_keys

grain_source = pytest.importorskip("megadata_adapters.frameworks.grain_source")

SEQ = 16
MAXTEXT = {
    "inputs",
    "targets",
    "inputs_position",
    "targets_position",
    "inputs_segmentation",
    "targets_segmentation",
}


@pytest.fixture(scope="module")
def concat(tmp_path_factory):
    root = tmp_path_factory.mktemp("maxtext_concat")
    prefix = write_corpus(str(root / "corpus"), seed=0)
    return gpt_dataset(prefix, str(root / "cache"), random_seed=1, sequence_length=SEQ)


@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    """best_fit + document_masking, eod_mask_loss: a loss mask with zeros inside samples."""
    root = tmp_path_factory.mktemp("maxtext_packed")
    prefix = write_corpus(str(root / "corpus"), seed=4)
    config = mdc.GPTDataConfig(
        random_seed=3,
        sequence_length=SEQ,
        eod_id=3,
        pad_id=0,
        path_to_cache=str(root / "cache"),
        packing="best_fit",
        document_masking=True,
        eod_mask_loss=True,
    )
    indexed = mdc.IndexedDataset(prefix)
    return mdc.GPTDataset(indexed, np.arange(len(indexed)), None, config)


def _check_mapping(core: dict, renamed: dict) -> None:
    """``renamed`` is ``core`` under MaxText's names, per the mapping of maxtext_keys."""
    assert MAXTEXT <= set(renamed)
    assert not {"tokens", "labels", "position_ids", "segment_ids"} & set(renamed)
    np.testing.assert_array_equal(renamed["inputs"], core["tokens"])
    np.testing.assert_array_equal(renamed["targets"], core["labels"])
    np.testing.assert_array_equal(renamed["inputs_position"], core["position_ids"])
    np.testing.assert_array_equal(renamed["targets_position"], core["position_ids"])
    segments = core.get("segment_ids", np.ones(np.shape(core["tokens"]), np.int32))
    np.testing.assert_array_equal(renamed["inputs_segmentation"], segments)
    # MaxText weighs the loss with targets_segmentation != 0: exactly the core's loss mask
    np.testing.assert_array_equal(renamed["targets_segmentation"] != 0, core["loss_mask"] != 0)
    np.testing.assert_array_equal(
        renamed["targets_segmentation"][core["loss_mask"] != 0], segments[core["loss_mask"] != 0]
    )
    for key in ("inputs_segmentation", "targets_segmentation"):
        assert renamed[key].dtype == np.int32
    for key in set(core) - {"tokens", "labels", "position_ids", "segment_ids"}:
        np.testing.assert_array_equal(renamed[key], core[key], err_msg=key)


@pytest.mark.parametrize("which", ["concat", "packed"])
def test_grain_source_renames_samples_and_batches(which, request):
    dataset = request.getfixturevalue(which)
    src = grain_source.GrainSource(dataset, key_names="maxtext")
    _check_mapping(dataset[2], src[2])
    indices = [5, 0, 3, 3]
    _check_mapping(dataset.__getitems__(indices), src.__getitems__(indices))
    for row, sample in zip(indices, src._getitems(indices)):
        _check_mapping(dataset[row], sample)


def test_packed_samples_have_segments_and_masked_boundaries(packed):
    """The packed fixture exercises what the renaming must carry: several documents per
    sample and loss-masked positions that are not padding."""
    batch = packed.__getitems__(np.arange(min(len(packed), 16)))
    renamed = maxtext_keys.to_maxtext(batch)
    assert batch["segment_ids"].max() >= 2
    inside = (batch["segment_ids"] != 0) & (batch["loss_mask"] == 0)
    assert inside.any()  # EOD positions and labels that would cross a document
    assert (renamed["targets_segmentation"][inside] == 0).all()
    assert (renamed["inputs_segmentation"][inside] != 0).all()


@deadline(90)
@pytest.mark.parametrize("workers", [0, 2])
def test_batched_dataset_renames_after_the_hand_over(packed, workers):
    plain = iter(grain_source.batched_dataset(packed, micro_batch_size=4))
    renamed = iter(
        grain_source.batched_dataset(
            packed, micro_batch_size=4, worker_count=workers, key_names="maxtext"
        )
    )
    try:
        for _ in range(3):
            _check_mapping(next(plain), next(renamed))
        state = renamed.get_state()
    finally:
        renamed.close()
    resumed = iter(grain_source.batched_dataset(packed, micro_batch_size=4, key_names="maxtext"))
    resumed.set_state(state)
    _check_mapping(next(plain), next(resumed))


def test_jax_global_batch_renames(packed):
    jax_sharding = pytest.importorskip("megadata_adapters.frameworks.jax_sharding")
    mesh = jax_sharding.data_mesh(("data",))
    batch = packed.__getitems__(np.arange(8))
    arrays = jax_sharding.global_batch(batch, mesh, key_names="maxtext")
    _check_mapping(batch, {key: np.asarray(value) for key, value in arrays.items()})
    assert arrays["inputs_segmentation"].sharding.spec == jax_sharding.batch_sharding(mesh).spec
    with jax_sharding.prefetch_to_device(iter([batch]), mesh, key_names="maxtext") as data:
        _check_mapping(batch, {key: np.asarray(value) for key, value in next(data).items()})


def test_unknown_key_names_and_missing_keys_raise(concat):
    jax_sharding = pytest.importorskip("megadata_adapters.frameworks.jax_sharding")
    with pytest.raises(mdc.DataError, match="key_names: 't5'"):
        grain_source.GrainSource(concat, key_names="t5")
    with pytest.raises(mdc.DataError, match="key_names"):
        grain_source.batched_dataset(concat, micro_batch_size=2, key_names="MaxText")
    mesh = jax_sharding.data_mesh(("data",))
    with pytest.raises(mdc.DataError, match="key_names: None"):
        jax_sharding.global_batch(concat.__getitems__(np.arange(8)), mesh, key_names=None)
    with pytest.raises(mdc.DataError, match="missing \\['loss_mask'\\]"):
        maxtext_keys.to_maxtext({"tokens": 0, "labels": 0, "position_ids": 0})
