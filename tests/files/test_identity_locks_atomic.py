"""The ground's file helpers: identities and the racy-time rule, flock locks, and the
atomic write that every writer of the core uses."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from megadata_core.files import atomic, identity


def test_identity_changes_with_a_write_in_place_and_a_replace(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(b"abc")
    first = identity.path_identity(str(path))
    with open(path, "r+b") as stream:  # same size, new bytes
        stream.write(b"x")
    assert identity.path_identity(str(path)) != first
    other = tmp_path / "g"
    other.write_bytes(b"xbc")
    before = os.stat(path)
    os.replace(other, path)
    after = os.stat(path)
    assert identity.which_file(after) != identity.which_file(before)
    assert identity.identity(after)[:2] == identity.which_file(after)
    assert identity.identity(after)[2:] == identity.contents_stamp(after)


def test_a_file_is_settled_once_either_stamp_is_old(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(b"abc")
    now = time.time_ns()
    assert not identity.settled([os.stat(path)], now)  # written just now
    old = now - 10 * identity.RACY_NS
    os.utime(path, ns=(old, old))  # mtime old, ctime now: a later write shows in mtime
    assert identity.settled([os.stat(path)], now)
    assert not identity.settled([os.stat(path)], old + identity.RACY_NS - 1)
    assert identity.settled([], now)


def test_an_exclusive_lock_is_exclusive(tmp_path):
    path = str(tmp_path / "sub" / "x.lock")
    with atomic.exclusive(path) as held:
        assert held and os.path.exists(path)
        with pytest.raises(BlockingIOError):
            atomic.try_exclusive(path)  # another open file description of the same file
    handle = atomic.try_exclusive(path)  # free again
    try:
        probe = (
            "import sys; from megadata_core.files import atomic\n"
            "try:\n    atomic.try_exclusive(sys.argv[1])\nexcept BlockingIOError:\n"
            "    sys.exit(3)\n"
        )
        result = subprocess.run([sys.executable, "-c", probe, path], timeout=60)
        assert result.returncode == 3  # held by this process
    finally:
        os.close(handle)


def test_an_exclusive_lock_in_a_read_only_place_yields_false(tmp_path):
    if os.geteuid() == 0:
        pytest.skip("root writes into read-only directories")
    locked = tmp_path / "ro"
    locked.mkdir()
    locked.chmod(0o555)
    try:
        with atomic.exclusive(str(locked / "x.lock")) as held:
            assert held is False
    finally:
        locked.chmod(0o755)


@pytest.mark.parametrize("durable", [False, True])
def test_an_atomic_write_is_whole_or_absent(tmp_path, monkeypatch, durable):
    path = str(tmp_path / "record.json")
    synced = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: synced.append(fd) or real_fsync(fd))
    atomic.write_atomically(path, lambda stream: stream.write(b"one"), durable=durable)
    assert open(path, "rb").read() == b"one" and bool(synced) == durable

    def fails(stream):
        stream.write(b"partial")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError):
        atomic.write_atomically(path, fails)
    assert open(path, "rb").read() == b"one"
    assert os.listdir(tmp_path) == ["record.json"]  # the temporary is gone
    umask = os.umask(0)
    os.umask(umask)
    assert os.stat(path).st_mode & 0o777 == 0o666 & ~umask
