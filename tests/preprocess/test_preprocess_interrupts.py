"""Ctrl-C (SIGINT to the process group) at 50 random moments of ``tools/preprocess_data.py
--workers 2``, plain and with the task plan: every run ends, prints one line saying what
it kept or removed, leaves no process, and a rerun gives the clean run's bytes
(``interrupt_helpers``; the Ray engine's version is tests/adapters/test_ray_interrupts.py).
Moments are drawn from a fixed seed; ``tools/test.sh --explore`` draws new ones."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from interrupt_helpers import explore, interrupt_runs, summary, write_input

SIGINTS = 50


def _seed() -> int:
    return random.SystemRandom().randrange(1 << 30) if explore() else 27


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")
@pytest.mark.parametrize(
    ("mode", "args"),
    [("plain", ["--workers", "2"]), ("tasks", ["--workers", "2", "--task_size", "0.25"])],
)
def test_sigint_at_random_moments(tmp_path, mode, args):
    # ~6 MB: about half the moments fall in the work (tokenizing, merging, publishing),
    # the others in the tool's start (imports, flags); a run costs ~0.7 s
    source = write_input(tmp_path / "in.jsonl", documents=12_000)
    seed = _seed()
    outcomes = interrupt_runs(tmp_path, source, args, SIGINTS, seed)
    print(f"{mode} (seed {seed}): {summary(outcomes)}")
    assert sum(o.status == 130 for o in outcomes) >= SIGINTS // 4  # they landed in runs
