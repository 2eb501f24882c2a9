"""A batch of shuffled ranges keeps DEFAULT_REQUEST_CONCURRENCY requests in flight on S3
and GCS (TensorStore's own default is 32): at 20 ms per request, 313 ranges take ten
round trips at 32 and three at 128. Counted at a proxy whose latency is a gate that opens
when that many requests wait (a watchdog opens it otherwise, so a lower limit fails
instead of hanging)."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from loopback.shaping_proxy import ShapingProxy
from megadata_adapters.storage import tensorstore_bins

WATCHDOG_S = 3.0


class Gate:
    """An async sleep that holds each caller until ``target`` callers wait together."""

    def __init__(self, target: int) -> None:
        self.target = target
        self.waiting = 0
        self.peak = 0
        self._open: asyncio.Event | None = None

    async def sleep(self, seconds: float) -> None:
        if self._open is None:
            self._open = asyncio.Event()
        opened = self._open
        self.waiting += 1
        self.peak = max(self.peak, self.waiting)
        if self.waiting >= self.target:
            self._open = asyncio.Event()  # the next wave waits on a fresh gate
            opened.set()
        try:
            await asyncio.wait_for(opened.wait(), WATCHDOG_S)
        except TimeoutError:
            pass
        finally:
            self.waiting -= 1


@pytest.mark.parametrize("store", ["s3", "gcs"], indirect=True)
def test_a_batch_keeps_the_default_concurrency_in_flight(store, monkeypatch):
    limit = tensorstore_bins.DEFAULT_REQUEST_CONCURRENCY
    ranges = 2 * limit
    data = np.random.default_rng(3).integers(0, 256, ranges * 8192, dtype=np.uint8).tobytes()
    store.put("corpora/wide.bin", data)
    gate = Gate(limit)
    proxy = ShapingProxy(store.endpoint, latency_s=0.02, bandwidth=None, sleep=gate.sleep)
    try:
        store.route(monkeypatch, proxy.endpoint)
        source = tensorstore_bins.TensorStoreSource(store.url("wide") + ".bin")
        offsets = np.random.default_rng(4).permutation(ranges) * 8192  # 8 KiB apart: no merging
        buffers = source.read_ranges(offsets, np.full(ranges, 16))
        for offset, buffer in zip(offsets.tolist(), buffers):
            assert bytes(buffer) == data[offset : offset + 16]
        assert gate.peak == limit, (gate.peak, proxy.requests)
    finally:
        proxy.stop()
