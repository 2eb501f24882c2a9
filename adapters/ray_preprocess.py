"""The Ray engine of ``tools/preprocess_data.py --engine ray``: one Ray task per planned task.

``ray_engine(address=None)`` returns an engine for
``megadata_core.preprocess.preprocess_tasks``: it connects to ``address`` (default:
starts a local cluster, shut down at the end), ships the TaskRunner once
(``ray.put``), keeps at most ``max_in_flight`` tasks submitted (default twice the
cluster's CPUs), lets Ray retry a task whose worker died (``max_retries``; a DataError
is not retried: it would fail again) and shows a tqdm bar on the driver: tasks,
documents, MB/s. Each worker process builds the tokenizer once and keeps it for the
tasks of the same plan. The workers import megadata (and the modules the factories
live in): a local cluster gets the driver's ``sys.path`` as PYTHONPATH; on an existing
cluster they must be installed on every node.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator, Sequence

from megadata_core.errors import DataError
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
            "--engine ray needs the ray package: pip install 'megadata[ray]' "
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
        if started_here:
            _init(ray, address, num_cpus)
        try:
            yield from _run_all(ray, runner, tasks, max_in_flight, max_retries, progress)
        finally:
            if started_here:
                ray.shutdown()

    return run


def _init(ray, address: str | None, num_cpus: int | None) -> None:
    paths = [p for p in sys.path if p and os.path.isdir(p)]
    env = {"PYTHONPATH": os.pathsep.join(paths)} if address is None else {}
    try:
        ray.init(
            address=address, num_cpus=num_cpus, include_dashboard=False,
            runtime_env={"env_vars": env} if env else None, log_to_driver=False,
        )
    except ConnectionError as error:
        raise DataError(f"--ray_address: cannot connect to {address!r} ({error})") from None


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
    finally:
        for ref in pending:
            ray.cancel(ref, force=True)
        bar.close()


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
