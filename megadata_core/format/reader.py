"""Reading a Megatron .bin/.idx pair, and the bound on the files a group of corpora holds.

A blend of 10,000 corpora read in shuffled order would map every member's .bin, its .idx
and its index cache files (on Python < 3.13 every memory map holds a duplicated
descriptor) and run into the process's ``ulimit -n`` ("Too many open files",
Megatron-LM #929/#930). Corpora and datasets that share an :class:`OpenFiles` (the
builder gives one to every corpus of a build, sized by ``GPTDataConfig.max_open_files``;
a dataset uses its corpus's) count each descriptor or map they open; past the limit the
least recently used holders are asked to ``release_open_files``, which only drops their
references and re-maps at the next access. A reader in flight keeps what it holds (its
local reference, or a view of the map) and the descriptor closes when the last reference
goes, so an eviction never closes a file under a read. Bookkeeping is one dict operation
per opened map and per batch read, under a lock.

A prefix that names no corpus gets a hint in its error: a prefix
names the pair without the suffix, and preprocessing appends ``_{key}_document`` (or
``_sentence``) to its ``--output_prefix``, so ``x.bin``, ``x.idx`` and the
``--output_prefix`` itself are common wrong prefixes.
"""

from __future__ import annotations

import glob
import hashlib
import os
import stat
import threading
import weakref
from collections import OrderedDict

import numpy as np

from megadata_core.checks import position_in
from megadata_core.errors import DataError
from megadata_core.files.identity import contents_stamp, identity, which_file
from megadata_core.format import idx_layout
from megadata_core.format.sources import (
    ByteSource,
    LocalFileSource,
    is_local,
    local_path,
    open_source,
)

#: The attributes that are views of the .idx (dropped when its map is released).
INDEX_ARRAYS = ("sequence_lengths", "sequence_pointers", "document_indices", "sequence_modes")
_REMAP = threading.Lock()  # one .idx re-mapped at a time (and never while released)


def idx_path_of(path_prefix: str) -> str:
    return path_prefix + ".idx"


def bin_path_of(path_prefix: str) -> str:
    return path_prefix + ".bin"


#: The levels preprocessing writes: ``{output_prefix}_{key}_{level}.bin/.idx``.
_LEVELS = ("document", "sentence")


def _exists(prefix: str) -> bool:
    return os.path.isfile(prefix + ".idx") and os.path.isfile(prefix + ".bin")


def _candidates(prefix: str) -> list[str]:
    """Existing corpus prefixes that ``prefix`` (a local one naming no corpus) likely meant:
    itself without a ``.bin``/``.idx`` suffix, else the corpora preprocessing wrote for it
    as ``--output_prefix`` (``{prefix}_{key}_document``), sorted."""
    stem = prefix[:-4] if prefix.endswith((".bin", ".idx")) else prefix
    if stem != prefix and _exists(stem):
        return [stem]
    found = []
    for level in _LEVELS:
        for idx in glob.glob(f"{glob.escape(stem)}_*_{level}.idx"):
            if _exists(idx[:-4]):
                found.append(idx[:-4])
    return sorted(found)


def _prefix_hint(prefix: str) -> str:
    """``"; did you mean prefix 'x_text_document'?"`` (or several), or ``""``. For the
    error path only: it lists a directory."""
    try:
        found = _candidates(prefix)
    except OSError:
        return ""
    if not found:
        return ""
    named = " or ".join(repr(name) for name in found[:3])
    more = f" (and {len(found) - 3} more)" if len(found) > 3 else ""
    why = (
        "a prefix names the .bin/.idx pair without the suffix"
        if prefix.endswith((".bin", ".idx"))
        else "preprocessing writes {output_prefix}_{key}_document"
    )
    return f"; did you mean prefix {named}{more}? ({why})"


#: The default bound (``GPTDataConfig.max_open_files``): well below the usual soft
#: ``ulimit -n`` of 1,024, leaving room for the cache's and the framework's own files.
DEFAULT_MAX_OPEN_FILES = 512


