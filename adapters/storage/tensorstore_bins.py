"""Corpora in object storage: a TensorStore byte source for s3://, gs://, http(s)://.

Installed with the ``tensorstore`` extra, this module is the ``megadata.storage`` entry
point for those schemes, so ``IndexedDataset("gs://bucket/corpus_text_document")`` and
every dataset built on it read from the store unchanged:

* the ``.idx`` is fetched once into a local cache directory (one file per URL and
  object generation, written to a temporary name and renamed), re-validated with a
  conditional read on every open, and memory-mapped;
* the ``.bin`` is never downloaded whole: a batch's byte ranges arrive in one
  ``read_ranges`` call and go out together inside one ``ts.Batch``, so TensorStore
  merges near ranges into one request and runs the rest concurrently.

Endpoints and credentials come from the usual places: ``AWS_ENDPOINT_URL_S3`` /
``AWS_ENDPOINT_URL``, ``AWS_REGION``, ``AWS_ACCESS_KEY_ID``... (else a shared
credentials file, else anonymous: the credentials type is always set, never left to
TensorStore's probing), ``TENSORSTORE_GCS_HTTP_URL`` and Google's application default
credentials for GCS. Everything else -- concurrency and retries as TensorStore context
resources, extra kvstore spec members per driver, the cache directory, a timeout -- goes
through :func:`configure`, which stores the options in the environment so worker
processes inherit them.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import re
import tempfile
import threading
import urllib.parse
import warnings
from typing import Any

import numpy as np
import tensorstore as ts

from megadata_core.errors import DataError
from megadata_core.files.atomic import write_atomically
from megadata_core.format.sources import split_scheme

#: Environment variable holding the JSON of :func:`configure`'s options.
OPTIONS_ENV = "MEGADATA_TENSORSTORE_OPTIONS"

SCHEMES = ("s3", "gs", "gcs", "http", "https", "file")

#: Retries are bounded (TensorStore's own default retries for minutes), so a server that
#: is down surfaces as an error within seconds; override with configure(context=...).
_RETRIES = {"max_retries": 6, "initial_delay": "100ms", "max_delay": "2s"}
#: Requests in flight per process on S3 and GCS (TensorStore's default is 32). A shuffled
#: batch is hundreds of small ranges far apart, each paying the store's first-byte
#: latency, so the limit sets how many round trips a batch takes (313 ranges: ten at 32,
#: three at 128). S3 serves 5,500 GET/s per prefix; 128 in flight is about that rate
#: (docs/benchmarks.md), and beyond it a one-object corpus earns throttling (503
#: SlowDown) rather than speed. Generic HTTP
#: servers keep TensorStore's 32.
DEFAULT_REQUEST_CONCURRENCY = 128
DEFAULT_CONTEXT: dict[str, Any] = {
    "s3_request_retries": _RETRIES,
    "gcs_request_retries": _RETRIES,
    "http_request_retries": _RETRIES,
    "s3_request_concurrency": {"limit": DEFAULT_REQUEST_CONCURRENCY},
    "gcs_request_concurrency": {"limit": DEFAULT_REQUEST_CONCURRENCY},
}
DEFAULT_TIMEOUT_S = 120.0


def configure(
    *,
    context: dict[str, Any] | None = None,
    spec: dict[str, dict[str, Any]] | None = None,
    cache_dir: str | None = None,
    timeout_s: float | None = None,
) -> None:
    """Set the options of every source opened from now on, in this process and its children.

    Args:
        context: TensorStore context resources, merged over :data:`DEFAULT_CONTEXT`, e.g.
            ``{"s3_request_concurrency": {"limit": 64}, "gcs_request_retries": {...}}``.
        spec: extra kvstore spec members per driver (``"s3"``, ``"gcs"``, ``"http"``,
            ``"file"``), e.g. ``{"s3": {"endpoint": "...", "aws_credentials":
            {"type": "imds"}}}``; they win over what the environment suggests.
        cache_dir: where fetched ``.idx`` files are kept (default
            ``$XDG_CACHE_HOME/megadata/remote_idx``).
        timeout_s: the longest wait for one read or batch of reads.
    """
    options = {
        "context": context or {},
        "spec": spec or {},
        "cache_dir": cache_dir,
        "timeout_s": timeout_s,
    }
    os.environ[OPTIONS_ENV] = json.dumps(options, sort_keys=True)


def _options() -> dict[str, Any]:
    text = os.environ.get(OPTIONS_ENV)
    if not text:
        return {"context": {}, "spec": {}, "cache_dir": None, "timeout_s": None}
    try:
        options = json.loads(text)
    except ValueError as error:
        raise DataError(f"${OPTIONS_ENV}: not valid JSON ({error})") from error
    if not isinstance(options, dict):
        raise DataError(f"${OPTIONS_ENV}: expected a JSON object, got {text[:80]!r}")
    return options


def _aws_credentials() -> dict[str, str]:
    """An explicit AWS credentials type: environment keys, else a shared credentials
    file, else container credentials, else anonymous."""
    if os.environ.get("AWS_ACCESS_KEY_ID") and os.environ.get("AWS_SECRET_ACCESS_KEY"):
        return {"type": "environment"}
    home = os.path.expanduser("~")
    files = (
        os.environ.get("AWS_SHARED_CREDENTIALS_FILE", os.path.join(home, ".aws", "credentials")),
        os.environ.get("AWS_CONFIG_FILE", os.path.join(home, ".aws", "config")),
    )
    if any(os.path.isfile(path) for path in files):
        credentials = {"type": "profile"}
        if os.environ.get("AWS_PROFILE"):
            credentials["profile"] = os.environ["AWS_PROFILE"]
        return credentials
    if os.environ.get("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI") or os.environ.get(
        "AWS_CONTAINER_CREDENTIALS_FULL_URI"
    ):
        return {"type": "ecs"}
    return {"type": "anonymous"}


def kvstore_spec(url: str, spec_overrides: dict[str, dict] | None = None) -> tuple[dict, str]:
    """``(kvstore spec, key)`` for an object URL.

    ``s3://bucket/a/b`` -> s3 driver on ``bucket``, key ``a/b``; ``gs://`` likewise with
    the gcs driver; ``https://host/a/b`` -> http driver on ``https://host``, key ``/a/b``;
    ``file:///a/b`` -> file driver on ``/a/``, key ``b``.
    """
    scheme, rest = split_scheme(url)
    if scheme not in SCHEMES:
        raise DataError(f"{url}: the TensorStore source reads {', '.join(SCHEMES)} URLs")
    if scheme in ("s3", "gs", "gcs"):
        bucket, _, key = rest.partition("/")
        if not bucket or not key or key.endswith("/"):
            raise DataError(f"{url}: expected {scheme}://BUCKET/OBJECT")
        if scheme == "s3":
            spec: dict[str, Any] = {
                "driver": "s3",
                "bucket": bucket,
                "aws_credentials": _aws_credentials(),
            }
            endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get(
                "AWS_ENDPOINT_URL"
            )
            region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
            if endpoint:
                spec["endpoint"] = endpoint
                region = region or "us-east-1"  # a custom endpoint has no region to look up
            if region:
                spec["aws_region"] = region
        else:
            spec = {"driver": "gcs", "bucket": bucket}
    elif scheme in ("http", "https"):
        parts = urllib.parse.urlsplit(url)
        if not parts.netloc or parts.path in ("", "/"):
            raise DataError(f"{url}: expected {scheme}://HOST/PATH")
        spec = {"driver": "http", "base_url": f"{scheme}://{parts.netloc}"}
        key = parts.path + (f"?{parts.query}" if parts.query else "")
    else:
        path = rest if rest.startswith("/") else "/" + rest
        directory, key = os.path.split(path)
        if not key:
            raise DataError(f"{url}: expected file:///PATH/FILE")
        spec = {"driver": "file", "path": directory.rstrip("/") + "/"}
    overrides = (spec_overrides or {}).get(spec["driver"], {})
    return {**spec, **overrides}, key


# -- stores, shared per process ------------------------------------------------------

_stores: dict[tuple, Any] = {}
_stores_lock = threading.Lock()


def _open_store(spec: dict, context: dict, url: str, timeout_s: float):
    """One KvStore per (process, spec, context): connections and limits are shared."""
    # The gcs driver reads its endpoint from the environment when a store opens.
    endpoint = os.environ.get("TENSORSTORE_GCS_HTTP_URL") if spec["driver"] == "gcs" else None
    key = (
        os.getpid(),
        endpoint,
        json.dumps(spec, sort_keys=True),
        json.dumps(context, sort_keys=True),
    )
    with _stores_lock:
        store = _stores.get(key)
    if store is not None:
        return store
    try:
        ts_context = ts.Context(ts.Context.Spec({**DEFAULT_CONTEXT, **context}))
        store = _wait(ts.KvStore.open(spec, context=ts_context), url, timeout_s)
    except ValueError as error:  # a bad spec or context is reported before any request
        raise DataError(f"{url}: cannot open the store: {_first_line(error)}") from error
    with _stores_lock:
        return _stores.setdefault(key, store)


# -- errors ---------------------------------------------------------------------------

_STATUS = re.compile(r"^([A-Z_]+):")
_HTTP_CODE = re.compile(r"http_response_code='(\d+)'")
_SERVER_CODE = re.compile(r"<Code>([^<]+)</Code>")
_OUT_OF_RANGE = "byte range outside the object"


def _first_line(error: BaseException) -> str:
    text = str(error).split("\n", 1)[0]
    return text if len(text) <= 200 else text[:200] + "..."


def describe_error(error: BaseException) -> str:
    """A short, stable description of a TensorStore error (no raw message dumps)."""
    text = str(error)
    if isinstance(error, TimeoutError):
        return "timed out waiting for the store"
    status_match = _STATUS.match(text)
    status = status_match.group(1) if status_match else ""
    http_match = _HTTP_CODE.search(text)
    http = f" (HTTP {http_match.group(1)}" if http_match else ""
    server = _SERVER_CODE.search(text)
    if http:
        http += f", {server.group(1)})" if server else ")"
    code = int(http_match.group(1)) if http_match else None
    if status in ("PERMISSION_DENIED", "UNAUTHENTICATED") or code in (401, 403):
        return (
            f"access denied{http}: check the credentials (AWS_ACCESS_KEY_ID / "
            "AWS_SECRET_ACCESS_KEY or AWS_PROFILE for s3://, GOOGLE_APPLICATION_CREDENTIALS "
            "for gs://) or pass them with "
            "megadata_adapters.storage.tensorstore_bins.configure(spec=...)"
        )
    if status == "NOT_FOUND" or code == 404:
        return f"not found{http}"
    if status == "OUT_OF_RANGE" or code == 416:
        return f"{_OUT_OF_RANGE}{http}"
    if "CURL error" in text or status in ("UNAVAILABLE", "DEADLINE_EXCEEDED") or (
        status == "ABORTED" and "retry attempts failed" in text
    ):
        return f"cannot reach the store after retries{http}"
    return f"store error{http}: {status or type(error).__name__}"


class _OutOfRangeError(DataError):
    """A read past the end of the object (size probes catch it)."""


def _wait(future, url: str, timeout_s: float):
    try:
        return future.result(timeout=timeout_s)
    except TimeoutError as error:
        future.cancel()
        raise DataError(f"{url}: no answer within {timeout_s:g} s") from error
    except ValueError as error:
        description = describe_error(error)
        kind = _OutOfRangeError if description.startswith(_OUT_OF_RANGE) else DataError
        raise kind(f"{url}: {description}") from error


# -- the byte source ------------------------------------------------------------------


class TensorStoreSource:
    """One object in a TensorStore kvstore, read by byte ranges.

    Pickles as its URL and options; the store reopens lazily in the new process.
    """

    def __init__(self, url: str, options: dict[str, Any] | None = None) -> None:
        self.path = str(url)
        self._options = dict(options) if options is not None else _options()
        self._spec, self._key = kvstore_spec(self.path, self._options.get("spec"))
        self._timeout_s = float(self._options.get("timeout_s") or DEFAULT_TIMEOUT_S)
        self._store = None

    def _kv(self):
        if self._store is None:
            self._store = _open_store(
                self._spec, self._options.get("context") or {}, self.path, self._timeout_s
            )
        return self._store

    def _value(self, result, what: str) -> bytes:
        if result.state == "missing":
            raise DataError(f"{self.path}: not found ({what})")
        return result.value

    def read(self, offset: int, length: int) -> bytes:
        """``length`` bytes at ``offset`` (one request)."""
        if length == 0:
            return b""
        result = _wait(
            self._kv().read(self._key, byte_range=slice(offset, offset + length)),
            self.path,
            self._timeout_s,
        )
        data = self._value(result, f"reading {length} bytes at {offset}")
        if len(data) != length:
            raise DataError(f"{self.path}: wanted {length} bytes at {offset}, got {len(data)}")
        return data

    def read_ranges(self, offsets: np.ndarray, lengths: np.ndarray) -> list[bytes]:
        """The bytes of every range, in the order given, issued together in one batch.

        Args:
            offsets, lengths: int64 [R] byte ranges of the object.
        """
        offsets = np.asarray(offsets, dtype=np.int64)
        lengths = np.asarray(lengths, dtype=np.int64)
        order = np.argsort(offsets, kind="stable")
        store, key = self._kv(), self._key
        futures: list = [None] * len(order)
        with ts.Batch() as batch:
            for position in order.tolist():
                begin, size = int(offsets[position]), int(lengths[position])
                if size > 0:
                    futures[position] = store.read(
                        key, byte_range=slice(begin, begin + size), batch=batch
                    )
        buffers = []
        for position, future in enumerate(futures):
            if future is None:
                buffers.append(b"")
                continue
            data = self._value(_wait(future, self.path, self._timeout_s), "batched read")
            if len(data) != int(lengths[position]):
                raise DataError(
                    f"{self.path}: wanted {int(lengths[position])} bytes at "
                    f"{int(offsets[position])}, got {len(data)}"
                )
            buffers.append(data)
        return buffers

    def check_size(self, minimum: int) -> int:
        """``minimum`` once the object is known to hold that many bytes (one request)."""
        if minimum <= 0:
            found = self._kv().read(self._key, byte_range=slice(0, 0))
            self._value(_wait(found, self.path, self._timeout_s), "checking it exists")
            return 0
        try:
            self.read(minimum - 1, 1)
        except _OutOfRangeError as error:
            raise DataError(
                f"{self.path}: the object is shorter than the {minimum} bytes its "
                "index refers to"
            ) from error
        return minimum

    def generation(self) -> str:
        """The object's version stamp (S3 ETag, GCS generation), hex; one zero-length read."""
        result = _wait(
            self._kv().read(self._key, byte_range=slice(0, 0)), self.path, self._timeout_s
        )
        self._value(result, "reading its generation")
        return bytes(result.stamp.generation).hex()

    def size(self) -> int:
        """The exact size, found by probing single bytes (about 2 log2(size) requests);
        readers use :meth:`check_size` instead."""
        low, high = 1, 2  # the object holds at least `low` bytes and fewer than `high`
        if not self._has_byte(0):
            # some servers (s3rver) answer the range bytes=0-0 as outside any object, and
            # garble ranges of empty objects: an object with a byte 1 is not empty
            try:
                longer = self._has_byte(1)
            except DataError:
                longer = False
            if not longer:
                self.check_size(0)  # raises when missing
                return 0
            low, high = 2, 4
        while self._has_byte(high - 1):
            low, high = high, high * 2
        while high - low > 1:
            middle = (low + high) // 2
            low, high = (middle, high) if self._has_byte(middle - 1) else (low, middle)
        return low

    def _has_byte(self, offset: int) -> bool:
        try:
            self.read(offset, 1)
        except _OutOfRangeError:
            return False
        return True

    def local_copy(self) -> str:
        """A local file with the whole object, fetched once per object generation.

        An existing copy is validated with a conditional read (``if_not_equal``: no
        body is sent when the object is unchanged); a changed object is fetched again.
        """
        directory = _cache_dir(self._options.get("cache_dir"))
        stem = hashlib.sha256(self.path.encode()).hexdigest()[:32]
        cached = _newest_copy(directory, stem)
        if cached is not None:
            path, generation = cached
            result = _wait(
                self._kv().read(self._key, if_not_equal=generation), self.path, self._timeout_s
            )
            # Unchanged: no body (or, from servers that ignore the condition, the same
            # generation again).
            if result.state == "unspecified" or bytes(result.stamp.generation) == generation:
                return path
        else:
            result = _wait(self._kv().read(self._key), self.path, self._timeout_s)
        data = self._value(result, "fetching the whole object")
        return _store_copy(directory, stem, bytes(result.stamp.generation), data, self.path)

    def close(self) -> None:
        self._store = None

    def __getstate__(self) -> dict:
        return {"path": self.path, "options": self._options}

    def __setstate__(self, state: dict) -> None:
        type(self).__init__(self, state["path"], state["options"])

    def __repr__(self) -> str:
        return f"TensorStoreSource({self.path!r}, driver={self._spec['driver']!r})"


