"""The work directory of a task-plan run: one shard per task and key, each task's manifest.

``{output_prefix}.work/`` holds ``plan.json`` (the command and its fingerprint), and per
task ``task000007_{key}_{level}.bin/.idx`` and ``task000007.json``, the manifest:
documents, tokens, sizes and sha256 of every shard file, the fingerprint. A manifest is
written last and atomically (temporary file, then ``os.replace``), so a task counts as
done only when every byte of it is on disk; a rerun skips a task whose manifest matches
its files and the plan, and rebuilds any other.

A work directory made by a different command is refused with a DataError naming the
differences (it is never deleted on a guess: it may be hours of someone's work).

Several drivers (on several machines) may share a work directory: each runs a task only
while it holds the task's claim (``claims/``, :class:`~megadata_core.files.claims.Claims`),
cleans only the partial files of tasks it holds (:func:`remove_task_partials`), and the
outputs are merged by the one holding the ``merge`` claim, which then writes
``published.json``. A run without a task size keeps its shards in its staging directory:
:func:`driver_lock` holds an ``fcntl.flock`` on ``driver.lock``
(its text: the holder's ``pid@host``) for the whole run, and a second driver is refused
with a DataError naming the holder. The kernel drops the lock when its holder dies
(``kill -9`` included), so a dead driver's lock file is simply taken over.

Before the outputs get their names, every file of a run (shards, merged corpora, the
writers' temporaries) lives in a hidden staging directory of its own beside them,
``.{name}.partial.{pid}@{host}.{random}.tmp/`` (:class:`Staging`): then the outputs (and
kept shards) are renamed into place and the directory is removed. A killed run leaves only
that directory; the next run for the same ``output_prefix`` removes it once its writer is
known dead (``megadata_core.files.atomic``).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Iterator, Mapping, Sequence

import numpy as np

from megadata_core.errors import DataError
from megadata_core.files import atomic as temp_files
from megadata_core.files.atomic import interrupts_deferred, try_exclusive, write_atomically
from megadata_core.format import IndexedDatasetWriter
from megadata_core.format.reader import bin_path_of, idx_path_of
from megadata_core.preprocess.plan import Task, command_differences

_PLAN_FILE = "plan.json"
_LOCK_FILE = "driver.lock"
#: The names of the manifests of finished tasks (``task000007.json``).
MANIFEST_GLOB = "task*.json"


def work_directory(output_prefix: str) -> str:
    return f"{os.path.abspath(output_prefix)}.work"


def shard_prefix(directory: str, task: Task, key: str, level: str, part: int | None = None) -> str:
    """A task's shard of ``key``; of partition ``part`` with Megatron's partitions."""
    name = task.name if part is None else f"{task.name}_p{part}"
    return os.path.join(directory, f"{name}_{key}_{level}")


def manifest_path(directory: str, task: Task) -> str:
    return os.path.join(directory, f"{task.name}.json")


def write_json(path: str, content: Mapping) -> None:
    """Write ``content`` to ``path`` atomically and durably (temporary file, fsync,
    os.replace): a manifest says a task is done."""
    text = json.dumps(content, sort_keys=True, indent=1).encode("utf-8")
    write_atomically(path, lambda stream: stream.write(text), durable=True)


def _make_work_directory(directory: str) -> None:
    """Create ``directory`` if needed; a DataError when it cannot be one."""
    if os.path.exists(directory) and not os.path.isdir(directory):
        raise DataError(f"{directory}: exists and is not a work directory")
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError as error:
        raise DataError(f"{directory}: cannot create work directory ({error.strerror})") from None


@contextlib.contextmanager
def driver_lock(directory: str) -> Iterator[None]:
    """Create ``directory`` if needed and hold its driver lock (see the module docstring)."""
    _make_work_directory(directory)
    path = os.path.join(directory, _LOCK_FILE)
    handle = _locked(directory, path)
    try:
        os.ftruncate(handle, 0)
        os.pwrite(handle, temp_files.writer_id().encode(), 0)
        yield
    finally:
        with contextlib.suppress(FileNotFoundError):  # removed with the directory
            os.unlink(path)  # while held: a waiting driver then finds the file replaced
        os.close(handle)  # releases the lock


def _locked(directory: str, path: str) -> int:
    """An open descriptor of ``path`` holding its exclusive lock."""
    try:
        return try_exclusive(path)
    except BlockingIOError:
        holder = ""
        with contextlib.suppress(OSError), open(path, "rb") as stream:
            holder = stream.read(256).decode("utf-8", "replace").strip()
        raise DataError(
            f"{directory}: in use by another driver ({holder or 'pid@host not yet written'}"
            "); one driver per work directory: wait for it to end or stop it"
        ) from None
    except OSError as error:
        raise DataError(
            f"{path}: cannot lock ({error.strerror}); the work directory needs a file "
            "system with file locks"
        ) from None


def open_work_directory(directory: str, command: Mapping, fingerprint: str) -> None:
    """Create ``directory`` with its plan, or check an existing one was made by ``command``."""
    plan_file = os.path.join(directory, _PLAN_FILE)
    if os.path.isdir(directory) and os.path.exists(plan_file):
        try:
            with open(plan_file, encoding="utf-8") as stream:
                previous = json.load(stream)
            old_command, old_fingerprint = previous["command"], previous["fingerprint"]
        except (OSError, ValueError, KeyError, TypeError) as error:
            raise DataError(
                f"{plan_file}: unreadable plan of an earlier run ({error}); remove {directory} "
                "to start over"
            ) from None
        if old_fingerprint != fingerprint:
            differences = command_differences(old_command, command) or ["(fingerprint only)"]
            raise DataError(
                f"{directory}: work directory of a different command, refused (remove it to "
                f"start over, or use another --output_prefix); differences: "
                + "; ".join(differences)
            )
        return
    _make_work_directory(directory)
    write_json(plan_file, {"command": command, "fingerprint": fingerprint})


def _file_digest(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as stream:
        while block := stream.read(1 << 22):
            digest.update(block)
    return digest.hexdigest()


def shard_files(
    directory: str, task: Task, keys: Sequence[str], level: str, parts: int = 1
) -> list[str]:
    files = []
    for part in [None] if parts == 1 else range(parts):
        for key in keys:
            prefix = shard_prefix(directory, task, key, level, part)
            files += [bin_path_of(prefix), idx_path_of(prefix)]
    return files


def file_records(paths: Sequence[str], digests: bool = True) -> dict[str, list]:
    """basename -> [size, sha256 (None without ``digests``: a run that never resumes)] of
    finished shard files."""
    return {os.path.basename(p): [os.path.getsize(p), _file_digest(p) if digests else None]
            for p in paths}


def verified_manifest(
    directory: str, task: Task, keys: Sequence[str], level: str, fingerprint: str, parts: int = 1
) -> dict | None:
    """The task's manifest when it matches the plan and every shard file; else None."""
    path = manifest_path(directory, task)
    try:
        with open(path, encoding="utf-8") as stream:
            manifest = json.load(stream)
        if (
            manifest["fingerprint"] != fingerprint
            or manifest["index"] != task.index
            or manifest["task"] != task.as_list()
        ):
            return None
        expected = shard_files(directory, task, keys, level, parts)
        records = manifest["files"]
        if sorted(records) != sorted(os.path.basename(p) for p in expected):
            return None
        for file in expected:
            size, digest = records[os.path.basename(file)]
            if os.path.getsize(file) != size or _file_digest(file) != digest:
                return None
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return manifest


