"""Floor 3: datasets that hold indices and answer ``len``, ``[i]`` and ``__getitems__``."""

from megadata_core.datasets.blend_args import blend_from_args, blend_from_list
from megadata_core.datasets.blended_dataset import BlendedDataset
from megadata_core.datasets.builder import build_datasets
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
]
