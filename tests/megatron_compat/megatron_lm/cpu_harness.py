"""(A pytest plugin, ``-p cpu_harness``, for Megatron-LM's own unit tests run from its
checkout by ``tools/megatron_lm_data_tests.sh``.) Megatron's test harness asks for CUDA,
NCCL and Transformer Engine; on a CPU machine a gloo group of one rank on 127.0.0.1 takes
the place of its NCCL group, and Transformer Engine counts as absent. The session fails
unless ``megatron.core.datasets`` was served by megadata's drop-in."""

import os
import socket
from datetime import timedelta

import megatron.core.utils

# Megatron's tests/unit_tests/conftest.py compares Transformer Engine's version (None when
# it is not installed) unguarded, in a fixture every test uses.
megatron.core.utils.is_te_min_version = lambda *args, **kwargs: False


def pytest_configure(config):
    for name in ("flaky", "flaky_in_dev", "internal"):
        config.addinivalue_line("markers", f"{name}: Megatron-LM's marker")


def pytest_sessionstart(session):
    import torch
    from tests.unit_tests.test_utilities import Utils

    def initialize_distributed():
        if not torch.distributed.is_initialized():
            with socket.socket() as probe:
                probe.bind(("127.0.0.1", 0))
                port = probe.getsockname()[1]
            torch.distributed.init_process_group(
                "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1,
                timeout=timedelta(minutes=1))
        Utils.inited = True

    Utils.initialize_distributed = staticmethod(initialize_distributed)


def pytest_sessionfinish(session, exitstatus):
    import megatron.core.datasets.indexed_dataset as module

    served = getattr(module.IndexedDataset, "__module__", "")
    print(f"\nmegatron.core.datasets.indexed_dataset.IndexedDataset: {served} "
          f"(MEGADATA_S3_CLIENT={os.environ.get('MEGADATA_S3_CLIENT')})")
    if not served.startswith("megadata_adapters"):
        print("not the drop-in")
        session.exitstatus = 1
