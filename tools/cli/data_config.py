"""ml_collections data configs -> megadata's GPTDataConfig and split sizes.

The core takes a frozen GPTDataConfig; configs for programs (``configs/*.py``) are
ml_collections ConfigDicts with Megatron's data arguments. This module is the one place
that converts between them, so the core never imports ml_collections.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
from typing import Any

import ml_collections

from megadata_core import DataError, GPTDataConfig
from megadata_core.datasets.config import LEGACY_DEFAULT_SPLIT, blend_from_args

#: Megatron-LM's data arguments (``--data-path`` etc.) as ConfigDict fields.
BLEND_FIELDS = (
    "data_path",
    "data_args_path",
    "split",
    "train_data_path",
    "valid_data_path",
    "test_data_path",
    "per_split_data_args_path",
)
SIZE_FIELDS = ("train_samples", "valid_samples", "test_samples")
#: GPTDataConfig's own blend fields, ``(members, weights)`` pairs as it takes them: what
#: holds a raw-shards member (``{"raw": "shards/*.jsonl", "tokenizer": {...}}``), which no
#: data path names. Not in :func:`base_config`; incompatible with the data paths.
PAIR_FIELDS = ("blend", "blend_per_split")
_GPT_FIELDS = {field.name for field in dataclasses.fields(GPTDataConfig)} - {
    "blend",
    "blend_per_split",
    "split",
}


def base_config() -> ml_collections.ConfigDict:
    """Every field with its default; configs/*.py start from this and set what differs."""
    placeholder = ml_collections.config_dict.placeholder
    config = ml_collections.ConfigDict()
    for name in BLEND_FIELDS:
        config[name] = placeholder(str)
    for name in SIZE_FIELDS:
        config[name] = placeholder(int)
    defaults = GPTDataConfig(random_seed=1234, sequence_length=4096)
    for name in sorted(_GPT_FIELDS):
        value = getattr(defaults, name)
        config[name] = value if value is not None else placeholder(_field_type(name))
    config.mock = False
    config.vocab_size = placeholder(int)
    return config


#: Every field a data config may hold.
FIELDS = frozenset((*BLEND_FIELDS, *SIZE_FIELDS, *PAIR_FIELDS, *_GPT_FIELDS, "mock",
                    "vocab_size"))


def check_fields(values: dict[str, Any]) -> None:
    """DataError naming the first field of ``values`` that is not a data config field,
    with the closest one (``config.sequence_lenght`` -> ``config.sequence_length``)."""
    for name in sorted(set(values) - FIELDS):
        close = difflib.get_close_matches(name, sorted(FIELDS), n=1, cutoff=0.6)
        hint = f"; did you mean config.{close[0]}?" if close else ""
        raise DataError(f"config.{name}: no such data config field{hint}")


def _plain(value: Any) -> Any:
    """``value`` with every ConfigDict in it (a raw member written as one, or a dict that
    ml_collections made one) a dict, inside lists and tuples too: the core reads members
    as Mappings, which a ConfigDict is not (``to_dict`` leaves those in lists as they are)."""
    if isinstance(value, ml_collections.ConfigDict):
        value = value.to_dict()
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_plain(item) for item in value)
    return value


def _field_type(name: str) -> type:
    return {"path_to_cache": str, "eod_id": int}.get(name, str)


def to_gpt_config(config: ml_collections.ConfigDict) -> tuple[GPTDataConfig, list, dict]:
    """``(GPTDataConfig, sizes [train, valid, test], extras {"mock", "vocab_size"})``.

    ``blend`` / ``blend_per_split`` (set on the config, not in :func:`base_config`) are
    GPTDataConfig's pairs, ``([member, ...], [weight, ...] or None)``, a member a prefix
    or a raw-shards dict (``{"raw": "shards/*.jsonl", "tokenizer": {"type": "bytes"}}``,
    a dict or a ConfigDict); the other blend fields use Megatron's command-line forms
    (``data_path = "0.3 /a 0.7 /b"``, per-split paths, a data-args file);
    ``blend_schedule`` is the text form (``"0: 0.8 /a 0.2 /b; 50B: 0.5 /a 0.5 /c"``) or a
    file of it (one stage per line), and
    splits with Megatron's legacy default (``"969, 30, 1"``) when no split is given, as
    a data path does. A field that is none of these (a typo) is a DataError naming it and
    the closest field.
    """
    values: dict[str, Any] = config.to_dict()
    check_fields(values)
    pairs = {name: _plain(values.pop(name, None)) for name in PAIR_FIELDS}
    blend = blend_from_args(**{name: values.pop(name, None) for name in BLEND_FIELDS})
    for name, pair in pairs.items():
        if pair is None:
            continue
        if blend["blend"] is not None or blend["blend_per_split"] is not None:
            raise DataError(
                f"config.{name}: give the blend as config.{name} or as Megatron's data paths "
                f"({', '.join(n for n in BLEND_FIELDS if n != 'split')}), not both"
            )
        blend[name] = pair
    schedule = values.get("blend_schedule")
    if isinstance(schedule, str) and os.path.isfile(schedule):
        with open(schedule, encoding="utf-8") as file:
            values["blend_schedule"] = file.read()
    if schedule is not None and blend["split"] is None and blend["blend_per_split"] is None:
        blend["split"] = LEGACY_DEFAULT_SPLIT
    sizes = [values.pop(name, None) for name in SIZE_FIELDS]
    extras = {"mock": bool(values.pop("mock", False)), "vocab_size": values.pop("vocab_size", None)}
    gpt = GPTDataConfig(**blend, **values)
    return gpt, sizes, extras
