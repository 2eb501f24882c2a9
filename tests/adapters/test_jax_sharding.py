"""megadata_adapters.frameworks.jax_sharding: per-process numpy batches -> global jax.Arrays on a
mesh."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import jax
import numpy as np
import pytest
from corpora import write_corpus
from jax.sharding import NamedSharding, PartitionSpec

import megadata_core as mdc
from megadata_adapters.frameworks import jax_sharding


def test_eight_simulated_devices():
    # tests/adapters/conftest.py sets XLA_FLAGS before jax starts; everything below needs it.
    assert jax.device_count() == 8


@pytest.fixture(scope="module")
def gpt_batch(tmp_path_factory):
    prefix = str(tmp_path_factory.mktemp("jax_corpus") / "corpus")
    rng = np.random.default_rng(7)
    write_corpus(prefix, rng.integers(5, 40, size=60), rng, low=1, vocab=1000)
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
    np.testing.assert_array_equal(np.asarray(a), constant)
    writable += 1  # (JAX may alias an aligned host array on the CPU: `a` is not read again)
    b = jax_sharding.global_batch({"position_ids": writable}, mesh)["position_ids"]
    assert b is not a
    np.testing.assert_array_equal(np.asarray(b), constant + 1)


# -- prefetch_to_device -------------------------------------------------------------------


def _batches(count: int, rows: int = 8, width: int = 6):
    for step in range(count):
        yield {
            "tokens": np.arange(rows * width, dtype=np.int32).reshape(rows, width) + step,
            "loss_mask": np.full((rows, width), step, np.float32),
        }


def test_prefetch_to_device_yields_global_batches_in_order():
    mesh = jax_sharding.data_mesh()
    with jax_sharding.prefetch_to_device(_batches(5), mesh, size=2) as prefetched:
        got = list(prefetched)
    assert len(got) == 5
    for step, (arrays, want) in enumerate(zip(got, _batches(5))):
        for key, value in want.items():
            assert isinstance(arrays[key], jax.Array)
            assert arrays[key].sharding.spec == PartitionSpec(("data",))
            np.testing.assert_array_equal(np.asarray(arrays[key]), value, err_msg=f"{step} {key}")


def test_prefetch_to_device_stays_size_ahead_and_closes():
    mesh = jax_sharding.data_mesh()
    pulled = []

    def source():
        for batch in _batches(100):
            pulled.append(1)
            yield batch

    prefetched = jax_sharding.prefetch_to_device(source(), mesh, size=3)
    next(prefetched)
    deadline_s = 20
    start = time.monotonic()
    while len(pulled) < 4 and time.monotonic() - start < deadline_s:
        time.sleep(0.01)
    time.sleep(0.2)
    assert 4 <= len(pulled) <= 5  # one consumed + 3 on device (+ 1 being made)
    prefetched.close()
    assert not prefetched._thread.is_alive()
    with pytest.raises(StopIteration):
        next(prefetched)


def test_prefetch_to_device_errors():
    mesh = jax_sharding.data_mesh()
    with pytest.raises(mdc.DataError, match="size"):
        jax_sharding.prefetch_to_device(_batches(1), mesh, size=0)

    def failing():
        yield from _batches(1)
        raise RuntimeError("source broke")

    with jax_sharding.prefetch_to_device(failing(), mesh) as prefetched:
        next(prefetched)
        with pytest.raises(RuntimeError, match="source broke"):
            next(prefetched)
    bad = [{"tokens": np.zeros((3, 4), np.int32)}]  # 3 rows over 8 devices
    with jax_sharding.prefetch_to_device(bad, mesh) as prefetched:
        with pytest.raises(mdc.DataError, match="does not divide"):
            next(prefetched)


# -- two processes, one global array --------------------------------------------------------

_PROCESS = textwrap.dedent(
    """
    import sys
    import jax
    import numpy as np
    sys.path.insert(0, {root!r})
    from megadata_adapters.frameworks import jax_sharding

    process_id, port = int(sys.argv[1]), int(sys.argv[2])
    jax.distributed.initialize(
        coordinator_address=f"127.0.0.1:{{port}}", num_processes=2, process_id=process_id,
        initialization_timeout=60,
    )
    assert jax.process_count() == 2 and jax.device_count() == 8
    assert jax.local_device_count() == 4
    width = 5
    everything = np.arange(16 * width, dtype=np.int32).reshape(16, width)
    mine = everything[process_id * 8 : (process_id + 1) * 8]  # this process's rows
    mesh = jax_sharding.data_mesh(("data",))
    arrays = jax_sharding.global_batch({{"tokens": mine}}, mesh)
    tokens = arrays["tokens"]
    assert tokens.shape == (16, width), tokens.shape
    rows = []
    for shard in tokens.addressable_shards:
        np.testing.assert_array_equal(np.asarray(shard.data), everything[shard.index])
        rows.extend(range(*shard.index[0].indices(16)))
    assert sorted(rows) == list(range(process_id * 8, (process_id + 1) * 8)), rows
    print("OK", process_id, sorted(rows)[0], sorted(rows)[-1])
    jax.distributed.shutdown()
    """
)


def test_two_processes_hold_their_own_rows_of_one_global_array(tmp_path):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    root = str(Path(__file__).resolve().parents[2])
    script = tmp_path / "process.py"
    script.write_text(_PROCESS.format(root=root))
    env = dict(os.environ)
    env["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"
    env["JAX_PLATFORMS"] = "cpu"
    processes = [
        subprocess.Popen(
            [sys.executable, str(script), str(rank), str(port)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=env,
            text=True,
        )
        for rank in range(2)
    ]
    outputs = []
    try:
        for process in processes:
            output, _ = process.communicate(timeout=180)
            outputs.append(output)
    finally:
        for process in processes:
            process.kill()
    for rank, (process, output) in enumerate(zip(processes, outputs)):
        assert process.returncode == 0, output[-3000:]
        assert f"OK {rank} {rank * 8} {rank * 8 + 7}" in output, output[-3000:]
