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

The parts (docs/trainers.md): ``keys`` (the Config's and the JSON's keys to a
GPTDataConfig), ``loader`` (:class:`MegadataDataLoader`), the launcher (torchtitan's own,
given this package as ``--module``: :func:`llama3_debugmodel_megadata` is here) and
``resume`` (the loader's state).
"""

from __future__ import annotations

from typing import Any

from megadata_adapters.trainers.torchtitan.keys import data_config
from megadata_adapters.trainers.torchtitan.loader import IGNORE_INDEX, MegadataDataLoader
from megadata_adapters.trainers.torchtitan.resume import STATE_KEY

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
    from torchtitan.models.llama3.config_registry import (
        llama3_debugmodel,
    )

    config = llama3_debugmodel()
    config.dataloader = MegadataDataLoader.Config(packing="best_fit", document_masking=True)
    return config
