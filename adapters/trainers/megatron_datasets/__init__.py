"""``megatron.core.datasets``, served by megadata: Megatron-LM trains on megadata unchanged.

A module per megatron-core 0.16.1 module (``utils``, ``blended_megatron_dataset_config``,
``megatron_dataset``, ``indexed_dataset``, ``object_storage_utils``, ``gpt_dataset``,
``blended_dataset``, ``blended_megatron_dataset_builder``, ``multimodal_dataset``) with
its public names, signatures and behaviours, computing through ``megadata_core``.

``install()`` puts them in ``sys.modules`` as ``megatron.core.datasets.*`` (the rest of
``megatron.core`` is left alone; megatron-core modules not mirrored here, such as
``bert_dataset`` or ``megatron_tokenizer``, still load from megatron-core when it is
installed, and use ours). Call it before anything imports ``megatron``, or run::

    python -m megadata_adapters.trainers.megatron_datasets pretrain_gpt.py ARGS...
    python -m megadata_adapters.trainers.megatron_datasets -m pytest tests/unit_tests/data
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import types

PACKAGE = "megatron.core.datasets"

#: The megatron-core modules this package mirrors.
MODULES = (
    "utils",
    "object_storage_utils",
    "blended_megatron_dataset_config",
    "indexed_dataset",
    "megatron_dataset",
    "gpt_dataset",
    "blended_dataset",
    "blended_megatron_dataset_builder",
    "multimodal_dataset",
)


def _megatron_core_datasets_dir() -> str | None:
    """megatron-core's own ``datasets`` directory, found without importing megatron.core."""
    try:
        spec = importlib.util.find_spec("megatron.core")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        candidate = os.path.join(location, "datasets")
        if os.path.isdir(candidate):
            return candidate
    return None


def install() -> types.ModuleType:
    """Serve ``megatron.core.datasets`` (and each mirrored submodule) from this package.

    Returns the ``megatron.core.datasets`` package object. Idempotent. Modules already
    imported from megatron-core are replaced in ``sys.modules`` (names bound earlier by
    ``from ... import`` keep the old objects: install first).
    """
    current = sys.modules.get(PACKAGE)
    if current is not None and getattr(current, "__megadata__", False):
        return current
    package = types.ModuleType(PACKAGE, __doc__)
    vars(package)["__megadata__"] = True
    fallback = _megatron_core_datasets_dir()
    package.__path__ = [fallback] if fallback else []
    package.__package__ = PACKAGE
    for name in list(sys.modules):
        if name.startswith(PACKAGE + "."):
            del sys.modules[name]
    sys.modules[PACKAGE] = package
    for name in MODULES:
        module = importlib.import_module(f"{__name__}.{name}")
        sys.modules[f"{PACKAGE}.{name}"] = module
        setattr(package, name, module)
    vars(_parent())["datasets"] = package  # megatron.core.datasets
    return package


class MegatronImportError(ImportError):
    """megatron-core is installed but ``megatron.core`` cannot be imported."""


def _parent() -> types.ModuleType:
    """``megatron.core``, imported (it may import datasets modules: ours are in place),
    or, without megatron-core installed, an empty package so ``import
    megatron.core.datasets`` resolves.

    Raises:
        MegatronImportError: megatron-core is installed but its import fails (a missing
            dependency such as triton on a CPU machine): that error, named, never an
            empty ``megatron.core`` that would fail later without saying why.
    """
    try:
        installed_spec = importlib.util.find_spec("megatron.core")
    except (ImportError, ValueError):
        installed_spec = None
    try:
        return importlib.import_module("megatron.core")
    except ImportError as error:
        if installed_spec is not None:
            where = ", ".join(installed_spec.submodule_search_locations or []) or "?"
            raise MegatronImportError(
                f"megatron.core (installed at {where}) cannot be imported: "
                f"{type(error).__name__}: {error}"
            ) from error
    megatron = sys.modules.get("megatron")
    if megatron is None:
        megatron = sys.modules["megatron"] = types.ModuleType("megatron")
        megatron.__path__ = []
    core = sys.modules["megatron.core"] = types.ModuleType("megatron.core")
    core.__path__ = []
    vars(megatron)["core"] = core
    return core


def installed() -> bool:
    """Whether ``megatron.core.datasets`` is served by this package."""
    return bool(getattr(sys.modules.get(PACKAGE), "__megadata__", False))
