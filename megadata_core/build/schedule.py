"""The splits of a ``blend_schedule``: every prefix's passes chained, one schedule each.

For each split (:func:`~megadata_core.build.plan.plan_schedule`): the first epoch of
every prefix is built (one pass, its own order whatever the schedule reads); the
schedule's index arrays (:func:`~megadata_core.datasets.scheduled_blend.schedule_index`,
cached) say how many samples it reads of each prefix; a prefix read past its epoch
gets the passes it needs, each shuffled with its own seed (:class:`Job` ``epoch``), built
like the first ones (small ones in memory, the others through the cache, in one pool);
each prefix's passes become an :class:`EpochChain`, and the chains the split's
:class:`ScheduledBlendedDataset`.
"""

from __future__ import annotations

import numpy as np

from megadata_core.build.corpora import Corpora
from megadata_core.build.members import Members
from megadata_core.build.plan import Recipe
from megadata_core.datasets.blend_schedule import schedule_arrays
from megadata_core.datasets.epoch_chain import EpochChain
from megadata_core.datasets.scheduled_blend import ScheduledBlendedDataset, schedule_index
from megadata_core.errors import DataError


def _epochs(counts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """int64 [n]: the passes each prefix needs for ``counts`` samples (at least one)."""
    return np.maximum(1, -(-counts // np.maximum(lengths, 1)))


def _size(recipe: Recipe) -> int:
    """A schedule recipe's samples (:func:`~megadata_core.build.plan.plan_schedule`
    gives every one a size)."""
    if recipe.size is None:
        raise DataError(f"sizes[{recipe.jobs[0].split}]: None, but blend_schedule needs it")
    return recipe.size


def build_schedule(
    config, recipes: list[Recipe | None], corpora: Corpora, members: Members
) -> list:
    """``[train, valid, test]`` of a config with a ``blend_schedule``: each None or a
    :class:`ScheduledBlendedDataset`.

    A prefix's pass is one epoch of its split, or, when one epoch holds no whole sample
    (a split of fewer tokens than a sample), the fewest epochs that hold one (Megatron's
    GPTDataset asked for 1 sample): its passes then never come up empty.
    """
    _, starts, weights = schedule_arrays(config.blend_schedule)
    corpora.open(validate=True)
    built: dict = {}

    def build(jobs: list) -> None:
        jobs = [job for job in dict.fromkeys(jobs) if job not in built]
        made, _ = members.build(jobs, members.in_memory(jobs))
        built.update(made)

    def lengths(units: list) -> np.ndarray:
        return np.array([len(built[unit]) for unit in units], dtype=np.int64)

    build([job for recipe in recipes if recipe for job in recipe.jobs])
    indices, units = {}, {}  # per split: the schedule's arrays, each prefix's pass
    for number, recipe in enumerate(recipes):
        if recipe is not None:
            arrays = indices[number] = schedule_index(
                config, recipe.jobs[0].split, starts, weights, _size(recipe)
            )
            reads = np.asarray(arrays["dataset_counts"]).tolist()
            units[number] = [
                job._replace(num_samples=1) if count and not len(built[job]) else job
                for job, count in zip(recipe.jobs, reads)
            ]
    build([unit for split_units in units.values() for unit in split_units])
    epochs = {
        number: _epochs(np.asarray(indices[number]["dataset_counts"], dtype=np.int64),
                        lengths(split_units)).tolist()
        for number, split_units in units.items()
    }
    build([
        unit._replace(epoch=epoch)
        for number, split_units in units.items()
        for unit, count in zip(split_units, epochs[number]) for epoch in range(1, count)
    ])
    return [
        None if recipe is None else ScheduledBlendedDataset(
            [
                EpochChain([built[unit._replace(epoch=epoch)] for epoch in range(count)])
                for unit, count in zip(units[number], epochs[number])
            ],
            starts, weights, _size(recipe), config, arrays=indices[number],
        )
        for number, recipe in enumerate(recipes)
    ]
