"""RangedFile (inputs by URL as files): reads and seeks in any order give the source's
bytes, the range read ahead is used only when it is the one asked for, its error surfaces
on the read that takes it, and closing with a read in flight is clean."""

from __future__ import annotations

import io
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from megadata_core import DataError
from megadata_core.format.sources import LocalFileSource
from megadata_core.preprocess.remote import RangedFile, bound_reads

DATA = bytes(range(256)) * 40  # 10,240 bytes


@pytest.fixture(scope="module")
def path(tmp_path_factory):
    path = tmp_path_factory.mktemp("ranged") / "object.bin"
    path.write_bytes(DATA)
    return str(path)


class CountingSource(LocalFileSource):
    """A local file as a byte source, counting its reads (a real source, not a stand-in)."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.reads: list[tuple[int, int]] = []

    def read(self, offset: int, length: int) -> bytes:
        self.reads.append((offset, length))
        return super().read(offset, length)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["read", "seek"]), st.integers(0, 12_000)),
                max_size=30),
       st.booleans(), st.integers(1, 3000))
def test_reads_and_seeks_give_the_source_bytes(path, steps, read_ahead, buffer_size):
    raw = RangedFile(LocalFileSource(path), len(DATA), read_ahead=read_ahead)
    stream = io.BufferedReader(raw, buffer_size=buffer_size)
    position = 0
    with stream:
        for kind, value in steps:
            if kind == "seek":
                position = stream.seek(min(value, len(DATA) + 10))
            else:
                got = stream.read(value)
                assert got == DATA[position : position + value]
                position += len(got)
        assert stream.read() == DATA[position:]


def test_sequential_reads_take_the_range_read_ahead(path):
    source = CountingSource(path)
    raw = RangedFile(source, len(DATA), read_ahead=True)
    buffer = bytearray(1000)
    for start in range(0, 3000, 1000):
        assert raw.readinto(buffer) == 1000 and bytes(buffer) == DATA[start : start + 1000]
    raw.seek(5000)  # elsewhere: the range read ahead (3000-3999) is not used
    assert raw.readinto(buffer) == 1000 and bytes(buffer) == DATA[5000:6000]
    raw.close()
    # each range asked at most once: read directly (0, 5000) or ahead (1000, 2000); the
    # ranges read ahead but never taken (3000, 6000) only when not cancelled in time
    needed = {(0, 1000), (1000, 1000), (2000, 1000), (5000, 1000)}
    assert len(source.reads) == len(set(source.reads))
    assert needed <= set(source.reads) <= needed | {(3000, 1000), (6000, 1000)}


def test_an_error_read_ahead_surfaces_on_the_read_that_takes_it(tmp_path):
    path = tmp_path / "object.bin"
    path.write_bytes(DATA)
    raw = RangedFile(LocalFileSource(str(path)), len(DATA), read_ahead=True)
    buffer = bytearray(6000)
    with open(path, "r+b") as stream:
        stream.truncate(7000)  # the object shrinks under the reader
    assert raw.readinto(buffer) == 6000  # the next range (6000-10239) is read ahead: short
    with pytest.raises(DataError, match=str(path)):
        raw.readinto(buffer)
    raw.close()


def test_close_with_a_read_in_flight(path):
    for _ in range(20):
        raw = RangedFile(LocalFileSource(path), len(DATA), read_ahead=True)
        raw.readinto(bytearray(100))
        raw.close()  # the read ahead of 100-199 cancelled or waited for
        assert raw.closed and raw._ahead is None


def test_a_forked_child_reads_ahead_with_threads_of_its_own(path):
    raw = RangedFile(LocalFileSource(path), len(DATA), read_ahead=True)
    raw.readinto(bytearray(100))  # the parent's pool is running
    pid = os.fork()
    if pid == 0:  # the child: a read ahead needs a pool, which the fork did not carry
        try:
            child = RangedFile(LocalFileSource(path), len(DATA), read_ahead=True)
            buffer = bytearray(100)
            ok = all(child.readinto(buffer) == 100 and bytes(buffer) == DATA[i : i + 100]
                     for i in range(0, 1000, 100))
            child.close()
            os._exit(0 if ok else 1)
        except BaseException:
            os._exit(2)
    _, status = os.waitpid(pid, 0)
    raw.close()
    assert os.waitstatus_to_exitcode(status) == 0


@settings(max_examples=60, deadline=None)
@given(st.integers(0, len(DATA)), st.integers(0, len(DATA) + 5), st.integers(1, 3000))
def test_bounded_reads_fetch_nothing_past_the_stop(path, start, stop, buffer_size):
    """A task reading bytes [start, stop) through a buffered stream gets exactly them, and
    no request (read-ahead included) reaches past the stop; past it, reads go on to the
    end of the object when asked."""
    source = CountingSource(path)
    stream = io.BufferedReader(RangedFile(source, len(DATA), read_ahead=True),
                               buffer_size=buffer_size)
    with stream:
        stream.seek(start)
        bound_reads(stream, stop)
        got = b""
        while len(got) < max(0, min(stop, len(DATA)) - start):
            piece = stream.read(min(buffer_size, min(stop, len(DATA)) - start - len(got)))
            assert piece
            got += piece
        assert got == DATA[start:stop]
        assert all(offset + length <= max(stop, start) for offset, length in source.reads)
        if stop < len(DATA):
            stream.seek(stop)
            assert stream.read() == DATA[stop:]


def test_a_size_remembered_sends_no_probes(monkeypatch):
    """Sizes found by the driver, remembered in a worker under the object's generation,
    are not asked of the store again; without a generation nothing is kept."""
    from megadata_core.preprocess import remote

    class Source:
        path = "s3://bucket/remembered.jsonl"
        sized = 0

        def generation(self):
            return "abc123"

        def size(self):
            Source.sized += 1
            return 77

    monkeypatch.setattr(remote, "_sizes", {})
    remote.remember_size(Source.path, 1234, "abc123")
    remote.remember_size(Source.path, 99, None)
    assert remote._stat(Source()) == (1234, "abc123") and Source.sized == 0
    assert remote._sizes == {(Source.path, "abc123"): 1234}
