"""A trainer killed mid-iteration without clean-up (``kill -9``, as the OOM killer and
preemption do) leaves no worker process and no shared-memory file of ours 10 s later:
Grain ``mp_prefetch`` with 2 workers, ``grain.DataLoader`` over a ``GrainSource`` (2
workers), torch ``DataLoader(TorchDataset)`` and
``torch_data.loader`` with 2 workers, persistent and not. The trainer runs in a session
of its own; every process of that session must be gone (Grain's resource tracker
included), and every ``/dev/shm/megadata-*`` file made by one of them. The 10 s are a
watchdog, not a timing assertion."""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from adapter_helpers import deadline, write_corpus
from interrupt_helpers import session_processes

from megadata_core.handover import shm as shm_names

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
TRAINER = HERE / "killed_trainer.py"
AFTER_KILL_S = 10


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("killed")
    return write_corpus(str(root / "corpus"), seed=0, documents=400), str(root / "cache")


def our_files(pids: set[int]) -> list[str]:
    """The shared-memory files of ours that processes ``pids`` made."""
    space = shm_names.namespace()
    return [
        name for name in os.listdir(shm_names.shm_dir())
        if (made := shm_names.owner(name)) is not None and made[0] == space and made[1] in pids
    ]


def _ready(process: subprocess.Popen, seconds: float) -> None:
    """Wait for the trainer's ``ready`` line (watchdog ``seconds``)."""
    readable, _, _ = select.select([process.stdout], [], [], seconds)
    line = process.stdout.readline() if readable else ""
    assert line.strip() == "ready", f"the trainer did not start (exit {process.poll()})"


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")
@deadline(180)
@pytest.mark.parametrize(
    "kind",
    ["grain", "grain-loader", "torch", "torch-persistent", "loader", "loader-persistent"],
)
def test_a_killed_trainer_leaves_no_worker_and_no_shared_memory(corpus, kind):
    if not kind.startswith("grain"):
        pytest.importorskip("torch")
    paths = [str(ROOT), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
    process = subprocess.Popen(
        [sys.executable, str(TRAINER), kind, *corpus], stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL, text=True, start_new_session=True, env=env, cwd=HERE,
    )
    try:
        _ready(process, 120)
        time.sleep(0.2)  # mid-iteration: batches in flight
        family = session_processes(process.pid)
        assert len(family - {process.pid}) >= 2, family  # the 2 workers (+ Grain's tracker)
        os.kill(process.pid, signal.SIGKILL)
        process.wait()
        left, files = family, our_files(family)
        end = time.monotonic() + AFTER_KILL_S
        while (left or files) and time.monotonic() < end:
            time.sleep(0.05)
            left, files = session_processes(process.pid), our_files(family)
        assert not left, f"{kind}: processes {sorted(left)} outlive the killed trainer"
        assert not files, f"{kind}: shared-memory files {files} outlive the killed trainer"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)  # whatever a failure left
        process.stdout.close()
