"""Ctrl-C in a tool: one line on stderr saying what was kept or removed, exit status 130.

``megadata_cli`` imports this module first, before a command's heavy imports: when a
command runs (a ``megadata-*`` console script, ``python -m megadata_cli.X``, or a
contributor's ``python tools/X.py``; not when a test imports one), it installs a SIGINT handler for
the time before the
tool's work starts (imports, flag parsing), when nothing is
written yet, that prints ``interrupted: nothing was written`` and ends the process. It
also unblocks SIGINT, in case the tool was started with it blocked (a SIGINT sent during
the interpreter's own start-up is then taken here). Once the work starts,
:func:`during_work` makes Ctrl-C raise ``KeyboardInterrupt`` so that every clean-up on
the way out runs (workers stopped, unfinished files removed); the tool catches it and
says what it left with :func:`report`. A second Ctrl-C during that clean-up ends the
process at once, saying so. Once the work is done and reported, :func:`after_work`
ignores Ctrl-C.
"""

from __future__ import annotations

import os
import signal
import sys
import threading

#: The shell's status of a process ended by SIGINT.
EXIT_STATUS = 130


def report(line: str) -> None:
    """Print ``line`` on stderr and end the process (status 130) without further output
    (no exit handlers: the clean-up has run)."""
    sys.stdout.flush()
    os.write(2, f"{line}\n".encode("utf-8", "replace"))
    os._exit(EXIT_STATUS)


def _before_work(signum: int, frame: object) -> None:
    report("interrupted: nothing was written")


def _raise(signum: int, frame: object) -> None:
    signal.signal(signal.SIGINT, _again)
    raise KeyboardInterrupt


def _again(signum: int, frame: object) -> None:
    report("interrupted again: stopped before the clean-up finished; run the same command "
           "again, it removes what is left")


def _unraisable(unraisable) -> None:
    """A KeyboardInterrupt raised where Python cannot raise it (in an at-fork callback or
    a finalizer, which print it as "Exception ignored" and go on) is asked for again, to be
    raised at the next point that can; anything else is reported as Python does."""
    if isinstance(unraisable.exc_value, KeyboardInterrupt) and (
            signal.getsignal(signal.SIGINT) is _again):
        signal.signal(signal.SIGINT, _raise)
        # sent again from a thread, once this hook and its caller have returned (raised
        # in here, it would be swallowed too; should it land in such a place again, it
        # comes back here)
        again = threading.Timer(0.01, os.kill, (os.getpid(), signal.SIGINT))
        again.daemon = True
        again.start()
        return
    sys.__unraisablehook__(unraisable)


def during_work() -> None:
    """From here on Ctrl-C raises ``KeyboardInterrupt`` (once; a second one ends the
    process at once), and one that Python would swallow is raised again."""
    sys.unraisablehook = _unraisable
    signal.signal(signal.SIGINT, _raise)


def after_work() -> None:
    """The work is done and reported: from here on Ctrl-C is ignored (it would change
    nothing; and Python's exit puts the default action back for a handler of its own,
    so a SIGINT during the interpreter's clean-up would end it by the signal, silently)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def install() -> None:
    """The handler for the time before the work starts (see the module docstring)."""
    signal.signal(signal.SIGINT, _before_work)
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def _running_a_tool() -> bool:
    """Whether the program running is one of ours: a ``megadata-*`` console script, a
    module of this package run with ``-m``, or a script of a checkout's tools/ folder."""
    path = getattr(sys.modules.get("__main__"), "__file__", None)
    if path is None:
        return False
    if os.path.basename(path).startswith("megadata-"):
        return True
    here = os.path.dirname(os.path.realpath(__file__))
    folder = os.path.dirname(os.path.realpath(path))
    return folder in (here, os.path.dirname(here))


if _running_a_tool():
    install()
