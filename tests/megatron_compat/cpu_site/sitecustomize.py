"""Importing megatron-core 0.17+ on a CPU machine without triton, as a CPU test harness
does (on PYTHONPATH for the drop-in's tests against megatron-core 0.19; Python imports
``sitecustomize`` at start, so subprocesses get it too).

megatron-core imports a few GPU kernels' modules unguarded (0.19:
``megatron/core/transformer/moe/ops/paged_stash.py``, reached from ``import
megatron.core``), and they ``import triton``. When triton is not installed, a
``megatron.*`` module whose import fails only for want of triton is kept as a stand-in
whose names raise when called (the datasets never call them). A fake ``triton`` package
would not do: torch then believes triton is there. megatron's training modules of 0.19
use ``typing.override`` (Python 3.12): ``typing_extensions``' is lent on 3.11.
"""

import importlib.abc
import importlib.util
import sys

#: Constants that importers of a stand-in read at import time.
KEEP = {"megatron.core.transformer.moe.ops.paged_stash": {"GLOBAL_BLOCK_SIZE": 1024}}


def _needs_triton(module_name: str, name: str):
    def call(*args, **kwargs):
        raise RuntimeError(f"{module_name}.{name} needs triton, which is not installed")

    call.__name__ = name
    return call


class _TritonlessLoader(importlib.abc.Loader):
    def __init__(self, inner, name: str) -> None:
        self.inner, self.name = inner, name

    def create_module(self, spec):
        return self.inner.create_module(spec)

    def exec_module(self, module) -> None:
        try:
            self.inner.exec_module(module)
        except ModuleNotFoundError as error:
            if (error.name or "").split(".")[0] != "triton":
                raise
            module.__dict__.update(KEEP.get(self.name, {}))
            module.__getattr__ = lambda name: (
                _needs_triton(self.name, name) if not name.startswith("__")
                else (_ for _ in ()).throw(AttributeError(name))
            )


class _TritonlessFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if not name.startswith("megatron."):
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                if spec.loader is not None and spec.submodule_search_locations is None:
                    spec.loader = _TritonlessLoader(spec.loader, name)
                return spec
        return None


if importlib.util.find_spec("triton") is None:
    sys.meta_path.insert(0, _TritonlessFinder())

if sys.version_info < (3, 12):
    import typing

    if not hasattr(typing, "override"):
        try:
            from typing_extensions import override
        except ImportError:
            override = lambda function: function  # noqa: E731
        typing.override = override
