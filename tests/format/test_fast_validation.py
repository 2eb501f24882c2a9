"""The .idx validation's fast pass agrees with the reference pass on every input, and
reading the arrays leaves no mapped pages behind."""

from __future__ import annotations

import numpy as np
import pytest

import megadata_core as mdc
from megadata_core.format import idx_layout


def _valid(rng: np.random.Generator, count: int, documents: int, itemsize: int):
    """Consistent (lengths, pointers, document boundaries, bin size) arrays."""
    lengths = rng.integers(0, 9, count).astype(np.int32)
    pointers = np.zeros(count, dtype=np.int64)
    np.cumsum(lengths[:-1].astype(np.int64) * itemsize, out=pointers[1:])
    inner = np.sort(rng.integers(0, count + 1, documents - 1))
    boundaries = np.concatenate([[0], inner, [count]]).astype(np.int64)
    bin_size = int(lengths.sum(dtype=np.int64)) * itemsize
    return lengths, pointers, boundaries, bin_size


def _damage(rng, lengths, pointers, boundaries, bin_size, kind: str, itemsize: int):
    count = len(lengths)
    where = int(rng.integers(0, count))
    if kind == "negative_length":
        lengths[where] = -int(rng.integers(1, 5))
    elif kind == "length_changed":  # every later pointer is now off
        lengths[where] += 1
    elif kind == "pointer_shifted":
        pointers[where] += int(rng.choice([-2, -1, 1, 2])) * itemsize
    elif kind == "pointer_misaligned":
        pointers[where] += 1
    elif kind == "first_pointer":
        pointers[0] = itemsize
    elif kind == "boundary_decreases":
        inner = int(rng.integers(1, len(boundaries) - 1))
        boundaries[inner] = boundaries[inner - 1] - 1
    elif kind == "bin_short":
        bin_size -= 1
    return lengths, pointers, boundaries, bin_size


def _reference_error(lengths, pointers, boundaries, itemsize, bin_size) -> str | None:
    try:
        idx_layout._raise_first_error(
            lengths, pointers, boundaries, itemsize, bin_size, "x.idx", "x.bin"
        )
    except mdc.DataError as error:
        return str(error)
    return None


KINDS = [
    "none",
    "negative_length",
    "length_changed",
    "pointer_shifted",
    "pointer_misaligned",
    "first_pointer",
    "boundary_decreases",
    "bin_short",
]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("threads", [1, 3])
def test_fast_pass_agrees_with_reference(monkeypatch, kind, threads):
    monkeypatch.setattr(idx_layout, "FAST_CHUNK", 5)  # many chunks and ragged ends
    monkeypatch.setattr(idx_layout, "_fast_threads", lambda entries: threads)
    rng = np.random.default_rng(KINDS.index(kind) * 10 + threads)
    for trial in range(40):
        itemsize = int(rng.choice([1, 2, 4, 8]))
        count = int(rng.integers(2, 60))
        documents = int(rng.integers(2, 80))  # more or fewer boundaries than sequences
        arrays = _valid(rng, count, documents, itemsize)
        lengths, pointers, boundaries, bin_size = _damage(rng, *arrays, kind, itemsize)
        if boundaries[-1] != count or boundaries[0] != 0:
            continue  # caught before either pass
        expected = _reference_error(lengths, pointers, boundaries, itemsize, bin_size)
        fast = idx_layout._arrays_are_valid(lengths, pointers, boundaries, itemsize, bin_size)
        assert fast == (expected is None), (trial, kind, expected)
        if expected is None:
            idx_layout.validate_arrays(
                lengths, pointers, boundaries, itemsize, bin_size, "x.idx", "x.bin"
            )
        else:
            with pytest.raises(mdc.DataError) as error:
                idx_layout.validate_arrays(
                    lengths, pointers, boundaries, itemsize, bin_size, "x.idx", "x.bin"
                )
            assert str(error.value) == expected


def _rss_file_kib() -> int | None:
    try:
        with open("/proc/self/status") as stream:
            for line in stream:
                if line.startswith("RssFile:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def test_open_drops_the_pages_it_validated(tmp_path):
    """Opening validates every .idx byte through the memory map, then unmaps the pages
    (they stay in the page cache): RSS does not grow by the .idx size; values unchanged."""
    count = 2_000_000  # a 40 MB .idx
    prefix = str(tmp_path / "big")
    lengths = np.full(count, 3, dtype=np.int32)
    with open(prefix + ".idx", "wb") as stream:
        stream.write(idx_layout.pack_header(8, count, count + 1))
        stream.write(lengths.tobytes())
        stream.write((np.arange(count, dtype=np.int64) * 6).tobytes())
        stream.write(np.arange(count + 1, dtype=np.int64).tobytes())
    with open(prefix + ".bin", "wb") as stream:
        stream.truncate(count * 6)
    before = _rss_file_kib()
    dataset = mdc.IndexedDataset(prefix)
    after = _rss_file_kib()
    if before is not None and after is not None:
        assert after - before < 16 * 1024  # KiB; the .idx is ~39000 KiB
    assert int(dataset.sequence_pointers[-1]) == (count - 1) * 6
    assert int(dataset.document_indices[count]) == count


def test_drop_mapped_pages_is_a_no_op_off_memory_maps(tmp_path):
    array = np.arange(10)
    idx_layout.drop_mapped_pages(array)  # not mapped: nothing happens
    path = tmp_path / "a.bin"
    array.tofile(path)
    writable = np.memmap(path, dtype=array.dtype, mode="r+")
    writable[0] = 7
    idx_layout.drop_mapped_pages(writable)  # only read-only maps qualify
    assert writable[0] == 7
    mapped = np.memmap(path, dtype=array.dtype, mode="r")
    idx_layout.drop_mapped_pages(mapped[2:5])
    assert mapped.tolist() == [7] + list(range(1, 10))
