"""Fixtures and environment for the adapter tests."""

import os

# JAX adapter tests want 8 simulated CPU devices; tools/test.sh exports this too. It must be
# set before jax initialises its backends, so it is done when this conftest is imported.
if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (
        os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
    ).strip()
