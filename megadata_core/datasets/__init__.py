"""Floor 4: datasets that hold indices and answer ``len``, ``[i]`` and ``__getitems__``.

``GPTDataset`` (its index arrays from one call, :mod:`.gpt_arrays`; many members that
share its checks, :mod:`.gpt_siblings`), ``BlendedDataset`` (its members possibly made
at first read, :mod:`.lazy_members`), ``ScheduledBlendedDataset`` (a blend whose weights
change, :mod:`.blend_schedule`, over ``EpochChain`` members), Megatron's mock corpus,
the config with its blend-argument parsers, and what a batch needs on the way out: the
one vectorized read of samples' tokens (:mod:`.reading`), masks, position ids, document
masks, context-parallel slices, where the index arrays came from (:mod:`.origins`),
resume fingerprints. May import the ground (errors, checks, files, handover), format,
indices and cache; never build, preprocess, adapters, tools or a framework. Exported:
what a user or an adapter uses.
"""

from megadata_core.datasets.blend_args import blend_from_args, blend_from_list
from megadata_core.datasets.blended_dataset import BlendedDataset
from megadata_core.datasets.config import GPTDataConfig
from megadata_core.datasets.epoch_chain import EpochChain
from megadata_core.datasets.gpt_dataset import GPTDataset
from megadata_core.datasets.mock import MockGPTLowLevelDataset
from megadata_core.datasets.scheduled_blend import ScheduledBlendedDataset

__all__ = [
    "BlendedDataset",
    "EpochChain",
    "GPTDataConfig",
    "GPTDataset",
    "MockGPTLowLevelDataset",
    "ScheduledBlendedDataset",
    "blend_from_args",
    "blend_from_list",
]
