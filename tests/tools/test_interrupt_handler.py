"""tools/interrupts.py: a Ctrl-C that lands where Python cannot raise it (an at-fork
callback, as when a library forks just then) still stops the tool with one line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

TOOLS = Path(__file__).resolve().parents[2] / "tools"

# A tool's shape: the work under during_work(), KeyboardInterrupt reported in one line.
# The SIGINT arrives inside logging's (and here our own) after-fork callback in the parent.
SCRIPT = f"""
import os, signal, sys, time
sys.path.insert(0, {str(TOOLS)!r})
from megadata_cli import interrupts

def interrupt_me():
    os.kill(os.getpid(), signal.SIGINT)
    for _ in range(1000):  # the handler runs here, inside the callback
        pass

interrupts.during_work()
try:
    os.register_at_fork(after_in_parent=interrupt_me)
    if os.fork() == 0:
        os._exit(0)
    os.wait()
    time.sleep(10)  # the rest of the work
    print("finished")
except KeyboardInterrupt:
    interrupts.report("interrupted: nothing written")
"""


def test_a_sigint_inside_an_at_fork_callback_still_stops_the_tool():
    # Python >= 3.12 warns that fork() in a multi-threaded process may deadlock (the test
    # forks on purpose, to land the SIGINT in an at-fork callback): not the tool's output.
    done = subprocess.run([sys.executable, "-W", "ignore::DeprecationWarning", "-c", SCRIPT],
                          capture_output=True, text=True,
                          timeout=30)
    assert done.returncode == 130, (done.returncode, done.stdout, done.stderr)
    assert done.stderr.splitlines() == ["interrupted: nothing written"], done.stderr
    assert "finished" not in done.stdout


def test_other_unraisable_errors_are_reported_as_python_does():
    script = f"""
import sys
sys.path.insert(0, {str(TOOLS)!r})
from megadata_cli import interrupts
interrupts.during_work()

class Finalized:
    def __del__(self):
        raise ValueError("in a finalizer")

Finalized()
print("went on")
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=30)
    assert done.returncode == 0 and done.stdout == "went on\n"
    assert "Exception ignored" in done.stderr and "ValueError: in a finalizer" in done.stderr
