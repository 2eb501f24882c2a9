"""The Ray engine of ``tools/preprocess_data.py --engine ray``: one Ray task per planned task.

``ray_engine(address=None)`` returns an engine for
``megadata_core.preprocess.preprocess_tasks``: it connects to ``address`` (default:
starts a local cluster, shut down at the end), ships the TaskRunner once
(``ray.put``), keeps at most ``max_in_flight`` tasks submitted (default twice the
cluster's CPUs), lets Ray retry a task whose worker died (``max_retries``; a DataError
is not retried: it would fail again) and shows a tqdm bar on the driver: tasks,
documents, MB/s. A local cluster it started is shut down on the way out, after an error
or a Ctrl-C too (its processes block SIGINT, so a terminal's Ctrl-C reaches only the
driver, which stops them in order). Meanwhile the driver is a child subreaper (Linux),
so a Ray process orphaned by a stop cut short comes back to it: after ``ray.shutdown()``
whatever is left of what the run started is stopped and reaped, and the cluster's
temporary directory (its own, under ``$TMPDIR``) is removed. Each worker process builds
the tokenizer once and keeps it for the tasks of the same plan. The workers import
megadata (and the modules the factories live in): a local cluster gets the driver's
``sys.path`` as PYTHONPATH; on an existing cluster they must be installed on every node.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence

from megadata_core.errors import DataError
from megadata_core.files.atomic import interrupts_deferred
from megadata_core.preprocess.plan import Task
from megadata_core.preprocess.tasks import Engine, TaskRunner

_RUNNERS: dict[str, TaskRunner] = {}  # per worker process: plan fingerprint -> runner


def _run_task(runner: TaskRunner, task: Task) -> dict:
    cached = _RUNNERS.setdefault(runner.fingerprint, runner)  # keeps its built tokenizer
    return cached(task)


def _ray():
    try:
        import ray
    except ImportError:
        raise DataError(
            "--engine ray needs the ray package: pip install 'megadata-core[ray]' "
            "(or pip install 'ray>=2.9')"
        ) from None
    return ray


def ray_engine(
    address: str | None = None,
    *,
    max_in_flight: int | None = None,
    max_retries: int = 3,
    progress: bool = True,
    num_cpus: int | None = None,
) -> Engine:
    """An engine running each task as a Ray task (see the module docstring)."""
    if max_in_flight is not None and max_in_flight < 1:
        raise DataError(f"max_in_flight: {max_in_flight!r} must be >= 1")
    if max_retries < 0:
        raise DataError(f"max_retries: {max_retries!r} must be >= 0")

    def run(runner: TaskRunner, tasks: Sequence[Task]) -> Iterator[dict]:
        ray = _ray()
        started_here = not ray.is_initialized()
        local = started_here and address is None and not os.environ.get("RAY_ADDRESS")
        finished = False
        others = {row[0] for row in _family()} if started_here else set()  # (not ours)
        subreaper = temp_dir = None
        try:
            if started_here:
                with interrupts_deferred():  # (what is set is known to the clean-up)
                    subreaper = _set_subreaper()
                    if local:  # a cluster of our own: its files in a directory of our own
                        temp_dir = tempfile.mkdtemp(prefix="mdray", dir=_temp_root())
                _init(ray, address, num_cpus, temp_dir)
            yield from _run_all(ray, runner, tasks, max_in_flight, max_retries, progress)
            finished = True
        finally:
            # (also after a Ctrl-C during init: what it started stops). A Ctrl-C now waits
            # for the clean-up; one that came before the wait took hold does it again.
            interrupted = done = False
            while started_here and not done:
                try:
                    with interrupts_deferred():
                        try:
                            _shut_down(ray, others, quiet=not finished or interrupted)
                        finally:
                            _restore_subreaper(subreaper)
                            if temp_dir is not None:
                                shutil.rmtree(temp_dir, ignore_errors=True)
                        done = True
                except KeyboardInterrupt:
                    interrupted = True
            if interrupted:
                raise KeyboardInterrupt

    return run


#: Ray's socket paths (``{temp}/session_{date}_{time}_{pid}/sockets/plasma_store``) must
#: fit AF_UNIX's 107 bytes: a longer ``$TMPDIR`` is replaced by /tmp.
_TEMP_ROOT_MAX = 28
#: How long a process left after ``ray.shutdown()`` has to end on SIGTERM (then SIGKILL).
_TERM_GRACE_S = 0.5
#: The stop of what is left gives up after this (a process that keeps spawning).
_STOP_LIMIT_S = 10.0
_PR_SET_CHILD_SUBREAPER, _PR_GET_CHILD_SUBREAPER = 36, 37


def _temp_root() -> str:
    root = tempfile.gettempdir()
    return root if len(root) <= _TEMP_ROOT_MAX else "/tmp"


def _init(ray, address: str | None, num_cpus: int | None, temp_dir: str | None) -> None:
    paths = [p for p in sys.path if p and os.path.isdir(p)]
    env = {"PYTHONPATH": os.pathsep.join(paths)} if address is None else {}
    try:
        ray.init(
            address=address, num_cpus=num_cpus, include_dashboard=False,
            runtime_env={"env_vars": env} if env else None, log_to_driver=False,
            logging_level=logging.ERROR,  # not "Started a local Ray instance" on stderr
            **({"_temp_dir": temp_dir} if temp_dir is not None else {}),
        )
    except ConnectionError as error:
        raise DataError(f"--ray_address: cannot connect to {address!r} ({error})") from None


def _prctl(option: int, value: int | ctypes.c_int) -> bool:
    """Linux's ``prctl(option, value)``; False where it failed or there is none."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        argument = ctypes.byref(value) if isinstance(value, ctypes.c_int) else ctypes.c_ulong(value)
        return libc.prctl(ctypes.c_int(option), argument, ctypes.c_ulong(0), ctypes.c_ulong(0),
                          ctypes.c_ulong(0)) == 0
    except (OSError, AttributeError):
        return False


