r"""Build every split's GPT indices into the cache ahead of training (Megatron's
``prepare_cache.py``), then print what each split holds.

    python tools/build_index.py --config=configs/weighted_blend.py \
        --config.sequence_length=2048 [--dry_run]
    python tools/build_index.py --config=configs/single_corpus.py \
        --data_path="0.3 /a/prefix 0.7 /b/prefix" --split=98,2,0

Megatron's data flags (``--data_path``, ``--split``, ``--train_data_path``,
``--valid_data_path``, ``--test_data_path``, ``--data_args_path``,
``--per_split_data_args_path``) and ``--train_samples`` / ``--valid_samples`` /
``--test_samples`` override the config: a data path flag replaces the config's whole blend
(and its split, unless ``--split`` is given too); ``--split`` alone splits the config's
own data. ``--dry_run`` prints the tables a build prints (samples requested and built,
epochs, tokens of every dataset), computed from the .idx files without building anything;
only the realized blend shares need a build. A bad config exits with status 1 and a one-line
``error:`` message.
"""

from __future__ import annotations

import sys
import textwrap
import time
from dataclasses import dataclass

import numpy as np
import tool_main
from absl import app, flags
from data_config import BLEND_FIELDS, SIZE_FIELDS, to_gpt_config
from ml_collections import config_flags

from megadata_core import DataError, IndexedDataset
from megadata_core.datasets import builder
from megadata_core.indices import num_epochs, samples_in_epochs, splits, tokens_per_epoch

FLAGS = flags.FLAGS
SPLITS = ("train", "valid", "test")
config_flags.DEFINE_config_file("config", None, "An ml_collections data config (configs/*.py).")
for _name in BLEND_FIELDS:
    flags.DEFINE_string(_name, None, f"Megatron's --{_name.replace('_', '-')} (overrides config).")
for _name in SIZE_FIELDS:
    flags.DEFINE_integer(_name, None, f"Samples of the {_name.split('_')[0]} split (overrides).")
flags.DEFINE_bool(
    "dry_run", False, "Print the tables the build would print, from the .idx files alone "
    "(nothing is built or written)."
)
flags.DEFINE_bool("progress", True, "Show a progress bar while building.")


def _config():
    if FLAGS.config is None:
        raise DataError("config: give --config=configs/<name>.py")
    config = FLAGS.config
    overrides = {name: FLAGS[name].value for name in BLEND_FIELDS if FLAGS[name].present}
    if set(overrides) - {"split"}:  # Megatron's data paths replace the config's whole blend
        for name in BLEND_FIELDS:
            config[name] = overrides.get(name)
    elif overrides:  # --split alone splits the config's own data
        config.split = overrides["split"]
    for name in SIZE_FIELDS:
        if FLAGS[name].present:
            config[name] = FLAGS[name].value
    return to_gpt_config(config)


@dataclass
class Row:
    """One member dataset of a split: what was asked of it and what it holds."""

    prefix: str
    documents: int
    weight: float | None  # normalized blend weight, None outside a blend
    requested: int | None  # samples asked of it, None = one epoch
    built: int  # samples it holds: whole epochs
    epochs: int
    tokens: int  # epochs x tokens of its documents


@dataclass
class Table:
    """One split: its length and members (``realized`` blend shares after a build)."""

    split: str
    kind: str  # "single", "blend", or "none" (the split is not built)
    samples: int
    rows: list[Row]
    realized: list[float] | None = None


def _normalized(weights) -> list[float]:
    total = float(sum(float(weight) for weight in weights))
    return [float(weight) / total for weight in weights]


def _planned_row(job, indexed, config) -> Row:
    """A member's row from the plan and its .idx alone (nothing is built), by the rules
    GPTDataset builds with."""
    documents = splits.document_ranges([job.bookend], len(indexed))[0]
    lengths = np.asarray(indexed.sequence_lengths)
    tokens = int(lengths[documents.start : documents.stop].sum(dtype=np.int64))
    if len(documents) == 0 or tokens == 0:
        if len(documents) == 0 and job.num_samples == 0:
            return Row(indexed.path_prefix, 0, None, 0, 0, 0, 0)
        if len(documents) == 0:
            raise DataError(f"indices: no documents in the {job.split} split")
        raise DataError(
            f"indices: the {len(documents)} documents of the {job.split} split hold no tokens"
        )
    extra = int(config.add_extra_token_to_sequence)
    drop_last = config.drop_last_partial_validation_sequence if job.split == "valid" else True
    epochs = num_epochs(tokens, config.sequence_length, job.num_samples, extra)
    built = samples_in_epochs(epochs, tokens, config.sequence_length, extra, drop_last)
    return Row(
        indexed.path_prefix, len(documents), None, job.num_samples, built, epochs,
        tokens * epochs,
    )


