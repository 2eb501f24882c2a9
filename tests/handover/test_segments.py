"""megadata_core.handover.shm: a batch in one shared-memory file,
handed over by name; files of dead producers swept, a producer's own removed at exit."""

from __future__ import annotations

import multiprocessing
import os
import pickle
import signal

import numpy as np
import pytest

from megadata_core import DataError
from megadata_core.handover import shm


def _batch() -> dict[str, np.ndarray]:
    return {
        "text": np.arange(33, dtype=np.uint16).reshape(3, 11),
        "mask": np.array([[True, False, True]]),
        "ids": np.array([70_000, 1], dtype=np.int32),
        "scalar": np.array(2.5),
        "empty": np.zeros((0, 4), np.int64),
        "strided": np.arange(20, dtype=np.int64)[::2],
    }


def test_round_trip_read_only_and_the_name_goes_once_mapped():
    ref = shm.write_segment(_batch())
    ref = pickle.loads(pickle.dumps(ref))  # what travels: a path and the layout
    assert os.path.exists(ref.path)
    assert shm.owner(ref.path) == (shm.namespace(), os.getpid())
    out = shm.read_segment(ref)
    assert not os.path.exists(ref.path)
    for key, want in _batch().items():
        assert out[key].dtype == want.dtype and out[key].shape == want.shape
        np.testing.assert_array_equal(out[key], want)
        assert not out[key].flags.writeable
    assert all(offset % shm.ALIGN == 0 for _, offset, _, _ in ref.entries)
    with pytest.raises(DataError, match="shared memory is gone before it was read"):
        shm.read_segment(ref)


def test_no_room_means_shipping_bytes(monkeypatch):
    def full(descriptor, buffers):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "writev", full)
    assert shm.write_segment(_batch()) is None
    mine = (shm.namespace(), os.getpid())
    assert not [n for n in os.listdir(shm.shm_dir()) if shm.owner(n) == mine]


def test_owner_reads_only_our_names():
    assert shm.owner("/dev/shm/megadata-ring-4026531836-123-abc") == (4026531836, 123)
    for name in ("psm_1234", "megadata-ring-123-abc", "megadata-x-y-z-w", "other-a-1-2-x"):
        assert shm.owner(name) is None


def _make_files(connection) -> None:
    connection.send(shm.write_segment({"x": np.arange(4)}).path)
    connection.recv()  # killed while waiting here


def test_files_of_killed_producers_are_swept_and_others_kept():
    context = multiprocessing.get_context("spawn")
    parent, child = context.Pipe()
    producer = context.Process(target=_make_files, args=(child,))
    producer.start()
    orphaned = parent.recv()
    os.kill(producer.pid, signal.SIGKILL)  # no clean-up of its own
    producer.join(30)
    assert os.path.exists(orphaned)
    live = shm.write_segment({"x": np.arange(2)})  # this process's: alive, kept
    foreign = os.path.join(shm.shm_dir(), f"megadata-batch-1-{producer.pid}-feed")
    open(foreign, "wb").close()  # a dead pid of another pid namespace: not ours to judge
    try:
        removed = shm.sweep_dead()
        assert orphaned in removed and not os.path.exists(orphaned)
        assert os.path.exists(live.path) and os.path.exists(foreign)
    finally:
        shm.remove(foreign)
        shm.remove(live.path)


def _leave_files(count: int) -> None:
    for _ in range(count):
        shm.write_segment({"x": np.arange(3)})  # never read


def test_a_producer_removes_what_nobody_read_at_exit():
    context = multiprocessing.get_context("spawn")
    producer = context.Process(target=_leave_files, args=(3,))
    producer.start()
    producer.join(30)
    assert producer.exitcode == 0
    space = shm.namespace()
    assert not [n for n in os.listdir(shm.shm_dir())
                if shm.owner(n) == (space, producer.pid)]
