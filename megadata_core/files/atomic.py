"""Writing a file whole or not at all, for every floor that writes one.

Temporaries are ``{directory}/.{label}.{pid}@{host}.{random}.tmp``: ``label`` says what
it becomes (``corpus.bin``, ``K-P-sample_index.npy``), ``pid@host`` who writes it.
``host`` is the host name plus a short hash of the kernel's boot id and the writer's pid
namespace: two machines that share a host name, two containers that share one but not
their pids, and the same machine after a reboot all count as different hosts (so a
reboot's leftovers are left for a person to remove). :func:`remove_stale` deletes the
temporaries whose writer is dead: written on this host by a pid that no longer exists.
Other hosts' temporaries are left alone (no check can tell, on every shared file system,
whether their writer still runs); a reused pid only makes a stale file survive.

:func:`write_atomically` writes a temporary, then ``os.replace``s it onto its path.
:func:`exclusive` and :func:`try_exclusive` take ``flock(2)`` locks (POSIX; elsewhere
none is taken). Lock files are left in place on purpose: unlinking one that others may
wait on is racy (they would lock an unlinked inode), unless the holder unlinks it while
holding it and waiters check that they locked the file still there (:func:`try_exclusive`
does). :func:`interrupts_deferred` holds Ctrl-C off while a step that must not be cut in
two runs: a finished ``.bin`` and then its ``.idx`` renamed onto their final names (cut
between them, a new ``.bin`` would sit beside an old ``.idx``), or the clean-up that
leaves nothing behind.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import re
import secrets
import shutil
import signal
import socket
import threading
from collections.abc import Callable, Iterable, Iterator
from types import ModuleType
from typing import BinaryIO

from megadata_core.errors import DataError

fcntl: ModuleType | None
try:  # POSIX only
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None

_CLOEXEC = getattr(os, "O_CLOEXEC", 0)

_SUFFIX = ".tmp"
_MAX_LABEL = 180  # longer labels are cut and hashed so the name fits NAME_MAX (255)
_NAME = re.compile(
    r"^\.(?P<label>.+)\.(?P<pid>[0-9]+)@(?P<host>[A-Za-z0-9_.~-]+)\.[0-9a-f]{8}\.tmp$"
)


@functools.cache
def _host() -> str:
    name = re.sub(r"[^A-Za-z0-9_.-]", "-", socket.gethostname())[:40] or "localhost"
    try:
        with open("/proc/sys/kernel/random/boot_id", "rb") as stream:
            boot = stream.read().strip()
        namespace = os.stat("/proc/self/ns/pid").st_ino
    except OSError:  # no procfs (macOS): the host name alone
        return name
    return f"{name}~{hashlib.sha256(boot + b'/%d' % namespace).hexdigest()[:8]}"


def writer_id() -> str:
    """``pid@host`` of this process, as temporary names and lock files record it."""
    return f"{os.getpid()}@{_host()}"


def _label(label: str) -> str:
    if len(label) <= _MAX_LABEL:
        return label
    digest = hashlib.sha256(label.encode("utf-8", "surrogateescape")).hexdigest()[:8]
    return f"{label[: _MAX_LABEL - 9]}~{digest}"


def temp_path(directory: str, label: str) -> str:
    """A fresh temporary path in ``directory`` for ``label``, owned by this process."""
    name = f".{_label(label)}.{os.getpid()}@{_host()}.{secrets.token_hex(4)}{_SUFFIX}"
    return os.path.join(directory, name)


def create_file(directory: str, label: str) -> tuple[int, str]:
    """Create a new temporary file for writing; returns (fd, path).

    The mode is ``0o666 & ~umask``, what the final file would get from ``open``
    (``tempfile.mkstemp`` makes 0o600, which an ``os.replace`` carries over).
    """
    path = temp_path(directory, label)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _CLOEXEC
    return os.open(path, flags, 0o666), path


def create_directory(directory: str, label: str) -> str:
    """Create a new temporary directory (mode ``0o777 & ~umask``); returns its path."""
    path = temp_path(directory, label)
    os.mkdir(path)
    return path


def check_name_fits(directory: str, name: str, what: str) -> None:
    """DataError naming ``what`` when ``name`` is longer than ``directory`` allows."""
    try:
        limit = os.pathconf(directory, "PC_NAME_MAX")
    except (OSError, ValueError, AttributeError):
        limit = 255
    size = len(os.fsencode(name))
    if size > limit:
        raise DataError(
            f"{what}: file name {name!r} is {size} bytes, longer than the {limit} that "
            f"{directory} allows"
        )


def _writer_is_dead(pid: int, host: str) -> bool:
    if host != _host() or pid == os.getpid() or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:  # PermissionError: alive, another user's
        return False
    return False


def writer_is_dead(writer: str) -> bool:
    """Whether ``writer`` (a :func:`writer_id`, ``pid@host``) is a process of this host
    (machine and PID namespace) that no longer runs; False where that cannot be told."""
    pid, found, host = writer.partition("@")
    return bool(found) and pid.isdigit() and _writer_is_dead(int(pid), host)


def remove_stale(directory: str, labels: Iterable[str]) -> list[str]:
    """Remove the temporaries in ``directory`` of ``labels`` whose writer is dead.

    Files and directories alike; returns the removed paths. Best effort: an
    unreadable directory or a file removed meanwhile by another cleaner is no error.
    """
    return _remove_matching(directory, labels, _writer_is_dead)


def remove_own(directory: str, labels: Iterable[str]) -> list[str]:
    """Remove the temporaries in ``directory`` of ``labels`` that this process wrote
    (what an interrupted step of its own may have left); returns the removed paths."""
    return _remove_matching(
        directory, labels, lambda pid, host: pid == os.getpid() and host == _host()
    )


def _remove_matching(directory: str, labels: Iterable[str], writer_matches) -> list[str]:
    """Remove the temporaries of ``labels`` whose ``writer_matches(pid, host)``."""
    wanted = {_label(label) for label in labels}
    removed: list[str] = []
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return removed
    for entry in entries:
        if not entry.name.endswith(_SUFFIX):
            continue
        match = _NAME.match(entry.name)
        if match is None or match["label"] not in wanted:
            continue
        if not writer_matches(int(match["pid"]), match["host"]):
            continue
        try:
            if entry.is_dir(follow_symlinks=False):
                remove_tree(entry.path)
            else:
                os.unlink(entry.path)
        except FileNotFoundError:  # another cleaner was first
            continue
        except OSError:  # not ours to remove (permissions): leave it
            continue
        removed.append(entry.path)
    return removed


def remove_tree(path: str) -> None:
    """``shutil.rmtree`` that tolerates a second cleaner removing the same tree."""
    for attempt in range(3):
        try:
            shutil.rmtree(path)
            return
        except FileNotFoundError:
            if attempt == 2 or not os.path.lexists(path):
                raise


def write_atomically(
    path: str, write: Callable[[BinaryIO], object], *, durable: bool = False,
    clean: bool = True,
) -> None:
    """``write(stream)`` into a temporary file next to ``path``, renamed onto it.

    The rename is atomic for every running process: readers see the old file or the
    whole new one. With ``durable`` the data is fsync'ed before the rename (a record
    that must survive a crash); without, a file torn by a crash must be caught by its
    reader (the index cache checks a CRC of every file). Temporaries of ``path`` that
    dead writers on this host left behind are removed first (:func:`remove_stale`);
    this call's own is removed when ``write`` raises. A writer of many files in one
    directory passes ``clean=False`` and removes the stale temporaries of all of them
    once (one scan of the directory instead of one per file).
    """
    directory, name = os.path.split(path)
    directory = directory or "."
    if clean:
        remove_stale(directory, [name])
    handle, temporary_path = create_file(directory, name)
    try:
        with os.fdopen(handle, "wb") as stream:
            write(stream)
            if durable:
                stream.flush()
                os.fsync(stream.fileno())
        os.replace(temporary_path, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary_path)


@contextlib.contextmanager
def exclusive(lock_path: str) -> Iterator[bool]:
    """Hold an exclusive lock on ``lock_path`` (waiting for it), created if needed;
    yields False where locking failed (no fcntl, a read-only directory, a file system
    without flock): the caller then goes on unlocked, as safely as its writes allow."""
    if fcntl is None:
        yield False
        return
    try:
        os.makedirs(os.path.dirname(lock_path) or ".", exist_ok=True)
        handle = os.open(lock_path, os.O_RDWR | os.O_CREAT | _CLOEXEC, 0o666)
    except OSError:
        yield False
        return
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX)
        except OSError:
            yield False
            return
        yield True
    finally:
        os.close(handle)  # closing releases the lock


def try_exclusive(path: str) -> int:
    """An open descriptor of ``path`` (created if needed) holding its exclusive lock,
    without waiting. Retries when the holder it raced with unlinked the file it held.

    Raises:
        BlockingIOError: another process holds the lock (the descriptor is closed).
        OSError: the file cannot be opened or locked (no flock on this file system).
    """
    if fcntl is None:  # pragma: no cover - Windows
        raise OSError("file locks need fcntl (POSIX)")
    while True:
        handle = os.open(path, os.O_RDWR | os.O_CREAT | _CLOEXEC, 0o666)
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BaseException:
            os.close(handle)
            raise
        try:  # the holder we raced with may have unlinked the file it locked
            if os.stat(path).st_ino == os.fstat(handle).st_ino:
                return handle
        except FileNotFoundError:
            pass
        os.close(handle)


@contextlib.contextmanager
def interrupts_deferred() -> Iterator[None]:
    """Run the block with SIGINT held; one that arrived meanwhile is raised after it
    (to the handler in place). Only the main thread can change signal handlers;
    elsewhere, or under a non-Python handler, the block runs as it is."""
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