def check_limit(field: str, limit: object) -> int:
    """``limit`` as an int >= 1; DataError naming ``field`` otherwise."""
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise DataError(f"{field}: {limit!r} must be an int >= 1")
    return int(limit)


class OpenFiles:
    """At most ``limit`` descriptors open at once between the holders that share it
    (least recently used holders released first; one holder alone may keep more, what
    a single read of it needs).

    A holder is any object with ``release_open_files()`` (which drops every descriptor
    it counted here); it calls :meth:`opened` right after opening files and :meth:`used`
    when it reads from the ones it holds.
    """

    def __init__(self, limit: int = DEFAULT_MAX_OPEN_FILES) -> None:
        self.limit = check_limit("max_open_files", limit)
        # id -> [weakref to holder, descriptors]: a strong reference would be a cycle
        # (holder -> OpenFiles -> holder) holding a dropped dataset's files until collected
        self._held: OrderedDict[int, list] = OrderedDict()
        self._count = 0
        self._lock = threading.Lock()

    def opened(self, holder: object, files: int = 1) -> None:
        """``holder`` opened ``files`` more descriptors: count them, releasing the least
        recently used other holders past the limit (outside the lock: a release may take
        a holder's own lock)."""
        released = []
        with self._lock:
            entry = self._held.get(id(holder))
            if entry is None or entry[0]() is not holder:  # new, or a dead holder's id
                self._count -= entry[1] if entry else 0
                entry = self._held[id(holder)] = [weakref.ref(holder), 0]
            self._held.move_to_end(id(holder))
            entry[1] += files
            self._count += files
            while self._count > self.limit and len(self._held) > 1:
                other, count = self._held.popitem(last=False)[1]
                self._count -= count
                released.append(other())
        for other in released:
            if other is not None:  # a dead holder's files closed with it
                other.release_open_files()

    def used(self, holder: object) -> None:
        """``holder`` read from its open files: it becomes the most recently used."""
        with self._lock:
            if id(holder) in self._held:
                self._held.move_to_end(id(holder))

    def closed(self, holder: object) -> None:
        """``holder`` closed every file it counted here itself."""
        with self._lock:
            entry = self._held.pop(id(holder), None)
            if entry is not None:
                self._count -= entry[1]

    def held(self, holder: object) -> int:
        """The descriptors ``holder`` is counted for."""
        with self._lock:
            entry = self._held.get(id(holder))
            return 0 if entry is None or entry[0]() is not holder else entry[1]

    def __len__(self) -> int:
        """The descriptors counted (all holders)."""
        return self._count

    def __getstate__(self) -> dict:
        return {"limit": self.limit}  # a worker starts with nothing open

    def __setstate__(self, state: dict) -> None:
        type(self).__init__(self, state["limit"])

    def __repr__(self) -> str:
        return f"OpenFiles(limit={self.limit}, open={self._count}, holders={len(self._held)})"


#: A local .idx of at most this many bytes is read into memory with one read when opened
#: with :meth:`IndexedDataset.open_deferred` (a few thousand documents): cheaper than a
#: memory map, and its digest identifies it exactly.
READ_IDX_BELOW = 1 << 16


def _local_file_stat(path: str, what: str) -> os.stat_result:
    """``stat`` of a regular file; DataError naming it otherwise."""
    try:
        info = os.stat(path)
    except FileNotFoundError as error:
        hint = _prefix_hint(path[: -len(what)]) if path.endswith(what) else ""
        raise DataError(f"{path}: {what} file not found{hint}") from error
    if not stat.S_ISREG(info.st_mode):
        raise DataError(f"{path}: {what} path is not a regular file")
    return info


