"""The index build's arrays. The allocation protocol: a plain callable shuffles in place
and is never "spilled"; an allocator object says where a part of a result is shuffled
and whether writes go through a buffer, and the results are the same either way. Gathers
from unaligned corpus arrays (an .idx array after its 34-byte header): the same values
as from an aligned copy, without numpy's whole-array aligned copy."""

from __future__ import annotations

import contextlib
import tracemalloc

import numpy as np

from megadata_core.format import idx_layout
from megadata_core.indices import document_index, shuffle_index, tokens_per_epoch
from megadata_core.indices.arrays import in_memory, is_spilled, shuffle_space, take_into
from megadata_core.indices.feistel import FeistelDocumentIndex
from megadata_core.indices.sample_boundaries import sample_index

COUNT = 4_000_000  # 16 MB of int32 lengths: a whole copy stands out from the buffers


def _unaligned_lengths(count: int = COUNT) -> np.ndarray:
    """int32 [count] at byte offset 34 of a buffer, as an .idx map places them."""
    rng = np.random.default_rng(0)
    raw = np.zeros(idx_layout.HEADER_SIZE + 4 * count, np.uint8)
    lengths = np.ndarray((count,), np.int32, raw, idx_layout.HEADER_SIZE)
    lengths[:] = rng.integers(1, 3000, count)
    assert not lengths.flags.aligned
    return lengths


def _peak(work) -> int:
    tracemalloc.start()
    try:
        work()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_take_into_matches_fancy_indexing():
    lengths = _unaligned_lengths(1000)
    ids = np.random.default_rng(1).integers(0, 1000, 500).astype(np.int32)
    out = np.empty(500, np.int32)
    np.testing.assert_array_equal(take_into(lengths, ids, out), lengths[ids])
    aligned = lengths.copy()
    np.testing.assert_array_equal(take_into(aligned, ids, np.empty(500, np.int32)), out)


def test_take_into_copies_no_whole_source():
    lengths = _unaligned_lengths()
    ids = np.arange(0, COUNT, 997, dtype=np.int64)
    out = np.empty(ids.size, np.int32)
    assert _peak(lambda: take_into(lengths, ids, out)) < lengths.nbytes // 2


def test_tokens_per_epoch_of_ids_copies_no_whole_source():
    lengths = _unaligned_lengths()
    ids = np.arange(COUNT - 1, -1, -3, dtype=np.int64)
    total = []
    assert _peak(lambda: total.append(tokens_per_epoch(lengths, ids))) < lengths.nbytes // 2
    assert total[0] == int(lengths.copy()[ids].sum())


def test_sample_index_from_blocks_copies_no_whole_source():
    """The Feistel build gathers the corpus lengths block by block in place (corpora
    past COPY_LENGTHS_BELOW); the blocks must not copy the lengths each time."""
    lengths = _unaligned_lengths()
    documents = FeistelDocumentIndex(range(COUNT), 1, 7)
    tokens = int(lengths.sum(dtype=np.int64))
    result = []

    def build():
        result.append(sample_index(lengths, documents, 4096, 1, tokens, block_size=1 << 16,
                                   num_threads=1))

    import megadata_core.indices.sample_boundaries as boundaries

    copy_below = boundaries.COPY_LENGTHS_BELOW
    boundaries.COPY_LENGTHS_BELOW = 0  # gather in place, as a billion-document corpus does
    try:
        peak = _peak(build)
    finally:
        boundaries.COPY_LENGTHS_BELOW = copy_below
    assert peak - result[0].nbytes < lengths.nbytes // 2
    expected = sample_index(lengths.copy(), documents, 4096, 1, tokens)
    np.testing.assert_array_equal(result[0], expected)


class Recording:
    """An allocator that shuffles every part in a buffer of its own and records it."""

    def __init__(self) -> None:
        self.spaces: list[int] = []

    def __call__(self, name, shape, dtype):
        return np.empty(shape, dtype)

    @contextlib.contextmanager
    def shuffle_space(self, target):
        self.spaces.append(len(target))
        work = np.empty_like(target)
        yield work
        target[:] = work

    def is_spilled(self, array) -> bool:
        return True


def test_a_plain_callable_shuffles_in_place():
    target = np.arange(5)
    with shuffle_space(in_memory, target) as work:
        assert work is target
    assert not is_spilled(in_memory, target)
    assert not is_spilled(lambda name, shape, dtype: np.empty(shape, dtype), target)


def test_an_allocator_object_chooses_and_the_values_stay():
    recording = Recording()
    assert is_spilled(recording, np.arange(3))
    ids = np.arange(100, 150)
    expected = document_index(ids, 3, np.random.RandomState(5), True)
    got = document_index(ids, 3, np.random.RandomState(5), True, empty=recording)
    np.testing.assert_array_equal(got, expected)
    assert recording.spaces == [100, 50]  # the first E-1 epochs, then the final one
    expected = shuffle_index(40, 70, np.random.RandomState(6))
    np.testing.assert_array_equal(
        shuffle_index(40, 70, np.random.RandomState(6), empty=recording), expected
    )
