"""Floor 3: datasets that hold indices and answer ``len``, ``[i]`` and ``__getitems__``."""

from megadata_core.datasets.config import GPTDataConfig
from megadata_core.datasets.gpt_dataset import GPTDataset

__all__ = ["GPTDataConfig", "GPTDataset"]
