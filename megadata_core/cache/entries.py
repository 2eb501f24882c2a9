"""Cache entries: content-addressed ``.npy`` files, safe under concurrency.

A cache entry is keyed by the sha256 of a JSON *description* (:mod:`.keys`): a
dict holding every input that changes the arrays (config fields, split, document ids,
sample count, shuffle mode and the data's identity).
Megatron's own key (an md5 of ``unique_description``) misses
``add_extra_token_to_sequence`` and the data itself; ours must not.

Files, for key K and split name P, in the cache directory::

    K-P-description.json     the description, the key, and per array: file name, shape,
                             dtype, file size and the CRC-32 of the whole file
    K-P-{name}.npy           one per array (document_index, sample_index, shuffle_index)
    K-P-verified.json        which files were verified whole, by file identity (below)
    K-P.lock                 an flock(2) lock file (empty; left in place on purpose:
                             unlinking a lock file others may wait on is racy)

Writing: every file goes to a temporary name in the same directory and is
``os.replace``d into place; the description goes last, so a complete description always
points at complete arrays. Arrays are a pure function of the description, so two
processes writing the same entry write identical bytes and either rename is harmless. On
top of that an exclusive ``flock`` on ``K-P.lock`` lets one process build while the
others wait and then load (skipped, with the same safety, where locking is unsupported).
Nothing is fsync'ed (Megatron does not either): an entry can always be rebuilt, the
renames are atomic for every running process, and whatever a crash or a disk leaves
(a short file, zero-filled pages, flipped bits) fails the checks below and is rebuilt.

Loading checks every byte before any array is handed out (``verify="full"``, the
default): the description must be the expected one (and its key); each array file must
have the recorded size, and its CRC-32 (of the whole file, .npy header included: written
when the file is, computed on a second thread while the files are written; zlib's crc32
is cheaper than sha256) must match the recorded one; the header must give
the recorded shape and dtype. The array is then memory-mapped from the very file
descriptor that was checked. A CRC catches accidental damage, torn writes and bit
flips, which is all a cache needs (anyone who can write the directory can rewrite the
description too).

Reading a multi-GB index at every start would be slow, so a file is verified once
per *identity*, ``(device, inode, size, mtime_ns, ctime_ns)``: the result is remembered
in this process and in ``K-P-verified.json`` (written atomically; where the directory is
read-only, every new process verifies again). Writing to a file in place changes its
mtime and ctime, replacing it changes its inode: either way it is read and checked again.
A file is remembered only when it was last changed at least ``RACY_NS`` (2 s) before it
was checked (:mod:`megadata_core.files.identity`), so a write in the same timestamp tick
as an earlier one cannot leave the identity unchanged: the first start within 2 s of a
build reads the files again.

A mismatch raises :class:`~megadata_core.DataError` naming the file from
:func:`load_cached`; :func:`load_or_build` turns it into a ``warnings.warn`` and
rebuilds, or, when the directory cannot be written, raises the DataError (a damaged
entry that cannot be repaired is never served). A directory that cannot be written
with no entry yet gives a warning and the arrays built in memory.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import warnings
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any, BinaryIO, TypeVar

import numpy as np

from megadata_core.cache import npy_files
from megadata_core.cache.keys import (
    CACHE_FORMAT,
    CACHE_VERSION,
    VERIFIED_FORMAT,
    canonical_json,
    text_key,
)
from megadata_core.cache.npy_files import npy_header, open_checked
from megadata_core.cache.spill import take_spilled
from megadata_core.errors import DataError
from megadata_core.files.atomic import exclusive, write_atomically

#: "full": every byte checked (once per file identity); "none": sizes, shapes, dtypes.
_VERIFY_MODES = ("none", "full")
_SAFE_NAME = re.compile(r"^[A-Za-z0-9_.]+$")
INDENT_BELOW = 1 << 16  # description records with larger descriptions are not indented
Result = TypeVar("Result")


# -- paths ----------------------------------------------------------------------


def entry_paths(directory: str, key: str, split: str, names: tuple[str, ...]) -> dict[str, str]:
    """``{"description": ..., "lock": ..., "verified": ..., name: ...}`` file paths of
    one cache entry."""
    if not _SAFE_NAME.match(split):
        raise DataError(f"split: {split!r} is not a valid cache file name part")
    base = os.path.join(directory, f"{key}-{split}")
    paths = {
        "description": f"{base}-description.json",
        "lock": f"{base}.lock",
        "verified": f"{base}-verified.json",
    }
    for name in names:
        if not _SAFE_NAME.match(name) or name in paths:
            raise DataError(f"array name: {name!r} is not a valid cache array name")
        paths[name] = f"{base}-{name}.npy"
    return paths


# -- loading ----------------------------------------------------------------------


def _read_record(path: str) -> dict | None:
    try:
        with open(path, encoding="utf-8") as stream:
            record = json.load(stream)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as error:
        raise DataError(f"{path}: unreadable cache description ({error})") from None
    if not isinstance(record, dict) or not isinstance(record.get("arrays"), dict):
        raise DataError(f"{path}: not a cache description")
    return record


def _read_verified(path: str) -> dict:
    """``{name: [*identity, crc]}`` of an entry's verified-files list; ``{}`` when it is
    missing or unreadable (it only saves work: every file it does not vouch for is
    checked whole)."""
    try:
        with open(path, encoding="utf-8") as stream:
            record = json.load(stream)
    except (OSError, ValueError):
        return {}
    if not isinstance(record, dict) or record.get("format") != VERIFIED_FORMAT:
        return {}
    files = record.get("files")
    return files if isinstance(files, dict) else {}


def _write_verified(path: str, files: dict) -> None:
    """Replace an entry's verified-files list (atomically; skipped where the directory
    cannot be written: the next process then checks the files again)."""
    text = json.dumps({"format": VERIFIED_FORMAT, "files": files}, sort_keys=True)
    with contextlib.suppress(OSError):
        write_atomically(path, lambda stream: stream.write(text.encode("utf-8")))


def load_cached(
    directory: str,
    description: Mapping,
    split: str,
    names: tuple[str, ...],
    *,
    verify: str = "full",
) -> dict[str, np.ndarray] | None:
    """The cached arrays for ``description``, memory-mapped; None when not cached.

    Args:
        directory: the cache directory.
        description: JSON-serializable dict of every input of the arrays.
        split: split name (part of the file names).
        names: the array names expected in the entry.
        verify: ``"full"`` (default: the CRC-32 of every byte, once per file
            identity, see the module docstring) or ``"none"`` (size, shape and dtype
            only).

    Raises:
        DataError: naming the file, when an entry exists but does not match its
            description, its key or its checksums, or is truncated.
    """
    if verify not in _VERIFY_MODES:
        raise DataError(f"verify: {verify!r} is not one of {_VERIFY_MODES}")
    canonical = canonical_json(description)
    return _load_entry(directory, description, canonical, split, names, verify)


def _load_entry(
    directory: str,
    description: Mapping,
    canonical: str,
    split: str,
    names: tuple[str, ...],
    verify: str,
) -> dict[str, np.ndarray] | None:
    """:func:`load_cached` with the description's canonical JSON already made.

    The record's key must be the expected key (the file name) and its description the
    expected one (:func:`_same_json`: a hit on a large description, e.g. a build
    bundle's, encodes nothing more than the expected key's JSON).
    """
    key = text_key(canonical)
    paths = entry_paths(directory, key, split, names)
    record = _read_record(paths["description"])
    if record is None:
        return None
    stored = record.get("description")
    if record.get("format") == CACHE_FORMAT and record.get("version") != CACHE_VERSION:
        raise DataError(
            f"{paths['description']}: cache format version {record.get('version')!r}, "
            f"this version writes {CACHE_VERSION}"
        )
    if (
        record.get("format") != CACHE_FORMAT
        or record.get("key") != key
        or record.get("split") != split
        or not isinstance(stored, dict)
        or not _same_json(stored, description, canonical)
    ):
        raise DataError(f"{paths['description']}: description does not match its key {key}")
    if sorted(record["arrays"]) != sorted(names):
        raise DataError(
            f"{paths['description']}: arrays {sorted(record['arrays'])} != {sorted(names)}"
        )
    known = _read_verified(paths["verified"]) if verify == "full" else {}
    arrays, verified = {}, {}
    for name in names:
        meta = record["arrays"][name]
        if not isinstance(meta, dict) or meta.get("file") != os.path.basename(paths[name]):
            raise DataError(f"{paths['description']}: array {name!r} names another file")
        arrays[name], verified[name] = open_checked(paths[name], meta, verify, known.get(name))
    remembered = {name: entry for name, entry in verified.items() if entry is not None}
    if remembered and remembered != known:
        _write_verified(paths["verified"], remembered)
    return arrays


def load_by_key(
    directory: str, key: str, split: str, names: tuple[str, ...], *, verify: str = "full"
) -> tuple[dict, dict[str, np.ndarray]] | None:
    """``(description, arrays)`` of the entry with this key, for a caller that knows the
    key but not the whole description (it was recorded elsewhere); None when missing.
    The stored description must hash to ``key`` and the files pass the checks of
    :func:`load_cached`; the caller checks that the description is what it expects.

    Raises:
        DataError: naming the file, when the entry is damaged.
    """
    paths = entry_paths(directory, key, split, names)
    record = _read_record(paths["description"])
    if record is None:
        return None
    stored = record.get("description")
    if not isinstance(stored, dict):
        raise DataError(f"{paths['description']}: not a cache description")
    canonical = canonical_json(stored)
    if text_key(canonical) != key:
        raise DataError(f"{paths['description']}: description does not match its key {key}")
    arrays = _load_entry(directory, stored, canonical, split, names, verify)
    if arrays is None:  # removed meanwhile
        return None
    return stored, arrays


def _same_json(stored: Mapping, expected: Mapping, canonical: str) -> bool:
    """Whether ``stored`` (parsed JSON) is the expected description (canonical JSON
    ``canonical``): Python equality first (C speed; a tuple never equals the list it
    parses back as, so such descriptions fall through), else the canonical JSON. The
    equality passes a stored value that differs only in type among look-alikes (1, 1.0,
    true): only a hand edit makes one, and the key checked beside it is the expected
    one's either way."""
    return stored == expected or canonical_json(stored) == canonical


