"""megadata_core.handover.shm (a ring): arrays handed over through reused shared memory."""

from __future__ import annotations

import multiprocessing
import os
import pickle

import numpy as np
import pytest

from megadata_core.handover import shm


def test_put_and_view_round_trip_and_reuse_slots():
    producer, consumer = shm.ProducerRing(3), shm.ConsumerRings()
    arrays = [np.arange(12, dtype=np.int32).reshape(3, 4) + 100 * k for k in range(7)]
    refs = []
    for array in arrays:
        ref = producer.put(array)
        refs.append(ref)
        view = consumer.view(ref)
        np.testing.assert_array_equal(view, array)
        assert view.dtype == array.dtype and not view.flags.writeable
    assert [ref.slot for ref in refs] == [0, 1, 2, 0, 1, 2, 0]  # k-th put -> slot k % 3
    assert not os.path.exists(refs[0].path)  # the consumer removed the name once mapped
    np.testing.assert_array_equal(consumer.view(refs[4]), arrays[4])  # slot 1 not reused yet
    smaller = producer.put(np.ones(5, np.int8))
    np.testing.assert_array_equal(consumer.view(smaller), np.ones(5, np.int8))
    assert producer.put(np.zeros(100, np.int32)) is None  # larger than a slot: ship bytes


def test_a_pickled_producer_starts_empty():
    producer = shm.ProducerRing(4)
    producer.put(np.zeros(3))
    copy = pickle.loads(pickle.dumps(producer))
    assert copy.slots == 4 and copy.path is None
    with pytest.raises(ValueError):
        shm.ProducerRing(0)


def _produce(connection, count: int) -> None:
    ring = shm.ProducerRing(2)
    for k in range(count):
        connection.send(ring.put(np.full((4, 5), k, dtype=np.int64)))
        if connection.recv() != "done":  # the consumer is done with put k - 1
            return
    connection.send(ring.path)


def _start_producer(count: int):
    """(pipe end, process): a spawned producer of ``count`` arrays (see _produce)."""
    context = multiprocessing.get_context("spawn")
    parent, child = context.Pipe()
    worker = context.Process(target=_produce, args=(child, count))
    worker.start()
    return parent, worker


def test_across_processes_and_cleanup():
    parent, worker = _start_producer(5)
    consumer = shm.ConsumerRings()
    for k in range(5):
        ref = parent.recv()
        np.testing.assert_array_equal(consumer.view(ref), np.full((4, 5), k))
        parent.send("done")
    path = parent.recv()
    worker.join(30)
    assert worker.exitcode == 0 and not os.path.exists(path)
    assert len(consumer) == 1
    here = shm.ProducerRing(1)  # (a ring is removed when its producer object goes)
    consumer.view(here.put(np.zeros(2)))  # a new ring: the dead producer's is dropped
    assert len(consumer) == 1


def test_the_producer_removes_a_ring_nobody_mapped():
    parent, worker = _start_producer(1)
    ref = parent.recv()
    assert os.path.exists(ref.path)
    parent.send("stop")
    worker.join(30)
    assert worker.exitcode == 0 and not os.path.exists(ref.path)


def test_no_room_for_the_ring_means_shipping_bytes(monkeypatch):
    def full(descriptor, offset, length):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "posix_fallocate", full, raising=False)
    producer = shm.ProducerRing(2)
    assert producer.put(np.zeros(10)) is None and producer.failed
    assert producer.put(np.zeros(10)) is None  # tried once, not on every batch
    assert not [name for name in os.listdir(shm.shm_dir()) if str(os.getpid()) in name]
