"""s3rver (the npm package) on 127.0.0.1: an S3 server that answers ranges from files.

moto reads a whole object for every range request, so every request costs about the
object's size; s3rver streams just the range from its data folder, as S3 does. It runs on
node, installed with ``npm install --prefix CACHE s3rver@VERSION`` into a cache directory
once (never globally): :func:`s3rver_script` installs or finds it, and raises
:class:`S3rverUnavailableError` with the reason when node or npm is missing or the install
fails, so callers can skip.

Objects are placed straight into s3rver's folder layout (``BUCKET/KEY._S3rver_object``),
hard-linked when the file system allows, so a 1 GiB object costs no upload.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import urllib.request

from loopback.object_stores import LOOPBACK, _stop, _wait_ready, free_port, process_cpu_seconds

VERSION = "3.7.1"
#: s3rver's built-in account (it checks SigV4 signatures against it).
ACCESS_KEY = SECRET_KEY = "S3RVER"


class S3rverUnavailableError(RuntimeError):
    """node/npm are missing or the npm install failed (the message says which)."""


def default_cache_dir() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "megadata", f"npm-s3rver-{VERSION}")


def s3rver_script(cache_dir: str | None = None, timeout_s: float = 300) -> str:
    """Path of s3rver's ``bin/s3rver.js``, installed into ``cache_dir`` on first use.

    The install goes to a temporary folder beside ``cache_dir`` and is renamed into place
    when complete, so an interrupted install leaves nothing that looks installed.
    """
    cache_dir = cache_dir or default_cache_dir()
    script = os.path.join(cache_dir, "node_modules", "s3rver", "bin", "s3rver.js")
    if os.path.isfile(script):
        return script
    for tool in ("node", "npm"):
        if shutil.which(tool) is None:
            raise S3rverUnavailableError(f"{tool} is not on PATH (s3rver runs on node)")
    parent = os.path.dirname(os.path.abspath(cache_dir))
    os.makedirs(parent, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=".npm-s3rver-", dir=parent)
    try:
        result = subprocess.run(
            ["npm", "install", "--prefix", staging, "--no-audit", "--no-fund",
             "--loglevel=error", f"s3rver@{VERSION}"],
            capture_output=True, text=True, timeout=timeout_s,
        )  # fmt: skip
        if result.returncode != 0:
            tail = (result.stderr or result.stdout).strip().splitlines()[-3:]
            raise S3rverUnavailableError(f"npm install s3rver@{VERSION} failed: {' | '.join(tail)}")
        try:
            os.replace(staging, cache_dir)
        except OSError:  # another process installed it meanwhile
            if not os.path.isfile(script):
                raise
    except subprocess.TimeoutExpired as error:
        raise S3rverUnavailableError(f"npm install s3rver took over {timeout_s:g} s") from error
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return script


def _place(source: str, target: str) -> None:
    os.makedirs(os.path.dirname(target), exist_ok=True)
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)


class S3rverServer:
    """s3rver on 127.0.0.1 serving ``objects`` (``{"bucket/key": local file}``).

    Clients sign with :data:`ACCESS_KEY` / :data:`SECRET_KEY`. ``endpoint`` is its URL;
    with ``processes`` > 1, that many node processes serve the same folder (node runs one
    thread, so one process caps the requests per second) and ``endpoints`` lists them all.
    """

    def __init__(
        self, objects: dict[str, str], cache_dir: str | None = None, processes: int = 1
    ) -> None:
        script = s3rver_script(cache_dir)
        self._data = tempfile.mkdtemp(prefix="s3rver-data-")
        for name, source in objects.items():
            bucket, _, key = name.partition("/")
            if not bucket or not key:
                raise ValueError(f"{name!r}: expected BUCKET/KEY")
            directory, base = os.path.split(key)
            _place(source, os.path.join(self._data, bucket, directory, f"{base}._S3rver_object"))
        self._log = tempfile.TemporaryFile()
        self._processes: list[subprocess.Popen] = []
        self.endpoints: list[str] = []
        try:
            for number in range(max(1, processes)):
                port = free_port()
                self.endpoints.append(f"http://{LOOPBACK}:{port}")
                self._processes.append(
                    subprocess.Popen(
                        ["node", script, "--directory", self._data, "--address", LOOPBACK,
                         "--port", str(port), "--silent"],
                        stdout=self._log, stderr=self._log,
                    )  # fmt: skip
                )
                _wait_ready(f"{self.endpoints[-1]}/", self._processes[-1], "s3rver")
                if number == 0:
                    for name in objects:  # s3rver hashes an object on its first read
                        url = f"{self.endpoints[0]}/{name}"
                        with urllib.request.urlopen(urllib.request.Request(url, method="HEAD"),
                                                    timeout=300):  # fmt: skip
                            pass
            self.endpoint = self.endpoints[0]
        except BaseException:
            self.stop()
            raise

    def cpu_seconds(self) -> float:
        """CPU seconds all its node processes have spent so far."""
        return process_cpu_seconds([process.pid for process in self._processes])

    def stop(self) -> None:
        for process in self._processes:
            _stop(process)
        self._log.close()
        shutil.rmtree(self._data, ignore_errors=True)
