"""The index functions' allocation protocol: a plain callable shuffles in place and is
never "spilled"; an allocator object says where a part of a result is shuffled and
whether writes go through a buffer, and the results are the same either way."""

from __future__ import annotations

import contextlib

import numpy as np

from megadata_core.indices import document_index, shuffle_index
from megadata_core.indices.arrays import in_memory, is_spilled, shuffle_space


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