# -- saving -------------------------------------------------------------------------


def save_cached(
    directory: str, description: Mapping, split: str, arrays: Mapping[str, np.ndarray]
) -> dict[str, np.ndarray]:
    """Write ``arrays`` as the cache entry of ``description`` and return them reloaded
    memory-mapped (checked with ``verify="none"``: they were just written). The files'
    CRC-32s are computed from memory on a second thread while the files are written
    (zlib and file writes both release the GIL), so they cost about nothing on two
    cores. No file is remembered as verified yet (see ``RACY_NS``).

    Raises:
        OSError: when the directory cannot be written.
    """
    canonical = canonical_json(description)
    key = text_key(canonical)
    names = tuple(arrays)
    paths = entry_paths(directory, key, split, names)
    os.makedirs(directory, exist_ok=True)
    spilled = {name: take_spilled(value, paths[name]) for name, value in arrays.items()}
    arrays = {name: np.ascontiguousarray(value) for name, value in arrays.items()}
    headers = {name: npy_header(array) for name, array in arrays.items()}
    metas: dict[str, dict[str, Any]] = {}
    with ThreadPoolExecutor(1) as pool:
        checksums = {
            name: pool.submit(npy_files.file_crc, headers[name], array)
            for name, array in arrays.items()
            if spilled[name] is None
        }
        for name, array in arrays.items():
            temporary = spilled[name]
            if temporary is not None:  # built in place: read back for its CRC, renamed
                checksums[name] = pool.submit(_rename_spilled, temporary, paths[name])
            else:
                write_atomically(paths[name], _npy_writer(headers[name], array))
            metas[name] = {
                "file": os.path.basename(paths[name]),
                "shape": list(array.shape),
                "dtype": array.dtype.str,
            }
        for name, checksum in checksums.items():
            metas[name]["file_crc32"] = checksum.result()
            metas[name]["file_size"] = os.path.getsize(paths[name])
    record = {
        "format": CACHE_FORMAT,
        "version": CACHE_VERSION,
        "key": key,
        "split": split,
        "description": json.loads(canonical),
        "arrays": metas,
    }
    # indented for people to read, unless large (a blend of 1,000 members): json's C
    # encoder runs only without indent
    indent = 2 if len(canonical) < INDENT_BELOW else None
    text = json.dumps(record, indent=indent, sort_keys=True).encode("utf-8")
    write_atomically(paths["description"], lambda stream: stream.write(text))
    return {name: open_checked(paths[name], metas[name], "none")[0] for name in names}


