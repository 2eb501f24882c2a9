"""Temporary files: named after their writer, removed once that writer is dead, never while
it lives; final files get the umask's mode; unwritable outputs are DataErrors."""

from __future__ import annotations

import errno
import os
import pathlib
import signal
import subprocess
import sys

import numpy as np
import pytest

import megadata_core as mdc
from megadata_core.cache import entries as cache
from megadata_core.files import atomic as temp_files

REPO = pathlib.Path(__file__).resolve().parents[1]

# Opens a writer on argv[1], writes, then either dies by SIGKILL ("die") or waits for a
# line on stdin and finalizes ("live").
_WRITER = """
import os, signal, sys
import numpy as np
import megadata_core as mdc
writer = mdc.IndexedDatasetWriter(sys.argv[1], np.uint16)
writer.add_item(np.arange(1000, dtype=np.uint16))
writer.end_document()
print("ready", flush=True)
if sys.argv[2] == "die":
    os.kill(os.getpid(), signal.SIGKILL)
sys.stdin.readline()
writer.finalize()
"""


def _python(*args, **kwargs):
    return [sys.executable, "-c", *args], {"cwd": REPO, **kwargs}


def _temps(directory) -> list[str]:
    return sorted(name for name in os.listdir(directory) if name.endswith(".tmp"))


@pytest.fixture
def umask():
    """umask(value): set the process umask for the test, restored afterwards."""
    saved = os.umask(0o022)
    os.umask(saved)
    yield os.umask
    os.umask(saved)


@pytest.mark.parametrize("mask", [0o002, 0o027])
def test_final_files_get_the_umask_mode(tmp_path, umask, mask):
    umask(mask)
    prefix = str(tmp_path / "corpus")
    with mdc.IndexedDatasetWriter(prefix, np.uint16) as writer:
        writer.add_document([1, 2, 3], [3])
    for suffix in (".bin", ".idx"):
        assert os.stat(prefix + suffix).st_mode & 0o777 == 0o666 & ~mask
    mdc.merge_datasets([prefix, prefix], str(tmp_path / "merged"))
    assert os.stat(tmp_path / "merged.idx").st_mode & 0o777 == 0o666 & ~mask


def test_cache_files_get_the_umask_mode(tmp_path, umask):
    umask(0o002)
    cache.save_cached(str(tmp_path), {"what": "umask"}, "train", {"a": np.arange(5)})
    files = os.listdir(tmp_path)
    assert any(name.endswith(".npy") for name in files)
    for name in files:
        if not name.endswith(".lock"):
            assert os.stat(tmp_path / name).st_mode & 0o777 == 0o664, name


def test_temp_names_carry_the_writer(tmp_path):
    path = temp_files.temp_path(str(tmp_path), "corpus.bin")
    name = os.path.basename(path)
    assert name.startswith(".corpus.bin.") and name.endswith(".tmp")
    assert f".{os.getpid()}@" in name
    long_label = "x" * 300 + ".bin"
    long_name = os.path.basename(temp_files.temp_path(str(tmp_path), long_label))
    assert len(long_name) <= 255
    fd, created = temp_files.create_file(str(tmp_path), long_label)
    os.close(fd)
    assert os.path.exists(created)
    assert temp_files.remove_stale(str(tmp_path), [long_label]) == []  # ours: we live


