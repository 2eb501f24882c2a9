"""The shaping proxy: every request pays the latency, a connection's bodies never beat the
bandwidth cap, bytes pass unchanged. Checked with an injected clock (no timing)."""

from __future__ import annotations

import asyncio
import http.client
import http.server
import threading

import numpy as np
import pytest

from loopback.object_stores import RangeFileServer
from loopback.shaping_proxy import ShapingProxy

WATCHDOG_S = 30  # a hung proxy fails the test instead of stalling it


class VirtualClock:
    """Time that moves only when the proxy sleeps; records every sleep."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds
        await asyncio.sleep(0)


@pytest.fixture
def served(tmp_path):
    data = np.random.default_rng(0).integers(0, 256, 3_000_000, dtype=np.uint8).tobytes()
    (tmp_path / "object.bin").write_bytes(data)
    server = RangeFileServer(str(tmp_path))
    yield server, data
    server.stop()


def get(proxy: ShapingProxy, path: str, headers=None, connection=None):
    if connection is None:
        connection = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=WATCHDOG_S)
    connection.request("GET", path, headers=headers or {})
    response = connection.getresponse()
    return response.status, response.read(), connection


def test_every_request_pays_the_latency_once(served):
    server, data = served
    clock = VirtualClock()
    proxy = ShapingProxy(
        server.endpoint, latency_s=0.02, bandwidth=None, clock=clock, sleep=clock.sleep
    )
    try:
        connection = None
        for begin in (0, 1000, 2_999_000):
            status, body, connection = get(
                proxy, "/object.bin", {"Range": f"bytes={begin}-{begin + 999}"}, connection
            )
            assert status == 206 and body == data[begin : begin + 1000]
        assert clock.sleeps == [0.02, 0.02, 0.02]  # one per request, on one kept-alive connection
        assert proxy.requests == 3 and proxy.connections == 1 and proxy.body_bytes == 3000
    finally:
        proxy.stop()


def test_a_connection_never_beats_the_bandwidth_cap(served):
    server, data = served
    clock = VirtualClock()
    proxy = ShapingProxy(
        server.endpoint, latency_s=0, bandwidth=1e6, clock=clock, sleep=clock.sleep, chunk=65536
    )
    try:
        status, body, _ = get(proxy, "/object.bin")
        assert status == 200 and body == data
        # The body may not finish before len/cap seconds: the proxy waited that long.
        assert clock.now == pytest.approx(len(data) / 1e6, rel=1e-9)
        assert all(pause <= 65536 / 1e6 + 1e-9 for pause in clock.sleeps)  # paced, not bunched
        assert proxy.body_bytes == len(data)
    finally:
        proxy.stop()


def test_uncapped_proxy_does_not_sleep(served):
    server, data = served
    clock = VirtualClock()
    proxy = ShapingProxy(server.endpoint, latency_s=0, bandwidth=0, clock=clock, sleep=clock.sleep)
    try:
        assert get(proxy, "/object.bin")[1] == data
        assert clock.sleeps == []
    finally:
        proxy.stop()


class _Chunked(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):  # noqa: N802
        self.send_response(200)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for part in (b"x" * 70_000, b"hello", b""):
            self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))

    def log_message(self, *args):
        pass


def test_chunked_bodies_and_not_found_pass_through(served):
    server, _ = served
    chunked = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Chunked)
    threading.Thread(target=chunked.serve_forever, daemon=True).start()
    proxies = [ShapingProxy(f"http://127.0.0.1:{chunked.server_address[1]}", 0.001, 1e9),
               ShapingProxy(server.endpoint, 0.001, 1e9)]  # fmt: skip
    try:
        status, body, connection = get(proxies[0], "/any")
        assert status == 200 and body == b"x" * 70_000 + b"hello"
        assert get(proxies[0], "/again", connection=connection)[1] == body  # still in step
        assert get(proxies[1], "/missing.bin")[0] == 404
    finally:
        for proxy in proxies:
            proxy.stop()
        chunked.shutdown()
        chunked.server_close()


@pytest.mark.parametrize(
    "upstream, options",
    [
        ("http://10.0.0.1:80", {}),
        ("https://127.0.0.1:9", {}),
        ("http://127.0.0.1:9", {"latency_s": -1}),
    ],
)
def test_bad_arguments_are_refused(upstream, options):
    with pytest.raises(ValueError):
        ShapingProxy(upstream, **options)
