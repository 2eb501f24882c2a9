"""``megatron.core.datasets.object_storage_utils``: object-storage paths and the .idx cache.

``s3://`` objects are read with ``boto3.client("s3")``, called as megatron-core calls it
(megadata_adapters.storage.s3_boto3, with megadata's checks: every range covered, the
.bin as long as its index needs); ``MEGADATA_S3_CLIENT=tensorstore`` chooses TensorStore's
source instead. An ``s3://`` .idx is copied to :func:`get_index_cache_path` under
``path_to_idx_cache`` (temporary name, then rename) and read from there, as megatron-core
caches it. ``msc://`` paths go through its Multi-Storage Client source
(megadata_adapters.storage.msc_bins).
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from typing import Any, Protocol

from megadata_core.errors import DataError
from megadata_core.files.atomic import write_atomically
from megadata_core.format.sources import open_source

S3_PREFIX = "s3://"
MSC_PREFIX = "msc://"


@dataclass
class ObjectStorageConfig:
    """Where object-storage .idx files are cached locally (``path_to_idx_cache``) and
    megatron-core's .bin read block size (``bin_chunk_nbytes``; megadata reads exactly
    the byte ranges a sample needs, so it only has to be > 0)."""

    path_to_idx_cache: str
    bin_chunk_nbytes: int = 256 * 1024 * 1024


S3Config = ObjectStorageConfig  # megatron-core's deprecated name


class S3Client(Protocol):
    """The boto3 S3 client methods megatron-core uses (for type hints)."""

    def download_file(self, Bucket: str, Key: str, Filename: str) -> None: ...  # noqa: N803 (boto3 names)

    def upload_file(self, Filename: str, Bucket: str, Key: str) -> None: ...  # noqa: N803 (boto3 names)

    def head_object(self, Bucket: str, Key: str) -> dict[str, Any]: ...  # noqa: N803 (boto3 names)

    def get_object(self, Bucket: str, Key: str, Range: str) -> dict[str, Any]: ...  # noqa: N803 (boto3 names)

    def close(self) -> None: ...


def _is_s3_path(path: str) -> bool:
    return str(path).startswith(S3_PREFIX)


def _is_msc_path(path: str) -> bool:
    return str(path).startswith(MSC_PREFIX)


def is_object_storage_path(path: str) -> bool:
    """Whether ``path`` is ``s3://...`` or ``msc://...``."""
    return _is_s3_path(path) or _is_msc_path(path)


def get_object_storage_access(path: str) -> str:
    """``"s3"`` or ``"msc"``."""
    return "s3" if _is_s3_path(path) else "msc"


def get_index_cache_path(idx_path: str, object_storage_config: ObjectStorageConfig) -> str:
    """The local cache path of an object-storage .idx: the URL without its scheme, under
    ``path_to_idx_cache``."""
    for prefix in (S3_PREFIX, MSC_PREFIX):
        if str(idx_path).startswith(prefix):
            return os.path.join(object_storage_config.path_to_idx_cache, idx_path[len(prefix) :])
    raise DataError(f"idx_path: {idx_path!r} is not an s3:// or msc:// path")


def parse_s3_path(path: str) -> tuple[str, str]:
    """``s3://bucket/a/b`` -> ``("bucket", "a/b")``."""
    if not _is_s3_path(path):
        raise DataError(f"path: {path!r} is not an s3:// path")
    bucket, _, key = path[len(S3_PREFIX) :].partition("/")
    return bucket, key


def drop_in_reads(idx_copies: dict[str, str] | None = None) -> contextlib.AbstractContextManager:
    """The context the drop-in opens object-storage corpora in: boto3 for ``s3://``
    (unless ``MEGADATA_S3_CLIENT`` says otherwise), each .idx of ``idx_copies`` copied to
    its path."""
    try:
        from megadata_adapters.storage import s3_boto3
    except ModuleNotFoundError:  # pragma: no cover (the adapters ship together)
        return contextlib.nullcontext()
    return s3_boto3.client_default("boto3", idx_copies)


def _exists(url: str) -> bool:
    with drop_in_reads():
        return _exists_now(url)


def _exists_now(url: str) -> bool:
    try:
        source = open_source(url)
        try:
            # check_size(0): existence, as cheaply as the source can (an MSC client
            # without ``info`` would otherwise probe the whole size)
            check_size = getattr(source, "check_size", None)
            if check_size is not None:
                check_size(0)
            else:
                source.size()
        finally:
            getattr(source, "close", lambda: None)()
    except DataError:
        return False
    return True


def dataset_exists(path_prefix: str, idx_path: str, bin_path: str) -> bool:
    """Whether both objects exist (through megadata's byte source for the scheme)."""
    if not is_object_storage_path(path_prefix):
        raise DataError(f"path_prefix: {path_prefix!r} is not an s3:// or msc:// path")
    return _exists(idx_path) and _exists(bin_path)


def _download(url: str, local_path: str) -> None:
    """The whole object at ``url`` to ``local_path`` (temp file, then rename)."""
    directory = os.path.dirname(os.path.abspath(local_path))
    os.makedirs(directory, exist_ok=True)
    with drop_in_reads():
        source = open_source(url)
    try:
        write_atomically(local_path, lambda out: out.write(bytes(source.read(0, source.size()))))
    finally:
        getattr(source, "close", lambda: None)()


def cache_index_file(remote_path: str, local_path: str) -> None:
    """Download ``remote_path`` to ``local_path`` on rank 0 (every process without
    torch.distributed); the caller synchronizes the ranks, as in megatron-core."""
    if not is_object_storage_path(remote_path):
        raise DataError(f"remote_path: {remote_path!r} is not an s3:// or msc:// path")
    import torch

    rank = torch.distributed.get_rank() if torch.distributed.is_initialized() else 0
    if rank == 0:
        _download(remote_path, local_path)
    if not os.path.exists(local_path):
        raise DataError(f"{remote_path}: its index cache {local_path} was not written")
