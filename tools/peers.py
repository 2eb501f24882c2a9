"""Importing the peers the benchmarks compare against (megatron-core, torch)."""

from __future__ import annotations

import importlib
import logging
import warnings
from types import ModuleType


def quiet_import(*names: str) -> list[ModuleType] | None:
    """The modules ``names``, imported without megatron-core's INFO lines and warnings
    about missing CUDA extensions; None when any is not installed."""
    logging.getLogger("megatron").setLevel(logging.WARNING)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return [importlib.import_module(name) for name in names]
    except ImportError:
        return None
