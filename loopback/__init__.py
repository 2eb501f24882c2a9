"""Servers on 127.0.0.1 that tests and benchmarks both use (not installed, not the core).

:mod:`loopback.object_stores`: moto's S3, fake-gcs-server, a byte-range HTTP server and a
fault-injecting proxy. Imported with the repository root on the path.
"""
