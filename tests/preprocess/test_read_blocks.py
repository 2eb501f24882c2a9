"""``read_blocks`` gives whole lines in about ``block_bytes`` blocks: a plain local file
is mapped, any other stream read; both give the same bytes, every block but the last ends
on a line end, a byte range stops at its limit, and the stream is left after the last
byte given."""

from __future__ import annotations

import gzip
import io

from hypothesis import example, given, settings
from hypothesis import strategies as st

from megadata_core.preprocess.reading import _plain_file, read_blocks

lines = st.lists(st.binary(max_size=40).map(lambda b: b.replace(b"\n", b"") + b"\n"),
                 max_size=30)


@settings(max_examples=200, deadline=None)
@given(body=lines, tail=st.binary(max_size=10).map(lambda b: b.replace(b"\n", b"")),
       block_bytes=st.integers(1, 64), skip=st.integers(0, 30), cut=st.integers(0, 30),
       limited=st.booleans())
@example(body=[], tail=b"", block_bytes=1, skip=0, cut=0, limited=False)
@example(body=[b"x" * 100 + b"\n"], tail=b"yy", block_bytes=7, skip=0, cut=0, limited=False)
def test_mapped_file_reads_as_the_stream_does(tmp_path_factory, body, tail, block_bytes, skip,
                                              cut, limited):
    data = b"".join(body) + tail
    ends = [0] + [i + 1 for i, byte in enumerate(data) if byte == 10]
    start = ends[min(skip, len(ends) - 1)]
    limit = -1
    if limited:  # a plan's byte range: from a line start to a later line end
        later = [end for end in ends if end >= start]
        limit = later[min(cut, len(later) - 1)] - start
    path = tmp_path_factory.mktemp("blocks") / "in.jsonl"
    path.write_bytes(data)
    with open(path, "rb", buffering=1 << 20) as mapped:
        assert _plain_file(mapped)
        mapped.seek(start)
        got = list(read_blocks(mapped, block_bytes, limit))
        left_at = mapped.tell()
    stream = io.BufferedReader(io.BytesIO(data))
    stream.seek(start)
    assert not _plain_file(stream)
    expected = list(read_blocks(stream, block_bytes, limit))
    assert b"".join(got) == b"".join(expected)
    assert all(got) and all(block.endswith(b"\n") for block in got[:-1])
    assert left_at == start + sum(map(len, got))
    want = data[start:] if limit < 0 else data[start : start + limit]
    assert b"".join(got) == want


def test_a_compressed_file_is_read_not_mapped(tmp_path):
    path = tmp_path / "in.jsonl.gz"
    with gzip.open(path, "wb") as stream:
        stream.write(b'{"text": "a"}\n' * 10)
    with gzip.open(path, "rb") as stream:
        assert not _plain_file(stream)
        assert b"".join(read_blocks(stream, 16)) == b'{"text": "a"}\n' * 10


def test_a_generator_closed_after_its_file_raises_nothing(tmp_path):
    path = tmp_path / "in.jsonl"
    path.write_bytes(b'{"text": "a"}\n' * 50)
    stream = open(path, "rb", buffering=1 << 20)
    blocks = read_blocks(stream, 32)
    assert next(blocks).endswith(b"\n")
    stream.close()
    blocks.close()  # its finally must not seek the closed file
