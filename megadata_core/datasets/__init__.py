"""Floor 4: datasets that hold indices and answer ``len``, ``[i]`` and ``__getitems__``.

``GPTDataset`` (its index arrays from one call, :mod:`.gpt_arrays`; its cache maps and
the many members that share its checks, :mod:`.gpt_members`), ``BlendedDataset`` (its
members possibly made at first read), ``ScheduledBlendedDataset`` (a blend whose weights
change, over ``EpochChain`` members, and the resume fields a loader keeps), Megatron's
mock corpus, the config with its blend-argument and schedule parsers (:mod:`.config`),
and what a batch needs on the way out: the one vectorized read of samples' tokens and
where the index arrays came from (:mod:`.reading`), masks, position ids, document masks
and per-token sources (:mod:`.masks`), context-parallel slices, provenance; raw text
shards as a blend member (:mod:`.raw_member`) and their samples read while a background
tokenizer makes them (:mod:`.raw_shards`). May import the ground (errors, checks, files,
handover), format, indices, cache, preprocess and modes; never build, adapters, tools or
a framework. Exported: what a user or an adapter
uses.
"""

from megadata_core.datasets.blended_dataset import BlendedDataset
from megadata_core.datasets.config import GPTDataConfig, blend_from_args, blend_from_list
from megadata_core.datasets.gpt_dataset import GPTDataset
from megadata_core.datasets.mock import MockGPTLowLevelDataset
from megadata_core.datasets.raw_member import RawShards
from megadata_core.datasets.raw_shards import RawShardsDataset
from megadata_core.datasets.scheduled_blend import EpochChain, ScheduledBlendedDataset

__all__ = [
    "BlendedDataset",
    "EpochChain",
    "GPTDataConfig",
    "GPTDataset",
    "MockGPTLowLevelDataset",
    "RawShards",
    "RawShardsDataset",
    "ScheduledBlendedDataset",
    "blend_from_args",
    "blend_from_list",
]