def _set_subreaper() -> bool:
    """Make this process a child subreaper (an orphaned descendant is reparented to it,
    not to init); True if it was not one and now is."""
    flag = ctypes.c_int(0)
    if not _prctl(_PR_GET_CHILD_SUBREAPER, flag) or flag.value:
        return False
    return _prctl(_PR_SET_CHILD_SUBREAPER, 1)


def _restore_subreaper(was_set: bool | None) -> None:
    if was_set:
        _prctl(_PR_SET_CHILD_SUBREAPER, 0)


def _shut_down(ray, others: set[int], quiet: bool) -> None:
    """Stop the local cluster this driver started, then any of its processes that outlive
    ``ray.shutdown()`` (its agents or workers, when a Ctrl-C cut ``ray.init`` short): this
    process's descendants but ``others``, those it had before. ``quiet`` (the run was cut
    short): Ray's messages about the tasks it drops go to /dev/null."""
    try:
        with _stderr_to_devnull() if quiet else contextlib.nullcontext():
            ray.shutdown()
    finally:
        _stop_descendants(others)


def _stop_descendants(others: set[int]) -> None:
    """SIGTERM each descendant of this process but ``others``, SIGKILL it if it is alive
    ``_TERM_GRACE_S`` later, reap those that are this process's children (no zombie is
    left), and look again until none is left: a stopped process's children come to this
    one, the subreaper. Gives up after ``_STOP_LIMIT_S``."""
    me = os.getpid()
    termed: dict[tuple[int, int], float] = {}  # (pid, start time) -> when SIGTERM went
    give_up = time.monotonic() + _STOP_LIMIT_S
    while True:  # (a zombie of another's is its parent's to reap, or ours once it ends)
        family = [(pid, started, zombie) for pid, parent, started, zombie in _family()
                  if pid not in others and (parent == me or not zombie)]
        if not family or time.monotonic() > give_up:
            return
        now = time.monotonic()
        for pid, started, zombie in family:
            if zombie:
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, os.WNOHANG)
                continue
            sent = termed.setdefault((pid, started), now)
            if sent == now or now - sent >= _TERM_GRACE_S:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGTERM if sent == now else signal.SIGKILL)
        time.sleep(0.01)


def _family() -> list[tuple[int, int, int, bool]]:
    """``(pid, parent pid, start time, is a zombie)`` of every descendant of this process,
    zombies included (/proc; none elsewhere)."""
    children: dict[int, list[tuple[int, int, bool]]] = {}
    try:
        entries = [int(name) for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return []
    for pid in entries:
        try:
            with open(f"/proc/{pid}/stat", "rb") as stream:
                fields = stream.read().rsplit(b")", 1)[1].split()
            parent, started = int(fields[1]), int(fields[19])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(parent, []).append((pid, started, fields[0] in (b"Z", b"X")))
    found, stack = [], [os.getpid()]
    while stack:
        parent = stack.pop()
        for child, started, zombie in children.get(parent, []):
            found.append((child, parent, started, zombie))
            stack.append(child)
    return found


@contextlib.contextmanager
def _stderr_to_devnull() -> Iterator[None]:
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "wb") as devnull:
            os.dup2(devnull.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _run_all(ray, runner, tasks, max_in_flight, max_retries, progress) -> Iterator[dict]:
    if not tasks:
        return
    remote = ray.remote(num_cpus=1, max_retries=max_retries, retry_exceptions=False)(_run_task)
    window = max_in_flight or max(1, 2 * int(ray.cluster_resources().get("CPU", 1)))
    runner_ref = ray.put(runner)
    bar = _Bar(len(tasks), progress)
    pending: dict = {}
    queue = iter(tasks)
    try:
        for task in queue:
            pending[remote.remote(runner_ref, task)] = task
            if len(pending) >= window:
                break
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1)
            task = pending.pop(done[0])
            manifest = _get(ray, done[0], task)
            bar.update(manifest)
            yield manifest
            next_task = next(queue, None)
            if next_task is not None:
                pending[remote.remote(runner_ref, next_task)] = next_task
    finally:  # tasks still pending end with the job (this driver); cancelling them on
        bar.close()  # the way out raced their completion and crashed Ray's core worker


def _get(ray, ref, task: Task) -> dict:
    try:
        return ray.get(ref)
    except ray.exceptions.RayTaskError as error:
        cause = error.cause if isinstance(error.cause, BaseException) else None
        if isinstance(cause, DataError):
            raise cause from None
        raise
    except ray.exceptions.WorkerCrashedError as error:
        raise DataError(
            f"{task.describe()}: its worker died on every try ({error})"
        ) from None


class _Bar:
    """tqdm on the driver: tasks done of all, documents, MB/s of input."""

    def __init__(self, total: int, enabled: bool) -> None:
        from tqdm import tqdm

        self.bar = tqdm(
            total=total, unit=" tasks", disable=not enabled, file=sys.stderr,
            mininterval=0.5, dynamic_ncols=True,
        )
        self.documents = self.bytes = 0
        self.started = time.perf_counter()

    def update(self, manifest: dict) -> None:
        self.documents += manifest["documents"]
        self.bytes += manifest["bytes"]
        elapsed = max(time.perf_counter() - self.started, 1e-9)
        self.bar.set_postfix_str(
            f"{self.documents} docs, {self.bytes / 1e6 / elapsed:.1f} MB/s", refresh=False
        )
        self.bar.update(1)

    def close(self) -> None:
        self.bar.close()
