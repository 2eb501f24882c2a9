"""An HTTP/1.1 proxy on 127.0.0.1 that makes a loopback store behave like a remote one.

:class:`ShapingProxy` forwards every request to one upstream server (s3rver,
fake-gcs-server, ...) and shapes the answers the way an object store over a network does:

* ``latency_s`` of first-byte latency per request (S3's is ~10-30 ms), spent before the
  request goes upstream, so every request pays it however small its range;
* ``bandwidth`` bytes/s per client connection: bodies are relayed in ``chunk`` pieces,
  each released no sooner than ``bytes so far / bandwidth`` after the body began, so one
  connection never moves more than the cap and a reader gets more only by opening more
  connections (as with S3, whose per-connection throughput is capped).

It counts requests and body bytes sent (what a batch of reads really cost). The clock and
the sleep are injectable, so tests check the shaping without timing anything.

Run as a program (``python -m loopback.shaping_proxy --upstream http://127.0.0.1:PORT``)
it serves until interrupted.
"""

from __future__ import annotations

import argparse
import asyncio
import threading
import time
import urllib.parse
from collections.abc import Awaitable, Callable

LOOPBACK = "127.0.0.1"
DEFAULT_LATENCY_S = 0.020
DEFAULT_BANDWIDTH = 100e6  # bytes/s per connection
CHUNK = 64 * 1024
_HEAD_LIMIT = 1 << 20


class ShapingProxy:
    """Forwards HTTP/1.1 on ``endpoint`` to ``upstream`` with latency and a bandwidth cap.

    Args:
        upstream: ``http://127.0.0.1:PORT`` of the real server (loopback only), or a list
            of such servers holding the same objects: each client connection is paired
            with the next one in turn (a fleet, as behind S3's endpoint).
        latency_s: seconds added before each request is forwarded (0: none).
        bandwidth: bytes/s per connection for response bodies (None or 0: no cap).
        clock: seconds, monotonic (default ``time.monotonic``).
        sleep: ``async sleep(seconds)`` (default ``asyncio.sleep``).
        chunk: bytes relayed per paced write.
    """

    def __init__(
        self,
        upstream: str | list[str],
        latency_s: float = DEFAULT_LATENCY_S,
        bandwidth: float | None = DEFAULT_BANDWIDTH,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] | None = None,
        chunk: int = CHUNK,
    ) -> None:
        self.upstream_ports = []
        for url in [upstream] if isinstance(upstream, str) else list(upstream):
            parsed = urllib.parse.urlsplit(url)
            if parsed.scheme != "http" or parsed.hostname != LOOPBACK or not parsed.port:
                raise ValueError(f"the proxy only forwards to http://{LOOPBACK}:PORT, not {url}")
            self.upstream_ports.append(parsed.port)
        if not self.upstream_ports:
            raise ValueError("the proxy needs at least one upstream")
        if latency_s < 0 or (bandwidth is not None and bandwidth < 0) or chunk <= 0:
            raise ValueError(
                f"latency_s={latency_s}, bandwidth={bandwidth}, chunk={chunk}: "
                "expected latency_s >= 0, bandwidth >= 0 and chunk > 0"
            )
        self.latency_s = float(latency_s)
        self.bandwidth = float(bandwidth) if bandwidth else None
        self._clock = clock
        self._sleep = sleep or asyncio.sleep
        self._chunk = int(chunk)
        self.requests = 0
        self.body_bytes = 0
        self.connections = 0
        self._loop = asyncio.new_event_loop()
        started = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(started,), daemon=True)
        self._thread.start()
        started.wait()
        if self._error is not None:
            raise self._error
        self.endpoint = f"http://{LOOPBACK}:{self.port}"

    # -- the event loop thread --------------------------------------------------------

    def _run(self, started: threading.Event) -> None:
        asyncio.set_event_loop(self._loop)
        self.native_id = threading.get_native_id()  # whose CPU time is the proxy's
        self._error: BaseException | None = None
        try:
            self._server = self._loop.run_until_complete(
                asyncio.start_server(self._serve, LOOPBACK, 0, limit=_HEAD_LIMIT, backlog=1024)
            )
            self.port = self._server.sockets[0].getsockname()[1]
        except BaseException as error:  # reported to the constructor
            self._error = error
            started.set()
            return
        started.set()
        self._loop.run_forever()
        self._server.close()
        pending = asyncio.all_tasks(self._loop)
        for task in pending:
            task.cancel()
        self._loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        self._loop.close()

    def reset_counts(self) -> None:
        self._loop.call_soon_threadsafe(self._reset)
        done = threading.Event()
        self._loop.call_soon_threadsafe(done.set)
        done.wait()

    def _reset(self) -> None:
        self.requests = 0
        self.body_bytes = 0
        self.connections = 0

    def stop(self) -> None:
        if self._loop.is_running():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)

    # -- one client connection --------------------------------------------------------

    async def _serve(self, client: asyncio.StreamReader, to_client: asyncio.StreamWriter) -> None:
        port = self.upstream_ports[self.connections % len(self.upstream_ports)]
        self.connections += 1
        upstream = to_upstream = None
        try:
            while True:
                try:
                    head = await client.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return  # the client closed its connection
                method, headers = _parse_head(head)
                body = await _read_request_body(client, headers)
                self.requests += 1
                if self.latency_s:
                    await self._sleep(self.latency_s)
                if upstream is None:
                    upstream, to_upstream = await asyncio.open_connection(
                        LOOPBACK, port, limit=_HEAD_LIMIT
                    )
                to_upstream.write(head + body)
                await to_upstream.drain()
                reply = await upstream.readuntil(b"\r\n\r\n")
                status, reply_headers = _parse_status(reply)
                to_client.write(reply)
                keep = await self._relay_body(method, status, reply_headers, upstream, to_client)
                if not keep or "close" in headers.get("connection", "").lower():
                    return
                if "close" in reply_headers.get("connection", "").lower():
                    to_upstream.close()
                    upstream = to_upstream = None
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            return
        except asyncio.CancelledError:  # the proxy is stopping
            return
        finally:
            for writer in (to_upstream, to_client):
                if writer is not None:
                    writer.close()

    async def _relay_body(self, method, status, headers, upstream, to_client) -> bool:
        """Relay one response body, paced; False when it ended by closing the connection."""
        started = self._clock()
        sent = 0

        async def paced(data: bytes) -> None:
            nonlocal sent
            sent += len(data)
            if self.bandwidth:  # released no sooner than the cap allows: wait, then write
                wait = started + sent / self.bandwidth - self._clock()
                if wait > 0:
                    await self._sleep(wait)
            self.body_bytes += len(data)  # counted before the client can see the bytes
            to_client.write(data)
            await to_client.drain()

        if method == "HEAD" or status in (204, 304) or 100 <= status < 200:
            await to_client.drain()
            return True
        if "chunked" in headers.get("transfer-encoding", "").lower():
            while True:  # relay the chunks as they are, sizes and trailers included
                size_line = await upstream.readuntil(b"\r\n")
                size = int(size_line.split(b";", 1)[0].strip(), 16)
                if size == 0:  # the last chunk, then trailers up to an empty line
                    trailer = await upstream.readuntil(b"\r\n")
                    while trailer[-4:] != b"\r\n\r\n" and trailer != b"\r\n":
                        trailer += await upstream.readuntil(b"\r\n")
                    to_client.write(size_line + trailer)
                    await to_client.drain()
                    return True
                await paced(size_line)
                remaining = size + 2  # the chunk and its CRLF
                while remaining:
                    data = await upstream.readexactly(min(remaining, self._chunk))
                    remaining -= len(data)
                    await paced(data)
        if "content-length" in headers:
            remaining = int(headers["content-length"])
            while remaining:
                data = await upstream.read(min(remaining, self._chunk))
                if not data:
                    raise ConnectionError("upstream closed inside a body")
                remaining -= len(data)
                await paced(data)
            await to_client.drain()
            return True
        while True:  # no length: the body ends when the upstream closes
            data = await upstream.read(self._chunk)
            if not data:
                return False
            await paced(data)