def remove_task_files(directory: str, task: Task) -> None:
    """Remove a task's manifest (first) and shards, finished or not."""
    stem = f"{task.name}_"
    for name in [f"{task.name}.json", *sorted(os.listdir(directory))]:
        if name == f"{task.name}.json" or name.startswith(stem):
            try:
                os.unlink(os.path.join(directory, name))
            except FileNotFoundError:
                pass


def remove_task_partials(directory: str, task: Task) -> None:
    """Remove what an attempt at ``task`` left (its manifest, shards and the hidden
    temporaries of its writers, on any host): only for a task whose claim this driver
    holds, so no other driver is writing them."""
    stems = (f"{task.name}_", f".{task.name}_", f".{task.name}.json.")
    for name in [f"{task.name}.json", *sorted(os.listdir(directory))]:
        if name == f"{task.name}.json" or name.startswith(stems):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(directory, name))


def remove_strays(directory: str, keep: set[str]) -> list[str]:
    """Remove every entry of ``directory`` but ``plan.json`` and the names in ``keep``:
    partial shards, temporaries of killed writers (on any host: one driver owns the
    directory, and it calls this only when no task of its own is running)."""
    removed = []
    for entry in os.scandir(directory):
        if entry.name in (_PLAN_FILE, _LOCK_FILE) or entry.name in keep:
            continue
        if entry.is_dir(follow_symlinks=False):
            temp_files.remove_tree(entry.path)
        else:
            os.unlink(entry.path)
        removed.append(entry.path)
    return removed


