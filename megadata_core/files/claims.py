"""Claims on named pieces of work, shared by the processes and hosts that see one directory.

A claim of ``name`` is a file ``{name}.{generation:06d}`` in the claims directory,
created exclusively (a hard link of a finished temporary: atomic on local and network
file systems, it fails when the name exists), holding ``{"owner", "beat", "released"}``.
Its holder rewrites it (``beat`` + 1) every ``lease / 4`` seconds from a thread of its
own, and marks it released when it lets go (:meth:`Claims.close`, or at the end of the
work). Expiry needs no shared clock: a claim is expired when a process has watched its
content stay unchanged for ``lease`` seconds of its own monotonic clock. The taker then
creates generation + 1; of several takers racing, exactly one creation succeeds, and
the holder of the old generation drops it at its next beat (it sees a newer one). The
work claimed must be idempotent (written under temporary names, published by
``os.replace`` with the same bytes whoever makes it): a holder that was only slow and
finishes anyway publishes what the taker publishes.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time

from megadata_core.errors import DataError
from megadata_core.files import atomic as temp_files

#: Seconds a claim's content must stay unchanged before another process takes it over.
DEFAULT_LEASE_S = 30.0


class Claims:
    """This process's claims in ``directory`` (made if missing).

    Args:
        directory: where the claim files live (shared by every claimant).
        lease: seconds of an unchanged claim before it is taken over.
        owner: who claims (default ``pid@host``, as temporary names record it).
    """

    def __init__(self, directory: str, lease: float = DEFAULT_LEASE_S,
                 owner: str | None = None) -> None:
        if not isinstance(lease, (int, float)) or not lease > 0:
            raise DataError(f"claim lease: {lease!r} must be a number of seconds > 0")
        self.directory = directory
        self.lease = float(lease)
        self.owner = owner or temp_files.writer_id()
        try:
            os.makedirs(directory, exist_ok=True)
        except OSError as error:
            raise DataError(f"{directory}: cannot create ({error.strerror})") from None
        self._held: dict[str, list[int]] = {}  # name -> [generation, beat]
        self._seen: dict[str, tuple[int, bytes, float]] = {}  # name -> (gen, body, since)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._pid = os.getpid()

    # -- the files --------------------------------------------------------------------

    def _path(self, name: str, generation: int) -> str:
        return os.path.join(self.directory, f"{name}.{generation:06d}")

    def _latest(self, name: str) -> int:
        """The newest generation of ``name`` (-1: never claimed)."""
        stem = f"{name}."
        generations = [int(entry[len(stem):]) for entry in _listing(self.directory)
                       if entry.startswith(stem) and entry[len(stem):].isdigit()]
        return max(generations, default=-1)

    def _body(self, beat: int, released: bool = False) -> bytes:
        return json.dumps({"owner": self.owner, "beat": beat, "released": released}).encode()

    def _create(self, name: str, generation: int) -> bool:
        handle, temp = temp_files.create_file(self.directory, f"claim-{name}")
        try:
            os.write(handle, self._body(0))
            os.close(handle)
            try:
                os.link(temp, self._path(name, generation))
            except FileExistsError:
                return False
            return True
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temp)

    def _write(self, name: str, generation: int, body: bytes) -> None:
        temp_files.write_atomically(self._path(name, generation),
                                    lambda stream: stream.write(body))

    def _read(self, name: str, generation: int) -> bytes | None:
        try:
            with open(self._path(name, generation), "rb") as stream:
                return stream.read()
        except FileNotFoundError:
            return None

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
        with contextlib.suppress(ValueError):
            if json.loads(body).get("released"):
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
                with contextlib.suppress(OSError):
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
                    if self._latest(name) != held[0]:  # taken over: we were too slow
                        del self._held[name]
                        continue
                    held[1] += 1
                    with contextlib.suppress(OSError):
                        self._write(name, held[0], self._body(held[1]))


def _listing(directory: str) -> list[str]:
    try:
        return os.listdir(directory)
    except FileNotFoundError:
        return []
