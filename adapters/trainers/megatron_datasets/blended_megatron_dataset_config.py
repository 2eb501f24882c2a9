"""``megatron.core.datasets.blended_megatron_dataset_config``: the builder's config.

Same fields, defaults and derived fields (``split_matrix``, ``mock``) as megatron-core
0.16.1. Megatron's ``assert``s are :class:`MegatronCompatError`s (an ``AssertionError``
and a ``megadata_core.DataError``) naming the field and value.
"""

from __future__ import annotations

import functools
import logging
import re
from dataclasses import dataclass, field
from typing import Any

from megadata_adapters.trainers.megatron_datasets._errors import MegatronCompatError, require
from megadata_adapters.trainers.megatron_datasets.utils import Split, log_single_rank, normalize

logger = logging.getLogger(__name__)


@dataclass
class BlendedMegatronDatasetConfig:
    """Configuration of Megatron datasets (see megatron-core for each field)."""

    random_seed: int
    sequence_length: int
    blend: tuple[list[str], list[float] | None] | None = None
    blend_per_split: list[tuple[list[str], list[float] | None] | None] | None = None
    multiple_validation_sets: bool | None = None
    full_validation: bool | None = None
    split: str | None = None
    split_matrix: list[tuple[float, float] | None] | None = field(init=False, default=None)
    num_dataset_builder_threads: int = 1
    path_to_cache: str | None = None
    mmap_bin_files: bool = True
    mock: bool = field(init=False, default=False)
    tokenizer: Any = None
    mid_level_dataset_surplus: float = 0.005
    allow_ambiguous_pad_tokens: bool | None = False
    fast_cache_load: bool = False
    defer_npy_index_mmap: bool = False

    def __post_init__(self) -> None:
        if self.fast_cache_load:
            require(
                self.path_to_cache is not None,
                "fast_cache_load: needs path_to_cache (--data-cache-path)",
            )
            require(
                self.blend is None,
                f"fast_cache_load: cannot be used with blend {self.blend!r} (--data-path); "
                "use blend_per_split (--train-data-path, ...)",
            )
        if self.defer_npy_index_mmap:
            require(
                self.path_to_cache is not None,
                "defer_npy_index_mmap: needs path_to_cache (--data-cache-path)",
            )
        if self.blend_per_split is not None and any(self.blend_per_split):
            require(self.blend is None, "blend: blend and blend_per_split are incompatible")
            require(
                self.split is None,
                f"split: {self.split!r} and blend_per_split are incompatible",
            )
            require(
                len(self.blend_per_split) == len(Split),
                f"blend_per_split: {len(self.blend_per_split)} blends, expected {len(Split)}",
            )
            for split in Split:
                blend = self.blend_per_split[split.value]
                if blend is None:
                    log_single_rank(
                        logger, logging.INFO, f"blend not provided for {split.name} split"
                    )
                    continue
                _check_blend(f"blend_per_split[{split.name}]", blend)
        else:
            if self.blend is not None:
                _check_blend("blend", self.blend)
                require(self.split is not None, "split: must be given with blend")
            else:
                self.mock = True
                self.split = "1,1,1"
                log_single_rank(
                    logger, logging.INFO, "mock = True: neither blend nor blend_per_split"
                )
            assert self.split is not None  # required with a blend, else set above
            self.split_matrix = convert_split_vector_to_split_matrix(
                parse_and_normalize_split(self.split)
            )


def _check_blend(field: str, blend) -> None:
    """As many weights as prefixes (or no weights)."""
    prefixes, weights = blend
    if weights is not None and len(prefixes) != len(weights):
        raise MegatronCompatError(
            f"{field}: {len(prefixes)} prefixes but {len(weights)} weights ({weights!r})"
        )


def parse_and_normalize_split(split: str) -> list[float]:
    """``"99,1,0"`` -> ``[0.99, 0.01, 0.0]`` (missing parts are 0)."""
    parts = [float(part) for part in re.findall(r"[.0-9]+", split)]
    require(len(parts) <= len(Split), f"split: {split!r} has more than {len(Split)} parts")
    parts += [0.0] * (len(Split) - len(parts))
    require(sum(parts) > 0, f"split: {split!r} sums to 0")
    return normalize(parts)


def convert_split_vector_to_split_matrix(
    vector_a: list[float], vector_b: list[float] | None = None
) -> list[tuple[float, float] | None]:
    """Book-ends of each split: ``[0.99, 0.01, 0.0]`` -> ``[(0, 0.99), (0.99, 1.0), None]``;
    with ``vector_b``, the overlap of both vectors' book-ends (None where empty)."""
    if vector_b is None:
        vector_b = vector_a

    def bookends(vector: list[float]) -> list[tuple[float, float]]:
        start: list[float] = [0]  # Megatron's int 0
        edges = functools.reduce(lambda acc, part: acc + [acc[-1] + part], vector, start)
        return list(zip(edges[:-1], edges[1:]))

    matrix = []
    for (low_a, high_a), (low_b, high_b) in zip(bookends(vector_a), bookends(vector_b)):
        low, high = max(low_a, low_b), min(high_a, high_b)
        matrix.append(None if high <= low else (low, high))
    return matrix
