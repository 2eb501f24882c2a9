"""The data flags of the programs that build a config's splits (build_index, inspect_data).

``--config=x`` (an ml_collections file) plus Megatron's data flags
(``--data_path``, ``--split``, ``--train_data_path``, ``--valid_data_path``,
``--test_data_path``, ``--data_args_path``, ``--per_split_data_args_path``) and
``--train_samples`` / ``--valid_samples`` / ``--test_samples``, which override the config:
a data path flag replaces the config's whole blend (and its split, unless ``--split`` is
given too); ``--split`` alone splits the config's own data. ``--blend_schedule`` (stages
``"START: WEIGHT PREFIX ...; ..."``, START in tokens with Megatron's K/M/B/T suffixes,
or a file of one stage per line) replaces the config's blend with a schedule. A program calls
:func:`define` once and ``flags.adopt_module_key_flags(data_flags)`` so ``--help`` lists
them, then :func:`gpt_config`.
"""

from __future__ import annotations

from absl import flags
from ml_collections import config_flags

from megadata_cli.data_config import BLEND_FIELDS, PAIR_FIELDS, SIZE_FIELDS, to_gpt_config
from megadata_core import DataError

FLAGS = flags.FLAGS


def define() -> None:
    """Define ``--config``, the blend flags and the split sizes (once per program)."""
    config_flags.DEFINE_config_file(
        "config", None, "An ml_collections data config (configs/*.py)."
    )
    for name in BLEND_FIELDS:
        flags.DEFINE_string(
            name, None, f"Megatron's --{name.replace('_', '-')} (overrides config)."
        )
    for name in SIZE_FIELDS:
        flags.DEFINE_integer(name, None, f"Samples of the {name.split('_')[0]} split (overrides).")
    flags.DEFINE_string(
        "blend_schedule", None,
        "Blends that change during training: 'START: WEIGHT PREFIX ...; START: ...' (START "
        "in tokens, Megatron's K/M/B/T suffixes: '0: 0.8 /a 0.2 /b; 50B: 0.5 /a 0.5 /c'), "
        "or a file of one stage per line. Replaces the config's blend.",
    )


def gpt_config():
    """``(GPTDataConfig, sizes, extras)`` of ``--config`` with the flags' overrides
    (see :func:`data_config.to_gpt_config`); DataError without ``--config``."""
    try:
        config = FLAGS.config  # loaded at the first use; a failed load raises on use
        if config is not None:
            config.keys()
    except Exception as error:  # noqa: BLE001 - ml_collections raises what the file raises
        reason = str(error).strip().splitlines()[-1].strip()
        given = FLAGS["config"].serialize()
        raise DataError(f"{given}: cannot load the config ({reason})") from None
    if config is None:
        raise DataError("config: give --config=configs/<name>.py")
    overrides = {name: FLAGS[name].value for name in BLEND_FIELDS if FLAGS[name].present}
    replaced = bool(set(overrides) - {"split"}) or FLAGS["blend_schedule"].present
    for name in PAIR_FIELDS:  # a config's own blend pair (raw members) is replaced too
        if replaced and name in config:
            config[name] = None
    if set(overrides) - {"split"}:  # Megatron's data paths replace the config's whole blend
        for name in BLEND_FIELDS:
            config[name] = overrides.get(name)
    elif overrides:  # --split alone splits the config's own data
        config.split = overrides["split"]
    if FLAGS["blend_schedule"].present:  # a schedule replaces the whole blend
        for name in BLEND_FIELDS:
            if name != "split":
                config[name] = None
        config.blend_schedule = FLAGS.blend_schedule
    for name in SIZE_FIELDS:
        if FLAGS[name].present:
            config[name] = FLAGS[name].value
    return to_gpt_config(config)