def open_source(url: str) -> TensorStoreSource:
    """The ``megadata.storage`` entry point: a source for ``url`` with the current options."""
    return TensorStoreSource(url)


# -- the local .idx cache -------------------------------------------------------------


def _cache_dir(configured: str | None) -> str:
    directory = configured or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"),
        "megadata",
        "remote_idx",
    )
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError:
        pass  # reported when writing
    return directory


def _newest_copy(directory: str, stem: str) -> tuple[str, bytes] | None:
    """``(path, generation)`` of the newest cached copy for ``stem``, if any."""
    candidates = []
    for path in glob.glob(os.path.join(directory, f"{stem}-*.idx")):
        try:
            candidates.append((os.stat(path).st_mtime, path))
        except FileNotFoundError:  # replaced by another process meanwhile
            continue
    for _, path in sorted(candidates, reverse=True):
        encoded = os.path.basename(path)[len(stem) + 1 : -len(".idx")]
        try:
            return path, bytes.fromhex(encoded)
        except ValueError:
            continue
    return None


def _store_copy(directory: str, stem: str, generation: bytes, data: bytes, url: str) -> str:
    """Write ``data`` as the copy for (``stem``, ``generation``): temp file, then rename."""
    name = f"{stem}-{generation.hex()}.idx"
    if len(name) > 240:  # an unusually long generation: keep the name legal, never match it
        name = f"{stem}-z{hashlib.sha256(generation).hexdigest()}.idx"
    try:
        final = _write_atomic(directory, name, data)
    except OSError as error:
        fallback = tempfile.mkdtemp(prefix="megadata-idx-")
        warnings.warn(
            f"{url}: cannot write the .idx cache in {directory} ({error}); "
            f"keeping this copy in {fallback}",
            stacklevel=3,
        )
        return _write_atomic(fallback, name, data)
    for old in glob.glob(os.path.join(directory, f"{stem}-*.idx")):
        if old != final:
            try:
                os.remove(old)  # readers that mapped it keep their pages
            except OSError:
                pass
    return final


def _write_atomic(directory: str, name: str, data: bytes) -> str:
    final = os.path.join(directory, name)
    write_atomically(final, lambda stream: stream.write(data))
    return final

