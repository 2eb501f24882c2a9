"""A .bin truncated or replaced after its dataset was opened: a DataError naming the
file before any read from it, never a bare ValueError, zeros or SIGBUS."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import megadata_core as mdc

TOKENS = 300_000  # 600 KB of uint16: a truncation well past the last mapped page


def _corpus(tmp_path) -> str:
    prefix = str(tmp_path / "corpus")
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, 50_000, TOKENS).astype(np.uint16)
    with mdc.IndexedDatasetWriter(prefix, np.uint16) as writer:
        writer.add_document(tokens, [TOKENS // 3] * 3)
    return prefix


def _truncate(prefix: str, size: int) -> None:
    os.truncate(prefix + ".bin", size)


@pytest.mark.parametrize("read_first", [False, True])
@pytest.mark.parametrize("size", [0, 1000, TOKENS])  # all, most, a third of the bytes gone
def test_indexed_read_after_truncation(tmp_path, read_first, size):
    prefix = _corpus(tmp_path)
    corpus = mdc.IndexedDataset(prefix)
    if read_first:  # mapped before the truncation, or mapped after it
        corpus[0]
    _truncate(prefix, size)
    with pytest.raises(mdc.DataError, match=r"corpus\.bin: .*(truncated|cannot map)"):
        corpus[2]


def test_gpt_batch_after_truncation(tmp_path):
    prefix = _corpus(tmp_path)
    config = mdc.GPTDataConfig(random_seed=1, sequence_length=64, eod_id=0)
    corpus = mdc.IndexedDataset(prefix)
    train = mdc.GPTDataset(corpus, np.arange(3), None, config)
    train.__getitems__([0, 1])
    _truncate(prefix, 2000)
    with pytest.raises(mdc.DataError, match=r"corpus\.bin: the \.bin is now 2000 bytes"):
        train.__getitems__(np.arange(len(train)))


def test_truncation_in_a_fresh_process_raises_not_sigbus(tmp_path):
    """What the probe saw: a large mapped file truncated under a reader killed the
    process with SIGBUS. Run in a child so a regression shows as a signal, not a crash."""
    prefix = _corpus(tmp_path)
    script = textwrap.dedent(f"""
        import os, numpy as np, megadata_core as mdc
        config = mdc.GPTDataConfig(random_seed=1, sequence_length=64, eod_id=0)
        train = mdc.GPTDataset(mdc.IndexedDataset({prefix!r}), np.arange(3), None, config)
        train.__getitems__([0])
        os.truncate({prefix!r} + ".bin", 4096)
        try:
            train.__getitems__(np.arange(len(train)))
        except mdc.DataError as error:
            print("DataError", error)
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, (result.returncode, result.stderr)
    assert "DataError" in result.stdout and "truncated" in result.stdout


def test_replaced_bin_keeps_serving_the_mapped_file(tmp_path):
    """os.replace of the .bin after the map: the map holds the old file, whose bytes
    still match the index; reads go on unchanged."""
    prefix = _corpus(tmp_path)
    corpus = mdc.IndexedDataset(prefix)
    before = corpus[1].copy()
    other = str(tmp_path / "other.bin")
    with open(other, "wb") as stream:
        stream.write(b"\0" * 10)
    os.replace(other, prefix + ".bin")
    np.testing.assert_array_equal(corpus[1], before)


def test_replaced_bin_before_the_first_read(tmp_path):
    """Replaced between open and the first map: the new file is not this index's."""
    prefix = _corpus(tmp_path)
    corpus = mdc.IndexedDataset(prefix)
    os.replace(prefix + ".bin", str(tmp_path / "moved.bin"))
    with open(prefix + ".bin", "wb") as stream:
        stream.write(b"\0" * (TOKENS * 2))
    with pytest.raises(mdc.DataError, match=r"corpus\.bin: the \.bin was replaced"):
        corpus[0]


def test_pread_reader_truncation(tmp_path):
    prefix = _corpus(tmp_path)
    corpus = mdc.IndexedDataset(prefix, mmap=False)
    corpus[0]
    _truncate(prefix, 1000)
    with pytest.raises(mdc.DataError, match=r"corpus\.bin: wanted"):
        corpus[2]
