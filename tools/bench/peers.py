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


def proc_status(key: str) -> int:
    """Bytes of a /proc/self/status field (VmRSS, VmHWM); ru_maxrss where there is none.

    VmHWM belongs to this process image alone; ru_maxrss can carry a parent's peak across
    fork/exec on Linux.
    """
    try:
        with open("/proc/self/status") as stream:
            for line in stream:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