class IndexedDataset:
    """A Megatron ``MMIDIDX`` v1 corpus: sequences of tokens grouped into documents.

    ``ds[i]`` is sequence ``i`` as a 1-D array of ``ds.dtype`` (with its int8 mode,
    as ``(tokens, mode)``, when multimodal, as Megatron returns it); ``ds[i:j]`` is
    a list of arrays read with one contiguous read. Index arrays are memory-mapped
    (local files) so opening costs O(1) memory; tokens are read through a memmap
    when ``mmap=True`` and with ``os.pread`` otherwise. Remote prefixes
    (``s3://``, ``gs://``, ...) read through the byte-source registry.

    Corpora that :meth:`share_open_files` an :class:`OpenFiles` keep at most its limit
    of descriptors open between them (a local .idx's map and the .bin's map or
    descriptor; least recently used released, re-mapped at the next access of an index
    array or read, after checking that the file is still the one opened).
    """

    _open_files: OpenFiles | None = None  # the bound shared with other corpora, if any

    def __init__(
        self, path_prefix: str, *, multimodal: bool | None = None, mmap: bool = True
    ) -> None:
        self.path_prefix = str(path_prefix)
        self.mmap = bool(mmap)
        self._requested_multimodal = multimodal
        self._open(validate=True)

    @classmethod
    def open_deferred(
        cls,
        path_prefix: str,
        *,
        multimodal: bool | None = None,
        mmap: bool = True,
        read_below: int = READ_IDX_BELOW,
    ) -> IndexedDataset:
        """Open with the header and file sizes checked but the index arrays not yet
        validated (``validated`` is False until :meth:`validate` runs). A local .idx of at
        most ``read_below`` bytes is read into memory in one read (then
        :meth:`idx_sha256` identifies it exactly); the .bin is memory-mapped at its
        first read. For callers that know the index is valid (a cache entry keyed by
        its digest was written after validating the same bytes) or validate it later."""
        self = cls.__new__(cls)
        self.path_prefix = str(path_prefix)
        self.mmap = bool(mmap)
        self._requested_multimodal = multimodal
        self._open(validate=False, read_below=read_below)
        return self

    def _open(self, validate: bool, read_below: int = 0) -> None:
        self.idx_path = idx_path_of(self.path_prefix)
        self.bin_path = bin_path_of(self.path_prefix)
        self._bin_source: ByteSource | None = None
        self._bin_map: np.ndarray | None = None
        self._bin_file: str | None = None  # a local .bin memory-mapped at its first read
        self._bin_identity: tuple[int, int] | None = None  # (st_dev, st_ino) of a local .bin
        self._idx_bytes: bytes | None = None
        self._idx_file: str | None = None  # a local .idx that is memory-mapped
        self._idx_stat: os.stat_result | None = None  # its fstat when mapped
        self._idx_header: idx_layout.IdxHeader | None = None  # to re-map it once released
        self._idx_released = False  # its map (and the arrays) dropped by release_open_files
        self._bin_stat: os.stat_result | None = None
        idx_buffer: bytes | np.ndarray
        remote_bin: ByteSource | None = None
        if is_local(self.path_prefix):
            idx_file = local_path(self.idx_path)
            bin_file = local_path(self.bin_path)
            idx_size = _local_file_stat(idx_file, ".idx").st_size
            bin_stat = _local_file_stat(bin_file, ".bin")
            bin_size = bin_stat.st_size
            self._bin_identity = which_file(bin_stat)
            self._bin_stat = bin_stat
            if 0 < idx_size <= read_below:
                idx_source = LocalFileSource(idx_file)
                try:
                    idx_bytes = idx_source.read(0, idx_size)
                finally:
                    idx_source.close()
                header = idx_layout.parse_header(
                    idx_bytes[: idx_layout.HEADER_SIZE], len(idx_bytes), idx_file,
                    self._requested_multimodal,
                )
                self._idx_bytes = idx_buffer = idx_bytes  # arrays: read-only views of it
            else:  # mapped from the descriptor whose fstat is kept (see check_idx)
                with open(idx_file, "rb") as stream:
                    idx_stat = os.fstat(stream.fileno())
                    header_bytes = stream.read(idx_layout.HEADER_SIZE)
                    header = idx_layout.parse_header(
                        header_bytes, idx_stat.st_size, idx_file, self._requested_multimodal
                    )
                    idx_buffer = np.memmap(stream, dtype=np.uint8, mode="r")
                self._idx_file, self._idx_stat = idx_file, idx_stat
                self._idx_header = header
            if self.mmap and bin_size > 0:
                self._bin_file = bin_file
            elif not self.mmap:
                self._bin_source = open_source(bin_file)
        else:
            header, idx_buffer = self._open_remote_idx()
            self._bin_source = remote_bin = open_source(self.bin_path)
        self.multimodal = header.multimodal
        self.dtype = header.dtype
        self._set_index_arrays(header, idx_buffer)
        if self._idx_header is not None and self._open_files is not None:
            self._open_files.opened(self)  # the .idx map
        if remote_bin is not None:  # asked of the source once the index says what it needs
            bin_size = _remote_bin_size(remote_bin, self._data_end(), self.bin_path)
        self._bin_size = bin_size
        self._bin_needed = self._data_end()
        self.validated = False
        if validate:
            self.validate()

    def _set_index_arrays(self, header: idx_layout.IdxHeader, buffer) -> None:
        count = header.sequence_count
        self.sequence_lengths = _view(buffer, np.int32, header.lengths_offset, count)
        self.sequence_pointers = _view(buffer, np.int64, header.pointers_offset, count)
        self.document_indices = _view(
            buffer, np.int64, header.documents_offset, header.document_count
        )
        self.sequence_modes = (
            _view(buffer, np.int8, header.modes_offset, count) if header.multimodal else None
        )

    def __getattr__(self, name: str):
        # Only called for attributes not set: the index arrays of a released .idx map.
        state = self.__dict__
        if name in INDEX_ARRAYS and state.get("_idx_released"):
            return self._remap_idx(name)
        raise AttributeError(name)

    def _remap_idx(self, name: str):
        """Map the .idx again after :meth:`release_open_files`, if it is still the file
        opened (same device, inode, size, mtime and ctime), and return the array
        ``name`` (taken under the lock: another thread may release it again at once);
        DataError naming the file otherwise: its arrays must not change under a dataset
        built from them."""
        with _REMAP:
            if not self._idx_released:
                return self.__dict__[name]  # another thread re-mapped it
            idx_file, opened, header = self._mapped_idx()
            try:
                with open(idx_file, "rb") as stream:
                    info = os.fstat(stream.fileno())
                    if identity(info) != identity(opened):
                        raise DataError(
                            f"{self.idx_path}: the .idx changed since it was opened (device, "
                            f"inode, size, mtime_ns, ctime_ns "
                            f"{[*identity(opened)]} -> "
                            f"{[*identity(info)]}); reopen the dataset"
                        )
                    buffer = np.memmap(stream, dtype=np.uint8, mode="r")
            except OSError as error:
                raise DataError(f"{self.idx_path}: cannot map the .idx again ({error})") from error
            self._set_index_arrays(header, buffer)
            self._idx_released = False
            value = self.__dict__[name]
        if self._open_files is not None:
            self._open_files.opened(self)
        return value

    def _mapped_idx(self) -> tuple[str, os.stat_result, idx_layout.IdxHeader]:
        """Path, fstat and header of a memory-mapped local .idx (kept to map it again)."""
        idx_file, opened, header = self._idx_file, self._idx_stat, self._idx_header
        if idx_file is None or opened is None or header is None:
            raise DataError(f"{self.idx_path}: the .idx is not memory-mapped")
        return idx_file, opened, header

    def _modes(self) -> np.ndarray:
        """``sequence_modes`` of a multimodal corpus."""
        modes = self.sequence_modes
        if modes is None:
            raise DataError(f"{self.idx_path}: not a multimodal corpus")
        return modes

    def validate(self) -> None:
        """Check the index arrays against each other and the .bin size (once; a no-op
        when already done). Raises DataError naming the file and field."""
        if self.validated:
            return
        idx_layout.validate_arrays(
            self.sequence_lengths,
            self.sequence_pointers,
            self.document_indices,
            self.dtype.itemsize,
            self._bin_size,
            self.idx_path,
            self.bin_path,
        )
        self.validated = True

    def idx_sha256(self) -> str | None:
        """sha256 (hex) of the whole .idx when it was read into memory
        (:meth:`open_deferred`), else None."""
        if self._idx_bytes is None:
            return None
        return hashlib.sha256(self._idx_bytes).hexdigest()

    def _mapped_bin(self) -> np.ndarray | None:
        """The .bin as a read-only uint8 memory map (mapped at the first call), or None
        (pread, remote or empty .bin)."""
        mapped = self._bin_map
        if mapped is not None:
            if self._open_files is not None:
                self._open_files.used(self)
            return mapped
        if self._bin_file is None:
            return None
        try:
            with open(self._bin_file, "rb") as stream:
                self._check_bin_stat(os.fstat(stream.fileno()))
                mapped = self._bin_map = np.memmap(stream, dtype=np.uint8, mode="r")
        except (OSError, ValueError) as error:
            raise DataError(f"{self._bin_file}: cannot map the .bin ({error})") from error
        if self._open_files is not None:
            self._open_files.opened(self)
        return mapped

    def _pread_source(self) -> ByteSource:
        """The .bin's byte source (pread or remote); a local one shared with an
        :class:`OpenFiles` is counted there when it opens its descriptor."""
        source = self._bin_source
        if source is None:  # a local .bin read through a map, which is empty: nothing to read
            raise DataError(f"{self.bin_path}: no bytes to read in an empty .bin")
        if self._open_files is not None and isinstance(source, LocalFileSource):
            if source.is_open:
                self._open_files.used(self)
            else:
                source.size()  # opens it
                self._open_files.opened(self)
        return source

    def share_open_files(self, open_files: OpenFiles | None) -> None:
        """Count this corpus's descriptors (its .idx map, its .bin map or descriptor) in
        ``open_files`` (shared with other corpora, e.g. a blend's members); None: no
        bound."""
        state = self.__dict__  # a corpus described by a record may not be loaded
        previous = state.get("_open_files")
        if previous is open_files:
            return
        if previous is not None:
            previous.closed(self)
        self._open_files = open_files
        source = state.get("_bin_source")
        held = (
            (state.get("_idx_header") is not None and not state.get("_idx_released"))
            + (state.get("_bin_map") is not None)
            + (isinstance(source, LocalFileSource) and source.is_open)
        )
        if open_files is not None and held:
            open_files.opened(self, held)

    def release_open_files(self) -> None:
        """Drop the .idx map and its arrays and the .bin map / descriptor
        (:class:`OpenFiles` asks, least recently used first). Only references are
        dropped: a read in flight keeps the arrays, map or source it holds, and the
        descriptor closes with its last reference. The next access reopens (and checks
        the files' identities again)."""
        state = self.__dict__  # a corpus described by a record may not be loaded
        state["_bin_map"] = None
        source = state.get("_bin_source")
        if isinstance(source, LocalFileSource) and source.is_open:
            state["_bin_source"] = LocalFileSource(source.path)
        if state.get("_idx_header") is not None:
            with _REMAP:
                if not state.get("_idx_released"):
                    state["_idx_released"] = True  # before the arrays go: readers re-map
                    for name in INDEX_ARRAYS:
                        state.pop(name, None)
        if state.get("_open_files") is not None:
            state["_open_files"].closed(self)  # counted no more (a no-op when it asked)

    def _check_bin_stat(self, info: os.stat_result) -> None:
        """DataError unless ``info`` is the .bin this index was opened with, holding at
        least the bytes the index points to."""
        if which_file(info) != self._bin_identity:
            raise DataError(
                f"{self.bin_path}: the .bin was replaced since its index was opened; "
                f"reopen the dataset"
            )
        if info.st_size < self._bin_needed:
            raise DataError(
                f"{self.bin_path}: the .bin is now {info.st_size} bytes but its index "
                f"points to {self._bin_needed} (truncated since it was opened)"
            )

    def local_stats(self, now: bool = False) -> tuple | None:
        """``(idx, bin)`` stat results taken when the files were opened (the .idx's from
        the descriptor it is memory-mapped from), or with ``now`` of the paths as they
        are now (an entry None where the path is gone); None unless both files are
        local and the .idx is memory-mapped (not a small .idx read into memory, not a
        remote corpus)."""
        if self._idx_file is None or self._idx_stat is None or self._bin_stat is None:
            return None
        if not now:
            return self._idx_stat, self._bin_stat
        return _stat_or_none(self._idx_file), _stat_or_none(local_path(self.bin_path))

    def check_idx(self) -> None:
        """Raise DataError when the memory-mapped .idx was written or truncated in place
        since it was opened (its size, mtime or ctime changed): its arrays would change
        under the reader, or fault. One ``stat``; callers check once per batch. A .idx
        replaced by another file (``os.replace``) is fine: the map keeps the old file.
        """
        idx_file, opened = self._idx_file, self._idx_stat
        if idx_file is None or opened is None:
            return  # read into memory, or remote: nothing can change under us
        try:
            info = os.stat(idx_file)
        except OSError:
            return  # removed or renamed: the map still holds the old file
        if which_file(info) == which_file(opened) and contents_stamp(info) != contents_stamp(
            opened
        ):
            size, mtime, ctime = contents_stamp(info)
            raise DataError(
                f"{self.idx_path}: the .idx changed since it was opened (size "
                f"{opened.st_size} -> {size}, mtime_ns {opened.st_mtime_ns} -> {mtime}, "
                f"ctime_ns {opened.st_ctime_ns} -> {ctime}); reopen the dataset"
            )

    def check_files(self) -> None:
        """:meth:`check_idx` and :meth:`check_bin` (two ``stat`` calls): what a reader
        checks once per batch, before it reads the index arrays."""
        self.check_idx()
        self.check_bin()

    def check_bin(self) -> None:
        """Raise DataError when a local .bin read through a memory map no longer holds
        the bytes its index points to (truncated since open). One ``stat``; callers
        check once per batch. A .bin replaced by another file (``os.replace``) is fine
        once mapped: the map keeps the old file. Reading a mapped file that another
        process truncates *during* the read can still fault (SIGBUS): inherent to mmap;
        ``mmap=False`` (pread) turns that into a DataError instead.
        """
        bin_file = self._bin_file
        if self._bin_map is None or bin_file is None:
            return  # not mapped yet: mapping checks; pread reads check their length
        try:
            info = os.stat(bin_file)
        except OSError:
            return  # removed or renamed: the map still holds the old file
        if which_file(info) == self._bin_identity:
            self._check_bin_stat(info)

    def _open_remote_idx(self) -> tuple[idx_layout.IdxHeader, np.ndarray]:
        """Header and bytes of a remote .idx: memory-mapped from the source's local copy
        when it keeps one, else read into memory."""
        idx_source = open_source(self.idx_path)
        try:
            local_copy = getattr(idx_source, "local_copy", None)
            if local_copy is not None:
                idx_size, header_bytes, idx_buffer = _map_local_copy(local_copy)
            else:
                idx_size = idx_source.size()
                idx_bytes = bytes(idx_source.read(0, idx_size))
                header_bytes = idx_bytes[: idx_layout.HEADER_SIZE]
                idx_buffer = np.frombuffer(idx_bytes, dtype=np.uint8)
        finally:
            idx_source.close()
        header = idx_layout.parse_header(
            header_bytes, idx_size, self.idx_path, self._requested_multimodal
        )
        return header, idx_buffer

    def _data_end(self) -> int:
        """Bytes of the .bin the index refers to (the end of its last sequence)."""
        if len(self.sequence_lengths) == 0:
            return 0
        return int(self.sequence_pointers[-1]) + int(self.sequence_lengths[-1]) * (
            self.dtype.itemsize
        )

    # -- reading ---------------------------------------------------------------

    def _read(self, byte_offset: int, count: int) -> np.ndarray:
        """``count`` tokens starting at ``byte_offset`` of the .bin."""
        if count == 0:
            return np.empty(0, dtype=self.dtype)
        nbytes = count * self.dtype.itemsize
        mapped = self._mapped_bin()
        if mapped is not None:
            self.check_bin()
            return np.frombuffer(mapped, dtype=self.dtype, count=count, offset=byte_offset)
        return np.frombuffer(self._pread_source().read(byte_offset, nbytes), dtype=self.dtype)

    def _check_index(self, index: int) -> int:
        return position_in(index, len(self), f"{self.path_prefix}: sequence {index}")

    def __len__(self) -> int:
        lengths = self.__dict__.get("sequence_lengths")
        if lengths is None and self.__dict__.get("_idx_released"):
            return self._mapped_idx()[2].sequence_count  # no re-map for a length
        return len(self.sequence_lengths)

    def __getitem__(self, index):
        if isinstance(index, (int, np.integer)):
            index = self._check_index(int(index))
            tokens = self._read(
                int(self.sequence_pointers[index]), int(self.sequence_lengths[index])
            )
            if self.multimodal:
                return tokens, self._modes()[index]
            return tokens
        if isinstance(index, slice):
            start, stop, step = index.indices(len(self))
            if step != 1:
                raise DataError(f"{self.path_prefix}: slices must be contiguous, got step {step}")
            stop = max(start, stop)
            lengths = np.asarray(self.sequence_lengths[start:stop], dtype=np.int64)
            if len(lengths) == 0:
                return ([], self._modes()[start:stop]) if self.multimodal else []
            tokens = self._read(int(self.sequence_pointers[start]), int(lengths.sum()))
            sequences = np.split(tokens, np.cumsum(lengths)[:-1])
            if self.multimodal:
                return sequences, self._modes()[start:stop]
            return sequences
        raise TypeError(f"unexpected index type {type(index).__name__}")

    def get(self, index: int, offset: int = 0, length: int | None = None):
        """Tokens ``[offset, offset + length)`` of sequence ``index`` (to its end if None)."""
        index = self._check_index(int(index))
        sequence_length = int(self.sequence_lengths[index])
        if not 0 <= offset <= sequence_length:
            raise DataError(
                f"{self.path_prefix}: offset {offset} outside sequence {index} "
                f"of length {sequence_length}"
            )
        if length is None:
            length = sequence_length - offset
        if length < 0 or offset + length > sequence_length:
            raise DataError(
                f"{self.path_prefix}: length {length} at offset {offset} runs past the end "
                f"of sequence {index} (length {sequence_length})"
            )
        pointer = int(self.sequence_pointers[index]) + offset * self.dtype.itemsize
        tokens = self._read(pointer, length)
        if self.multimodal:
            return tokens, self._modes()[index]
        return tokens

    def token_view(self) -> np.ndarray | None:
        """Every token of the .bin as one flat read-only array (memory-mapped), else None.

        None when the corpus is read with pread or from a remote byte source.
        """
        mapped = self._mapped_bin()
        if mapped is None:  # pread / remote, or an empty .bin (never mapped)
            return None if self._bin_source is not None else np.empty(0, self.dtype)
        count = len(mapped) // self.dtype.itemsize
        return np.frombuffer(mapped, dtype=self.dtype, count=count)

    def read_bytes(self, byte_offset: int, count: int) -> np.ndarray:
        """``count`` tokens from an arbitrary .bin byte offset (for batched readers)."""
        return self._read(byte_offset, count)

    def read_ranges(self, byte_offsets: np.ndarray, counts: np.ndarray) -> np.ndarray:
        """The tokens of many ranges, concatenated in the order given.

        Args:
            byte_offsets: int64 [R] .bin byte offsets.
            counts: int64 [R] tokens per range.

        Returns:
            ``dtype`` [counts.sum()]. A remote source that reads many ranges at once
            (``read_ranges``) gets them all in one call, to issue them together.
        """
        itemsize = self.dtype.itemsize
        many = getattr(self._bin_source, "read_ranges", None)
        if many is None or len(counts) == 0:
            parts = [
                self._read(int(offset), int(count))
                for offset, count in zip(byte_offsets.tolist(), counts.tolist())
            ]
        else:
            buffers = many(np.asarray(byte_offsets, np.int64), np.asarray(counts) * itemsize)
            parts = [np.frombuffer(buffer, dtype=self.dtype) for buffer in buffers]
        return np.concatenate(parts) if parts else np.empty(0, dtype=self.dtype)

    # -- metadata -------------------------------------------------------------

    #: Every sequence pointer is the previous one plus its length in bytes (checked at
    #: open), so pointers are whole tokens into the .bin.
    pointers_aligned = True

    @property
    def num_documents(self) -> int:
        return len(self.document_indices) - 1

    @property
    def bin_size(self) -> int:
        return self._bin_size

    def close(self) -> None:
        """Drop memory maps and file handles; they reopen when unpickled."""
        if self._bin_source is not None:
            self._bin_source.close()
        self._bin_map = None
        if self._open_files is not None:
            self._open_files.closed(self)

    def __getstate__(self) -> dict:
        # Memmaps would pickle by value; keep only what reopening needs.
        stats = self.local_stats()
        return {
            "path_prefix": self.path_prefix,
            "mmap": self.mmap,
            "multimodal": self.multimodal,
            "open_files": self._open_files,  # one bound for corpora pickled together
            "validated": self.validated,
            # what the receiver must find to share this validation (or lack of it)
            "opened": None if stats is None else [
                list(identity(stats[0])), list(which_file(stats[1]))
            ],
        }

    def __setstate__(self, state: dict) -> None:
        self.path_prefix = state["path_prefix"]
        self.mmap = state["mmap"]
        self._requested_multimodal = state["multimodal"]
        self._open_files = state.get("open_files")
        self._open(validate=False)
        opened, stats = state.get("opened"), self.local_stats()
        if opened is None or stats is None:
            return
        idx_now = list(identity(stats[0]))
        if idx_now != list(opened[0]):
            raise DataError(
                f"{self.idx_path}: the .idx changed since the sending process opened it "
                f"(device, inode, size, mtime_ns, ctime_ns {opened[0]} -> {idx_now}); "
                "rebuild the dataset"
            )
        if list(which_file(stats[1])) != list(opened[1]):
            raise DataError(
                f"{self.bin_path}: the .bin was replaced since the sending process opened "
                "it; rebuild the dataset"
            )
        self.validated = bool(state.get("validated", False))  # the very same files

    def __repr__(self) -> str:
        return (
            f"IndexedDataset({self.path_prefix!r}, dtype={self.dtype}, "
            f"sequences={len(self)}, documents={self.num_documents}, "
            f"multimodal={self.multimodal})"
        )


