"""Raw text shards tokenized in the background into the cache, read while it runs.

A :class:`RawCorpus` is a list of raw shards (``.jsonl``, ``.jsonl.gz``, ``.jsonl.zst``,
``.parquet``; local or by URL) with a tokenizer, cut into pieces by the preprocessing
plan (:func:`~megadata_core.preprocess.plan.plan_tasks`: about ``piece_size`` bytes of
lines, a compressed file, or row groups), made into its directory under a cache
(:mod:`megadata_core.preprocess.raw_directory`: the layout, the merged shards, the
finished corpus).

One producer per host and directory (an ``fcntl.flock`` on ``producer.{host}.lock``,
dropped by the kernel when its holder dies): a background thread that makes pieces in
the order the readers need them (:meth:`RawCorpus.want`), each on the usable cores
(``TaskRunner(task, threads=n)``, the preprocessing fast path). A reader waiting for a
piece (:meth:`RawCorpus.wait`) that finds no producer alive becomes one, so a killed
producer's work goes on and nothing finished is made twice. A producer's error is
written to ``error.json`` and raised by every reader.

Hosts that share the directory (a shared file system) share the work by shard: a
producer makes a piece only while it holds its shard's claim
(:class:`~megadata_core.files.claims.Claims` under ``claims/``), skips the pieces of
shards other hosts hold (their readers find them made there), merges the shards it
holds, and takes over a shard whose holder stopped beating for ``lease`` seconds. The
host is ``$MEGADATA_HOST_ID`` when set (several "hosts" on one machine), else the
machine and its PID namespace.

Hosts that share no file system share a store instead (``shared``: an object store
prefix such as ``s3://bucket/prefix``, or a directory;
:func:`~megadata_core.files.claims.open_store`): the claims live there, each piece made
is uploaded there (its files to ``pieces/``, then its manifest with their sizes and
sha256 to ``manifests/``: listed alone, to see what is published), and every
host copies the pieces others made into its own cache directory, checks them against
that manifest, and merges every shard itself. The first host records the plan there; a
host whose shards were cut differently is refused.

A conversation encoder (a :class:`~megadata_core.preprocess.encoding.ConversationEncoder`,
its ``text_key`` the messages' key) makes each piece's roles beside its tokens, as
``megadata-preprocess`` does: the manifests, uploads, merged shards and the finished
corpus carry them (:mod:`~megadata_core.preprocess.raw_directory`).
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import json
import os
import sys
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from megadata_core.errors import DataError
from megadata_core.files import atomic as temp_files
from megadata_core.files.atomic import try_exclusive
from megadata_core.files.claims import Claims, default_lease, host_id, host_owner, open_store
from megadata_core.format import IndexedDataset, optimal_dtype
from megadata_core.preprocess.conversations import is_conversational, output_keys
from megadata_core.preprocess.encoding import Tokenizer
from megadata_core.preprocess.plan import TableReader, input_identities, is_table
from megadata_core.preprocess.raw_directory import (
    LEVEL,
    RawDirectory,
    read_json,
    shard_paths,
)
from megadata_core.preprocess.reading import open_input
from megadata_core.preprocess.remote import is_remote
from megadata_core.preprocess.tasks import Engine, TaskRunner, runner_pool
from megadata_core.preprocess.threads import threads_for_native
from megadata_core.preprocess.workdir import file_records, manifest_path, write_json

_WAIT_NOTE_SECONDS = 5.0  # between two progress lines of one wait
_POLL_S = 0.25  # between two looks at the shards other hosts hold, when idle

# The producers of this process, stopped (between blocks) when the interpreter exits.
_PRODUCERS: weakref.WeakSet = weakref.WeakSet()
# Every corpus of this process: a forked child gets fresh locks (a producer thread may
# have held one at the fork, and no thread of the child would ever release it).
_CORPORA: weakref.WeakSet = weakref.WeakSet()


class _StopRequestedError(Exception):
    """The producer was asked to stop (the process is exiting)."""


class RawCorpus(RawDirectory):
    """Raw shards, their pieces, and what of them is tokenized under ``directory``.

    Args:
        paths: the shards (:func:`shard_paths`).
        tokenizer_factory: a zero-argument callable returning a Tokenizer.
        root: the directory under which this corpus's directory is made (a cache).
        text_key: the JSON key (parquet column) of the text; with a conversation
            encoder, the key (column) of each record's messages.
        append_eod: append the tokenizer's EOD to each document.
        piece_size: bytes per piece.
        description: what identifies the tokenizer (default: its repr, vocab size, EOD).
        table_reader: for parquet shards.
        engine: runs the pieces instead (an Engine of ``preprocess_tasks``, e.g. Ray's),
            given them in the order the readers need them.
        threads: cores a piece is tokenized on: threads of this process for a native
            encoder (default: the usable cores), processes for a Python one (default:
            this process's producer thread alone).
        lease: seconds before a stopped host's shard claim is taken over (default
            ``$MEGADATA_CLAIM_LEASE_S``, else 30).
        shared: a store the hosts share instead of the cache directory (``s3://bucket/
            prefix`` or a directory): claims and pieces go through it.
    """

    def __init__(
        self,
        paths: str | Sequence[str],
        tokenizer_factory: Callable[[], Tokenizer],
        root: str,
        *,
        text_key: str = "text",
        append_eod: bool = True,
        piece_size: int = 4 << 20,
        description: Any = None,
        table_reader: TableReader | None = None,
        threads: int | None = None,
        engine: Engine | None = None,
        lease: float | None = None,
        shared: str | None = None,
    ) -> None:
        self.shards = shard_paths(paths)
        if lease is None:
            lease = default_lease()
        self.lease = lease
        self.engine = engine
        if any(is_table(path) for path in self.shards) and table_reader is None:
            raise DataError(f"{next(p for p in self.shards if is_table(p))}: parquet shards "
                            "need a table reader (pip install 'megadata-core[parquet]')")
        self.tokenizer_factory = tokenizer_factory
        self.table_reader = table_reader
        self.text_key = text_key
        self.append_eod = bool(append_eod)
        self.threads = threads
        tokenizer = tokenizer_factory()
        self.roles = is_conversational(tokenizer)
        self.vocab_size = int(tokenizer.vocab_size)
        self.eod_id = int(tokenizer.eod_id)
        self.dtype = np.dtype(optimal_dtype(self.vocab_size))
        if description is None:
            description = {"tokenizer": repr(tokenizer), "vocab_size": self.vocab_size,
                           "eod_id": self.eod_id}
        self.options = {"text_key": text_key, "append_eod": self.append_eod,
                        "piece_size": int(piece_size), "dtype": self.dtype.name,
                        "tokenizer": description}
        if self.roles:  # (absent otherwise: the directories of text corpora keep their keys)
            self.options["roles"] = True
        key_text = json.dumps({"shards": self.shards, "options": self.options},
                              sort_keys=True, default=repr)
        self.key = hashlib.sha256(key_text.encode()).hexdigest()[:20]
        self.directory = os.path.join(os.path.abspath(root), self.key)
        self.tasks = self._plan(int(piece_size))
        self.shared = None if shared is None else os.fspath(shared)
        self._store = (None if self.shared is None
                       else open_store(f"{self.shared.rstrip('/')}/{self.key}"))
        self._listed: tuple[float, set[str]] = (-1.0, set())  # (when, piece manifests)
        self._fetching = threading.Lock()
        if self._store is not None:
            self._check_shared_plan()
        shard_index = {path: k for k, path in enumerate(self.shards)}
        #: int64 [pieces]: the shard of each piece
        self.piece_shard = np.array([shard_index[t.path] for t in self.tasks], np.int64)
        self._runner: TaskRunner | None = None
        self._lock = threading.Lock()
        self._wanted: list[list] = []  # [order, cursor, urgent] per want()
        self._rest = 0  # pieces below it are done (the fallback order)
        self._done: set[int] = set()
        self._thread: threading.Thread | None = None
        self._pid = -1
        self._error: BaseException | None = None
        self._stop = False
        self._records: dict[int, dict] = {}
        self._made_tokens: list[tuple[float, int]] = []  # (time, tokens made) per piece
        self._claims: Claims | None = None
        self._foreign: set[int] = set()  # shards other hosts hold (skipped meanwhile)
        #: the pieces this process tokenized (not those found made by another host)
        self.made_here: list[int] = []
        _CORPORA.add(self)

    def open_piece(self, index: int, on_wait: Callable[[int, float], None] | None = None
                   ) -> tuple[IndexedDataset, int, int]:
        """``(corpus, first, stop)`` of piece ``index``, waiting until it is made."""
        corpus, _, first, stop = self.open_piece_roles(index, on_wait)
        return corpus, first, stop

    def open_piece_roles(self, index: int, on_wait: Callable[[int, float], None] | None = None
                         ) -> tuple[IndexedDataset, IndexedDataset | None, int, int]:
        """``(corpus, roles, first, stop)`` of piece ``index``, waiting until it is made:
        ``roles`` the corpus of its tokens' roles, from the same place (None without a
        conversation encoder)."""
        for _ in range(3):  # a piece merged into its shard while opened: found there next
            where = self.wait(index, on_wait)
            prefix, first, stop = where
            roles_at = self.roles_location(index, prefix)
            try:
                corpus = IndexedDataset(prefix)
                corpus.token_view()  # mapped now: the piece files may go once merged
                roles = None if roles_at is None else IndexedDataset(roles_at)
                if roles is not None:
                    roles.token_view()
            except (FileNotFoundError, DataError):
                if self._shard_record(int(self.piece_shard[index])) is None:
                    raise
                continue
            return corpus, roles, first, len(corpus) if stop is None else stop
        raise DataError(f"{self.directory}: piece {index} could not be opened")

    def wait(self, index: int, on_wait: Callable[[int, float], None] | None = None
             ) -> tuple[str, int, int | None]:
        """:meth:`locate` of piece ``index``, waiting (and producing, when no producer
        runs) until it is made; ``on_wait(index, seconds)`` about every 5 s of a wait."""
        started = noted = time.monotonic()
        pause = 0.002
        while True:
            found = self._find(index)
            if found is not None:
                return found
            self._raise_error()
            if not self._producing():
                self.start()
            self._prefer(index)
            time.sleep(pause)
            pause = min(0.05, pause * 2)
            now = time.monotonic()
            if on_wait is not None and now - noted >= _WAIT_NOTE_SECONDS:
                noted = now
                on_wait(index, now - started)

    def _raise_error(self) -> None:
        if self._error is not None and self._pid == os.getpid():
            error = self._error
            raise DataError(str(error)) if not isinstance(error, DataError) else error
        found = read_json(os.path.join(self.directory, "error.json"))
        if found is not None:
            raise DataError(found["message"])

    def tokens_per_second(self) -> float:
        """Tokens this process's producer made per second over its last pieces."""
        made = self._made_tokens[-16:]
        if len(made) < 2:
            return 0.0
        seconds = made[-1][0] - made[0][0]
        return sum(tokens for _, tokens in made[1:]) / seconds if seconds > 0 else 0.0

    # -- the producer -----------------------------------------------------------------

    def want(self, order: np.ndarray, urgent: int = 0) -> None:
        """Make the pieces of ``order`` (int [K]) in that order, its first ``urgent`` ones
        before any other order's (a split's first window). Several orders (splits,
        members) are served by how far each has come."""
        with self._lock:
            self._wanted.append([np.asarray(order, np.int64).tolist(), 0, int(urgent)])

    def _prefer(self, index: int) -> None:
        if not self._producing():
            return
        with self._lock:
            if not self._wanted or self._wanted[0][0] != [index]:
                self._wanted.insert(0, [[index], 0, 1])

    def _next(self, done: set[int] | None = None) -> int | None:
        """The next piece to make (not in ``done``, default: the pieces made; not of a
        shard another host holds): an order's urgent pieces first (in the order wanted),
        then the order least far along; then any piece left."""
        done = self._done if done is None else done
        shards, foreign = self.piece_shard, self._foreign
        with self._lock:
            best, best_rank = None, None
            for number, entry in enumerate(self._wanted):
                order, cursor, urgent = entry
                while cursor < len(order) and order[cursor] in done:
                    cursor += 1
                entry[1] = cursor
                while cursor < len(order) and (order[cursor] in done
                                               or shards[order[cursor]] in foreign):
                    cursor += 1  # (skipped for now, not for good)
                if cursor == len(order):
                    continue
                rank = (0 if cursor < urgent else 1, cursor / len(order), number)
                if best_rank is None or rank < best_rank:
                    best, best_rank = order[cursor], rank
            self._wanted = [entry for entry in self._wanted if entry[1] < len(entry[0])]
            if best is None:
                while self._rest < self.pieces and self._rest in done:
                    self._rest += 1
                rest = self._rest
                while rest < self.pieces and (rest in done or shards[rest] in foreign):
                    rest += 1
                best = rest if rest < self.pieces else None
            return best

    def _producing(self) -> bool:
        thread = self._thread
        return self._pid == os.getpid() and thread is not None and thread.is_alive()

    def start(self) -> bool:
        """Start producing in a background thread of this process, unless a producer
        runs (here or in another process); whether this process now produces."""
        if self._producing() or self.complete():
            return self._producing()
        try:
            handle = try_exclusive(os.path.join(self.directory, f"producer.{host_id()}.lock"))
        except BlockingIOError:
            return False
        except OSError as error:
            raise DataError(f"{self.directory}: cannot lock ({error.strerror}); raw shards "
                            "need a file system with file locks") from None
        os.ftruncate(handle, 0)
        os.pwrite(handle, temp_files.writer_id().encode(), 0)
        self._pid, self._error, self._stop = os.getpid(), None, False
        self._thread = threading.Thread(target=self._produce, args=(handle,),
                                        name="megadata-raw-tokenizer", daemon=True)
        _PRODUCERS.add(self)
        self._thread.start()
        return True

    def stop(self) -> None:
        """Stop this process's producer (after the block it is tokenizing) and wait."""
        self._stop = True
        thread = self._thread
        if thread is not None and self._pid == os.getpid() and thread.is_alive():
            thread.join()

    def _produce(self, handle: int) -> None:
        try:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(self.directory, "error.json"))
            runner = self._make_runner()
            self._done = {i for i in range(self.pieces) if self.locate(i) is not None}
            claims_store = (os.path.join(self.directory, "claims") if self.shared is None
                            else open_store(f"{self.shared.rstrip('/')}/{self.key}/claims"))
            self._claims = Claims(claims_store, self.lease,
                                  owner=host_owner())
            self._foreign = set()
            threads = self._threads()
            native = getattr(runner.tools()[0], "block_encoder", None) is not None
            if self.engine is not None:
                self._make_pieces_on(self.engine, runner)
            elif self.threads is not None and threads > 1 and not native:
                # a Python encoder asked for N workers: processes, not threads
                with runner_pool(runner, threads, "spawn") as pool:
                    self._make_pieces(runner, threads, pool)
            else:
                self._make_pieces(runner, threads, None)
            if self._all_merged() and not self.complete():
                self._write_corpus()
        except _StopRequestedError:
            pass
        except BaseException as error:  # raised by every reader, here and elsewhere
            self._error = error
            message = str(error) if isinstance(error, DataError) else \
                f"{self.directory}: the background tokenizer failed: {error!r}"
            with contextlib.suppress(OSError):
                write_json(os.path.join(self.directory, "error.json"), {"message": message})
        finally:
            if self._claims is not None:
                self._claims.close()
            os.close(handle)

    def _make_pieces_on(self, engine: Engine, runner: TaskRunner) -> None:
        """Make the pieces not yet made on ``engine``: in waves of every piece of the
        shards this producer could claim, given in the order wanted now; then, once
        other hosts' shards are free or expired, the next wave."""
        while not self._stop:
            order: list[int] = []
            scheduled = set(self._done)
            while (index := self._next(scheduled)) is not None:
                scheduled.add(index)
                shard = int(self.piece_shard[index])
                if not self._claim(shard):
                    continue
                if index in self._done:  # made by the shard's previous holder
                    self._merge_held(shard)
                    continue
                order.append(index)
            if not order:
                if self._all_merged():
                    return
                time.sleep(_POLL_S)
                self._look_at_foreign()
                continue
            results = engine(runner, [self.tasks[index] for index in order])
            try:
                for manifest in results:
                    self.made_here.append(int(manifest["index"]))
                    self._made(int(manifest["index"]), manifest)
                    if self._stop:
                        raise _StopRequestedError()
            finally:
                close = getattr(results, "close", None)
                if close is not None:
                    close()

    def _made(self, index: int, manifest: dict) -> None:
        with self._lock:
            self._done.add(index)
        made = int(manifest["tokens"][self.text_key])
        self._made_tokens.append((time.monotonic(), made))
        if self._store is not None:
            self._publish(index)
        self._merge_held(int(self.piece_shard[index]))

    def _merge_held(self, shard: int) -> None:
        """Merge shard ``shard`` (held) once all its pieces are made, then let it go."""
        self._merge_if_complete(shard)
        if self._shard_record(shard) is not None and self._claims is not None:
            self._claims.release(f"shard{shard:05d}")

    def _claim(self, shard: int) -> bool:
        """Whether this producer holds shard ``shard`` (claimed now if free or expired;
        its partial files from a dead holder removed then)."""
        claims = self._claims
        if claims is None:
            return True
        name = f"shard{shard:05d}"
        if claims.holds(name):
            return True
        if self._store is not None and self._fetched_whole(shard):
            return False  # published by other hosts: merged here, never tokenized again
        if not claims.try_claim(name):
            self._foreign.add(shard)
            return False
        self._foreign.discard(shard)
        self._listed = (-1.0, set())  # listed again: what the last holder published first
        pieces = np.flatnonzero(self.piece_shard == shard).tolist()
        found = [i for i in pieces if self._find(i) is not None]
        with self._lock:  # made by the holder before: found now
            self._done.update(found)
        self._clean_shard(shard)
        return True

    def _all_merged(self) -> bool:
        return all(self._shard_record(shard) is not None for shard in range(len(self.shards)))

    def _look_at_foreign(self) -> None:
        """What other hosts made of the shards they hold; the unmerged shards whose
        pieces are all made, and the shards whose holders stopped, claimed."""
        for shard in range(len(self.shards)):
            if self._shard_record(shard) is not None:
                self._foreign.discard(shard)
                continue
            if self._store is not None and self._fetched_whole(shard):
                self._foreign.discard(shard)
                continue
            pieces = np.flatnonzero(self.piece_shard == shard).tolist()
            found = [i for i in pieces if self._find(i) is not None]
            with self._lock:
                self._done.update(found)
            if shard in self._foreign or all(i in self._done for i in pieces):
                self._foreign.discard(shard)
                if self._claim(shard):
                    self._merge_held(shard)

    def _make_pieces(self, runner: TaskRunner, threads: int, pool) -> None:
        """Make the pieces not yet made, in the order wanted, each on ``threads`` of this
        process (a native encoder) or over the processes of ``pool``; the pieces of
        shards other hosts hold are theirs to make until their claims expire."""
        looked = time.monotonic()
        while not self._stop:
            index = self._next()
            if index is None or time.monotonic() - looked > self.lease / 4:
                if index is None and self._all_merged():
                    return
                if index is None:
                    time.sleep(_POLL_S)
                self._look_at_foreign()
                looked = time.monotonic()
                continue
            if not self._claim(int(self.piece_shard[index])):
                continue
            if index in self._done:  # made by the shard's previous holder
                self._merge_held(int(self.piece_shard[index]))
                continue
            self._check_identity(self.tasks[index].path)
            if pool is not None:
                manifest = runner(self.tasks[index], pool=pool)
            else:
                manifest = runner(self.tasks[index], threads=threads)
            self.made_here.append(index)
            self._made(index, manifest)

    def _threads(self) -> int:
        return self.threads if self.threads is not None else threads_for_native()

    def _make_runner(self) -> TaskRunner:
        # the fingerprint names the corpus and its directory: an engine's workers keep one
        # runner per fingerprint, and two raw corpora (or hosts) must not share one
        fingerprint = hashlib.sha256(f"{self.key}\0{self.directory}".encode()).hexdigest()
        runner = TaskRunner(
            os.path.join(self.directory, "pieces"), fingerprint[:20], self.tokenizer_factory,
            [self.text_key], LEVEL, self.dtype, self.append_eod, False, open_input,
            self.table_reader,
            objects=[item for item in input_identities(
                [p for p in self.shards if is_remote(p)])],
        )
        runner.digests = self._store is not None  # (a fetched piece is checked by them)
        # each piece's roles beside its tokens (in its manifest's files: uploaded, fetched)
        runner.outputs = output_keys([self.text_key], runner.tools()[0])

        def on_part(task, part) -> None:
            if self._stop:
                raise _StopRequestedError()

        runner.on_part = on_part
        runner.tools()
        return runner

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state.update(_runner=None, _lock=None, _thread=None, _pid=-1, _error=None, engine=None,
                     _wanted=[], _done=set(), _made_tokens=[], _claims=None, _foreign=set(),
                     _listed=(-1.0, set()), _fetching=None)
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()
        self._fetching = threading.Lock()
        _CORPORA.add(self)

    # -- the shared store -------------------------------------------------------------

    def _check_shared_plan(self) -> None:
        """Record the pieces in the shared store, or check them against those recorded
        there (hosts must cut the same shards into the same pieces)."""
        assert self._store is not None
        body = json.dumps({"tasks": [task.as_list() for task in self.tasks]}).encode()
        if self._store.create("plan.json", body):
            return
        stored = self._store.read("plan.json")
        if stored != body:
            raise DataError(
                f"{self._store.url}/plan.json: the shared store's pieces were cut from "
                "other shards than this host's (a shard differs between hosts, or its "
                "copy here changed); give every host the same shards")

    def _published(self) -> set[str]:
        """The piece manifests in the shared store, ``manifests/{task}.json`` (listed at
        most every 0.25 s)."""
        assert self._store is not None
        when, names = self._listed
        if time.monotonic() - when >= _POLL_S:
            names = set(self._store.names("manifests/"))
            self._listed = (time.monotonic(), names)
        return names

    def _find(self, index: int) -> tuple[str, int, int | None] | None:
        """:meth:`locate`, after copying piece ``index`` from the shared store when
        another host published it there."""
        found = self.locate(index)
        if found is not None or self._store is None:
            return found
        if f"manifests/{self.tasks[index].name}.json" not in self._published():
            return None
        with self._fetching:
            found = self.locate(index)
            if found is None and self._fetch(index):
                found = self.locate(index)
        return found

    def _fetch(self, index: int) -> bool:
        """Copy piece ``index``'s files from the shared store into ``pieces/``, each
        checked against the size and sha256 its manifest there gives, then the manifest
        (last); False when it is not there."""
        assert self._store is not None
        task = self.tasks[index]
        where = f"{self._store.url}/manifests/{task.name}.json"
        body = self._store.read(f"manifests/{task.name}.json")
        if body is None:
            return False
        try:
            manifest = json.loads(body)
            files = dict(manifest["files"])
            matches = manifest["task"] == task.as_list()
        except (ValueError, KeyError, TypeError):
            raise DataError(f"{where}: not a piece manifest") from None
        if not matches:
            raise DataError(f"{where}: the manifest of another piece ({manifest['task']!r}, "
                            f"not {task.as_list()!r})")
        pieces = os.path.join(self.directory, "pieces")
        for name, (size, digest) in sorted(files.items()):
            handle, temp = temp_files.create_file(pieces, "fetch")
            os.close(handle)
            try:
                if not self._store.download(f"pieces/{name}", temp):
                    raise DataError(f"{self._store.url}/pieces/{name}: missing, though "
                                    f"{where} names it")
                got = next(iter(file_records([temp]).values()))
                if list(got) != [size, digest]:
                    raise DataError(
                        f"{self._store.url}/pieces/{name}: {got[0]} bytes of sha256 "
                        f"{got[1]}, its manifest says {size} bytes of sha256 {digest}")
                os.replace(temp, os.path.join(pieces, name))
            finally:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(temp)
        write_json(manifest_path(pieces, task), manifest)
        return True

    def _fetched_whole(self, shard: int) -> bool:
        """Whether every piece of ``shard`` is here (copied from the shared store if
        published there), the shard then merged here."""
        pieces = np.flatnonzero(self.piece_shard == shard).tolist()
        if not all(self._find(i) is not None for i in pieces):
            return False
        with self._lock:
            self._done.update(pieces)
        with self._fetching:
            self._merge_if_complete(shard)
        return True

    def _publish(self, index: int) -> None:
        """Upload piece ``index``'s files to the shared store, then its manifest."""
        assert self._store is not None
        pieces = os.path.join(self.directory, "pieces")
        path = manifest_path(pieces, self.tasks[index])
        manifest = read_json(path)
        for name in sorted(manifest["files"]):
            self._store.upload(os.path.join(pieces, name), f"pieces/{name}")
        self._store.upload(path, f"manifests/{os.path.basename(path)}")

    def __repr__(self) -> str:
        return f"RawCorpus({len(self.shards)} shards, {self.pieces} pieces, {self.directory})"


def _after_fork_in_child() -> None:
    for corpus in list(_CORPORA):
        corpus._lock = threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)


@atexit.register
def _stop_producers() -> None:
    for corpus in list(_PRODUCERS):
        with contextlib.suppress(Exception):
            corpus.stop()


def note_wait(corpus: RawCorpus, index: int, seconds: float, consumed: float) -> None:
    """The one progress line of a wait: what the producer makes against what the
    trainer consumes, and the shard waited for."""
    made = corpus.tokens_per_second()
    shard = corpus.shards[int(corpus.piece_shard[index])]
    print(f"megadata: waiting {seconds:.0f} s for {shard} (piece {index}): tokenizer "
          f"{made:,.0f} tokens/s, trainer {consumed:,.0f} tokens/s", file=sys.stderr,
          flush=True)
