"""Claims on named pieces of work, and the shared stores they are kept in.

A :class:`SharedStore` is what the claimants see in common: a directory (a local or
network file system, :class:`DirectoryStore`) or an object store prefix (``s3://``, from
the ``megadata.shared_stores`` entry points: ``adapters/storage/s3_boto3.py``). It
creates an object exclusively (a hard link of a finished temporary, or a conditional
``PUT`` with ``If-None-Match: *``: atomic, and it fails when the name exists), rewrites,
reads and lists objects, and copies files in and out of it whole.

A claim of ``name`` is an object ``{name}.{generation:06d}`` in the claims store, created
exclusively, holding ``{"owner", "beat", "released"}``. Its holder rewrites it (``beat``
+ 1) every ``lease / 4`` seconds from a thread of its own, and marks it released when it
lets go (:meth:`Claims.close`, or at the end of the work). Expiry needs no shared clock:
a claim is expired when a process has watched its content stay unchanged for ``lease``
seconds of its own monotonic clock (or, on the holder's own host, once its process is
gone). The taker then creates generation + 1; of several
takers racing, exactly one creation succeeds, and the holder of the old generation drops
it at its next beat (it sees a newer one). The work claimed must be idempotent (written
under temporary names, published by ``os.replace`` with the same bytes whoever makes
it): a holder that was only slow and finishes anyway publishes what the taker publishes.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from importlib import metadata
from typing import Protocol

from megadata_core.errors import DataError
from megadata_core.files import atomic as temp_files

#: Seconds a claim's content must stay unchanged before another process takes it over.
DEFAULT_LEASE_S = 30.0
#: The entry-point group of shared stores by URL scheme: ``factory(url) -> SharedStore``.
ENTRY_POINT_GROUP = "megadata.shared_stores"


def default_lease() -> float:
    """``$MEGADATA_CLAIM_LEASE_S`` seconds, else :data:`DEFAULT_LEASE_S`."""
    text = os.environ.get("MEGADATA_CLAIM_LEASE_S", "")
    try:
        return float(text) if text else DEFAULT_LEASE_S
    except ValueError:
        raise DataError(f"$MEGADATA_CLAIM_LEASE_S: {text!r} is not a number of seconds") from None


def host_id() -> str:
    """Which host this process is on: ``$MEGADATA_HOST_ID``, else the machine and its PID
    namespace (as temporary names record it)."""
    named = os.environ.get("MEGADATA_HOST_ID", "")
    return named if named else temp_files.writer_id().split("@", 1)[1]


def host_owner() -> str:
    """``pid@machine/host``: the owner this process's claims name (see :class:`Claims`)."""
    return f"{temp_files.writer_id()}/{host_id()}"


class SharedStore(Protocol):
    """Named objects that every claimant sees (names are relative, ``/``-separated)."""

    url: str

    def create(self, name: str, body: bytes) -> bool:
        """Write ``name`` only if it does not exist; whether this call created it."""
        ...

    def write(self, name: str, body: bytes) -> None:
        """Write (or overwrite) ``name`` whole."""
        ...

    def read(self, name: str) -> bytes | None:
        """The bytes of ``name``, or None when it does not exist."""
        ...

    def names(self, prefix: str) -> list[str]:
        """The names that start with ``prefix``."""
        ...

    def upload(self, path: str, name: str) -> None:
        """Copy the local file ``path`` to ``name`` (it appears whole, or not at all)."""
        ...

    def download(self, name: str, path: str) -> bool:
        """Copy ``name`` to the local file ``path`` (the caller's temporary name);
        False when ``name`` does not exist."""
        ...


