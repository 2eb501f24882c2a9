"""What of a raw corpus is on disk: its directory under a cache, and what each piece is.

The directory of raw shards tokenized into a cache, ``{root}/{key}/`` (the key: a hash of
the shard names, the tokenizer and every option that changes bytes), holds:

* ``plan.json``: the shards' identities (size and mtime, or size and ETag/generation)
  and the pieces. A shard whose identity changed is refused with a DataError naming it:
  its tokens there would be stale.
* ``pieces/``: each finished piece as the preprocessing work directory holds a task
  (``task000007_{key}_document.bin/.idx`` and the manifest ``task000007.json``, written
  last and atomically), until its shard is merged. A conversation encoder's pieces also
  hold each token's role (``task000007_{key}_roles_document.bin/.idx``, in the manifest).
* ``shards/``: each shard, once all its pieces are made, merged into
  ``{n:05d}-{stem}_{key}_document.bin/.idx`` (byte for byte what ``megadata-preprocess``
  writes for that shard alone) with its record ``{n:05d}.json`` (the sequences of each
  piece), published in that order; then the shard's pieces are removed. Conversations:
  the shard's roles beside it (``..._document_roles.bin/.idx``, merged from the pieces'
  roles and published with the tokens, before the record), as ``megadata-preprocess``
  writes them beside its corpus.
* ``corpus.json`` and ``corpus.data_args`` once every shard is merged: an ordinary
  corpus (Megatron's ``--data-args-path`` reads the list; with conversations
  ``corpus.json`` also lists the roles siblings, found beside each prefix).

:class:`RawDirectory` reads and writes that layout (the producer and the readers of
:mod:`megadata_core.preprocess.stream` stand on it); :func:`directory_status` reads it
without a tokenizer (``megadata-inspect``).
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from megadata_core.errors import DataError
from megadata_core.files import atomic as temp_files
from megadata_core.files.atomic import interrupts_deferred
from megadata_core.format import IndexedDataset, merge_datasets
from megadata_core.format.reader import bin_path_of, idx_path_of
from megadata_core.format.roles import ROLES_SUFFIX, roles_prefix
from megadata_core.preprocess.plan import TableReader, Task, input_identities, plan_tasks
from megadata_core.preprocess.remote import is_remote
from megadata_core.preprocess.workdir import (
    manifest_path,
    remove_task_files,
    shard_prefix,
    staging_for,
    write_json,
)

_SUFFIXES = (".jsonl", ".json", ".jsonl.gz", ".json.gz", ".jsonl.zst", ".json.zst", ".parquet")
#: The level of the corpora (no sentence splitting).
LEVEL = "document"


def shard_paths(paths: str | Sequence[str]) -> list[str]:
    """The shards ``paths`` names: paths, URLs, or local globs (``*``, ``?``, ``[``,
    expanded and sorted); DataError for a glob that matches nothing or a file of another
    kind."""
    items = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
    found: list[str] = []
    for item in items:
        item = os.fspath(item)
        if not is_remote(item) and any(c in item for c in "*?["):
            matches = sorted(glob.glob(item, recursive=True))
            if not matches:
                raise DataError(f"raw shards: {item!r} matches no file")
            found.extend(matches)
        else:
            found.append(item)
    if not found:
        raise DataError("raw shards: no shards given")
    for path in found:
        if not path.endswith(_SUFFIXES):
            raise DataError(f"{path}: not a raw shard (expected one of {', '.join(_SUFFIXES)})")
        if not is_remote(path) and not os.path.isfile(path):
            raise DataError(f"{path}: raw shard not found")
    return [path if is_remote(path) else os.path.abspath(path) for path in found]


class RawDirectory:
    """The on-disk side of a raw corpus: its plan, where each piece is, the merges.

    Set by the subclass: ``shards`` (paths), ``key`` and ``directory``, ``text_key``, ``options``
    (JSON-ready: what the key hashes), ``table_reader``, ``tasks`` and ``piece_shard``
    (``_plan``), ``_records`` (shard records read), ``_done`` (pieces made, as the
    producer knows them) and ``roles`` (whether every corpus has its roles beside it: a
    conversation encoder's).
    """

    shards: list[str]
    key: str
    directory: str
    text_key: str
    options: dict
    table_reader: TableReader | None
    tasks: list[Task]
    piece_shard: np.ndarray
    _records: dict[int, dict]
    _done: set[int]
    roles: bool = False

    # -- the plan ---------------------------------------------------------------------

    def _plan(self, piece_size: int) -> list[Task]:
        identities = input_identities(self.shards)
        plan_file = os.path.join(self.directory, "plan.json")
        stored = read_json(plan_file)
        if stored is not None:
            for path, old, new in zip(self.shards, stored["inputs"], identities):
                if list(old) != list(new):
                    raise DataError(
                        f"{path}: raw shard changed since it was tokenized into "
                        f"{self.directory} (size, mtime or ETag {old[1:]} there, {new[1:]} "
                        "now); its tokens there are stale: restore the shard, or remove "
                        "that directory to tokenize it again"
                    )
            return [Task(k, path, kind, start, stop)
                    for k, (path, kind, start, stop) in enumerate(stored["tasks"])]
        tasks = plan_tasks(self.shards, piece_size, table_reader=self.table_reader,
                           sizes=[item[1] for item in identities])
        try:
            os.makedirs(os.path.join(self.directory, "pieces"), exist_ok=True)
            os.makedirs(os.path.join(self.directory, "shards"), exist_ok=True)
        except OSError as error:
            raise DataError(f"{self.directory}: cannot create ({error.strerror})") from None
        write_json(plan_file, {"inputs": identities, "tasks": [t.as_list() for t in tasks],
                               "options": json.loads(json.dumps(self.options, default=repr))})
        return tasks

    @property
    def pieces(self) -> int:
        return len(self.tasks)

    def describe(self) -> dict:
        """What identifies the tokens (for the cache keys of indices built on them)."""
        return {"raw_corpus": self.key, "pieces": self.pieces}

    # -- what is made -----------------------------------------------------------------

    def _shard_record(self, shard: int) -> dict | None:
        record = self._records.get(shard)
        if record is None:
            record = read_json(self._shard_record_path(shard))
            if record is not None:
                self._records[shard] = record
        return record

    def _shard_record_path(self, shard: int) -> str:
        return os.path.join(self.directory, "shards", f"{shard:05d}.json")

    def shard_prefix(self, shard: int) -> str:
        """Where shard ``shard``'s merged corpus is (or will be) published."""
        stem = os.path.basename(self.shards[shard]).split(".")[0]
        return os.path.join(self.directory, "shards",
                            f"{shard:05d}-{stem}_{self.text_key}_{LEVEL}")

    def _piece_prefix(self, index: int) -> str:
        return shard_prefix(os.path.join(self.directory, "pieces"), self.tasks[index],
                            self.text_key, LEVEL)

    def _piece_roles_prefix(self, index: int) -> str:
        return shard_prefix(os.path.join(self.directory, "pieces"), self.tasks[index],
                            self.text_key + ROLES_SUFFIX, LEVEL)

    def roles_location(self, index: int, prefix: str) -> str | None:
        """The prefix of the roles beside ``prefix``, piece ``index``'s corpus as
        :meth:`locate` gave it (the piece's own roles, or its merged shard's sibling); None
        when the corpus has no roles."""
        if not self.roles:
            return None
        if prefix == self._piece_prefix(index):
            return self._piece_roles_prefix(index)
        return roles_prefix(prefix)

    def locate(self, index: int) -> tuple[str, int, int | None] | None:
        """Where piece ``index``'s sequences are: ``(corpus prefix, first, stop)`` (stop
        None: to the corpus's end), or None while it is not made."""
        shard = int(self.piece_shard[index])
        record = self._shard_record(shard)
        if record is not None:
            position = record["tasks"].index(index)
            first = sum(record["sequences"][:position])
            return self.shard_prefix(shard), first, first + record["sequences"][position]
        manifest = read_json(manifest_path(os.path.join(self.directory, "pieces"),
                                            self.tasks[index]))
        if manifest is None or manifest.get("task") != self.tasks[index].as_list():
            return None
        return self._piece_prefix(index), 0, None

    def complete(self) -> bool:
        """Whether every shard is merged (``corpus.json`` written)."""
        return os.path.exists(os.path.join(self.directory, "corpus.json"))

    def _check_identity(self, path: str) -> None:
        stored = read_json(os.path.join(self.directory, "plan.json"))
        if stored is None or is_remote(path):
            return
        old = stored["inputs"][self.shards.index(path)]
        new = input_identities([path])[0]
        if list(old) != list(new):
            raise DataError(f"{path}: raw shard changed while it was being tokenized "
                            f"(size, mtime {old[1:]} planned, {new[1:]} now)")

    def _clean_shard(self, shard: int) -> None:
        """The partial files of shard ``shard``'s unmade pieces, left by a producer that
        died (this one holds the shard's claim now, so nobody else writes them)."""
        pieces = os.path.join(self.directory, "pieces")
        labels = []
        for index in np.flatnonzero(self.piece_shard == shard).tolist():
            labels.append(f"{self.tasks[index].name}.json")
            for prefix in self._piece_files(index):
                labels += [f"{os.path.basename(prefix)}.bin", f"{os.path.basename(prefix)}.idx"]
            if index not in self._done:
                remove_task_files(pieces, self.tasks[index])
        temp_files.remove_stale(pieces, labels)
        temp_files.remove_stale(os.path.join(self.directory, "shards"), ["merge.partial"])

    def _piece_files(self, index: int) -> list[str]:
        """The prefixes of piece ``index``'s corpora: its tokens, and its roles."""
        prefix = self._piece_prefix(index)
        return [prefix] + ([self._piece_roles_prefix(index)] if self.roles else [])

    def _merge_if_complete(self, shard: int) -> None:
        if self._shard_record(shard) is not None:
            return
        members = np.flatnonzero(self.piece_shard == shard).tolist()
        if not all(index in self._done for index in members):
            return
        prefixes = [self._piece_prefix(index) for index in members]
        sequences = []
        for prefix in prefixes:
            corpus = IndexedDataset(prefix)
            sequences.append(len(corpus))
            corpus.close()
        final = self.shard_prefix(shard)
        finals = [final] + ([roles_prefix(final)] if self.roles else [])
        shards_dir = os.path.join(self.directory, "shards")
        with staging_for(os.path.join(shards_dir, "merge"), finals) as staging:
            merge_datasets(prefixes, staging.staged(final))
            if self.roles:  # the roles beside the tokens, published with them
                merge_datasets([self._piece_roles_prefix(index) for index in members],
                               staging.staged(finals[1]))
            staging.publish(finals)
        write_json(self._shard_record_path(shard),
                   {"shard": self.shards[shard], "tasks": members, "sequences": sequences,
                    "prefix": os.path.basename(final)})
        with interrupts_deferred():
            for index in members:
                paths = [path for prefix in self._piece_files(index)
                         for path in (bin_path_of(prefix), idx_path_of(prefix))]
                for path in (*paths, manifest_path(os.path.join(self.directory, "pieces"),
                                                   self.tasks[index])):
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(path)

    def _write_corpus(self) -> None:
        prefixes = [self.shard_prefix(shard) for shard in range(len(self.shards))]
        tokens = []
        for prefix in prefixes:
            corpus = IndexedDataset(prefix)
            tokens.append(int(np.asarray(corpus.sequence_lengths).sum(dtype=np.int64)))
            corpus.close()
        lines = "".join(f"{count} {prefix}\n" for count, prefix in zip(tokens, prefixes)
                        if count > 0)
        temp_files.write_atomically(os.path.join(self.directory, "corpus.data_args"),
                                    lambda stream: stream.write(lines.encode()))
        roles = {"roles": [roles_prefix(prefix) for prefix in prefixes]} if self.roles else {}
        write_json(os.path.join(self.directory, "corpus.json"),
                   {"shards": self.shards, "prefixes": prefixes, "tokens": tokens, **roles,
                    "options": json.loads(json.dumps(self.options, default=repr))})


def read_json(path: str) -> Any:
    try:
        with open(path, encoding="utf-8") as stream:
            return json.load(stream)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as error:
        raise DataError(f"{path}: unreadable ({error})") from None


def directory_status(directory: str) -> dict:
    """What a raw corpus directory holds, from its files alone (no tokenizer): ``shards``
    (names), ``pieces``, ``pieces_made``, ``tokens_made``, ``merged`` (shard prefixes
    published), ``complete``, ``data_args`` (the list's path once complete) and ``error``
    (a producer's error, or None). DataError for a directory that is not one."""
    plan = read_json(os.path.join(directory, "plan.json"))
    if plan is None or "tasks" not in plan:
        raise DataError(f"{directory}: not a raw corpus directory (no plan.json)")
    tasks = [Task(k, *item) for k, item in enumerate(plan["tasks"])]
    shards = [identity[0] for identity in plan["inputs"]]
    merged, made, tokens = [], 0, 0
    merged_tasks: set[int] = set()
    for shard in range(len(shards)):
        record = read_json(os.path.join(directory, "shards", f"{shard:05d}.json"))
        if record is not None:
            merged.append(os.path.join(directory, "shards", record["prefix"]))
            merged_tasks.update(record["tasks"])
            corpus = IndexedDataset(merged[-1])
            tokens += int(np.asarray(corpus.sequence_lengths).sum(dtype=np.int64))
            corpus.close()
    made = len(merged_tasks)
    for task in tasks:
        if task.index in merged_tasks:
            continue
        manifest = read_json(manifest_path(os.path.join(directory, "pieces"), task))
        if manifest is not None and manifest.get("task") == task.as_list():
            made += 1
            tokens += sum(int(count) for key, count in manifest["tokens"].items()
                          if not key.endswith(ROLES_SUFFIX))  # (roles: the tokens' again)
    complete = os.path.exists(os.path.join(directory, "corpus.json"))
    error = read_json(os.path.join(directory, "error.json"))
    return {"shards": shards, "pieces": len(tasks), "pieces_made": made,
            "tokens_made": tokens, "merged": merged, "complete": complete,
            "data_args": os.path.join(directory, "corpus.data_args") if complete else None,
            "error": None if error is None else error["message"]}
