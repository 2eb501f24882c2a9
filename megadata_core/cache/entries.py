"""The on-disk index cache: content-addressed ``.npy`` files, safe under concurrency.

The only I/O in ``indices``. A cache entry is keyed by the sha256 of a JSON
*description*: a dict holding every input that changes the arrays (the caller builds it:
config fields, split, document ids, sample count, shuffle mode and the data's identity).
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
runs at ~3 GB/s here, sha256 at ~1.8) must match the recorded one; the header must give
the recorded shape and dtype. The array is then memory-mapped from the very file
descriptor that was checked. A CRC catches accidental damage, torn writes and bit
flips, which is all a cache needs (anyone who can write the directory can rewrite the
description too).

Reading a multi-GB index at every start would cost seconds, so a file is verified once
per *identity*, ``(device, inode, size, mtime_ns, ctime_ns)``: the result is remembered
in this process and in ``K-P-verified.json`` (written atomically; where the directory is
read-only, every new process verifies again). Writing to a file in place changes its
mtime and ctime, replacing it changes its inode: either way it is read and checked again.
A file is remembered only when it was last changed at least ``RACY_NS`` (2 s) before it
was checked, so a write in the same timestamp tick as an earlier one cannot leave the
identity unchanged (git's "racily clean" rule): the first start within 2 s of a build
reads the files again.

A mismatch raises :class:`~megadata_core.DataError` naming the file from
:func:`load_cached`; :func:`load_or_build` turns it into a ``warnings.warn`` and
rebuilds, or, when the directory cannot be written, raises the DataError (a damaged
entry that cannot be repaired is never served). A directory that cannot be written
with no entry yet gives a warning and the arrays built in memory.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import numpy as np

from megadata_core.cache import npy_files as cache_files
from megadata_core.cache.npy_files import (
    array_crc,
    byte_view,
    crc_hex,
    npy_header,
    open_checked,
)
from megadata_core.cache.spill import take_spilled
from megadata_core.errors import DataError
from megadata_core.files import temporary as temp_files

try:  # POSIX only; elsewhere the cache is still safe, just without the wait-and-load.
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None

CACHE_FORMAT = "megadata-index-cache"
#: 3: a CRC-32 of each whole file, checked before use (2 checked sampled bytes only: an
#: entry of version 2 is rebuilt rather than served unverified).
CACHE_VERSION = 3
SAMPLE_CHUNKS = 64
SAMPLE_CHUNK_BYTES = 4096
#: "full": every byte checked (once per file identity); "none": sizes, shapes, dtypes.
VERIFY_MODES = ("none", "full")
VERIFIED_FORMAT = "megadata-verified-files"
GPT_ARRAYS = ("document_index", "sample_index", "shuffle_index")
_SAFE_NAME = re.compile(r"^[A-Za-z0-9_.]+$")
INDENT_BELOW = 1 << 16  # description records with larger descriptions are not indented


# -- hashing ------------------------------------------------------------------


def canonical_json(description: Mapping) -> str:
    """The description as canonical JSON (sorted keys, no spaces); DataError if a value
    is not JSON (NaN included)."""
    try:
        return json.dumps(description, sort_keys=True, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as error:
        raise DataError(f"description: not JSON-serializable ({error})") from None


def description_key(description: Mapping) -> str:
    """The cache key: sha256 (hex, 64 characters) of :func:`canonical_json`."""
    return hashlib.sha256(canonical_json(description).encode("utf-8")).hexdigest()


def json_digest(value: object) -> dict:
    """``{"sha256": ...}`` of a JSON value's :func:`canonical_json` (a long list in a
    description, stored elsewhere)."""
    text = canonical_json({"value": value}).encode("utf-8")
    return {"sha256": hashlib.sha256(text).hexdigest()}


def array_digest(array: np.ndarray) -> dict:
    """``{"dtype", "shape", "sha256"}`` of an array's bytes (C order)."""
    array = np.ascontiguousarray(array)
    return {
        "dtype": array.dtype.str,
        "shape": list(array.shape),
        "sha256": hashlib.sha256(byte_view(array)).hexdigest(),
    }


