"""Reading inputs: opening (plain, gzip), counting lines, and cutting them into chunks."""

from __future__ import annotations

import contextlib
import gzip
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import BinaryIO

from megadata_core.errors import DataError
from megadata_core.preprocess.remote import is_remote, open_remote

BOM = b"\xef\xbb\xbf"  # a UTF-8 byte order mark, dropped from a file's first line


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
        return _OwningGzip(raw) if str(path).endswith(".gz") else raw
    try:
        if str(path).endswith(".gz"):
            return gzip.open(path, "rb")
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
    return line[len(BOM) :] if line.startswith(BOM) else line


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


@dataclass
class Chunk:
    """Consecutive lines of one file: ``first_line`` is 1-based in ``path``,
    ``first_index`` 0-based over all inputs."""

    shard: int
    path: str
    first_line: int
    lines: list[bytes]
    nbytes: int
    first_index: int = 0


def read_chunks(
    paths: Sequence[str],
    open_binary: Callable[[str], BinaryIO],
    shard_starts: Sequence[int],
    chunk_lines: int,
    chunk_bytes: int,
) -> Iterator[Chunk]:
    """Consecutive lines of all inputs, in order; no chunk spans two files or two shards.

    ``shard_starts[k]`` is the global line index (over all files) where shard k begins.
    """
    line_index = 0
    shard = 0
    for path in paths:
        lines: list[bytes] = []
        nbytes = 0
        first_line = 1
        line_number = 0
        with naming_read_errors(path), open_binary(path) as stream:
            for line in stream:
                line_number += 1
                while shard + 1 < len(shard_starts) and line_index >= shard_starts[shard + 1]:
                    if lines:
                        yield Chunk(shard, path, first_line, lines, nbytes, line_index - len(lines))
                        lines, nbytes, first_line = [], 0, line_number
                    shard += 1
                line_index += 1
                nbytes += len(line)
                if line_number == 1:
                    line = strip_bom(line)
                lines.append(line)
                if len(lines) >= chunk_lines or nbytes >= chunk_bytes:
                    yield Chunk(shard, path, first_line, lines, nbytes, line_index - len(lines))
                    lines, nbytes, first_line = [], 0, line_number + 1
        if lines:
            yield Chunk(shard, path, first_line, lines, nbytes, line_index - len(lines))

