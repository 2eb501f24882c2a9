"""megadata: Megatron-compatible pretraining data in pure numpy.

The core imports numpy and the standard library only; framework adapters live in
``megadata_adapters`` and the command line in ``megadata_cli`` (both in the same
distribution, ``megadata-core``). Floors (a module imports only from its own floor or
below; tests/test_layering.py checks it):

0. ground: ``errors``, ``checks``, ``cores`` (threads a process may run, kept pools),
   ``files/`` (identity, atomic replace, locks, temporary names), ``handover/`` (batches
   between processes)
1. ``format/`` (the .bin/.idx pair, byte sources)
2. ``indices/`` (pure functions over arrays: no file I/O, nothing from format),
   ``batch_ramp`` (Megatron's step batch-size ramp-up, arithmetic on steps),
   ``cache/`` (everything under ``path_to_cache``, on format), ``preprocess/`` (text to
   corpora, on format)
3. ``modes/`` (the choices a config names: packing, shuffle, blend order, each an object)
4. ``datasets/``, ``samplers``
5. ``build/`` (a config and sizes to train/valid/test)
"""

from megadata_core import modes, samplers
from megadata_core.build import build_datasets
from megadata_core.cache import open_corpus
from megadata_core.datasets import (
    BlendedDataset,
    EpochChain,
    GPTDataConfig,
    GPTDataset,
    RawShards,
    RawShardsDataset,
    ScheduledBlendedDataset,
)
from megadata_core.datasets.context_parallel import context_parallel_slice
from megadata_core.errors import DataError
from megadata_core.format import (
    IndexedDataset,
    IndexedDatasetWriter,
    merge_datasets,
    optimal_dtype,
    register_scheme,
)

#: The one version of the distribution (pyproject.toml reads it from here).
__version__ = "0.2.0"

__all__ = [
    "DataError",
    "IndexedDataset",
    "IndexedDatasetWriter",
    "merge_datasets",
    "optimal_dtype",
    "register_scheme",
    "GPTDataConfig",
    "GPTDataset",
    "BlendedDataset",
    "ScheduledBlendedDataset",
    "EpochChain",
    "RawShards",
    "RawShardsDataset",
    "context_parallel_slice",
    "modes",
    "samplers",
    "build_datasets",
    "open_corpus",
]