def test_new_writer_removes_dead_writers_temps_but_not_live_ones(tmp_path):
    prefix = str(tmp_path / "corpus")
    args, kwargs = _python(_WRITER, prefix, "die")
    died = subprocess.Popen(args, stdout=subprocess.DEVNULL, **kwargs)
    assert died.wait(timeout=120) == -signal.SIGKILL
    dead = _temps(tmp_path)
    assert len(dead) == 3  # .bin, .lengths, .documents
    assert all(f".{died.pid}@" in name for name in dead)

    args, kwargs = _python(_WRITER, prefix, "live")
    live = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            **kwargs)
    try:
        assert live.stdout.readline().strip() == "ready"
        live_temps = sorted(set(_temps(tmp_path)) - set(dead))
        assert len(live_temps) == 3 and all(f".{live.pid}@" in n for n in live_temps)
        # same label, written on another host: whether its writer lives cannot be told
        foreign = tmp_path / ".corpus.bin.4242@elsewhere~1.0123abcd.tmp"
        foreign.write_bytes(b"x")
        # a dead writer's temp of another prefix is not this writer's to remove
        other = sorted(n.replace(".corpus.", ".other.") for n in dead)[0]
        (tmp_path / other).write_bytes(b"x")

        with mdc.IndexedDatasetWriter(prefix, np.uint16) as writer:
            mine = sorted(set(_temps(tmp_path)) - set(live_temps) - {foreign.name, other})
            assert len(mine) == 3 and all(f".{os.getpid()}@" in n for n in mine)
            writer.add_document([7, 8], [2])
        assert _temps(tmp_path) == sorted([*live_temps, foreign.name, other])
        assert mdc.IndexedDataset(prefix)[0].tolist() == [7, 8]

        live.stdin.write("\n")
        live.stdin.close()
        assert live.wait(timeout=120) == 0
    finally:
        live.kill()
        live.wait()
    assert _temps(tmp_path) == sorted([foreign.name, other])
    assert mdc.IndexedDataset(prefix)[0].tolist() == list(range(1000))


def test_failed_finalize_leaves_no_temp(tmp_path, monkeypatch):
    def no_space(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    writer = mdc.IndexedDatasetWriter(str(tmp_path / "corpus"), np.uint16)
    writer.add_document([1, 2], [2])
    monkeypatch.setattr(os, "fsync", no_space)
    with pytest.raises(OSError, match="No space"):
        writer.finalize()
    assert os.listdir(tmp_path) == []


def test_name_too_long_is_a_data_error(tmp_path):
    prefix = str(tmp_path / ("c" * 253))  # c...c.bin is 257 bytes
    with pytest.raises(mdc.DataError, match=r"c{253}: file name .* longer than the 255"):
        mdc.IndexedDatasetWriter(prefix, np.uint16)
    assert os.listdir(tmp_path) == []


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only directories")
def test_unwritable_directory_is_a_data_error(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    try:
        with pytest.raises(mdc.DataError, match=rf"cannot write in output directory {locked}"):
            mdc.IndexedDatasetWriter(str(locked / "corpus"), np.uint16)
    finally:
        locked.chmod(0o755)
    assert os.listdir(locked) == []


# Writes argv[1] through the atomic write the cache uses and dies by SIGKILL half-way.
_CACHE_WRITER = """
import os, signal, sys
from megadata_core.files.atomic import write_atomically
def write(stream):
    stream.write(b"partial")
    stream.flush()
    os.kill(os.getpid(), signal.SIGKILL)
write_atomically(sys.argv[1], write)
"""


def test_next_cache_build_removes_a_killed_builders_temp(tmp_path):
    description, arrays = {"what": "killed"}, {"document_index": np.arange(10)}
    probe = tmp_path / "probe"
    cache.save_cached(str(probe), description, "train", arrays)
    npy = next(name for name in os.listdir(probe) if name.endswith(".npy"))
    entry = tmp_path / "entry"
    entry.mkdir()
    args, kwargs = _python(_CACHE_WRITER, str(entry / npy))
    died = subprocess.run(args, capture_output=True, text=True, timeout=120, **kwargs)
    assert died.returncode == -signal.SIGKILL, died.stderr
    assert len(_temps(entry)) == 1
    loaded = cache.save_cached(str(entry), description, "train", arrays)
    assert loaded["document_index"].tolist() == list(range(10))
    assert _temps(entry) == []


def test_remove_own_removes_this_process_temps_only(tmp_path):
    fd, ours = temp_files.create_file(str(tmp_path), "corpus.bin")
    os.close(fd)
    own_directory = temp_files.create_directory(str(tmp_path), "corpus.partial")
    (tmp_path / os.path.basename(own_directory) / "inside").write_bytes(b"x")
    other = tmp_path / os.path.basename(ours).replace(f".{os.getpid()}@", ".1@")
    other.write_bytes(b"another writer's")
    unrelated = temp_files.create_directory(str(tmp_path), "other.partial")
    removed = temp_files.remove_own(str(tmp_path), ["corpus.bin", "corpus.partial"])
    assert sorted(removed) == sorted([ours, own_directory])
    assert sorted(os.listdir(tmp_path)) == sorted([other.name, os.path.basename(unrelated)])
