"""Reading inputs: opening (plain, gzip), counting lines, and cutting them into blocks of lines."""

from __future__ import annotations

import contextlib
import gzip
import io
import mmap
import os
import stat
from collections.abc import Callable, Iterator
from typing import BinaryIO, TypeGuard, cast

import numpy as np

from megadata_core.errors import DataError
from megadata_core.preprocess.remote import is_remote, open_remote

_BOM = b"\xef\xbb\xbf"  # a UTF-8 byte order mark, dropped from a file's first line


class _OwningGzip(gzip.GzipFile):
    """A GzipFile that closes the file object it decompresses."""

    def __init__(self, raw: BinaryIO) -> None:
        super().__init__(fileobj=raw, mode="rb")
        self._raw = raw

    def close(self) -> None:
        try:
            super().close()
        finally:
            self._raw.close()


def open_raw(path: str) -> BinaryIO:
    """The stored bytes of an input, not decompressed: a local file or a URL's object."""
    if is_remote(path):
        return open_remote(path)
    try:
        return open(path, "rb", buffering=1 << 20)
    except FileNotFoundError:
        raise DataError(f"{path}: input file not found") from None
    except IsADirectoryError:
        raise DataError(f"{path}: input path is a directory, not a file") from None


def open_input(path: str) -> BinaryIO:
    """Open a ``.jsonl`` (plain) or ``.jsonl.gz`` file, local or by URL (``s3://``,
    ``gs://`` with the tensorstore extra), for binary line reading."""
    if str(path).endswith(".zst"):
        raise DataError(
            f"{path}: zstd input needs an open_binary that decompresses it "
            "(tools/preprocess_data.py passes one built on the zstandard package)"
        )
    if is_remote(str(path)):
        raw = open_remote(path)
        # a GzipFile is a binary file, though no typing.BinaryIO:
        return cast(BinaryIO, _OwningGzip(raw)) if str(path).endswith(".gz") else raw
    try:
        if str(path).endswith(".gz"):
            return cast(BinaryIO, gzip.open(path, "rb"))
        return open(path, "rb", buffering=1 << 20)
    except FileNotFoundError:
        raise DataError(f"{path}: input file not found") from None
    except IsADirectoryError:
        raise DataError(f"{path}: input path is a directory, not a file") from None


def count_lines(path: str, open_binary: Callable[[str], BinaryIO] = open_input) -> int:
    """Lines in a file as iterating it yields them (a last line without newline counts)."""
    count = 0
    last = b"\n"
    with naming_read_errors(path), open_binary(path) as stream:
        while block := stream.read(1 << 24):
            count += block.count(b"\n")
            last = block[-1:]
    return count + (last != b"\n")


def strip_bom(line: bytes) -> bytes:
    """``line`` without a leading UTF-8 byte order mark (a file's first line)."""
    return line[len(_BOM) :] if line.startswith(_BOM) else line


@contextlib.contextmanager
def naming_read_errors(path: str) -> Iterator[None]:
    """Turn read failures (missing file, truncated gzip, ...) into DataError naming ``path``."""
    try:
        yield
    except DataError:
        raise
    except FileNotFoundError:
        raise DataError(f"{path}: input file not found") from None
    except (OSError, EOFError) as error:
        raise DataError(f"{path}: cannot read input: {error}") from error


def lines_in(data: bytes) -> int:
    """Lines of a block (a last line without newline counts)."""
    return data.count(b"\n") + (bool(data) and not data.endswith(b"\n"))


def split_lines(data: bytes) -> list[bytes]:
    """The lines of a block, each with its ``\\n``, as iterating a binary file gives them."""
    lines = data.split(b"\n")
    last = lines.pop()
    lines = [line + b"\n" for line in lines]
    if last:
        lines.append(last)
    return lines


def _cut_after_lines(data: bytes, count: int) -> int:
    """Byte offset just past the ``count``-th line end of ``data`` (its length if fewer)."""
    ends = np.flatnonzero(np.frombuffer(data, np.uint8) == 10)
    return int(ends[count - 1]) + 1 if count <= ends.size else len(data)


