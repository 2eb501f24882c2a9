"""Byte sources for corpora in object storage: TensorStore (``s3://``, ``gs://``,
``http(s)://``) and NVIDIA's multi-storage client (``msc://``). The core finds them through
the ``megadata.storage`` entry points, so ``IndexedDataset("gs://bucket/corpus")`` works when
the extra is installed."""
