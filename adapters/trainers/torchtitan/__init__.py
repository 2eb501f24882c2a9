"""torchtitan skin: a megadata dataloader for torchtitan 0.3's trainer (docs/trainers.md).

:class:`MegadataDataLoader` is a ``BaseDataLoader`` over a megadata dataset (Megatron
.bin/.idx corpora, megadata's GPT sample indices, blends, ``best_fit`` packing with
document masking). The trainer builds it from ``config.dataloader`` with
``build(dp_world_size=, dp_rank=, tokenizer=, seq_len=, local_batch_size=,
snapshot_every_n_steps=)``; it yields ``(input_dict, labels)``: ``input_dict["input"]``
(tokens, ``torch.long`` [B, S], best_fit's negative pad read 0), ``input_dict["positions"]``
(``position_ids`` [B, S], restarting per document with ``document_masking``: torchtitan's
flex/varlen masks follow them) and ``labels`` (``torch.long`` [B, S], ``-100`` where
megadata's ``loss_mask`` is 0); ``document_keys=True`` adds ``cu_seqlens``,
``max_seqlen`` and ``segment_ids`` to ``input_dict``. A conversation corpus (a
``PREFIX_roles`` sibling, docs/conversations.md) trains only its trained roles' labels
(the rest -100): the Config's ``train_on_assistant_responses_only``,
``train_on_thinking_traces`` and ``train_on_tool_calls`` (or the JSON's) choose them::

    from megadata_adapters.trainers.torchtitan import MegadataDataLoader

    config.dataloader = MegadataDataLoader.Config(
        dataset_path="/data/corpus_text_document",   # a prefix, or data.json
        packing="best_fit", document_masking=True,
    )

torchtitan's own command line takes this package as its module of config functions
(:func:`llama3_debugmodel_megadata`), every Config field a flag::

    python -m torchtitan.train --module megadata_adapters.trainers.torchtitan \
        --config llama3_debugmodel_megadata --dataloader.dataset-path PREFIX \
        --dataloader.train-samples 100000 --hf-assets-path TOKENIZER_DIR

``dataset_path`` is a corpus prefix (split by ``split``, default ``"1,0,0"``) or a
``.json`` of :class:`megadata_core.GPTDataConfig` fields plus ``train_samples``, ``mock``
and ``vocab_size`` (:mod:`megadata_adapters.trainers.data_json`); a field set in both
must agree, and ``sequence_length`` equals the trainer's ``seq_len``. ``train_samples``
(None: one epoch of the train split) is the sampler's ``total_samples``; ``dp_rank`` /
``dp_world_size`` go to megadata's ``PretrainingSampler`` (Megatron's order: global step
``t`` reads samples ``[t*G, (t+1)*G)``, ``G = local_batch_size * dp_world_size``) or, with
``sampler="random"``, ``RandomSampler``. When the samples run out the iteration ends.

Resume: ``state_dict()`` is ``{"megadata": JSON text}`` (the sampler's
``consumed_samples`` counting the batches *yielded*, and the data's fingerprint), the same
on every rank: DCP saves it once, every rank loads it, and the sequential sampler resumes
under another ``dp_world_size`` with the same ``G``. ``load_state_dict`` refuses a state
made for other data or config (DataError); an empty state is a no-op.

The parts (docs/trainers.md): ``keys`` (the Config's and the JSON's keys to a
GPTDataConfig), ``loader`` (:class:`MegadataDataLoader`, and resume: its state), the
launcher (torchtitan's own, given this package as ``--module``). On the CPU,
``tests/trainers/torchtitan_site`` patches what torchtitan 0.3 needs an accelerator for.
"""

from __future__ import annotations

from typing import Any

from megadata_adapters.trainers.torchtitan.keys import data_config
from megadata_adapters.trainers.torchtitan.loader import (
    IGNORE_INDEX,
    STATE_KEY,
    MegadataDataLoader,
)

__all__ = [
    "IGNORE_INDEX",
    "STATE_KEY",
    "MegadataDataLoader",
    "data_config",
    "llama3_debugmodel_megadata",
]


def llama3_debugmodel_megadata() -> Any:
    """torchtitan's ``llama3_debugmodel`` with megadata's loader (best_fit packing,
    document masking): a config_registry function, for ``--module
    megadata_adapters.trainers.torchtitan --config llama3_debugmodel_megadata
    --dataloader.dataset-path PREFIX`` (torchtitan's ConfigManager takes a fully
    qualified module holding config functions)."""
    from torchtitan.models.llama3.config_registry import llama3_debugmodel

    config = llama3_debugmodel()
    config.dataloader = MegadataDataLoader.Config(packing="best_fit", document_masking=True)
    return config
