"""The Ray engine of ``tools/preprocess_data.py --engine ray``: one Ray task per planned task.

``ray_engine(address=None)`` returns an engine for
``megadata_core.preprocess.preprocess_tasks``: it connects to ``address`` (default:
starts a local cluster, shut down at the end), ships the TaskRunner once
(``ray.put``), keeps at most ``max_in_flight`` tasks submitted (default twice the
cluster's CPUs), lets Ray retry a task whose worker died (``max_retries``; a DataError
is not retried: it would fail again) and shows a tqdm bar on the driver: tasks,
documents, MB/s. A local cluster it started is shut down on the way out, after an error
or a Ctrl-C too (its processes block SIGINT, so a terminal's Ctrl-C reaches only the
driver, which stops them in order). Each worker process builds the tokenizer once
and keeps it for the tasks of the same plan. The workers import megadata (and the
modules the factories live in): a local cluster gets the driver's ``sys.path`` as
PYTHONPATH; on an existing cluster they must be installed on every node.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
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
        finished = False
        others = {pid for pid, _ in _descendants()} if started_here else set()
        try:
            if started_here:
                _init(ray, address, num_cpus)
            yield from _run_all(ray, runner, tasks, max_in_flight, max_retries, progress)
            finished = True
        finally:
            if started_here:  # (also after a Ctrl-C during init: what it started stops)
                with interrupts_deferred():  # a Ctrl-C now waits for the cluster to stop
                    _shut_down(ray, others, quiet=not finished)

    return run


def _init(ray, address: str | None, num_cpus: int | None) -> None:
    paths = [p for p in sys.path if p and os.path.isdir(p)]
    env = {"PYTHONPATH": os.pathsep.join(paths)} if address is None else {}
    try:
        ray.init(
            address=address, num_cpus=num_cpus, include_dashboard=False,
            runtime_env={"env_vars": env} if env else None, log_to_driver=False,
            logging_level=logging.ERROR,  # not "Started a local Ray instance" on stderr
        )
    except ConnectionError as error:
        raise DataError(f"--ray_address: cannot connect to {address!r} ({error})") from None


def _shut_down(ray, others: set[int], quiet: bool) -> None:
    """Stop the local cluster this driver started, and any of its processes that outlive
    ``ray.shutdown()`` (its agents, when a Ctrl-C cut ``ray.init`` short): this process's
    descendants but ``others``, those it had before. ``quiet`` (the run was cut short):
    Ray's messages about the tasks it drops go to /dev/null."""
    family = [(pid, started) for pid, started in _descendants() if pid not in others]
    with _stderr_to_devnull() if quiet else contextlib.nullcontext():
        ray.shutdown()
    for pid, started in family:
        if _start_time(pid) == started:  # still that process (not a reused pid)
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


def _start_time(pid: int) -> int | None:
    """When process ``pid`` started (clock ticks since boot), or None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stream:
            fields = stream.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return int(fields[19]) if fields[0] not in (b"Z", b"X") else None


def _descendants() -> list[tuple[int, int]]:
    """``(pid, start time)`` of every live descendant of this process (/proc; none
    elsewhere)."""
    children: dict[int, list[int]] = {}
    try:
        entries = [int(name) for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return []
    for pid in entries:
        try:
            with open(f"/proc/{pid}/stat", "rb") as stream:
                parent = int(stream.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(parent, []).append(pid)
    found, stack = [], [os.getpid()]
    while stack:
        for child in children.get(stack.pop(), []):
            started = _start_time(child)
            if started is not None:
                found.append((child, started))
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
