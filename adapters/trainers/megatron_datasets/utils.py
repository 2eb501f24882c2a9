"""``megatron.core.datasets.utils``: the split enum and blend-list parsing."""

from __future__ import annotations

import logging
from enum import Enum

import numpy

from megadata_adapters.trainers.megatron_datasets._errors import require

logger = logging.getLogger(__name__)


class Split(Enum):
    train = 0
    valid = 1
    test = 2


def compile_helpers() -> None:
    """No-op: megadata's index code is numpy, there is no C++ helper to build."""


def log_single_rank(log: logging.Logger, *args, rank: int = 0, **kwargs) -> None:
    """``log.log(*args)`` on global rank ``rank`` only (every process without
    torch.distributed)."""
    import torch

    if torch.distributed.is_initialized() and torch.distributed.get_rank() != rank:
        return
    log.log(*args, **kwargs)


def normalize(weights: list[float]) -> list[float]:
    """``weights / sum(weights)`` in float64, as a list (Megatron's rounding)."""
    array = numpy.array(weights, dtype=numpy.float64)
    return (array / numpy.sum(array)).tolist()


def get_blend_from_list(blend: list[str] | None) -> tuple[list[str], list[float] | None] | None:
    """Megatron's ``--data-path`` list as a blend ``(prefixes, weights or None)``.

    ``["30", "a", "70", "b"]`` gives ``(["a", "b"], [30.0, 70.0])``; a list of prefixes
    (odd length, or one whose weights are not all numbers) gives ``(prefixes, None)``.
    A list mixing numeric and non-numeric weights is refused.
    """
    if blend is None:
        return None
    blend = [str(item) for item in blend]
    if len(blend) % 2 == 1:
        return [item.strip() for item in blend], None
    raw_weights, raw_prefixes = blend[0::2], blend[1::2]
    weights: list[float] = []
    for raw in raw_weights:
        try:
            weights.append(float(raw))
        except ValueError:
            pass
    if len(weights) < len(raw_weights):  # some are not numbers: then none may be
        require(not weights, f"blend: {blend!r} mixes numeric and non-numeric weights")
        return [item.strip() for item in blend], None
    return [item.strip() for item in raw_prefixes], weights
