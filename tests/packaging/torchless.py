"""A pytest plugin for the legs that run without torch (tools/test.sh, Python 3.12 and 3.13,
where torch is not installed): a test that itself imports torch or megatron-core (the
reference implementation, which needs torch) is skipped, with that as its reason, instead
of failing for lack of them.

Only an import made by test code (a file under tests/) is turned into a skip: the
package's own code importing torch or megatron still fails as it would anywhere, so a
torch-free path of megadata that starts to need torch is caught, not skipped. Loaded with
``-p torchless`` (tests/packaging on PYTHONPATH); refuses to load where torch imports.
"""

from __future__ import annotations

import importlib.util
import os
import sys

import pytest

NEEDS = ("torch", "megatron")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TESTS = os.path.join(ROOT, "tests") + os.sep


def _test_code_importing() -> str | None:
    """``file:line`` (from the checkout) of the first frame outside the import machinery if
    it is in tests/, else None."""
    frame = sys._getframe(2)
    while frame is not None:
        name = frame.f_code.co_filename
        if not (name.startswith("<frozen importlib") or name == __file__):
            path = os.path.abspath(name)
            if not path.startswith(TESTS):
                return None
            return f"{os.path.relpath(path, ROOT)}:{frame.f_lineno}"
        frame = frame.f_back
    return None


class _SkipTorchImports:
    """A meta path finder ahead of the others: ``import torch`` / ``megatron...`` from test
    code skips the test (or the whole module, at collection)."""

    def find_spec(self, fullname, path=None, target=None):
        top = fullname.split(".")[0]
        if top not in NEEDS:
            return None
        where = _test_code_importing()
        if where is None:
            return None
        raise pytest.skip.Exception(
            f"needs {top} (not installed in this torch-free leg): {where} imports {fullname}",
            allow_module_level=True,
        )


# A test that needs torch through code that is not its own (the Megatron drop-in, whose
# tensors are torch's; a subprocess) says so itself: pytest.importorskip("torch", reason=...).
# The benchmarks' smoke tests, tests/tools/test_bench_smoke.py, are not run in these legs at
# all: tools/test.sh says so.


def pytest_configure(config) -> None:
    if importlib.util.find_spec("torch") is not None:
        raise pytest.UsageError("-p torchless: torch is installed here; run the full suite")
    sys.meta_path.insert(0, _SkipTorchImports())