def _stat_or_none(path: str) -> os.stat_result | None:
    try:
        return os.stat(path)
    except OSError:
        return None


def _map_local_copy(local_copy) -> tuple[int, bytes, np.ndarray]:
    """(size, header bytes, memory map) of a source's local copy of an .idx, all from one
    open file. Asked again once if the copy vanished meanwhile (another process replaced
    a stale generation)."""
    try:
        return _map_file(local_copy())
    except FileNotFoundError:
        return _map_file(local_copy())


def _map_file(path: str) -> tuple[int, bytes, np.ndarray]:
    with open(path, "rb") as stream:
        size = os.fstat(stream.fileno()).st_size
        header_bytes = stream.read(idx_layout.HEADER_SIZE)
        if size <= len(header_bytes):  # too short to map usefully: the header check says why
            return size, header_bytes, np.frombuffer(header_bytes, dtype=np.uint8)
        return size, header_bytes, np.memmap(stream, dtype=np.uint8, mode="r")


def _remote_bin_size(source: ByteSource, needed: int, bin_path: str) -> int:
    """The size of a remote .bin, or at least ``needed`` where the source can only
    confirm a minimum cheaply (validation then reports a short object)."""
    check_size = getattr(source, "check_size", None)
    if check_size is not None:
        return int(check_size(needed))
    return int(source.size())


def _view(buffer: np.ndarray | bytes, dtype: type, offset: int, count: int) -> np.ndarray:
    """A read-only array of ``count`` items of ``dtype`` at byte ``offset`` of ``buffer``
    (an array, or bytes: then a ``frombuffer`` view, read-only already and cheaper)."""
    if isinstance(buffer, bytes) and count:
        return np.frombuffer(buffer, dtype=dtype, count=count, offset=offset)
    array = np.ndarray(shape=(count,), dtype=dtype, buffer=buffer, offset=offset)
    array.flags.writeable = False
    return array