def _npy_writer(header: bytes, array: np.ndarray) -> Callable[[BinaryIO], None]:
    """Writes ``array`` with ``header`` as an .npy file to a stream."""
    return lambda stream: npy_files.write_npy(stream, header, array)


def _rename_spilled(temporary: str, path: str) -> str:
    """The CRC-32 of a spilled array's whole file (:mod:`.spill`), which is then
    renamed to ``path``."""
    with open(temporary, "rb") as stream:
        checksum = npy_files.stream_crc(stream)
    os.replace(temporary, path)
    return checksum


def load_or_build(
    directory: str | None,
    description: Mapping,
    split: str,
    build: Callable[[], Mapping[str, np.ndarray]],
    *,
    names: tuple[str, ...],
    lock: bool = True,
    verify: str = "full",
) -> dict[str, np.ndarray]:
    """The arrays of ``description``: loaded from the cache, else built once and saved.

    Args:
        directory: the cache directory; None builds in memory.
        description: JSON-serializable dict of every input that changes the arrays.
        split: split name (part of the file names).
        build: returns ``{name: array}`` for exactly ``names``; must be a pure function
            of ``description``.
        names: the names of the arrays of the entry.
        lock: serialize builders with an flock so only one builds (others wait, load).
        verify: checksum check on load (see :func:`load_cached`).

    Returns:
        ``{name: array}``, memory-mapped read-only when cached; built in memory (with a
        warning) when the directory cannot be written.
    """
    if directory is None:
        return dict(build())

    def build_arrays() -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        built = dict(build())
        return built, built  # the result is use(saved arrays) with reload

    # built arrays are saved and handed out memory-mapped (they pickle as file names)
    return cached_result(
        directory,
        description,
        split,
        tuple(names),
        use=dict,
        build=build_arrays,
        lock=lock,
        verify=verify,
        stacklevel=2,
        reload=True,
    )


