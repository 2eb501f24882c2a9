"""adapters.jax_sharding: per-process numpy batches -> global jax.Arrays on a mesh."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec

import megadata_core as mdc
from adapters import jax_sharding


def test_eight_simulated_devices():
    # tests/adapters/conftest.py sets XLA_FLAGS before jax starts; everything below needs it.
    assert jax.device_count() == 8


@pytest.fixture(scope="module")
def gpt_batch(tmp_path_factory):
    prefix = str(tmp_path_factory.mktemp("jax_corpus") / "corpus")
    rng = np.random.default_rng(7)
    lengths = rng.integers(5, 40, size=60)
    tokens = rng.integers(1, 1000, size=int(lengths.sum())).astype(np.uint16)
    with mdc.IndexedDatasetWriter(prefix, np.uint16) as writer:
        writer.add_documents(tokens, lengths)
    config = mdc.GPTDataConfig(random_seed=1, sequence_length=32, eod_id=0)
    dataset = mdc.GPTDataset(mdc.IndexedDataset(prefix), np.arange(60), None, config)
    return dataset.__getitems__(np.arange(16))


def _copy(batch):
    return {k: np.array(v, copy=True) for k, v in batch.items()}


def test_one_axis_mesh_values_spec_and_shards(gpt_batch):
    before = _copy(gpt_batch)
    mesh = jax_sharding.data_mesh()
    assert mesh.shape == {"data": 8}
    out = jax_sharding.global_batch(gpt_batch, mesh)
    assert set(out) == set(gpt_batch)
    for key, array in out.items():
        local = gpt_batch[key]
        assert isinstance(array, jax.Array)
        assert array.dtype == local.dtype, key
        assert array.shape == local.shape  # one process: global batch == local batch
        np.testing.assert_array_equal(np.asarray(array), local)
        assert isinstance(array.sharding, NamedSharding)
        assert array.sharding.spec == PartitionSpec(("data",))
        shards = array.addressable_shards
        assert len(shards) == 8
        for shard in shards:
            assert shard.data.shape == (2,) + local.shape[1:]
            np.testing.assert_array_equal(np.asarray(shard.data), local[shard.index])
    # Inputs untouched (some are read-only views; none may be written).
    for key in before:
        np.testing.assert_array_equal(gpt_batch[key], before[key])
    assert out["tokens"].dtype == np.int32
    assert out["attention_mask"].dtype == np.bool_


def test_two_axis_mesh_default_shards_over_both(gpt_batch):
    mesh = jax_sharding.data_mesh(("data", "fsdp"), (4, 2))
    out = jax_sharding.global_batch(gpt_batch, mesh)
    tokens = out["tokens"]
    assert tokens.sharding.spec == PartitionSpec(("data", "fsdp"))
    assert {s.data.shape for s in tokens.addressable_shards} == {(2, 32)}
    starts = sorted(s.index[0].start for s in tokens.addressable_shards)
    assert starts == list(range(0, 16, 2))
    np.testing.assert_array_equal(np.asarray(tokens), gpt_batch["tokens"])


def test_batch_axes_data_replicates_over_fsdp(gpt_batch):
    mesh = jax_sharding.data_mesh(("data", "fsdp"), (4, 2))
    out = jax_sharding.global_batch(gpt_batch, mesh, batch_axes=("data",))
    for key, array in out.items():
        local = gpt_batch[key]
        assert array.sharding.spec == PartitionSpec(("data",))
        shards = array.addressable_shards
        assert len(shards) == 8
        assert {s.data.shape for s in shards} == {(4,) + local.shape[1:]}
        # Each batch quarter lives on exactly the two fsdp devices.
        starts = sorted(s.index[0].start for s in shards)
        assert starts == [0, 0, 4, 4, 8, 8, 12, 12]
        np.testing.assert_array_equal(np.asarray(array), local)
    # A bare axis name works too.
    single = jax_sharding.global_batch(gpt_batch, mesh, batch_axes="fsdp")
    assert single["labels"].sharding.spec == PartitionSpec(("fsdp",))
    assert {s.data.shape for s in single["labels"].addressable_shards} == {(8, 32)}


def test_batch_sharding_helper():
    mesh = jax_sharding.data_mesh(("data", "fsdp"), (4, 2))
    assert jax_sharding.batch_sharding(mesh).spec == PartitionSpec(("data", "fsdp"))
    assert jax_sharding.batch_sharding(mesh, ["fsdp"]).spec == PartitionSpec(("fsdp",))


def test_unknown_axis_names_the_mesh_axes(gpt_batch):
    mesh = jax_sharding.data_mesh(("data", "fsdp"), (4, 2))
    with pytest.raises(mdc.DataError, match=r"'tensor'.*\('data', 'fsdp'\)"):
        jax_sharding.global_batch(gpt_batch, mesh, batch_axes=("data", "tensor"))


def test_batch_not_divisible_says_the_numbers(gpt_batch):
    mesh = jax_sharding.data_mesh()
    small = {k: v[:6] for k, v in gpt_batch.items()}
    with pytest.raises(mdc.DataError, match=r"6 rows .* 8 local"):
        jax_sharding.global_batch(small, mesh)
    mesh2 = jax_sharding.data_mesh(("data", "fsdp"), (4, 2))
    # 6 rows do not split over data (4) either, but do over fsdp (2).
    with pytest.raises(mdc.DataError, match=r"6 rows .* 4 local"):
        jax_sharding.global_batch(small, mesh2, batch_axes="data")
    out = jax_sharding.global_batch(small, mesh2, batch_axes="fsdp")
    np.testing.assert_array_equal(np.asarray(out["tokens"]), gpt_batch["tokens"][:6])


def test_batch_sizes_disagree(gpt_batch):
    mesh = jax_sharding.data_mesh()
    bad = dict(gpt_batch)
    bad["labels"] = gpt_batch["labels"][:8]
    with pytest.raises(mdc.DataError, match=r"disagree.*'tokens': 16.*'labels': 8"):
        jax_sharding.global_batch(bad, mesh)


@pytest.mark.parametrize(
    ("value", "pattern"),
    [
        ([[1, 2]] * 8, r"batch\['x'\] is a list, not an array"),
        (3, r"is a int, not an array"),
        (np.int32(3), r"is a int32, not an array"),
        (np.array(3), r"0-d"),
    ],
)
def test_value_not_an_array(gpt_batch, value, pattern):
    mesh = jax_sharding.data_mesh()
    bad = {"tokens": gpt_batch["tokens"], "x": value}
    with pytest.raises(mdc.DataError, match=pattern):
        jax_sharding.global_batch(bad, mesh)


def test_batch_not_a_mapping_or_empty():
    mesh = jax_sharding.data_mesh()
    with pytest.raises(mdc.DataError, match="mapping"):
        jax_sharding.global_batch([np.zeros((8, 2))], mesh)
    with pytest.raises(mdc.DataError, match="empty"):
        jax_sharding.global_batch({}, mesh)


def test_data_mesh_errors():
    with pytest.raises(mdc.DataError, match=r"\(3, 2\).*8 devices"):
        jax_sharding.data_mesh(("data", "fsdp"), (3, 2))
    with pytest.raises(mdc.DataError, match="2 axes"):
        jax_sharding.data_mesh(("data",), (4, 2))
    assert jax_sharding.data_mesh(("data", "fsdp")).shape == {"data": 8, "fsdp": 1}


def test_core_constants_are_put_once_and_stay_correct(gpt_batch):
    mesh = jax_sharding.data_mesh()
    constant = gpt_batch["position_ids"]
    assert not constant.flags.writeable and constant.flags.owndata  # the core's constant
    first = jax_sharding.global_batch(gpt_batch, mesh)
    second = jax_sharding.global_batch(gpt_batch, mesh)
    assert second["position_ids"] is first["position_ids"]  # reused, not copied again
    assert second["tokens"] is not first["tokens"]  # views are always put afresh
    np.testing.assert_array_equal(np.asarray(second["position_ids"]), constant)
    first["position_ids"].delete()  # a donated/deleted array is rebuilt, not handed out
    third = jax_sharding.global_batch(gpt_batch, mesh)
    np.testing.assert_array_equal(np.asarray(third["position_ids"]), constant)
    writable = np.array(constant)  # a writable array is never cached
    a = jax_sharding.global_batch({"position_ids": writable}, mesh)["position_ids"]
    writable += 1
    b = jax_sharding.global_batch({"position_ids": writable}, mesh)["position_ids"]
    np.testing.assert_array_equal(np.asarray(b), np.asarray(a) + 1)
