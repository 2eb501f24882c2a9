"""process_cpu_seconds reads a process's CPU clock from /proc, as the cloud bench uses it to
split a batch's CPU between the client and the loopback store."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from loopback.object_stores import process_cpu_seconds

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs Linux /proc")


def test_it_matches_the_process_own_clock():
    values = np.random.default_rng(0).random(2_000_000)
    for _ in range(20):  # some CPU time, so a wrong field would not also read ~0
        values = np.sort(values)[::-1].copy()
    own = os.times()
    read = process_cpu_seconds([os.getpid()])
    tick = 1 / os.sysconf("SC_CLK_TCK")
    assert own.user + own.system > 10 * tick
    assert abs(read - (own.user + own.system)) <= 3 * tick


def test_a_process_that_is_gone_counts_nothing():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert process_cpu_seconds([child.pid]) == 0.0
