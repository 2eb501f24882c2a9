"""(Copied to conftest.py of a temporary tree.) Megatron-LM's test_bin_reader runs
there with ``megatron.core.datasets`` served by the drop-in: refuse to pass against
megatron-core's own modules, and count the boto3 sources its ``s3://`` half opened
(``MEGADATA_S3_CLIENT`` unset: boto3 is the drop-in's default)."""

import os

from megadata_adapters.storage import s3_boto3

OPENED = []
_init = s3_boto3.Boto3Source.__init__


def _counting_init(self, url):
    OPENED.append(url)
    _init(self, url)


s3_boto3.Boto3Source.__init__ = _counting_init


def pytest_configure(config):
    for name in ("flaky", "flaky_in_dev"):
        config.addinivalue_line("markers", f"{name}: Megatron-LM's marker")


def pytest_sessionfinish(session, exitstatus):
    import megatron.core.datasets.indexed_dataset as module

    if not module.__name__.startswith("megadata_adapters") and not getattr(
        module.IndexedDataset, "__module__", ""
    ).startswith("megadata_adapters"):
        print(f"\nnot the drop-in: {module.__file__}")
        session.exitstatus = 1
        return
    if os.environ.get("MEGADATA_S3_CLIENT") is None and not any(
        url.endswith(".bin") for url in OPENED
    ):
        print("\nno s3:// .bin was read through boto3")
        session.exitstatus = 1
        return
    print(f"\ndrop-in: {module.__file__}; boto3 sources opened: {len(OPENED)}")
