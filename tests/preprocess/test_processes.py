"""megadata_core.preprocess.processes.ProcessPool: answers in order, errors raised in the
caller, a dead worker is an error (not a hang), and leaving on an exception kills the
workers at once."""

from __future__ import annotations

import os
import signal
import time

import pytest

from megadata_core import DataError
from megadata_core.preprocess.processes import ProcessPool


def _square(x: int) -> int:
    if x < 0:
        raise DataError(f"x: {x} is negative")
    return x * x


def _sleep(seconds: float) -> int:
    time.sleep(seconds)
    return os.getpid()


def _fail_to_start() -> None:
    raise RuntimeError("no tokenizer here")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        state = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return True
    return state not in "ZX"


@pytest.mark.parametrize("start_method", ["fork", "spawn"])
def test_answers_in_order_and_errors_in_the_caller(start_method):
    with ProcessPool(2, _square, start_method=start_method) as pool:
        for x in range(6):
            pool.send(x % 2, (x,))
        assert [pool.receive(x % 2) for x in range(6)] == [x * x for x in range(6)]
        pool.send(1, (-3,))
        with pytest.raises(DataError, match="x: -3 is negative"):
            pool.receive(1)
        pool.send(0, (5,))
        assert pool.ready([0, 1]) == [0] and pool.receive(0) == 25
        pids = pool.pids
    assert not any(_alive(pid) for pid in pids)  # a normal close lets them end


def test_a_failed_initializer_is_every_tasks_error():
    with ProcessPool(1, _square, _fail_to_start) as pool:
        pool.send(0, (2,))
        with pytest.raises(RuntimeError, match="no tokenizer here"):
            pool.receive(0)


def test_a_worker_that_dies_is_an_error_not_a_hang():
    with ProcessPool(2, _sleep) as pool:
        pool.send(0, (60,))
        os.kill(pool.pids[0], signal.SIGKILL)  # the OOM killer, say
        with pytest.raises(DataError, match=r"worker \(pid \d+\) ended unexpectedly"):
            pool.receive(0)


def test_leaving_on_an_exception_kills_busy_workers_at_once():
    pool = ProcessPool(2, _sleep)
    pool.send(0, (60,))
    pool.send(1, (60,))
    pids = pool.pids
    with pytest.raises(KeyboardInterrupt), pool:
        raise KeyboardInterrupt  # Ctrl-C while they work
    assert not any(_alive(pid) for pid in pids)


def test_workers_ignore_sigint():
    with ProcessPool(1, _sleep) as pool:
        pool.send(0, (0.5,))
        os.kill(pool.pids[0], signal.SIGINT)  # a terminal's Ctrl-C reaches them too
        assert pool.receive(0) == pool.pids[0]