_byte_view = byte_view


def sampled_digest(array: np.ndarray) -> str:
    """sha256 of the byte size and a fixed sample of an array's bytes: all of them up to
    ``SAMPLE_CHUNKS * SAMPLE_CHUNK_BYTES`` (256 KiB), else ``SAMPLE_CHUNKS`` chunks of
    ``SAMPLE_CHUNK_BYTES`` at evenly spaced offsets (first and last chunk included).

    Reads at most 256 KiB, so it is cheap on memory-mapped arrays of any size.
    """
    raw = _byte_view(array)
    digest = hashlib.sha256(str(raw.size).encode("ascii"))
    if raw.size <= SAMPLE_CHUNKS * SAMPLE_CHUNK_BYTES:
        digest.update(raw)
    else:
        span = raw.size - SAMPLE_CHUNK_BYTES
        for k in range(SAMPLE_CHUNKS):  # fixed trip count, independent of the size
            start = span * k // (SAMPLE_CHUNKS - 1)
            digest.update(raw[start : start + SAMPLE_CHUNK_BYTES])
    return digest.hexdigest()


def full_digest(array: np.ndarray) -> str:
    """sha256 of all the bytes of an array (C order)."""
    return hashlib.sha256(_byte_view(array)).hexdigest()


def full_checksum(array: np.ndarray) -> str:
    """CRC-32 (zlib, 8 hex digits) of all the bytes of an array (C order), fed
    ``CHECKSUM_CHUNK_BYTES`` at a time."""
    return crc_hex(array_crc(array))


def file_checksum(array: np.ndarray) -> str:
    """CRC-32 (8 hex digits) of the whole .npy file of ``array`` (header included): the
    checksum a cache entry records for each file and checks on load."""
    return cache_files.file_crc(npy_header(array), array)


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
        _write_atomically(path, lambda stream: stream.write(text.encode("utf-8")))


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
    if verify not in VERIFY_MODES:
        raise DataError(f"verify: {verify!r} is not one of {VERIFY_MODES}")
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
    key = hashlib.sha256(canonical.encode("utf-8")).hexdigest()  # description_key
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
    if hashlib.sha256(canonical.encode("utf-8")).hexdigest() != key:
        raise DataError(f"{paths['description']}: description does not match its key {key}")
    arrays = _load_entry(directory, stored, canonical, split, names, verify)
    if arrays is None:  # removed meanwhile
        return None
    return stored, arrays


def _same_json(stored: object, expected: object, canonical: str) -> bool:
    """Whether ``stored`` (parsed JSON) is the expected description (canonical JSON
    ``canonical``): Python equality first (C speed; a tuple never equals the list it
    parses back as, so such descriptions fall through), else the canonical JSON. The
    equality passes a stored value that differs only in type among look-alikes (1, 1.0,
    true): only a hand edit makes one, and the key checked beside it is the expected
    one's either way."""
    return stored == expected or canonical_json(stored) == canonical


# -- saving -------------------------------------------------------------------------


def _write_atomically(path: str, write: Callable) -> None:
    """``write(stream)`` into a temporary file next to ``path``, renamed onto it. No
    fsync (see the module docstring): the rename is atomic and a file torn by a crash
    fails the load checks and is rebuilt. Temporaries of ``path`` that dead writers on
    this host left behind are removed first (:mod:`megadata_core.files.temporary`)."""
    directory, name = os.path.split(path)
    temp_files.remove_stale(directory, [name])
    handle, temporary = temp_files.create_file(directory, name)
    try:
        with os.fdopen(handle, "wb") as stream:
            write(stream)
        os.replace(temporary, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)


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
    key = hashlib.sha256(canonical.encode("utf-8")).hexdigest()  # description_key
    names = tuple(arrays)
    paths = entry_paths(directory, key, split, names)
    os.makedirs(directory, exist_ok=True)
    spilled = {name: take_spilled(value, paths[name]) for name, value in arrays.items()}
    arrays = {name: np.ascontiguousarray(value) for name, value in arrays.items()}
    headers = {name: npy_header(array) for name, array in arrays.items()}
    metas = {}
    with ThreadPoolExecutor(1) as pool:
        checksums = {
            name: pool.submit(cache_files.file_crc, headers[name], array)
            for name, array in arrays.items()
            if spilled[name] is None
        }
        for name, array in arrays.items():
            if spilled[name] is not None:  # built in place: read back for its CRC, renamed
                checksums[name] = pool.submit(_rename_spilled, spilled[name], paths[name])
            else:
                _write_atomically(
                    paths[name],
                    lambda stream, h=headers[name], a=array: cache_files.write_npy(stream, h, a),
                )
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
    # encoder runs only without indent (~10x faster)
    indent = 2 if len(canonical) < INDENT_BELOW else None
    text = json.dumps(record, indent=indent, sort_keys=True).encode("utf-8")
    _write_atomically(paths["description"], lambda stream: stream.write(text))
    return {name: open_checked(paths[name], metas[name], "none")[0] for name in names}


