"""IndexedDataset.open_deferred: a small .idx read in one go, array validation deferred to
validate(), the .bin mapped at its first read; the same values and errors as the
constructor."""

from __future__ import annotations

import hashlib
import os
import pickle

import numpy as np
import pytest

import megadata_core as mdc
from megadata_core.format import idx_layout


@pytest.fixture()
def corpus(tmp_path):
    prefix = str(tmp_path / "corpus")
    with mdc.IndexedDatasetWriter(prefix, np.uint16) as writer:
        writer.add_document([1, 2, 3, 4, 5], [2, 3])
        writer.add_document([6, 7], [2])
        writer.add_document([], [])
        writer.add_document([8], [1])
    return prefix


@pytest.mark.parametrize("read_below", [0, 1 << 16])
def test_same_values_as_the_constructor(corpus, read_below):
    eager = mdc.IndexedDataset(corpus)
    lazy = mdc.IndexedDataset.open_deferred(corpus, read_below=read_below)
    assert eager.validated and not lazy.validated
    assert lazy._bin_map is None  # nothing mapped before the first read
    for name in ("sequence_lengths", "sequence_pointers", "document_indices"):
        mine = getattr(lazy, name)
        np.testing.assert_array_equal(mine, getattr(eager, name))
        assert not mine.flags.writeable
    assert lazy.dtype == eager.dtype and lazy.bin_size == eager.bin_size
    for index in range(len(eager)):
        np.testing.assert_array_equal(lazy[index], eager[index])
    np.testing.assert_array_equal(lazy.token_view(), eager.token_view())
    lazy.validate()
    assert lazy.validated
    digest = lazy.idx_sha256()
    if read_below:
        with open(corpus + ".idx", "rb") as stream:
            assert digest == hashlib.sha256(stream.read()).hexdigest()
    else:
        assert digest is None
    again = pickle.loads(pickle.dumps(lazy))
    np.testing.assert_array_equal(again[0], eager[0])
    lazy.close()
    np.testing.assert_array_equal(lazy[3], eager[3])  # mapped again after close


def test_array_errors_wait_for_validate(corpus):
    pointers_at = idx_layout.HEADER_SIZE + 4 * 4
    with open(corpus + ".idx", "r+b") as stream:
        stream.seek(pointers_at + 8)
        stream.write(np.array([6], "<i8").tobytes())  # 4 expected: a gap
    with pytest.raises(mdc.DataError, match="sequence_pointers"):
        mdc.IndexedDataset(corpus)
    lazy = mdc.IndexedDataset.open_deferred(corpus)
    with pytest.raises(mdc.DataError, match=r"corpus\.idx: sequence_pointers\[1\]"):
        lazy.validate()
    assert not lazy.validated


@pytest.mark.parametrize("damage", ["magic", "truncated", "no_bin", "bin_is_a_directory"])
def test_header_and_file_errors_are_immediate(corpus, damage):
    if damage == "magic":
        with open(corpus + ".idx", "r+b") as stream:
            stream.write(b"XXXX")
        match = "bad magic"
    elif damage == "truncated":
        with open(corpus + ".idx", "r+b") as stream:
            stream.truncate(os.path.getsize(corpus + ".idx") - 3)
        match = "truncated arrays|fit no layout"
    elif damage == "no_bin":
        os.unlink(corpus + ".bin")
        match = r"\.bin file not found"
    else:
        os.unlink(corpus + ".bin")
        os.mkdir(corpus + ".bin")
        match = "not a regular file"
    for read_below in (0, 1 << 16):
        with pytest.raises(mdc.DataError, match=match):
            mdc.IndexedDataset.open_deferred(corpus, read_below=read_below)


def test_a_bin_gone_before_the_first_read(corpus):
    lazy = mdc.IndexedDataset.open_deferred(corpus)
    os.unlink(corpus + ".bin")
    with pytest.raises(mdc.DataError, match=r"corpus\.bin: cannot map"):
        lazy[0]