def _parse_headers(lines: list[bytes]) -> dict[str, str]:
    headers: dict[str, str] = {}
    for line in lines:
        key, _, value = line.decode("latin-1").partition(":")
        headers[key.strip().lower()] = value.strip()
    return headers


def _parse_head(head: bytes) -> tuple[str, dict[str, str]]:
    lines = head[:-4].split(b"\r\n")
    method = lines[0].split(b" ", 1)[0].decode("latin-1").upper()
    return method, _parse_headers(lines[1:])


def _parse_status(head: bytes) -> tuple[int, dict[str, str]]:
    lines = head[:-4].split(b"\r\n")
    parts = lines[0].split(b" ", 2)
    return int(parts[1]), _parse_headers(lines[1:])


async def _read_request_body(client: asyncio.StreamReader, headers: dict[str, str]) -> bytes:
    """The request body as received (chunked bodies keep their framing)."""
    if "chunked" in headers.get("transfer-encoding", "").lower():
        raw = bytearray()
        while True:
            size_line = await client.readuntil(b"\r\n")
            raw += size_line
            size = int(size_line.split(b";", 1)[0].strip(), 16)
            if size == 0:
                while True:
                    line = await client.readuntil(b"\r\n")
                    raw += line
                    if line == b"\r\n":
                        return bytes(raw)
            raw += await client.readexactly(size + 2)
    length = int(headers.get("content-length") or 0)
    return await client.readexactly(length) if length else b""


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--upstream", required=True, help="http://127.0.0.1:PORT")
    parser.add_argument("--latency_ms", type=float, default=DEFAULT_LATENCY_S * 1000)
    parser.add_argument("--bandwidth_mb_s", type=float, default=DEFAULT_BANDWIDTH / 1e6)
    args = parser.parse_args(argv)
    proxy = ShapingProxy(args.upstream, args.latency_ms / 1000, args.bandwidth_mb_s * 1e6)
    print(f"{proxy.endpoint} -> {args.upstream}", flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        proxy.stop()


if __name__ == "__main__":
    main()
