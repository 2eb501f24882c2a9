"""megadata_core.handover.pack.BufferPool: pooled copies, never shared while held."""

from __future__ import annotations

import numpy as np

from megadata_core.handover.pack import BufferPool


def test_pool_copy_is_writable_and_never_shared_while_held():
    pool = BufferPool()
    source = np.arange(12, dtype=np.int32).reshape(3, 4)
    source.flags.writeable = False
    a = pool.copy(source, np.int64)
    assert a.dtype == np.int64 and a.flags.writeable and a.flags.c_contiguous
    np.testing.assert_array_equal(a, source)
    b = pool.copy(source, np.int64)
    assert not np.shares_memory(a, b)  # a is still held
    address = a.__array_interface__["data"][0]
    del a
    c = pool.copy(source[::-1], np.int64)  # the dropped buffer comes back, refilled
    assert c.__array_interface__["data"][0] == address
    np.testing.assert_array_equal(c, source[::-1])
