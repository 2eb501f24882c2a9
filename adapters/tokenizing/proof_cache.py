"""Load-time proofs' verdicts kept on disk, so that a tokenizer proven once is not proven
again by every process that loads it.

A verdict (a dict of short strings: ``""`` for proven, else why not) is stored with the
key it answers: what was proven (``kind``), the sha256 of the tokenizer file's bytes, the
versions of the libraries whose ids the proof compared, and ``PROOF_VERSION`` (raised
whenever a proof changes). A file is used only when it is readable JSON holding exactly
that key and a verdict with the expected fields, all strings; anything else (a damaged,
foreign or stale file) is ignored, and the proof runs and rewrites it (atomically:
:func:`megadata_core.files.atomic.write_atomically`).

Beside a verdict, a proof may keep what it derived from the file (``store_payload``:
bytes, e.g. canonical merges and a normalizer's tables) so that a proven tokenizer loads
as fast as a native loader reads its file. A payload file holds the sha256 of its bytes
and is used only when they match (else it is rebuilt and rewritten).

Where: ``$MEGADATA_CACHE/proofs``, else ``$XDG_CACHE_HOME/megadata/proofs``, else
``~/.cache/megadata/proofs``. ``MEGADATA_PROOF_CACHE=0`` turns the cache off.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sys
from collections.abc import Callable, Sequence
from importlib import metadata

from megadata_core.files.atomic import write_atomically

__all__ = ["PROOF_VERSION", "cache_dir", "key", "load", "load_payload", "proven_once", "store",
           "store_payload"]

PROOF_VERSION = 2  # 2: byte-level BPE proven on the tokenizer.json as written


def cache_dir() -> str:
    """The directory verdicts live in (see the module docstring)."""
    root = os.environ.get("MEGADATA_CACHE")
    if not root:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"),
                                                                 ".cache")
        root = os.path.join(base, "megadata")
    return os.path.join(root, "proofs")


def enabled() -> bool:
    return os.environ.get("MEGADATA_PROOF_CACHE", "1") != "0"


def _version(package: str) -> str:
    module = sys.modules.get(package)  # an imported module's own version: no metadata read
    if isinstance(getattr(module, "__version__", None), str):
        return module.__version__
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return ""


def key(kind: str, data: bytes, libraries: Sequence[str]) -> dict:
    """The key of a proof of ``kind`` over a tokenizer file's bytes ``data``, made with
    ``libraries`` (their installed versions are part of it)."""
    return {"proof": PROOF_VERSION, "kind": kind, "sha256": hashlib.sha256(data).hexdigest(),
            "libraries": {name: _version(name) for name in libraries}}


def _path(proof_key: dict) -> str:
    name = hashlib.sha256(json.dumps(proof_key, sort_keys=True).encode()).hexdigest()
    return os.path.join(cache_dir(), name + ".json")


def load(proof_key: dict, fields: Sequence[str]) -> dict | None:
    """The verdict stored for ``proof_key`` (each of ``fields`` a string), or None when
    there is none, or the file is unreadable, damaged or answers another key."""
    if not enabled():
        return None
    try:
        with open(_path(proof_key), encoding="utf-8") as stream:
            stored = json.load(stream)
    except (OSError, ValueError):
        return None
    if not isinstance(stored, dict) or stored.get("key") != proof_key:
        return None
    verdict = stored.get("verdict")
    if not isinstance(verdict, dict) or set(verdict) != set(fields):
        return None
    if not all(isinstance(value, str) for value in verdict.values()):
        return None
    return verdict


def store(proof_key: dict, verdict: dict) -> None:
    """Write ``verdict`` for ``proof_key`` (atomically); a cache that cannot be written
    is skipped silently (the proof simply runs again next time)."""
    text = json.dumps({"key": proof_key, "verdict": verdict}, sort_keys=True)
    _write(_path(proof_key), text.encode("utf-8"))


def _write(path: str, data: bytes) -> None:
    """``data`` into ``path`` atomically (the user's umask), or nothing when the cache
    is off or cannot be written."""
    if not enabled():
        return
    with contextlib.suppress(OSError):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        write_atomically(path, lambda stream: stream.write(data))


def _payload_path(proof_key: dict, name: str) -> str:
    return _path(proof_key)[: -len(".json")] + f".{name}.bin"


def store_payload(proof_key: dict, name: str, data: bytes) -> None:
    """Keep ``data`` (derived by the proof of ``proof_key``) under ``name``: its sha256,
    then the bytes."""
    _write(_payload_path(proof_key, name), hashlib.sha256(data).digest() + data)


def load_payload(proof_key: dict, name: str) -> bytes | None:
    """The bytes kept under ``name`` for ``proof_key``, or None when there are none or they
    do not match their sha256."""
    if not enabled():
        return None
    try:
        with open(_payload_path(proof_key, name), "rb") as stream:
            stored = stream.read()
    except OSError:
        return None
    digest, data = stored[:32], stored[32:]
    return data if len(stored) >= 32 and hashlib.sha256(data).digest() == digest else None


def proven_once(kind: str, data: bytes, libraries: Sequence[str],
                prove: Callable[[bool], tuple]) -> tuple:
    """``prove(proven) -> (encoder | None, why)`` with its one-field verdict (``gigatoken``:
    ``""`` or why not) cached under ``key(kind, data, libraries)``: a failure stored is
    returned as ``(None, why)`` without proving; a success stored calls ``prove(True)``
    (load only, checks skipped); no verdict calls ``prove(False)`` and stores its why."""
    proof_key = key(kind, data, libraries)
    verdict = load(proof_key, ("gigatoken",))
    if verdict is not None and verdict["gigatoken"]:
        return None, verdict["gigatoken"]
    found = prove(verdict is not None)
    if verdict is None:
        store(proof_key, {"gigatoken": found[1]})
    return found