def _rename_spilled(temporary: str, path: str) -> str:
    """The CRC-32 of a spilled array's whole file (:mod:`.cache_spill`), which is then
    renamed to ``path``."""
    with open(temporary, "rb") as stream:
        checksum = cache_files.stream_crc(stream)
    os.replace(temporary, path)
    return checksum


@contextlib.contextmanager
def _exclusive(lock_path: str) -> Iterator[bool]:
    """Hold an exclusive flock on ``lock_path``; yields False where locking failed (no
    fcntl, read-only directory, a filesystem without flock)."""
    if fcntl is None:
        yield False
        return
    try:
        os.makedirs(os.path.dirname(lock_path) or ".", exist_ok=True)
        handle = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o666)
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


def load_or_build(
    directory: str | None,
    description: Mapping,
    split: str,
    build: Callable[[], Mapping[str, np.ndarray]],
    *,
    names: tuple[str, ...] = GPT_ARRAYS,
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

    def build_arrays() -> tuple[None, dict[str, np.ndarray]]:
        return None, dict(build())

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


# -- many small arrays in one entry ----------------------------------------------------

#: dtypes :func:`pack_arrays` stores (the table holds a position in this tuple).
PACK_DTYPES = ("|b1", "|i1", "|u1", "<i2", "<u2", "<i4", "<u4", "<i8", "<u8", "<f4", "<f8")
PACK_ALIGN = 8  # every array starts at a multiple of this many bytes of the blob
_PACK_CODES = {np.dtype(name): code for code, name in enumerate(PACK_DTYPES)}
Result = TypeVar("Result")


def pack_arrays(arrays: Sequence[np.ndarray]) -> dict[str, np.ndarray]:
    """Many small arrays as two: ``table`` int64 [M, 4] (byte offset in the blob, dtype
    code in :data:`PACK_DTYPES`, rows, columns or -1 for a 1-D array) and ``blob``
    uint8 [bytes] (each array's bytes, C order, ``PACK_ALIGN``-aligned). Arrays are
    1-D or 2-D of a dtype in :data:`PACK_DTYPES` (little-endian as stored)."""
    table = np.empty((len(arrays), 4), dtype=np.int64)
    parts = []
    offset = 0
    for row, array in enumerate(arrays):
        array = np.asarray(array)
        code = _PACK_CODES.get(array.dtype)
        if code is None or array.ndim not in (1, 2):
            raise DataError(
                f"pack_arrays: array {row} ({array.dtype} {array.shape}) cannot be packed"
            )
        raw = _byte_view(array)
        table[row] = (offset, code, array.shape[0], array.shape[1] if array.ndim == 2 else -1)
        parts.append((offset, raw))
        offset += -(-raw.size // PACK_ALIGN) * PACK_ALIGN
    blob = np.zeros(offset, dtype=np.uint8)
    for start, raw in parts:
        blob[start : start + raw.size] = raw
    return {"table": table, "blob": blob}


class PackedArrays(Sequence):
    """The arrays of :func:`pack_arrays` as read-only views of ``blob``, each made at
    first access (a bundle of 10,000 members holds 30,000: a start reads only the table
    and the ones it uses). The table is checked whole up front.

    Raises:
        DataError: naming ``where``, when the table does not describe arrays inside the
            blob (a damaged entry).
    """

    def __init__(self, table: np.ndarray, blob: np.ndarray, where: str = "packed arrays"):
        self._blob = blob  # a memory map pickles as its file name (cache_files.pickled_map)
        table, blob = np.asarray(table), np.asarray(blob)
        if table.ndim != 2 or table.shape[1] != 4 or table.dtype != np.int64:
            raise DataError(
                f"{where}: table of shape {table.shape} {table.dtype}, not int64 [M, 4]"
            )
        if blob.ndim != 1 or blob.dtype != np.uint8 or blob.size % PACK_ALIGN:
            raise DataError(f"{where}: blob of shape {blob.shape} {blob.dtype}, not uint8 [8 k]")
        offsets, codes, rows, columns = table.T
        itemsizes = np.array([np.dtype(name).itemsize for name in PACK_DTYPES], dtype=np.int64)
        valid_codes = (codes >= 0) & (codes < len(PACK_DTYPES))
        nbytes = (
            itemsizes[np.where(valid_codes, codes, 0)] * rows * np.where(columns < 0, 1, columns)
        )
        if (
            not valid_codes.all()
            or (rows < 0).any()
            or (columns < -1).any()
            or (offsets < 0).any()
            or (offsets % PACK_ALIGN).any()
            or (offsets + nbytes > blob.size).any()
        ):
            raise DataError(f"{where}: the table points outside the blob ({blob.size} bytes)")
        self.table = table
        # One typed view of the whole blob per dtype (its size is a multiple of
        # PACK_ALIGN), then a slice per array: cheaper than an ndarray constructor each.
        self._typed = [blob.view(name) for name in PACK_DTYPES]

    def __getstate__(self) -> dict:
        return {"table": self.table, "blob": cache_files.pickled_map(self._blob)}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["table"], cache_files.reopened_map(state["blob"]))

    @property
    def rows(self) -> np.ndarray:
        """int64 [M]: the first dimension of every array (no view made)."""
        return self.table[:, 2]

    def __len__(self) -> int:
        return len(self.table)

    def __getitem__(self, number):
        if isinstance(number, slice):
            return [self[n] for n in range(*number.indices(len(self)))]
        offset, code, count, width = self.table[number].tolist()
        view = self._typed[code]
        start = offset // view.itemsize
        if width < 0:
            return view[start : start + count]
        return view[start : start + count * width].reshape(count, width)


def unpack_arrays(table: np.ndarray, blob: np.ndarray, where: str = "packed arrays") -> list:
    """The arrays of :func:`pack_arrays` as read-only views of ``blob`` (no copy); see
    :class:`PackedArrays` (DataError naming ``where`` for a damaged table)."""
    return list(PackedArrays(table, blob, where))


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
    if verify not in VERIFY_MODES:
        raise DataError(f"verify: {verify!r} is not one of {VERIFY_MODES}")
    directory = os.fspath(directory)
    canonical = canonical_json(description)  # once: a bundle's description is large
    key = hashlib.sha256(canonical.encode("utf-8")).hexdigest()  # description_key
    damage: DataError | None = None

    def try_use() -> tuple[bool, Result | None]:
        nonlocal damage
        try:
            found = _load_entry(directory, description, canonical, split, names, verify)
            if found is not None:
                return True, use(found)
        except DataError as error:
            if damage is None:
                damage = error
                if not os.access(directory, os.W_OK):
                    raise _unrepairable(error, directory, "read-only") from None
                warnings.warn(
                    f"{error}; rebuilding the index cache entry", stacklevel=stacklevel + 2
                )
        return False, None

    hit, result = try_use()
    if hit:
        return result
    guard = _exclusive(entry_paths(directory, key, split, ())["lock"]) if lock else None
    with guard if guard is not None else contextlib.nullcontext(False) as locked:
        if locked:  # another process may have built it while we waited
            hit, result = try_use()
            if hit:
                return result
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
