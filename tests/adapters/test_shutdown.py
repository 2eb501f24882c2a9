"""Closing a loader stops its workers at once: close(), dropping the last reference, and
leaving a ``with`` block, for the Grain batched pipeline, the torch loaders and the JAX
device prefetcher. A watchdog fails a close that hangs (no timing is asserted)."""

from __future__ import annotations

import gc
import multiprocessing

import numpy as np
import pytest
from adapter_helpers import deadline, finishes_within, gpt_dataset, write_corpus

#: Far above a prompt close (well under a second) and far below the 25 s that Grain's
#: join waits before it kills a worker that does not exit.
WATCHDOG_S = 10

#: Micro-batches of 64 x 1025 uint16 tokens: 131 KB, twice a Linux pipe's buffer.
SEQ, MBS = 1024, 64


@pytest.fixture(scope="module")
def big(tmp_path_factory):
    """Samples of 1024 tokens: a micro-batch larger than an OS pipe holds."""
    root = tmp_path_factory.mktemp("shutdown")
    prefix = write_corpus(str(root / "corpus"), seed=0, documents=40_000)
    return gpt_dataset(prefix, str(root / "cache"), random_seed=1, sequence_length=SEQ)


def _new_children(before: set) -> list:
    return [p for p in multiprocessing.active_children() if p.pid not in before]


def _end(kind: str, holder: list) -> None:
    """End the iterator in ``holder[0]`` the way ``kind`` says."""
    if kind == "close":
        holder[0].close()
    elif kind == "del":
        holder.clear()  # the last reference
        gc.collect()
    else:  # "with": the block was entered by the caller; leave it
        holder[0].__exit__(None, None, None)


ENDINGS = ["close", "del", "with"]


# -- Grain ---------------------------------------------------------------------------------


@deadline(120)
@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("ending", ENDINGS)
def test_grain_batched_iterator_stops_its_workers(big, workers, ending):
    grain_source = pytest.importorskip("megadata_adapters.frameworks.grain_source")
    before = {p.pid for p in multiprocessing.active_children()}
    iterator = iter(grain_source.batched_dataset(big, micro_batch_size=MBS, worker_count=workers))
    if ending == "with":
        assert iterator.__enter__() is iterator
    first = next(iterator)
    assert first["tokens"].shape == (MBS, SEQ)
    started = _new_children(before)
    assert len(started) == workers
    del first
    holder = [iterator]
    del iterator
    finishes_within(WATCHDOG_S, lambda: _end(ending, holder), f"Grain {ending} ({workers} workers)")
    finishes_within(
        WATCHDOG_S, lambda: [p.join() for p in started], f"Grain workers after {ending}"
    )
    assert not any(p.is_alive() for p in started)


def test_grain_iterator_in_a_with_block(big):
    grain_source = pytest.importorskip("megadata_adapters.frameworks.grain_source")
    pipeline = grain_source.batched_dataset(big, micro_batch_size=4)
    with iter(pipeline) as iterator:
        batch = next(iterator)
        state = iterator.get_state()
    assert batch["tokens"].shape == (4, SEQ)
    assert state["consumed_samples"] == 4


# -- JAX device prefetcher --------------------------------------------------------------------


def _endless(closed: list):
    """Numpy batches for an 8-device mesh, forever; records in ``closed`` that it was closed
    (what a Grain or torch iterator given as the source would do: stop its workers)."""
    step = 0
    try:
        while True:
            yield {"tokens": np.full((8, 4), step, np.int32)}
            step += 1
    finally:
        closed.append(True)


@pytest.mark.parametrize("ending", ENDINGS)
def test_prefetch_to_device_stops_its_thread_and_closes_its_source(ending):
    jax_sharding = pytest.importorskip("megadata_adapters.frameworks.jax_sharding")
    closed: list = []
    prefetched = jax_sharding.prefetch_to_device(_endless(closed), jax_sharding.data_mesh())
    if ending == "with":
        assert prefetched.__enter__() is prefetched
    assert int(np.asarray(next(prefetched)["tokens"])[0, 0]) == 0
    thread = prefetched._thread
    holder = [prefetched]
    del prefetched
    finishes_within(WATCHDOG_S, lambda: _end(ending, holder), f"prefetch_to_device {ending}")
    finishes_within(WATCHDOG_S, thread.join, f"prefetch_to_device thread after {ending}")
    assert not thread.is_alive()
    assert closed == [True]  # the source iterator was closed too


# -- torch ------------------------------------------------------------------------------------


def _torch_loader(big, kind: str, persistent: bool):
    torch_data = pytest.importorskip("megadata_adapters.frameworks.torch_data")
    from megadata_core.samplers import PretrainingSampler

    sampler = PretrainingSampler(len(big), 0, 8, 0, 1)
    make = torch_data.StatefulLoader if kind == "stateful" else torch_data.loader
    # a fork server: forking this process (JAX's threads may run) could deadlock
    return make(big, sampler, num_workers=2, persistent_workers=persistent,
                multiprocessing_context="forkserver")


@deadline(120)
@pytest.mark.parametrize(
    "kind,persistent", [("loader", False), ("loader", True), ("stateful", True)]
)
@pytest.mark.parametrize("ending", ENDINGS)
def test_torch_loader_stops_its_workers(big, kind, persistent, ending):
    torch_data = pytest.importorskip("megadata_adapters.frameworks.torch_data")
    before = {p.pid for p in multiprocessing.active_children()}
    rings = len(torch_data._RINGS)
    data = _torch_loader(big, kind, persistent)
    if ending == "with":
        assert data.__enter__() is data
    batches = iter(data)
    assert tuple(next(batches)["tokens"].shape) == (8, SEQ)
    workers = [p for p in _new_children(before) if "forkserver" not in repr(p)]
    assert len(workers) == 2
    holder = [data]
    if ending == "del":  # the loader and its iterator: the last references
        del data, batches
    finishes_within(WATCHDOG_S, lambda: _end(ending, holder), f"torch {kind} {ending}")
    finishes_within(
        WATCHDOG_S, lambda: [p.join() for p in workers], f"torch workers after {ending}"
    )
    assert not any(p.is_alive() for p in workers)
    assert len(torch_data._RINGS) <= rings  # the workers' shared-memory rings are let go


@deadline(60)
def test_torch_iterator_close_and_with(big):
    torch_data = pytest.importorskip("megadata_adapters.frameworks.torch_data")
    data = _torch_loader(big, "loader", persistent=False)
    before = {p.pid for p in multiprocessing.active_children()}
    with iter(data) as batches:
        next(batches)
        workers = [p for p in _new_children(before) if "forkserver" not in repr(p)]
        assert len(workers) == 2
    finishes_within(WATCHDOG_S, lambda: [p.join() for p in workers], "torch iterator with-exit")
    batches = iter(data)
    next(batches)
    finishes_within(WATCHDOG_S, batches.close, "torch iterator close")
    with pytest.raises(StopIteration):
        next(batches)
    assert isinstance(data, torch_data.Loader)
