"""Temporary files named after their writer, and removal of those whose writer is dead.

Floor 0 (numpy and the standard library; from the core only ``errors``): every floor that
writes files uses it (the format's writer, the index cache, preprocessing).

Every temporary path is ``{directory}/.{label}.{pid}@{host}.{random}.tmp``: ``label``
says what it becomes (``corpus.bin``, ``K-P-sample_index.npy``), ``pid@host`` who writes
it. ``host`` is the host name plus a short hash of the kernel's boot id and the
writer's pid namespace: two machines that share a host name, two containers that
share one but not their pids, and the same machine after a reboot all count as
different hosts (so a reboot's leftovers are left for a person to remove).

:func:`remove_stale` deletes the temporaries of given labels whose writer is dead:
written on this host (same pid namespace) by a pid that no longer exists
(``os.kill(pid, 0)`` raises ProcessLookupError). Temporaries of other hosts are left
alone: no check can tell, on every shared file system, whether their writer still runs.
A reused pid only makes a stale file survive, never a live one go.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import secrets
import shutil
import socket
from collections.abc import Iterable

from megadata_core.errors import DataError

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
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
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