class Staging:
    """The private directory of one run writing the corpora ``final_prefixes``.

    Created at once, so an unwritable output directory fails before any work;
    ``publish`` moves finished corpora into place; ``remove`` (or leaving the
    ``with`` block) deletes whatever is left.
    """

    def __init__(self, output_prefix: str, final_prefixes: Sequence[str]) -> None:
        self.directory = os.path.dirname(os.path.abspath(output_prefix))
        if not os.path.isdir(self.directory):
            what = "is not a directory" if os.path.exists(self.directory) else "does not exist"
            raise DataError(f"output_prefix: directory {self.directory} {what}")
        longest = max((os.path.basename(p) for p in final_prefixes), key=len)
        temp_files.check_name_fits(self.directory, f"{longest}.idx", "output_prefix")
        label = _staging_label(output_prefix)
        temp_files.remove_stale(self.directory, [label])
        try:
            self.path = temp_files.create_directory(self.directory, label)
        except OSError as error:
            raise DataError(
                f"output_prefix: cannot write in directory {self.directory}: "
                f"{error.strerror or error}"
            ) from None

    def staged(self, final_prefix: str) -> str:
        """Where the corpus that becomes ``final_prefix`` is written."""
        return os.path.join(self.path, os.path.basename(final_prefix))

    def publish(self, final_prefixes: Sequence[str]) -> None:
        """Rename the staged corpora onto their final names (.bin first, then .idx), all
        of them or (on an error) what was renamed before it; Ctrl-C waits until all are
        (:func:`~megadata_core.files.atomic.interrupts_deferred`), so a ``.bin`` never
        sits beside another run's ``.idx``."""
        with interrupts_deferred():
            for prefix in final_prefixes:
                staged = self.staged(prefix)
                os.replace(bin_path_of(staged), bin_path_of(prefix))
                os.replace(idx_path_of(staged), idx_path_of(prefix))

    def remove(self) -> None:
        """Remove the directory and whatever is left in it (Ctrl-C waits until it is)."""
        with contextlib.suppress(FileNotFoundError), interrupts_deferred():
            temp_files.remove_tree(self.path)

    def __enter__(self) -> Staging:
        return self

    def __exit__(self, *exc_info) -> None:
        self.remove()


def _staging_label(output_prefix: str) -> str:
    """The temporary label of the staging directories of ``output_prefix``."""
    return f"{os.path.basename(output_prefix)}.partial"


@contextlib.contextmanager
def staging_for(output_prefix: str, final_prefixes: Sequence[str]) -> Iterator[Staging]:
    """A :class:`Staging` for the block, removed however the block ends: also when a
    Ctrl-C lands while it is made (after its directory exists) or in its ``__exit__``
    before the removal, which ``with Staging(...)`` alone leaves open."""
    try:
        with Staging(output_prefix, final_prefixes) as made:
            yield made
    except BaseException:
        with interrupts_deferred():
            directory = os.path.dirname(os.path.abspath(output_prefix))
            temp_files.remove_own(directory, [_staging_label(output_prefix)])
        raise


def write_documents(
    writer: IndexedDatasetWriter,
    tokens: np.ndarray,
    sequence_lengths: np.ndarray,
    document_sequences: np.ndarray,
    mask: np.ndarray | None = None,
) -> None:
    """Append documents (``document_sequences[d]`` sequences each), or those where ``mask``."""
    if mask is not None:
        bounds = np.concatenate([[0], np.cumsum(sequence_lengths)])
        ends = np.cumsum(document_sequences)
        starts = ends - document_sequences
        tokens = tokens[np.repeat(mask, bounds[ends] - bounds[starts])]
        sequence_lengths = sequence_lengths[np.repeat(mask, document_sequences)]
        document_sequences = document_sequences[mask]
    writer.add_documents(tokens, sequence_lengths, document_sequences)
