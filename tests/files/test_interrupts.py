"""megadata_core.files.atomic.interrupts_deferred: a Ctrl-C during the block is raised
after it, under the handler that was in place."""

from __future__ import annotations

import os
import signal
import threading

import pytest

from megadata_core.files.atomic import interrupts_deferred


def test_a_sigint_in_the_block_is_raised_after_it():
    done = []
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # Python's own
    try:
        with pytest.raises(KeyboardInterrupt):
            with interrupts_deferred():
                os.kill(os.getpid(), signal.SIGINT)
                done.append("the whole block")
        assert done == ["the whole block"]
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, previous)


def test_no_sigint_no_raise_and_handlers_restored():
    seen = []
    previous = signal.signal(signal.SIGINT, lambda *args: seen.append(args[0]))
    try:
        with interrupts_deferred():
            pass
        assert seen == []
        with interrupts_deferred():
            os.kill(os.getpid(), signal.SIGINT)
            assert seen == []
        assert seen == [signal.SIGINT]  # delivered to the handler in place, once
    finally:
        signal.signal(signal.SIGINT, previous)


def test_outside_the_main_thread_the_block_just_runs():
    ran = []

    def body():
        with interrupts_deferred():
            ran.append(True)

    thread = threading.Thread(target=body)
    thread.start()
    thread.join()
    assert ran == [True]
