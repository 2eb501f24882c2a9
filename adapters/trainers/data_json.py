"""A megadata data config as a JSON file: what a trainer's one data setting names.

An object of :class:`megadata_core.GPTDataConfig` fields (``blend`` as ``[[prefixes],
[weights] or null]`` or Megatron's ``--data-path`` string, ``blend_per_split``,
``blend_schedule``, ``split``, ``packing``, ``document_masking``, ``source_ids``, ...)
plus a few keys the trainer's adapter names. JSON, not a Python or ml_collections
config: a plain data file that any launcher writes and a checkpoint's config records as
text, read with the standard library; its keys are exactly GPTDataConfig's field names.
torchtitan's ``dataset_path`` and MaxText's ``grain_train_files`` take one.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from typing import Any

import megadata_core as mdc
from megadata_core.errors import DataError

__all__ = ["read_data_json"]


def _tuples(value: Any) -> Any:
    """JSON lists as tuples, recursively (GPTDataConfig's fields are hashable)."""
    if isinstance(value, list):
        return tuple(_tuples(v) for v in value)
    return value


def read_data_json(path: str, setting: str, extra_keys: Sequence[str] = ()) -> dict[str, Any]:
    """The fields in the JSON file ``path`` (lists as tuples), checked to be
    GPTDataConfig's or ``extra_keys``; a DataError naming ``setting`` (the trainer's
    setting that named the file) and the file otherwise."""
    try:
        with open(path, encoding="utf-8") as file:
            values = json.load(file)
    except (OSError, ValueError) as error:
        raise DataError(f"{setting}: cannot read the JSON data config {path!r}: {error}") from error
    if not isinstance(values, dict):
        raise DataError(f"{setting}: {path!r} holds no JSON object of config fields")
    fields = {field.name for field in dataclasses.fields(mdc.GPTDataConfig)}
    unknown = sorted(set(values) - fields - set(extra_keys))
    if unknown:
        raise DataError(
            f"{path}: {unknown[0]!r} is no GPTDataConfig field nor one of {tuple(extra_keys)}"
        )
    return {key: _tuples(value) for key, value in values.items()}
