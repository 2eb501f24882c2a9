"""Ctrl-C (SIGINT to the process group) at random moments of ``tools/preprocess_data.py
--engine ray`` on a real local Ray cluster that the run starts: every run ends, prints one
line saying what it kept or removed, leaves no process (the cluster included), and a
rerun gives the clean run's bytes (``interrupt_helpers``). A Ray run costs seconds (the
cluster's start), so CI sends a few SIGINTs from a fixed seed; ``tools/test.sh
--explore`` sends 50 from a new one. The reruns use the local engine: the plan, and so
the work directory, does not depend on the engine."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from interrupt_helpers import explore, interrupt_runs, summary, write_input

pytest.importorskip("ray")


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")
def test_sigint_at_random_moments_of_a_ray_run(tmp_path):
    count = 50 if explore() else 4
    seed = random.SystemRandom().randrange(1 << 30) if explore() else 27
    source = write_input(tmp_path / "in.jsonl", documents=4000)
    args = ["--engine", "ray", "--task_size", "0.25"]
    outcomes = interrupt_runs(tmp_path, source, args, count, seed,
                              rerun_args=["--task_size", "0.25"])
    print(f"ray (seed {seed}): {summary(outcomes)}")
    assert any(o.status == 130 for o in outcomes)


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")
def test_sigint_at_the_moment_that_once_left_two_processes(tmp_path):
    """Explore mode once saw two processes of the run outlive the grace 1.63 s after the
    start (the cluster starting): replayed at that moment."""
    source = write_input(tmp_path / "in.jsonl", documents=4000)
    args = ["--engine", "ray", "--task_size", "0.25"]
    outcomes = interrupt_runs(tmp_path, source, args, 1, 0, moments=[1.63],
                              rerun_args=["--task_size", "0.25"])
    print(f"ray at 1.63 s: {summary(outcomes)}")