def _planned_tables(recipes, config) -> list[Table]:
    """The tables a build of ``recipes`` prints, from the corpora's .idx files only."""
    opened: dict[str, IndexedDataset] = {}
    tables: list[Table] = []
    for split, recipe in zip(SPLITS, recipes):
        if recipe is None:
            tables.append(Table(split, "none", 0, []))
            continue
        rows = []
        for job in recipe.jobs:
            if job.prefix not in opened:
                opened[job.prefix] = IndexedDataset(job.prefix)
            rows.append(_planned_row(job, opened[job.prefix], config))
        if recipe.kind == "single":
            tables.append(Table(split, "single", rows[0].built, rows))
        elif recipe.kind == "list":
            tables.extend(
                Table(f"{split}[{number}]", "single", row.built, [row])
                for number, row in enumerate(rows)
            )
        else:
            weights = recipe.weights
            size = recipe.size
            if weights is None:  # weighted by the members' lengths, capped by their sum
                weights = [row.built for row in rows]
                total = sum(weights)
                size = total if size is None else min(size, total)
            for row, weight in zip(rows, _normalized(weights)):
                row.weight = weight
            tables.append(Table(split, "blend", size, rows))
    return tables


def _built_row(dataset, weight: float | None = None) -> Row:
    """A member's row from the built GPTDataset."""
    documents = len(dataset.indices)
    lengths = dataset.indexed.sequence_lengths
    epochs = len(dataset.document_index) // max(1, documents)
    tokens = tokens_per_epoch(lengths, dataset.indices) * epochs if documents else 0
    return Row(
        dataset.indexed.path_prefix, documents, weight, dataset.num_samples, len(dataset),
        epochs, tokens,
    )


def _built_tables(datasets) -> list[Table]:
    tables: list[Table] = []
    for split, dataset in zip(SPLITS, datasets):
        if dataset is None:
            tables.append(Table(split, "none", 0, []))
        elif isinstance(dataset, list):  # multiple validation sets
            tables.extend(
                Table(f"{split}[{number}]", "single", len(member), [_built_row(member)])
                for number, member in enumerate(dataset)
            )
        elif hasattr(dataset, "datasets"):
            members = dataset.datasets
            rows = [
                _built_row(member, weight)
                for member, weight in zip(members, _normalized(dataset.weights))
            ]
            counts = np.bincount(np.asarray(dataset.dataset_index), minlength=len(members))
            realized = (counts / max(1, counts.sum())).tolist()
            tables.append(Table(split, "blend", len(dataset), rows, realized))
        else:
            tables.append(Table(split, "single", len(dataset), [_built_row(dataset)]))
    return tables


def _count(samples: int | None) -> str:
    return "1 epoch" if samples is None else f"{samples:,}"


def _print_tables(tables: list[Table], sizes, config) -> None:
    requested = dict(zip(SPLITS, sizes))
    for table in tables:
        if table.kind == "none":
            print(f"\n{table.split}: not built")
            continue
        asked = requested[table.split.split("[")[0]]
        what = "a blend of" if table.kind == "blend" else "from"
        print(
            f"\n{table.split}: {_count(asked)} samples requested, {table.samples:,} built, "
            f"{what} {len(table.rows)} dataset(s)"
        )
        print(
            f"  {'prefix':<40} {'documents':>10} {'weight':>7} {'requested':>11} "
            f"{'built':>11} {'epochs':>6} {'tokens':>15}"
        )
        for row in table.rows:
            weight = "-" if row.weight is None else f"{row.weight:.4f}"
            print(
                f"  {row.prefix[-40:]:<40} {row.documents:>10,} {weight:>7} "
                f"{_count(row.requested):>11} {row.built:>11,} {row.epochs:>6} "
                f"{row.tokens:>15,}"
            )
        if table.realized is not None:
            shares = " ".join(f"{share:.4f}" for share in table.realized)
            print(f"  realized shares of the {table.samples:,} blended samples: {shares}")
    extra = int(config.add_extra_token_to_sequence)
    length = config.sequence_length
    notes = (
        "requested: samples asked of a dataset. A weighted blend of N samples asks dataset j "
        f"for ceil(ceil(N * w_j) * {1 + config.mid_level_dataset_surplus:g}) (1 + "
        "mid_level_dataset_surplus) samples and holds sum_j ceil(N * w_j) samples, which can "
        "exceed N; an unweighted blend asks one epoch of each (Megatron's "
        "BlendedMegatronDatasetBuilder).",
        "built: a dataset holds whole epochs: the least E with E * tokens >= requested * "
        f"{length}{f' + {extra}' if extra else ''}, that is (E * tokens"
        f"{f' - {extra}' if extra else ''}) // {length} samples (Megatron's GPTDataset); a "
        "blend reads only the samples it needs. tokens: E times the documents' tokens.",
    )
    print()
    for note in notes:
        print(textwrap.fill(note, width=92, subsequent_indent="  "))


def run() -> int:
    config, sizes, extras = _config()
    if extras["mock"]:
        recipes = None
    elif config.blend is None and config.blend_per_split is None:
        raise DataError(
            "data_path: the config names no data (data_path, train_data_path, ... or mock)"
        )
    elif config.blend is not None:
        recipes = builder.plan_blend(config, sizes)
    else:
        recipes = builder.plan_blend_per_split(config, sizes)
    if FLAGS.dry_run:
        if recipes is None:
            print("mock data: nothing to plan")
        else:
            print(f"dry run: nothing built; cache: {config.path_to_cache}")
            _print_tables(_planned_tables(recipes, config), sizes, config)
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
    _print_tables(_built_tables(datasets), sizes, config)
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
