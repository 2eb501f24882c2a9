"""Ctrl-C (SIGINT to the process group) at random moments of ``tools/preprocess_data.py
--engine ray`` on a real local Ray cluster that the run starts: every run ends, prints one
line saying what it kept or removed, leaves no process once it has ended (the cluster
included: none in its session, none with its ``$TMPDIR``), leaves its ``$TMPDIR`` empty
(the cluster's files went to a directory of the run's own there), and a rerun gives the
clean run's bytes (``interrupt_helpers``). A Ray run costs seconds (the cluster's start),
so CI sends a few SIGINTs from a fixed seed; ``tools/test.sh --explore`` sends 50 from a
new one. The reruns use the local engine: the plan, and so the work directory, does not
depend on the engine. Moments given by what the cluster has started (``When``) cut
``ray.init`` short where it orphans processes: the raylet's agents and workers, once it
is stopped. ``python tests/adapters/test_ray_interrupts.py N`` measures the exit after
a SIGINT (N runs at each of those moments, and before the cluster starts)."""

from __future__ import annotations

import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "helpers"))  # (as a script)
from interrupt_helpers import (  # noqa: E402
    TOOL,
    When,
    explore,
    interrupt_at,
    interrupt_runs,
    short_temp,
    summary,
    write_input,
)

pytest.importorskip("ray")

needs_proc = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")
ARGS = ["--engine", "ray", "--task_size", "0.25"]
RERUN_ARGS = ["--task_size", "0.25"]
#: The cluster's own directory made in $TMPDIR: ``ray.init`` starts (no Ray process yet).
CLUSTER_DIR = When(("mdray",), in_temp=True)
#: Ray's processes by their command lines: the raylet (``ray.init`` is under way; the
#: raylet starts its agents and workers next), its agents (``ray.init`` waits for them)
#: and a worker (tasks are about to run, or run).
RAYLET = When(("/raylet/raylet",))
AGENT = When(("dashboard/agent.py", "ray::DashboardAgent", "runtime_env/agent/main.py",
              "ray::RuntimeEnvAgent"))
WORKER = When(("default_worker.py", "ray::IDLE", "ray::_run_task"))


def _interrupt(tmp_path, count, seed, moments=None):
    source = write_input(tmp_path / "in.jsonl", documents=4000)
    return interrupt_runs(tmp_path, source, ARGS, count, seed, rerun_args=RERUN_ARGS,
                          moments=moments, grace_s=0)


@needs_proc
def test_sigint_at_random_moments_of_a_ray_run(tmp_path):
    count = 50 if explore() else 4
    seed = random.SystemRandom().randrange(1 << 30) if explore() else 27
    outcomes = _interrupt(tmp_path, count, seed)
    print(f"ray (seed {seed}): {summary(outcomes)}")
    assert any(o.status == 130 for o in outcomes)


@needs_proc
def test_sigint_at_the_moment_that_once_left_two_processes(tmp_path):
    """Explore mode once saw two processes of the run outlive the grace 1.63 s after the
    start (the cluster starting): replayed at that moment."""
    outcomes = _interrupt(tmp_path, 1, 0, moments=[1.63])
    print(f"ray at 1.63 s: {summary(outcomes)}")


@needs_proc
def test_sigint_at_the_moment_that_once_hung(tmp_path):
    """Explore mode (seed 398316140, load ~4 on 2 cores) once saw a run still going 60 s
    after a SIGINT 5.78 s after its start (the cluster starting or its first tasks, at that
    load); not seen again in 30 replays around that moment at load ~2: replayed at it."""
    outcomes = _interrupt(tmp_path, 1, 0, moments=[5.78])
    print(f"ray at 5.78 s: {summary(outcomes)}")


@needs_proc
def test_sigint_while_the_cluster_starts_and_runs(tmp_path):
    """SIGINT as soon as the raylet is seen (its agents and first workers not started
    yet: stopping it orphans them), as soon as an agent is, and as soon as a worker is:
    each run is interrupted, with the cluster's own directory in ``$TMPDIR`` by then."""
    moments = [RAYLET, AGENT, WORKER, When(WORKER.texts, after_s=0.5)]
    outcomes = _interrupt(tmp_path, 0, 0, moments=moments)
    print(f"ray while starting: {summary(outcomes)}")
    assert [o.status for o in outcomes] == [130] * len(moments)
    assert all(any(name.startswith("mdray") for name in o.temp_seen) for o in outcomes)


ORPHAN_MAKER = """import subprocess, sys
grandchild = subprocess.Popen([sys.executable, "-c", "import signal, sys, time; "
    "signal.signal(signal.SIGTERM, signal.SIG_IGN); print(flush=True); time.sleep(120)"],
    stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
grandchild.stdout.readline()  # it ignores SIGTERM now
print(grandchild.pid)"""


def _parent(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat[stat.rindex(")") + 2 :].split()[1])


@needs_proc
def test_an_orphan_comes_back_to_the_driver_and_is_stopped_and_reaped():
    """What the driver does around its cluster, on real processes: as a subreaper it gets
    a grandchild whose parent ended (one that ignores SIGTERM), and the stop after
    ``ray.shutdown()`` kills and reaps it (its /proc entry is gone, no zombie)."""
    from megadata_adapters.engines import ray_preprocess as engine

    others = {row[0] for row in engine._family()}
    was_set = engine._set_subreaper()
    grandchild = None
    try:
        made = subprocess.run([sys.executable, "-c", ORPHAN_MAKER], capture_output=True,
                              text=True, timeout=60, check=True)
        grandchild = int(made.stdout)
        assert _parent(grandchild) == os.getpid()  # reparented here, not to init
        engine._stop_descendants(others)
        assert _parent(grandchild) is None
    finally:
        engine._restore_subreaper(was_set)
        if grandchild is not None and _parent(grandchild) is not None:
            os.kill(grandchild, 9)


def measure(runs: int) -> None:
    """Print the exit time after a SIGINT, ``runs`` times at each moment: median, range."""
    work = Path(tempfile.mkdtemp(prefix="ray-teardown-"))
    temp = short_temp()
    try:
        source = write_input(work / "in.jsonl", documents=4000)
        command = [sys.executable, str(TOOL), "--input", str(source), "--noprogress",
                   "--output_prefix", str(work / "out" / "o"), *ARGS]
        moments = {"before the cluster starts (0.5 s)": 0.5, "ray.init begins": CLUSTER_DIR,
                   "the raylet starts": RAYLET, "an agent starts": AGENT,
                   "tasks run (a worker + 0.5 s)": When(WORKER.texts, after_s=0.5)}
        for name, moment in moments.items():
            exits = []
            for _ in range(runs):
                shutil.rmtree(work / "out", ignore_errors=True)
                (work / "out").mkdir()
                outcome = interrupt_at(command, work, moment, temp, grace_s=0)
                assert outcome.status == 130, outcome
                exits.append(outcome.exit_s)
            print(f"{name}: median {statistics.median(exits):.2f} s, "
                  f"{min(exits):.2f}-{max(exits):.2f} s over {runs} (load "
                  f"{os.getloadavg()[0]:.1f})", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(temp, ignore_errors=True)


if __name__ == "__main__":
    measure(int(sys.argv[1]) if len(sys.argv) > 1 else 5)
