r"""Build every split's GPT indices into the cache ahead of training (Megatron's
``prepare_cache.py``), then print what each split holds.

    python tools/build_index.py --config=configs/weighted_blend.py \
        --config.sequence_length=2048 [--dry_run]
    python tools/build_index.py --config=configs/single_corpus.py \
        --data_path="0.3 /a/prefix 0.7 /b/prefix" --split=98,2,0

Megatron's data flags (``--data_path``, ``--split``, ``--train_data_path``,
``--valid_data_path``, ``--test_data_path``, ``--data_args_path``,
``--per_split_data_args_path``) and ``--train_samples`` / ``--valid_samples`` /
``--test_samples`` override the config. A bad config exits with status 1 and a one-line
``error:`` message.
"""

from __future__ import annotations

import sys
import time

import numpy as np
import tool_main
from absl import app, flags
from data_config import BLEND_FIELDS, SIZE_FIELDS, to_gpt_config
from ml_collections import config_flags

from megadata_core import DataError
from megadata_core.datasets import builder
from megadata_core.indices import tokens_per_epoch

FLAGS = flags.FLAGS
config_flags.DEFINE_config_file("config", None, "An ml_collections data config (configs/*.py).")
for _name in BLEND_FIELDS:
    flags.DEFINE_string(_name, None, f"Megatron's --{_name.replace('_', '-')} (overrides config).")
for _name in SIZE_FIELDS:
    flags.DEFINE_integer(_name, None, f"Samples of the {_name.split('_')[0]} split (overrides).")
flags.DEFINE_bool("dry_run", False, "Print the plan (datasets, weights, sizes) without building.")
flags.DEFINE_bool("progress", True, "Show a progress bar while building.")


def _config():
    if FLAGS.config is None:
        raise DataError("config: give --config=configs/<name>.py")
    config = FLAGS.config
    overrides = {name: FLAGS[name].value for name in BLEND_FIELDS if FLAGS[name].present}
    if overrides:  # Megatron's forms replace the config's whole blend
        for name in BLEND_FIELDS:
            config[name] = overrides.get(name)
    for name in SIZE_FIELDS:
        if FLAGS[name].present:
            config[name] = FLAGS[name].value
    return to_gpt_config(config)


def _print_plan(recipes) -> None:
    for split, recipe in zip(("train", "valid", "test"), recipes):
        if recipe is None:
            print(f"{split}: not built")
            continue
        size = "exhaustive" if recipe.size is None else f"{recipe.size:,} samples"
        print(f"{split}: {recipe.kind}, {size} (from {recipe.field})")
        weights = recipe.weights or [None] * len(recipe.jobs)
        for job, weight in zip(recipe.jobs, weights):
            wanted = "one epoch" if job.num_samples is None else f"{job.num_samples:,} samples"
            share = "" if weight is None else f"weight {weight:.4f}, "
            print(f"  {job.prefix}: {share}{wanted}, documents {job.bookend}")


def _members(dataset) -> list:
    return list(getattr(dataset, "datasets", None) or [dataset])


def _describe(dataset) -> dict:
    """epochs and tokens of one GPTDataset."""
    indices = dataset.indices
    tokens = tokens_per_epoch(dataset.indexed.sequence_lengths, indices)
    epochs = len(dataset.document_index) // max(1, len(indices))
    return {"samples": len(dataset), "epochs": epochs, "tokens": tokens * epochs}


def _print_table(split: str, dataset) -> None:
    if dataset is None:
        print(f"\n{split}: not built")
        return
    if isinstance(dataset, list):  # multiple validation sets
        for number, member in enumerate(dataset):
            _print_table(f"{split}[{number}]", member)
        return
    members = _members(dataset)
    requested = getattr(dataset, "weights", None)
    realized = None
    if hasattr(dataset, "dataset_index"):
        counts = np.bincount(np.asarray(dataset.dataset_index), minlength=len(members))
        realized = counts / max(1, counts.sum())
    print(f"\n{split}: {len(dataset):,} samples from {len(members)} dataset(s)")
    print(
        f"  {'prefix':<48} {'weight':>8} {'realized':>9} {'samples':>12} {'epochs':>6} "
        f"{'tokens':>15}"
    )
    for number, member in enumerate(members):
        info = _describe(member)
        weight = "-" if requested is None else f"{float(requested[number]):.4f}"
        share = "-" if realized is None else f"{realized[number]:.4f}"
        prefix = member.indexed.path_prefix[-48:]
        print(
            f"  {prefix:<48} {weight:>8} {share:>9} {info['samples']:>12,} "
            f"{info['epochs']:>6} {info['tokens']:>15,}"
        )


def run() -> int:
    config, sizes, extras = _config()
    if extras["mock"]:
        recipes = None
    elif config.blend is not None:
        recipes = builder.plan_blend(config, sizes)
    else:
        recipes = builder.plan_blend_per_split(config, sizes)
    if FLAGS.dry_run:
        if recipes is None:
            print("mock data: nothing to plan")
        else:
            _print_plan(recipes)
        return 0
    start = time.perf_counter()
    bar = None
    if FLAGS.progress and recipes is not None:
        from tqdm import tqdm

        total = len({job for recipe in recipes if recipe for job in recipe.jobs})
        bar = tqdm(total=total, unit="dataset", desc="building indices", file=sys.stderr)
    try:
        datasets = builder.build_datasets(
            config,
            sizes,
            mock=extras["mock"],
            vocab_size=extras["vocab_size"],
            progress=bar.update if bar is not None else None,
        )
    finally:
        if bar is not None:
            bar.close()
    print(f"built in {time.perf_counter() - start:.2f} s; cache: {config.path_to_cache}")
    for split, dataset in zip(("train", "valid", "test"), datasets):
        _print_table(split, dataset)
    return 0


def main(argv: list[str]) -> int:
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    try:
        return run()
    except DataError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    tool_main.run(main)