def take_lines(data: bytes, room: int) -> tuple[bytes, bytes, int]:
    """(the first ``room`` lines of ``data`` or all of them, the rest, how many lines the
    first part holds)."""
    count = lines_in(data)
    if count <= room:
        return data, b"", count
    cut = _cut_after_lines(data, room)
    return data[:cut], data[cut:], room


def read_blocks(stream: BinaryIO, block_bytes: int, limit: int = -1) -> Iterator[bytes]:
    """Whole lines of ``stream`` in blocks of about ``block_bytes`` (a longer line is one
    block of its own), up to ``limit`` bytes when not negative (a plan's byte range ends on
    a line end). A plain local file is mapped, each block copied from the map once (as
    any mapped read, a file truncated while it is read ends the process with SIGBUS), and
    the mapped pages behind the blocks given are released as it goes: resident memory
    holds the blocks in flight, whatever the file's size."""
    if _plain_file(stream):
        yield from _mapped_blocks(stream, block_bytes, limit)
        return
    pieces: list[bytes] = []
    remaining = limit
    while remaining:
        raw = stream.read(block_bytes if remaining < 0 else min(block_bytes, remaining))
        if not raw:
            break
        remaining -= len(raw) if remaining > 0 else 0
        cut = raw.rfind(b"\n") + 1
        if not cut:  # no line end yet: a long line goes on
            pieces.append(raw)
            continue
        if pieces:
            pieces.append(raw[:cut])
            yield b"".join(pieces)
            pieces = [raw[cut:]] if cut < len(raw) else []
        else:
            yield raw if cut == len(raw) else raw[:cut]
            if cut < len(raw):
                pieces = [raw[cut:]]
    if pieces:
        yield b"".join(pieces)


def _plain_file(stream) -> TypeGuard[io.BufferedReader]:
    """Whether ``stream`` reads a regular local file as it is (not through a decompressor)."""
    if not (isinstance(stream, io.BufferedReader) and isinstance(stream.raw, io.FileIO)):
        return False
    try:
        return stat.S_ISREG(os.fstat(stream.fileno()).st_mode) and stream.seekable()
    except (OSError, ValueError):
        return False


_RELEASE_BYTES = 8 << 20  # released in runs of at least this (one call per few blocks)


def _release_pages(mapped: mmap.mmap, released: int, position: int) -> int:
    """Drop this process' mapping of the whole pages in [released, position) (the pages
    stay in the page cache; a read of them maps them again), when that run is at least
    _RELEASE_BYTES; returns the new start of the pages still mapped. Without a mapped read
    releasing its pages, a 2 GB input's whole file stayed resident: 2.07 GB of RssFile."""
    done = position - position % mmap.PAGESIZE
    if done - released < _RELEASE_BYTES or not hasattr(mmap, "MADV_DONTNEED"):
        return released
    try:
        mapped.madvise(mmap.MADV_DONTNEED, released, done - released)
    except OSError:  # (a platform refusing the advice: the pages stay, as before)
        return released
    return done


def _mapped_blocks(stream: io.BufferedReader, block_bytes: int, limit: int) -> Iterator[bytes]:
    """``read_blocks`` of a regular file through ``mmap``: the blocks end where the
    stream's reads would end them; the stream is left after the last byte given."""
    start = stream.tell()
    size = os.fstat(stream.fileno()).st_size
    end = size if limit < 0 else min(size, start + limit)
    if end <= start:
        return
    with mmap.mmap(stream.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
        position = start
        released = start - start % mmap.PAGESIZE  # mapped pages before it: given back
        try:
            while position < end:
                stop = min(position + block_bytes, end)
                cut = end
                if stop < end:
                    cut = mapped.rfind(b"\n", position, stop) + 1
                    while not cut and stop < end:  # no line end yet: a long line goes on
                        window, stop = stop, min(stop + block_bytes, end)
                        cut = mapped.rfind(b"\n", window, stop) + 1
                    cut = cut or end
                yield mapped[position:cut]
                position = cut
                released = _release_pages(mapped, released, position)
        finally:  # (a generator closed after its file was: nothing to leave it at)
            if not stream.closed:
                stream.seek(position)
