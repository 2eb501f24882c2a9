"""Servers on 127.0.0.1 that tests and benchmarks both use (not installed, not the core).

:mod:`loopback.object_stores`: moto's S3, fake-gcs-server, a byte-range HTTP server and a
fault-injecting proxy; :mod:`loopback.s3rver`: s3rver (npm), an S3 server that streams
ranges from files; :mod:`loopback.shaping_proxy`: a proxy adding first-byte latency and a
per-connection bandwidth cap. Imported with the repository root on the path.
"""