class DirectoryStore:
    """A :class:`SharedStore` in a directory (made if missing)."""

    def __init__(self, directory: str) -> None:
        self.url = self.directory = os.fspath(directory)
        try:
            os.makedirs(self.directory, exist_ok=True)
        except OSError as error:
            raise DataError(f"{self.directory}: cannot create ({error.strerror})") from None
        temp_files.remove_stale(self.directory, ["claim"])  # of creators that died

    def _path(self, name: str) -> str:
        return os.path.join(self.directory, *name.split("/"))

    def create(self, name: str, body: bytes) -> bool:
        path = self._path(name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        handle, temp = temp_files.create_file(os.path.dirname(path), "claim")
        try:
            os.write(handle, body)
            os.close(handle)
            try:
                os.link(temp, path)
            except FileExistsError:
                return False
            return True
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temp)

    def write(self, name: str, body: bytes) -> None:
        path = self._path(name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        temp_files.write_atomically(path, lambda stream: stream.write(body))

    def read(self, name: str) -> bytes | None:
        try:
            with open(self._path(name), "rb") as stream:
                return stream.read()
        except FileNotFoundError:
            return None

    def names(self, prefix: str) -> list[str]:
        folder, _, stem = prefix.rpartition("/")
        try:
            entries = os.listdir(self._path(folder) if folder else self.directory)
        except FileNotFoundError:
            return []
        return [f"{folder}/{entry}" if folder else entry for entry in entries
                if entry.startswith(stem) and not entry.startswith(".")]

    def upload(self, path: str, name: str) -> None:
        with open(path, "rb") as stream:
            self.write(name, stream.read())

    def download(self, name: str, path: str) -> bool:
        body = self.read(name)
        if body is None:
            return False
        with open(path, "wb") as stream:
            stream.write(body)
        return True


def open_store(url: str) -> SharedStore:
    """The shared store at ``url``: a directory for a local path or ``file://``, else the
    store of the ``megadata.shared_stores`` entry point named by its scheme."""
    url = os.fspath(url)
    scheme, found, rest = url.partition("://")
    if not found or scheme == "file":
        return DirectoryStore(rest if found else url)
    for entry_point in metadata.entry_points(group=ENTRY_POINT_GROUP):
        if entry_point.name == scheme:
            store: SharedStore = entry_point.load()(url)
            return store
    raise DataError(f"{url}: no shared store for {scheme}:// (installed: "
                    f"{sorted(e.name for e in metadata.entry_points(group=ENTRY_POINT_GROUP))}; "
                    "s3:// needs pip install 'megadata-core[s3]')")


class Claims:
    """This process's claims in ``store`` (a :class:`SharedStore`, or a directory path,
    made if missing).

    Args:
        store: where the claims live (shared by every claimant).
        lease: seconds of an unchanged claim before it is taken over.
        owner: who claims: ``pid@host`` (the default, as temporary names record it),
            optionally ``/`` and a host name (a claim of a process that is gone, on the
            same machine and named host, is free at once).
    """

    def __init__(self, store: SharedStore | str, lease: float = DEFAULT_LEASE_S,
                 owner: str | None = None) -> None:
        if not isinstance(lease, (int, float)) or not lease > 0:
            raise DataError(f"claim lease: {lease!r} must be a number of seconds > 0")
        self.store: SharedStore = (DirectoryStore(store) if isinstance(store, (str, os.PathLike))
                                   else store)
        self.lease = float(lease)
        self.owner = owner or temp_files.writer_id()
        self._held: dict[str, list[int]] = {}  # name -> [generation, beat]
        self._seen: dict[str, tuple[int, bytes, float]] = {}  # name -> (gen, body, since)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._pid = os.getpid()

    # -- the objects ------------------------------------------------------------------

    @staticmethod
    def _name(name: str, generation: int) -> str:
        return f"{name}.{generation:06d}"

    def _latest(self, name: str) -> int:
        """The newest generation of ``name`` (-1: never claimed)."""
        stem = f"{name}."
        generations = [int(entry[len(stem):]) for entry in self.store.names(stem)
                       if entry[len(stem):].isdigit()]
        return max(generations, default=-1)

    def _body(self, beat: int, released: bool = False) -> bytes:
        return json.dumps({"owner": self.owner, "beat": beat, "released": released}).encode()

    def _create(self, name: str, generation: int) -> bool:
        return self.store.create(self._name(name, generation), self._body(0))

    def _write(self, name: str, generation: int, body: bytes) -> None:
        self.store.write(self._name(name, generation), body)

    def _read(self, name: str, generation: int) -> bytes | None:
        return self.store.read(self._name(name, generation))

    # -- claiming ---------------------------------------------------------------------

    def try_claim(self, name: str) -> bool:
        """Whether this process holds ``name`` now: it did, or it was free, released or
        expired and this process won it. Never waits."""
        self._forked()
        with self._lock:
            if name in self._held:
                return True
            generation = self._latest(name)
            if generation >= 0:
                body = self._read(name, generation)
                if body is not None and not self._expired(name, generation, body):
                    return False
            if not self._create(name, generation + 1):
                return False
            self._held[name] = [generation + 1, 0]
            self._seen.pop(name, None)
        self._beating()
        return True

    def _expired(self, name: str, generation: int, body: bytes) -> bool:
        with contextlib.suppress(ValueError, AttributeError):
            content = json.loads(body)
            if content.get("released"):
                return True
            # a holder on this host whose process is gone: no need to wait out the lease
            # (owners "pid@machine/host": the hosts named alike, as $MEGADATA_HOST_ID may)
            writer, *host = str(content.get("owner", "")).split("/", 1)
            if host == self.owner.split("/", 1)[1:] and temp_files.writer_is_dead(writer):
                return True
        now = time.monotonic()
        seen = self._seen.get(name)
        if seen is None or seen[:2] != (generation, body):
            self._seen[name] = (generation, body, now)
            return False
        return now - seen[2] >= self.lease

    def holds(self, name: str) -> bool:
        """Whether this process still holds ``name`` (False once another took it over)."""
        with self._lock:
            return name in self._held

    def release(self, name: str) -> None:
        """Let ``name`` go: others may claim it at once (the work is done, or dropped)."""
        with self._lock:
            held = self._held.pop(name, None)
            if held is not None and self._latest(name) == held[0]:
                with contextlib.suppress(OSError, DataError):
                    self._write(name, held[0], self._body(held[1] + 1, released=True))

    def close(self) -> None:
        """Release every claim held and stop beating."""
        if os.getpid() != self._pid:
            return
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()
        self._thread = None
        for name in list(self._held):
            self.release(name)

    # -- the heartbeat ----------------------------------------------------------------

    def _forked(self) -> None:
        if os.getpid() != self._pid:  # a forked child holds none of its parent's claims
            self._pid, self._held, self._seen = os.getpid(), {}, {}
            self._lock, self._stop, self._thread = threading.Lock(), threading.Event(), None

    def _beating(self) -> None:
        with self._lock:
            if self._thread is None:
                self._stop.clear()
                self._thread = threading.Thread(target=self._beat, name="megadata-claims",
                                                daemon=True)
                self._thread.start()

    def _beat(self) -> None:
        while not self._stop.wait(self.lease / 4):
            with self._lock:
                for name, held in list(self._held.items()):
                    with contextlib.suppress(OSError, DataError):  # (beats again next time)
                        if self._latest(name) != held[0]:  # taken over: we were too slow
                            del self._held[name]
                            continue
                        held[1] += 1
                        self._write(name, held[0], self._body(held[1]))

