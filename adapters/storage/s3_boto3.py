"""``s3://`` corpora read through boto3, as megatron-core reads them.

TensorStore serves ``s3://`` by default in megadata's API (the ``tensorstore`` extra:
coalesced ranges issued together, faster on object stores: ``tools/bench.py cloud``).
The Megatron drop-in opens its corpora under ``client_default("boto3")``, so there boto3
is the default; ``MEGADATA_S3_CLIENT`` (``boto3`` or ``tensorstore``) overrides either
default. With boto3 chosen, ``s3://`` objects are read with
``boto3.client("s3")`` instead, called as megatron-core's ``_S3BinReader`` and its
``object_storage_utils`` call it:

* ``head_object`` for an object's existence and size;
* ``download_file`` for the local copy of a ``.idx`` (memory-mapped, as Megatron reads its
  ``path_to_idx_cache`` copy; in the drop-in at that path, megatron-core's
  ``get_index_cache_path``; otherwise under ``$MEGADATA_S3_CACHE``, default
  ``~/.cache/megadata/s3``, named after the object's size and ETag);
* ``get_object(Bucket=, Key=, Range="bytes=A-B")`` (B inclusive) for the ``.bin``, a block
  of ``$MEGADATA_S3_BLOCK_BYTES`` (megatron-core's ``bin_chunk_nbytes``, default 256 MiB)
  at a time, the last block kept in memory (a read inside it asks nothing).

What boto3 brings is its own configuration: profiles, SSO, roles and endpoints from
``~/.aws/config`` and the ``AWS_*`` variables. megadata's checks stay: every read must
cover the bytes asked for (a short answer is a DataError naming the object), and a
``.bin`` must hold the bytes its index refers to. Where ``head_object`` gives no size,
the block holding the last byte the index needs is read to confirm it.

:class:`S3SharedStore` is the ``megadata.shared_stores`` entry point for ``s3://``: the
store that hosts without a shared file system share claims and tokenized pieces through
(:mod:`megadata_core.files.claims`). Its exclusive creation is a conditional
``put_object(..., IfNoneMatch="*")`` (S3's conditional writes; a store that ignores the
condition would let two claimants win, so the first creation is checked by a second).
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import os
import threading
from collections.abc import Iterator

from megadata_core.errors import DataError
from megadata_core.files import atomic as temporary

CLIENT_ENV = "MEGADATA_S3_CLIENT"  # "tensorstore" (default) or "boto3"
CHOICES = ("tensorstore", "boto3")
# The client chosen where MEGADATA_S3_CLIENT is unset: TensorStore for megadata's API,
# boto3 inside the Megatron drop-in (its opens run under ``client_default("boto3")``).
_default_client: contextvars.ContextVar[str] = contextvars.ContextVar(
    "megadata_s3_default_client", default="tensorstore"
)
# Where the .idx objects opened now are copied (URL -> local path): the drop-in's
# ``ObjectStorageConfig.path_to_idx_cache`` copies, as megatron-core caches them.
_idx_copies: contextvars.ContextVar[dict[str, str] | None] = contextvars.ContextVar(
    "megadata_s3_idx_copies", default=None
)


@contextlib.contextmanager
def client_default(choice: str, idx_copies: dict[str, str] | None = None) -> Iterator[None]:
    """Within the block, ``s3://`` opens use ``choice`` where ``MEGADATA_S3_CLIENT`` is
    unset, and a boto3 .idx named in ``idx_copies`` is copied to its path there."""
    if choice not in CHOICES:
        raise DataError(f"client_default: {choice!r} is not 'tensorstore' or 'boto3'")
    token = _default_client.set(choice)
    copies = _idx_copies.set(dict(idx_copies or {}))
    try:
        yield
    finally:
        _idx_copies.reset(copies)
        _default_client.reset(token)
CACHE_ENV = "MEGADATA_S3_CACHE"  # where local copies of .idx objects go
BLOCK_ENV = "MEGADATA_S3_BLOCK_BYTES"
#: megatron-core's ``ObjectStorageConfig.bin_chunk_nbytes`` default.
DEFAULT_BLOCK_BYTES = 256 * 1024 * 1024


def _boto3():
    try:
        import boto3  # type: ignore[import-untyped]
    except ModuleNotFoundError:
        raise DataError(
            f"{CLIENT_ENV}=boto3: s3:// reads through boto3 need it installed "
            "(pip install boto3)"
        ) from None
    return boto3


def _block_bytes() -> int:
    text = os.environ.get(BLOCK_ENV, "")
    try:
        value = int(text) if text else DEFAULT_BLOCK_BYTES
    except ValueError:
        raise DataError(f"{BLOCK_ENV}: {text!r} is not a whole number of bytes") from None
    if value <= 0:
        raise DataError(f"{BLOCK_ENV}: {value} must be > 0")
    return value


class Boto3Source:
    """One ``s3://bucket/key`` object read with a boto3 client. Pickles as its URL (the
    client is made again in a worker)."""

    def __init__(self, url: str) -> None:
        self.path = str(url)
        rest = self.path.split("://", 1)[1] if "://" in self.path else self.path
        self.bucket, _, self.key = rest.partition("/")  # as megatron-core's parse_s3_path
        self.block_bytes = _block_bytes()
        self._client_object = None
        self._block: tuple[int, bytes] | None = None  # (start, bytes) of the last block
        self._lock = threading.Lock()
        # megatron-core's path_to_idx_cache copy of this object, if the opener named one
        self.idx_copy = (_idx_copies.get() or {}).get(self.path)

    def _client(self):
        if self._client_object is None:
            self._client_object = self._call("making a client", _boto3().client, "s3")
        return self._client_object

    def _call(self, what: str, function, *args, **kwargs):
        try:
            return function(*args, **kwargs)
        except DataError:
            raise
        except Exception as error:  # boto3's and botocore's own errors
            raise DataError(
                f"{self.path}: {what} failed: {type(error).__name__}: {error}"
            ) from None

    def _head(self) -> dict:
        head = self._call("head_object", self._client().head_object, Bucket=self.bucket,
                          Key=self.key)
        return head if isinstance(head, dict) else {}

    def size(self) -> int:
        """The object's size (``head_object``'s ``ContentLength``)."""
        length = self._head().get("ContentLength")
        if length is None:
            raise DataError(f"{self.path}: head_object gives no ContentLength")
        return int(length)

    def check_size(self, minimum: int) -> int:
        """The size, after checking the object holds at least ``minimum`` bytes: from
        ``head_object``, or where it gives no size, by reading the block that holds byte
        ``minimum - 1``."""
        length = self._head().get("ContentLength")  # also: a missing object raises here
        if length is not None:
            if int(length) < minimum:
                raise DataError(
                    f"{self.path}: {length} bytes, shorter than the {minimum} its index "
                    "refers to"
                )
            return int(length)
        if minimum > 0:
            self.read(minimum - 1, 1)
        return minimum

    def _fetch(self, start: int, end: int) -> bytes:
        """The object's bytes ``[start, end)`` as ``get_object`` answers (fewer past its end)."""
        answer = self._call(
            f"get_object bytes {start}-{end - 1}", self._client().get_object,
            Bucket=self.bucket, Key=self.key, Range=f"bytes={start}-{end - 1}",
        )
        return self._call("reading the body", answer["Body"].read)

    def read(self, offset: int, length: int) -> bytes:
        """``length`` bytes at ``offset``: from the block kept, else a new block from the
        one holding ``offset`` (megatron-core's blocks), long enough for the read."""
        if length == 0:
            return b""
        end = offset + length
        with self._lock:
            block = self._block
            if block is None or not (block[0] <= offset and end <= block[0] + len(block[1])):
                start = offset // self.block_bytes * self.block_bytes
                data = self._fetch(start, max(start + self.block_bytes, end))
                block = self._block = (start, data)
        start, data = block
        piece = data[offset - start : end - start]
        if len(piece) != length:
            raise DataError(
                f"{self.path}: wanted {length} bytes at {offset}, the object ends after "
                f"{start + len(data)}"
            )
        return piece

    def local_copy(self) -> str:
        """A local file with the whole object, fetched with ``download_file`` once per
        object version (size and ETag; an object whose head says neither is fetched at
        every call and its copy named after its content)."""
        head = self._head()
        if self.idx_copy:
            return self._megatron_copy(head)
        directory = os.environ.get(CACHE_ENV) or os.path.join(
            os.path.expanduser("~"), ".cache", "megadata", "s3"
        )
        os.makedirs(directory, exist_ok=True)
        stamp = None
        if head.get("ContentLength") is not None and head.get("ETag"):
            stamp = f"{int(head['ContentLength'])}-{head['ETag']}"
            path = self._copy_path(directory, stamp)
            if os.path.isfile(path) and os.path.getsize(path) == int(head["ContentLength"]):
                return path
        with self._downloaded(directory, head.get("ContentLength")) as temp:
            if stamp is None:
                with open(temp, "rb") as stream:
                    stamp = hashlib.sha256(stream.read()).hexdigest()
            path = self._copy_path(directory, stamp)
            os.replace(temp, path)
        return path

    @contextlib.contextmanager
    def _downloaded(self, directory: str, length) -> Iterator[str]:
        """The object fetched with ``download_file`` to a temporary name in ``directory``
        (a killed download's leftovers removed first), checked against ``length`` (the
        head's size, if known); removed unless the block renamed it."""
        temporary.remove_stale(directory, ["download"])
        fd, temp = temporary.create_file(directory, "download")
        os.close(fd)
        try:
            self._call("download_file", self._client().download_file, self.bucket, self.key,
                       temp)
            if length is not None and os.path.getsize(temp) != int(length):
                raise DataError(
                    f"{self.path}: download_file wrote {os.path.getsize(temp)} bytes, "
                    f"head_object says {int(length)}"
                )
            yield temp
        finally:
            if os.path.exists(temp):
                os.unlink(temp)

    def _megatron_copy(self, head: dict) -> str:
        """The copy at megatron-core's ``path_to_idx_cache`` path: kept where it is there
        (and as long as the object, where its head gives a size), else downloaded with
        ``download_file`` to a temporary name beside it and renamed."""
        path = str(self.idx_copy)
        length = head.get("ContentLength")
        if os.path.isfile(path) and (length is None or os.path.getsize(path) == int(length)):
            return path
        directory = os.path.dirname(os.path.abspath(path))
        os.makedirs(directory, exist_ok=True)
        with self._downloaded(directory, length) as temp:
            os.replace(temp, path)
        return path

    def _copy_path(self, directory: str, stamp: str) -> str:
        name = hashlib.sha256(f"{self.path}\0{stamp}".encode()).hexdigest()[:40] + ".idx"
        return os.path.join(directory, name)

    def close(self) -> None:
        with self._lock:
            self._block = None

    def __getstate__(self) -> dict:
        return {"path": self.path}

    def __setstate__(self, state: dict) -> None:
        type(self).__init__(self, state["path"])

    def __repr__(self) -> str:
        return f"Boto3Source({self.path!r})"


