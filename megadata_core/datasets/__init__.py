"""Floor 3: datasets that hold indices and answer ``len``, ``[i]`` and ``__getitems__``.

``GPTDataset`` (its index arrays from one call, ``gpt_arrays``), ``BlendedDataset``,
Megatron's mock corpus, the config, the builder (``build_datasets``: a config and sizes
to train/valid/test) with its blend-argument parsers, and what a batch needs on the way
out (masks, position ids, context-parallel slices, cache keys and fingerprints). May
import floor 0 (errors, checks, temp_files, handover), format and indices; never
preprocess, adapters, tools or a framework. Exported: what a user or an adapter uses.
"""

from megadata_core.build.builder import build_datasets
from megadata_core.cache.corpus_trust import open_corpus
from megadata_core.datasets.blend_args import blend_from_args, blend_from_list
from megadata_core.datasets.blended_dataset import BlendedDataset
from megadata_core.datasets.config import GPTDataConfig
from megadata_core.datasets.gpt_dataset import GPTDataset
from megadata_core.datasets.mock import MockGPTLowLevelDataset

__all__ = [
    "BlendedDataset",
    "GPTDataConfig",
    "GPTDataset",
    "MockGPTLowLevelDataset",
    "blend_from_args",
    "blend_from_list",
    "build_datasets",
    "open_corpus",
]
