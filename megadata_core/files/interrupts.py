"""Ctrl-C held off while a few file operations finish: a pair published, a tree removed.

A ``KeyboardInterrupt`` lands between any two bytecodes. Most of a run may stop anywhere
(its files live under temporary names that the next run removes), but a few steps must
not be cut in two: renaming a finished ``.bin`` and then its ``.idx`` onto their final
names (cut between them, a new ``.bin`` would sit beside an old ``.idx``), and the
clean-up that leaves nothing behind. :func:`interrupts_deferred` runs such a step with
SIGINT held: a Ctrl-C that arrives meanwhile is delivered (to the handler that was in
place) as soon as the step ends. Only the main thread can change signal handlers;
elsewhere, or where a non-Python handler is installed, the step runs as it is.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator


@contextlib.contextmanager
def interrupts_deferred() -> Iterator[None]:
    """Run the block with SIGINT held; one that arrived meanwhile is raised after it."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    try:
        previous = signal.getsignal(signal.SIGINT)
    except ValueError:  # not the main interpreter
        yield
        return
    if previous is None or previous == signal.SIG_IGN:  # not Python's, or ignored
        yield
        return
    received: list[int] = []
    signal.signal(signal.SIGINT, lambda signum, frame: received.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if received:
            signal.raise_signal(signal.SIGINT)  # the handler in place now takes it