def open_source(url: str):
    """The ``megadata.storage`` entry point for ``s3://``: ``MEGADATA_S3_CLIENT``'s choice
    where set, else TensorStore's source (a :class:`Boto3Source` inside the Megatron
    drop-in, whose opens run under :func:`client_default`)."""
    choice = os.environ.get(CLIENT_ENV, "").strip().lower() or _default_client.get()
    if choice == "boto3":
        return Boto3Source(url)
    if choice != "tensorstore":
        raise DataError(f"{CLIENT_ENV}: {choice!r} is not 'tensorstore' or 'boto3'")
    from megadata_adapters.storage import tensorstore_bins

    return tensorstore_bins.open_source(url)


class S3SharedStore:
    """Objects under ``s3://bucket/prefix/`` read and written with ``boto3.client("s3")``
    (a :class:`~megadata_core.files.claims.SharedStore`). Pickles as its URL."""

    def __init__(self, url: str) -> None:
        self.url = str(url).rstrip("/")
        rest = self.url.split("://", 1)[1]
        self.bucket, _, prefix = rest.partition("/")
        if not self.bucket:
            raise DataError(f"{url}: a shared store needs s3://bucket/prefix")
        self.prefix = f"{prefix}/" if prefix else ""
        self._client_object = None
        self._lock = threading.Lock()

    def _client(self):
        with self._lock:
            if self._client_object is None:
                self._client_object = self._call("", "making a client", _boto3().client,
                                                 "s3")
            return self._client_object

    def _call(self, name: str, what: str, function, *args, **kwargs):
        try:
            return function(*args, **kwargs)
        except Exception as error:  # boto3's and botocore's own errors
            raise DataError(f"{self.url}/{name}: {what} failed: {type(error).__name__}: "
                            f"{error}") from None

    def create(self, name: str, body: bytes) -> bool:
        client = self._client()
        try:
            client.put_object(Bucket=self.bucket, Key=self.prefix + name, Body=body,
                              IfNoneMatch="*")
        except Exception as error:
            if _error_code(error) in ("PreconditionFailed", "ConditionalRequestConflict",
                                      "412", "409"):
                return False
            raise DataError(f"{self.url}/{name}: conditional put_object failed: "
                            f"{type(error).__name__}: {error}") from None
        return True

    def write(self, name: str, body: bytes) -> None:
        self._call(name, "put_object", self._client().put_object, Bucket=self.bucket,
                   Key=self.prefix + name, Body=body)

    def read(self, name: str) -> bytes | None:
        try:
            answer = self._client().get_object(Bucket=self.bucket, Key=self.prefix + name)
            return answer["Body"].read()
        except Exception as error:
            if _error_code(error) in ("NoSuchKey", "404"):
                return None
            raise DataError(f"{self.url}/{name}: get_object failed: {type(error).__name__}: "
                            f"{error}") from None

    def names(self, prefix: str) -> list[str]:
        pages = self._call(prefix, "list_objects_v2",
                           self._client().get_paginator("list_objects_v2").paginate,
                           Bucket=self.bucket, Prefix=self.prefix + prefix)
        found: list[str] = []
        try:
            for page in pages:
                found += [item["Key"][len(self.prefix):] for item in page.get("Contents", [])]
        except Exception as error:
            raise DataError(f"{self.url}/{prefix}: list_objects_v2 failed: "
                            f"{type(error).__name__}: {error}") from None
        return found

    def upload(self, path: str, name: str) -> None:
        self._call(name, "upload_file", self._client().upload_file, path, self.bucket,
                   self.prefix + name)

    def download(self, name: str, path: str) -> bool:
        try:
            self._client().download_file(self.bucket, self.prefix + name, path)
        except Exception as error:
            if _error_code(error) in ("NoSuchKey", "404"):
                return False
            raise DataError(f"{self.url}/{name}: download_file failed: "
                            f"{type(error).__name__}: {error}") from None
        return True

    def __getstate__(self) -> dict:
        return {"url": self.url}

    def __setstate__(self, state: dict) -> None:
        type(self).__init__(self, state["url"])

    def __repr__(self) -> str:
        return f"S3SharedStore({self.url!r})"


def _error_code(error: Exception) -> str:
    """botocore's error code of ``error`` ('' for another kind of error)."""
    response = getattr(error, "response", None)
    if not isinstance(response, dict):
        return ""
    return str(response.get("Error", {}).get("Code", ""))
