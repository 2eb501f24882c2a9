"""The packing's two ways to each result give the same arrays: the layout placed once
(rows from its record, in memory) or twice (rows written straight into a spilled
working file), and the fills from the stored document keys or from the lengths."""

from __future__ import annotations

import dataclasses

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from megadata_core.indices import packing


class _Spilling:
    """An allocator that says every array it makes is spilled (as a file mapping would
    be), so the layout takes its two-pass path."""

    def __call__(self, name, shape, dtype):
        return np.empty(shape, dtype)

    @staticmethod
    def is_spilled(array) -> bool:
        return True


@settings(max_examples=60, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 60), min_size=1, max_size=80),
    capacity=st.integers(1, 24),
    seed=st.integers(0, 2**16),
)
def test_one_and_two_placement_passes_agree(lengths, capacity, seed):
    lengths = np.array(lengths, dtype=np.int64)
    once = packing.pack_layout(lengths, capacity)
    twice = packing.pack_layout(lengths, capacity, _Spilling())
    np.testing.assert_array_equal(once.bin_offsets, twice.bin_offsets)
    np.testing.assert_array_equal(once.row, twice.row)
    order = np.random.default_rng(seed).permutation(len(lengths))
    from_keys = packing.fill_documents(once, order)
    assert once.keys is not None
    from_lengths = packing.fill_documents(dataclasses.replace(once, keys=None), order)
    np.testing.assert_array_equal(from_keys, from_lengths)
    # and through a small scatter buffer (row ranges), either way
    ranged = packing.fill_documents(once, order, np.empty(once.num_pieces, np.int64),
                                    scratch_bytes=16)
    np.testing.assert_array_equal(ranged, from_lengths)


def test_large_capacities_fill_from_lengths():
    """Keys need 15 bits: a capacity of 2**15 or more packs from the lengths."""
    lengths = np.array([40_000, 5, 70_000, 32_767, 1], dtype=np.int64)
    layout = packing.pack_layout(lengths, 1 << 15)
    assert layout.keys is None
    bins = packing.best_fit_pack(lengths, 1 << 15)
    kept = np.bincount(bins.piece_document, weights=bins.piece_length, minlength=5)
    np.testing.assert_array_equal(kept, lengths)
