"""Ctrl-C at random moments of ``tools/preprocess_data.py``, and what each one must leave.

:func:`interrupt_runs` sends SIGINT to the tool's process group (as a terminal's Ctrl-C
does) at moments drawn uniformly over 0.9 of a clean run's duration, from the process's
start. The tool starts with SIGINT blocked (it unblocks it first thing, so a signal sent
while the interpreter itself starts up waits for the tool's handler instead of being
Python's start-up failure). A run that ends before its moment sets the span the next
moments are drawn from (a shared machine's speed changes). Each run must end (a watchdog
fails a hang; no time is asserted), print exactly one line that starts ``interrupted``
(or finish normally, if the moment came after its end), leave no process of its session
(nor one with its ``$TMPDIR``: each series of runs gets a short one of its own, which
every run must leave empty), and leave what its line says: the directory as it was
(``nothing was written``, ``removed this run's unfinished files``), the complete corpus
(``after the output was complete``) or the finished tasks (``kept N finished task(s)``); a
rerun of the command without an interrupt then gives the clean run's bytes. Exit times
are recorded (reported, not asserted). A moment is seconds after the start, or a
:class:`When`: the first sight of a process of the run (its command line), polled every
10 ms.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TOOL = REPO / "tools" / "preprocess_data.py"
#: A run still going this long after its SIGINT hangs (a watchdog, not a timing check).
WATCHDOG_S = 60
#: Its processes must be gone within this after it ended (a watchdog too).
GONE_S = 10


def explore() -> bool:
    """``tools/test.sh --explore``: the long version of the tests."""
    return os.environ.get("MEGADATA_HYPOTHESIS") == "explore"


def write_input(path: Path, documents: int, seed: int = 0) -> Path:
    """A jsonl of ``documents`` texts of English-like words (~500 bytes each)."""
    rng = random.Random(seed)
    words = ["data", "token", "corpus", "shard", "merge", "index", "sample", "blend",
             "écrit", "naïve", "über", "zoë", "the", "of", "and", "a", "to", "in"]
    with open(path, "w", encoding="utf-8") as stream:
        for _ in range(documents):
            text = " ".join(rng.choice(words) for _ in range(rng.randint(20, 140)))
            stream.write(json.dumps({"text": text}) + "\n")
    return path


def environment(temp: Path | None = None) -> dict[str, str]:
    """The tool's environment; ``$TMPDIR`` is ``temp`` if given."""
    return {**os.environ, "PYTHONPATH": str(REPO), **({"TMPDIR": str(temp)} if temp else {})}


def short_temp() -> Path:
    """A new directory for a series of runs' ``$TMPDIR``, short enough for the Unix socket
    paths a Ray cluster makes under it (pytest's ``tmp_path`` is too long)."""
    return Path(tempfile.mkdtemp(prefix="mdt", dir="/tmp"))


def session_processes(session: int) -> set[int]:
    """Live (not zombie) processes of ``session``."""
    return set(_processes(session))


def _processes(session: int, temp: Path | None = None) -> dict[int, str]:
    """Live (not zombie) processes of ``session``, and those whose environment has
    ``TMPDIR=temp`` if given (the run's, wherever they went): pid -> command line."""
    found = {}
    marker = f"\0TMPDIR={temp}\0".encode() if temp else None
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            fields = stat[stat.rindex(")") + 2 :].split()  # state ppid pgrp session ...
            if fields[0] in "ZX":
                continue
            if int(fields[3]) != session and (
                    marker is None or marker not in b"\0" + Path(f"/proc/{entry}/environ")
                    .read_bytes()):
                continue
            command = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ")
        except (OSError, ValueError):
            continue
        found[int(entry)] = command.decode("utf-8", "replace").strip()
    return found


@dataclass(frozen=True)
class When:
    """The moment a process of the run whose command line holds one of ``texts`` is
    first seen (or, ``in_temp``, a name in its ``$TMPDIR`` that starts with one), plus
    ``after_s``: a moment given by the run's state, not by the clock."""

    texts: tuple[str, ...]
    after_s: float = 0.0
    in_temp: bool = False

    def __str__(self) -> str:
        later = f" + {self.after_s:.2f} s" if self.after_s else ""
        where = "$TMPDIR" if self.in_temp else "a command line"
        return f"when {' or '.join(map(repr, self.texts))} is seen in {where}{later}"

    def seen(self, session: int, temp: Path | None) -> bool:
        if self.in_temp:
            return temp is not None and any(
                name.startswith(self.texts) for name in os.listdir(temp))
        return any(text in command for command in _processes(session).values()
                   for text in self.texts)


