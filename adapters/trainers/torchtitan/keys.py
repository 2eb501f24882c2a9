"""torchtitan's config keys: a ``MegadataDataLoader.Config`` (and the ``.json`` data config
its ``dataset_path`` may name) to a :class:`megadata_core.GPTDataConfig` (see the package
docstring)."""

from __future__ import annotations

import os
from typing import Any

import megadata_core as mdc
from megadata_adapters.trainers.data_json import read_data_json
from megadata_core.errors import DataError

#: Config fields that may also be set in a JSON data config (same name there).
SHARED_KEYS = (
    "packing", "document_masking", "split", "eod_id", "pad_id", "path_to_cache",
    "train_on_assistant_responses_only", "train_on_thinking_traces", "train_on_tool_calls",
)
#: Keys of a JSON data config besides GPTDataConfig's fields.
EXTRA_KEYS = ("train_samples", "mock", "vocab_size")


def data_config(
    config: Any, seq_len: int, eod_id: int | None = None
) -> tuple[mdc.GPTDataConfig, int | None, dict[str, Any]]:
    """``(GPTDataConfig, train_samples, {"mock", "vocab_size"})`` that ``config`` (a
    ``MegadataDataLoader.Config``) names (the package docstring); ``eod_id`` (the
    tokenizer's EOS) is the default EOD."""
    path = config.dataset_path
    if not path:
        raise DataError(
            "dataset_path: MegadataDataLoader.Config needs a corpus prefix or a .json "
            "data config"
        )
    path = os.path.expanduser(str(path))
    if path.endswith(".json"):
        values = read_data_json(path, "dataset_path", EXTRA_KEYS)
    else:
        if not (os.path.exists(path + ".bin") and os.path.exists(path + ".idx")):
            raise DataError(
                f"dataset_path: {path!r} is neither a .json data config nor a corpus "
                f"prefix ({path}.bin / {path}.idx not found)"
            )
        values = {"blend": ((path,), None)}
        if config.split is None:
            values["split"] = "1,0,0"  # the whole corpus trains
    for name in SHARED_KEYS:
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
