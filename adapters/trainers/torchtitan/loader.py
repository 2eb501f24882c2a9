"""torchtitan skin: a megadata dataloader for torchtitan 0.3's trainer.

torchtitan 0.3 builds its loader from ``Trainer.Config.dataloader`` (a
``BaseDataLoader.Config``) with ``config.dataloader.build(dp_world_size=, dp_rank=,
tokenizer=, seq_len=, local_batch_size=, snapshot_every_n_steps=)``; the loader is a
``Stateful`` that its checkpointer saves and loads with the model (DCP), and iterating it
yields ``(input_dict, labels)``. :class:`MegadataDataLoader` is such a loader over a
megadata dataset (Megatron .bin/.idx corpora, megadata's GPT sample indices, blends,
``best_fit`` packing with document masking)::

    from megadata_adapters.trainers.torchtitan import MegadataDataLoader
    from torchtitan.models.llama3.config_registry import llama3_debugmodel

    def llama3_megadata():                      # a config_registry function
        config = llama3_debugmodel()
        config.dataloader = MegadataDataLoader.Config(
            dataset_path="/data/corpus_text_document",   # a prefix, or data.json
            packing="best_fit", document_masking=True,
        )
        return config

or in a running config: ``config.dataloader = MegadataDataLoader.Config(...)``; the
trainer's ``config.dataloader.build(...)`` fills the rest. torchtitan's own command line
takes a fully qualified module of config functions; this one ships
:func:`llama3_debugmodel_megadata`, and every Config field is a flag::

    python -m torchtitan.train --module megadata_adapters.trainers.torchtitan \
        --config llama3_debugmodel_megadata --dataloader.dataset-path PREFIX \
        --dataloader.train-samples 100000 --hf-assets-path TOKENIZER_DIR

``dataset_path`` is either

* a corpus prefix (``PREFIX.bin`` / ``PREFIX.idx``): one corpus, split by ``split``
  (default ``"1,0,0"``: all of it for training), with ``seed``, ``packing``,
  ``document_masking``, ``eod_id``, ``pad_id`` and ``path_to_cache`` from this Config; or
* a ``.json`` file: an object of :class:`megadata_core.GPTDataConfig` fields (``blend``
  as ``[[prefixes], [weights] or null]`` or Megatron's ``--data-path`` string,
  ``blend_per_split``, ``blend_schedule``, ``split``, ``packing``, ...) plus optionally
  ``train_samples``, ``mock`` and ``vocab_size`` (``mock: true`` builds Megatron's mock
  data). JSON, not a Python/ml_collections config: a plain data file that any launcher
  writes and a checkpoint's config records as text, read with the standard library
  (the adapters do not import ``megadata_cli``, whose ml_collections configs are for its
  command-line tools); its keys are exactly GPTDataConfig's field names. A field set
  both in the file and in this Config must agree (DataError otherwise);
  ``sequence_length`` defaults to the trainer's ``seq_len`` and must equal it.

Samples. ``train_samples`` (Config, or the JSON's) is the number of training samples to
build and read (the sampler's ``total_samples``, as Megatron's ``--train-samples``; the
dataset built for it holds whole epochs); None is one epoch of the train split (with
``sampler="random"``: epochs repeat forever, reshuffled). Data parallelism: ``dp_rank``
/ ``dp_world_size`` go to megadata's :class:`~megadata_core.samplers.PretrainingSampler`
(``sampler="sequential"``, Megatron's order: global step ``t`` reads samples
``[t*G, (t+1)*G)``, ``G = local_batch_size * dp_world_size``, rank ``r`` the ``r``-th
``local_batch_size`` of them) or :class:`~megadata_core.samplers.RandomSampler`
(``seed``). When the samples run out the iteration ends (torchtitan: "Ran out of data").

What it yields, per batch of ``local_batch_size`` samples of ``seq_len`` tokens:

* ``input_dict["input"]``: the tokens, ``torch.long`` [B, S] (pad tokens of
  ``best_fit`` with a negative ``pad_id``, Megatron's -1, read 0 here: they sit after
  every real token of their row, in a segment of their own with document masking, and
  are never trained on);
* ``input_dict["positions"]``: megadata's ``position_ids``, ``torch.long`` [B, S]. With
  ``document_masking`` they restart at 0 at every document (and at the padding), which
  is how torchtitan 0.3 finds documents: for FlexAttention and VarlenAttention
  (``attn_backend="flex"``/``"varlen"``) ``Trainer.post_dataloading_process`` builds the
  block-causal masks from ``positions`` (``Decoder.get_attention_masks`` ->
  ``create_varlen_metadata_for_document``), whose boundaries are megadata's
  ``cu_seqlens``; RoPE reads them per document too. Without document masking they are
  0..S-1 (plain causal);
* ``labels``: ``torch.long`` [B, S], ``-100`` (torchtitan's ignore index) where
  megadata's ``loss_mask`` is 0 (padding; with ``best_fit`` the label that crosses into
  the next document; ``eod_mask_loss``).

``document_keys=True`` adds megadata's ``cu_seqlens`` (int32 [B, S + 1], Megatron's
padded layout), ``max_seqlen`` (int32 [B]) and ``segment_ids`` (int32 [B, S]) to
``input_dict``, for a trainer whose ``post_dataloading_process`` takes them out: torchtitan
0.3 passes every key but ``input`` to ``Decoder.forward(tokens, positions,
attention_masks)``, which takes no others, so its stock trainer needs the default
(False).

Resume. :meth:`MegadataDataLoader.state_dict` is ``{"megadata": JSON text}``: megadata's
loader state (the sampler's ``consumed_samples`` counting the batches this loader has
*yielded*, whatever its workers prefetched, and the data's fingerprint). It holds no
rank: every DP rank has the same state, so DCP saves it once and every rank loads it,
and the sequential sampler resumes under another ``dp_world_size`` with the same
``G`` (elastic). ``load_state_dict`` refuses a state made for other data or config
(``DataError``); an empty state (torchtitan's "nothing to load") is a no-op. The next
batches after a resume are those that followed the checkpoint, exactly;
``snapshot_every_n_steps`` is not needed (the state is exact at every step) and ignored.

On a machine without an accelerator torchtitan 0.3's trainer itself does not run as
shipped (triton imports, a "cuda" device fallback, no CPU backward for FlexAttention);
``tests/trainers/torchtitan_site`` has the test harness that patches those, outside
torchtitan's files, to train on the CPU with this loader.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torchtitan.components.dataloader import BaseDataLoader

import megadata_core as mdc
from megadata_adapters.frameworks import torch_data
from megadata_adapters.trainers.data_json import read_data_json
from megadata_core.errors import DataError
from megadata_core.samplers import PretrainingSampler, RandomSampler

__all__ = [
    "IGNORE_INDEX",
    "STATE_KEY",
    "MegadataDataLoader",
    "data_config",
    "llama3_debugmodel_megadata",
]

#: torchtitan's cross-entropy ignore index (``torchtitan.components.loss.IGNORE_INDEX``).
IGNORE_INDEX = -100
#: The key of the loader's state in its ``state_dict`` (one for every rank).
STATE_KEY = "megadata"
#: Config fields that may also be set in a JSON data config (same name there).
_SHARED = ("packing", "document_masking", "split", "eod_id", "pad_id", "path_to_cache")
#: Keys of a JSON data config besides GPTDataConfig's fields.
_EXTRA_KEYS = ("train_samples", "mock", "vocab_size")
_DOCUMENT_KEYS = ("cu_seqlens", "max_seqlen", "segment_ids")


def data_config(
    config: MegadataDataLoader.Config, seq_len: int, eod_id: int | None = None
) -> tuple[mdc.GPTDataConfig, int | None, dict[str, Any]]:
    """``(GPTDataConfig, train_samples, {"mock", "vocab_size"})`` that ``config`` names
    (see the module docstring); ``eod_id`` (the tokenizer's EOS) is the default EOD."""
    path = config.dataset_path
    if not path:
        raise DataError(
            "dataset_path: MegadataDataLoader.Config needs a corpus prefix or a .json "
            "data config"
        )
    path = os.path.expanduser(str(path))
    if path.endswith(".json"):
        values = read_data_json(path, "dataset_path", _EXTRA_KEYS)
    else:
        if not (os.path.exists(path + ".bin") and os.path.exists(path + ".idx")):
            raise DataError(
                f"dataset_path: {path!r} is neither a .json data config nor a corpus "
                f"prefix ({path}.bin / {path}.idx not found)"
            )
        values = {"blend": ((path,), None)}
        if config.split is None:
            values["split"] = "1,0,0"  # the whole corpus trains
    for name in _SHARED:
        ours = getattr(config, name)
        if ours is None:
            continue
        if name in values and values[name] != ours:
            raise DataError(f"{name}: the Config says {ours!r}, {path} says {values[name]!r}")
        values[name] = ours
    if values.setdefault("sequence_length", seq_len) != seq_len:
        raise DataError(
            f"sequence_length: {path} says {values['sequence_length']}, the trainer's "
            f"seq_len is {seq_len}"
        )
    values.setdefault("random_seed", config.seed)
    if values.get("eod_id") is None and eod_id is not None:
        values["eod_id"] = eod_id
    train_samples = values.pop("train_samples", None)
    if config.train_samples is not None:
        if train_samples is not None and train_samples != config.train_samples:
            raise DataError(f"train_samples: the Config says {config.train_samples}, "
                            f"{path} says {train_samples}")
        train_samples = config.train_samples
    extras = {"mock": bool(values.pop("mock", False)), "vocab_size": values.pop("vocab_size", None)}
    return mdc.GPTDataConfig(**values), train_samples, extras


class MegadataDataLoader(BaseDataLoader):
    """torchtitan 0.3 dataloader over megadata (see the module docstring)."""

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
        """``{"megadata": JSON text}``: the same on every DP rank (see the module)."""
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


def llama3_debugmodel_megadata() -> Any:
    """torchtitan's ``llama3_debugmodel`` with megadata's loader (best_fit packing,
    document masking): a config_registry function, for ``--module
    megadata_adapters.trainers.torchtitan --config llama3_debugmodel_megadata
    --dataloader.dataset-path PREFIX`` (torchtitan's ConfigManager takes a fully
    qualified module holding config functions)."""
    from torchtitan.models.llama3.config_registry import (
        llama3_debugmodel,
    )

    config = llama3_debugmodel()
    config.dataloader = MegadataDataLoader.Config(packing="best_fit", document_masking=True)
    return config