def snapshot(directory: Path) -> dict[str, str]:
    """Every file and directory under ``directory`` (hidden ones included), with a
    digest of each file."""
    found = {}
    for root, dirs, files in os.walk(directory):
        for name in dirs:
            found[os.path.relpath(os.path.join(root, name), directory) + "/"] = ""
        for name in files:
            path = os.path.join(root, name)
            with contextlib.suppress(FileNotFoundError):
                found[os.path.relpath(path, directory)] = hashlib.sha256(
                    Path(path).read_bytes()
                ).hexdigest()
    return found


def _difference(before: dict[str, str], after: dict[str, str]) -> str:
    """What changed between two snapshots, by name."""
    added = sorted(set(after) - set(before))
    removed = sorted(set(before) - set(after))
    changed = sorted(name for name in set(before) & set(after) if before[name] != after[name])
    return f"added {added}, removed {removed}, changed {changed}"


def corpus(prefix: Path) -> tuple[bytes, bytes]:
    return Path(f"{prefix}_text_document.bin").read_bytes(), Path(
        f"{prefix}_text_document.idx"
    ).read_bytes()


@dataclass
class Outcome:
    delay: float  # when the SIGINT was sent, from the start
    status: int
    stderr: str
    exit_s: float  # from the SIGINT to the end of the process
    finished_s: float | None = None  # the run's wall time when it ended before the SIGINT
    temp_seen: list[str] = field(default_factory=list)  # in its $TMPDIR before the SIGINT


