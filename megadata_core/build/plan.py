"""The plan of ``build_datasets``: which GPTDatasets to build and how each split is made
of them, from the config and the sizes alone (no file is read here).

:func:`plan_build` (with ``_plan_blend`` for ``config.blend`` + ``config.split`` and
``_plan_blend_per_split``) returns one :class:`Recipe` (or None) per split, as
megatron-core 0.16.1's ``BlendedMegatronDatasetBuilder._build_blended_dataset_splits``
decides: a single prefix
without weights is the GPTDataset itself; a weighted blend asks dataset j for
``ceil(ceil(size * w_j) * (1 + surplus))`` samples and holds ``sum_j ceil(size * w_j)``;
an unweighted blend builds one epoch of every dataset.

How large each member is, from its corpus's lengths alone (nothing built:
:func:`member_size`, :func:`index_entries`): the builder asks it to choose where a
member's index is built (memory or the cache); a tool that prints a build's plan
(``build_index --dry_run``) asks it for every member's documents, tokens, epochs and
samples. Both follow the rules the index build follows (the packing mode's ``size``),
with its errors.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple, TypeVar

import numpy as np

from megadata_core.datasets import gpt_arrays
from megadata_core.datasets.config import SPLIT_NAMES, GPTDataConfig, schedule_arrays
from megadata_core.errors import DataError
from megadata_core.indices import num_epochs, splits

_VALID = SPLIT_NAMES.index("valid")
_WHOLE = (0.0, 1.0)  # a whole corpus (blend_per_split)
Sizes = tuple[int | None, int | None, int | None]  # samples per split: train, valid, test
_Matrix = Sequence[tuple[float, float] | None]  # (begin, end) fractions per split
_T = TypeVar("_T")


class Job(NamedTuple):
    """One GPTDataset to build: the documents ``bookend`` of ``prefix`` for ``split``;
    ``epoch`` > 0: a blend schedule's later pass, shuffled with its own seed
    (:func:`megadata_core.indices.schedule.epoch_seed`). (A named tuple: a blend of
    1,000 prefixes makes and hashes thousands of them.)"""

    prefix: str
    split: str
    bookend: tuple[float, float]
    num_samples: int | None
    epoch: int = 0


@dataclass
class Recipe:
    """How one split is made from built GPTDatasets.

    ``kind``: "single" (``jobs[0]`` itself), "list" (the datasets as a list), "blend"
    (a BlendedDataset with ``weights`` and ``size``; weights None = by dataset lengths,
    then ``size`` is the cap, None for exhaustive) or "schedule" (a
    ScheduledBlendedDataset of ``size`` samples over the config's ``blend_schedule``,
    ``jobs`` the first epoch of every prefix, in the schedule's order).
    """

    kind: str
    jobs: list[Job]
    field: str
    weights: list[float] | None = None
    size: int | None = None


def check_sizes(sizes: object) -> Sizes:
    """``sizes`` as a (train, valid, test) tuple of ints >= 0 or None."""
    if isinstance(sizes, (str, bytes)) or not isinstance(sizes, Sequence):
        raise DataError(f"sizes: {sizes!r} is not a sequence of 3 sample counts")
    if len(sizes) != len(SPLIT_NAMES):
        raise DataError(f"sizes: {len(sizes)} entries ({sizes!r}), expected one per split "
                        f"{SPLIT_NAMES}")
    checked = []
    for name, size in zip(SPLIT_NAMES, sizes):
        if size is not None:
            if isinstance(size, (bool, np.bool_)) or not isinstance(size, (int, np.integer)):
                raise DataError(f"sizes[{name}]: {size!r} is not an integer or None")
            if size < 0:
                raise DataError(f"sizes[{name}]: {size} must be >= 0")
            size = int(size)
        checked.append(size)
    return tuple(checked)


def _needed(value: _T | None, field: str) -> _T:
    """A config field that the plan at hand needs (the config's checks ensure it)."""
    if value is None:
        raise DataError(f"{field}: None, but this build plan needs it")
    return value


def _weighted_size_error(field: str, name: str) -> DataError:
    return DataError(
        f"sizes[{name}]: None, but {field} has weights. Megatron apportions a weighted blend "
        f"as ceil(size * weight) samples per dataset, so it needs a size (it raises 'Using "
        f"client-specified weights requires client-specified size'); give a size, or drop "
        f"the weights to blend one epoch of every dataset in proportion to its length"
    )


def _weighted_blend(
    field: str,
    prefixes: Sequence[str],
    weights: list[float],
    matrix: _Matrix,
    sizes: Sequence[int | None],
    surplus: float,
) -> list[Recipe | None]:
    """Recipes of the splits of a weighted blend (every split in ``matrix`` not None)."""
    for bookend, size, name in zip(matrix, sizes, SPLIT_NAMES):
        if bookend is not None and size is None:
            raise _weighted_size_error(field, name)
    targets = splits.samples_per_dataset(weights, sizes)
    buffers = splits.samples_per_dataset(weights, sizes, surplus)
    recipes: list[Recipe | None] = []
    for s, (bookend, name) in enumerate(zip(matrix, SPLIT_NAMES)):
        if bookend is None:
            recipes.append(None)
            continue
        jobs = [Job(p, name, bookend, buffer[s]) for p, buffer in zip(prefixes, buffers)]
        size = sum(target[s] or 0 for target in targets)  # (all ints: sizes[s] is given)
        recipes.append(Recipe("blend", jobs, field, weights, size))
    return recipes


def _plan_blend(config: GPTDataConfig, sizes: Sizes) -> list[Recipe | None]:
    """Recipes of the three splits of ``config.blend`` with ``config.split``."""
    prefixes, weights = _needed(config.blend, "blend")
    matrix = _needed(config.split_matrix, "split")
    if weights is None:
        if len(prefixes) == 1:
            return [
                None if bookend is None else Recipe(
                    "single", [Job(prefixes[0], name, bookend, size)], "blend"
                )
                for bookend, name, size in zip(matrix, SPLIT_NAMES, sizes)
            ]
        return [
            None if bookend is None else Recipe(
                "blend", [Job(p, name, bookend, None) for p in prefixes], "blend", None, size
            )
            for bookend, name, size in zip(matrix, SPLIT_NAMES, sizes)
        ]
    weights = splits.normalize_weights(weights, "blend weights")
    return _weighted_blend(
        "blend", prefixes, weights, matrix, sizes, config.mid_level_dataset_surplus
    )


def _plan_blend_per_split(config: GPTDataConfig, sizes: Sizes) -> list[Recipe | None]:
    """Recipes of ``config.blend_per_split``: each split over whole corpora."""
    recipes: list[Recipe | None] = []
    per_split = _needed(config.blend_per_split, "blend_per_split")
    for s, (blend, name, size) in enumerate(zip(per_split, SPLIT_NAMES, sizes)):
        field = f"blend_per_split[{name}]"
        if blend is None:
            recipes.append(None)
            continue
        prefixes, weights = blend
        if len(prefixes) == 1:
            recipes.append(Recipe("single", [Job(prefixes[0], name, _WHOLE, size)], field))
        elif config.multiple_validation_sets and s == _VALID:
            if config.full_validation and size is not None:
                raise DataError(
                    f"sizes[valid]: {size}, but full_validation with multiple_validation_sets "
                    "builds one full epoch of every validation set: give None"
                )
            recipes.append(Recipe("list", [Job(p, name, _WHOLE, size) for p in prefixes], field))
        elif weights is None:
            jobs = [Job(p, name, _WHOLE, None) for p in prefixes]
            recipes.append(Recipe("blend", jobs, field, None, size))
        else:
            weights = splits.normalize_weights(weights, f"{field} weights")
            spoof_matrix = [_WHOLE if k == s else None for k in range(len(SPLIT_NAMES))]
            spoof_sizes = [size if k == s else 0 for k in range(len(SPLIT_NAMES))]
            recipes.append(
                _weighted_blend(
                    field, prefixes, weights, spoof_matrix, spoof_sizes,
                    config.mid_level_dataset_surplus,
                )[s]
            )
    return recipes


def _plan_schedule(config: GPTDataConfig, sizes: Sizes) -> list[Recipe | None]:
    """Recipes of ``config.blend_schedule`` with ``config.split``: every split a schedule
    over the same prefixes (the stages' starts in that split's samples)."""
    prefixes = schedule_arrays(_needed(config.blend_schedule, "blend_schedule"))[0]
    recipes: list[Recipe | None] = []
    for bookend, name, size in zip(_needed(config.split_matrix, "split"), SPLIT_NAMES, sizes):
        if bookend is None:
            recipes.append(None)
            continue
        if size is None:
            raise DataError(
                f"sizes[{name}]: None, but blend_schedule needs the samples of every split "
                "it builds (its stages are positions in them)"
            )
        jobs = [Job(prefix, name, bookend, None) for prefix in prefixes]
        recipes.append(Recipe("schedule", jobs, "blend_schedule", None, size))
    return recipes


def plan_build(config: GPTDataConfig, sizes: Sizes) -> list[Recipe | None]:
    """The recipes of the three splits of a config with a blend (``blend``,
    ``blend_per_split`` or ``blend_schedule``). Megatron's own config classes, which
    the drop-in plans with too, have no ``blend_schedule``."""
    if getattr(config, "blend_schedule", None) is not None:
        return _plan_schedule(config, sizes)
    if config.blend is not None:
        return _plan_blend(config, sizes)
    return _plan_blend_per_split(config, sizes)


def distinct_jobs(recipes: list[Recipe | None]) -> tuple[list[Job], dict[str, str]]:
    """The distinct jobs of the recipes, in order, and prefix -> the config field that
    first names it (in the same order: every prefix once)."""
    jobs = list(dict.fromkeys(job for recipe in recipes if recipe for job in recipe.jobs))
    fields: dict[str, str] = {}
    for recipe in recipes:
        if recipe is not None:
            for job in recipe.jobs:
                fields.setdefault(job.prefix, recipe.field)
    return jobs, fields


@dataclass(frozen=True)
class MemberSize:
    """A member's ``documents``, ``tokens`` per epoch, ``epochs`` and ``samples`` (what
    its GPTDataset will hold: whole epochs, so at least the samples asked for)."""

    documents: int
    tokens: int
    epochs: int
    samples: int


def member_documents(job: Job, count: int) -> range:
    """The documents of a job's split of a corpus of ``count`` documents."""
    return splits.document_range(job.bookend, count)


def _tokens(lengths: np.ndarray, documents: range) -> int:
    return int(lengths[documents.start : documents.stop].sum(dtype=np.int64))


def index_entries(indexed, job: Job, config, at_least: int | None = None) -> int:
    """The size of a job's index, ``max(document-index entries, samples)`` (documents x
    epochs; epochs x tokens / S). With ``at_least``, a split of that many documents or
    more answers its document count without summing its lengths (a warm start of a
    large corpus reads no array whole; an empty split then fails as it would in memory,
    in the index build)."""
    documents = member_documents(job, len(indexed))
    if at_least is not None and len(documents) >= at_least:
        return len(documents)
    tokens = _tokens(np.asarray(indexed.sequence_lengths), documents)
    if tokens == 0:
        return 0  # the GPTDataset raises, naming the split
    extra = int(config.add_extra_token_to_sequence)
    epochs = num_epochs(tokens, config.sequence_length, job.num_samples, extra)
    return max(len(documents) * epochs, epochs * tokens // config.sequence_length)


def in_memory_jobs(corpora, jobs: list[Job], config, below: int) -> set[Job]:
    """The jobs whose index has fewer than ``below`` entries (:func:`index_entries`;
    ``corpora``: prefix -> corpus)."""
    return {job for job in jobs if index_entries(corpora[job.prefix], job, config, below) < below}


def member_size(lengths: np.ndarray, job: Job, config) -> MemberSize:
    """What a job's GPTDataset will hold, from the corpus's ``lengths`` (int [N]).

    Raises:
        DataError: a split without documents that is asked for samples, or whose
            documents hold no tokens (the index build's errors).
    """
    lengths = np.asarray(lengths)
    documents = member_documents(job, len(lengths))
    tokens = _tokens(lengths, documents)
    if len(documents) == 0 and job.num_samples == 0:
        return MemberSize(0, 0, 0, 0)
    if len(documents) == 0:
        raise gpt_arrays.no_documents(job.split)
    if tokens == 0:
        raise gpt_arrays.no_tokens(job.split, len(documents))
    epochs, samples = config.packing_mode.size(
        lengths[documents.start : documents.stop], tokens, config, job.num_samples,
        gpt_arrays.drops_last(config, job.split),
    )
    return MemberSize(len(documents), tokens, epochs, samples)
