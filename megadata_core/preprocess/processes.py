"""Worker processes that stop at once: on an error, on Ctrl-C, and when their parent dies.

``multiprocessing.Pool`` can hang on the way out: Ctrl-C reaches its workers too (the
terminal signals the whole process group), a worker interrupted while writing a result
leaves half a message in the shared result pipe, and ``Pool.terminate`` then waits
forever for its result thread to read the rest (seen: 3 of 24 Ctrl-C's of a 2-worker
preprocess hung). :class:`ProcessPool` has nothing shared to corrupt and nothing to wait
for: each worker has a task pipe of its own (fed by a thread of this process, so a send
never blocks the caller) and a result pipe of its own (read by the caller, in whatever
order it wants), ignores SIGINT (this process handles Ctrl-C and stops it), and ends when
this process ends (:func:`~megadata_core.handover.orphans.exit_with_parent`). Stopping
after an error or an interrupt kills the workers (``SIGKILL``) and reaps them; a worker
that dies on its own is an error of the caller's next :meth:`ProcessPool.receive`, not a
hang.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import multiprocessing.connection
import queue
import signal
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from megadata_core.errors import DataError
from megadata_core.files.atomic import interrupts_deferred
from megadata_core.handover import orphans

#: How long a normal close waits for a worker to end after its last task.
_CLOSE_WAIT_S = 30


@contextlib.contextmanager
def _sigint_blocked() -> Iterator[None]:
    """SIGINT blocked in this thread, so a child started meanwhile inherits it blocked
    (it stays pending there until the child ignores it); a Ctrl-C that arrives meanwhile
    is delivered here when the block ends."""
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def _serve(tasks, results, function, initializer, initargs) -> None:
    """A worker: ``function(*task)`` for each task until ``None`` or end of input; a
    failure of ``initializer`` is every task's answer (no respawn loop)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C and stops us
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    orphans.exit_with_parent()
    failure = None
    if initializer is not None:
        try:
            initializer(*initargs)
        except BaseException as error:  # noqa: BLE001 - reported through the tasks
            failure = error
    while True:
        try:
            task = tasks.recv()
        except (EOFError, OSError):
            return
        if task is None:
            return
        if failure is not None:
            reply = (False, failure)
        else:
            try:
                reply = (True, function(*task))
            except BaseException as error:  # noqa: BLE001 - raised in the caller
                reply = (False, error)
        try:
            results.send(reply)
        except (BrokenPipeError, EOFError):
            return
        except Exception:  # noqa: BLE001 - an answer that does not pickle
            raised = reply[1] if not reply[0] else None
            results.send((False, RuntimeError(f"unpicklable answer: {raised!r}")))


def _feed(outbox: queue.SimpleQueue, connection) -> None:
    """Send each task of ``outbox`` to a worker, until ``None`` (sent on) or a dead end."""
    while True:
        task = outbox.get()
        try:
            connection.send(task)
        except (OSError, ValueError):  # the worker is gone, or the pipe closed
            return
        if task is None:
            return


class _Worker:
    __slots__ = ("process", "tasks", "results", "outbox", "thread")

    def __init__(self, process, tasks, results) -> None:
        self.process = process
        self.tasks = tasks
        self.results = results
        self.outbox: queue.SimpleQueue = queue.SimpleQueue()
        self.thread: threading.Thread | None = None


class ProcessPool:
    """``size`` worker processes, each running ``function(*task)`` for the tasks sent to
    it, in order; see the module docstring. A context manager: leaving the block normally
    lets the workers finish and end; leaving it on an exception (Ctrl-C included) kills
    them at once."""

    def __init__(
        self,
        size: int,
        function: Callable[..., Any],
        initializer: Callable[..., None] | None = None,
        initargs: Sequence[Any] = (),
        start_method: str | None = None,
    ) -> None:
        self.size = int(size)
        self._workers: list[_Worker] = []
        context = multiprocessing.get_context(start_method)
        try:
            # Ctrl-C held until every process and thread is started (or failed to): cut in
            # the middle, a process could be left untracked or a thread half started
            with interrupts_deferred():
                for _ in range(self.size):  # every process before any thread: fork safely
                    self._workers.append(self._start(context, function, initializer, initargs))
                for number, worker in enumerate(self._workers):
                    worker.thread = threading.Thread(
                        target=_feed, args=(worker.outbox, worker.tasks), daemon=True,
                        name=f"megadata-pool-feed-{number}",
                    )
                    worker.thread.start()
        except BaseException:
            self.close(kill=True)
            raise

    @staticmethod
    def _start(context, function, initializer, initargs) -> _Worker:
        tasks_out, tasks_in = context.Pipe(duplex=False)
        results_out, results_in = context.Pipe(duplex=False)
        process = context.Process(
            target=_serve, args=(tasks_out, results_in, function, initializer, tuple(initargs)),
            daemon=True, name="megadata-preprocess",
        )
        with _sigint_blocked():
            process.start()
        tasks_out.close()  # the worker's ends: this process keeps only its own
        results_in.close()
        return _Worker(process, tasks_in, results_out)

    @property
    def pids(self) -> list[int]:
        return [worker.process.pid for worker in self._workers]

    def send(self, worker: int, task: tuple) -> None:
        """Queue ``task`` for worker ``worker`` (returns at once)."""
        self._workers[worker].outbox.put(task)

    def receive(self, worker: int) -> Any:
        """The answer to worker ``worker``'s oldest unanswered task (waits for it); its
        exception is raised here. DataError if the worker died."""
        entry = self._workers[worker]
        try:
            ok, value = entry.results.recv()
        except (EOFError, OSError):
            entry.process.join(1)
            raise DataError(
                f"a preprocessing worker (pid {entry.process.pid}) ended unexpectedly "
                f"(exit status {entry.process.exitcode}); killed, or out of memory?"
            ) from None
        if ok:
            return value
        raise value

    def ready(self, workers: Sequence[int], timeout: float | None = None) -> list[int]:
        """Which of ``workers`` have an answer (or died) to receive; waits for one."""
        connections = {self._workers[w].results: w for w in workers}
        return sorted(connections[c] for c in multiprocessing.connection.wait(connections, timeout))

    def close(self, kill: bool = False) -> None:
        """Stop the workers: after their tasks (``kill`` False), or now (SIGKILL).
        Never hangs; Ctrl-C waits until it is done."""
        with interrupts_deferred():
            if not kill:
                for worker in self._workers:
                    worker.outbox.put(None)
                for worker in self._workers:
                    worker.process.join(_CLOSE_WAIT_S)
            for worker in self._workers:
                if worker.process.is_alive():
                    worker.process.kill()
            for worker in self._workers:
                worker.process.join(_CLOSE_WAIT_S)
                worker.outbox.put(None)  # the feeding thread ends (or already has)
            for worker in self._workers:
                if worker.thread is not None and worker.thread.ident is not None:
                    worker.thread.join(_CLOSE_WAIT_S)  # its sends fail once the worker is gone
                if worker.thread is None or not worker.thread.is_alive():
                    worker.tasks.close()  # (never under a thread still writing to it)
                worker.results.close()
            self._workers = []

    def __enter__(self) -> ProcessPool:
        return self

    def __exit__(self, exc_type, *rest) -> None:
        self.close(kill=exc_type is not None)
