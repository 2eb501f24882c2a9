"""The tables a build of a config's splits prints: per split, its samples and members
(documents, weight, samples requested and built, epochs, tokens), and a blend's realized
shares. From the plan and the .idx files alone (:func:`planned_tables`, nothing built) or
from built datasets (:func:`built_tables`).
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass

import numpy as np

import megadata_core as mdc
from megadata_cli import progress_bars
from megadata_core import DataError, IndexedDataset
from megadata_core.build import member_size, plan_build
from megadata_core.datasets.config import schedule_arrays
from megadata_core.indices import tokens_per_epoch
from megadata_core.indices.schedule import stage_counts

SPLITS = ("train", "valid", "test")


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
    kind: str  # "single", "blend", "schedule", or "none" (the split is not built)
    samples: int
    rows: list[Row]
    realized: list[float] | None = None


def _normalized(weights) -> list[float]:
    total = float(sum(float(weight) for weight in weights))
    return [float(weight) / total for weight in weights]


def _raw_row(name: str, requested: int | None, built: int, weight: float | None = None) -> Row:
    """A raw-shards member's row: what it holds is known once its shards are tokenized
    (documents, epochs and tokens print as ``?``)."""
    return Row(name, -1, weight, requested, built, -1, -1)


def _planned_row(job, indexed, config) -> Row:
    """A member's row from the plan and its .idx alone (nothing is built): the builder's
    own sizing (:func:`megadata_core.build.member_size`)."""
    if isinstance(job.prefix, mdc.RawShards):
        return _raw_row(str(job.prefix), job.num_samples, job.num_samples or 0)
    size = member_size(indexed.sequence_lengths, job, config)
    return Row(
        indexed.path_prefix, size.documents, None, job.num_samples, size.samples,
        size.epochs, size.tokens * size.epochs,
    )


def planned_tables(recipes, config) -> list[Table]:
    """The tables a build of ``recipes`` prints, from the corpora's .idx files only."""
    opened: dict[str, IndexedDataset] = {}
    tables: list[Table] = []
    for split, recipe in zip(SPLITS, recipes):
        if recipe is None:
            tables.append(Table(split, "none", 0, []))
            continue
        rows = []
        for job in recipe.jobs:
            if job.prefix not in opened and not isinstance(job.prefix, mdc.RawShards):
                opened[job.prefix] = IndexedDataset(job.prefix)
            rows.append(_planned_row(job, opened.get(job.prefix), config))
        if recipe.kind == "schedule":
            tables.append(_planned_schedule(recipe, rows, config))
        elif recipe.kind == "single":
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


