"""torchtitan's loader: :class:`MegadataDataLoader`, a torchtitan 0.3 ``BaseDataLoader``
over a megadata dataset (see the package docstring)."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torchtitan.components.dataloader import BaseDataLoader

import megadata_core as mdc
from megadata_adapters.frameworks import torch_data
from megadata_adapters.trainers.torchtitan.keys import data_config
from megadata_core.errors import DataError
from megadata_core.samplers import PretrainingSampler, RandomSampler

#: torchtitan's cross-entropy ignore index (``torchtitan.components.loss.IGNORE_INDEX``).
IGNORE_INDEX = -100
#: The key of the loader's state in its ``state_dict`` (one for every rank).
STATE_KEY = "megadata"
_DOCUMENT_KEYS = ("cu_seqlens", "max_seqlen", "segment_ids")


class MegadataDataLoader(BaseDataLoader):
    """torchtitan 0.3 dataloader over megadata (see the package docstring)."""

    @dataclass(kw_only=True, slots=True)
    class Config(BaseDataLoader.Config):
        dataset: str = "megadata"
        """A name for logs; the data is ``dataset_path``."""

        dataset_path: str | None = None
        """A corpus prefix (PREFIX.bin/.idx) or a .json of GPTDataConfig fields."""

        seed: int = 1234
        """GPTDataConfig.random_seed (when the JSON sets none) and the random sampler's."""

        split: str | None = None
        """Megatron's split string; a prefix's default is "1,0,0"."""

        packing: str | None = None
        """"concat" (Megatron's samples) or "best_fit"; None: the JSON's, else concat."""

        document_masking: bool | None = None
        """Positions restart per document (torchtitan's flex/varlen masks follow)."""

        eod_id: int | None = None
        """End-of-document id; None: the JSON's, else the tokenizer's eos_id."""

        pad_id: int | None = None
        """best_fit's pad id; None: the JSON's, else Megatron's -1."""

        path_to_cache: str | None = None
        """Directory of megadata's index cache; None builds the indices in memory."""

        train_on_assistant_responses_only: bool | None = None
        """Conversation corpora: only assistant turns train; None: the JSON's, else True."""

        train_on_thinking_traces: bool | None = None
        """Conversation corpora: reasoning trains too; None: the JSON's, else False."""

        train_on_tool_calls: bool | None = None
        """Conversation corpora: tool calls train too; None: the JSON's, else False."""

        train_samples: int | None = None
        """Training samples to build; None: one epoch of the train split."""

        sampler: str = "sequential"
        """"sequential" (PretrainingSampler, Megatron's) or "random" (RandomSampler)."""

        document_keys: bool = False
        """Also yield cu_seqlens/max_seqlen/segment_ids in input_dict (custom trainers)."""

        num_workers: int = 0
        """DataLoader worker processes."""

        pin_memory: bool = False
        """Page-locked batches (CUDA)."""

        persistent_workers: bool = False
        """Keep the workers between iterations (num_workers > 0)."""

        prefetch_factor: int | None = None
        """Batches each worker reads ahead (num_workers > 0)."""

    def __init__(
        self,
        config: Config,
        *,
        dp_world_size: int,
        dp_rank: int,
        tokenizer: Any = None,
        seq_len: int,
        local_batch_size: int,
        snapshot_every_n_steps: int | None = None,
        **kwargs: Any,
    ) -> None:
        del snapshot_every_n_steps, kwargs  # the state is exact at every step
        if config.sampler not in ("sequential", "random"):
            raise DataError(f"sampler: {config.sampler!r} is not 'sequential' or 'random'")
        self.config = config
        self.dp_rank, self.dp_world_size = int(dp_rank), int(dp_world_size)
        self.seq_len, self.local_batch_size = int(seq_len), int(local_batch_size)
        eos = getattr(tokenizer, "eos_id", None)
        self.data_config, train_samples, extras = data_config(config, self.seq_len, eos)
        vocab = extras["vocab_size"]
        if extras["mock"] and vocab is None and tokenizer is not None:
            vocab = tokenizer.get_vocab_size()
        train = mdc.build_datasets(
            self.data_config, [train_samples, 0, 0], mock=extras["mock"], vocab_size=vocab
        )[0]
        if train is None or len(train) == 0:
            raise DataError(f"dataset_path: {config.dataset_path!r} gives no training samples")
        self.dataset = train
        # Megatron's samplers read train_samples (the dataset may hold more: whole epochs)
        total = len(train) if train_samples is None else min(int(train_samples), len(train))
        if config.sampler == "sequential":
            sampler: PretrainingSampler | RandomSampler = PretrainingSampler(
                total, 0, self.local_batch_size, self.dp_rank, self.dp_world_size
            )
        else:
            sampler = RandomSampler(
                total, 0, self.local_batch_size, self.dp_rank, self.dp_world_size,
                seed=config.seed,
            )
        self.sampler = sampler
        loader_kwargs: dict[str, Any] = {"pin_memory": config.pin_memory}
        if config.num_workers > 0:
            loader_kwargs["persistent_workers"] = config.persistent_workers
            if config.prefetch_factor is not None:
                loader_kwargs["prefetch_factor"] = config.prefetch_factor
        self.loader = torch_data.StatefulLoader(
            train, sampler, num_workers=config.num_workers, **loader_kwargs
        )

    def __iter__(self) -> Iterator[tuple[dict[str, torch.Tensor], torch.Tensor]]:
        document_keys = self.config.document_keys
        for batch in self.loader:
            yield self.to_titan(batch, document_keys)

    @staticmethod
    def to_titan(
        batch: Mapping[str, torch.Tensor], document_keys: bool = False
    ) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        """A megadata torch batch as torchtitan's ``(input_dict, labels)``."""
        tokens = batch["tokens"]
        if tokens.numel() and int(tokens.min()) < 0:  # best_fit's pad -1: a valid id
            tokens = tokens.clamp_min(0)
        labels = batch["labels"].masked_fill(batch["loss_mask"] == 0, IGNORE_INDEX)
        input_dict = {"input": tokens, "positions": batch["position_ids"]}
        if document_keys:
            missing = [key for key in _DOCUMENT_KEYS if key not in batch]
            if missing:
                raise DataError(
                    f"document_keys: the batch has no {missing[0]!r}; it needs "
                    "document_masking=True"
                )
            input_dict.update({key: batch[key] for key in _DOCUMENT_KEYS})
        return input_dict, labels

    def state_dict(self) -> dict[str, Any]:
        """``{"megadata": JSON text}``: the same on every DP rank (see the package)."""
        return {STATE_KEY: json.dumps(self.loader.state_dict(), sort_keys=True)}

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Continue after the batches that ``state_dict`` counted; empty: no-op."""
        if not state_dict:
            return
        if STATE_KEY not in state_dict:
            raise DataError(
                f"state_dict: no {STATE_KEY!r} key (keys {sorted(state_dict)}): not a "
                "MegadataDataLoader state"
            )
        state = state_dict[STATE_KEY]
        if isinstance(state, bytes):
            state = state.decode("utf-8")
        self.loader.load_state_dict(json.loads(state) if isinstance(state, str) else state)

    def close(self) -> None:
        """Stop the loader's workers; idempotent."""
        self.loader.close()

    def __repr__(self) -> str:
        return (
            f"MegadataDataLoader({self.config.dataset_path!r}, dp_rank={self.dp_rank}, "
            f"dp_world_size={self.dp_world_size}, local_batch_size={self.local_batch_size}, "
            f"seq_len={self.seq_len})"
        )