def _start(command: list[str], cwd: Path, temp: Path | None = None) -> subprocess.Popen:
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:  # the child starts with SIGINT blocked (see the module docstring)
        return subprocess.Popen(
            command, cwd=cwd, env=environment(temp), stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True, start_new_session=True,
        )
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def interrupt_at(command: list[str], cwd: Path, delay: float | When,
                 temp: Path | None = None, grace_s: float = GONE_S) -> Outcome:
    """Run ``command`` (``$TMPDIR`` ``temp``), SIGINT its process group ``delay`` s after
    the start (or at a :class:`When`); its outcome, once every process of the run is gone
    (waiting ``grace_s`` at most after its end; a hang fails here), with ``temp`` empty."""
    started = time.monotonic()
    process = _start(command, cwd, temp)
    seen: set[str] = set()
    try:
        due = started + delay if isinstance(delay, float | int) else None
        while process.poll() is None:
            if temp is not None:
                seen.update(os.listdir(temp))
            if due is None and delay.seen(process.pid, temp):
                due = time.monotonic() + delay.after_s
            if due is not None and (left := due - time.monotonic()) <= 0:
                break
            time.sleep(0.01 if due is None else min(left, 0.01))
        finished_s = None
        if process.poll() is not None:  # it ended first: no signal (its time is news)
            finished_s = time.monotonic() - started
        sent = time.monotonic()
        if finished_s is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGINT)
        try:
            _, stderr = process.communicate(timeout=WATCHDOG_S)
        except subprocess.TimeoutExpired:
            alive = "alive" if process.poll() is None else f"ended ({process.returncode})"
            raise AssertionError(
                f"{' '.join(command[2:])}: still running {WATCHDOG_S} s after a SIGINT sent "
                f"{sent - started:.2f} s after its start (the tool {alive}; the run's "
                f"processes: {_processes(process.pid, temp)})"
            ) from None
        exit_s = time.monotonic() - sent
        end = time.monotonic() + grace_s
        while (left := _processes(process.pid, temp)) and time.monotonic() < end:
            time.sleep(0.05)
        assert not left, (f"processes {left} outlive the run (SIGINT at "
                          f"{sent - started:.2f} s, {delay})")
        if temp is not None:
            assert not os.listdir(temp), (f"SIGINT at {sent - started:.2f} s ({delay}) left "
                                          f"{sorted(os.listdir(temp))} in $TMPDIR {temp}")
        return Outcome(sent - started, process.returncode, stderr, exit_s, finished_s,
                       sorted(seen))
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)  # whatever a failure left
        for pid in _processes(process.pid, temp):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def run_tool(command: list[str], cwd: Path, temp: Path | None = None) -> float:
    """Run ``command`` to its end (status 0, ``temp`` left empty); its wall time."""
    started = time.monotonic()
    result = subprocess.run(command, cwd=cwd, env=environment(temp), capture_output=True,
                            text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    if temp is not None:
        assert not os.listdir(temp), f"a clean run left {sorted(os.listdir(temp))} in {temp}"
    return time.monotonic() - started


def interrupt_runs(
    work: Path, source: Path, args: list[str], count: int, seed: int,
    rerun_args: list[str] | None = None, moments: list[float | When] | None = None,
    grace_s: float = GONE_S,
) -> list[Outcome]:
    """``count`` interrupted runs of ``preprocess_data.py --input source ... args`` in
    ``work/out`` (see the module docstring), each followed by an uninterrupted rerun
    (with ``rerun_args`` instead of ``args`` if given) when it left anything; returns
    the outcomes. The moments are drawn from ``seed``, or are ``moments`` (seconds after
    the start or :class:`When`: a replayed case); each is printed before its SIGINT, with
    the seed, and the moment a :class:`When` came to after it. Every run (the clean one
    and the reruns too) has a short ``$TMPDIR`` of its own that it must leave empty; a
    process of the run may outlive it by ``grace_s`` at most."""
    base = [sys.executable, str(TOOL), "--input", str(source), "--noprogress"]
    temp = short_temp()
    try:
        return _interrupt_runs(work, base, args, count, seed, rerun_args, moments, grace_s,
                               temp)
    finally:
        shutil.rmtree(temp, ignore_errors=True)


def _interrupt_runs(work, base, args, count, seed, rerun_args, moments, grace_s, temp):
    (work / "clean").mkdir()
    clean_prefix = work / "clean" / "o"
    duration = run_tool([*base, "--output_prefix", str(clean_prefix), *args], work, temp)
    clean = corpus(clean_prefix)
    out = work / "out"
    out.mkdir()
    prefix = out / "o"
    command = [*base, "--output_prefix", str(prefix), *args]
    rerun = [*base, "--output_prefix", str(prefix), *(args if rerun_args is None else rerun_args)]
    rng = random.Random(seed)
    outcomes = []
    for number in range(count if moments is None else len(moments)):
        before = snapshot(out)
        delay = rng.uniform(0, 0.9 * duration) if moments is None else moments[number]
        shown = f"{delay:.2f} s" if isinstance(delay, float | int) else str(delay)
        print(f"seed {seed}: SIGINT {number} at {shown}", flush=True)
        outcome = interrupt_at(command, work, delay, temp, grace_s)
        if not isinstance(delay, float | int):
            print(f"seed {seed}: SIGINT {number} came at {outcome.delay:.2f} s", flush=True)
        outcomes.append(outcome)
        if outcome.finished_s is not None:  # runs go faster than the clean one did (the
            duration = outcome.finished_s  # machine's load changes): moments follow them
        where = (f"seed {seed}, SIGINT {number} at {outcome.delay:.2f} s ({shown}): exit "
                 f"status {outcome.status}, "
                 f"stderr {outcome.stderr!r}")
        assert "Traceback" not in outcome.stderr, where
        if outcome.status == 0:  # the run had ended when the signal came
            assert corpus(prefix) == clean, where
            continue
        lines = outcome.stderr.splitlines()
        assert outcome.status == 130 and len(lines) == 1, where
        line = lines[0]
        if line == "interrupted: nothing was written" or line.startswith(
            "interrupted: removed this run's unfinished files"
        ):
            after = snapshot(out)
            assert after == before, f"{where}; left: {_difference(before, after)}"
        elif line.startswith("interrupted after the output was complete: kept "):
            assert corpus(prefix) == clean, where
        else:
            assert line.startswith("interrupted: nothing written to ") and (
                "finished task(s) in" in line
            ), where
        if snapshot(out) != before or number % 10 == 9:
            run_tool(rerun, work, temp)
            assert corpus(prefix) == clean, f"the rerun after {where}"
            assert sorted(snapshot(out)) == ["o_text_document.bin", "o_text_document.idx"]
    return outcomes


def summary(outcomes: list[Outcome]) -> str:
    """One line for the test log: how many were interrupted, and their exit times."""
    stopped = [o.exit_s for o in outcomes if o.status == 130]
    slowest = max(stopped, default=0.0)
    return (f"{len(outcomes)} SIGINTs: {len(stopped)} interrupted runs, "
            f"{len(outcomes) - len(stopped)} had finished; slowest exit {slowest:.2f} s")
