"""megadata_core.handover.orphans: a worker ends when its parent ends, even killed with
``kill -9``, and removes the shared-memory files it made that nobody took."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from megadata_core.handover import orphans, shm

ROOT = Path(__file__).resolve().parents[2]
WATCHDOG_S = 10

#: A parent that starts one child (which calls exit_with_parent, makes a file and sleeps),
#: prints the child's pid and the file, then sleeps until killed.
PARENT = """
import multiprocessing, sys, time
import numpy as np
from megadata_core.handover import orphans, shm

def child(connection):
    orphans.exit_with_parent()
    orphans.exit_with_parent()  # idempotent
    connection.send(shm.write_segment({"x": np.arange(5)}).path)
    time.sleep(600)

if __name__ == "__main__":
    parent, end = multiprocessing.Pipe()
    worker = multiprocessing.get_context(sys.argv[1]).Process(target=child, args=(end,))
    worker.start()
    print(worker.pid, parent.recv(), flush=True)
    time.sleep(600)
"""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in "ZX"


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")
@pytest.mark.parametrize("start_method", ["fork", "spawn"])
def test_the_child_ends_and_cleans_up_when_its_parent_is_killed(tmp_path, start_method):
    script = tmp_path / "parent.py"
    script.write_text(PARENT)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen(
        [sys.executable, str(script), start_method], stdout=subprocess.PIPE, text=True,
        env=env, start_new_session=True,
    )
    try:
        pid, path = process.stdout.readline().split()
        child = int(pid)
        assert _alive(child) and os.path.exists(path)
        os.kill(process.pid, signal.SIGKILL)
        process.wait()
        end = time.monotonic() + WATCHDOG_S  # a watchdog, not a timing check
        while (_alive(child) or os.path.exists(path)) and time.monotonic() < end:
            time.sleep(0.05)
        assert not _alive(child), "the child outlived its killed parent"
        assert not os.path.exists(path), "the child's unread file outlived it"
    finally:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        process.stdout.close()


def test_the_parent_itself_is_not_watched():
    assert not orphans.watching()  # only a process that called exit_with_parent
    assert shm.PREFIX == "megadata-"
