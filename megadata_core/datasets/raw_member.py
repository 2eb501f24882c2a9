"""What a blend member of raw text shards is: :class:`RawShards`, the config's value.

It names the shards (paths, URLs or globs of ``.jsonl``, ``.jsonl.gz``, ``.jsonl.zst``,
``.parquet``), the tokenizer (the preprocessing tokenizer types and files, as a dict, or a
zero-argument factory), the text key and the window, and stands in a blend wherever a
prefix does (``GPTDataConfig(blend=([RawShards(...), "/data/code"], [0.7, 0.3]))``, or
``{"raw": ...}`` in a JSON data config: :func:`raw_member`). Its tokens are made into the
cache by :class:`~megadata_core.preprocess.stream.RawCorpus` (:meth:`RawShards.corpus`);
:mod:`megadata_core.datasets.raw_shards` reads them as samples.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib import metadata
from typing import Any

from megadata_core import modes
from megadata_core.errors import DataError
from megadata_core.preprocess.raw_directory import shard_paths
from megadata_core.preprocess.stream import RawCorpus

_TOKENIZERS = "megadata.tokenizers"  # entry points: load(kind, path=None, **options)
_TABLES = "megadata.tables"  # entry points: a TableReader class per format
_ENGINES = "megadata.engines"  # entry points: engine(address, progress=...) per name
_CORPORA: dict[tuple, RawCorpus] = {}  # one per directory and process: one producer


@dataclass(frozen=True, eq=False)
class RawShards:
    """Raw text shards as a blend member.

    Args:
        paths: a path, URL or glob, or a list of them (globs expanded, sorted).
        tokenizer: ``{"type": "huggingface", "path": "tokenizer.json"}`` (the keys of
            the preprocessing tokenizer: ``type``, ``path`` and its options, e.g.
            ``encoder``, ``vocab_file``, ``merge_file``, ``tokenizer_model``,
            ``eod_token``) or a picklable zero-argument factory of a Tokenizer.
        text_key: the JSON key (parquet column) of each document's text.
        append_eod: append the tokenizer's EOD id to every document.
        window: pieces per window (documents and samples are shuffled within one).
        first_window: pieces of the first window; the first epoch's windows double from
            it up to ``window`` (the first batch waits for this many pieces only).
        piece_size: bytes of lines per piece (compressed shards are one piece each).
        workers: cores a piece is tokenized on: threads for a native encoder (None:
            the usable cores), spawned processes for a Python one (None: one thread).
        engine: where the pieces are tokenized instead of this process: ``"ray"`` (a
            Ray cluster: the one this process joined, else ``RAY_ADDRESS``'s, else a
            local one), ``"ray:ADDRESS"``, or an Engine of ``preprocess_tasks``.
        order: the raw order's name (``"windows"``).
        shared: where hosts that share no file system share the tokenizing: an object
            store prefix (``"s3://bucket/prefix"``) or a directory, holding the shard
            claims and the pieces made (each host keeps its own copy in its cache).
            None: hosts that share the cache directory share it there.
    """

    paths: Any
    tokenizer: Any
    text_key: str = "text"
    append_eod: bool = True
    window: int = 8
    first_window: int = 1
    piece_size: int = 4 << 20
    workers: int | None = None
    engine: Any = None
    order: str = "windows"
    shared: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "paths", tuple(shard_paths(self.paths)))
        if isinstance(self.tokenizer, Mapping):
            spec = dict(self.tokenizer)
            if not isinstance(spec.get("type"), str):
                raise DataError(f"raw shards: tokenizer {spec!r} needs a 'type' (e.g. "
                                "'huggingface', 'bytes', 'GPT2BPETokenizer')")
            object.__setattr__(self, "tokenizer", tuple(sorted(spec.items())))
        elif not callable(self.tokenizer):
            raise DataError(f"raw shards: tokenizer {self.tokenizer!r} is neither a dict "
                            "nor a factory")
        for name in ("window", "first_window", "piece_size"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise DataError(f"raw shards: {name} {value!r} must be a positive integer")
        if self.workers is not None and (not isinstance(self.workers, int) or self.workers < 1):
            raise DataError(f"raw shards: workers {self.workers!r} must be None or >= 1")
        if not isinstance(self.text_key, str) or not self.text_key:
            raise DataError(f"raw shards: text_key {self.text_key!r} must be a JSON key")
        modes.raw_order(self.order)
        if self.shared is not None and (not isinstance(self.shared, (str, os.PathLike))
                                        or not os.fspath(self.shared)):
            raise DataError(f"raw shards: shared {self.shared!r} must be a URL or a directory")
        engine = self.engine
        if engine is not None and not callable(engine) and not (
                isinstance(engine, str) and (engine == "ray" or engine.startswith("ray:"))):
            raise DataError(f"raw shards: engine {engine!r} is not 'ray', 'ray:ADDRESS' or "
                            "an engine")

    @classmethod
    def from_dict(cls, value: Mapping, field: str = "blend") -> RawShards:
        """``{"raw": paths, "tokenizer": {...}, ...}`` (a JSON data config's member)."""
        options = dict(value)
        paths = options.pop("raw", None)
        if paths is None:
            raise DataError(f"{field}: {value!r} is not a raw member (no 'raw' key)")
        known = {"tokenizer", "text_key", "append_eod", "window", "first_window",
                 "piece_size", "workers", "engine", "order", "shared"}
        unknown = sorted(set(options) - known)
        if unknown:
            raise DataError(f"{field}: raw member keys {unknown} are not among {sorted(known)}")
        return cls(paths, **options)

    def _key(self) -> tuple:
        return (*self._corpus_key(), self.window, self.first_window, self.order)

    def _corpus_key(self) -> tuple:
        """What the tokens depend on (one corpus, and one producer, per such key)."""
        tokenizer = self.tokenizer if isinstance(self.tokenizer, tuple) else repr(self.tokenizer)
        return (self.paths, tokenizer, self.text_key, self.append_eod, self.piece_size)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RawShards) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __str__(self) -> str:
        first = self.paths[0]
        more = f" and {len(self.paths) - 1} more" if len(self.paths) > 1 else ""
        return f"raw:{first}{more}"

    def tokenizer_factory(self) -> Callable[[], Any]:
        """A picklable zero-argument factory of the tokenizer."""
        if not isinstance(self.tokenizer, tuple):
            return self.tokenizer
        spec = dict(self.tokenizer)
        kind, path = spec.pop("type"), spec.pop("path", None)
        return functools.partial(_entry_point(_TOKENIZERS, "load"), kind, path, **spec)

    def _engine(self) -> Any:
        if not isinstance(self.engine, str):
            return self.engine
        address = self.engine.partition(":")[2] or None
        return _entry_point(_ENGINES, "ray")(address, progress=False)

    def table_reader(self) -> Any:
        if not any(path.endswith(".parquet") for path in self.paths):
            return None
        return _entry_point(_TABLES, "parquet")()

    def corpus(self, path_to_cache: str | None) -> RawCorpus:
        """The tokenized corpus of these shards under ``path_to_cache/raw`` (one object
        per directory in a process)."""
        if path_to_cache is None:
            raise DataError(f"path_to_cache: raw shards ({self}) are tokenized into the "
                            "cache; give a path_to_cache")
        key = (os.path.abspath(path_to_cache), self._corpus_key())
        found = _CORPORA.get(key)
        if found is None:
            description = (json.dumps(dict(self.tokenizer), sort_keys=True)
                           if isinstance(self.tokenizer, tuple) else None)
            found = RawCorpus(
                list(self.paths), self.tokenizer_factory(),
                os.path.join(path_to_cache, "raw"), text_key=self.text_key,
                append_eod=self.append_eod, piece_size=self.piece_size,
                table_reader=self.table_reader(), threads=self.workers,
                engine=self._engine(), shared=self.shared,
                description=None if description is None else {
                    "spec": description, **_tokenizer_identity(self.tokenizer_factory())},
            )
            _CORPORA[key] = found
        return found


def _tokenizer_identity(factory: Callable[[], Any]) -> dict:
    tokenizer = factory()
    return {"vocab_size": int(tokenizer.vocab_size), "eod_id": int(tokenizer.eod_id),
            "tokenizer": repr(tokenizer)}


def _entry_point(group: str, name: str) -> Any:
    for entry in metadata.entry_points(group=group):
        if entry.name == name:
            return entry.load()
    raise DataError(f"raw shards: nothing provides {group} {name!r} (pip install "
                    "'megadata-core[tokenizers]' installs megadata_adapters)")


def raw_member(value: object, field: str) -> RawShards | None:
    """``value`` as a raw member (a RawShards, or a dict with a ``raw`` key), else None."""
    if isinstance(value, RawShards):
        return value
    if isinstance(value, Mapping) and "raw" in value:
        return RawShards.from_dict(value, field)
    return None


def stop_raw_corpora() -> None:
    """Stop the background tokenizers of this process (each after the block it is on) and
    forget its raw corpora: a later build opens them anew, and what was made is kept."""
    for corpus in list(_CORPORA.values()):
        corpus.stop()
    _CORPORA.clear()