def cached_result(
    directory: str,
    description: Mapping,
    split: str,
    names: tuple[str, ...],
    *,
    use: Callable[[dict[str, np.ndarray]], Result],
    build: Callable[[], tuple[Result, Mapping[str, np.ndarray]]],
    lock: bool = True,
    verify: str = "full",
    stacklevel: int = 2,
    reload: bool = False,
) -> Result:
    """:func:`load_or_build` for a result made from the cached arrays: ``use(arrays)``
    on a cache hit (a DataError from it marks the entry damaged: warned and rebuilt, as
    a failed check is); else ``build()`` returns ``(result, arrays)`` and the arrays are
    saved (under the lock, as :func:`load_or_build`; a directory that cannot be written
    gives a warning and the built result). With ``reload`` a build returns
    ``use(saved arrays)`` (memory-mapped) instead, or ``use(built arrays)`` when they
    could not be saved. ``stacklevel`` is the warnings' as seen from the caller (2: the
    caller's caller)."""
    if verify not in _VERIFY_MODES:
        raise DataError(f"verify: {verify!r} is not one of {_VERIFY_MODES}")
    directory = os.fspath(directory)
    canonical = canonical_json(description)  # once: a bundle's description is large
    key = text_key(canonical)
    damage: DataError | None = None

    def try_use() -> tuple[Result] | None:
        """``(use(arrays),)`` on a cache hit, else None."""
        nonlocal damage
        try:
            found = _load_entry(directory, description, canonical, split, names, verify)
            if found is not None:
                return (use(found),)
        except DataError as error:
            if damage is None:
                damage = error
                if not os.access(directory, os.W_OK):
                    raise _unrepairable(error, directory, "read-only") from None
                warnings.warn(
                    f"{error}; rebuilding the index cache entry", stacklevel=stacklevel + 2
                )
        return None

    hit = try_use()
    if hit is not None:
        return hit[0]
    guard = exclusive(entry_paths(directory, key, split, ())["lock"]) if lock else None
    with guard if guard is not None else contextlib.nullcontext(False) as locked:
        if locked:  # another process may have built it while we waited
            hit = try_use()
            if hit is not None:
                return hit[0]
        result, arrays = build()
        arrays = dict(arrays)
        if sorted(arrays) != sorted(names):
            raise DataError(f"build: returned arrays {sorted(arrays)}, expected {sorted(names)}")
        try:
            saved = save_cached(directory, description, split, arrays)
        except OSError as error:
            if damage is not None:
                raise _unrepairable(damage, directory, str(error)) from None
            warnings.warn(
                f"path_to_cache: cannot write the index cache in {directory} ({error}); "
                "using indices built in memory",
                stacklevel=stacklevel + 1,
            )
            saved = arrays
        return use(saved) if reload else result


def _unrepairable(damage: DataError, directory: str, why: str) -> DataError:
    """A damaged entry that cannot be rebuilt in place (never served, never quietly
    rebuilt in memory at every start)."""
    return DataError(
        f"{damage}; the index cache in {directory} cannot be rewritten ({why}): remove "
        "the damaged entry's files or use a writable path_to_cache"
    )