def _planned_schedule(recipe, rows: list[Row], config) -> Table:
    """A schedule's table from one-pass rows: each member asked for what the stages read
    of it, built in as many passes as that takes (each one epoch, or the fewest epochs
    that hold a sample)."""
    _, starts, weights = schedule_arrays(config.blend_schedule)
    reads = stage_counts(starts, weights, recipe.size, config.blend_order_mode).sum(axis=0)
    for row, count in zip(rows, reads.tolist()):
        if row.documents < 0:  # a raw member: one dataset of the reads
            row.requested, row.built, row.weight = count, count, count / max(1, recipe.size)
            continue
        if row.built == 0 and count:
            raise DataError(f"blend_schedule: the {recipe.jobs[0].split} split reads "
                            f"{count} samples of {row.prefix!r}, whose split holds none")
        passes = max(1, -(-count // max(row.built, 1)))
        row.requested, row.built = count, row.built * passes
        row.epochs, row.tokens = row.epochs * passes, row.tokens * passes
        row.weight = count / max(1, recipe.size)
    return Table(recipe.jobs[0].split, "schedule", recipe.size, rows)


def _built_row(dataset, weight: float | None = None) -> Row:
    """A member's row from the built GPTDataset (or EpochChain, or raw member)."""
    if isinstance(dataset, mdc.RawShardsDataset):
        return _raw_row(str(dataset.raw), dataset.num_samples, len(dataset), weight)
    documents = len(dataset.indices)
    lengths = dataset.indexed.sequence_lengths
    epochs = dataset.epochs
    tokens = tokens_per_epoch(lengths, dataset.indices) * epochs if documents else 0
    return Row(
        dataset.indexed.path_prefix, documents, weight, getattr(dataset, "num_samples", None),
        len(dataset), epochs, tokens,
    )


def built_tables(datasets) -> list[Table]:
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
            scheduled = isinstance(dataset, mdc.ScheduledBlendedDataset)
            if scheduled:  # a schedule asks each member for what its stages read
                for row, count in zip(rows, counts.tolist()):
                    row.requested = count
            kind = "schedule" if scheduled else "blend"
            tables.append(Table(split, kind, len(dataset), rows, realized))
        else:
            tables.append(Table(split, "single", len(dataset), [_built_row(dataset)]))
    return tables


def _known(value: int) -> str:
    return "?" if value < 0 else f"{value:,}"


def _count(samples: int | None) -> str:
    return "1 epoch" if samples is None else f"{samples:,}"


def print_tables(tables: list[Table], sizes, config) -> None:
    requested = dict(zip(SPLITS, sizes))
    for table in tables:
        if table.kind == "none":
            print(f"\n{table.split}: not built")
            continue
        asked = requested[table.split.split("[")[0]]
        what = {"blend": "a blend of", "schedule": "a blend schedule of"}.get(
            table.kind, "from"
        )
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
                f"  {row.prefix[-40:]:<40} {_known(row.documents):>10} {weight:>7} "
                f"{_count(row.requested):>11} {row.built:>11,} {_known(row.epochs):>6} "
                f"{_known(row.tokens):>15}"
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
    if config.blend_schedule is not None:
        notes = (
            "weight: a dataset's share of the split over all stages. requested: the samples "
            "the stages read of it (each dataset on one cursor through its own order). built: "
            "passes of one epoch each (or of the fewest epochs that hold a sample), every "
            "pass shuffled with its own seed, as many as the reads need.",
        ) + notes[1:]
    if any(row.documents < 0 for table in tables for row in table.rows):
        notes += ("raw: a member of raw text shards holds the samples asked of it; its "
                  "documents, epochs and tokens (?) are known once its shards are tokenized "
                  "(megadata-inspect corpus on its cache directory).",)
    if config.packing_mode.packed:
        notes = notes[:1] + (
            "built: a dataset holds whole epochs of B samples, B = the bins of "
            f"{length + extra} tokens that best-fit-decreasing packs the documents into "
            f"(packing={config.packing}): the least E with E * B >= requested, E * B samples; a "
            "blend reads only the samples it needs. tokens: E times the documents' tokens.",
        )
    print()
    for note in notes:
        print(textwrap.fill(note, width=92, subsequent_indent="  "))


def plan_splits(config, sizes, extras) -> list | None:
    """The builder's recipes for the config's splits (None for mock data).

    Raises:
        DataError: the config names no data.
    """
    if extras["mock"]:
        return None
    if config.blend is None and config.blend_per_split is None and config.blend_schedule is None:
        raise DataError(
            "data_path: the config names no data (data_path, train_data_path, "
            "blend_schedule, ... or mock)"
        )
    return plan_build(config, sizes)


def build_splits(config, sizes, extras, recipes, progress: bool) -> list:
    """``build_datasets`` of the config, with a bar of the member datasets built (see
    :mod:`progress_bars`)."""
    total = len({job for recipe in recipes or [] if recipe for job in recipe.jobs})
    if config.blend_schedule is not None:
        total = None  # the passes a schedule needs are known once the first ones are built
    with progress_bars.bar(
        progress and recipes is not None, total=total, unit="dataset", desc="building indices"
    ) as bar:
        return mdc.build_datasets(
            config, sizes, mock=extras["mock"], vocab_size=extras["vocab_size"],
            progress=bar.update,
        )
