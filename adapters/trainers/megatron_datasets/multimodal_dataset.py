"""``megatron.core.datasets.multimodal_dataset``: the mock multimodal dataset."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from megadata_adapters.trainers.megatron_datasets._errors import require
from megadata_adapters.trainers.megatron_datasets.gpt_dataset import (
    GPTDatasetConfig,
    MockGPTDataset,
)


@dataclass
class MultimodalDatasetConfig(GPTDatasetConfig):
    """GPTDatasetConfig plus the mock image size and a per-sample preprocessing hook."""

    image_h: int | None = None  # required (None: not set)
    image_w: int | None = None
    preprocess_func: Callable[[dict[str, torch.Tensor]], dict[str, torch.Tensor]] = lambda x: x

    def __post_init__(self) -> None:
        super().__post_init__()
        require(self.image_h is not None, "image_h: must be set")
        require(self.image_w is not None, "image_w: must be set")


class MockMultimodalDataset(MockGPTDataset):
    """Mock GPT text plus a zero image ``[3, image_h, image_w]`` float32 per sample."""

    config: MultimodalDatasetConfig

    def __getitem__(  # type: ignore[override]  # Megatron's signature
        self, idx: int
    ) -> dict[str, torch.Tensor]:
        sample = super().__getitem__(idx)
        height, width = self.config.image_h, self.config.image_w
        assert height is not None and width is not None  # MultimodalDatasetConfig requires them
        sample["image"] = torch.zeros((3, height, width), dtype=torch.float32)
        return self.config.preprocess_func(sample)
